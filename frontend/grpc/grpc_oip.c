/*
 * grpc_oip: inference.GRPCInferenceService (the OIP gRPC data plane, proto/oip_grpc.proto) on the
 * gRPC inference port, on top of grpc_server.h's call machinery and oip_req.h.
 *
 * ModelInfer takes tensors in `contents` or in `raw_input_contents` and answers in the same form
 * (raw when the request was raw, or when an output is FP16/BF16, which contents cannot carry).
 * A streaming handler's partial results are joined into one response.
 *
 * ModelStreamInfer (bidi): every request message is a job of its own, submitted at once, so the
 * requests of one stream run concurrently (and batch together). Responses leave in request
 * order: a request's frames are written when it is the oldest unfinished one, and held until
 * then otherwise; each partial result of a streaming handler is one response. A failed request
 * is answered in band (Triton: ModelStreamInferResponse.error_message) and the stream stays open
 * until the client half-closes and every request is answered. With oip_stream_response=mlserver
 * the responses are plain ModelInferResponse (MLServer's form) and an error ends the call.
 * Loop thread only (grpc_server.h runs every callback there).
 */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "grpc_server.h"
#include "core/job.h"
#include "log.h"
#include "core/model.h"
#include "oip_grpc.pb-c.h"
#include "oip/oip_req.h"
#include "core/core.h"

#define SVC "/inference.GRPCInferenceService/"
#define MAX_INFLIGHT 64 /* requests of one stream in flight before reading pauses */

struct gevent {
    int status; /* >= 400 with msg: an error */
    char *ctype;
    char *body;
    size_t len;
    int final;
    struct gevent *next;
};

struct gstream;

struct greq {
    struct gstream *st; /* NULL for unary ModelInfer */
    struct gcall *call; /* unary only */
    struct job *job;
    char *id, *model_name, *model_version;
    int raw_out;
    int empty_final;              /* triton_enable_empty_final_response */
    struct buf acc;               /* unary: text chunks so far */
    struct gevent *ev, **ev_tail; /* frames held until this is the oldest request */
    int done;
    TAILQ_ENTRY(greq) link;
};

struct gstream {
    struct gcall *call;
    TAILQ_HEAD(, greq) reqs;
    size_t n;
    int half_closed;
    int held;
    int mlserver;
    int over; /* the call was finished (mlserver error) */
};

static void greq_free(struct greq *q)
{
    if (q->job)
        job_unref(q->job);
    for (struct gevent *e = q->ev, *n; e; e = n) {
        n = e->next;
        free(e->ctype);
        free(e->body);
        free(e);
    }
    free(q->id);
    free(q->model_name);
    free(q->model_version);
    buf_free(&q->acc);
    free(q);
}

/* ---------------------------------------------------------------- parameters */

static json_t *param_json(const Inference__InferParameter *p)
{
    if (!p)
        return json_null();
    switch (p->parameter_choice_case) {
    case INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_BOOL_PARAM:
        return json_boolean(p->bool_param);
    case INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_INT64_PARAM:
        return json_integer(p->int64_param);
    case INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_STRING_PARAM:
        return json_string(p->string_param ? p->string_param : "");
    case INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_DOUBLE_PARAM:
        return json_real(p->double_param);
    case INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_UINT64_PARAM:
        return json_integer((json_int_t)p->uint64_param);
    default:
        return json_null();
    }
}

/* Every generated map entry is {base, key, value}: one macro reads them all. */
#define PARAMS_JSON(entries, n)                                                                    \
    ({                                                                                             \
        json_t *o_ = (n) ? json_object() : NULL;                                                   \
        for (size_t i_ = 0; i_ < (n); i_++)                                                        \
            if ((entries)[i_]->key)                                                                \
                json_object_set_new(o_, (entries)[i_]->key, param_json((entries)[i_]->value));     \
        o_;                                                                                        \
    })

/* ---------------------------------------------------------------- requests */

struct parsed {
    struct oip_request r;
    struct buf raw;
    size_t off[OIP_MAX_TENSORS];
    int from_raw[OIP_MAX_TENSORS];
    json_t *params;
    json_t *in_params[OIP_MAX_TENSORS];
    int raw_in;
};

static void parsed_free(struct parsed *ps)
{
    buf_free(&ps->raw);
    json_decref(ps->params);
    for (size_t i = 0; i < OIP_MAX_TENSORS; i++)
        json_decref(ps->in_params[i]);
}

static int contents_empty(const Inference__InferTensorContents *c)
{
    return !c || (!c->n_bool_contents && !c->n_int_contents && !c->n_int64_contents &&
                  !c->n_uint_contents && !c->n_uint64_contents && !c->n_fp32_contents &&
                  !c->n_fp64_contents && !c->n_bytes_contents);
}

static void put_le(struct buf *b, uint64_t v, size_t n)
{
    uint8_t le[8];
    for (size_t k = 0; k < n; k++)
        le[k] = (uint8_t)(v >> (8 * k));
    buf_put(b, le, n);
}

