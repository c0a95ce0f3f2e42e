/*
 * oip_json: OIP requests in their REST encoding: the JSON body (nested or flat data, names,
 * datatypes, shapes, parameters, requested outputs) and Triton's binary data extension, read
 * into the transport-neutral struct oip_request (oip/oip_req.h), whose checks it shares with
 * the gRPC encoding. The common request shape goes through a hand-written scanner first (see
 * "fast path"); anything else through jansson, whose errors name the field.
 */
#include "oip_json.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "jnum.h"
#include "oip/oip_req.h"
#include "util.h"

/* Everything but the per-tensor slots, which the parsers clear as they use them: a memset
 * of all OIP_MAX_TENSORS of them would cost more than parsing a small request. */
static void parsed_init(struct oip_json_req *ps)
{
    struct oip_request *r = &ps->r;
    r->id = NULL;
    r->parameters = NULL;
    r->n_inputs = r->n_outputs = 0;
    r->generate = 0;
    r->text_input = NULL;
    r->text_len = 0;
    buf_init(&ps->raw);
    ps->binary_all = 0;
    ps->binary_out = NULL;
    ps->n_own = 0;
}

static void parsed_free(struct oip_json_req *ps)
{
    json_decref(ps->binary_out);
    for (int i = 0; i < ps->n_own; i++)
        json_decref(ps->own[i]);
    buf_free(&ps->raw);
    ps->binary_out = NULL;
    ps->n_own = 0;
}

static int elem_to_raw(struct buf *b, int dtype, json_t *v, size_t idx, size_t ti, char *err,
                       size_t errlen)
{
    static const struct {
        long long lo;
        unsigned long long hi;
    } range[OIP_DTYPE_COUNT] = {
        [OIP_UINT8] = {0, 255},
        [OIP_UINT16] = {0, 65535},
        [OIP_UINT32] = {0, 4294967295ULL},
        [OIP_UINT64] = {0, (unsigned long long)INT64_MAX},
        [OIP_INT8] = {-128, 127},
        [OIP_INT16] = {-32768, 32767},
        [OIP_INT32] = {INT32_MIN, INT32_MAX},
        [OIP_INT64] = {INT64_MIN, (unsigned long long)INT64_MAX},
    };
    const char *got = json_is_string(v)    ? "string"
                      : json_is_integer(v) ? "integer"
                      : json_is_real(v)    ? "number"
                      : json_is_boolean(v) ? "boolean"
                      : json_is_null(v)    ? "null"
                                           : "object";
    uint8_t le[8];
    switch (dtype) {
    case OIP_BOOL:
        if (!json_is_boolean(v))
            goto bad;
        buf_put_u8(b, json_is_true(v) ? 1 : 0);
        return 0;
    case OIP_BYTES: {
        if (!json_is_string(v))
            goto bad;
        size_t n = json_string_length(v);
        uint8_t l4[4] = {(uint8_t)n, (uint8_t)(n >> 8), (uint8_t)(n >> 16), (uint8_t)(n >> 24)};
        buf_put(b, l4, 4);
        buf_put(b, json_string_value(v), n);
        return 0;
    }
    case OIP_FP16:
    case OIP_BF16:
    case OIP_FP32:
    case OIP_FP64: {
        if (!json_is_number(v))
            goto bad;
        double d = json_number_value(v);
        if (dtype == OIP_FP64) {
            memcpy(le, &d, 8);
            buf_put(b, le, 8);
        } else if (dtype == OIP_FP32) {
            float f = (float)d;
            memcpy(le, &f, 4);
            buf_put(b, le, 4);
        } else {
            uint16_t h =
                dtype == OIP_FP16 ? oip_float_to_half((float)d) : oip_float_to_bf16((float)d);
            uint8_t h2[2] = {(uint8_t)h, (uint8_t)(h >> 8)};
            buf_put(b, h2, 2);
        }
        return 0;
    }
    default: {
        if (!json_is_integer(v))
            goto bad;
        long long x = json_integer_value(v);
        if (x < range[dtype].lo || (x > 0 && (unsigned long long)x > range[dtype].hi)) {
            snprintf(err, errlen, "inputs[%zu].data[%zu]: %lld is out of range for %s", ti, idx, x,
                     oip_dtype_name(dtype));
            return -1;
        }
        uint64_t u = (uint64_t)x;
        size_t es = oip_dtype_size(dtype);
        for (size_t k = 0; k < es; k++)
            le[k] = (uint8_t)(u >> (8 * k));
        buf_put(b, le, es);
        return 0;
    }
    }
bad:
    snprintf(err, errlen, "inputs[%zu].data[%zu]: expected %s for datatype %s, got %s", ti, idx,
             dtype == OIP_BOOL                        ? "a boolean"
             : dtype == OIP_BYTES                     ? "a string"
             : dtype >= OIP_FP16 && dtype <= OIP_BF16 ? "a number"
                                                      : "an integer",
             oip_dtype_name(dtype), got);
    return -1;
}

