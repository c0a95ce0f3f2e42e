/*
 * http_inference: the inference API on port 8080 (/ping, /predictions/...) and the HTTP reply
 * sink that turns worker frames into a whole response, HTTP chunks, or Server-Sent Events.
 *
 * One `struct http_call` per request in flight. It holds the transport's job reference and is
 * the closecb argument of the connection while the request is pending: when the client goes
 * away the job is cancelled (dropped from the queue, or a cancel frame to the worker) and the
 * evhttp request, which evhttp detached from the dead connection, is freed here.
 *
 * Streaming: the first frame marked ts_stream_next: true starts a chunked reply with the
 * frame's status and headers (as TorchServe does); each later frame is one chunk. With
 * `Accept: text/event-stream` each frame is an SSE event `id: n` / `data: ...`, a `: keep-alive`
 * comment goes out after 15 s of silence, and an error after the 200 is an `event: error` with
 * the JSON error body. A plain chunked stream that fails gets TorchServe's JSON error body as
 * its last chunk.
 */
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "http_inference.h"
#include "http_multipart.h"
#include "http_oip.h"
#include "http_reply.h"
#include "http_stream.h"
#include "core/job.h"
#include "log.h"
#include "core/model.h"
#include "core/core.h"
#include "core/worker_pool.h"

/* the front door's readiness rule (model_server_ready), in TorchServe's words */
static void ping(struct evhttp_request *req, const char *rid)
{
    int healthy = model_server_ready();
    json_t *o = json_object();
    json_object_set_new(o, "status", json_string(healthy ? "Healthy" : "Unhealthy"));
    http_send_json(req, rid, healthy ? 200 : 500, o);
}

static void add_query_params(struct evhttp_request *req, struct job *j)
{
    const char *q = evhttp_uri_get_query(evhttp_request_get_evhttp_uri(req));
    if (!q)
        return;
    struct evkeyvalq kv;
    TAILQ_INIT(&kv);
    if (evhttp_parse_query_str(q, &kv) != 0)
        return;
    struct evkeyval *e;
    TAILQ_FOREACH(e, &kv, next)
    job_add_param_owned(j, e->key, "", xstrdup(e->value), strlen(e->value));
    evhttp_clear_headers(&kv);
}

/* A multipart/form-data body as TorchServe passes it on: one parameter per part, named by its
 * form field, instead of "body" (http_multipart.h). 0, or -1 with e = 400 naming the problem. */
static int add_form_params(struct job *j, const char *ctype, struct evbuffer *in, size_t len,
                           struct submit_error *e)
{
    const char *body = len ? (const char *)evbuffer_pullup(in, -1) : "";
    struct http_part *parts = xmalloc(HTTP_MULTIPART_MAX_PARTS * sizeof(*parts));
    int n = http_multipart_parse(ctype, body, len, parts, HTTP_MULTIPART_MAX_PARTS, e->msg,
                                 sizeof(e->msg));
    if (n < 0) {
        e->status = 400;
        e->type = "BadRequestException";
        free(parts);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        char *v = xmalloc(parts[i].len + 1);
        memcpy(v, parts[i].data, parts[i].len);
        v[parts[i].len] = '\0';
        job_add_param_owned(j, parts[i].name, parts[i].ctype, v, parts[i].len);
    }
    free(parts);
    return 0;
}

/* The shared part of every inference entry point: body limits, job creation, submission. */
static void submit_predict(struct evhttp_request *req, const char *rid, struct model *m,
                           const char *url_path, int explain, int versioned)
{
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    size_t len = evbuffer_get_length(in);
    struct submit_error e;
    if (model_check_body(len, &e) != 0) {
        http_send_refusal(req, rid, &e);
        return;
    }
    struct http_call *c = http_call_new(req, rid, HTTP_STREAM_AUTO);
    struct job *j = job_new(rid, &http_call_sink, c);
    j->versioned = versioned;
    c->job = j;

    struct evkeyvalq *hdrs = evhttp_request_get_input_headers(req);
    struct evkeyval *h;
    const char *ctype = NULL;
    TAILQ_FOREACH(h, hdrs, next)
    {
        job_add_header(j, h->key, h->value, strlen(h->value));
        if (!strcasecmp(h->key, "Content-Type"))
            ctype = h->value;
    }
    job_add_header(j, "url_path", url_path ? url_path : "", url_path ? strlen(url_path) : 0);
    job_add_header(j, "explain", explain ? "True" : "False", explain ? 4 : 5);
    add_query_params(req, j);
    if (http_multipart_is_form(ctype)) {
        if (add_form_params(j, ctype, in, len, &e) != 0) {
            http_call_reject(c, e.status, e.type, e.msg);
            return;
        }
    } else {
        char *body = xmalloc(len + 1);
        evbuffer_remove(in, body, len);
        body[len] = '\0';
        job_add_param_owned(j, "body", ctype ? ctype : "", body, len);
    }

    int rc = model_submit_request(m, j, &e);
    if (rc == 1) { /* a sequence cancel, carried out by the frontend */
        json_t *o = json_object();
        json_object_set_new(o, "status", json_string(e.msg));
        evhttp_add_header(evhttp_request_get_output_headers(req),
                          srv->cfg.ts_header_key_sequence_id, j->seq_id);
        http_send_json(req, rid, 200, o);
        http_call_free(c);
        return;
    }
    if (rc < 0) {
        http_call_reject(c, e.status, e.type, e.msg);
        return;
    }
    http_call_watch(c);
}

/* /predictions/{model}[/{version}[/{url_path...}]] */
static void predictions(struct evhttp_request *req, const char *rid, struct http_path *p,
                        int explain)
{
    if (p->n < 2) {
        http_send_not_found(req, rid);
        return;
    }
    struct model *m;
    struct submit_error e;
    if (model_lookup(p->seg[1], p->n >= 3 ? p->seg[2] : NULL, &m, &e) != 0) {
        http_send_refusal(req, rid, &e);
        return;
    }
    struct buf up;
    buf_init(&up);
    for (int i = 3; i < p->n; i++)
        buf_printf(&up, "%s%s", i > 3 ? "/" : "", p->seg[i]);
    submit_predict(req, rid, m, up.len ? (char *)up.data : "", explain, p->n >= 3);
    buf_free(&up);
}

void http_inference_handle(struct evhttp_request *req, const char *rid, struct http_path *p)
{
    enum evhttp_cmd_type cmd = evhttp_request_get_command(req);
    if (p->n == 1 && !strcmp(p->seg[0], "ping"))
        ping(req, rid);
    else if (p->n >= 1 && !strcmp(p->seg[0], "predictions") && cmd != EVHTTP_REQ_OPTIONS)
        predictions(req, rid, p, 0);
    else if (p->n >= 1 && !strcmp(p->seg[0], "explanations") && cmd != EVHTTP_REQ_OPTIONS)
        predictions(req, rid, p, 1);
    else if (p->n >= 1 && !strcmp(p->seg[0], "v2"))
        http_oip_handle(req, rid, p);
    else
        http_send_not_found(req, rid);
}
