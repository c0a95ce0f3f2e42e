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

void log_write(int level, const char *req_id, const char *fmt, ...)
{
    char line[2048];
    struct timeval tv;
    struct tm tm;
    gettimeofday(&tv, NULL);
    localtime_r(&tv.tv_sec, &tm);
    int n = snprintf(line, sizeof(line), "%d:%c %04d-%02d-%02dT%02d:%02d:%02d.%03ld %s [%s] ",
                     (int)getpid(), log_role, tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                     tm.tm_hour, tm.tm_min, tm.tm_sec, (long)(tv.tv_usec / 1000),
                     level_names[level & 3], req_id ? req_id : "-");
    va_list ap;
    va_start(ap, fmt);
    if (n > 0 && (size_t)n < sizeof(line))
        n += vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n >= sizeof(line) - 1)
        n = (int)sizeof(line) - 2;
    line[n++] = '\n';
    fwrite(line, 1, (size_t)n, log_out ? log_out : stderr);
    fflush(log_out ? log_out : stderr);
}
