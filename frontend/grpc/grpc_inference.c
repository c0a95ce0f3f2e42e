/*
 * grpc_inference: TorchServe's InferenceAPIsService (port 7070) on the call machinery of
 * grpc_server.c. Loop thread only.
 *
 * A PredictionsRequest becomes one job: model_name/model_version pick the model (empty version
 * = the default one), every `input` map entry becomes one backend parameter (name = key, no
 * content type, the last duplicate key wins as in proto3); sequence_id and the input keys
 * ts_request_sequence_start/_end/_cancel become the sequence headers. The job's sink
 * turns worker frames into PredictionResponse messages:
 *   Predictions        the bodies of all frames, joined, as one message (a streaming handler
 *                      called through the unary rpc gives its whole answer), then OK;
 *   StreamPredictions  one message per frame; an empty last frame after earlier ones only ends
 *                      the stream; a non-streaming handler gives one message and OK;
 *   StreamPredictions2 each request message is one job, run one after the other in arrival
 *                      order so answers keep the order of the requests; each frame is one
 *                      message, a failed request is one message with `status` set and the
 *                      stream stays open; after the client's half-close the call ends with OK
 *                      once every answer is out.
 * A frame with a status >= 400, or a failed job, ends Predictions/StreamPredictions with the
 * gRPC code of TorchServe's HTTP->gRPC table and the error text, except that an unknown model
 * or version is NOT_FOUND and a full queue or a model without workers is UNAVAILABLE. A call the
 * client cancels (or whose deadline passes) cancels its job: the worker gets a cancel frame.
 */
#include <ctype.h>
#include <event2/event.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/queue.h>

#include "grpc_server.h"
#include "inference.pb-c.h"
#include "core/job.h"
#include "log.h"
#include "pb_req.h"
#include "core/model.h"
#include "core/sequence.h"
#include "core/core.h"
#include "util.h"
#include "core/worker_pool.h"

typedef Org__Pytorch__Serve__Grpc__Inference__PredictionsRequest PredReq;
typedef Org__Pytorch__Serve__Grpc__Inference__PredictionResponse PredResp;

/* StreamPredictions2: requests read ahead of the running one before reading pauses */
#define STREAM2_MAX_PENDING 16

enum ikind { K_PREDICT, K_STREAM, K_STREAM2 };

struct pending_req {
    PredReq *req;
    STAILQ_ENTRY(pending_req) link;
};

struct icall {
    struct gcall *g;
    enum ikind kind;
    struct job *job;  /* the transport's reference to the running job */
    char *seq_id;     /* sequence_id of the running request (echoed in answers), or NULL */
    char *stream_seq; /* StreamPredictions2: the sequence this stream carries, once known */
    struct buf acc;   /* Predictions: the bodies so far */
    int sent;         /* messages sent for the running job */
    int half_closed;  /* StreamPredictions2: the client sends nothing more */
    int paused;       /* the client does not read: jobs run paused (gcall_set_backlog_cb) */
    int start_told;   /* the trailer ts_request_sequence_start has been added */
    int n_pending;
    STAILQ_HEAD(, pending_req) pending;
    struct event *next_ev; /* StreamPredictions2: starts the next request from the loop */
};

static void icall_free(struct icall *c)
{
    struct pending_req *p;
    while ((p = STAILQ_FIRST(&c->pending))) {
        STAILQ_REMOVE_HEAD(&c->pending, link);
        org__pytorch__serve__grpc__inference__predictions_request__free_unpacked(p->req, NULL);
        free(p);
    }
    if (c->job)
        job_unref(c->job);
    if (c->next_ev)
        event_free(c->next_ev);
    free(c->seq_id);
    free(c->stream_seq);
    buf_free(&c->acc);
    free(c);
}

static void on_backlog(struct gcall *g, int paused)
{
    struct icall *c = gcall_user(g);
    if (!c)
        return;
    c->paused = paused;
    if (c->job)
        job_pause(c->job, paused);
}

static struct icall *icall_new(struct gcall *g, enum ikind kind)
{
    struct icall *c = xcalloc(1, sizeof(*c));
    c->g = g;
    c->kind = kind;
    buf_init(&c->acc);
    STAILQ_INIT(&c->pending);
    gcall_set_user(g, c);
    gcall_set_backlog_cb(g, on_backlog);
    return c;
}

