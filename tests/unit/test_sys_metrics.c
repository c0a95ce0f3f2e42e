/* TorchServe's system metrics as psutil computes them (frontend/core/sys_metrics.c): the CPU's
 * busy share between two /proc/stat readings, memory from /proc/meminfo; and a sample of this
 * host, whose figures must agree with the files they come from. */
#include "../../frontend/core/sys_metrics.c"

#include <event2/event.h>

#include "tap.h"

/* busy = all but idle and iowait; guest time is inside user already */
TEST(cpu)
{
    uint64_t t0, b0, t1, b1;
    CHECK_EQ_INT(sys_metrics_parse_cpu("cpu  100 0 50 800 50 0 0 0 30 0\ncpu0 1 2 3\n", &t0, &b0),
                 0);
    CHECK_EQ_INT((int)t0, 1000);
    CHECK_EQ_INT((int)b0, 150);
    CHECK_EQ_INT(sys_metrics_parse_cpu("cpu  400 0 150 1300 150 0 0 0 90 0\n", &t1, &b1), 0);
    CHECK_EQ_INT((int)t1, 2000);
    CHECK_EQ_INT((int)b1, 550);
    CHECK(sys_metrics_cpu_pct(t0, b0, t1, b1) == 40.0);
    CHECK(sys_metrics_cpu_pct(t1, b1, t1, b1) == 0.0); /* no time passed */
    CHECK_EQ_INT(sys_metrics_parse_cpu("intr 1 2 3\n", &t0, &b0), -1);
    CHECK_EQ_INT(sys_metrics_parse_cpu("xcpu 1 2 3\n", &t0, &b0), -1);
}

/* psutil's virtual_memory(): used = total - free - buffers - (cached + sreclaimable) */
TEST(memory)
{
    const char *m = "MemTotal:        2048000 kB\n"
                    "MemFree:          512000 kB\n"
                    "MemAvailable:    1024000 kB\n"
                    "Buffers:          102400 kB\n"
                    "Cached:           204800 kB\n"
                    "SwapCached:            0 kB\n"
                    "SReclaimable:      51200 kB\n";
    double used, avail, pct;
    CHECK_EQ_INT(sys_metrics_parse_mem(m, &used, &avail, &pct), 0);
    CHECK(used == 1177600.0 / 1024);
    CHECK(avail == 1000.0);
    CHECK(pct == 50.0);
    /* caches larger than what is not free: total - free */
    const char *big = "MemTotal: 1024 kB\nMemFree: 512 kB\nMemAvailable: 768 kB\nCached: 900 kB\n";
    CHECK_EQ_INT(sys_metrics_parse_mem(big, &used, &avail, &pct), 0);
    CHECK(used == 0.5);
    CHECK_EQ_INT(sys_metrics_parse_mem("MemTotal: 1 kB\n", &used, &avail, &pct), -1);
}

/* A sample of this host: no NVML here, so no GPU; the rest within what the files say */
TEST(a_sample_of_this_host)
{
    struct event_base *base = event_base_new();
    sys_metrics_start(base, 60, 0);
    const struct sys_sample *s = sys_metrics_last();
    CHECK_EQ_INT(s->valid, 1);
    CHECK(s->cpu_pct >= 0.0 && s->cpu_pct <= 100.0);
    CHECK(s->mem_pct > 0.0 && s->mem_pct < 100.0);
    CHECK(s->mem_avail_mb > 0.0 && s->mem_used_mb > 0.0);
    struct statvfs fs;
    CHECK_EQ_INT(statvfs("/", &fs), 0);
    CHECK_EQ_INT(s->disk_ok, 1);
    double avail = (double)fs.f_bavail * (double)fs.f_frsize / (1 << 30);
    CHECK(s->disk_avail_gb > avail * 0.9 - 1 && s->disk_avail_gb < avail * 1.1 + 1);
    CHECK(s->disk_pct > 0.0 && s->disk_pct <= 100.0);
    CHECK_EQ_INT(s->n_gpu, 0);
    sys_metrics_stop();
    CHECK_EQ_INT(sys_metrics_last()->valid, 0);
    event_base_free(base);
}

int main(void)
{
    RUN(cpu);
    RUN(memory);
    RUN(a_sample_of_this_host);
    return tap_done();
}
