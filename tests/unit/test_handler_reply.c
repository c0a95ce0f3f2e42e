/* Unit tests for what a handler may put on the wire (frontend/core/handler_reply.c). */
#include "../../frontend/core/handler_reply.c"

#include "tap.h"

static enum handler_header verdict(const char *k, const char *v, int debug)
{
    return handler_reply_header(k, strlen(k), v, strlen(v), debug);
}

TEST(status_outside_200_599_is_500)
{
    CHECK_EQ_INT(handler_reply_status(99999), 500);
    CHECK_EQ_INT(handler_reply_status(101), 500);
    CHECK_EQ_INT(handler_reply_status(199), 500);
    CHECK_EQ_INT(handler_reply_status(-5), 500);
    CHECK_EQ_INT(handler_reply_status(600), 500);
    CHECK_EQ_INT(handler_reply_status(0), 200); /* unset */
    CHECK_EQ_INT(handler_reply_status(200), 200);
    CHECK_EQ_INT(handler_reply_status(418), 418);
    CHECK_EQ_INT(handler_reply_status(599), 599);
}

TEST(framing_headers_in_any_case)
{
    const char *const names[] = {"Content-Length",
                                 "content-length",
                                 "TRANSFER-ENCODING",
                                 "Connection",
                                 "Keep-Alive",
                                 "Upgrade",
                                 "TE",
                                 "Trailer",
                                 "Proxy-Connection"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        CHECK_EQ_INT(verdict(names[i], "x", 1), HANDLER_HEADER_FRAMING);
    CHECK_EQ_INT(verdict("Content-Type", "text/plain", 0), HANDLER_HEADER_KEEP);
    CHECK_EQ_INT(verdict("Content-Lengths", "1", 0), HANDLER_HEADER_KEEP);
    CHECK_EQ_INT(verdict("TEA", "1", 0), HANDLER_HEADER_KEEP);
}

TEST(malformed_names_and_values)
{
    CHECK_EQ_INT(verdict("", "v", 0), HANDLER_HEADER_INVALID);
    CHECK_EQ_INT(verdict("X Bad", "v", 0), HANDLER_HEADER_INVALID);
    CHECK_EQ_INT(verdict("X:Bad", "v", 0), HANDLER_HEADER_INVALID);
    CHECK_EQ_INT(verdict("X-Ok", "a\r\nSet-Cookie: x", 0), HANDLER_HEADER_INVALID);
    CHECK_EQ_INT(verdict("X-Ok", "a\x1b[2J", 0), HANDLER_HEADER_INVALID);
    CHECK_EQ_INT(verdict("X-Ok", "a\x7f", 0), HANDLER_HEADER_INVALID);
    CHECK_EQ_INT(handler_reply_header("X-Ok", 4, "a\0b", 3, 0), HANDLER_HEADER_INVALID);
    CHECK_EQ_INT(verdict("X-Ok", "tab\tis fine, so is UTF-8 \xc3\xa9", 0), HANDLER_HEADER_KEEP);
    CHECK_EQ_INT(verdict("x!#$%&'*+-.^_`|~9", "v", 0), HANDLER_HEADER_KEEP);
}

TEST(debug_counters_only_when_asked)
{
    CHECK_EQ_INT(verdict("x-ts-worker-batch", "8", 0), HANDLER_HEADER_DEBUG);
    CHECK_EQ_INT(verdict("X-TS-Worker-Forward-Us", "12", 0), HANDLER_HEADER_DEBUG);
    CHECK_EQ_INT(verdict("x-ts-worker-batch", "8", 1), HANDLER_HEADER_KEEP);
    CHECK_EQ_INT(verdict("x-ts-workers", "8", 0), HANDLER_HEADER_KEEP);
}

TEST(filter_compacts_in_order_and_counts)
{
    struct otf_kv kv[6] = {
        {otf_s("Content-Length"), otf_s("5")},
        {otf_s("X-A"), otf_s("1")},
        {otf_s("x-ts-worker-batch"), otf_s("2")},
        {otf_s("Bad Name"), otf_s("v")},
        {otf_s("X-B"), otf_s("2")},
        {otf_s("connection"), otf_s("close")},
    };
    struct otf_prediction p;
    memset(&p, 0, sizeof(p));
    p.status = 101;
    p.headers = kv;
    p.n_headers = 6;
    struct handler_reply_dropped d;
    handler_reply_filter(&p, 0, &d);
    CHECK_EQ_INT(p.status, 500);
    CHECK_EQ_INT(d.status_from, 101);
    CHECK_EQ_INT((int)p.n_headers, 2);
    CHECK(otf_str_eq(p.headers[0].key, "X-A") && otf_str_eq(p.headers[1].key, "X-B"));
    CHECK_EQ_INT((int)d.framing, 2);
    CHECK_EQ_INT((int)d.invalid, 1);
    CHECK_EQ_INT((int)d.debug, 1);
    CHECK_STR(d.first_framing, "Content-Length");
}

int main(void)
{
    RUN(status_outside_200_599_is_500);
    RUN(framing_headers_in_any_case);
    RUN(malformed_names_and_values);
    RUN(debug_counters_only_when_asked);
    RUN(filter_compacts_in_order_and_counts);
    return tap_done();
}