/* The call is over for the service: status out, state freed. */
static void icall_end(struct icall *c, int code, const char *msg)
{
    gcall_finish(c->g, code, msg);
    icall_free(c);
}

/* last: the call ends with OK right after this message (sent in the same batch) */
static void send_prediction(struct icall *c, const void *data, size_t len, int last)
{
    PredResp r = ORG__PYTORCH__SERVE__GRPC__INFERENCE__PREDICTION_RESPONSE__INIT;
    r.prediction.data = (uint8_t *)data;
    r.prediction.len = len;
    r.sequence_id = c->seq_id ? c->seq_id : (char *)"";
    if (last)
        gcall_send_finish(c->g, &r.base, GS_OK, NULL);
    else
        gcall_send(c->g, &r.base);
    c->sent++;
}

/* StreamPredictions2: one failed request, reported inside the stream. */
static void send_status(struct icall *c, int code, const char *msg)
{
    Google__Rpc__Status st = GOOGLE__RPC__STATUS__INIT;
    st.code = code;
    st.message = (char *)msg;
    PredResp r = ORG__PYTORCH__SERVE__GRPC__INFERENCE__PREDICTION_RESPONSE__INIT;
    r.status = &st;
    r.sequence_id = c->seq_id ? c->seq_id : (char *)"";
    gcall_send(c->g, &r.base);
}

static void stream2_next(struct icall *c);

static void on_next_ev(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    stream2_next(arg);
}

/* StreamPredictions2: the running job ended (answered or failed). The next request is started
 * from the loop, not from inside the worker's delivery of this one. */
static void job_ended(struct icall *c)
{
    job_unref(c->job);
    c->job = NULL;
    free(c->seq_id);
    c->seq_id = NULL;
    c->sent = 0;
    if (!c->next_ev)
        c->next_ev = event_new(srv->base, -1, 0, on_next_ev, c);
    event_active(c->next_ev, EV_TIMEOUT, 0);
}

static int code_for_http(int status)
{
    return grpc_status_from_http(status);
}

/* A unary or server-streaming call whose request opened its sequence on this instance ends
 * with the trailer ts_request_sequence_start: true (the HTTP header's twin), or the value of the
 * handler's own header of that name: a client-chosen id that started anew here is never an OK
 * like a continuation. StreamPredictions2 carries its sequence on one stream, on one instance. */
static void tell_start(struct icall *c, struct job *j, const struct otf_prediction *p)
{
    if (!j->seq_new || c->start_told || c->kind == K_STREAM2)
        return;
    char key[128], val[16] = "true";
    const char *name = srv->cfg.ts_header_key_sequence_start;
    size_t n = strlen(name);
    if (n >= sizeof(key))
        return;
    for (size_t i = 0; i <= n; i++)
        key[i] = (char)tolower((unsigned char)name[i]);
    const struct otf_kv *kv = p ? otf_find_kv(p->headers, p->n_headers, name) : NULL;
    if (kv && kv->val.len > 0 && (size_t)kv->val.len < sizeof(val)) {
        memcpy(val, kv->val.p, (size_t)kv->val.len);
        val[kv->val.len] = '\0';
    }
    c->start_told = gcall_add_trailer(c->g, key, val) == 0;
}

