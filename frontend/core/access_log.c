/*
 * access_log: see access_log.h. Built for the request path: the line is assembled with memcpy
 * and integer formatting, not snprintf (which cost more than half of the line's budget under
 * callgrind), the time stamp's text is kept per second, and the line is copied into the rlog
 * buffer under its mutex; the disk is the writer thread's.
 */
#include "access_log.h"

#include <string.h>
#include <sys/time.h>
#include <time.h>

#include "core.h"
#include "log.h"
#include "rlog.h"
#include "util.h"

#define LINE_MAX_BYTES 1024

struct line {
    char b[LINE_MAX_BYTES];
    size_t n;
};

static void put(struct line *l, const char *s, size_t n)
{
    if (n > sizeof(l->b) - 1 - l->n) /* keep one byte for the newline */
        n = sizeof(l->b) - 1 - l->n;
    memcpy(l->b + l->n, s, n);
    l->n += n;
}

/* What a client chose (a target, a request id): escaped, it cannot forge a line. */
static void puts_(struct line *l, const char *s)
{
    l->n += log_escape(l->b + l->n, sizeof(l->b) - 1 - l->n, s, strlen(s));
}

static void put_u64(struct line *l, uint64_t v, int min_digits)
{
    char t[24];
    int k = 0;
    do {
        t[k++] = (char)('0' + v % 10);
        v /= 10;
    } while (v || k < min_digits);
    char r[24];
    for (int i = 0; i < k; i++)
        r[i] = t[k - 1 - i];
    put(l, r, (size_t)k);
}

int access_log_on(void)
{
    return srv->access_log != NULL;
}

int64_t access_log_clock_us(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (int64_t)tv.tv_sec * 1000000 + tv.tv_usec;
}

void access_log_line(const char *client, const char *method, const char *target, const char *proto,
                     const char *status, long long bytes, int64_t start_us, const char *rid)
{
    static time_t stamp_sec = -1;
    static char stamp[32];
    if (!srv->access_log)
        return;
    int64_t now = access_log_clock_us();
    time_t sec = (time_t)(now / 1000000);
    if (sec != stamp_sec) {
        struct tm tm;
        gmtime_r(&sec, &tm);
        strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S.", &tm);
        stamp_sec = sec;
    }
    struct line l;
    l.n = 0;
    puts_(&l, stamp);
    put_u64(&l, (uint64_t)(now % 1000000) / 1000, 3);
    put(&l, "Z ", 2);
    puts_(&l, client && *client ? client : "-");
    put(&l, " \"", 2);
    puts_(&l, method);
    put(&l, " ", 1);
    puts_(&l, target);
    put(&l, " ", 1);
    puts_(&l, proto);
    put(&l, "\" ", 2);
    puts_(&l, status);
    put(&l, " ", 1);
    if (bytes >= 0)
        put_u64(&l, (uint64_t)bytes, 1);
    else
        put(&l, "-", 1);
    put(&l, " ", 1);
    int64_t us = now > start_us ? now - start_us : 0;
    put_u64(&l, (uint64_t)us / 1000, 1);
    put(&l, ".", 1);
    put_u64(&l, (uint64_t)us % 1000, 3);
    put(&l, "ms ", 3);
    puts_(&l, rid && *rid ? rid : "-");
    l.b[l.n++] = '\n';
    rlog_write(srv->access_log, l.b, l.n);
}
