/*
 * http_openai: the OpenAI-compatible routes and requests (see http_openai.h; the replies are
 * http_openai_out.c's).
 *
 * A request's fields are checked one by one against what OpenAI documents: what we do is taken
 * (model, prompt / messages, max_tokens, max_completion_tokens, temperature, top_p, n = 1,
 * stream, stream_options.include_usage, stop, seed, user), what we cannot do is refused by name
 * with a 400 unless it has its neutral value (n > 1, a penalty other than 0, logprobs, echo,
 * tools, ...), and a field OpenAI does not have is refused as OpenAI refuses it. Chat messages
 * become one prompt, a line "role: content" each and a last line "assistant:"; the messages also
 * travel as parameters.messages, for a handler that applies its own template.
 */
#include "http_openai.h"

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
#include <sys/stat.h>

#include "core/core.h"
#include "core/job.h"
#include "core/model.h"
#include "http_openai_out.h"
#include "http_reply.h"
#include "http_token.h"
#include "http_stream.h"
#include "log.h"
#include "mgmt/auth.h"
#include "oip/oip_req.h"
#include "textstop.h"

#define OWNER "torchserve-c"

static void send_error(struct evhttp_request *req, const char *rid, int status, const char *param,
                       const char *code, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));

static void send_error(struct evhttp_request *req, const char *rid, int status, const char *param,
                       const char *code, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    char *body = http_openai_error_json(status, msg, param, code);
    http_send(req, rid, status, "application/json", body, strlen(body));
    free(body);
}

/* ---------------------------------------------------------------- models */

static void put_model(json_t *arr, const struct model *m)
{
    struct stat st;
    long long created = stat(m->dir, &st) == 0 ? (long long)st.st_mtime : 0;
    json_array_append_new(arr, json_pack("{s:s, s:s, s:I, s:s}", "id", m->name, "object", "model",
                                         "created", (json_int_t)created, "owned_by", OWNER));
}

static void send_json(struct evhttp_request *req, const char *rid, json_t *o)
{
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    http_send(req, rid, 200, "application/json", s, strlen(s));
    free(s);
}

/* GET /v1/models (only: one model, under /predictions/...) */
static void list_models(struct evhttp_request *req, const char *rid, const struct model *only)
{
    json_t *data = json_array();
    if (only) {
        put_model(data, only);
    } else {
        for (struct model *m = model_first(); m; m = model_next(m))
            if (m->is_default && m->mc.openai_enabled)
                put_model(data, m);
    }
    send_json(req, rid, json_pack("{s:s, s:o}", "object", "list", "data", data));
}

/* The default version of a model the API serves, or NULL after answering the error. */
static struct model *find_model(struct evhttp_request *req, const char *rid, const char *name)
{
    struct model *m;
    if (model_find(name, NULL, &m)) {
        send_error(req, rid, 404, "model", "model_not_found", "The model `%s` does not exist.",
                   name);
        return NULL;
    }
    if (!m->mc.openai_enabled) {
        send_error(req, rid, 400, "model", "model_not_supported",
                   "The model `%s` is not served on the OpenAI API: its model-config.yaml does "
                   "not set openai.enabled: true",
                   name);
        return NULL;
    }
    return m;
}

/* ---------------------------------------------------------------- requests */

struct oai_req {
    int chat, stream, include_usage;
    json_t *params; /* the OIP request's parameters (owned) */
    struct buf prompt;
    const char *stop[TEXTSTOP_MAX];
    size_t stop_len[TEXTSTOP_MAX];
    size_t nstop;
};

/* A field's check failed: err holds the message and *param the field. */
struct oai_err {
    char msg[512];
    const char *param;
};

static int bad(struct oai_err *e, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int bad(struct oai_err *e, const char *param, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof(e->msg), fmt, ap);
    va_end(ap);
    e->param = param;
    return -1;
}