/* Nested or flat data, row-major, into b; *count elements. */
static int data_to_raw(struct buf *b, int dtype, json_t *v, size_t *count, size_t ti, int depth,
                       char *err, size_t errlen)
{
    if (!json_is_array(v))
        return elem_to_raw(b, dtype, v, (*count)++, ti, err, errlen);
    if (depth > OIP_MAX_DIMS) {
        snprintf(err, errlen, "inputs[%zu].data: nested deeper than %d levels", ti, OIP_MAX_DIMS);
        return -1;
    }
    size_t i;
    json_t *e;
    json_array_foreach(v, i, e)
    {
        if (data_to_raw(b, dtype, e, count, ti, depth + 1, err, errlen))
            return -1;
    }
    return 0;
}

/* obj[key], with null taken as absent: pydantic clients (MLServer's, whose example sends
 * `request.dict()`) write every unset optional field as null. */
static json_t *opt_get(json_t *obj, const char *key)
{
    json_t *v = json_object_get(obj, key);
    return json_is_null(v) ? NULL : v;
}

static int parse_input(struct oip_json_req *ps, json_t *in, size_t i, const uint8_t **bin,
                       const uint8_t *bin_end, char *err, size_t errlen)
{
    struct oip_tensor *t = &ps->r.inputs[i];
    memset(t, 0, sizeof(*t));
    ps->from_raw[i] = 0;
    if (!json_is_object(in)) {
        snprintf(err, errlen, "inputs[%zu]: expected an object", i);
        return -1;
    }
    json_t *name = json_object_get(in, "name"), *dt = json_object_get(in, "datatype");
    json_t *shape = json_object_get(in, "shape"), *data = json_object_get(in, "data");
    json_t *prm = opt_get(in, "parameters");
    if (!json_is_string(name)) {
        snprintf(err, errlen, "inputs[%zu].name: expected a string", i);
        return -1;
    }
    t->name = json_string_value(name);
    if (!json_is_string(dt)) {
        snprintf(err, errlen, "inputs[%zu].datatype: expected a string", i);
        return -1;
    }
    t->dtype = oip_dtype_from_name(json_string_value(dt));
    if (t->dtype < 0) {
        snprintf(err, errlen,
                 "inputs[%zu].datatype: unknown datatype \"%s\" (expected BOOL, UINT8..UINT64, "
                 "INT8..INT64, FP16, FP32, FP64, BF16 or BYTES)",
                 i, json_string_value(dt));
        return -1;
    }
    if (!json_is_array(shape) || json_array_size(shape) > OIP_MAX_DIMS) {
        snprintf(err, errlen, "inputs[%zu].shape: expected an array of at most %d sizes", i,
                 OIP_MAX_DIMS);
        return -1;
    }
    size_t k;
    json_t *d;
    json_array_foreach(shape, k, d)
    {
        if (!json_is_integer(d) || json_integer_value(d) < 0) {
            snprintf(err, errlen, "inputs[%zu].shape[%zu]: expected an integer >= 0", i, k);
            return -1;
        }
        t->shape[t->ndim++] = json_integer_value(d);
    }
    if (prm && !json_is_object(prm)) {
        snprintf(err, errlen, "inputs[%zu].parameters: expected an object", i);
        return -1;
    }
    t->parameters = prm;
    char sh[128], why[256];
    int64_t numel;
    if (oip_req_check_shape(t, i, &numel, sh, sizeof(sh), err, errlen))
        return -1;
    json_t *bsz = json_object_get(prm, "binary_data_size");
    if (bsz) {
        if (!json_is_integer(bsz) || json_integer_value(bsz) < 0) {
            snprintf(err, errlen,
                     "inputs[%zu].parameters.binary_data_size: expected an integer "
                     ">= 0",
                     i);
            return -1;
        }
        if (data) {
            snprintf(err, errlen, "inputs[%zu]: has both data and binary_data_size", i);
            return -1;
        }
        size_t n = (size_t)json_integer_value(bsz);
        if (!*bin || (size_t)(bin_end - *bin) < n) {
            snprintf(err, errlen,
                     "inputs[%zu].parameters.binary_data_size: %zu bytes exceed the binary data "
                     "after the JSON header",
                     i, n);
            return -1;
        }
        t->data = *bin;
        t->nbytes = n;
        *bin += n;
        if (oip_check_data(t->dtype, t->shape, t->ndim, t->data, n, why, sizeof(why))) {
            snprintf(err, errlen, "inputs[%zu] (binary): %s", i, why);
            return -1;
        }
        return 0;
    }
    if (!data) {
        snprintf(err, errlen, "inputs[%zu].data: missing", i);
        return -1;
    }
    size_t count = 0;
    ps->off[i] = ps->raw.len;
    ps->from_raw[i] = 1;
    if (data_to_raw(&ps->raw, t->dtype, data, &count, i, 0, err, errlen))
        return -1;
    if ((int64_t)count != numel) {
        snprintf(err, errlen, "inputs[%zu].shape %s does not match %zu data elements", i, sh,
                 count);
        return -1;
    }
    t->nbytes = ps->raw.len - ps->off[i];
    return 0;
}

