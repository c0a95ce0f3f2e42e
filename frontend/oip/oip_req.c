/*
 * oip_req: OIP requests to jobs and worker frames to OIP outputs, shared by REST and gRPC.
 *
 * The frontend validates everything a request says about itself (datatypes, shapes against the
 * data, parameter types) before a job exists, so a bad request never costs a worker step and an
 * error before a stream is always a plain error. What only the model knows (input names, the
 * datatypes and shapes forward() takes) is checked by the worker, which answers 400 per request.
 */
#include "oip_req.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/job.h"
#include "core/model.h"
#include "otf.h"
#include "core/core.h"
#include "core/worker_pool.h"
#include "yaml_flat.h"

#define SERVER_NAME "torchserve-c"
#define SERVER_VERSION "0.1.0"

static int is_torchscript_handler(const struct model *m)
{
    const char *h = m->handler ? m->handler : "";
    return !*h || !strcmp(h, "torchscript") || !strcmp(h, "TorchScriptHandler");
}

static int is_runtime_handler(const struct model *m)
{
    const char *h = m->handler ? m->handler : "";
    return !strcmp(h, "mlserver") || !strcmp(h, "inferless");
}

const char *oip_req_platform(const struct model *m)
{
    static char buf[128];
    if (is_torchscript_handler(m) || !strcmp(m->handler, "char_lm"))
        return "pytorch_torchscript";
    if (is_runtime_handler(m))
        return m->handler; /* an MLServer runtime's own platform is in its metadata */
    snprintf(buf, sizeof(buf), "torchserve-c_%s", m->handler);
    return buf;
}

json_t *oip_req_server_metadata(void)
{
    json_t *o = json_object();
    json_object_set_new(o, "name", json_string(SERVER_NAME));
    json_object_set_new(o, "version", json_string(SERVER_VERSION));
    json_object_set_new(o, "extensions",
                        json_pack("[sssss]", "binary_tensor_data", "sequence", "generate",
                                  "infer_stream", "model_stream_infer"));
    return o;
}

/* ---------------------------------------------------------------- requests */

static void add_sequence_headers(struct job *j, json_t *prm)
{
    const struct config *c = &srv->cfg;
    json_t *id = json_object_get(prm, "sequence_id");
    char num[32];
    if (json_is_string(id) && json_string_length(id) > 0) {
        job_add_header(j, c->ts_header_key_sequence_id, json_string_value(id),
                       json_string_length(id));
    } else if (json_is_integer(id) && json_integer_value(id) != 0) {
        int n = snprintf(num, sizeof(num), "%lld", (long long)json_integer_value(id));
        job_add_header(j, c->ts_header_key_sequence_id, num, (size_t)n);
    } else {
        return;
    }
    if (json_is_true(json_object_get(prm, "sequence_start")))
        job_add_header(j, c->ts_header_key_sequence_start, "true", 4);
    if (json_is_true(json_object_get(prm, "sequence_end")))
        job_add_header(j, c->ts_header_key_sequence_end, "true", 4);
}

static int check_parameters(json_t *prm, char *err, size_t errlen)
{
    if (!prm)
        return 0;
    json_t *v = json_object_get(prm, "sequence_id");
    if (v && !json_is_string(v) && !json_is_integer(v)) {
        snprintf(err, errlen, "parameters.sequence_id: expected a string or an integer");
        return -1;
    }
    static const char *bools[] = {"sequence_start", "sequence_end"};
    for (size_t i = 0; i < 2; i++) {
        v = json_object_get(prm, bools[i]);
        if (v && !json_is_boolean(v)) {
            snprintf(err, errlen, "parameters.%s: expected a boolean", bools[i]);
            return -1;
        }
    }
    v = json_object_get(prm, "max_tokens");
    if (v && (!json_is_integer(v) || json_integer_value(v) < 0)) {
        snprintf(err, errlen, "parameters.max_tokens: expected an integer >= 0");
        return -1;
    }
    v = json_object_get(prm, "temperature");
    if (v && !json_is_number(v)) {
        snprintf(err, errlen, "parameters.temperature: expected a number");
        return -1;
    }
    return 0;
}