/* Fields we cannot act on, accepted at their neutral value (what leaves the output as ours). */
static int neutral(const char *k, json_t *v, struct oai_err *e)
{
    if (json_is_null(v))
        return 0;
    if (!strcmp(k, "n")) {
        if (!json_is_integer(v) || json_integer_value(v) != 1)
            return bad(e, "n", "n: only 1 choice per request is supported (n = 1)");
        return 0;
    }
    if (!strcmp(k, "presence_penalty") || !strcmp(k, "frequency_penalty")) {
        if (!json_is_number(v) || json_number_value(v) != 0)
            return bad(e, k, "%s: penalties are not supported (only 0)", k);
        return 0;
    }
    if (!strcmp(k, "logit_bias")) {
        if (!json_is_object(v) || json_object_size(v))
            return bad(e, k, "logit_bias: not supported (only an empty object)");
        return 0;
    }
    if (!strcmp(k, "logprobs") || !strcmp(k, "top_logprobs")) {
        if (json_is_false(v) || (json_is_integer(v) && !json_integer_value(v)))
            return 0;
        return bad(e, k, "%s: log probabilities are not supported", k);
    }
    if (!strcmp(k, "echo")) {
        if (!json_is_false(v))
            return bad(e, k, "echo: not supported (only false)");
        return 0;
    }
    if (!strcmp(k, "best_of")) {
        if (!json_is_integer(v) || json_integer_value(v) != 1)
            return bad(e, k, "best_of: only 1 is supported");
        return 0;
    }
    if (!strcmp(k, "suffix")) {
        if (!json_is_string(v) || json_string_length(v))
            return bad(e, k, "suffix: not supported");
        return 0;
    }
    if (!strcmp(k, "response_format")) {
        json_t *t = json_object_get(v, "type");
        if (!json_is_string(t) || strcmp(json_string_value(t), "text") || json_object_size(v) != 1)
            return bad(e, k, "response_format: only {\"type\": \"text\"} is supported");
        return 0;
    }
    if (!strcmp(k, "parallel_tool_calls"))
        return 0; /* it only says how tools would be called */
    return bad(e, k, "%s: tools and functions are not supported", k);
}

static const char *const neutral_keys[] = {"n",
                                           "presence_penalty",
                                           "frequency_penalty",
                                           "logit_bias",
                                           "logprobs",
                                           "echo",
                                           "best_of",
                                           "suffix",
                                           "top_logprobs",
                                           "response_format",
                                           "tools",
                                           "tool_choice",
                                           "functions",
                                           "function_call",
                                           "parallel_tool_calls"};
static const int neutral_chat[] = {1, 1, 1, 1, 1, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1};
static const int neutral_cmpl[] = {1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0};

static int read_stop(json_t *v, struct oai_req *q, struct oai_err *e)
{
    if (json_is_null(v))
        return 0;
    size_t n = json_is_string(v) ? 1 : json_is_array(v) ? json_array_size(v) : (size_t)-1;
    if (n == (size_t)-1 || n > TEXTSTOP_MAX)
        return bad(e, "stop", "stop: expected a string or an array of up to %d strings",
                   TEXTSTOP_MAX);
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++) {
        json_t *s = json_is_string(v) ? v : json_array_get(v, i);
        size_t sl = json_is_string(s) ? json_string_length(s) : 0;
        if (!json_is_string(s) || sl == 0 || sl > TEXTSTOP_MAX_LEN) {
            json_decref(arr);
            return bad(e, "stop", "stop: each stop sequence must be a string of 1 to %d bytes",
                       TEXTSTOP_MAX_LEN);
        }
        q->stop[i] = json_string_value(s);
        q->stop_len[i] = sl;
        json_array_append(arr, s);
    }
    q->nstop = n;
    json_object_set_new(q->params, "stop", arr);
    return 0;
}

/* A message's content: a string, or text parts. */
static int put_content(json_t *c, size_t i, struct buf *b, struct oai_err *e)
{
    if (json_is_string(c)) {
        buf_put(b, json_string_value(c), json_string_length(c));
        return 0;
    }
    if (json_is_null(c))
        return 0;
    if (!json_is_array(c))
        return bad(e, "messages",
                   "messages[%zu].content: expected a string or an array of text "
                   "parts",
                   i);
    size_t k;
    json_t *part;
    json_array_foreach(c, k, part)
    {
        json_t *t = json_object_get(part, "type"), *x = json_object_get(part, "text");
        if (!json_is_string(t) || strcmp(json_string_value(t), "text") || !json_is_string(x))
            return bad(e, "messages",
                       "messages[%zu].content[%zu]: only {\"type\": \"text\", \"text\": ...} "
                       "parts are supported",
                       i, k);
        buf_put(b, json_string_value(x), json_string_length(x));
    }
    return 0;
}

static int read_messages(json_t *v, struct oai_req *q, struct oai_err *e)
{
    if (!json_is_array(v) || !json_array_size(v))
        return bad(e, "messages", "messages: expected a non-empty array of messages");
    size_t i;
    json_t *msg;
    json_array_foreach(v, i, msg)
    {
        json_t *role = json_object_get(msg, "role");
        if (!json_is_object(msg) || !json_is_string(role))
            return bad(e, "messages", "messages[%zu]: expected an object with a string role", i);
        const char *r = json_string_value(role);
        if (strcmp(r, "system") && strcmp(r, "user") && strcmp(r, "assistant") &&
            strcmp(r, "developer") && strcmp(r, "tool"))
            return bad(e, "messages",
                       "messages[%zu].role: '%s' is not one of system, developer, user, "
                       "assistant, tool",
                       i, r);
        buf_printf(&q->prompt, "%s: ", r);
        if (put_content(json_object_get(msg, "content"), i, &q->prompt, e))
            return -1;
        buf_put_u8(&q->prompt, '\n');
    }
    buf_puts(&q->prompt, "assistant:");
    json_object_set(q->params, "messages", v);
    return 0;
}