static void on_frame(struct job *j, const struct otf_prediction *p, int final)
{
    struct icall *c = j->sink_arg;
    tell_start(c, j, p);
    int status = p->status > 0 ? p->status : 200;
    size_t len = p->body.len > 0 ? (size_t)p->body.len : 0;
    if (c->paused && !final)
        job_pause(j, 1); /* dispatched after the client stopped reading */
    if (status >= 400) {
        /* the handler failed this request: its body is the error text */
        char *msg = xstrndup(len ? p->body.p : "", len);
        LOG_REQ(LOG_LEVEL_WARN, j->rid, "grpc %s: handler answered %d: %s", gcall_id(c->g), status,
                msg);
        if (!final)
            job_cancel(j); /* a stream that failed midway: the worker stops it */
        if (c->kind == K_STREAM2) {
            send_status(c, code_for_http(status), msg);
            free(msg);
            job_ended(c);
            return;
        }
        icall_end(c, code_for_http(status), msg);
        free(msg);
        return;
    }
    switch (c->kind) {
    case K_PREDICT:
        if (c->acc.len + len > (size_t)srv->cfg.max_response_size) {
            /* a streaming handler's frames joined: bounded like one response */
            if (!final)
                job_cancel(j);
            icall_end(c, GS_RESOURCE_EXHAUSTED,
                      "Response exceeds max_response_size; use StreamPredictions");
            return;
        }
        if (len)
            buf_put(&c->acc, p->body.p, len);
        if (final) {
            send_prediction(c, c->acc.data ? (const char *)c->acc.data : "", c->acc.len, 1);
            icall_end(c, GS_OK, NULL);
        }
        return;
    case K_STREAM:
        if (len || (final && c->sent == 0))
            send_prediction(c, len ? p->body.p : "", len, final);
        if (final)
            icall_end(c, GS_OK, NULL);
        return;
    case K_STREAM2:
        if (len || (final && c->sent == 0))
            send_prediction(c, len ? p->body.p : "", len, 0);
        if (final)
            job_ended(c);
        return;
    }
}

static void on_error(struct job *j, int status, const char *type, const char *msg)
{
    struct icall *c = j->sink_arg;
    tell_start(c, j, NULL);
    LOG_REQ(LOG_LEVEL_WARN, j->rid, "grpc %s: request failed: %d %s: %s", gcall_id(c->g), status,
            type ? type : "", msg);
    /* a worker that died under the request: the model is temporarily unavailable */
    int code = j->worker_lost ? GS_UNAVAILABLE : code_for_http(status);
    if (c->kind == K_STREAM2) {
        send_status(c, code, msg);
        job_ended(c);
        return;
    }
    icall_end(c, code, msg);
}

static const struct job_sink grpc_job_sink = {on_frame, on_error};

/* An input entry set to "true" (case-insensitive), e.g. ts_request_sequence_start. */
static int input_flag(const PredReq *req, const char *key)
{
    int v = 0;
    for (size_t i = 0; i < req->n_input; i++) {
        const ProtobufCBinaryData *d = &req->input[i]->value;
        if (req->input[i]->key && !strcmp(req->input[i]->key, key))
            v = d->len == 4 && !strncasecmp((const char *)d->data, "true", 4);
    }
    return v;
}

/* submit() answered the request itself (msg is the prediction), no job runs */
#define SUBMIT_ANSWERED (-1)

/* The sequence id also goes out as response metadata named like the HTTP header (lower case, as
 * HTTP/2 wants), so a balancer that learns ids from response headers (deploy/haproxy) learns
 * the ids of unary and server-streaming calls too. StreamPredictions2 needs none: its stream
 * stays on one connection. A header name gRPC cannot carry is left out. */
static void echo_sequence_header(struct gcall *g, const char *seq_id)
{
    char key[128];
    const char *name = srv->cfg.ts_header_key_sequence_id;
    size_t n = strlen(name);
    if (n >= sizeof(key))
        return;
    for (size_t i = 0; i <= n; i++)
        key[i] = (char)tolower((unsigned char)name[i]);
    gcall_add_metadata(g, key, seq_id);
}

/* Builds and queues the job of one request. 0 when queued, SUBMIT_ANSWERED, or a gRPC error
 * code; msg is filled in for the last two. */
