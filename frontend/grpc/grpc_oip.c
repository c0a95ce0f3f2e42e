/*
 * grpc_oip: inference.GRPCInferenceService (the OIP gRPC data plane, proto/oip_grpc.proto) on the
 * gRPC inference port, on top of grpc_server.h's call machinery and oip_req.h: the calls, the
 * streams and the order of their answers. The protobuf encoding itself is oip_pb.c. The same
 * messages are served under TorchServe's own name for the service,
 * org.pytorch.serve.grpc.openinference.GRPCInferenceService (its open_inference_grpc.proto: the
 * six unary rpcs).
 *
 * ModelInfer takes tensors in `contents` or in `raw_input_contents`. The answer's form follows
 * the service name's server: under inference.* it is always raw_output_contents, as Triton
 * answers (tritonclient's as_numpy and Triton's examples read only raw_output_contents;
 * MLServer's clients decode raw answers through ModelInferResponseConverter as well); under
 * TorchServe's name it is the request's form, typed contents as TorchServe answers, raw for a
 * raw request (and FP16/BF16, which contents cannot carry, always raw). A streaming handler's
 * partial results are joined into one response.
 *
 * ModelStreamInfer (bidi): every request message is a job of its own, submitted at once, so the
 * requests of one stream run concurrently (and batch together). Responses leave in request
 * order: a request's frames are written when it is the oldest unfinished one, and held until
 * then otherwise; each partial result of a streaming handler is one response. A failed request
 * is answered in band (Triton: ModelStreamInferResponse.error_message) and the stream stays open
 * until the client half-closes and every request is answered. With oip_stream_response=mlserver
 * the responses are plain ModelInferResponse (MLServer's form) and an error ends the call.
 * A model that reads a stream of requests (an MLServer runtime, oip_req_reads_stream) gets the
 * whole call as one job, as MLServer hands it to one predict_stream: the first message starts
 * it, each later one is fed to it (job_feed: 'D' frames to its worker), the client's half-close
 * ends its input, and the call ends when that job does.
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
#include "grpc_oip_config.h"
#include "oip_pb.h"
#include "pb_req.h"
#include "core/core.h"

#define SVC "/inference.GRPCInferenceService/"
#define SVC_TS "/org.pytorch.serve.grpc.openinference.GRPCInferenceService/"
#define MAX_INFLIGHT 64 /* requests of one stream in flight before reading pauses */
#define MAX_FED 4096    /* later messages one call may feed its job (they wait in its worker) */

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
    int over;          /* the call was finished (mlserver error) */
    int paused;        /* the client does not read: jobs run paused (gcall_set_backlog_cb) */
    struct greq *feed; /* the request that takes the call's later messages, while it runs */
    int fed_done;      /* it ended: so does the call, once answered */
    size_t n_fed;
};

/* ModelStreamInfer: every running request of the stream pauses with it */
static void on_backlog(struct gcall *c, int paused)
{
    struct gstream *st = gcall_user(c);
    if (!st)
        return;
    st->paused = paused;
    struct greq *q;
    TAILQ_FOREACH(q, &st->reqs, link)
    {
        if (q->job && !q->done)
            job_pause(q->job, paused);
    }
}

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

/* ---------------------------------------------------------------- delivery */

static void stream_advance(struct gstream *st);

static void send_stream(struct greq *q, struct oip_pb_resp *rs, const char *error)
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
    struct oip_pb_resp rs;
    oip_pb_resp_init(&rs, q->model_name, q->model_version, q->id);
    send_stream(q, &rs, msg);
    oip_pb_resp_free(&rs);
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
    struct oip_pb_resp rs;
    oip_pb_resp_init(&rs, q->model_name, q->model_version, q->id);
    if (!q->st) { /* unary: one response at the end */
        if (r.is_text) {
            buf_put(&q->acc, r.text, r.text_len);
            if (final)
                oip_pb_resp_text(&rs, q->raw_out, q->acc.data ? (char *)q->acc.data : "",
                                 q->acc.len);
        } else {
            oip_pb_resp_tensors(&rs, q->raw_out, &r);
        }
        if (final || !r.is_text) {
            gcall_send(q->call, &rs.m.base);
            gcall_finish(q->call, GS_OK, NULL);
            q->done = 1;
        }
    } else if (!q->st->over) {
        int send = 1;
        if (r.is_text && r.text_len)
            oip_pb_resp_text(&rs, q->raw_out, r.text, r.text_len);
        else if (!r.is_text)
            oip_pb_resp_tensors(&rs, q->raw_out, &r);
        else /* an empty final frame: Triton's form still marks the end (below) */
            send = final && (q->empty_final || !q->st->mlserver);
        if (!q->st->mlserver)
            oip_pb_resp_final_flag(&rs, final && (send || !r.is_text));
        if (send && final && r.is_text && r.text_len && q->empty_final) {
            /* the last chunk carries text: the flag goes on an empty response after it */
            oip_pb_resp_final_flag(&rs, 0);
            send_stream(q, &rs, NULL);
            oip_pb_resp_free(&rs);
            oip_pb_resp_init(&rs, q->model_name, q->model_version, q->id);
            oip_pb_resp_final_flag(&rs, 1);
        }
        if (send)
            send_stream(q, &rs, NULL);
        if (final)
            q->done = 1;
    }
    oip_pb_resp_free(&rs);
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
    if (q->st && q->st->paused && !final)
        job_pause(j, 1); /* dispatched after the client stopped reading */
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
        if (q == st->feed) {
            st->feed = NULL;
            st->fed_done = 1;
        }
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
    } else if ((st->half_closed || st->fed_done) && TAILQ_EMPTY(&st->reqs)) {
        gcall_finish(st->call, GS_OK, NULL);
        free(st);
    }
}