static int read_prompt(json_t *v, struct oai_req *q, struct oai_err *e)
{
    if (json_is_array(v) && json_array_size(v) == 1 && json_is_string(json_array_get(v, 0)))
        v = json_array_get(v, 0);
    if (json_is_array(v) && json_array_size(v) > 1 && json_is_string(json_array_get(v, 0)))
        return bad(e, "prompt", "prompt: one prompt per request is supported");
    if (!json_is_string(v))
        return bad(e, "prompt",
                   "prompt: expected a string (token id arrays are not supported: send text)");
    buf_put(&q->prompt, json_string_value(v), json_string_length(v));
    return 0;
}

static int read_number(json_t *v, const char *k, double lo, double hi, int lo_open,
                       struct oai_req *q, struct oai_err *e)
{
    if (json_is_null(v))
        return 0;
    double d = json_number_value(v);
    if (!json_is_number(v) || !isfinite(d) || d > hi || (lo_open ? d <= lo : d < lo))
        return bad(e, k, "%s: expected a number in %s%g, %g]", k, lo_open ? "(" : "[", lo, hi);
    json_object_set_new(q->params, k, json_real(d));
    return 0;
}

static int read_field(const char *k, json_t *v, struct oai_req *q, struct oai_err *e)
{
    if (!strcmp(k, "model"))
        return json_is_string(v) ? 0 : bad(e, k, "model: expected a string");
    if (!strcmp(k, "stream")) {
        if (!json_is_boolean(v) && !json_is_null(v))
            return bad(e, k, "stream: expected a boolean");
        q->stream = json_is_true(v);
        return 0;
    }
    if (!strcmp(k, "stream_options")) {
        if (json_is_null(v))
            return 0;
        json_t *iu = json_object_get(v, "include_usage");
        if (!json_is_object(v) || json_object_size(v) != (iu ? 1u : 0u) ||
            (iu && !json_is_boolean(iu)))
            return bad(e, k, "stream_options: expected {\"include_usage\": true|false}");
        q->include_usage = json_is_true(iu);
        return 0;
    }
    if (!strcmp(k, "max_tokens") || (q->chat && !strcmp(k, "max_completion_tokens"))) {
        if (json_is_null(v))
            return 0;
        if (!json_is_integer(v) || json_integer_value(v) < 0)
            return bad(e, k, "%s: expected an integer >= 0", k);
        json_object_set(q->params, "max_tokens", v);
        return 0;
    }
    if (!strcmp(k, "temperature"))
        return read_number(v, k, 0, 2, 0, q, e);
    if (!strcmp(k, "top_p"))
        return read_number(v, k, 0, 1, 1, q, e);
    if (!strcmp(k, "seed")) {
        if (!json_is_integer(v) && !json_is_null(v))
            return bad(e, k, "seed: expected an integer");
        if (json_is_integer(v))
            json_object_set(q->params, "seed", v);
        return 0;
    }
    if (!strcmp(k, "stop"))
        return read_stop(v, q, e);
    if (!strcmp(k, "user"))
        return json_is_string(v) ? 0 : bad(e, k, "user: expected a string");
    if (!strcmp(k, q->chat ? "messages" : "prompt"))
        return q->chat ? read_messages(v, q, e) : read_prompt(v, q, e);
    const int *allowed = q->chat ? neutral_chat : neutral_cmpl;
    for (size_t i = 0; i < sizeof(neutral_keys) / sizeof(neutral_keys[0]); i++)
        if (allowed[i] && !strcmp(k, neutral_keys[i]))
            return neutral(k, v, e);
    return bad(e, k, "Unrecognized request argument supplied: %s", k);
}

