/*
 * http_oip: OIP REST (see http_oip.h). Parsing and validation happen here, before a job exists:
 * the JSON request (nested or flat data) or Triton's binary extension becomes raw tensors, which
 * oip_req.c turns into the job's body. Replies go through http_stream.c with this module's
 * transform (a worker frame -> an OIP response JSON) and error_body ({"error"}) hooks, in
 * MLServer's SSE framing on the *_stream routes.
 */
#include "http_oip.h"

#include <event2/buffer.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "http_server.h"
#include "http_stream.h"
#include "jnum.h"
#include "core/job.h"
#include "log.h"
#include "core/model.h"
#include "oip/oip_req.h"
#include "core/core.h"

#define BINARY_HEADER "Inference-Header-Content-Length"

/* Per-call state of an OIP reply (http_call.arg). */
struct oip_http {
    char *model_name;
    char *model_version;
    char *id;           /* echoed: the request's id, else the x-request-id */
    int generate;       /* answer with text_output */
    int whole;          /* one reply at the end (infer / generate) */
    struct buf acc;     /* text chunks so far, for whole replies */
    int binary_all;     /* parameters.binary_data_output */
    json_t *binary_out; /* names of outputs asked with parameters.binary_data (array) */
};

static void oip_http_free(void *arg)
{
    struct oip_http *o = arg;
    free(o->model_name);
    free(o->model_version);
    free(o->id);
    buf_free(&o->acc);
    json_decref(o->binary_out);
    free(o);
}

static void send_error(struct evhttp_request *req, const char *rid, int status, const char *fmt,
                       ...) __attribute__((format(printf, 4, 5)));

static char *error_json(const char *msg)
{
    json_t *o = json_pack("{s:s}", "error", msg);
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return s;
}

static void send_error(struct evhttp_request *req, const char *rid, int status, const char *fmt,
                       ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    char *s = error_json(msg);
    http_send(req, rid, status, "application/json", s, strlen(s));
    free(s);
}

static void send_json(struct evhttp_request *req, const char *rid, int status, json_t *o)
{
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    http_send(req, rid, status, "application/json", s, strlen(s));
    free(s);
}

/* ---------------------------------------------------------------- response JSON */

static void put_double(struct buf *b, double v, int digits)
{
    if (!isfinite(v)) {
        buf_puts(b, "null"); /* JSON has no NaN / Infinity */
        return;
    }
    char tmp[40];
    size_t n = digits == 9 ? jnum_f32(tmp, (float)v) : 0; /* float32's %.9g without printf */
    if (!n)
        n = (size_t)snprintf(tmp, sizeof(tmp), "%.*g", digits, v);
    buf_put(b, tmp, n);
}

