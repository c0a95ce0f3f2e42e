/*
 * sys_metrics: the host's CPU, memory, disk and GPU figures (sys_metrics.h).
 *
 * A sample reads two small /proc files, one statvfs and, per GPU, two NVML calls: well under a
 * millisecond, so it runs on the loop's timer instead of a thread. The CPU figure needs two
 * readings; the first sample uses the counters since boot.
 */
#include "sys_metrics.h"

#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>

#include "nvml.h"

static struct sys_sample last;
static struct event *timer;
static int n_gpus;
static uint64_t prev_total, prev_busy;

int sys_metrics_parse_cpu(const char *text, uint64_t *total, uint64_t *busy)
{
    const char *p = strstr(text, "cpu ");
    if (!p || (p != text && p[-1] != '\n'))
        return -1;
    p += 4;
    /* user nice system idle iowait irq softirq steal (guest time is inside user already) */
    uint64_t v[8] = {0};
    for (int i = 0; i < 8; i++) {
        char *end;
        v[i] = strtoull(p, &end, 10);
        if (end == p)
            break;
        p = end;
    }
    *total = 0;
    for (int i = 0; i < 8; i++)
        *total += v[i];
    *busy = *total - v[3] - v[4];
    return 0;
}

double sys_metrics_cpu_pct(uint64_t total0, uint64_t busy0, uint64_t total1, uint64_t busy1)
{
    if (total1 <= total0 || busy1 < busy0)
        return 0.0;
    double pct = 100.0 * (double)(busy1 - busy0) / (double)(total1 - total0);
    return pct > 100.0 ? 100.0 : pct;
}

/* A "Name:   123 kB" line's value in bytes; 0 if absent. */
static double meminfo(const char *text, const char *name, int *found)
{
    size_t n = strlen(name);
    for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
        if (!strncmp(p, name, n) && p[n] == ':') {
            *found += 1;
            return strtod(p + n + 1, NULL) * 1024.0;
        }
    return 0.0;
}

int sys_metrics_parse_mem(const char *text, double *used_mb, double *avail_mb, double *pct)
{
    int found = 0, extra = 0;
    double total = meminfo(text, "MemTotal", &found);
    double mfree = meminfo(text, "MemFree", &found);
    double avail = meminfo(text, "MemAvailable", &found);
    double buffers = meminfo(text, "Buffers", &extra);
    double cached = meminfo(text, "Cached", &extra) + meminfo(text, "SReclaimable", &extra);
    if (found < 3 || total <= 0)
        return -1;
    double used = total - mfree - buffers - cached;
    if (used < 0)
        used = total - mfree;
    *used_mb = used / (1 << 20);
    *avail_mb = avail / (1 << 20);
    *pct = 100.0 * (total - avail) / total;
    return 0;
}

static int read_file(const char *path, char *buf, size_t n)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t k = fread(buf, 1, n - 1, f);
    fclose(f);
    buf[k] = '\0';
    return 0;
}

static void sample(void)
{
    struct sys_sample s;
    memset(&s, 0, sizeof(s));
    char buf[8192];
    uint64_t total, busy;
    if (read_file("/proc/stat", buf, sizeof(buf)) == 0 &&
        sys_metrics_parse_cpu(buf, &total, &busy) == 0) {
        s.cpu_pct = sys_metrics_cpu_pct(prev_total, prev_busy, total, busy);
        prev_total = total;
        prev_busy = busy;
    }
    if (read_file("/proc/meminfo", buf, sizeof(buf)) == 0)
        sys_metrics_parse_mem(buf, &s.mem_used_mb, &s.mem_avail_mb, &s.mem_pct);
    /* psutil.disk_usage("/"): used from the blocks not free, available from those an
     * unprivileged user may take, percent of used over the two */
    struct statvfs fs;
    if (statvfs("/", &fs) == 0) {
        double bs = (double)fs.f_frsize, gib = (double)(1 << 30);
        double used = (double)(fs.f_blocks - fs.f_bfree) * bs, avail = (double)fs.f_bavail * bs;
        s.disk_ok = 1;
        s.disk_used_gb = used / gib;
        s.disk_avail_gb = avail / gib;
        s.disk_pct = used + avail > 0 ? 100.0 * used / (used + avail) : 0.0;
    }
    s.n_gpu = n_gpus;
    for (int i = 0; i < n_gpus; i++) {
        struct nvml_usage u;
        if (nvml_usage(i, &u) == 0) {
            s.gpu[i].ok = 1;
            s.gpu[i].mem_pct = u.util_mem;
            s.gpu[i].mem_used_mb = (double)(u.mem_used >> 20);
            s.gpu[i].util_pct = u.util_gpu;
        }
    }
    s.valid = 1;
    last = s;
}

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    (void)arg;
    sample();
}

void sys_metrics_start(struct event_base *base, int interval_s, int n_gpu)
{
    n_gpus = n_gpu > GPU_MAX ? GPU_MAX : n_gpu;
    sample();
    timer = event_new(base, -1, EV_PERSIST, on_timer, NULL);
    struct timeval tv = {interval_s > 0 ? interval_s : 60, 0};
    event_add(timer, &tv);
}

void sys_metrics_stop(void)
{
    if (timer)
        event_free(timer);
    timer = NULL;
    memset(&last, 0, sizeof(last));
}

const struct sys_sample *sys_metrics_last(void)
{
    return &last;
}