/* The request body: q filled in, or -1 with e set. */
static int read_request(json_t *body, struct oai_req *q, struct oai_err *e)
{
    if (!json_is_object(body))
        return bad(e, NULL, "the request body must be a JSON object");
    if (!json_object_get(body, q->chat ? "messages" : "prompt"))
        return bad(e, q->chat ? "messages" : "prompt", "%s: required",
                   q->chat ? "messages" : "prompt");
    const char *k;
    json_t *v;
    json_object_foreach(body, k, v) if (read_field(k, v, q, e)) return -1;
    v = json_object_get(body, "stream_options");
    if (v && !json_is_null(v) && !q->stream)
        return bad(e, "stream_options", "stream_options: only allowed when stream is true");
    /* OpenAI's defaults, which are not every model's: temperature 1, and 16 tokens for a
     * completion */
    if (!json_object_get(q->params, "temperature"))
        json_object_set_new(q->params, "temperature", json_real(1.0));
    if (!q->chat && !json_object_get(q->params, "max_tokens"))
        json_object_set_new(q->params, "max_tokens", json_integer(16));
    return 0;
}

/* The job: an OIP text request to m, answered through http_openai_out. */
static void submit(struct evhttp_request *req, const char *rid, struct model *m, struct oai_req *q,
                   const char *echo_model)
{
    struct buf data; /* one BYTES element: uint32 LE length, the text */
    buf_init(&data);
    uint32_t n = (uint32_t)q->prompt.len;
    uint8_t le[4] = {(uint8_t)n, (uint8_t)(n >> 8), (uint8_t)(n >> 16), (uint8_t)(n >> 24)};
    buf_put(&data, le, 4);
    buf_put(&data, q->prompt.data, q->prompt.len);
    struct oip_request r;
    memset(&r, 0, sizeof(r));
    r.parameters = q->params;
    r.stream = q->stream; /* a runtime streams (predict_stream, an Inferless stream) or not */
    r.n_inputs = 1;
    r.inputs[0].name = m->mc.openai_prompt_input;
    r.inputs[0].dtype = OIP_BYTES;
    r.inputs[0].ndim = 1;
    r.inputs[0].shape[0] = 1;
    r.inputs[0].data = data.data;
    r.inputs[0].nbytes = data.len;

    struct http_call *c =
        http_call_new(req, rid, q->stream ? HTTP_STREAM_SSE : HTTP_STREAM_CHUNKED);
    struct job *j = job_new(rid, &http_call_sink, c);
    c->job = j;
    struct evkeyval *h;
    TAILQ_FOREACH(h, evhttp_request_get_input_headers(req), next)
    if (strcasecmp(h->key, "Content-Type"))
        job_add_header(j, h->key, h->value, strlen(h->value));
    int text = 0;
    char err[512];
    int rc = oip_req_to_job(m, &r, j, &text, err, sizeof(err));
    buf_free(&data);
    if (rc) {
        http_call_free(c);
        send_error(req, rid, 400, NULL, NULL, "%s", err);
        return;
    }
    c->arg = http_openai_out_new(q->chat, q->stream, q->include_usage, echo_model,
                                 m->mc.openai_text_output, q->stop, q->stop_len, q->nstop);
    c->arg_free = http_openai_out_free;
    c->transform = http_openai_out_transform;
    c->error_body = http_openai_out_error_body;
    c->ctype = "application/json";
    c->sse_raw = q->stream;
    c->whole = !q->stream;
    struct submit_error e;
    rc = model_submit_request(m, j, &e);
    if (rc < 0)
        http_call_reject(c, e.status, e.type, e.msg);
    else if (rc == 1) /* a sequence cancel: these requests carry no sequence header we add */
        http_call_reject(c, 400, "", "sequence control headers are not supported here");
    else
        http_call_watch(c);
}

/* POST .../completions or .../chat/completions; only: the model the URL names, or NULL. */
static void generate(struct evhttp_request *req, const char *rid, int chat, struct model *only)
{
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    size_t len = evbuffer_get_length(in);
    if ((long)len > srv->cfg.max_request_size) {
        send_error(req, rid, 413, NULL, NULL,
                   "request body of %zu bytes exceeds max_request_size (%ld bytes)", len,
                   srv->cfg.max_request_size);
        return;
    }
    const char *p = (const char *)evbuffer_pullup(in, -1);
    json_error_t jerr;
    json_t *body = json_loadb(p ? p : "", len, 0, &jerr);
    if (!body) {
        send_error(req, rid, 400, NULL, NULL, "the request body is not JSON: %s (line %d)",
                   jerr.text, jerr.line);
        return;
    }
    struct oai_req q;
    memset(&q, 0, sizeof(q));
    q.chat = chat;
    q.params = json_object();
    buf_init(&q.prompt);
    struct oai_err e = {.param = NULL};
    json_t *mv = json_object_get(body, "model");
    struct model *m = only;
    if (read_request(body, &q, &e)) {
        send_error(req, rid, 400, e.param, NULL, "%s", e.msg);
    } else if (!m && !json_is_string(mv)) {
        send_error(req, rid, 400, "model", NULL, "model: required");
    } else if (m || (m = find_model(req, rid, json_string_value(mv)))) {
        const char *user = json_string_value(json_object_get(body, "user"));
        if (user)
            LOG_REQ(LOG_LEVEL_INFO, rid, "OpenAI request for end user %s", user);
        submit(req, rid, m, &q, json_is_string(mv) ? json_string_value(mv) : m->name);
    }
    buf_free(&q.prompt);
    json_decref(q.params);
    json_decref(body);
}