static int submit(struct icall *c, const PredReq *req, char *msg, size_t msglen)
{
    if (!req->model_name || !*req->model_name) {
        snprintf(msg, msglen, "Parameter model_name is required.");
        return GS_INVALID_ARGUMENT;
    }
    struct model *m;
    struct submit_error e;
    if (model_lookup(req->model_name, req->model_version, &m, &e) != 0) {
        snprintf(msg, msglen, "%s", e.msg);
        return GS_NOT_FOUND;
    }
    struct job *j = job_new(NULL, &grpc_job_sink, c);
    j->versioned = req->model_version && *req->model_version;
    /* proto3 maps: the last entry of a key wins (a message may hold millions of entries) */
    const char *few_keys[PB_REQ_FEW_KEYS];
    size_t few_keep[PB_REQ_FEW_KEYS];
    const char **keys = few_or_alloc(few_keys, PB_REQ_FEW_KEYS, req->n_input, sizeof(*keys));
    size_t *keep = few_or_alloc(few_keep, PB_REQ_FEW_KEYS, req->n_input, sizeof(*keep));
    for (size_t i = 0; i < req->n_input; i++)
        keys[i] = req->input[i]->key;
    size_t n_keep = pb_req_last_keys(keys, req->n_input, keep);
    for (size_t k = 0; k < n_keep; k++) {
        size_t i = keep[k];
        const char *key = req->input[i]->key ? req->input[i]->key : "";
        const ProtobufCBinaryData *v = &req->input[i]->value;
        char *val = xmalloc(v->len + 1);
        if (v->len)
            memcpy(val, v->data, v->len);
        val[v->len] = '\0';
        job_add_param_owned(j, key, "", val, v->len);
    }
    free_unless_few(keys, few_keys);
    free_unless_few(keep, few_keep);
    /* Sequences (TorchServe's intent, not its ByteString bug): sequence_id, and the input keys
     * ts_request_sequence_start / _end / _cancel set to "true". Within one StreamPredictions2
     * call a message without an id continues the stream's sequence. */
    const char *sid = req->sequence_id && *req->sequence_id ? req->sequence_id : NULL;
    int start = input_flag(req, SEQ_HDR_START);
    if (!sid && !start && c->kind == K_STREAM2 && c->stream_seq)
        sid = c->stream_seq;
    if (sid)
        job_add_header(j, srv->cfg.ts_header_key_sequence_id, sid, strlen(sid));
    if (start)
        job_add_header(j, srv->cfg.ts_header_key_sequence_start, "true", 4);
    if (input_flag(req, SEQ_HDR_END))
        job_add_header(j, srv->cfg.ts_header_key_sequence_end, "true", 4);
    if (input_flag(req, SEQ_HDR_CANCEL))
        job_add_header(j, SEQ_HDR_CANCEL, "true", 4);
    int rc = model_submit_request(m, j, &e);
    /* the id the request ran under (generated for a new sequence), echoed in every answer */
    free(c->seq_id);
    c->seq_id = j->seq_id ? xstrdup(j->seq_id) : sid ? xstrdup(sid) : NULL;
    if (c->kind == K_STREAM2 && j->seq_id && rc >= 0) {
        free(c->stream_seq);
        c->stream_seq = xstrdup(j->seq_id);
    }
    if (c->kind != K_STREAM2 && j->seq_id && rc >= 0)
        echo_sequence_header(c->g, j->seq_id);
    if (rc != 0) {
        job_unref(j);
        snprintf(msg, msglen, "%s", e.msg);
        /* 1: the frontend answered at once (a sequence cancel): msg is the answer */
        return rc == 1 ? SUBMIT_ANSWERED : grpc_status_from_http(e.status);
    }
    c->job = j;
    c->sent = 0;
    if (c->paused)
        job_pause(j, 1);
    return 0;
}

static PredReq *unpack(const uint8_t *data, size_t len)
{
    return org__pytorch__serve__grpc__inference__predictions_request__unpack(NULL, len, data);
}

/* ---- Ping ---- */

static void ping_message(struct gcall *g, const uint8_t *data, size_t len)
{
    (void)data;
    (void)len;
    /* the rule of GET /ping (model_server_ready) */
    int healthy = model_server_ready();
    Org__Pytorch__Serve__Grpc__Inference__TorchServeHealthResponse r =
        ORG__PYTORCH__SERVE__GRPC__INFERENCE__TORCH_SERVE_HEALTH_RESPONSE__INIT;
    r.health = healthy ? (char *)"{\n  \"status\": \"Healthy\"\n}"
                       : (char *)"{\n  \"status\": \"Unhealthy\"\n}";
    gcall_send_finish(g, &r.base, GS_OK, NULL);
}

/* ---- Predictions, StreamPredictions ---- */

