/* log: see log.h. The whole line is formatted into a stack buffer and written with one call,
 * so lines from the worker threads of a process never interleave. */
#include "log.h"

#include <stdarg.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

int log_min_level = LOG_LEVEL_INFO;
static char log_role = 'F';
static FILE *log_out;

static const char *const level_names[] = {"DEBUG", "INFO", "WARN", "ERROR"};

void log_init(char role, FILE *out)
{
    log_role = role;
    log_out = out;
}

void log_set_level_name(const char *name)
{
    for (int i = 0; i < 4; i++)
        if (name && !strcasecmp(name, level_names[i]))
            log_min_level = i;
}

size_t log_escape(char *dst, size_t cap, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        int c1 = c == 0xc2 && i + 1 < n && (unsigned char)s[i + 1] >= 0x80 &&
                 (unsigned char)s[i + 1] <= 0x9f;
        if ((c >= 0x20 && c != 0x7f && !c1) || c == '\t') {
            if (o + 1 > cap)
                break;
            dst[o++] = (char)c;
            continue;
        }
        char e[8];
        size_t k = 0;
        if (c == '\r' || c == '\n') {
            e[k++] = '\\';
            e[k++] = c == '\r' ? 'r' : 'n';
        } else {
            int len = c1 ? 2 : 1;
            for (int j = 0; j < len; j++) {
                unsigned char b = (unsigned char)s[i + (size_t)j];
                e[k++] = '\\';
                e[k++] = 'x';
                e[k++] = hex[b >> 4];
                e[k++] = hex[b & 15];
            }
            i += (size_t)(len - 1);
        }
        if (o + k > cap)
            break;
        memcpy(dst + o, e, k);
        o += k;
    }
    return o;
}

void log_write(int level, const char *req_id, const char *fmt, ...)
{
    char raw[2048], line[2048];
    struct timeval tv;
    struct tm tm;
    gettimeofday(&tv, NULL);
    localtime_r(&tv.tv_sec, &tm);
    int n = snprintf(raw, sizeof(raw), "%d:%c %04d-%02d-%02dT%02d:%02d:%02d.%03ld %s [%s] ",
                     (int)getpid(), log_role, tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                     tm.tm_hour, tm.tm_min, tm.tm_sec, (long)(tv.tv_usec / 1000),
                     level_names[level & 3], req_id ? req_id : "-");
    va_list ap;
    va_start(ap, fmt);
    if (n > 0 && (size_t)n < sizeof(raw))
        n += vsnprintf(raw + n, sizeof(raw) - (size_t)n, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n >= sizeof(raw))
        n = (int)sizeof(raw) - 1;
    size_t m = log_escape(line, sizeof(line) - 1, raw, (size_t)n);
    line[m++] = '\n';
    fwrite(line, 1, m, log_out ? log_out : stderr);
    fflush(log_out ? log_out : stderr);
}