static int contents_to_raw(struct buf *b, int dt, const Inference__InferTensorContents *c,
                           size_t ti, size_t *count, char *err, size_t errlen)
{
    static const Inference__InferTensorContents empty = INFERENCE__INFER_TENSOR_CONTENTS__INIT;
    if (!c)
        c = &empty;
    size_t es = oip_dtype_size(dt);
    switch (dt) {
    case OIP_BOOL:
        for (size_t i = 0; i < c->n_bool_contents; i++)
            buf_put_u8(b, c->bool_contents[i] ? 1 : 0);
        *count = c->n_bool_contents;
        return 0;
    case OIP_INT8:
    case OIP_INT16:
    case OIP_INT32: {
        int64_t lo = dt == OIP_INT8 ? -128 : dt == OIP_INT16 ? -32768 : INT32_MIN;
        int64_t hi = dt == OIP_INT8 ? 127 : dt == OIP_INT16 ? 32767 : INT32_MAX;
        for (size_t i = 0; i < c->n_int_contents; i++) {
            if (c->int_contents[i] < lo || c->int_contents[i] > hi) {
                snprintf(err, errlen,
                         "inputs[%zu].contents.int_contents[%zu]: %d is out of range "
                         "for %s",
                         ti, i, c->int_contents[i], oip_dtype_name(dt));
                return -1;
            }
            put_le(b, (uint64_t)(int64_t)c->int_contents[i], es);
        }
        *count = c->n_int_contents;
        return 0;
    }
    case OIP_UINT8:
    case OIP_UINT16:
    case OIP_UINT32: {
        uint32_t hi = dt == OIP_UINT8 ? 255 : dt == OIP_UINT16 ? 65535 : UINT32_MAX;
        for (size_t i = 0; i < c->n_uint_contents; i++) {
            if (c->uint_contents[i] > hi) {
                snprintf(err, errlen,
                         "inputs[%zu].contents.uint_contents[%zu]: %u is out of range "
                         "for %s",
                         ti, i, c->uint_contents[i], oip_dtype_name(dt));
                return -1;
            }
            put_le(b, c->uint_contents[i], es);
        }
        *count = c->n_uint_contents;
        return 0;
    }
    case OIP_INT64:
        for (size_t i = 0; i < c->n_int64_contents; i++)
            put_le(b, (uint64_t)c->int64_contents[i], 8);
        *count = c->n_int64_contents;
        return 0;
    case OIP_UINT64:
        for (size_t i = 0; i < c->n_uint64_contents; i++)
            put_le(b, c->uint64_contents[i], 8);
        *count = c->n_uint64_contents;
        return 0;
    case OIP_FP32:
        buf_put(b, c->fp32_contents, c->n_fp32_contents * 4); /* the host is little-endian */
        *count = c->n_fp32_contents;
        return 0;
    case OIP_FP64:
        buf_put(b, c->fp64_contents, c->n_fp64_contents * 8);
        *count = c->n_fp64_contents;
        return 0;
    case OIP_BYTES:
        for (size_t i = 0; i < c->n_bytes_contents; i++) {
            put_le(b, c->bytes_contents[i].len, 4);
            buf_put(b, c->bytes_contents[i].data, c->bytes_contents[i].len);
        }
        *count = c->n_bytes_contents;
        return 0;
    default:
        snprintf(err, errlen, "inputs[%zu]: %s cannot travel in contents: use raw_input_contents",
                 ti, oip_dtype_name(dt));
        return -1;
    }
}

static const char *contents_field(int dt)
{
    switch (dt) {
    case OIP_BOOL:
        return "bool_contents";
    case OIP_INT8:
    case OIP_INT16:
    case OIP_INT32:
        return "int_contents";
    case OIP_INT64:
        return "int64_contents";
    case OIP_UINT64:
        return "uint64_contents";
    case OIP_FP32:
        return "fp32_contents";
    case OIP_FP64:
        return "fp64_contents";
    case OIP_BYTES:
        return "bytes_contents";
    default:
        return "uint_contents";
    }
}

static void shape_str(char *out, size_t n, const int64_t *shape, int ndim)
{
    size_t k = (size_t)snprintf(out, n, "[");
    for (int i = 0; i < ndim && k < n; i++)
        k += (size_t)snprintf(out + k, n - k, "%s%lld", i ? "," : "", (long long)shape[i]);
    if (k < n)
        snprintf(out + k, n - k, "]");
}