/* ---------------------------------------------------------------- routes */

static int method_is(struct evhttp_request *req, const char *rid, enum evhttp_cmd_type want)
{
    enum evhttp_cmd_type cmd = evhttp_request_get_command(req);
    if (cmd == want || (want == EVHTTP_REQ_GET && cmd == EVHTTP_REQ_HEAD))
        return 1;
    send_error(req, rid, 405, NULL, NULL, "method not allowed: use %s",
               want == EVHTTP_REQ_GET ? "GET" : "POST");
    return 0;
}

/* The route of path segments s[0..n) after "v1"; only: the model the URL names. */
static void route(struct evhttp_request *req, const char *rid, char *const *s, int n,
                  struct model *only)
{
    if (n == 1 && !strcmp(s[0], "models")) {
        if (method_is(req, rid, EVHTTP_REQ_GET))
            list_models(req, rid, only);
    } else if (n == 2 && !strcmp(s[0], "models")) {
        if (!method_is(req, rid, EVHTTP_REQ_GET))
            return;
        struct model *m = only;
        if (only && strcmp(only->name, s[1])) {
            send_error(req, rid, 404, "model", "model_not_found", "The model `%s` does not exist.",
                       s[1]);
            return;
        }
        if (!m && !(m = find_model(req, rid, s[1])))
            return;
        json_t *one = json_array();
        put_model(one, m);
        json_t *o = json_incref(json_array_get(one, 0));
        json_decref(one);
        send_json(req, rid, o);
    } else if (n == 1 && !strcmp(s[0], "completions")) {
        if (method_is(req, rid, EVHTTP_REQ_POST))
            generate(req, rid, 0, only);
    } else if (n == 2 && !strcmp(s[0], "chat") && !strcmp(s[1], "completions")) {
        if (method_is(req, rid, EVHTTP_REQ_POST))
            generate(req, rid, 1, only);
    } else {
        send_error(req, rid, 404, NULL, "unknown_url", "Unknown request URL: %s %s",
                   evhttp_request_get_command(req) == EVHTTP_REQ_GET ? "GET" : "POST",
                   evhttp_request_get_uri(req));
    }
}

/* /predictions/{model}/{version}/v1/...: the model when it is served on the API, else NULL. */
static struct model *predictions_model(char *const *s, int n)
{
    struct model *m;
    if (n < 5 || strcmp(s[0], "predictions") || strcmp(s[3], "v1") || model_find(s[1], s[2], &m) ||
        !m->mc.openai_enabled)
        return NULL;
    return m;
}

int http_openai_target(const char *uri)
{
    if (!uri)
        return 0;
    size_t n = strcspn(uri, "?#");
    if ((n == 3 && !strncmp(uri, "/v1", 3)) || !strncmp(uri, "/v1/", 4))
        return 1;
    if (strncmp(uri, "/predictions/", 13))
        return 0;
    /* /predictions/m/v/v1/...: split the path without decoding (names are plain ASCII) */
    char path[512];
    if (n >= sizeof(path))
        return 0;
    memcpy(path, uri, n);
    path[n] = '\0';
    char *seg[6], *save = NULL;
    int k = 0;
    for (char *t = strtok_r(path, "/", &save); t && k < 6; t = strtok_r(NULL, "/", &save))
        seg[k++] = t;
    return predictions_model(seg, k) != NULL;
}

int http_openai_handle(struct evhttp_request *req)
{
    struct http_path p;
    http_path_parse(req, &p);
    struct model *only = NULL;
    int skip;
    if (p.n >= 1 && !strcmp(p.seg[0], "v1"))
        skip = 1;
    else if ((only = predictions_model(p.seg, p.n)))
        skip = 4;
    else {
        http_path_free(&p);
        return 0;
    }
    char rid[40];
    http_request_id(req, rid);
    if (http_token_refused(req, &p, AUTH_INFERENCE))
        send_error(req, rid, AUTH_FAIL_STATUS, NULL, "invalid_api_key", "%s", AUTH_FAIL_MSG);
    else
        route(req, rid, p.seg + skip, p.n - skip, only);
    http_path_free(&p);
    return 1;
}