static void predict_message(struct gcall *g, const uint8_t *data, size_t len, enum ikind kind)
{
    /* the request is dropped here, once submit has copied what the job keeps */
    _Alignas(max_align_t) unsigned char mem[PB_ARENA_BYTES];
    struct pb_arena arena;
    pb_arena_init(&arena, mem, sizeof(mem));
    PredReq *req =
        org__pytorch__serve__grpc__inference__predictions_request__unpack(&arena.alloc, len, data);
    if (!req) {
        gcall_finish(g, GS_INVALID_ARGUMENT, "Cannot parse the PredictionsRequest");
        return;
    }
    struct icall *c = icall_new(g, kind);
    char msg[512];
    int code = submit(c, req, msg, sizeof(msg));
    if (arena.spilled)
        org__pytorch__serve__grpc__inference__predictions_request__free_unpacked(req, &arena.alloc);
    if (code == SUBMIT_ANSWERED) {
        send_prediction(c, msg, strlen(msg), 1);
        icall_end(c, GS_OK, NULL);
    } else if (code) {
        icall_end(c, code, msg);
    }
}

static void predictions_message(struct gcall *g, const uint8_t *data, size_t len)
{
    predict_message(g, data, len, K_PREDICT);
}

static void stream_message(struct gcall *g, const uint8_t *data, size_t len)
{
    predict_message(g, data, len, K_STREAM);
}

static void predict_cancel(struct gcall *g)
{
    struct icall *c = gcall_user(g);
    if (!c)
        return;
    if (c->job)
        job_cancel(c->job);
    icall_free(c);
}

/* ---- StreamPredictions2 ---- */

/* Starts the next waiting request if none runs; ends the call after the half-close. */
static void stream2_next(struct icall *c)
{
    while (!c->job) {
        struct pending_req *p = STAILQ_FIRST(&c->pending);
        if (!p)
            break;
        STAILQ_REMOVE_HEAD(&c->pending, link);
        if (c->n_pending-- == STREAM2_MAX_PENDING)
            gcall_hold_recv(c->g, 0);
        char msg[512];
        int code = submit(c, p->req, msg, sizeof(msg));
        if (code) {
            if (code == SUBMIT_ANSWERED)
                send_prediction(c, msg, strlen(msg), 0);
            else
                send_status(c, code, msg);
        }
        org__pytorch__serve__grpc__inference__predictions_request__free_unpacked(p->req, NULL);
        free(p);
    }
    if (!c->job && c->half_closed)
        icall_end(c, GS_OK, NULL);
}

static void stream2_message(struct gcall *g, const uint8_t *data, size_t len)
{
    struct icall *c = gcall_user(g);
    if (!c)
        c = icall_new(g, K_STREAM2);
    PredReq *req = unpack(data, len);
    if (!req) {
        send_status(c, GS_INVALID_ARGUMENT, "Cannot parse the PredictionsRequest");
        return;
    }
    struct pending_req *p = xmalloc(sizeof(*p));
    p->req = req;
    STAILQ_INSERT_TAIL(&c->pending, p, link);
    if (++c->n_pending == STREAM2_MAX_PENDING)
        gcall_hold_recv(g, 1);
    stream2_next(c);
}

static void stream2_half_close(struct gcall *g)
{
    struct icall *c = gcall_user(g);
    if (!c) { /* the client sent no request at all */
        gcall_finish(g, GS_OK, NULL);
        return;
    }
    c->half_closed = 1;
    if (!c->job && STAILQ_EMPTY(&c->pending))
        icall_end(c, GS_OK, NULL);
}

#define INFERENCE_SVC "/org.pytorch.serve.grpc.inference.InferenceAPIsService/"

#define PRED_REQ org__pytorch__serve__grpc__inference__predictions_request__descriptor
const struct grpc_method grpc_inference_methods[] = {
    {INFERENCE_SVC "Ping", 0, ping_message, NULL, NULL, NULL},
    {INFERENCE_SVC "Predictions", 0, predictions_message, NULL, predict_cancel, &PRED_REQ},
    {INFERENCE_SVC "StreamPredictions", 0, stream_message, NULL, predict_cancel, &PRED_REQ},
    {INFERENCE_SVC "StreamPredictions2", 1, stream2_message, stream2_half_close, predict_cancel,
     &PRED_REQ},
    {NULL, 0, NULL, NULL, NULL, NULL},
};
