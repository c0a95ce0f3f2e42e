#include "../../frontend/http/http_fmt.c"

#include <dlfcn.h>
#include <event2/http.h>
#include <event2/util.h>
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

/* Our case-insensitive compares give libevent's results, high bytes included. */
TEST(ascii_case_compares_as_libevents)
{
    int (*ref)(const char *, const char *) = dlsym(RTLD_NEXT, "evutil_ascii_strcasecmp");
    int (*refn)(const char *, const char *, size_t) = dlsym(RTLD_NEXT, "evutil_ascii_strncasecmp");
    CHECK(ref && refn);
    if (!ref || !refn)
        return;
    const char alphabet[] = "aAzZ@[`{09-\x80\xff\xc3";
    char a[8], b[8];
    unsigned seed = 12345;
    for (int i = 0; i < 200000; i++) {
        size_t la = (seed = seed * 1103515245 + 12345) >> 16 & 7, lb = (seed >> 8) & 7;
        for (size_t k = 0; k < 7; k++) {
            seed = seed * 1103515245 + 12345;
            a[k] = alphabet[(seed >> 16) % (sizeof(alphabet) - 1)];
            b[k] = (seed >> 24) & 1 ? a[k] : alphabet[(seed >> 8) % (sizeof(alphabet) - 1)];
        }
        a[la] = b[lb] = 0;
        CHECK(evutil_ascii_strcasecmp(a, b) == ref(a, b));
        size_t n = seed % 9;
        CHECK(evutil_ascii_strncasecmp(a, b, n) == refn(a, b, n));
    }
    CHECK(evutil_ascii_strcasecmp("Content-Length", "content-length") == 0);
}

int main(void)
{
    RUN(header_lines_as_printf);
    RUN(status_lines_as_printf);
    RUN(other_formats_are_libevents);
    RUN(date_as_libevent_writes_it);
    RUN(ascii_case_compares_as_libevents);
    return tap_done();
}