static int parse_infer(const Inference__ModelInferRequest *q, struct parsed *ps, char *err,
                       size_t errlen)
{
    struct oip_request *r = &ps->r;
    if (!q->n_inputs) {
        snprintf(err, errlen, "inputs: at least one input is required");
        return -1;
    }
    if (q->n_inputs > OIP_MAX_TENSORS || q->n_outputs > OIP_MAX_TENSORS) {
        snprintf(err, errlen, "inputs/outputs: more than %d tensors", OIP_MAX_TENSORS);
        return -1;
    }
    ps->raw_in = q->n_raw_input_contents > 0;
    if (ps->raw_in && q->n_raw_input_contents != q->n_inputs) {
        snprintf(err, errlen, "raw_input_contents: %zu entries for %zu inputs",
                 q->n_raw_input_contents, q->n_inputs);
        return -1;
    }
    r->id = q->id && *q->id ? q->id : NULL;
    ps->params = PARAMS_JSON(q->parameters, q->n_parameters);
    r->parameters = ps->params;
    char sh[128], why[256];
    for (size_t i = 0; i < q->n_inputs; i++) {
        const Inference__ModelInferRequest__InferInputTensor *in = q->inputs[i];
        struct oip_tensor *t = &r->inputs[i];
        t->name = in->name ? in->name : "";
        t->dtype = oip_dtype_from_name(in->datatype);
        if (t->dtype < 0) {
            snprintf(err, errlen, "inputs[%zu].datatype: unknown datatype \"%s\"", i,
                     in->datatype ? in->datatype : "");
            return -1;
        }
        if (in->n_shape > OIP_MAX_DIMS) {
            snprintf(err, errlen, "inputs[%zu].shape: more than %d dimensions", i, OIP_MAX_DIMS);
            return -1;
        }
        for (size_t k = 0; k < in->n_shape; k++) {
            if (in->shape[k] < 0) {
                snprintf(err, errlen, "inputs[%zu].shape[%zu]: expected a size >= 0", i, k);
                return -1;
            }
            t->shape[t->ndim++] = in->shape[k];
        }
        ps->in_params[i] = PARAMS_JSON(in->parameters, in->n_parameters);
        t->parameters = ps->in_params[i];
        shape_str(sh, sizeof(sh), t->shape, t->ndim);
        int64_t numel = oip_numel(t->shape, t->ndim);
        if (numel < 0 || numel > srv->cfg.max_request_size) {
            snprintf(err, errlen, "inputs[%zu].shape %s is too large", i, sh);
            return -1;
        }
        if (ps->raw_in) {
            if (!contents_empty(in->contents)) {
                snprintf(err, errlen,
                         "inputs[%zu].contents: not allowed together with "
                         "raw_input_contents",
                         i);
                return -1;
            }
            t->data =
                q->raw_input_contents[i].data ? q->raw_input_contents[i].data : (const uint8_t *)"";
            t->nbytes = q->raw_input_contents[i].len;
            if (oip_check_data(t->dtype, t->shape, t->ndim, t->data, t->nbytes, why, sizeof(why))) {
                snprintf(err, errlen, "raw_input_contents[%zu] (inputs[%zu]): %s", i, i, why);
                return -1;
            }
        } else {
            size_t count = 0;
            ps->off[i] = ps->raw.len;
            ps->from_raw[i] = 1;
            if (contents_to_raw(&ps->raw, t->dtype, in->contents, i, &count, err, errlen))
                return -1;
            if ((int64_t)count != numel) {
                snprintf(err, errlen,
                         "inputs[%zu].shape %s does not match %zu elements of "
                         "contents.%s",
                         i, sh, count, contents_field(t->dtype));
                return -1;
            }
            t->nbytes = ps->raw.len - ps->off[i];
        }
        r->n_inputs++;
    }
    for (size_t i = 0; i < r->n_inputs; i++)
        if (ps->from_raw[i])
            r->inputs[i].data = ps->raw.data ? ps->raw.data + ps->off[i] : (const uint8_t *)"";
    for (size_t i = 0; i < q->n_outputs; i++)
        r->outputs[r->n_outputs++] = q->outputs[i]->name ? q->outputs[i]->name : "";
    return 0;
}

/* ---------------------------------------------------------------- responses */

/* One ModelInferResponse and everything it points to. */
struct resp {
    Inference__ModelInferResponse m;
    Inference__ModelInferResponse__InferOutputTensor outs[OIP_MAX_TENSORS];
    Inference__ModelInferResponse__InferOutputTensor *outp[OIP_MAX_TENSORS];
    Inference__InferTensorContents contents[OIP_MAX_TENSORS];
    ProtobufCBinaryData raw[OIP_MAX_TENSORS];
    void *conv[OIP_MAX_TENSORS];
    Inference__ModelInferResponse__ParametersEntry pe;
    Inference__ModelInferResponse__ParametersEntry *pep;
    Inference__InferParameter pv;
    uint8_t textraw[4];
    struct buf textbuf;
};

static void resp_init(struct resp *rs, const struct greq *q)
{
    memset(rs, 0, sizeof(*rs));
    Inference__ModelInferResponse init = INFERENCE__MODEL_INFER_RESPONSE__INIT;
    rs->m = init;
    rs->m.model_name = q->model_name;
    rs->m.model_version = q->model_version;
    rs->m.id = q->id;
    buf_init(&rs->textbuf);
}

