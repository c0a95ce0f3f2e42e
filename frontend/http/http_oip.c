/*
 * http_oip: OIP REST (see http_oip.h): the routes, and the JSON of the replies. A request body is
 * read by oip_json.c (JSON, or Triton's binary extension) into raw tensors before a job exists,
 * and oip_req.c turns them into the job's body. Replies go through http_stream.c with this module's
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

#include "http_reply.h"
#include "http_stream.h"
#include "jnum.h"
#include "core/job.h"
#include "log.h"
#include "core/model.h"
#include "oip/oip_req.h"
#include "oip_json.h"
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
        uint64_t u = oip_rd_le(e, es);
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

/* ---------------------------------------------------------------- routes */

enum route { R_INFER, R_INFER_STREAM, R_GENERATE, R_GENERATE_STREAM };

static void infer(struct evhttp_request *req, const char *rid, struct model *m, enum route rt,
                  int versioned)
{
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    size_t len = evbuffer_get_length(in);
    struct submit_error e;
    if (model_check_body(len, &e) != 0) {
        send_error(req, rid, e.status, "%s", e.msg);
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
    struct oip_json_req ps;
    char err[1024];
    int generate_route = rt == R_GENERATE || rt == R_GENERATE_STREAM;
    int stream = rt == R_INFER_STREAM || rt == R_GENERATE_STREAM;
    if (oip_json_parse(&ps, body, len, jlen, ihcl != NULL, generate_route, err, sizeof(err))) {
        send_error(req, rid, 400, "%s", err);
        goto out;
    }

    struct http_call *c = http_call_new(req, rid, stream ? HTTP_STREAM_SSE : HTTP_STREAM_CHUNKED);
    struct job *j = job_new(rid, &http_call_sink, c);
    j->versioned = versioned;
    c->job = j;
    struct evkeyval *h;
    TAILQ_FOREACH(h, hdrs, next)
    {
        if (strcasecmp(h->key, "Content-Type") && strcasecmp(h->key, BINARY_HEADER))
            job_add_header(j, h->key, h->value, strlen(h->value));
    }
    int text = 0;
    ps.r.stream = stream;
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
    oip_json_free(&ps);
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
    struct submit_error e;
    if (model_lookup(name, version, &m, &e) != 0) {
        send_error(req, rid, e.status, "%s", e.msg);
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
            int ready = model_server_ready();
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
            int ready = model_ready(m);
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
            infer(req, rid, m, ops[i].rt, version != NULL);
        return;
    }
    send_error(req, rid, 404, "no such OIP endpoint: %s", op);
}
