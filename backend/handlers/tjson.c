/*
 * tjson: JSON <-> tensor for the torchscript handler.
 *
 * A nested list is read in two passes: the shape is taken from the first element at each depth,
 * then every element is checked against it while the numbers are copied out, so a ragged list or
 * a stray string is reported with its exact path instead of a libtorch error later on.
 * Output numbers use %.9g for float32 (the shortest width that always round-trips), %.17g for
 * float64, and Python's spellings for non-finite values (NaN, Infinity), as json.dumps would.
 *
 * Cost: the common bodies skip jansson (fast_parse below: one pass, no allocation per number),
 * and float32 output is printed without printf (numbers both ways go through common/jnum.c).
 * Through jansson and snprintf a 64-float mlp request cost 248k + 29k instructions, nearly what
 * its forward costs (300k); now about 15k + 5k.
 */
#include "tjson.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "jnum.h"

static const char *json_kind(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return "object";
    case JSON_ARRAY:
        return "list";
    case JSON_STRING:
        return "string";
    case JSON_INTEGER:
    case JSON_REAL:
        return "number";
    case JSON_TRUE:
    case JSON_FALSE:
        return "boolean";
    default:
        return "null";
    }
}

struct walk {
    const int64_t *shape;
    int ndim;
    float *out;
    size_t k;
    char path[256];
    char *err;
    size_t errlen;
};

static int flatten(struct walk *w, const json_t *v, int depth)
{
    size_t plen = strlen(w->path);
    if (depth == w->ndim) {
        if (!json_is_number(v)) {
            snprintf(w->err, w->errlen, "%s: expected a number, got %s", w->path, json_kind(v));
            return -1;
        }
        if (w->out) /* NULL: a walk that only checks */
            w->out[w->k] = (float)json_number_value(v);
        w->k++;
        return 0;
    }
    if (!json_is_array(v)) {
        snprintf(w->err, w->errlen, "%s: expected a list of %lld, got %s", w->path,
                 (long long)w->shape[depth], json_kind(v));
        return -1;
    }
    if ((int64_t)json_array_size(v) != w->shape[depth]) {
        snprintf(w->err, w->errlen, "%s: ragged list: %zu elements, expected %lld", w->path,
                 json_array_size(v), (long long)w->shape[depth]);
        return -1;
    }
    for (size_t i = 0; i < json_array_size(v); i++) {
        snprintf(w->path + plen, sizeof(w->path) - plen, "[%zu]", i);
        if (flatten(w, json_array_get(v, i), depth + 1))
            return -1;
    }
    w->path[plen] = '\0';
    return 0;
}

/* v, read from a body of len bytes, as a tensor. */
static int from_value(const json_t *v, const char *root, int max_dims, size_t len,
                      struct tjson_input *out, char *err, size_t errlen)
{
    int64_t shape[TSH_MAX_DIMS];
    int ndim = 0;
    const json_t *p = v;
    while (json_is_array(p)) {
        if (ndim == max_dims) {
            snprintf(err, errlen, "%s: nested deeper than %d levels", root, max_dims);
            return -1;
        }
        shape[ndim++] = (int64_t)json_array_size(p);
        if (!json_array_size(p))
            break;
        p = json_array_get(p, 0);
    }
    int64_t numel = tsh_numel(shape, ndim);
    if (numel < 0 || numel > (int64_t)(SIZE_MAX / sizeof(float))) {
        snprintf(err, errlen, "%s: too many elements", root);
        return -1;
    }
    if (numel == 0) {
        snprintf(err, errlen, "%s: empty list", root);
        return -1;
    }
    struct walk w = {.shape = shape, .ndim = ndim, .err = err, .errlen = errlen};
    snprintf(w.path, sizeof(w.path), "%s", root);
    /* The shape comes from the first element at each depth, which the rest need not follow:
     * [[1, ...40 numbers], [], [], ...] claims 40 x 40 elements. A body holds at most len
     * numbers, so a larger claim is a ragged list: the walk finds it without the memory for
     * the claim (an 834-byte body nested 7 deep claimed 655 GB, and xmalloc aborted). */
    if ((uint64_t)numel > len) {
        if (flatten(&w, v, 0) == 0) /* cannot be: it would take numel numbers */
            snprintf(err, errlen, "%s: too many elements", root);
        return -1;
    }
    w.out = xmalloc((size_t)numel * sizeof(float));
    if (flatten(&w, v, 0)) {
        free(w.out);
        return -1;
    }
    out->data = w.out;
    out->ndim = ndim;
    memcpy(out->shape, shape, sizeof(int64_t) * (size_t)ndim);
    return 0;
}