/* The prompt of a text request: text_input, or the first element of the first BYTES input. */
static int request_text(const struct oip_request *r, const char **s, size_t *n, char *err,
                        size_t errlen)
{
    if (r->generate) {
        *s = r->text_input ? r->text_input : "";
        *n = r->text_input ? r->text_len : 0;
        return 0;
    }
    for (size_t i = 0; i < r->n_inputs; i++) {
        const struct oip_tensor *t = &r->inputs[i];
        if (t->dtype != OIP_BYTES)
            continue;
        const uint8_t *p = t->data, *e;
        uint32_t len;
        if (oip_bytes_next(&p, t->data + t->nbytes, &e, &len) != 1) {
            snprintf(err, errlen, "inputs[%zu].data: expected at least one string", i);
            return -1;
        }
        *s = (const char *)e;
        *n = len;
        return 0;
    }
    snprintf(err, errlen, "inputs: no BYTES input holds the text");
    return -1;
}

static void text_body(const struct oip_request *r, const char *s, size_t n, struct job *j)
{
    json_t *o = json_object();
    json_object_set_new(o, "text", json_stringn_nocheck(s, n));
    json_object_set_new(o, "prompt", json_stringn_nocheck(s, n));
    json_t *prm = r->parameters;
    json_t *mt = json_object_get(prm, "max_tokens");
    if (!mt)
        mt = json_object_get(prm, "max_new_tokens");
    if (json_is_integer(mt))
        json_object_set(o, "max_new_tokens", mt);
    static const char *pass[] = {"temperature", "stop", "top_p"};
    for (size_t i = 0; i < 3; i++) {
        json_t *v = json_object_get(prm, pass[i]);
        if (v)
            json_object_set(o, pass[i], v);
    }
    if (prm)
        json_object_set(o, "parameters", prm);
    char *body = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    job_add_param_owned(j, "body", "application/json", body, strlen(body));
}

static void put_json(struct buf *b, json_t *v)
{
    char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    buf_puts(b, s ? s : "null");
    free(s);
}

int oip_req_runtime(const struct model *m)
{
    return is_runtime_handler(m);
}

int oip_req_reads_stream(const struct model *m)
{
    return m->handler && !strcmp(m->handler, "mlserver");
}

/* The payload of r (the job's body, or a message fed to it). The header is written by hand:
 * building it with jansson cost more than the tensors. runtime: a model of another server's
 * contract, which also learns whether the call streams and gets the generate shape's text as
 * the BYTES input "text_input". */
static void tensor_payload(const struct oip_request *r, int runtime, struct buf *b)
{
    uint8_t len4[4];
    int gen = runtime && r->generate;
    size_t raw = gen ? 4 + r->text_len : 0;
    for (size_t i = 0; i < r->n_inputs; i++)
        raw += r->inputs[i].nbytes;
    struct buf h;
    buf_init(&h);
    buf_puts(&h, "{");
    if (r->id) {
        buf_puts(&h, "\"id\":");
        oip_wire_put_jstr(&h, r->id, strlen(r->id));
        buf_puts(&h, ",");
    }
    if (r->parameters) {
        buf_puts(&h, "\"parameters\":");
        put_json(&h, r->parameters);
        buf_puts(&h, ",");
    }
    if (runtime && r->stream)
        buf_puts(&h, "\"stream\":true,");
    if (gen)
        buf_puts(&h, "\"generate\":true,");
    buf_puts(&h, "\"inputs\":[");
    if (gen) {
        int64_t one = 1;
        oip_wire_put_desc(&h, 1, "text_input", OIP_BYTES, &one, 1, 4 + r->text_len);
    }
    for (size_t i = 0; i < r->n_inputs; i++) {
        const struct oip_tensor *t = &r->inputs[i];
        oip_wire_put_desc(&h, i == 0 && !gen, t->name, t->dtype, t->shape, t->ndim, t->nbytes);
        if (t->parameters) { /* reopen the object for its parameters */
            h.len--;
            buf_puts(&h, ",\"parameters\":");
            put_json(&h, t->parameters);
            buf_puts(&h, "}");
        }
    }
    buf_puts(&h, "]");
    if (r->n_outputs) {
        buf_puts(&h, ",\"outputs\":[");
        for (size_t i = 0; i < r->n_outputs; i++) {
            if (i)
                buf_puts(&h, ",");
            oip_wire_put_jstr(&h, r->outputs[i], strlen(r->outputs[i]));
        }
        buf_puts(&h, "]");
    }
    buf_puts(&h, "}");
    buf_init(b);
    buf_reserve(b, 8 + h.len + raw);
    oip_wire_put_header(b, (const char *)h.data, h.len);
    buf_free(&h);
    if (gen) {
        uint32_t n = (uint32_t)r->text_len;
        for (int k = 0; k < 4; k++)
            len4[k] = (uint8_t)(n >> (8 * k));
        buf_put(b, len4, 4);
        buf_put(b, r->text_input ? r->text_input : "", r->text_len);
    }
    for (size_t i = 0; i < r->n_inputs; i++)
        buf_put(b, r->inputs[i].data, r->inputs[i].nbytes);
}