static void resp_final_flag(struct resp *rs, int final)
{
    Inference__ModelInferResponse__ParametersEntry pe =
        INFERENCE__MODEL_INFER_RESPONSE__PARAMETERS_ENTRY__INIT;
    Inference__InferParameter pv = INFERENCE__INFER_PARAMETER__INIT;
    rs->pe = pe;
    rs->pv = pv;
    rs->pv.parameter_choice_case = INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_BOOL_PARAM;
    rs->pv.bool_param = final;
    rs->pe.key = "triton_final_response";
    rs->pe.value = &rs->pv;
    rs->pep = &rs->pe;
    rs->m.parameters = &rs->pep;
    rs->m.n_parameters = 1;
}

static void resp_free(struct resp *rs)
{
    for (size_t i = 0; i < OIP_MAX_TENSORS; i++)
        free(rs->conv[i]);
    buf_free(&rs->textbuf);
}

static Inference__ModelInferResponse__InferOutputTensor *
add_output(struct resp *rs, const char *name, int dt, const int64_t *shape, int ndim)
{
    size_t i = rs->m.n_outputs++;
    Inference__ModelInferResponse__InferOutputTensor init =
        INFERENCE__MODEL_INFER_RESPONSE__INFER_OUTPUT_TENSOR__INIT;
    rs->outs[i] = init;
    rs->outs[i].name = (char *)name;
    rs->outs[i].datatype = (char *)oip_dtype_name(dt);
    rs->outs[i].shape = (int64_t *)shape;
    rs->outs[i].n_shape = (size_t)ndim;
    rs->outp[i] = &rs->outs[i];
    rs->m.outputs = rs->outp;
    return &rs->outs[i];
}