static int all_space(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r' && s[i] != '\n')
            return 0;
    return 1;
}

/* ------------------------------------------------------------- fast path
 *
 * Nearly every body is one of three shapes: {"data": <nested list of numbers>} (or one of the
 * other three keys, alone in the object), a bare nested list, or a bare number. fast_parse reads
 * those in one pass with no allocation per number. It succeeds only on a body it fully
 * understands and that the jansson path would accept; anything else (another shape, a string, a
 * ragged list, a syntax error, a number it leaves to strtod's corner cases) makes it give up with
 * no side effects, and the jansson path parses the body from scratch, so every error message
 * still comes from one place. Numbers end as the jansson path makes them: jansson's double
 * (strtod, correctly rounded; an integer token via long long) cast to float.
 */

struct scan {
    const char *p, *end;
};

static void skip_ws(struct scan *s)
{
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\n' || *s->p == '\r' || *s->p == '\t'))
        s->p++;
}

/* A nested list of numbers (or one number) at s->p. 1 on success with out filled, 0 to give up
 * (out untouched). */
static int scan_value(struct scan *s, int max_dims, struct tjson_input *out)
{
    int64_t shape[TSH_MAX_DIMS], cnt[TSH_MAX_DIMS];
    int ndim = 0;
    if (max_dims > TSH_MAX_DIMS)
        max_dims = TSH_MAX_DIMS;
    for (;;) {
        skip_ws(s);
        if (s->p == s->end || *s->p != '[')
            break;
        if (ndim == max_dims)
            return 0;
        shape[ndim] = -1;
        cnt[ndim++] = 0;
        s->p++;
    }
    /* every number takes a character and a separator: this bound is never exceeded */
    size_t cap = (size_t)(s->end - s->p) / 2 + 1, n = 0;
    float *data = xmalloc(cap * sizeof(float));
    int d = ndim; /* lists open */
    for (;;) {
        /* an element of the innermost open list */
        skip_ws(s);
        if (d < ndim) {
            if (s->p == s->end || *s->p != '[')
                goto give_up;
            s->p++;
            cnt[d++] = 0;
            continue;
        }
        if (n == cap || jnum_scan_f32(s->p, s->end, &s->p, &data[n]))
            goto give_up;
        n++;
        if (d == 0)
            break;
        cnt[d - 1]++;
        /* after an element: more, or the end of one or more lists */
        for (;;) {
            skip_ws(s);
            if (s->p == s->end)
                goto give_up;
            if (*s->p == ',') {
                s->p++;
                break;
            }
            if (*s->p != ']')
                goto give_up;
            s->p++;
            d--;
            if (shape[d] < 0)
                shape[d] = cnt[d]; /* the first list to close at a depth sets its size */
            else if (cnt[d] != shape[d])
                goto give_up;
            if (d == 0)
                goto done;
            cnt[d - 1]++;
        }
    }
done:
    if (cap > 1024 && n < cap / 2)
        data = xrealloc(data, n * sizeof(float));
    out->data = data;
    out->ndim = ndim;
    memcpy(out->shape, shape, sizeof(int64_t) * (size_t)ndim);
    return 1;
give_up:
    free(data);
    return 0;
}

static int fast_parse(const char *body, size_t len, int max_dims, struct tjson_input *out)
{
    struct scan s = {body, body + len};
    skip_ws(&s);
    if (s.p < s.end && *s.p == '{') {
        static const char *const keys[] = {"data", "instances", "inputs", "input"};
        s.p++;
        skip_ws(&s);
        if (s.p == s.end || *s.p++ != '"')
            return 0;
        const char *key = s.p;
        while (s.p < s.end && *s.p != '"' && *s.p != '\\' && (unsigned char)*s.p >= 0x20)
            s.p++;
        if (s.p == s.end || *s.p != '"')
            return 0;
        size_t klen = (size_t)(s.p - key), i;
        for (i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
            if (strlen(keys[i]) == klen && !memcmp(keys[i], key, klen))
                break;
        if (i == sizeof(keys) / sizeof(keys[0]))
            return 0;
        s.p++;
        skip_ws(&s);
        if (s.p == s.end || *s.p++ != ':')
            return 0;
        if (!scan_value(&s, max_dims, out))
            return 0;
        skip_ws(&s);
        if (s.p == s.end || *s.p++ != '}')
            goto reject;
    } else if (!scan_value(&s, max_dims, out)) {
        return 0;
    }
    skip_ws(&s);
    if (s.p == s.end)
        return 1;
reject: /* trailing bytes: jansson has the words for it */
    tjson_input_free(out);
    memset(out, 0, sizeof(*out));
    return 0;
}

/* Any body, through jansson: the reference the fast path must agree with, and every error. */
static int jansson_parse(const char *body, size_t len, int max_dims, struct tjson_input *out,
                         char *err, size_t errlen)
{
    json_error_t je;
    json_t *root = json_loadb(body, len, JSON_DECODE_ANY, &je);
    if (!root) {
        snprintf(err, errlen, "malformed JSON at line %d column %d: %s", je.line, je.column,
                 je.text);
        return -1;
    }
    const json_t *v = root;
    const char *name = "data";
    if (json_is_object(root)) {
        static const char *const keys[] = {"data", "instances", "inputs", "input"};
        v = NULL;
        for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]) && !v; i++)
            if ((v = json_object_get(root, keys[i])))
                name = keys[i];
        if (!v) {
            snprintf(err, errlen,
                     "expected a JSON list of numbers, or an object with a \"data\" "
                     "or \"instances\" field");
            json_decref(root);
            return -1;
        }
    }
    int rc = from_value(v, name, max_dims, len, out, err, errlen);
    json_decref(root);
    return rc;
}

