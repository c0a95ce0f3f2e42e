/*
 * otf_response: worker -> frontend frames (common/otf.c otf_decode_response), as the frontend
 * reads them from a worker's socket (frontend/core/worker_pool.c). A decoded frame must lie
 * inside the bytes consumed, encode back to exactly those bytes, and every shorter prefix of it
 * must ask for more bytes. A 16-byte field limit must give the same frame or a clean refusal.
 * The metadata our worker appends (otf.h): metric records lie inside their record and encode back
 * to the same bytes; a step header that decodes encodes back to the same 16 bytes.
 */
#include <math.h>

#include "fuzz.h"
#include "otf.h"

#define MAXF (1u << 20)

static void in_frame(struct otf_str s, const uint8_t *p, long n)
{
    FUZZ_CHECK(s.len >= 0 && (size_t)s.len <= MAXF);
    if (s.len)
        FUZZ_CHECK((const uint8_t *)s.p >= p && (const uint8_t *)s.p + s.len <= p + n);
}

static long decode_free(const uint8_t *p, size_t len, size_t max_field)
{
    struct otf_response r;
    long n = otf_decode_response(p, len, max_field, &r);
    if (n > 0)
        otf_response_free(&r);
    return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct otf_response r;
    long n = otf_decode_response(data, size, MAXF, &r);
    if (n < 0) {
        FUZZ_CHECK(n == TS_E_INCOMPLETE || n == TS_E_PROTOCOL || n == TS_E_TOO_LARGE);
        FUZZ_CHECK(!r.preds && !r.n_preds);
        return 0;
    }
    FUZZ_CHECK(n > 0 && (size_t)n <= size);
    in_frame(r.msg, data, n);
    struct buf b;
    buf_init(&b);
    otf_encode_response_begin(&b, r.code, r.msg);
    for (size_t i = 0; i < r.n_preds; i++) {
        const struct otf_prediction *p = &r.preds[i];
        in_frame(p->id, data, n);
        in_frame(p->ctype, data, n);
        in_frame(p->phrase, data, n);
        in_frame(p->body, data, n);
        for (size_t k = 0; k < p->n_headers; k++) {
            in_frame(p->headers[k].key, data, n);
            in_frame(p->headers[k].val, data, n);
        }
        /* what worker_pool.c and model.c ask of every prediction */
        (void)otf_find_kv(p->headers, p->n_headers, OTF_STREAM_NEXT);
        const struct otf_kv *mk = otf_find_kv(p->headers, p->n_headers, OTF_METRICS_KEY);
        if (mk) {
            struct otf_metric m;
            const char *q = mk->val.p;
            size_t left = (size_t)mk->val.len;
            long k;
            while ((k = otf_metric_next(q, left, &m)) > 0) {
                FUZZ_CHECK((size_t)k <= left && m.name.len >= 1 &&
                           m.name.len <= OTF_METRIC_NAME_MAX && m.name.p >= q &&
                           m.name.p + m.name.len <= q + k && m.unit.len <= OTF_METRIC_UNIT_MAX &&
                           m.unit.p >= q && m.unit.p + m.unit.len <= q + k && isfinite(m.value));
                /* a record reads back as the record its fields encode */
                char nm[OTF_METRIC_NAME_MAX + 1], un[OTF_METRIC_UNIT_MAX + 1];
                memcpy(nm, m.name.p, (size_t)m.name.len);
                nm[m.name.len] = '\0';
                memcpy(un, m.unit.p, (size_t)m.unit.len);
                un[m.unit.len] = '\0';
                struct buf rb;
                buf_init(&rb);
                FUZZ_CHECK(otf_metric_encode(&rb, m.kind, nm, un, m.value) == 0);
                FUZZ_CHECK(rb.len == (size_t)k && memcmp(rb.data, q, (size_t)k) == 0);
                buf_free(&rb);
                q += k;
                left -= (size_t)k;
            }
            FUZZ_CHECK(k == 0 || k == TS_E_PROTOCOL);
        }
        const struct otf_kv *sk = otf_find_kv(p->headers, p->n_headers, OTF_STEP_KEY);
        struct otf_step st;
        if (sk && otf_step_decode(sk->val, &st) == 0) {
            FUZZ_CHECK(sk->val.len == OTF_STEP_LEN && st.handle_us >= 0 && st.predict_us >= 0);
            uint8_t again[OTF_STEP_LEN];
            otf_step_encode(again, &st);
            FUZZ_CHECK(memcmp(again, sk->val.p, OTF_STEP_LEN) == 0);
        }
        free(otf_strdup(p->id));
        otf_encode_prediction(&b, p);
    }
    otf_encode_list_end(&b);
    FUZZ_CHECK(b.len == (size_t)n && memcmp(b.data, data, (size_t)n) == 0);
    buf_free(&b);
    otf_response_free(&r);

    fuzz_check_frame_cuts(data, size, n, decode_free);
    return 0;
}
