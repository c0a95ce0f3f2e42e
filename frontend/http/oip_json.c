/*
 * oip_json: OIP requests in their REST encoding: the JSON body (nested or flat data, names,
 * datatypes, shapes, parameters, requested outputs) and Triton's binary data extension, read
 * into the transport-neutral struct oip_request (oip/oip_req.h), whose checks it shares with
 * the gRPC encoding. The common request shape goes through a hand-written scanner first
 * (oip_json_fast.c); anything else through jansson, whose errors name the field.
 */
#include "oip_json.h"
#include "oip_json_fast.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* 1: parsed into ps by the fast path (oip_json_fast.h); 0: not the common shape (ps is then to
 * be freed and the jansson path run). */
static int fast_parse(struct oip_json_req *ps, char *copy, size_t len)
{
    json_t *outs = NULL;
    char err[16];
    return oip_json_fast_scan(ps, copy, len, &outs) &&
           parse_outputs(ps, outs, err, sizeof(err)) == 0;
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