/* "outputs": [{"name", "parameters"?: {"binary_data"}}] */
static int parse_outputs(struct oip_json_req *ps, json_t *outs, char *err, size_t errlen)
{
    struct oip_request *r = &ps->r;
    size_t i;
    if (outs && !json_is_array(outs)) {
        snprintf(err, errlen, "outputs: expected an array");
        return -1;
    }
    if (json_array_size(outs) > OIP_MAX_TENSORS) {
        snprintf(err, errlen, "outputs: more than %d tensors", OIP_MAX_TENSORS);
        return -1;
    }
    json_t *o;
    json_array_foreach(outs, i, o)
    {
        json_t *n = json_object_get(o, "name");
        if (!json_is_string(n)) {
            snprintf(err, errlen, "outputs[%zu].name: expected a string", i);
            return -1;
        }
        r->outputs[r->n_outputs++] = json_string_value(n);
        if (json_is_true(json_object_get(opt_get(o, "parameters"), "binary_data"))) {
            if (!ps->binary_out)
                ps->binary_out = json_array();
            json_array_append(ps->binary_out, n);
        }
    }
    return 0;
}

/* 0, or -1 with err (400). */
static int parse_request(struct oip_json_req *ps, json_t *root, int generate_route,
                         const uint8_t *bin, size_t binlen, char *err, size_t errlen)
{
    struct oip_request *r = &ps->r;
    if (!json_is_object(root)) {
        snprintf(err, errlen, "request body: expected a JSON object");
        return -1;
    }
    json_t *id = opt_get(root, "id");
    if (id && !json_is_string(id)) {
        snprintf(err, errlen, "id: expected a string");
        return -1;
    }
    r->id = id ? json_string_value(id) : NULL;
    json_t *prm = opt_get(root, "parameters");
    if (prm && !json_is_object(prm)) {
        snprintf(err, errlen, "parameters: expected an object");
        return -1;
    }
    r->parameters = prm;
    json_t *bo = json_object_get(prm, "binary_data_output");
    ps->binary_all = json_is_true(bo);

    json_t *ti = json_object_get(root, "text_input");
    if (generate_route && ti) {
        if (!json_is_string(ti)) {
            snprintf(err, errlen, "text_input: expected a string");
            return -1;
        }
        r->generate = 1;
        r->text_input = json_string_value(ti);
        r->text_len = json_string_length(ti);
        return 0;
    }
    json_t *inputs = json_object_get(root, "inputs");
    if (!json_is_array(inputs) || !json_array_size(inputs)) {
        snprintf(err, errlen,
                 generate_route ? "text_input: missing (or an OIP \"inputs\" array)"
                                : "inputs: expected a non-empty array");
        return -1;
    }
    if (json_array_size(inputs) > OIP_MAX_TENSORS) {
        snprintf(err, errlen, "inputs: more than %d tensors", OIP_MAX_TENSORS);
        return -1;
    }
    const uint8_t *bp = binlen ? bin : NULL, *bend = bin + binlen;
    size_t i;
    json_t *in;
    json_array_foreach(inputs, i, in)
    {
        if (parse_input(ps, in, i, &bp, bend, err, errlen))
            return -1;
        r->n_inputs++;
    }
    if (bp && bp != bend) {
        snprintf(err, errlen, "%zu bytes of binary data after the JSON header belong to no input",
                 (size_t)(bend - bp));
        return -1;
    }
    oip_req_point_inputs(r, &ps->raw, ps->off, ps->from_raw);
    return parse_outputs(ps, opt_get(root, "outputs"), err, errlen);
}

/* ---------------------------------------------------------------- fast path
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

/* 1: parsed into ps; 0: not the common shape (ps is then to be freed and the jansson path run). */
static int fast_parse(struct oip_json_req *ps, char *copy, size_t len)
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
    char err[16];
    return parse_outputs(ps, outs, err, sizeof(err)) == 0;
}

int oip_json_parse(struct oip_json_req *ps, const uint8_t *body, size_t len, size_t jlen,
                   int binary, int generate_route, char *err, size_t errlen)
{
    parsed_init(ps);
    ps->root = NULL;
    ps->copy = NULL;
    if (!binary) {
        ps->copy = xmalloc(len + 1);
        memcpy(ps->copy, body, len);
        ps->copy[len] = '\0';
        if (fast_parse(ps, ps->copy, len))
            return 0;
        parsed_free(ps);
        parsed_init(ps);
    }
    json_error_t jerr;
    ps->root = json_loadb((const char *)body, jlen, 0, &jerr);
    if (!ps->root) {
        snprintf(err, errlen, "malformed JSON request body: %s (line %d, column %d)", jerr.text,
                 jerr.line, jerr.column);
        return -1;
    }
    return parse_request(ps, ps->root, generate_route, body + jlen, len - jlen, err, errlen);
}

void oip_json_free(struct oip_json_req *ps)
{
    parsed_free(ps);
    json_decref(ps->root);
    free(ps->copy);
    ps->root = NULL;
    ps->copy = NULL;
}