static void tensor_body(const struct oip_request *r, int runtime, struct job *j)
{
    struct buf b;
    tensor_payload(r, runtime, &b);
    job_add_param_owned(j, "body", OIP_WIRE_CTYPE, (char *)b.data, b.len);
}

int oip_req_feed(const struct oip_request *r, struct job *j, char *err, size_t errlen)
{
    if (r->parameters && !json_is_object(r->parameters)) {
        snprintf(err, errlen, "parameters: expected an object");
        return -1;
    }
    if (check_parameters(r->parameters, err, errlen))
        return -1;
    if (!r->n_inputs) {
        snprintf(err, errlen, "inputs: at least one input is required");
        return -1;
    }
    struct buf b;
    tensor_payload(r, 1, &b);
    if (b.len > (size_t)srv->cfg.max_request_size) {
        snprintf(err, errlen, "the message is %zu bytes, over max_request_size (%ld bytes)", b.len,
                 srv->cfg.max_request_size);
        buf_free(&b);
        return -1;
    }
    job_feed(j, OIP_WIRE_CTYPE, (char *)b.data, b.len);
    return 0;
}

int oip_req_to_job(struct model *m, const struct oip_request *r, struct job *j, int *text,
                   char *err, size_t errlen)
{
    if (r->parameters && !json_is_object(r->parameters)) {
        snprintf(err, errlen, "parameters: expected an object");
        return -1;
    }
    if (check_parameters(r->parameters, err, errlen))
        return -1;
    int has_bytes = 0, runtime = is_runtime_handler(m);
    for (size_t i = 0; i < r->n_inputs; i++)
        has_bytes |= r->inputs[i].dtype == OIP_BYTES;
    *text = !runtime && (r->generate || has_bytes);
    if (!r->generate && !r->n_inputs) {
        snprintf(err, errlen, "inputs: at least one input is required");
        return -1;
    }
    if (*text && is_torchscript_handler(m)) {
        snprintf(err, errlen, "%s: model %s (torchscript handler) takes numeric tensors, not text",
                 r->generate ? "text_input" : "inputs[].datatype BYTES", m->name);
        return -1;
    }
    if (*text) {
        const char *s;
        size_t n;
        if (request_text(r, &s, &n, err, errlen))
            return -1;
        text_body(r, s, n, j);
    } else {
        tensor_body(r, runtime, j);
    }
    if (r->parameters)
        add_sequence_headers(j, r->parameters);
    return 0;
}

/* ---------------------------------------------------------------- results */

static char *error_message(const struct otf_prediction *p)
{
    json_t *o = p->body.len > 0 ? json_loadb(p->body.p, (size_t)p->body.len, 0, NULL) : NULL;
    json_t *msg = json_object_get(o, "message");
    if (!msg)
        msg = json_object_get(o, "error");
    char *s = json_is_string(msg) ? xstrdup(json_string_value(msg))
              : p->body.len > 0   ? otf_strdup(p->body)
                                  : xasprintf("worker answered status %d", (int)p->status);
    json_decref(o);
    return s;
}