static uint64_t rd_le(const uint8_t *p, size_t n)
{
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* A tensor into contents (typed repeated fields). */
static void fill_contents(struct resp *rs, size_t i, const struct oip_tensor *t)
{
    Inference__InferTensorContents init = INFERENCE__INFER_TENSOR_CONTENTS__INIT;
    Inference__InferTensorContents *c = &rs->contents[i];
    *c = init;
    rs->outs[i].contents = c;
    size_t es = oip_dtype_size(t->dtype), n = es ? t->nbytes / es : 0;
    if (t->dtype == OIP_BYTES) {
        size_t cnt = 0;
        const uint8_t *p = t->data, *s;
        uint32_t len;
        while (oip_bytes_next(&p, t->data + t->nbytes, &s, &len) == 1)
            cnt++;
        ProtobufCBinaryData *bd = xcalloc(cnt ? cnt : 1, sizeof(*bd));
        p = t->data;
        cnt = 0;
        while (oip_bytes_next(&p, t->data + t->nbytes, &s, &len) == 1) {
            bd[cnt].data = (uint8_t *)s;
            bd[cnt++].len = len;
        }
        rs->conv[i] = bd;
        c->bytes_contents = bd;
        c->n_bytes_contents = cnt;
        return;
    }
    void *a = xmalloc(n ? n * 8 : 1);
    rs->conv[i] = a;
    for (size_t k = 0; k < n; k++) {
        uint64_t u = rd_le(t->data + k * es, es);
        switch (t->dtype) {
        case OIP_BOOL:
            ((protobuf_c_boolean *)a)[k] = u != 0;
            break;
        case OIP_INT8:
            ((int32_t *)a)[k] = (int8_t)u;
            break;
        case OIP_INT16:
            ((int32_t *)a)[k] = (int16_t)u;
            break;
        case OIP_INT32:
            ((int32_t *)a)[k] = (int32_t)u;
            break;
        case OIP_UINT8:
        case OIP_UINT16:
        case OIP_UINT32:
            ((uint32_t *)a)[k] = (uint32_t)u;
            break;
        default: /* 8 byte types and FP32: the bits as they are */
            if (es == 4)
                memcpy((uint8_t *)a + 4 * k, &u, 4);
            else
                memcpy((uint8_t *)a + 8 * k, &u, 8);
        }
    }
    switch (t->dtype) {
    case OIP_BOOL:
        c->bool_contents = a;
        c->n_bool_contents = n;
        break;
    case OIP_INT8:
    case OIP_INT16:
    case OIP_INT32:
        c->int_contents = a;
        c->n_int_contents = n;
        break;
    case OIP_UINT8:
    case OIP_UINT16:
    case OIP_UINT32:
        c->uint_contents = a;
        c->n_uint_contents = n;
        break;
    case OIP_INT64:
        c->int64_contents = a;
        c->n_int64_contents = n;
        break;
    case OIP_UINT64:
        c->uint64_contents = a;
        c->n_uint64_contents = n;
        break;
    case OIP_FP32:
        c->fp32_contents = a;
        c->n_fp32_contents = n;
        break;
    case OIP_FP64:
        c->fp64_contents = a;
        c->n_fp64_contents = n;
        break;
    }
}

static void build_tensors(struct resp *rs, const struct greq *q, const struct oip_result *r)
{
    int raw = q->raw_out;
    for (size_t i = 0; i < r->n_outputs; i++)
        raw |= r->outputs[i].dtype == OIP_FP16 || r->outputs[i].dtype == OIP_BF16;
    for (size_t i = 0; i < r->n_outputs; i++) {
        const struct oip_tensor *t = &r->outputs[i];
        add_output(rs, t->name, t->dtype, t->shape, t->ndim);
        if (raw) {
            rs->raw[i].data = (uint8_t *)t->data;
            rs->raw[i].len = t->nbytes;
        } else {
            fill_contents(rs, i, t);
        }
    }
    if (raw) {
        rs->m.raw_output_contents = rs->raw;
        rs->m.n_raw_output_contents = r->n_outputs;
    }
}

static const int64_t shape1[1] = {1};

static void build_text(struct resp *rs, const struct greq *q, const char *s, size_t n)
{
    add_output(rs, "output", OIP_BYTES, shape1, 1);
    if (q->raw_out) {
        uint8_t l4[4] = {(uint8_t)n, (uint8_t)(n >> 8), (uint8_t)(n >> 16), (uint8_t)(n >> 24)};
        buf_put(&rs->textbuf, l4, 4);
        buf_put(&rs->textbuf, s, n);
        rs->raw[0].data = rs->textbuf.data;
        rs->raw[0].len = rs->textbuf.len;
        rs->m.raw_output_contents = rs->raw;
        rs->m.n_raw_output_contents = 1;
        return;
    }
    Inference__InferTensorContents init = INFERENCE__INFER_TENSOR_CONTENTS__INIT;
    rs->contents[0] = init;
    rs->raw[0].data = (uint8_t *)s;
    rs->raw[0].len = n;
    rs->contents[0].bytes_contents = rs->raw;
    rs->contents[0].n_bytes_contents = 1;
    rs->outs[0].contents = &rs->contents[0];
}

/* ---------------------------------------------------------------- delivery */

static void stream_advance(struct gstream *st);

static void send_stream(struct greq *q, struct resp *rs, const char *error)
{
    struct gstream *st = q->st;
    if (st->mlserver) {
        gcall_send(st->call, &rs->m.base);
        return;
    }
    Inference__ModelStreamInferResponse m = INFERENCE__MODEL_STREAM_INFER_RESPONSE__INIT;
    m.error_message = (char *)(error ? error : "");
    m.infer_response = &rs->m;
    gcall_send(st->call, &m.base);
}

/* The request failed: unary -> the call's status; stream -> in band (or the call's status in
 * MLServer's form, which has no in-band error). */
static void fail(struct greq *q, int status, const char *msg)
{
    q->done = 1;
    if (!q->st) {
        gcall_finish(q->call, grpc_status_from_http(status), msg);
        return;
    }
    struct gstream *st = q->st;
    if (st->mlserver) {
        if (!st->over)
            gcall_finish(st->call, grpc_status_from_http(status), msg);
        st->over = 1;
        return;
    }
    struct resp rs;
    resp_init(&rs, q);
    send_stream(q, &rs, msg);
    resp_free(&rs);
}

/* A frame of the request that is allowed to write now. */
static void process(struct greq *q, const struct otf_prediction *p, int final)
{
    struct oip_result r;
    oip_req_result(p, &r);
    if (r.status >= 400) {
        fail(q, r.status, r.error);
        oip_req_result_free(&r);
        return;
    }
    struct resp rs;
    resp_init(&rs, q);
    if (!q->st) { /* unary: one response at the end */
        if (r.is_text) {
            buf_put(&q->acc, r.text, r.text_len);
            if (final)
                build_text(&rs, q, q->acc.data ? (char *)q->acc.data : "", q->acc.len);
        } else {
            build_tensors(&rs, q, &r);
        }
        if (final || !r.is_text) {
            gcall_send(q->call, &rs.m.base);
            gcall_finish(q->call, GS_OK, NULL);
            q->done = 1;
        }
    } else if (!q->st->over) {
        int send = 1;
        if (r.is_text && r.text_len)
            build_text(&rs, q, r.text, r.text_len);
        else if (!r.is_text)
            build_tensors(&rs, q, &r);
        else
            send = final && q->empty_final; /* an empty final frame */
        if (!q->st->mlserver)
            resp_final_flag(&rs, final && (send || !r.is_text));
        if (send && final && r.is_text && r.text_len && q->empty_final) {
            /* the last chunk carries text: the flag goes on an empty response after it */
            resp_final_flag(&rs, 0);
            send_stream(q, &rs, NULL);
            resp_free(&rs);
            resp_init(&rs, q);
            resp_final_flag(&rs, 1);
        }
        if (send)
            send_stream(q, &rs, NULL);
        if (final)
            q->done = 1;
    }
    resp_free(&rs);
    oip_req_result_free(&r);
}

static void hold_event(struct greq *q, const struct otf_prediction *p, int final)
{
    struct gevent *e = xcalloc(1, sizeof(*e));
    e->status = p->status;
    e->ctype = otf_strdup(p->ctype);
    e->len = p->body.len > 0 ? (size_t)p->body.len : 0;
    e->body = xmalloc(e->len + 1);
    if (e->len)
        memcpy(e->body, p->body.p, e->len);
    e->body[e->len] = '\0'; /* an error's message is used as a string */
    e->final = final;
    *q->ev_tail = e;
    q->ev_tail = &e->next;
}

static void unary_done(struct greq *q)
{
    greq_free(q);
}

static void on_frame(struct job *j, const struct otf_prediction *p, int final)
{
    struct greq *q = j->sink_arg;
    if (q->st && TAILQ_FIRST(&q->st->reqs) != q) {
        hold_event(q, p, final);
        if (final)
            q->done = 1; /* complete; written when its turn comes */
        return;
    }
    process(q, p, final);
    if (!q->done)
        return;
    if (q->st)
        stream_advance(q->st);
    else
        unary_done(q);
}

/* An error for q in its turn: held while an older request of the stream is unfinished. */
static void req_error(struct greq *q, int status, const char *msg)
{
    if (q->st && TAILQ_FIRST(&q->st->reqs) != q) {
        struct otf_prediction p;
        memset(&p, 0, sizeof(p));
        p.status = status;
        p.ctype = otf_s("");
        p.body = otf_s(msg);
        hold_event(q, &p, 1);
        q->done = 1;
        return;
    }
    fail(q, status, msg);
}

static void on_error(struct job *j, int status, const char *type, const char *msg)
{
    (void)type;
    struct greq *q = j->sink_arg;
    LOG_INFO("grpc OIP request %s failed: %d %s", q->id, status, msg);
    int held = q->st && TAILQ_FIRST(&q->st->reqs) != q;
    req_error(q, status, msg);
    if (held)
        return;
    if (q->st)
        stream_advance(q->st);
    else
        unary_done(q);
}

static const struct job_sink grpc_oip_sink = {on_frame, on_error};

static void stream_free(struct gstream *st)
{
    struct greq *q;
    while ((q = TAILQ_FIRST(&st->reqs))) {
        TAILQ_REMOVE(&st->reqs, q, link);
        if (q->job && !q->done)
            job_cancel(q->job);
        greq_free(q);
    }
    free(st);
}

/* Writes what the oldest requests hold, drops the finished ones, ends a half-closed stream.
 * A stream whose call is over (MLServer form after an error) is dropped: the call is gone. */
static void stream_advance(struct gstream *st)
{
    struct greq *q;
    if (st->over) {
        stream_free(st);
        return;
    }
    while ((q = TAILQ_FIRST(&st->reqs))) {
        if (q->ev) {
            /* its frames were held: replay them now that it is the oldest */
            struct gevent *e = q->ev;
            q->ev = NULL;
            q->ev_tail = &q->ev;
            q->done = 0;
            for (struct gevent *n; e; e = n) {
                n = e->next;
                struct otf_prediction p;
                memset(&p, 0, sizeof(p));
                p.status = e->status;
                p.ctype = otf_sn(e->ctype, strlen(e->ctype));
                p.body = otf_sn(e->body, e->len);
                if (e->status >= 400 && !strcmp(e->ctype, "")) {
                    fail(q, e->status, e->body);
                } else {
                    process(q, &p, e->final);
                }
                free(e->ctype);
                free(e->body);
                free(e);
            }
        }
        if (!q->done)
            break;
        TAILQ_REMOVE(&st->reqs, q, link);
        st->n--;
        greq_free(q);
    }
    if (st->held && st->n < MAX_INFLIGHT / 2 && !st->over) {
        st->held = 0;
        gcall_hold_recv(st->call, 0);
    }
    if (st->over) {
        stream_free(st);
    } else if (st->half_closed && TAILQ_EMPTY(&st->reqs)) {
        gcall_finish(st->call, GS_OK, NULL);
        free(st);
    }
}

/* A request message of either method: parse, build the job, submit. Returns the request; for
 * a request that failed before a job exists, fail() has run and q->done is set. */
static struct greq *start_request(struct gcall *c, struct gstream *st, const uint8_t *data,
                                  size_t len)
{
    struct greq *q = xcalloc(1, sizeof(*q));
    q->st = st;
    q->call = c;
    q->ev_tail = &q->ev;
    buf_init(&q->acc);
    if (st) {
        TAILQ_INSERT_TAIL(&st->reqs, q, link);
        st->n++;
    }
    char err[1024];
    Inference__ModelInferRequest *m = inference__model_infer_request__unpack(NULL, len, data);
    if (!m) {
        q->id = xstrdup("");
        q->model_name = xstrdup("");
        q->model_version = xstrdup("");
        req_error(q, 400, "cannot parse ModelInferRequest");
        return q;
    }
    q->model_name = xstrdup(m->model_name ? m->model_name : "");
    q->model_version = xstrdup(m->model_version ? m->model_version : "");
    char rid[40];
    ts_uuid(rid);
    q->id = xstrdup(m->id && *m->id ? m->id : rid);
    q->raw_out = m->n_raw_input_contents > 0;

    struct parsed ps;
    memset(&ps, 0, sizeof(ps));
    buf_init(&ps.raw);
    struct model *mod = NULL;
    int rc = model_find(q->model_name, *q->model_version ? q->model_version : NULL, &mod);
    if (rc) {
        if (rc == TS_E_MODEL_NOT_FOUND)
            snprintf(err, sizeof(err), "Model %s not found", q->model_name);
        else
            snprintf(err, sizeof(err), "Model %s has no version %s", q->model_name,
                     q->model_version);
        req_error(q, 404, err);
        goto out;
    }
    free(q->model_version);
    q->model_version = xstrdup(mod->version);
    if (parse_infer(m, &ps, err, sizeof(err))) {
        req_error(q, 400, err);
        goto out;
    }
    q->empty_final = json_is_true(json_object_get(ps.params, "triton_enable_empty_final_response"));
    struct job *j = job_new(q->id, &grpc_oip_sink, q);
    q->job = j;
    int text;
    if (oip_req_to_job(mod, &ps.r, j, &text, err, sizeof(err))) {
        req_error(q, 400, err);
        goto out;
    }
    struct submit_error e;
    rc = model_submit_request(mod, j, &e);
    if (rc == 1) { /* a sequence cancel, carried out by the frontend: an empty answer */
        struct resp rs;
        resp_init(&rs, q);
        if (st)
            send_stream(q, &rs, NULL);
        else {
            gcall_send(c, &rs.m.base);
            gcall_finish(c, GS_OK, NULL);
        }
        resp_free(&rs);
        q->done = 1;
    } else if (rc < 0) {
        req_error(q, e.status, e.msg);
    }
out:
    parsed_free(&ps);
    inference__model_infer_request__free_unpacked(m, NULL);
    return q;
}

/* ---------------------------------------------------------------- methods */

static void model_infer_message(struct gcall *c, const uint8_t *data, size_t len)
{
    struct greq *q = start_request(c, NULL, data, len);
    if (q->done)
        greq_free(q);
    else
        gcall_set_user(c, q);
}

static void model_infer_cancel(struct gcall *c)
{
    struct greq *q = gcall_user(c);
    if (!q)
        return;
    if (q->job)
        job_cancel(q->job);
    greq_free(q);
}

static void stream_message(struct gcall *c, const uint8_t *data, size_t len)
{
    struct gstream *st = gcall_user(c);
    if (!st) {
        st = xcalloc(1, sizeof(*st));
        st->call = c;
        TAILQ_INIT(&st->reqs);
        st->mlserver =
            srv->cfg.oip_stream_response && !strcmp(srv->cfg.oip_stream_response, "mlserver");
        gcall_set_user(c, st);
    }
    start_request(c, st, data, len);
    if (st->n >= MAX_INFLIGHT && !st->held) {
        st->held = 1;
        gcall_hold_recv(c, 1);
    }
    stream_advance(st);
}

static void stream_half_close(struct gcall *c)
{
    struct gstream *st = gcall_user(c);
    if (!st) {
        gcall_finish(c, GS_OK, NULL);
        return;
    }
    st->half_closed = 1;
    stream_advance(st);
}

static void stream_cancel(struct gcall *c)
{
    struct gstream *st = gcall_user(c);
    if (st)
        stream_free(st);
}

static void server_live(struct gcall *c, const uint8_t *data, size_t len)
{
    (void)data;
    (void)len;
    Inference__ServerLiveResponse r = INFERENCE__SERVER_LIVE_RESPONSE__INIT;
    r.live = 1;
    gcall_send(c, &r.base);
    gcall_finish(c, GS_OK, NULL);
}

static void server_ready(struct gcall *c, const uint8_t *data, size_t len)
{
    (void)data;
    (void)len;
    Inference__ServerReadyResponse r = INFERENCE__SERVER_READY_RESPONSE__INIT;
    r.ready = oip_req_server_ready();
    gcall_send(c, &r.base);
    gcall_finish(c, GS_OK, NULL);
}

/* name/version of a ModelReady or ModelMetadata request -> model, or the call is finished. */
static struct model *lookup(struct gcall *c, const char *name, const char *version)
{
    struct model *m;
    int rc = model_find(name ? name : "", version && *version ? version : NULL, &m);
    if (rc == TS_E_MODEL_NOT_FOUND) {
        char *msg = xasprintf("Model %s not found", name ? name : "");
        gcall_finish(c, GS_NOT_FOUND, msg);
        free(msg);
        return NULL;
    }
    if (rc) {
        char *msg = xasprintf("Model %s has no version %s", name, version);
        gcall_finish(c, GS_NOT_FOUND, msg);
        free(msg);
        return NULL;
    }
    return m;
}

static void model_ready(struct gcall *c, const uint8_t *data, size_t len)
{
    Inference__ModelReadyRequest *q = inference__model_ready_request__unpack(NULL, len, data);
    if (!q) {
        gcall_finish(c, GS_INVALID_ARGUMENT, "cannot parse ModelReadyRequest");
        return;
    }
    struct model *m = lookup(c, q->name, q->version);
    if (m) {
        Inference__ModelReadyResponse r = INFERENCE__MODEL_READY_RESPONSE__INIT;
        r.ready = oip_req_model_ready(m);
        gcall_send(c, &r.base);
        gcall_finish(c, GS_OK, NULL);
    }
    inference__model_ready_request__free_unpacked(q, NULL);
}

static void server_metadata(struct gcall *c, const uint8_t *data, size_t len)
{
    (void)data;
    (void)len;
    json_t *o = oip_req_server_metadata();
    json_t *ext = json_object_get(o, "extensions");
    Inference__ServerMetadataResponse r = INFERENCE__SERVER_METADATA_RESPONSE__INIT;
    r.name = (char *)json_string_value(json_object_get(o, "name"));
    r.version = (char *)json_string_value(json_object_get(o, "version"));
    char *exts[16];
    size_t i;
    json_t *v;
    json_array_foreach(ext, i, v)
    {
        if (i < 16)
            exts[r.n_extensions++] = (char *)json_string_value(v);
    }
    r.extensions = exts;
    gcall_send(c, &r.base);
    gcall_finish(c, GS_OK, NULL);
    json_decref(o);
}

static size_t tensor_md(json_t *arr, Inference__ModelMetadataResponse__TensorMetadata *tm,
                        Inference__ModelMetadataResponse__TensorMetadata **tp,
                        int64_t (*shapes)[OIP_MAX_DIMS])
{
    size_t i, n = 0;
    json_t *t;
    json_array_foreach(arr, i, t)
    {
        if (n == OIP_MAX_TENSORS)
            break;
        Inference__ModelMetadataResponse__TensorMetadata init =
            INFERENCE__MODEL_METADATA_RESPONSE__TENSOR_METADATA__INIT;
        tm[n] = init;
        tm[n].name = (char *)json_string_value(json_object_get(t, "name"));
        tm[n].datatype = (char *)json_string_value(json_object_get(t, "datatype"));
        size_t k;
        json_t *d;
        json_array_foreach(json_object_get(t, "shape"), k, d)
        {
            if (k < OIP_MAX_DIMS)
                shapes[n][tm[n].n_shape++] = json_integer_value(d);
        }
        tm[n].shape = shapes[n];
        tp[n] = &tm[n];
        n++;
    }
    return n;
}

static void model_metadata(struct gcall *c, const uint8_t *data, size_t len)
{
    Inference__ModelMetadataRequest *q = inference__model_metadata_request__unpack(NULL, len, data);
    if (!q) {
        gcall_finish(c, GS_INVALID_ARGUMENT, "cannot parse ModelMetadataRequest");
        return;
    }
    struct model *m = lookup(c, q->name, q->version);
    if (m) {
        json_t *o = oip_req_metadata(m);
        Inference__ModelMetadataResponse r = INFERENCE__MODEL_METADATA_RESPONSE__INIT;
        static Inference__ModelMetadataResponse__TensorMetadata tm[2][OIP_MAX_TENSORS];
        static Inference__ModelMetadataResponse__TensorMetadata *tp[2][OIP_MAX_TENSORS];
        static int64_t shapes[2][OIP_MAX_TENSORS][OIP_MAX_DIMS];
        char *vers[32];
        size_t i;
        json_t *v;
        r.name = (char *)json_string_value(json_object_get(o, "name"));
        r.platform = (char *)json_string_value(json_object_get(o, "platform"));
        json_array_foreach(json_object_get(o, "versions"), i, v)
        {
            if (i < 32)
                vers[r.n_versions++] = (char *)json_string_value(v);
        }
        r.versions = vers;
        r.n_inputs = tensor_md(json_object_get(o, "inputs"), tm[0], tp[0], shapes[0]);
        r.inputs = tp[0];
        r.n_outputs = tensor_md(json_object_get(o, "outputs"), tm[1], tp[1], shapes[1]);
        r.outputs = tp[1];
        gcall_send(c, &r.base); /* packed now: the static arrays are free again after it */
        gcall_finish(c, GS_OK, NULL);
        json_decref(o);
    }
    inference__model_metadata_request__free_unpacked(q, NULL);
}

const struct grpc_method grpc_oip_methods[] = {
    {SVC "ServerLive", 0, server_live, NULL, NULL},
    {SVC "ServerReady", 0, server_ready, NULL, NULL},
    {SVC "ModelReady", 0, model_ready, NULL, NULL},
    {SVC "ServerMetadata", 0, server_metadata, NULL, NULL},
    {SVC "ModelMetadata", 0, model_metadata, NULL, NULL},
    {SVC "ModelInfer", 0, model_infer_message, NULL, model_infer_cancel},
    {SVC "ModelStreamInfer", 1, stream_message, stream_half_close, stream_cancel},
    {NULL, 0, NULL, NULL, NULL},
};
