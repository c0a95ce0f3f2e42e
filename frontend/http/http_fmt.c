/*
 * http_fmt: the bytes of a reply's head, written without vfprintf (see http_fmt.h).
 */
#include "http_fmt.h"

#include <event2/buffer.h>
#include <event2/http_struct.h> /* the request's HTTP version (libevent 2.1 has no getter) */
#include <event2/keyvalq_struct.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

/* a head line we copy ourselves; a longer one goes through vprintf */
#define LINE_MAX_FAST 1024

/* the decimal digits of v (any int) at p; their count */
static size_t put_int(char *p, int v)
{
    char tmp[12];
    unsigned u = v < 0 ? 0u - (unsigned)v : (unsigned)v;
    size_t n = 0;
    do
        tmp[n++] = (char)('0' + u % 10);
    while ((u /= 10) != 0);
    size_t k = 0;
    if (v < 0)
        p[k++] = '-';
    while (n)
        p[k++] = tmp[--n];
    return k;
}

/* "%s: %s\r\n" (evhttp_make_header, each header) */
static int header_line(struct evbuffer *buf, const char *key, const char *val)
{
    size_t kl = strlen(key), vl = strlen(val);
    if (kl + vl + 4 > LINE_MAX_FAST)
        return -2;
    char line[LINE_MAX_FAST];
    memcpy(line, key, kl);
    line[kl] = ':';
    line[kl + 1] = ' ';
    memcpy(line + kl + 2, val, vl);
    memcpy(line + kl + 2 + vl, "\r\n", 2);
    return evbuffer_add(buf, line, kl + vl + 4) == 0 ? (int)(kl + vl + 4) : -1;
}

/* "HTTP/%d.%d %d %s\r\n" (evhttp_make_header_response, the status line) */
static int status_line(struct evbuffer *buf, int major, int minor, int code, const char *reason)
{
    size_t rl = strlen(reason);
    if (rl + 48 > LINE_MAX_FAST)
        return -2;
    char line[LINE_MAX_FAST];
    size_t n = 5;
    memcpy(line, "HTTP/", 5);
    n += put_int(line + n, major);
    line[n++] = '.';
    n += put_int(line + n, minor);
    line[n++] = ' ';
    n += put_int(line + n, code);
    line[n++] = ' ';
    memcpy(line + n, reason, rl);
    n += rl;
    memcpy(line + n, "\r\n", 2);
    n += 2;
    return evbuffer_add(buf, line, n) == 0 ? (int)n : -1;
}

/* libevent's, defined here (see http_fmt.h): the same bytes and result as its own */
int evbuffer_add_printf(struct evbuffer *buf, const char *fmt, ...)
{
    va_list ap;
    int r = -2;
    va_start(ap, fmt);
    if (strcmp(fmt, "%s: %s\r\n") == 0) {
        const char *k = va_arg(ap, const char *), *v = va_arg(ap, const char *);
        if (k && v) /* printf writes "(null)" */
            r = header_line(buf, k, v);
    } else if (strcmp(fmt, "HTTP/%d.%d %d %s\r\n") == 0) {
        int major = va_arg(ap, int), minor = va_arg(ap, int), code = va_arg(ap, int);
        const char *reason = va_arg(ap, const char *);
        if (reason)
            r = status_line(buf, major, minor, code, reason);
    }
    va_end(ap);
    if (r != -2)
        return r;
    va_start(ap, fmt);
    r = evbuffer_add_vprintf(buf, fmt, ap);
    va_end(ap);
    return r;
}

void http_fmt_add_date(struct evhttp_request *req)
{
    static time_t made;
    static char date[40];
    if (req->major != 1 || req->minor < 1)
        return;
    time_t now = time(NULL);
    if (now != made) {
        struct tm tm;
        gmtime_r(&now, &tm);
        /* RFC 1123, in English whatever the locale: what evutil_date_rfc1123 writes */
        static const char days[][4] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
        static const char months[][4] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                         "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
        snprintf(date, sizeof(date), "%s, %02d %s %4d %02d:%02d:%02d GMT", days[tm.tm_wday],
                 tm.tm_mday, months[tm.tm_mon], tm.tm_year + 1900, tm.tm_hour, tm.tm_min,
                 tm.tm_sec);
        made = now;
    }
    evhttp_add_header(evhttp_request_get_output_headers(req), "Date", date);
}

/* libevent's ASCII-only case folding, as a byte, compared as char, as its own does */
static inline char lower(char c)
{
    return c >= 'A' && c <= 'Z' ? (char)(c + ('a' - 'A')) : c;
}

/* libevent's, defined here (see http_fmt.h): its own calls EVUTIL_TOLOWER_ through the PLT
 * for every byte, and evhttp_find_header compares every header name with it */
int evutil_ascii_strcasecmp(const char *s1, const char *s2)
{
    for (;; s1++, s2++) {
        char c1 = lower(*s1), c2 = lower(*s2);
        if (c1 != c2)
            return c1 < c2 ? -1 : 1;
        if (c1 == 0)
            return 0;
    }
}

int evutil_ascii_strncasecmp(const char *s1, const char *s2, size_t n)
{
    for (; n--; s1++, s2++) {
        char c1 = lower(*s1), c2 = lower(*s2);
        if (c1 != c2)
            return c1 < c2 ? -1 : 1;
        if (c1 == 0)
            return 0;
    }
    return 0;
}