void oip_req_result(const struct otf_prediction *p, struct oip_result *r)
{
    /* field by field: a memset would clear all OIP_MAX_TENSORS outputs, most never used */
    r->error = NULL;
    r->is_text = 0;
    r->text = NULL;
    r->text_len = 0;
    r->header = NULL;
    r->hbuf = NULL;
    r->parameters = NULL;
    r->n_outputs = 0;
    r->status = p->status > 0 ? p->status : 200;
    if (r->status >= 400) {
        r->error = error_message(p);
        return;
    }
    if (!otf_str_eq(p->ctype, OIP_WIRE_CTYPE)) {
        r->is_text = 1;
        r->text = p->body.len > 0 ? p->body.p : "";
        r->text_len = p->body.len > 0 ? (size_t)p->body.len : 0;
        return;
    }
    const char *js;
    size_t jl, rawlen;
    const uint8_t *raw;
    char err[512];
    json_error_t jerr;
    if (oip_wire_split(p->body.p, p->body.len > 0 ? (size_t)p->body.len : 0, &js, &jl, &raw,
                       &rawlen, err, sizeof(err)) == 0) {
        r->hbuf = xmalloc(jl + 1);
        if (oip_wire_scan(js, jl, r->hbuf, "outputs", raw, rawlen, r->outputs, OIP_MAX_TENSORS,
                          &r->n_outputs, NULL, NULL))
            return;
        r->n_outputs = 0;
        r->header = json_loadb(js, jl, 0, &jerr);
        if (!r->header)
            snprintf(err, sizeof(err), "worker payload header: %s", jerr.text);
        else if (oip_wire_tensors(r->header, "outputs", raw, rawlen, r->outputs, OIP_MAX_TENSORS,
                                  &r->n_outputs, err, sizeof(err)) == 0) {
            json_t *prm = json_object_get(r->header, "parameters");
            r->parameters = json_is_object(prm) ? prm : NULL;
            return;
        }
    }
    r->status = 500;
    r->error = xasprintf("bad OIP answer from the worker: %s", err);
}

void oip_req_result_free(struct oip_result *r)
{
    free(r->error);
    json_decref(r->header);
    free(r->hbuf);
    r->error = NULL;
    r->header = NULL;
    r->hbuf = NULL;
    r->parameters = NULL;
    r->n_outputs = 0;
}

/* ---------------------------------------------------------------- metadata */

/* handler.<key>.<i>.{name,datatype,shape.<k>} as metadata tensors. */
static json_t *yaml_tensors(const struct yflat *y, const char *key)
{
    json_t *arr = json_array();
    char path[128];
    for (int i = 0;; i++) {
        snprintf(path, sizeof(path), "handler.%s.%d.name", key, i);
        const struct yflat_entry *name = yflat_get(y, path);
        if (!name)
            break;
        snprintf(path, sizeof(path), "handler.%s.%d.datatype", key, i);
        const struct yflat_entry *dt = yflat_get(y, path);
        json_t *shape = json_array();
        for (int k = 0; k < OIP_MAX_DIMS; k++) {
            snprintf(path, sizeof(path), "handler.%s.%d.shape.%d", key, i, k);
            const struct yflat_entry *d = yflat_get(y, path);
            long v;
            if (!d || ts_parse_long(d->value, -1, INT64_MAX, &v))
                break;
            json_array_append_new(shape, json_integer(v));
        }
        json_array_append_new(arr, json_pack("{s:s, s:s, s:o}", "name", name->value, "datatype",
                                             dt ? dt->value : "FP32", "shape", shape));
    }
    return arr;
}

/* A model-settings.json tensor list as metadata: {name, datatype, shape} of each well-formed
 * entry (the worker reports a malformed file when it loads). */
static json_t *settings_tensors(json_t *arr)
{
    json_t *out = json_array(), *t;
    size_t i;
    json_array_foreach(arr, i, t)
    {
        json_t *name = json_object_get(t, "name"), *dt = json_object_get(t, "datatype");
        json_t *shape = json_object_get(t, "shape");
        if (!json_is_string(name) || !json_is_string(dt) || !json_is_array(shape))
            continue;
        json_array_append_new(
            out, json_pack("{s:O, s:O, s:O}", "name", name, "datatype", dt, "shape", shape));
    }
    return out;
}

/* An MLServer runtime's metadata, as MLServer answers it: platform, versions, inputs and
 * outputs from its model-settings.json. An Inferless app's come from its worker (REST). */