int tjson_parse_json(const char *body, size_t len, int max_dims, struct tjson_input *out, char *err,
                     size_t errlen)
{
    memset(out, 0, sizeof(*out));
    if (!body || all_space(body, len)) {
        snprintf(err, errlen, "empty body");
        return -1;
    }
    if (fast_parse(body, len, max_dims, out))
        return 0;
    return jansson_parse(body, len, max_dims, out, err, errlen);
}

int tjson_parse_raw(const void *body, size_t len, const int64_t *shape, int ndim,
                    struct tjson_input *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof(*out));
    if (!len) {
        snprintf(err, errlen, "empty body");
        return -1;
    }
    if (len % sizeof(float)) {
        snprintf(err, errlen, "raw float32 body of %zu bytes is not a multiple of 4", len);
        return -1;
    }
    int64_t numel = (int64_t)(len / sizeof(float));
    if (ndim > 0) {
        int64_t want = tsh_numel(shape, ndim);
        if (want < 0) {
            char s[128];
            tjson_format_shape(s, sizeof(s), shape, ndim);
            snprintf(err, errlen, "shape %s has too many elements", s);
            return -1;
        }
        if (want != numel) {
            char s[128];
            tjson_format_shape(s, sizeof(s), shape, ndim);
            snprintf(err, errlen, "raw float32 body has %lld elements, shape %s needs %lld",
                     (long long)numel, s, (long long)want);
            return -1;
        }
        memcpy(out->shape, shape, sizeof(int64_t) * (size_t)ndim);
        out->ndim = ndim;
    } else {
        out->shape[0] = numel;
        out->ndim = 1;
    }
    /* a copy: the body is not float-aligned, and the batch is concatenated anyway */
    out->data = xmalloc(len);
    memcpy(out->data, body, len);
    return 0;
}

int tjson_parse_shape(const char *spec, int64_t *shape, int *ndim, char *err, size_t errlen)
{
    const char *p = spec;
    int n = 0;
    while (*p == ' ' || *p == '[' || *p == '(')
        p++;
    while (*p && *p != ']' && *p != ')') {
        char *end;
        errno = 0;
        long long v = strtoll(p, &end, 10);
        if (end == p || errno || v < 0 || n == TSH_MAX_DIMS) {
            snprintf(err, errlen, "bad shape \"%s\": expected up to %d comma-separated sizes", spec,
                     TSH_MAX_DIMS);
            return -1;
        }
        shape[n++] = v;
        p = end;
        while (*p == ' ')
            p++;
        if (*p == ',')
            p++;
        while (*p == ' ')
            p++;
    }
    if (!n) {
        snprintf(err, errlen, "bad shape \"%s\": no sizes", spec);
        return -1;
    }
    *ndim = n;
    return 0;
}

void tjson_input_free(struct tjson_input *in)
{
    free(in->data);
    in->data = NULL;
}

void tjson_format_shape(char *out, size_t n, const int64_t *shape, int ndim)
{
    size_t k = 0;
    k += (size_t)snprintf(out, n, "[");
    for (int i = 0; i < ndim && k < n; i++)
        k += (size_t)snprintf(out + k, n - k, "%s%lld", i ? "," : "", (long long)shape[i]);
    if (k < n)
        snprintf(out + k, n - k, "]");
}

/* ---------------------------------------------------------------- output */