static uint64_t rd_le(const uint8_t *p, size_t n)
{
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* The flat data array of a tensor. */
static void put_data(struct buf *b, const struct oip_tensor *t)
{
    buf_put_u8(b, '[');
    if (t->dtype == OIP_BYTES) {
        const uint8_t *p = t->data, *s;
        uint32_t n;
        int first = 1;
        while (oip_bytes_next(&p, t->data + t->nbytes, &s, &n) == 1) {
            if (!first)
                buf_put_u8(b, ',');
            first = 0;
            oip_wire_put_jstr(b, (const char *)s, n);
        }
        buf_put_u8(b, ']');
        return;
    }
    size_t es = oip_dtype_size(t->dtype), n = es ? t->nbytes / es : 0;
    char tmp[32];
    for (size_t i = 0; i < n; i++) {
        const uint8_t *e = t->data + i * es;
        uint64_t u = rd_le(e, es);
        if (i)
            buf_put_u8(b, ',');
        int k = 0;
        switch (t->dtype) {
        case OIP_BOOL:
            buf_puts(b, u ? "true" : "false");
            break;
        case OIP_UINT8:
        case OIP_UINT16:
        case OIP_UINT32:
        case OIP_UINT64:
            k = (int)jnum_u64(tmp, u);
            break;
        case OIP_INT8:
            k = (int)jnum_i64(tmp, (int8_t)u);
            break;
        case OIP_INT16:
            k = (int)jnum_i64(tmp, (int16_t)u);
            break;
        case OIP_INT32:
            k = (int)jnum_i64(tmp, (int32_t)u);
            break;
        case OIP_INT64:
            k = (int)jnum_i64(tmp, (int64_t)u);
            break;
        case OIP_FP16:
            put_double(b, oip_half_to_float((uint16_t)u), 6);
            break;
        case OIP_BF16:
            put_double(b, oip_bf16_to_float((uint16_t)u), 4);
            break;
        case OIP_FP32: {
            uint32_t x = (uint32_t)u;
            float f;
            memcpy(&f, &x, 4);
            put_double(b, f, 9);
            break;
        }
        case OIP_FP64: {
            double d;
            memcpy(&d, &u, 8);
            put_double(b, d, 17);
            break;
        }
        }
        if (k > 0)
            buf_put(b, tmp, (size_t)k);
    }
    buf_put_u8(b, ']');
}

static void put_head(struct buf *b, const struct oip_http *o)
{
    buf_puts(b, "{\"model_name\":");
    oip_wire_put_jstr(b, o->model_name, strlen(o->model_name));
    buf_puts(b, ",\"model_version\":");
    oip_wire_put_jstr(b, o->model_version, strlen(o->model_version));
    buf_puts(b, ",\"id\":");
    oip_wire_put_jstr(b, o->id, strlen(o->id));
}

static void put_text_response(struct buf *b, const struct oip_http *o, const char *s, size_t n)
{
    if (o->generate) {
        buf_puts(b, "{\"text_output\":");
        oip_wire_put_jstr(b, s, n);
        buf_puts(b, ",\"model_name\":");
        oip_wire_put_jstr(b, o->model_name, strlen(o->model_name));
        buf_puts(b, ",\"model_version\":");
        oip_wire_put_jstr(b, o->model_version, strlen(o->model_version));
        buf_puts(b, ",\"id\":");
        oip_wire_put_jstr(b, o->id, strlen(o->id));
        buf_put_u8(b, '}');
        return;
    }
    put_head(b, o);
    buf_puts(b, ",\"outputs\":[{\"name\":\"output\",\"datatype\":\"BYTES\",\"shape\":[1],"
                "\"data\":[");
    oip_wire_put_jstr(b, s, n);
    buf_puts(b, "]}]}");
}

static int output_binary(const struct oip_http *o, const char *name)
{
    if (o->binary_all)
        return 1;
    size_t i;
    json_t *v;
    json_array_foreach(o->binary_out, i, v) if (!strcmp(json_string_value(v), name)) return 1;
    return 0;
}

/* Tensor outputs; binary ones go after the JSON (Triton's extension). */
static void put_tensor_response(struct http_call *c, struct buf *b, struct oip_http *o,
                                const struct oip_result *r)
{
    put_head(b, o);
    if (r->parameters) {
        char *ps = json_dumps(r->parameters, JSON_COMPACT);
        buf_puts(b, ",\"parameters\":");
        buf_puts(b, ps);
        free(ps);
    }
    buf_puts(b, ",\"outputs\":[");
    int any_binary = 0;
    for (size_t i = 0; i < r->n_outputs; i++) {
        const struct oip_tensor *t = &r->outputs[i];
        if (i)
            buf_put_u8(b, ',');
        buf_puts(b, "{\"name\":");
        oip_wire_put_jstr(b, t->name, strlen(t->name));
        buf_puts(b, ",\"datatype\":\"");
        buf_puts(b, oip_dtype_name(t->dtype));
        buf_puts(b, "\",\"shape\":[");
        for (int k = 0; k < t->ndim; k++) {
            char num[JNUM_MAX];
            if (k)
                buf_put_u8(b, ',');
            buf_put(b, num, jnum_i64(num, t->shape[k]));
        }
        buf_put_u8(b, ']');
        if (!c->sse && output_binary(o, t->name)) {
            buf_printf(b, ",\"parameters\":{\"binary_data_size\":%zu}}", t->nbytes);
            any_binary = 1;
            continue;
        }
        buf_puts(b, ",\"data\":");
        put_data(b, t);
        buf_put_u8(b, '}');
    }
    buf_puts(b, "]}");
    if (!any_binary)
        return;
    char n[32];
    snprintf(n, sizeof(n), "%zu", b->len);
    evhttp_add_header(evhttp_request_get_output_headers(c->req), BINARY_HEADER, n);
    c->ctype = "application/octet-stream";
    for (size_t i = 0; i < r->n_outputs; i++)
        if (output_binary(o, r->outputs[i].name))
            buf_put(b, r->outputs[i].data, r->outputs[i].nbytes);
}

static char *finish(struct buf *b, size_t *len)
{
    *len = b->len;
    if (!b->data)
        return xstrdup("");
    return (char *)b->data;
}

static char *oip_transform(struct http_call *c, const struct otf_prediction *p, int final,
                           size_t *len)
{
    struct oip_http *o = c->arg;
    struct oip_result r;
    oip_req_result(p, &r);
    struct buf b;
    buf_init(&b);
    if (r.status >= 400) {
        char *s = error_json(r.error);
        buf_puts(&b, s);
        free(s);
    } else if (r.is_text) {
        if (o->whole) {
            buf_put(&o->acc, r.text, r.text_len);
            if (final)
                put_text_response(&b, o, o->acc.data ? (char *)o->acc.data : "", o->acc.len);
        } else if (r.text_len) {
            put_text_response(&b, o, r.text, r.text_len);
        }
    } else {
        put_tensor_response(c, &b, o, &r);
    }
    oip_req_result_free(&r);
    return finish(&b, len);
}

static char *oip_error_body(struct http_call *c, int status, const char *type, const char *msg)
{
    (void)c;
    (void)status;
    (void)type;
    return error_json(msg);
}

/* An OIP call answers JSON through transform(arg), and errors as OIP's {"error": msg}. */
static void oip_call_setup(struct http_call *c, void *arg, void (*arg_free)(void *),
                           http_transform_fn *transform)
{
    c->arg = arg;
    c->arg_free = arg_free;
    c->transform = transform;
    c->error_body = oip_error_body;
    c->ctype = "application/json";
}

/* ---------------------------------------------------------------- request parsing */

struct parsed {
    struct oip_request r;
    struct buf raw; /* JSON data converted to raw tensors */
    size_t off[OIP_MAX_TENSORS];
    int from_raw[OIP_MAX_TENSORS]; /* data is in raw (else in the binary section) */
    int binary_all;
    json_t *binary_out;
    json_t *own[OIP_MAX_TENSORS + 2]; /* fast path: parameters / outputs parsed by jansson */
    int n_own;
};

/* Everything but the per-tensor slots, which the parsers clear as they use them: a memset
 * of all OIP_MAX_TENSORS of them would cost more than parsing a small request. */
static void parsed_init(struct parsed *ps)
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

static void parsed_free(struct parsed *ps)
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

static void shape_str(char *out, size_t n, const int64_t *shape, int ndim)
{
    size_t k = (size_t)snprintf(out, n, "[");
    for (int i = 0; i < ndim && k < n; i++)
        k += (size_t)snprintf(out + k, n - k, "%s%lld", i ? "," : "", (long long)shape[i]);
    if (k < n)
        snprintf(out + k, n - k, "]");
}

static int parse_input(struct parsed *ps, json_t *in, size_t i, const uint8_t **bin,
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
    json_t *prm = json_object_get(in, "parameters");
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
    shape_str(sh, sizeof(sh), t->shape, t->ndim);
    int64_t numel = oip_numel(t->shape, t->ndim);
    if (numel < 0 || numel > srv->cfg.max_request_size) {
        snprintf(err, errlen, "inputs[%zu].shape %s is too large", i, sh);
        return -1;
    }
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
static int parse_outputs(struct parsed *ps, json_t *outs, char *err, size_t errlen)
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
        if (json_is_true(json_object_get(json_object_get(o, "parameters"), "binary_data"))) {
            if (!ps->binary_out)
                ps->binary_out = json_array();
            json_array_append(ps->binary_out, n);
        }
    }
    return 0;
}

