/*
 * handler_reply: what the frontend lets through of a handler's answer
 * (frontend/core/handler_reply.c), on the path a worker's frame takes (otf_decode_response,
 * then handler_reply_filter, then evhttp_add_header). Input: the first byte picks the mode
 * (bit 0: the rest is a worker frame; else lines "name:value" with a status in the next four
 * bytes) and bit 1 whether worker_debug_headers is on. After the filter: the status is within
 * 200..599, each header kept has a token name and a value without control characters, is not
 * one that frames the answer or the connection, nor a debug counter unless they are on; the
 * kept ones are the input's in order; the counts add up; an independent reading of the rules
 * agrees on every header; and libevent takes every kept header as one header line.
 */
#include <ctype.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <strings.h>

#include "../../frontend/core/handler_reply.h"
#include "fuzz.h"
#include "otf.h"

static int ref_is_token(const char *k, size_t n)
{
    if (!n)
        return 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)k[i];
        if (!(isalnum(c) || (c && strchr("!#$%&'*+-.^_`|~", c))))
            return 0;
    }
    return 1;
}

static int ref_eq(const char *k, size_t n, const char *name)
{
    return strlen(name) == n && !strncasecmp(k, name, n);
}

/* the rules again, written plainly */
static enum handler_header reference(const char *k, size_t kn, const char *v, size_t vn, int debug)
{
    if (!ref_is_token(k, kn))
        return HANDLER_HEADER_INVALID;
    for (size_t i = 0; i < vn; i++)
        if (((unsigned char)v[i] < 32 && v[i] != '\t') || (unsigned char)v[i] == 127)
            return HANDLER_HEADER_INVALID;
    static const char *const fr[] = {"Content-Length", "Transfer-Encoding", "Connection",
                                     "Keep-Alive",     "Upgrade",           "TE",
                                     "Trailer",        "Proxy-Connection"};
    for (size_t i = 0; i < sizeof(fr) / sizeof(fr[0]); i++)
        if (ref_eq(k, kn, fr[i]))
            return HANDLER_HEADER_FRAMING;
    if (!debug && kn >= 12 && !strncasecmp(k, "X-TS-WORKER-", 12))
        return HANDLER_HEADER_DEBUG;
    return HANDLER_HEADER_KEEP;
}

static void check(struct otf_prediction *p, int debug)
{
    size_t n0 = p->n_headers;
    struct otf_kv *orig = xmalloc((n0 ? n0 : 1) * sizeof(*orig));
    if (n0)
        memcpy(orig, p->headers, n0 * sizeof(*orig));
    int32_t s0 = p->status;
    struct handler_reply_dropped d;
    handler_reply_filter(p, debug, &d);
    FUZZ_CHECK(p->status >= 200 && p->status <= 599);
    FUZZ_CHECK(p->status == s0 || s0 == 0 || p->status == 500);
    FUZZ_CHECK(!!d.status_from == (s0 != 0 && p->status != s0));
    FUZZ_CHECK(p->n_headers + d.framing + d.invalid + d.debug == n0);
    struct evkeyvalq out;
    TAILQ_INIT(&out);
    size_t k = 0;
    size_t fr = 0, inv = 0, dbg = 0;
    for (size_t i = 0; i < n0; i++) {
        size_t kl = orig[i].key.len > 0 ? (size_t)orig[i].key.len : 0;
        size_t vl = orig[i].val.len > 0 ? (size_t)orig[i].val.len : 0;
        enum handler_header want = reference(orig[i].key.p, kl, orig[i].val.p, vl, debug);
        FUZZ_CHECK(want == handler_reply_header(orig[i].key.p, kl, orig[i].val.p, vl, debug));
        fr += want == HANDLER_HEADER_FRAMING;
        inv += want == HANDLER_HEADER_INVALID;
        dbg += want == HANDLER_HEADER_DEBUG;
        if (want != HANDLER_HEADER_KEEP)
            continue;
        FUZZ_CHECK(k < p->n_headers);
        FUZZ_CHECK(p->headers[k].key.p == orig[i].key.p && p->headers[k].val.p == orig[i].val.p);
        char *key = xstrndup(orig[i].key.p, kl), *val = xstrndup(orig[i].val.p, vl);
        FUZZ_CHECK(strlen(key) == kl && strlen(val) == vl); /* no NUL got through */
        FUZZ_CHECK(evhttp_add_header(&out, key, val) == 0);
        free(key);
        free(val);
        k++;
    }
    FUZZ_CHECK(k == p->n_headers && fr == d.framing && inv == d.invalid && dbg == d.debug);
    if (d.framing)
        FUZZ_CHECK(d.first_framing[0]);
    evhttp_clear_headers(&out);
    free(orig);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    int frame = data[0] & 1, debug = (data[0] >> 1) & 1;
    const uint8_t *p = data + 1;
    size_t n = size - 1;
    if (frame) {
        struct otf_response r;
        if (otf_decode_response(p, n, 1u << 20, &r) > 0) {
            for (size_t i = 0; i < r.n_preds; i++)
                check(&r.preds[i], debug);
            otf_response_free(&r);
        }
        return 0;
    }
    if (n < 4)
        return 0;
    struct otf_prediction pr;
    memset(&pr, 0, sizeof(pr));
    memcpy(&pr.status, p, 4);
    struct otf_kv kv[64];
    size_t nk = 0;
    const char *s = (const char *)p + 4, *end = (const char *)p + n;
    while (s < end && nk < 64) {
        const char *e = memchr(s, '\n', (size_t)(end - s));
        if (!e)
            e = end;
        const char *c = memchr(s, ':', (size_t)(e - s));
        kv[nk].key = otf_sn(s, c ? (size_t)(c - s) : (size_t)(e - s));
        kv[nk++].val = c ? otf_sn(c + 1, (size_t)(e - c - 1)) : otf_sn("", 0);
        s = e + 1;
    }
    pr.headers = kv;
    pr.n_headers = nk;
    check(&pr, debug);
    return 0;
}