static float half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (man << 13);
    } else if (exp) {
        bits = sign | ((exp + 112) << 23) | (man << 13);
    } else if (man) { /* subnormal: normalise */
        int e = -1;
        do {
            e++;
            man <<= 1;
        } while (!(man & 0x400));
        bits = sign | ((uint32_t)(112 - e) << 23) | ((man & 0x3ff) << 13);
    } else {
        bits = sign;
    }
    float f;
    memcpy(&f, &bits, sizeof(f));
    return f;
}

/* printf's "%.9g" of a float, or 0 for the values left to snprintf (common/jnum.c) */
static size_t format_float9(char *s, float f)
{
    return jnum_f32(s, f);
}

static void put_double(struct buf *b, double v, int digits)
{
    char s[40];
    if (isnan(v))
        buf_puts(b, "NaN");
    else if (isinf(v))
        buf_puts(b, v > 0 ? "Infinity" : "-Infinity");
    else {
        /* literal formats: a '*' precision sends glibc down its slow positional path */
        int n = digits == 9    ? snprintf(s, sizeof(s), "%.9g", v)
                : digits == 17 ? snprintf(s, sizeof(s), "%.17g", v)
                : digits == 5  ? snprintf(s, sizeof(s), "%.5g", v)
                               : snprintf(s, sizeof(s), "%.4g", v);
        buf_put(b, s, (size_t)n);
    }
}

static void put_elem(struct buf *b, const struct tsh_tensor *t, int64_t i)
{
    const uint8_t *p = (const uint8_t *)t->data + (size_t)i * tsh_dtype_size(t->dtype);
    char s[32];
    int n;
    switch (t->dtype) {
    case TSH_FLOAT32: {
        float f;
        memcpy(&f, p, sizeof(f));
        n = (int)format_float9(s, f);
        if (n)
            break;
        put_double(b, f, 9);
        return;
    }
    case TSH_FLOAT64: {
        double d;
        memcpy(&d, p, sizeof(d));
        put_double(b, d, 17);
        return;
    }
    case TSH_FLOAT16: {
        uint16_t h;
        memcpy(&h, p, sizeof(h));
        put_double(b, half_to_float(h), 5);
        return;
    }
    case TSH_BFLOAT16: {
        uint16_t h;
        memcpy(&h, p, sizeof(h));
        uint32_t bits = (uint32_t)h << 16;
        float f;
        memcpy(&f, &bits, sizeof(f));
        put_double(b, f, 4);
        return;
    }
    case TSH_INT64: {
        int64_t v;
        memcpy(&v, p, sizeof(v));
        n = snprintf(s, sizeof(s), "%lld", (long long)v);
        break;
    }
    case TSH_INT32: {
        int32_t v;
        memcpy(&v, p, sizeof(v));
        n = snprintf(s, sizeof(s), "%d", v);
        break;
    }
    case TSH_INT16: {
        int16_t v;
        memcpy(&v, p, sizeof(v));
        n = snprintf(s, sizeof(s), "%d", v);
        break;
    }
    case TSH_INT8:
        n = snprintf(s, sizeof(s), "%d", (int)(int8_t)*p);
        break;
    case TSH_UINT8:
        n = snprintf(s, sizeof(s), "%u", (unsigned)*p);
        break;
    case TSH_BOOL:
        n = snprintf(s, sizeof(s), "%s", *p ? "true" : "false");
        break;
    default:
        n = snprintf(s, sizeof(s), "null");
        break;
    }
    buf_put(b, s, (size_t)n);
}

/* Elements [off, off + prod(shape[d..])) as nested lists over dims d..ndim-1. */
static void put_nested(struct buf *b, const struct tsh_tensor *t, int d, int64_t off)
{
    if (d == t->ndim) {
        put_elem(b, t, off);
        return;
    }
    int64_t stride = tsh_numel(t->shape + d + 1, t->ndim - d - 1);
    buf_put_u8(b, '[');
    for (int64_t i = 0; i < t->shape[d]; i++) {
        if (i)
            buf_put(b, ", ", 2);
        put_nested(b, t, d + 1, off + i * stride);
    }
    buf_put_u8(b, ']');
}

void tjson_write_rows(struct buf *b, const struct tsh_tensor *t, int64_t row, int64_t nrows,
                      int single)
{
    int64_t stride = tsh_numel(t->shape + 1, t->ndim - 1);
    if (single) {
        put_nested(b, t, 1, row * stride);
        return;
    }
    buf_put_u8(b, '[');
    for (int64_t i = 0; i < nrows; i++) {
        if (i)
            buf_put(b, ", ", 2);
        put_nested(b, t, 1, (row + i) * stride);
    }
    buf_put_u8(b, ']');
}

void tjson_write_tensor(struct buf *b, const struct tsh_tensor *t)
{
    put_nested(b, t, 0, 0);
}
