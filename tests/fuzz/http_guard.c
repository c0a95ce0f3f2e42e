/*
 * http_guard: the checks every HTTP request meets before a handler runs
 * (frontend/http/http_guard.c: target_problem, headers_problem), on a request target and headers
 * as evhttp hands them over. Input: the first line is the target, each further line a header
 * "name: value" (a line without ':' is a name with an empty value). A request the checks let
 * through must have a target of at most HTTP_LINE_MAX bytes without control bytes or "%00", at
 * most HTTP_HEADERS_MAX headers, each named by a token and valued without control characters
 * (TAB aside), plain and agreeing Content-Lengths, at most one
 * Transfer-Encoding, which is "chunked", and never both.
 * The first line is also read as a chunk-size line (evutil_strtoll, base 16): accepted, it is
 * hex digits worth at most 2^63-1, then blanks and an optional ";extension", and the value is
 * those digits; refused, the line is remembered for the 400.
 */
#include "../../frontend/http/http_guard.c"

#include "fuzz.h"

static void add(struct evkeyvalq *hs, const char *k, size_t kl, const char *v, size_t vl)
{
    struct evkeyval *h = xcalloc(1, sizeof(*h));
    h->key = xstrndup(k, kl);
    h->value = xstrndup(v, vl);
    TAILQ_INSERT_TAIL(hs, h, next);
}

static int digits_only(const char *s)
{
    size_t n = strlen(s);
    if (!n || n > 18)
        return 0;
    return strspn(s, "0123456789") == n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *s = (const char *)data, *end = s + size;
    const char *nl = memchr(s, '\n', size);
    char *target = xstrndup(s, nl ? (size_t)(nl - s) : size);
    struct evkeyvalq hs;
    TAILQ_INIT(&hs);
    for (const char *p = nl ? nl + 1 : end; p < end;) {
        const char *e = memchr(p, '\n', (size_t)(end - p));
        if (!e)
            e = end;
        const char *colon = memchr(p, ':', (size_t)(e - p));
        if (colon) {
            const char *v = colon + 1;
            while (v < e && *v == ' ')
                v++;
            add(&hs, p, (size_t)(colon - p), v, (size_t)(e - v));
        } else {
            add(&hs, p, (size_t)(e - p), "", 0);
        }
        p = e + 1;
    }

    struct problem pb;
    if (target_problem(target, &pb) == 0) {
        size_t n = strlen(target);
        FUZZ_CHECK(n <= HTTP_LINE_MAX && !strstr(target, "%00"));
        for (size_t i = 0; i < n; i++)
            FUZZ_CHECK((unsigned char)target[i] >= 0x20 && target[i] != 0x7f);
    } else {
        FUZZ_CHECK(pb.status == 400 || pb.status == 414);
        FUZZ_CHECK(pb.msg[0] && pb.type[0]);
    }

    bad_chunk_size[0] = '\0';
    char *endp = NULL;
    int64_t csize = evutil_strtoll(target, &endp, 16);
    if (csize >= 0) {
        size_t nd = strspn(target, "0123456789abcdefABCDEF");
        const char *rest = target + nd + strspn(target + nd, " \t");
        FUZZ_CHECK(nd > 0 && (*rest == '\0' || *rest == ';') && *endp == '\0' &&
                   !bad_chunk_size[0]);
        const char *sig = target + strspn(target, "0");
        size_t sd = (size_t)(target + nd - sig);
        FUZZ_CHECK(sd <= 16 && (sd < 16 || strchr("01234567", *sig)));
        FUZZ_CHECK((uint64_t)csize == (sd ? strtoull(sig, NULL, 16) : 0));
    } else {
        FUZZ_CHECK(csize == -1 && endp == target && bad_chunk_size[0]);
    }
    if (headers_problem(&hs, &pb) == 0) {
        int count = 0, te = 0;
        const char *cl = NULL;
        struct evkeyval *h;
        TAILQ_FOREACH(h, &hs, next)
        {
            count++;
            FUZZ_CHECK(strlen(h->key) + strlen(h->value) + 2 <= HTTP_LINE_MAX);
            /* a token name; a value without control characters (TAB aside) */
            FUZZ_CHECK(h->key[0]);
            for (const char *c = h->key; *c; c++)
                FUZZ_CHECK(isalnum((unsigned char)*c) || strchr("!#$%&'*+-.^_`|~", *c));
            for (const char *c = h->value; *c; c++)
                FUZZ_CHECK(((unsigned char)*c >= 0x20 || *c == '\t') && *c != 0x7f);
            if (!strcasecmp(h->key, "Content-Length")) {
                FUZZ_CHECK(digits_only(h->value));
                FUZZ_CHECK(!cl || !strcmp(cl, h->value));
                cl = h->value;
            } else if (!strcasecmp(h->key, "Transfer-Encoding")) {
                FUZZ_CHECK(!strcasecmp(h->value, "chunked"));
                te++;
            }
        }
        FUZZ_CHECK(count <= HTTP_HEADERS_MAX && te <= 1 && !(cl && te));
    } else {
        FUZZ_CHECK(pb.status == 400 || pb.status == 431 || pb.status == 501);
        FUZZ_CHECK(pb.msg[0] && pb.type[0]);
    }

    struct evkeyval *h, *tmp;
    TAILQ_FOREACH_SAFE(h, &hs, next, tmp)
    {
        TAILQ_REMOVE(&hs, h, next);
        free(h->key);
        free(h->value);
        free(h);
    }
    free(target);
    return 0;
}
