/*
 * oip_pb: the OIP in protobuf (see oip_pb.h): request parameters to JSON, tensor contents to raw
 * tensors (little-endian, the layout common/oip_wire sends the worker), and the worker's result
 * back into a ModelInferResponse.
 */
#include "oip_pb.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

void oip_pb_req_free(struct oip_pb_req *ps)
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

int oip_pb_parse(const Inference__ModelInferRequest *q, struct oip_pb_req *ps, char *err,
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
    for (size_t i = 0; ps->raw_in && i < q->n_inputs; i++)
        if (!contents_empty(q->inputs[i]->contents)) { /* Triton's words, checked first */
            snprintf(err, errlen,
                     "inputs[%zu].contents: contents field must not be specified when using "
                     "raw_input_contents for '%s' for model '%s'",
                     i, q->inputs[i]->name ? q->inputs[i]->name : "",
                     q->model_name ? q->model_name : "");
            return -1;
        }
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
        int64_t numel;
        if (oip_req_check_shape(t, i, &numel, sh, sizeof(sh), err, errlen))
            return -1;
        if (ps->raw_in) {
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
    oip_req_point_inputs(r, &ps->raw, ps->off, ps->from_raw);
    for (size_t i = 0; i < q->n_outputs; i++)
        r->outputs[r->n_outputs++] = q->outputs[i]->name ? q->outputs[i]->name : "";
    return 0;
}

void oip_pb_resp_init(struct oip_pb_resp *rs, const char *model_name, const char *model_version,
                      const char *id)
{
    memset(rs, 0, sizeof(*rs));
    Inference__ModelInferResponse init = INFERENCE__MODEL_INFER_RESPONSE__INIT;
    rs->m = init;
    rs->m.model_name = (char *)model_name;
    rs->m.model_version = (char *)model_version;
    rs->m.id = (char *)id;
    buf_init(&rs->textbuf);
}

void oip_pb_resp_final_flag(struct oip_pb_resp *rs, int final)
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

void oip_pb_resp_free(struct oip_pb_resp *rs)
{
    for (size_t i = 0; i < OIP_MAX_TENSORS; i++)
        free(rs->conv[i]);
    buf_free(&rs->textbuf);
}

static Inference__ModelInferResponse__InferOutputTensor *
add_output(struct oip_pb_resp *rs, const char *name, int dt, const int64_t *shape, int ndim)
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

/* A tensor into contents (typed repeated fields). */
static void fill_contents(struct oip_pb_resp *rs, size_t i, const struct oip_tensor *t)
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
        uint64_t u = oip_rd_le(t->data + k * es, es);
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

void oip_pb_resp_tensors(struct oip_pb_resp *rs, int raw_out, const struct oip_result *r)
{
    int raw = raw_out;
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

void oip_pb_resp_text(struct oip_pb_resp *rs, int raw_out, const char *s, size_t n)
{
    add_output(rs, "output", OIP_BYTES, shape1, 1);
    if (raw_out) {
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
