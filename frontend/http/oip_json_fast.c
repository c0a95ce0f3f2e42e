/*
 * oip_json_fast: see oip_json_fast.h.
 *
 * jansson spends about 30 us building a DOM for a 64-float request (a json_t, a malloc and a
 * locale-aware strtod per number): most of what OIP would cost beyond /predictions, whose worker
 * reads numbers with its own parser. The common request (ASCII strings without escapes, numeric,
 * BOOL or BYTES data, no binary extension) is read here straight into raw tensors; small
 * `parameters` / `outputs` values go to jansson as spans. Anything else, and every error, takes
 * the jansson path, which owns the error messages: this one only ever says "not mine".
 * It reads a NUL-terminated private copy of the body and writes NULs over closing quotes.
 * FP32 numbers go through common/jnum (as the worker's tjson does for /predictions), and a
 * tensor's data is read in the same pass once its datatype is known. Callgrind, 64-float mlp
 * request, frontend instructions: 228k with jansson spans + strtod + printf, 103k now, against
 * 72k for /predictions (whose worker then parses the JSON: OIP's worker reads raw tensors).
 */
#include "oip_json_fast.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "jnum.h"
#include "oip/oip_req.h"
#include "util.h"

static int fword(struct jcur *f, const char *w)
{
    size_t n = strlen(w);
    jcur_ws(f);
    if ((size_t)(f->end - f->p) < n || memcmp(f->p, w, n))
        return 0;
    f->p += n;
    return 1;
}

static int is_digit(const struct jcur *f, const char *p)
{
    return p < f->end && *p >= '0' && *p <= '9';
}

/* A JSON number (validated: strtod and strtoll accept more than JSON does). */
static char *fnum(struct jcur *f, int *is_int)
{
    jcur_ws(f);
    char *s = f->p, *p = s;
    if (p < f->end && *p == '-')
        p++;
    if (!is_digit(f, p))
        return NULL;
    if (*p == '0')
        p++;
    else
        while (is_digit(f, p))
            p++;
    *is_int = 1;
    if (p < f->end && *p == '.') {
        if (!is_digit(f, ++p))
            return NULL;
        while (is_digit(f, p))
            p++;
        *is_int = 0;
    }
    if (p < f->end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < f->end && (*p == '+' || *p == '-'))
            p++;
        if (!is_digit(f, p))
            return NULL;
        while (is_digit(f, p))
            p++;
        *is_int = 0;
    }
    if (*is_int && p - s > 18)
        return NULL; /* beyond what every integer type holds: let jansson judge */
    f->p = p;
    return s;
}

/* Skips one value of any kind; jansson validates the span afterwards when it matters. */
static int fskip(struct jcur *f, int depth)
{
    jcur_ws(f);
    if (f->p >= f->end || depth > 64)
        return -1;
    char c = *f->p;
    if (c == '"') {
        for (f->p++; f->p < f->end && *f->p != '"'; f->p++)
            if (*f->p == '\\')
                f->p++;
        if (f->p >= f->end)
            return -1;
        f->p++;
        return 0;
    }
    if (c == '{' || c == '[') {
        char close = c == '{' ? '}' : ']';
        f->p++;
        if (jcur_lit(f, close))
            return 0;
        do {
            if (c == '{' && (fskip(f, depth + 1) || !jcur_lit(f, ':')))
                return -1;
            if (fskip(f, depth + 1))
                return -1;
        } while (jcur_lit(f, ','));
        return jcur_lit(f, close) ? 0 : -1;
    }
    char *s = f->p;
    while (f->p < f->end && *f->p != ',' && *f->p != ']' && *f->p != '}' && *f->p != ' ' &&
           *f->p != '\n' && *f->p != '\r' && *f->p != '\t')
        f->p++;
    return f->p > s ? 0 : -1;
}

/* Skips the value of a key the fast path does not read. fskip only finds where a value ends,
 * and it takes `2v"` for a value: jansson checks the span, or a malformed body would be
 * accepted here that the jansson path refuses. Only requests with unknown keys pay for it. */
static int fskip_checked(struct jcur *f)
{
    jcur_ws(f);
    char *s = f->p;
    if (fskip(f, 0))
        return -1;
    json_t *v = json_loadb(s, (size_t)(f->p - s), JSON_DECODE_ANY, NULL);
    json_decref(v);
    return v ? 0 : -1;
}

/* A skipped value parsed by jansson, owned by ps. */
static json_t *fspan(struct jcur *f, struct oip_json_req *ps)
{
    jcur_ws(f);
    char *s = f->p;
    if (fskip(f, 0) || ps->n_own == (int)(sizeof(ps->own) / sizeof(ps->own[0])))
        return NULL;
    json_t *v = json_loadb(s, (size_t)(f->p - s), 0, NULL);
    if (v)
        ps->own[ps->n_own++] = v;
    return v;
}

/* The number fnum found at s as strtod reads it; -1 where jansson refuses it ("real number
 * overflow": 1e400 must not become an infinity here and a 400 there). */
