#include "../../frontend/http/http_fmt.c"

#include <event2/http.h>
#include <stdlib.h>

#include "tap.h"

/* What our evbuffer_add_printf wrote, and what libevent's own vprintf writes for the same call,
 * must be the same bytes with the same result. */
static char *drain(struct evbuffer *b)
{
    size_t n = evbuffer_get_length(b);
    char *s = malloc(n + 1);
    evbuffer_remove(b, s, n);
    s[n] = 0;
    return s;
}

static int reference(struct evbuffer *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int r = evbuffer_add_vprintf(b, fmt, ap);
    va_end(ap);
    return r;
}

#define SAME(...)                                                                                  \
    do {                                                                                           \
        struct evbuffer *a = evbuffer_new(), *b = evbuffer_new();                                  \
        int ra = evbuffer_add_printf(a, __VA_ARGS__), rb = reference(b, __VA_ARGS__);              \
        char *sa = drain(a), *sb = drain(b);                                                       \
        CHECK(ra == rb);                                                                           \
        CHECK(strcmp(sa, sb) == 0);                                                                \
        free(sa);                                                                                  \
        free(sb);                                                                                  \
        evbuffer_free(a);                                                                          \
        evbuffer_free(b);                                                                          \
    } while (0)

/* NULL, unknown to the compiler (glibc's printf writes "(null)" for it) */
static const char *nothing(void)
{
    return getenv("TS_TEST_HTTP_FMT_UNSET");
}

TEST(header_lines_as_printf)
{
    SAME("%s: %s\r\n", "Content-Type", "application/json");
    SAME("%s: %s\r\n", "", "");
    SAME("%s: %s\r\n", "x-ts-worker-batch", "1");
    SAME("%s: %s\r\n", "k", nothing()); /* "(null)", from vprintf */
    char big[3000];
    memset(big, 'v', sizeof(big) - 1);
    big[sizeof(big) - 1] = 0;
    SAME("%s: %s\r\n", "Long", big); /* past the copied lines' limit */
    SAME("%s: %s\r\n", big + 2000, "x");
}

TEST(status_lines_as_printf)
{
    SAME("HTTP/%d.%d %d %s\r\n", 1, 1, 200, "OK");
    SAME("HTTP/%d.%d %d %s\r\n", 1, 0, 404, "Not Found");
    SAME("HTTP/%d.%d %d %s\r\n", 0, 9, 0, "");
    SAME("HTTP/%d.%d %d %s\r\n", 1, 1, -1, "odd");
    SAME("HTTP/%d.%d %d %s\r\n", 1, 1, 2147483647, "max");
    SAME("HTTP/%d.%d %d %s\r\n", 1, 1, (int)-2147483647 - 1, "min");
    SAME("HTTP/%d.%d %d %s\r\n", 1, 1, 500, nothing());
}

TEST(other_formats_are_libevents)
{
    SAME("%d items of %s", 3, "x");
    SAME("%s: %s\n", "a", "b");
    SAME("plain");
}

/* The Date header is evutil_date_rfc1123's text, on HTTP/1.1 replies only. */
TEST(date_as_libevent_writes_it)
{
    struct evhttp_request *req = evhttp_request_new(NULL, NULL);
    req->major = 1;
    req->minor = 0;
    http_fmt_add_date(req);
    CHECK(evhttp_find_header(evhttp_request_get_output_headers(req), "Date") == NULL);
    char want[64];
    const char *got = NULL;
    for (int i = 0; i < 3; i++) { /* a second may turn between the two */
        evhttp_clear_headers(evhttp_request_get_output_headers(req));
        req->minor = 1;
        http_fmt_add_date(req);
        evutil_date_rfc1123(want, sizeof(want), NULL);
        got = evhttp_find_header(evhttp_request_get_output_headers(req), "Date");
        if (got && strcmp(got, want) == 0)
            break;
    }
    CHECK(got != NULL && strcmp(got, want) == 0);
    evhttp_request_free(req);
}

int main(void)
{
    RUN(header_lines_as_printf);
    RUN(status_lines_as_printf);
    RUN(other_formats_are_libevents);
    RUN(date_as_libevent_writes_it);
    return tap_done();
}