/* A request message of either method: parse, build the job, submit. Returns the request; for
 * a request that failed before a job exists, fail() has run and q->done is set. */
static struct greq *start_request(struct gcall *c, struct gstream *st, const uint8_t *data,
                                  size_t len, int triton)
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
    /* the request is dropped below, once the job holds what it keeps (pb_req.h) */
    _Alignas(max_align_t) unsigned char mem[PB_ARENA_BYTES];
    struct pb_arena arena;
    pb_arena_init(&arena, mem, sizeof(mem));
    Inference__ModelInferRequest *m =
        inference__model_infer_request__unpack(&arena.alloc, len, data);
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
    q->raw_out = triton || m->n_raw_input_contents > 0;

    struct oip_pb_req ps;
    memset(&ps, 0, sizeof(ps));
    buf_init(&ps.raw);
    struct model *mod = NULL;
    struct submit_error e;
    if (model_lookup_triton(q->model_name, q->model_version, &mod, &e) != 0) {
        req_error(q, e.status, e.msg);
        goto out;
    }
    free(q->model_version);
    q->model_version = xstrdup(mod->version);
    if (oip_pb_parse(m, &ps, err, sizeof(err))) {
        req_error(q, 400, err);
        goto out;
    }
    ps.r.stream = st != NULL;
    q->empty_final = json_is_true(json_object_get(ps.params, "triton_enable_empty_final_response"));
    struct job *j = job_new(q->id, &grpc_oip_sink, q);
    j->versioned = m->model_version && *m->model_version;
    q->job = j;
    int text;
    if (oip_req_to_job(mod, &ps.r, j, &text, err, sizeof(err))) {
        req_error(q, 400, err);
        goto out;
    }
    if (st && oip_req_reads_stream(mod))
        job_open_input(j);
    int rc = model_submit_request(mod, j, &e);
    if (rc == 0 && st && st->paused)
        job_pause(j, 1);
    if (rc == 0 && j->input_stream)
        st->feed = q;
    if (rc == 1) { /* a sequence cancel, carried out by the frontend: an empty answer */
        struct oip_pb_resp rs;
        oip_pb_resp_init(&rs, q->model_name, q->model_version, q->id);
        if (st)
            send_stream(q, &rs, NULL);
        else {
            gcall_send(c, &rs.m.base);
            gcall_finish(c, GS_OK, NULL);
        }
        oip_pb_resp_free(&rs);
        q->done = 1;
    } else if (rc < 0) {
        req_error(q, e.status, e.msg);
    }
out:
    oip_pb_req_free(&ps);
    if (arena.spilled)
        inference__model_infer_request__free_unpacked(m, &arena.alloc);
    return q;
}

/* ---------------------------------------------------------------- methods */

static void model_infer_message(struct gcall *c, const uint8_t *data, size_t len)
{
    struct greq *q = start_request(c, NULL, data, len, 1);
    if (q->done)
        greq_free(q);
    else
        gcall_set_user(c, q);
}