static void runtime_metadata(const struct model *m, json_t *o, json_t **ins, json_t **outs)
{
    if (!oip_req_reads_stream(m))
        return;
    char *path = xasprintf("%s/model-settings.json", m->dir);
    json_t *st = json_load_file(path, 0, NULL);
    free(path);
    json_t *v = json_object_get(st, "platform");
    if (json_is_string(v) && json_string_length(v))
        json_object_set(o, "platform", v);
    v = json_object_get(st, "versions");
    if (json_is_array(v) && json_array_size(v)) {
        json_t *vers = json_array(), *e;
        size_t i;
        json_array_foreach(v, i, e) if (json_is_string(e)) json_array_append(vers, e);
        json_object_set_new(o, "versions", vers);
    }
    static const char *keys[] = {"inputs", "outputs"};
    json_t **dst[] = {ins, outs};
    for (int k = 0; k < 2; k++) {
        v = json_object_get(st, keys[k]);
        if (json_is_array(v) && json_array_size(v)) {
            json_decref(*dst[k]);
            *dst[k] = settings_tensors(v);
        }
    }
    json_decref(st);
}

json_t *oip_req_metadata(struct model *m)
{
    json_t *o = json_object();
    json_object_set_new(o, "name", json_string(m->name));
    json_t *vers = json_array();
    for (struct model *v = model_first(); v; v = model_next(v))
        if (!strcmp(v->name, m->name))
            json_array_append_new(vers, json_string(v->version));
    json_object_set_new(o, "versions", vers);
    json_object_set_new(o, "platform", json_string(oip_req_platform(m)));

    json_t *ins = NULL, *outs = NULL;
    if (m->manifest.config_file && *m->manifest.config_file) {
        char *path = xasprintf("%s/%s", m->dir, m->manifest.config_file);
        struct yflat y = {0};
        char err[256];
        if (yflat_parse_file(path, "model-config.yaml", &y, err, sizeof(err)) == 0) {
            ins = yaml_tensors(&y, "inputs");
            outs = yaml_tensors(&y, "outputs");
        }
        yflat_free(&y);
        free(path);
    }
    if (is_runtime_handler(m)) {
        runtime_metadata(m, o, &ins, &outs);
    } else if (!is_torchscript_handler(m)) {
        if (!ins || !json_array_size(ins)) {
            json_decref(ins);
            ins =
                json_pack("[{s:s, s:s, s:[i]}]", "name", "prompt", "datatype", "BYTES", "shape", 1);
        }
        if (!outs || !json_array_size(outs)) {
            json_decref(outs);
            outs =
                json_pack("[{s:s, s:s, s:[i]}]", "name", "output", "datatype", "BYTES", "shape", 1);
        }
    }
    json_object_set_new(o, "inputs", ins ? ins : json_array());
    json_object_set_new(o, "outputs", outs ? outs : json_array());
    return o;
}

int oip_req_metadata_from_worker(const struct model *m, json_t *md)
{
    return (is_torchscript_handler(m) || (is_runtime_handler(m) && !oip_req_reads_stream(m))) &&
           !json_array_size(json_object_get(md, "inputs"));
}

void oip_req_metadata_job(struct job *j)
{
    job_add_param_owned(j, "body", OIP_WIRE_META_CTYPE, xstrdup(""), 0);
}

void oip_req_metadata_merge(json_t *md, const struct otf_prediction *p)
{
    if (p->status >= 300 || p->body.len <= 0)
        return;
    json_t *o = json_loadb(p->body.p, (size_t)p->body.len, 0, NULL);
    json_t *ins = json_object_get(o, "inputs"), *outs = json_object_get(o, "outputs");
    if (json_is_array(ins))
        json_object_set(md, "inputs", ins);
    if (json_is_array(outs) && json_array_size(outs))
        json_object_set(md, "outputs", outs);
    json_decref(o);
}

int oip_req_check_shape(const struct oip_tensor *t, size_t i, int64_t *numel, char *sh,
                        size_t shlen, char *err, size_t errlen)
{
    oip_shape_str(sh, shlen, t->shape, t->ndim);
    *numel = oip_numel(t->shape, t->ndim);
    if (*numel < 0 || *numel > srv->cfg.max_request_size) {
        snprintf(err, errlen, "inputs[%zu].shape %s is too large", i, sh);
        return -1;
    }
    return 0;
}

void oip_req_point_inputs(struct oip_request *r, const struct buf *raw, const size_t *off,
                          const int *from_raw)
{
    for (size_t i = 0; i < r->n_inputs; i++)
        if (from_raw[i])
            r->inputs[i].data = raw->data ? raw->data + off[i] : (const uint8_t *)"";
}