/* 0, or -1 with err (400). */
static int parse_request(struct parsed *ps, json_t *root, int generate_route, const uint8_t *bin,
                         size_t binlen, char *err, size_t errlen)
{
    struct oip_request *r = &ps->r;
    if (!json_is_object(root)) {
        snprintf(err, errlen, "request body: expected a JSON object");
        return -1;
    }
    json_t *id = json_object_get(root, "id");
    if (id && !json_is_string(id)) {
        snprintf(err, errlen, "id: expected a string");
        return -1;
    }
    r->id = id ? json_string_value(id) : NULL;
    json_t *prm = json_object_get(root, "parameters");
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
    /* raw may have moved while it grew: point the JSON-data inputs into it now */
    for (i = 0; i < r->n_inputs; i++)
        if (ps->from_raw[i])
            r->inputs[i].data = ps->raw.data ? ps->raw.data + ps->off[i] : (const uint8_t *)"";
    return parse_outputs(ps, json_object_get(root, "outputs"), err, errlen);
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

/* A skipped value parsed by jansson, owned by ps. */
static json_t *fspan(struct jcur *f, struct parsed *ps)
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

/* The number fnum found at s as (float)strtod(s) (jnum, else strtod itself). */
static float fnum_f32(const struct jcur *f, const char *s)
{
    const char *next;
    float v;
    if (jnum_scan_f32(s, f->end, &next, &v))
        v = (float)strtod(s, NULL);
    return v;
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
            if (!s)
                return -1;
            v = (float)strtod(s, NULL);
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
        float v = fnum_f32(f, s);
        memcpy(le, &v, 4);
        buf_put(b, le, 4);
        return 0;
    }
    case OIP_FP64: {
        double v = strtod(s, NULL);
        memcpy(le, &v, 8);
        buf_put(b, le, 8);
        return 0;
    }
    case OIP_FP16:
    case OIP_BF16: {
        float v = fnum_f32(f, s);
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

static int finput(struct jcur *f, struct parsed *ps)
{
    size_t i = ps->r.n_inputs;
    struct oip_tensor *t = &ps->r.inputs[i];
    char *data_at = NULL;
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
            const char *dt = jcur_str(f, NULL);
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
            }
            have |= 8;
        } else if (!strcmp(key, "parameters")) {
            json_t *prm = fspan(f, ps);
            if (!json_is_object(prm) || json_object_get(prm, "binary_data_size"))
                return -1;
            t->parameters = prm;
        } else if (fskip(f, 0)) {
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
        if (fdata(&d, &ps->raw, t->dtype, &count, 0))
            return -1;
    }
    if ((int64_t)count != numel)
        return -1;
    t->nbytes = ps->raw.len - ps->off[i];
    ps->r.n_inputs++;
    return 0;
}