/* TorchServe's service name: answers in the request's form */
static void model_infer_message_ts(struct gcall *c, const uint8_t *data, size_t len)
{
    struct greq *q = start_request(c, NULL, data, len, 0);
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

/* The call ends with code and msg: its feed job is cancelled (a bad later message, too many). */
static void stream_abort(struct gstream *st, int code, const char *msg)
{
    gcall_finish(st->call, code, msg);
    st->over = 1;
    stream_advance(st);
}

/* A later message of a call whose job reads a stream: checked as a request is, then fed. */
static void feed_message(struct gstream *st, const uint8_t *data, size_t len)
{
    char err[1024];
    if (++st->n_fed > MAX_FED) {
        snprintf(err, sizeof(err),
                 "ModelStreamInfer: a call to a model that reads a stream of requests takes at "
                 "most %d messages",
                 MAX_FED + 1);
        stream_abort(st, GS_RESOURCE_EXHAUSTED, err);
        return;
    }
    _Alignas(max_align_t) unsigned char mem[PB_ARENA_BYTES];
    struct pb_arena arena;
    pb_arena_init(&arena, mem, sizeof(mem));
    Inference__ModelInferRequest *m =
        inference__model_infer_request__unpack(&arena.alloc, len, data);
    if (!m) {
        snprintf(err, sizeof(err), "message %zu: cannot parse ModelInferRequest", st->n_fed + 1);
        stream_abort(st, GS_INVALID_ARGUMENT, err);
        return;
    }
    struct oip_pb_req ps;
    memset(&ps, 0, sizeof(ps));
    buf_init(&ps.raw);
    char perr[900];
    if (oip_pb_parse(m, &ps, perr, sizeof(perr)) ||
        oip_req_feed(&ps.r, st->feed->job, perr, sizeof(perr))) {
        snprintf(err, sizeof(err), "message %zu: %s", st->n_fed + 1, perr);
        stream_abort(st, GS_INVALID_ARGUMENT, err);
    }
    oip_pb_req_free(&ps);
    if (arena.spilled)
        inference__model_infer_request__free_unpacked(m, &arena.alloc);
}

static void stream_message(struct gcall *c, const uint8_t *data, size_t len)
{
    struct gstream *st = gcall_user(c);
    if (st && st->feed) {
        feed_message(st, data, len);
        return;
    }
    if (!st) {
        st = xcalloc(1, sizeof(*st));
        st->call = c;
        TAILQ_INIT(&st->reqs);
        st->mlserver =
            srv->cfg.oip_stream_response && !strcmp(srv->cfg.oip_stream_response, "mlserver");
        gcall_set_user(c, st);
        gcall_set_backlog_cb(c, on_backlog);
    }
    start_request(c, st, data, len, 1);
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
    if (st->feed && st->feed->job)
        job_feed_end(st->feed->job);
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
    r.ready = model_server_ready();
    gcall_send(c, &r.base);
    gcall_finish(c, GS_OK, NULL);
}

/* name/version of a ModelReady or ModelMetadata request -> model, or the call is finished. */
static struct model *lookup(struct gcall *c, const char *name, const char *version)
{
    struct model *m;
    struct submit_error e;
    if (model_lookup_triton(name, version, &m, &e) != 0) {
        gcall_finish(c, GS_NOT_FOUND, e.msg);
        return NULL;
    }
    return m;
}

static void model_ready_call(struct gcall *c, const uint8_t *data, size_t len)
{
    Inference__ModelReadyRequest *q = inference__model_ready_request__unpack(NULL, len, data);
    if (!q) {
        gcall_finish(c, GS_INVALID_ARGUMENT, "cannot parse ModelReadyRequest");
        return;
    }
    struct model *m = lookup(c, q->name, q->version);
    if (m) {
        Inference__ModelReadyResponse r = INFERENCE__MODEL_READY_RESPONSE__INIT;
        r.ready = model_ready(m);
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

static void model_config(struct gcall *c, const uint8_t *data, size_t len)
{
    Inference__ModelConfigRequest *q = inference__model_config_request__unpack(NULL, len, data);
    if (!q) {
        gcall_finish(c, GS_INVALID_ARGUMENT, "cannot parse ModelConfigRequest");
        return;
    }
    struct model *m = lookup(c, q->name, q->version);
    if (m)
        grpc_oip_config_send(c, m);
    inference__model_config_request__free_unpacked(q, NULL);
}

const struct grpc_method grpc_oip_methods[] = {
    {SVC "ServerLive", 0, server_live, NULL, NULL, NULL},
    {SVC "ServerReady", 0, server_ready, NULL, NULL, NULL},
    {SVC "ModelReady", 0, model_ready_call, NULL, NULL,
     &inference__model_ready_request__descriptor},
    {SVC "ServerMetadata", 0, server_metadata, NULL, NULL, NULL},
    {SVC "ModelMetadata", 0, model_metadata, NULL, NULL,
     &inference__model_metadata_request__descriptor},
    {SVC "ModelInfer", 0, model_infer_message, NULL, model_infer_cancel,
     &inference__model_infer_request__descriptor},
    {SVC "ModelStreamInfer", 1, stream_message, stream_half_close, stream_cancel,
     &inference__model_infer_request__descriptor},
    {SVC "ModelConfig", 0, model_config, NULL, NULL, &inference__model_config_request__descriptor},
    {NULL, 0, NULL, NULL, NULL, NULL},
};

const struct grpc_method grpc_oip_ts_methods[] = {
    {SVC_TS "ServerLive", 0, server_live, NULL, NULL, NULL},
    {SVC_TS "ServerReady", 0, server_ready, NULL, NULL, NULL},
    {SVC_TS "ModelReady", 0, model_ready_call, NULL, NULL,
     &inference__model_ready_request__descriptor},
    {SVC_TS "ServerMetadata", 0, server_metadata, NULL, NULL, NULL},
    {SVC_TS "ModelMetadata", 0, model_metadata, NULL, NULL,
     &inference__model_metadata_request__descriptor},
    {SVC_TS "ModelInfer", 0, model_infer_message_ts, NULL, model_infer_cancel,
     &inference__model_infer_request__descriptor},
    {NULL, 0, NULL, NULL, NULL, NULL},
};