static int fnum_f64(const char *s, double *v)
{
    errno = 0;
    *v = strtod(s, NULL);
    return errno == ERANGE && isinf(*v) ? -1 : 0;
}

/* The same as (float)strtod(s) (jnum, else strtod itself). */
static int fnum_f32(const struct jcur *f, const char *s, float *v)
{
    const char *next;
    double d;
    if (!jnum_scan_f32(s, f->end, &next, v))
        return 0;
    if (fnum_f64(s, &d))
        return -1;
    *v = (float)d;
    return 0;
}

/* The rest of a list of FP32 numbers (after its '['): the innermost list of nearly every
 * request, written straight into b. */
static int fdata_f32_list(struct jcur *f, struct buf *b, size_t *count)
{
    for (;;) {
        float v;
        const char *next;
        jcur_ws(f);
        if (!jnum_scan_f32(f->p, f->end, &next, &v)) {
            f->p = (char *)next;
        } else {
            int is_int;
            char *s = fnum(f, &is_int);
            if (!s || fnum_f32(f, s, &v))
                return -1;
        }
        (*count)++;
        if (b->len + 5 > b->cap)
            buf_reserve(b, 4);
        memcpy(b->data + b->len, &v, 4); /* raw is little-endian, as is the host */
        b->len += 4;
        b->data[b->len] = '\0';
        jcur_ws(f);
        if (f->p < f->end && *f->p == ',') {
            f->p++;
            continue;
        }
        if (f->p < f->end && *f->p == ']') {
            f->p++;
            return 0;
        }
        return -1;
    }
}

static int fdata(struct jcur *f, struct buf *b, int dt, size_t *count, int depth)
{
    if (jcur_lit(f, '[')) {
        if (depth >= OIP_MAX_DIMS)
            return -1;
        if (jcur_lit(f, ']'))
            return 0;
        if (dt == OIP_FP32 && f->p < f->end && *f->p != '[') /* (jcur_lit skipped the blanks) */
            return fdata_f32_list(f, b, count);
        do {
            if (fdata(f, b, dt, count, depth + 1))
                return -1;
        } while (jcur_lit(f, ','));
        return jcur_lit(f, ']') ? 0 : -1;
    }
    (*count)++;
    if (dt == OIP_BOOL) {
        if (fword(f, "true"))
            buf_put_u8(b, 1);
        else if (fword(f, "false"))
            buf_put_u8(b, 0);
        else
            return -1;
        return 0;
    }
    if (dt == OIP_BYTES) {
        size_t n;
        const char *s = jcur_str(f, &n);
        if (!s)
            return -1;
        uint8_t l4[4] = {(uint8_t)n, (uint8_t)(n >> 8), (uint8_t)(n >> 16), (uint8_t)(n >> 24)};
        buf_put(b, l4, 4);
        buf_put(b, s, n);
        return 0;
    }
    int is_int;
    char *s = fnum(f, &is_int);
    if (!s)
        return -1;
    uint8_t le[8];
    switch (dt) {
    case OIP_FP32: {
        float v;
        if (fnum_f32(f, s, &v))
            return -1;
        memcpy(le, &v, 4);
        buf_put(b, le, 4);
        return 0;
    }
    case OIP_FP64: {
        /* an integer token is jansson's integer, as a double: "-0" is 0, not -0.0 */
        double v = is_int ? (double)strtoll(s, NULL, 10) : 0;
        if (!is_int && fnum_f64(s, &v))
            return -1;
        memcpy(le, &v, 8);
        buf_put(b, le, 8);
        return 0;
    }
    case OIP_FP16:
    case OIP_BF16: {
        float v;
        if (fnum_f32(f, s, &v))
            return -1;
        uint16_t h = dt == OIP_FP16 ? oip_float_to_half(v) : oip_float_to_bf16(v);
        uint8_t h2[2] = {(uint8_t)h, (uint8_t)(h >> 8)};
        buf_put(b, h2, 2);
        return 0;
    }
    default: {
        if (!is_int)
            return -1;
        long long x = strtoll(s, NULL, 10);
        size_t es = oip_dtype_size(dt);
        int is_signed = dt >= OIP_INT8 && dt <= OIP_INT64;
        if (!is_signed && x < 0)
            return -1;
        if (es < 8) {
            long long bits = (long long)es * 8 - (is_signed ? 1 : 0);
            if (x >= (1LL << bits) || (is_signed && x < -(1LL << bits)))
                return -1;
        }
        for (size_t k = 0; k < es; k++)
            le[k] = (uint8_t)((uint64_t)x >> (8 * k));
        buf_put(b, le, es);
        return 0;
    }
    }
}

