/*
 * access_log: see access_log.h. The time stamp's text is kept per second, so a line costs a
 * snprintf and a buffered copy.
 */
#include "access_log.h"

#include <stdio.h>
#include <sys/time.h>
#include <time.h>

#include "core.h"
#include "rlog.h"
#include "util.h"

int access_log_on(void)
{
    return srv->access_log != NULL;
}

void access_log_line(const char *client, const char *method, const char *target, const char *proto,
                     const char *status, long long bytes, int64_t start_us, const char *rid)
{
    static time_t stamp_sec = -1;
    static char stamp[32];
    if (!srv->access_log)
        return;
    struct timeval tv;
    gettimeofday(&tv, NULL);
    if (tv.tv_sec != stamp_sec) {
        struct tm tm;
        gmtime_r(&tv.tv_sec, &tm);
        strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", &tm);
        stamp_sec = tv.tv_sec;
    }
    char size[24];
    if (bytes >= 0)
        snprintf(size, sizeof(size), "%lld", bytes);
    else
        snprintf(size, sizeof(size), "-");
    char line[1024];
    int n =
        snprintf(line, sizeof(line), "%s.%03dZ %s \"%s %s %s\" %s %s %.3fms %s\n", stamp,
                 (int)(tv.tv_usec / 1000), client && *client ? client : "-", method, target, proto,
                 status, size, (double)(ts_now_us() - start_us) / 1000.0, rid && *rid ? rid : "-");
    if (n <= 0)
        return;
    if ((size_t)n >= sizeof(line)) { /* a very long target: cut, but keep the line whole */
        n = (int)sizeof(line) - 1;
        line[n - 1] = '\n';
    }
    rlog_write(srv->access_log, line, (size_t)n);
}