/* 1: parsed into ps; 0: not the common shape (ps is then to be freed and the jansson path run). */
static int fast_parse(struct parsed *ps, char *copy, size_t len)
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
        } else if (!strcmp(key, "text_input") || fskip(&f, 0)) {
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

/* ---------------------------------------------------------------- routes */

enum route { R_INFER, R_INFER_STREAM, R_GENERATE, R_GENERATE_STREAM };

static void infer(struct evhttp_request *req, const char *rid, struct model *m, enum route rt)
{
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    size_t len = evbuffer_get_length(in);
    if ((long)len > srv->cfg.max_request_size) {
        send_error(req, rid, 413, "request body of %zu bytes exceeds max_request_size (%ld bytes)",
                   len, srv->cfg.max_request_size);
        return;
    }
    const uint8_t *body = evbuffer_pullup(in, -1);
    if (!body)
        body = (const uint8_t *)""; /* an empty body */
    size_t jlen = len;
    struct evkeyvalq *hdrs = evhttp_request_get_input_headers(req);
    const char *ihcl = evhttp_find_header(hdrs, BINARY_HEADER);
    if (ihcl) {
        long n;
        if (ts_parse_long(ihcl, 0, (long)len, &n)) {
            send_error(req, rid, 400,
                       BINARY_HEADER ": \"%s\" is not a length within the %zu-byte "
                                     "body",
                       ihcl, len);
            return;
        }
        if (n == 0) {
            send_error(req, rid, 400,
                       BINARY_HEADER ": 0 (a raw binary request without JSON) is not supported");
            return;
        }
        jlen = (size_t)n;
    }
    struct parsed ps;
    parsed_init(&ps);
    char err[1024];
    int generate_route = rt == R_GENERATE || rt == R_GENERATE_STREAM;
    int stream = rt == R_INFER_STREAM || rt == R_GENERATE_STREAM;
    json_t *root = NULL;
    char *copy = NULL;
    if (!ihcl) {
        copy = xmalloc(len + 1);
        memcpy(copy, body, len);
        copy[len] = '\0';
        if (!fast_parse(&ps, copy, len)) {
            parsed_free(&ps);
            parsed_init(&ps);
        } else {
            goto parsed;
        }
    }
    json_error_t jerr;
    root = json_loadb((const char *)body, jlen, 0, &jerr);
    if (!root) {
        send_error(req, rid, 400, "malformed JSON request body: %s (line %d, column %d)", jerr.text,
                   jerr.line, jerr.column);
        goto out;
    }
    if (parse_request(&ps, root, generate_route, body + jlen, len - jlen, err, sizeof(err))) {
        send_error(req, rid, 400, "%s", err);
        goto out;
    }
parsed:;

    struct http_call *c = http_call_new(req, rid, stream ? HTTP_STREAM_SSE : HTTP_STREAM_CHUNKED);
    struct job *j = job_new(rid, &http_call_sink, c);
    c->job = j;
    struct evkeyval *h;
    TAILQ_FOREACH(h, hdrs, next)
    {
        if (strcasecmp(h->key, "Content-Type") && strcasecmp(h->key, BINARY_HEADER))
            job_add_header(j, h->key, h->value, strlen(h->value));
    }
    int text = 0;
    if (oip_req_to_job(m, &ps.r, j, &text, err, sizeof(err))) {
        http_call_free(c);
        send_error(req, rid, 400, "%s", err);
        goto out;
    }
    struct oip_http *o = xcalloc(1, sizeof(*o));
    o->model_name = xstrdup(m->name);
    o->model_version = xstrdup(m->version);
    o->id = xstrdup(ps.r.id ? ps.r.id : rid);
    o->generate = ps.r.generate;
    o->whole = !stream;
    o->binary_all = ps.binary_all;
    o->binary_out = ps.binary_out;
    ps.binary_out = NULL;
    buf_init(&o->acc);
    oip_call_setup(c, o, oip_http_free, oip_transform);
    c->sse_bare = 1;
    c->whole = !stream;

    struct submit_error e;
    int rc = model_submit_request(m, j, &e);
    if (rc == 1) { /* a sequence cancel (parameters), carried out by the frontend */
        http_call_free(c);
        send_json(req, rid, 200, json_pack("{s:s}", "status", e.msg));
    } else if (rc < 0) {
        http_call_reject(c, e.status, e.type, e.msg);
    } else {
        http_call_watch(c);
    }
out:
    parsed_free(&ps);
    json_decref(root);
    free(copy);
}

/* Metadata the worker completes (a TorchScript model without handler.inputs in its yaml). */
static char *metadata_transform(struct http_call *c, const struct otf_prediction *p, int final,
                                size_t *len)
{
    json_t *md = c->arg;
    if (!final) {
        *len = 0;
        return xstrdup("");
    }
    oip_req_metadata_merge(md, p);
    char *s = json_dumps(md, JSON_COMPACT);
    *len = strlen(s);
    return s;
}

static void metadata_free(void *arg)
{
    json_decref(arg);
}

static void model_metadata(struct evhttp_request *req, const char *rid, struct model *m)
{
    json_t *md = oip_req_metadata(m);
    if (!oip_req_metadata_from_worker(m, md)) {
        send_json(req, rid, 200, md);
        return;
    }
    struct http_call *c = http_call_new(req, rid, HTTP_STREAM_CHUNKED);
    struct job *j = job_new(rid, &http_call_sink, c);
    c->job = j;
    oip_req_metadata_job(j);
    oip_call_setup(c, md, metadata_free, metadata_transform);
    c->whole = 1;
    struct submit_error e;
    int rc = model_submit_request(m, j, &e);
    if (rc < 0)
        http_call_reject(c, e.status, e.type, e.msg);
    else if (rc == 1)
        http_call_free(c);
    else
        http_call_watch(c);
}

/* Looks the model up; on failure answers 404 and returns NULL. */
static struct model *find_model(struct evhttp_request *req, const char *rid, const char *name,
                                const char *version)
{
    struct model *m;
    int rc = model_find(name, version, &m);
    if (rc == TS_E_MODEL_NOT_FOUND) {
        send_error(req, rid, 404, "Model %s not found", name);
        return NULL;
    }
    if (rc) {
        send_error(req, rid, 404, "Model %s has no version %s", name, version);
        return NULL;
    }
    return m;
}

static int method_is(struct evhttp_request *req, const char *rid, enum evhttp_cmd_type want)
{
    enum evhttp_cmd_type cmd = evhttp_request_get_command(req);
    if (cmd == want || (want == EVHTTP_REQ_GET && cmd == EVHTTP_REQ_HEAD))
        return 1;
    send_error(req, rid, 405, "method not allowed: use %s",
               want == EVHTTP_REQ_GET ? "GET" : "POST");
    return 0;
}

void http_oip_handle(struct evhttp_request *req, const char *rid, const struct http_path *p)
{
    char *const *s = p->seg;
    int n = p->n;
    if (n == 1) {
        if (method_is(req, rid, EVHTTP_REQ_GET))
            send_json(req, rid, 200, oip_req_server_metadata());
        return;
    }
    if (n == 3 && !strcmp(s[1], "health") && !strcmp(s[2], "live")) {
        if (method_is(req, rid, EVHTTP_REQ_GET))
            send_json(req, rid, 200, json_pack("{s:b}", "live", 1));
        return;
    }
    if (n == 3 && !strcmp(s[1], "health") && !strcmp(s[2], "ready")) {
        if (method_is(req, rid, EVHTTP_REQ_GET)) {
            int ready = oip_req_server_ready();
            send_json(req, rid, ready ? 200 : 503, json_pack("{s:b}", "ready", ready));
        }
        return;
    }
    if (n < 3 || strcmp(s[1], "models")) {
        send_error(req, rid, 404, "no such OIP endpoint");
        return;
    }
    const char *name = s[2], *version = NULL;
    int k = 3;
    if (k < n && !strcmp(s[k], "versions")) {
        if (k + 1 >= n) {
            send_error(req, rid, 404, "no such OIP endpoint");
            return;
        }
        version = s[k + 1];
        k += 2;
    }
    const char *op = k < n ? s[k] : "";
    if (k + 1 < n) {
        send_error(req, rid, 404, "no such OIP endpoint");
        return;
    }
    static const struct {
        const char *name;
        enum route rt;
    } ops[] = {{"infer", R_INFER},
               {"infer_stream", R_INFER_STREAM},
               {"generate", R_GENERATE},
               {"generate_stream", R_GENERATE_STREAM}};
    if (!*op || !strcmp(op, "ready")) {
        if (!method_is(req, rid, EVHTTP_REQ_GET))
            return;
        struct model *m = find_model(req, rid, name, version);
        if (!m)
            return;
        if (*op) {
            int ready = oip_req_model_ready(m);
            send_json(req, rid, ready ? 200 : 503,
                      json_pack("{s:s, s:b}", "name", m->name, "ready", ready));
        } else {
            model_metadata(req, rid, m);
        }
        return;
    }
    for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
        if (strcmp(op, ops[i].name))
            continue;
        if (!method_is(req, rid, EVHTTP_REQ_POST))
            return;
        struct model *m = find_model(req, rid, name, version);
        if (m)
            infer(req, rid, m, ops[i].rt);
        return;
    }
    send_error(req, rid, 404, "no such OIP endpoint: %s", op);
}