static int finput(struct jcur *f, struct oip_json_req *ps)
{
    size_t i = ps->r.n_inputs;
    struct oip_tensor *t = &ps->r.inputs[i];
    char *data_at = NULL, *data_end = NULL;
    int have = 0;
    size_t count = 0;
    if (i == OIP_MAX_TENSORS || !jcur_lit(f, '{'))
        return -1;
    memset(t, 0, sizeof(*t));
    ps->from_raw[i] = 1;
    do {
        const char *key = jcur_str(f, NULL);
        if (!key || !jcur_lit(f, ':'))
            return -1;
        if (!strcmp(key, "name")) {
            if (!(t->name = jcur_str(f, NULL)))
                return -1;
            have |= 1;
        } else if (!strcmp(key, "datatype")) {
            /* a second datatype would retype data already read with the first (jansson: the
             * last one wins, for the data too) */
            const char *dt = have & 2 ? NULL : jcur_str(f, NULL);
            if (!dt || (t->dtype = oip_dtype_from_name(dt)) < 0)
                return -1;
            have |= 2;
        } else if (!strcmp(key, "shape")) {
            if (!jcur_lit(f, '[') || (have & 4))
                return -1;
            if (!jcur_lit(f, ']')) {
                do {
                    int is_int;
                    char *n = fnum(f, &is_int);
                    if (!n || !is_int || *n == '-' || t->ndim == OIP_MAX_DIMS)
                        return -1;
                    t->shape[t->ndim++] = strtoll(n, NULL, 10);
                } while (jcur_lit(f, ','));
                if (!jcur_lit(f, ']'))
                    return -1;
            }
            have |= 4;
        } else if (!strcmp(key, "data")) {
            if (have & 8)
                return -1;
            jcur_ws(f);
            if (have & 2) { /* the datatype is known: read the data in this pass */
                ps->off[i] = ps->raw.len;
                if (fdata(f, &ps->raw, t->dtype, &count, 0))
                    return -1;
            } else {
                data_at = f->p;
                if (fskip(f, 0))
                    return -1;
                data_end = f->p;
            }
            have |= 8;
        } else if (!strcmp(key, "parameters")) {
            json_t *prm = fspan(f, ps);
            if (!json_is_object(prm) || json_object_get(prm, "binary_data_size"))
                return -1;
            t->parameters = prm;
        } else if (fskip_checked(f)) {
            return -1;
        }
    } while (jcur_lit(f, ','));
    if (!jcur_lit(f, '}') || have != 15)
        return -1;
    int64_t numel = oip_numel(t->shape, t->ndim);
    if (numel < 0 || numel > srv->cfg.max_request_size)
        return -1;
    if (data_at) {
        struct jcur d = {data_at, f->end};
        ps->off[i] = ps->raw.len;
        /* fskip took the span to the next delimiter: a scalar such as `1x` or `truex` is one
         * token to it, and fdata must read all of it */
        if (fdata(&d, &ps->raw, t->dtype, &count, 0) || d.p != data_end)
            return -1;
    }
    if ((int64_t)count != numel)
        return -1;
    t->nbytes = ps->raw.len - ps->off[i];
    ps->r.n_inputs++;
    return 0;
}

int oip_json_fast_scan(struct oip_json_req *ps, char *copy, size_t len, json_t **outputs)
{
    struct jcur f = {copy, copy + len};
    json_t *prm = NULL, *outs = NULL;
    int seen = 0;
    if (!jcur_lit(&f, '{') || jcur_lit(&f, '}'))
        return 0;
    do {
        const char *key = jcur_str(&f, NULL);
        if (!key || !jcur_lit(&f, ':'))
            return 0;
        if (!strcmp(key, "id")) {
            if ((seen & 1) || !(ps->r.id = jcur_str(&f, NULL)))
                return 0;
            seen |= 1;
        } else if (!strcmp(key, "inputs")) {
            if ((seen & 2) || !jcur_lit(&f, '[') || jcur_lit(&f, ']'))
                return 0;
            do {
                if (finput(&f, ps))
                    return 0;
            } while (jcur_lit(&f, ','));
            if (!jcur_lit(&f, ']'))
                return 0;
            seen |= 2;
        } else if (!strcmp(key, "parameters")) {
            if (seen & 4)
                return 0;
            prm = fspan(&f, ps); /* not inside json_is_object(): it evaluates twice */
            if (!json_is_object(prm))
                return 0;
            seen |= 4;
        } else if (!strcmp(key, "outputs")) {
            if ((seen & 8) || !(outs = fspan(&f, ps)))
                return 0;
            seen |= 8;
        } else if (!strcmp(key, "text_input") || fskip_checked(&f)) {
            return 0;
        }
    } while (jcur_lit(&f, ','));
    if (!jcur_lit(&f, '}') || !(seen & 2))
        return 0;
    jcur_ws(&f);
    if (f.p != f.end)
        return 0;
    ps->r.parameters = prm;
    ps->binary_all = json_is_true(json_object_get(prm, "binary_data_output"));
    for (size_t i = 0; i < ps->r.n_inputs; i++)
        ps->r.inputs[i].data = ps->raw.data ? ps->raw.data + ps->off[i] : (const uint8_t *)"";
    *outputs = outs;
    return 1;
}
