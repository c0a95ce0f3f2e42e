/*
 * grpc_server: gRPC C core servers on the loop thread, and the per-call state machine.
 *
 * Threads: gRPC's completion queue is driven by grpc_drive.c, from the loop thread where gRPC's
 * poller can be watched, else by a completion-queue thread that hands completions over; either
 * way every completion is handled here on the loop thread (handle), next to the models and jobs
 * the services touch: the call state machine takes no lock.
 * A call with a single request message sends its initial metadata with its first answer, in
 * one write instead of two; until then a service may add entries to it (gcall_add_metadata),
 * e.g. the sequence id a balancer in front learns from the answer's headers.
 *
 * Lifetime: `pending` counts a call's references: one per outstanding batch (taken before the
 * batch starts) and one for the service while it holds the call (`owned`). Whoever drops it to
 * 0 frees the call. The service's reference outlives gcall_finish / gcall_send_finish until the
 * loop's current callback has returned (it is dropped from a loop event, `released`): services
 * may still look at the call, e.g. gcall_finish after gcall_send_finish, in the same callback.
 * On on_cancel it is dropped when on_cancel returns.
 *
 * A call runs these batches, each with its own tag and at most one outstanding per op type:
 *   at T_NEW   {RECV_CLOSE_ON_SERVER} alone: completes when the call is over; cancelled = 1
 *              means the client went away, the deadline passed, or the server is shutting down
 *              {SEND_INITIAL_METADATA, RECV_MESSAGE} (bidi), {RECV_MESSAGE} (one request)
 *   then       RECV_MESSAGE re-armed after each message for client-streaming methods (a NULL
 *              buffer is the half-close);
 *              {SEND_MESSAGE} one at a time from the call's out-queue, the last one joined by
 *              SEND_STATUS_FROM_SERVER once the service has finished the call.
 * Calls that fail authorization or name an unknown method are answered without the service.
 */
#include "grpc_server.h"

#include <event2/event.h>
#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <sys/time.h>
#include <unistd.h>

#include "core/access_log.h"
#include "core/core.h"
#include "grpc_drive.h"
#include "jnum.h"
#include "log.h"
#include "mgmt/auth.h"
#include "pb_req.h"
#include "util.h"

/* requests armed per server: new calls wait in gRPC only if this many arrive in one loop turn */
#define ARMED_CALLS 32

enum tag_kind { TAG_NEW, TAG_CLOSE, TAG_RECV, TAG_SEND, TAG_SHUTDOWN };

struct gcall;
struct gtag {
    struct gcall *call;
    enum tag_kind kind;
};

struct gsrv {
    const char *name; /* "inference" / "management" */
    grpc_server *server;
    const struct grpc_method *methods;
    enum auth_scope scope;
    struct gtag shutdown_tag;
    int shut_down;
};

struct gmsg {
    grpc_byte_buffer *bb;
    size_t len;
    STAILQ_ENTRY(gmsg) link;
};

struct gmd {
    char *key, *val;
    struct gmd *next;
};

struct gcall {
    struct gsrv *srv;
    grpc_call *call;
    grpc_call_details details;
    grpc_metadata_array md;
    const struct grpc_method *method;
    char id[24];
    int64_t start_us;  /* the call arrived (access log's clock) */
    size_t sent_bytes; /* response messages queued (access log) */
    struct gtag t_new, t_close, t_recv, t_send;
    int pending; /* references: outstanding batches + 1 while owned (see top) */
    int owned;   /* the service holds the call (between dispatch and finish/cancel) */
    int close_cancelled;
    int recv_pending, recv_done, recv_hold;
    grpc_byte_buffer *recv_bb;
    int closed; /* RECV_CLOSE_ON_SERVER completed before the status went out */
    int send_pending;
    grpc_byte_buffer *send_bb;
    int status_queued;
    int md_sent; /* initial metadata has gone out (or is in the first send batch) */
    grpc_metadata out_md[GCALL_MAX_METADATA]; /* initial metadata a service added */
    size_t n_out_md;
    int status_sent;
    grpc_status_code status;
    grpc_slice status_details;
    STAILQ_HEAD(, gmsg) out;
    size_t out_bytes;             /* in out: what the client has not taken yet */
    int backlogged;               /* out_bytes passed stream_buffer_size, not yet half */
    gcall_backlog_fn *backlog_cb; /* the service pauses and resumes its work */
    struct event *stall;          /* backlogged and no progress: cancel */
    void *user;
    struct gmd *mdcache;
    struct gcall *next_released; /* G.released */
};

static struct {
    int started;
    grpc_completion_queue *cq;
    struct gsrv srv[2];
    int n_srv;
    struct event *ev_release; /* drops the service's references of G.released */
    struct gcall *released;   /* let go by their service in this loop turn */
    long live_calls;          /* allocated gcalls, armed ones included */
    long busy_calls;          /* calls between T_NEW and their end (grpc_drive_busy) */
    uint64_t next_id;
} G;

static void call_free(struct gcall *c);

/* ---- call lifetime ---- */

/* Drops one reference of c (a completed batch, or the service's): frees c with the last one;
 * c must not be touched after it. */
static void call_release(struct gcall *c)
{
    if (--c->pending == 0)
        call_free(c);
}

static void call_free(struct gcall *c)
{
    struct gmsg *m;
    while ((m = STAILQ_FIRST(&c->out))) {
        STAILQ_REMOVE_HEAD(&c->out, link);
        grpc_byte_buffer_destroy(m->bb);
        free(m);
    }
    if (c->stall)
        event_free(c->stall);
    while (c->mdcache) {
        struct gmd *n = c->mdcache->next;
        free(c->mdcache->key);
        free(c->mdcache->val);
        free(c->mdcache);
        c->mdcache = n;
    }
    if (c->status_queued)
        grpc_slice_unref(c->status_details);
    for (size_t i = 0; i < c->n_out_md; i++) {
        grpc_slice_unref(c->out_md[i].key);
        grpc_slice_unref(c->out_md[i].value);
    }
    grpc_metadata_array_destroy(&c->md);
    grpc_call_details_destroy(&c->details);
    if (c->call) {
        grpc_call_unref(c->call);
        grpc_drive_soon();
    }
    if (c->id[0] && --G.busy_calls == 0)
        grpc_drive_busy(0);
    free(c);
    G.live_calls--;
}

static int start_batch(struct gcall *c, const grpc_op *ops, size_t n, struct gtag *tag)
{
    c->pending++; /* counted before it starts */
    grpc_call_error e = grpc_call_start_batch(c->call, ops, n, tag, NULL);
    if (e != GRPC_CALL_OK) {
        c->pending--; /* never 0 here: the caller's own completion still holds a count */
        /* a bug in this state machine: end the call rather than leave the client hanging */
        LOG_ERROR("grpc call %s: start_batch (%d ops, first %d) failed: %d", c->id, (int)n,
                  (int)ops[0].op, (int)e);
        grpc_call_cancel_with_status(c->call, GRPC_STATUS_INTERNAL, "internal error", NULL);
        return -1;
    }
    grpc_drive_soon();
    return 0;
}

static void arm_new_call(struct gsrv *s)
{
    struct gcall *c = xcalloc(1, sizeof(*c));
    c->srv = s;
    c->t_new = (struct gtag){c, TAG_NEW};
    c->t_close = (struct gtag){c, TAG_CLOSE};
    c->t_recv = (struct gtag){c, TAG_RECV};
    c->t_send = (struct gtag){c, TAG_SEND};
    STAILQ_INIT(&c->out);
    grpc_call_details_init(&c->details);
    grpc_metadata_array_init(&c->md);
    G.live_calls++;
    c->pending = 1; /* the NEW completion */
    grpc_call_error e =
        grpc_server_request_call(s->server, &c->call, &c->details, &c->md, G.cq, G.cq, &c->t_new);
    if (e != GRPC_CALL_OK) {
        LOG_ERROR("grpc %s: request_call failed: %d", s->name, (int)e);
        call_free(c);
    }
}

/* Starts the next send batch if none is in flight: a queued message (with the status when it
 * is the last one and the service has finished), or the status alone. */
/* ---- a client that does not read: backpressure on the service, then cancel ---- */

static void on_stall(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct gcall *c = arg;
    LOG_WARN("grpc %s call %s: the client took nothing for %d s with %zu bytes waiting; cancelled",
             c->srv->name, c->id, srv->cfg.stream_stall_timeout, c->out_bytes);
    grpc_call_cancel_with_status(c->call, GRPC_STATUS_RESOURCE_EXHAUSTED,
                                 "The client stopped reading the stream", NULL);
    grpc_drive_soon();
}

static void arm_stall(struct gcall *c)
{
    if (!c->stall)
        c->stall = evtimer_new(srv->base, on_stall, c);
    struct timeval tv = {srv->cfg.stream_stall_timeout, 0};
    evtimer_add(c->stall, &tv);
}

/* Past stream_buffer_size queued bytes the service is told to pause; it resumes at half. */
static void backlog_check(struct gcall *c)
{
    size_t cap = (size_t)srv->cfg.stream_buffer_size;
    if (!c->backlogged && c->out_bytes > cap) {
        c->backlogged = 1;
        arm_stall(c);
        if (c->backlog_cb && c->owned)
            c->backlog_cb(c, 1);
    } else if (c->backlogged && c->out_bytes <= cap / 2) {
        c->backlogged = 0;
        evtimer_del(c->stall);
        if (c->backlog_cb && c->owned)
            c->backlog_cb(c, 0);
    }
}

static void pump_send(struct gcall *c)
{
    if (c->send_pending || c->closed || c->status_sent)
        return;
    grpc_op ops[3];
    size_t n = 0;
    memset(ops, 0, sizeof(ops));
    struct gmsg *m = STAILQ_FIRST(&c->out);
    if (!m && !c->status_queued)
        return;
    if (!c->md_sent) {
        ops[n].op = GRPC_OP_SEND_INITIAL_METADATA;
        ops[n].data.send_initial_metadata.count = c->n_out_md;
        ops[n].data.send_initial_metadata.metadata = c->out_md;
        n++;
        c->md_sent = 1;
    }
    if (m) {
        STAILQ_REMOVE_HEAD(&c->out, link);
        c->send_bb = m->bb;
        c->out_bytes -= m->len;
        free(m);
        backlog_check(c);
        ops[n].op = GRPC_OP_SEND_MESSAGE;
        ops[n].data.send_message.send_message = c->send_bb;
        n++;
    }
    if (c->status_queued && STAILQ_EMPTY(&c->out)) {
        ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
        ops[n].data.send_status_from_server.status = c->status;
        ops[n].data.send_status_from_server.status_details = &c->status_details;
        ops[n].data.send_status_from_server.trailing_metadata_count = 0;
        n++;
        c->status_sent = 1;
    }
    if (n == 0)
        return;
    if (start_batch(c, ops, n, &c->t_send) == 0) {
        c->send_pending = 1;
    } else if (c->send_bb) {
        grpc_byte_buffer_destroy(c->send_bb);
        c->send_bb = NULL;
    }
}

static void arm_recv(struct gcall *c, int with_initial_metadata)
{
    if (c->recv_pending || c->recv_done || c->closed)
        return;
    grpc_op ops[2];
    size_t n = 0;
    memset(ops, 0, sizeof(ops));
    if (with_initial_metadata) {
        c->md_sent = 1; /* from on_new: no send can race this yet */
        ops[n].op = GRPC_OP_SEND_INITIAL_METADATA;
        ops[n].data.send_initial_metadata.count = 0;
        n++;
    }
    ops[n].op = GRPC_OP_RECV_MESSAGE;
    ops[n].data.recv_message.recv_message = &c->recv_bb;
    n++;
    if (start_batch(c, ops, n, &c->t_recv) == 0)
        c->recv_pending = 1;
}

/* Answers a call without involving a service (auth failure, unknown method). */
static void reject(struct gcall *c, grpc_status_code code, const char *msg)
{
    grpc_access(c->call, c->details.method, c->start_us, code, 0, c->id);
    c->status = code;
    c->status_details = grpc_slice_from_copied_string(msg);
    c->status_queued = 1;
    grpc_op ops[2];
    memset(ops, 0, sizeof(ops));
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[1].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[1].data.send_status_from_server.status = code;
    ops[1].data.send_status_from_server.status_details = &c->status_details;
    c->status_sent = 1;
    if (start_batch(c, ops, 2, &c->t_send) == 0)
        c->send_pending = 1;
}

static void on_new(struct gcall *c, int success)
{
    struct gsrv *s = c->srv;
    if (!success) { /* shutting down: the armed request is returned unused */
        return;
    }
    if (!s->shut_down)
        arm_new_call(s);
    c->id[0] = 'g'; /* "g<n>"; a u64 is at most 20 digits */
    c->id[1 + jnum_u64(c->id + 1, ++G.next_id)] = '\0';
    c->start_us = access_log_clock_us();
    if (G.busy_calls++ == 0)
        grpc_drive_busy(1);

    grpc_op close_op;
    memset(&close_op, 0, sizeof(close_op));
    close_op.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    close_op.data.recv_close_on_server.cancelled = &c->close_cancelled;
    if (start_batch(c, &close_op, 1, &c->t_close) != 0)
        return;

    for (const struct grpc_method *m = s->methods; m->path; m++)
        if (grpc_slice_str_cmp(c->details.method, m->path) == 0)
            c->method = m;
    /* the inference port also serves OIP's inference.GRPCInferenceService (grpc_oip.c) */
    const struct grpc_method *oip = s->methods == grpc_inference_methods ? grpc_oip_methods : NULL;
    for (const struct grpc_method *m = oip; m && !c->method && m->path; m++)
        if (grpc_slice_str_cmp(c->details.method, m->path) == 0)
            c->method = m;
    if (auth_check(s->scope, gcall_metadata(c, "authorization")) != 0) {
        LOG_INFO("grpc %s call %s: token authorization failed", s->name, c->id);
        reject(c, GRPC_STATUS_UNAUTHENTICATED, AUTH_FAIL_MSG);
        return;
    }
    if (!c->method) {
        char *path = grpc_slice_to_c_string(c->details.method);
        LOG_INFO("grpc %s call %s: unknown method %s", s->name, c->id, path);
        gpr_free(path);
        reject(c, GRPC_STATUS_UNIMPLEMENTED, "Method not found");
        return;
    }
    c->owned = 1;
    c->pending++; /* the service's reference */
    /* A bidi call sends its initial metadata at once; a call with one request message sends it
     * with its first answer, in the same write. */
    arm_recv(c, c->method->client_stream);
}

static void on_recv(struct gcall *c, int success)
{
    c->recv_pending = 0;
    grpc_byte_buffer *bb = c->recv_bb;
    c->recv_bb = NULL;
    if (!success || c->closed || !c->owned) {
        if (bb)
            grpc_byte_buffer_destroy(bb);
        return;
    }
    if (!bb) { /* the client half-closed */
        c->recv_done = 1;
        if (c->method->client_stream) {
            if (c->method->on_half_close)
                c->method->on_half_close(c);
        } else {
            gcall_finish(c, GRPC_STATUS_INVALID_ARGUMENT, "No request message");
        }
        return;
    }
    grpc_byte_buffer_reader r;
    if (!grpc_byte_buffer_reader_init(&r, bb)) {
        grpc_byte_buffer_destroy(bb);
        gcall_finish(c, GRPC_STATUS_INTERNAL, "Cannot read the request message");
        return;
    }
    grpc_slice sl = grpc_byte_buffer_reader_readall(&r);
    grpc_byte_buffer_reader_destroy(&r);
    grpc_byte_buffer_destroy(bb);
    if (!c->method->client_stream)
        c->recv_done = 1; /* a unary request: any further message is the client's problem */
    char nul[96];
    if (c->method->input && pb_req_nul_field(c->method->input, GRPC_SLICE_START_PTR(sl),
                                             GRPC_SLICE_LENGTH(sl), nul, sizeof(nul))) {
        char msg[160];
        snprintf(msg, sizeof(msg), "Field '%s' contains a NUL byte", nul);
        grpc_slice_unref(sl);
        if (c->method->on_cancel)
            c->method->on_cancel(c); /* a stream may hold earlier requests */
        gcall_finish(c, GRPC_STATUS_INVALID_ARGUMENT, msg);
        return;
    }
    c->method->on_message(c, GRPC_SLICE_START_PTR(sl), GRPC_SLICE_LENGTH(sl));
    grpc_slice_unref(sl);
    if (c->method->client_stream && c->owned && !c->recv_hold)
        arm_recv(c, 0);
}

static void on_send(struct gcall *c, int success)
{
    c->send_pending = 0;
    if (success && c->backlogged)
        arm_stall(c); /* it reads, slowly: not a stall */
    if (c->send_bb)
        grpc_byte_buffer_destroy(c->send_bb);
    c->send_bb = NULL;
    if (success)
        pump_send(c);
}

static void on_close(struct gcall *c)
{
    c->closed = 1;
    if (c->owned) {
        /* over before the service finished: the client, its deadline or our shutdown */
        LOG_INFO("grpc %s call %s: cancelled by the client or deadline", c->srv->name, c->id);
        c->owned = 0;
        if (c->method && c->method->on_cancel)
            c->method->on_cancel(c);
        call_release(c); /* the service's reference; handle() still holds the close's */
    }
}

static void handle(void *tag, int success)
{
    struct gtag *t = tag;
    if (t->kind == TAG_SHUTDOWN) {
        struct gsrv *s = (struct gsrv *)((char *)t - offsetof(struct gsrv, shutdown_tag));
        s->shut_down = 2;
        return;
    }
    struct gcall *c = t->call;
    switch (t->kind) {
    case TAG_NEW:
        on_new(c, success);
        break;
    case TAG_CLOSE:
        on_close(c);
        break;
    case TAG_RECV:
        on_recv(c, success);
        break;
    case TAG_SEND:
        on_send(c, success);
        break;
    default:
        break;
    }
    call_release(c);
}

/* ---- the service API ---- */

/* One response message, packed now. */
static struct gmsg *pack_message(const ProtobufCMessage *msg)
{
    size_t len = protobuf_c_message_get_packed_size(msg);
    grpc_slice sl = grpc_slice_malloc(len);
    protobuf_c_message_pack(msg, GRPC_SLICE_START_PTR(sl));
    struct gmsg *m = xmalloc(sizeof(*m));
    m->bb = grpc_raw_byte_buffer_create(&sl, 1);
    m->len = len;
    grpc_slice_unref(sl);
    return m;
}

static void drop_message(struct gmsg *m)
{
    grpc_byte_buffer_destroy(m->bb);
    free(m);
}

/* Queues m (NULL: none) and the status (code >= 0, only while the service owns the call), and
 * gets them going. 0 if queued; m is freed if it was not. */
static int queue_send(struct gcall *c, struct gmsg *m, int code, const char *text)
{
    if (c->closed || c->status_queued) {
        if (m)
            drop_message(m);
        return -1;
    }
    if (m) {
        STAILQ_INSERT_TAIL(&c->out, m, link);
        c->out_bytes += m->len;
        c->sent_bytes += m->len;
        backlog_check(c);
    }
    if (code >= 0) {
        c->status = (grpc_status_code)code;
        c->status_details = grpc_slice_from_copied_string(text ? text : "");
        c->status_queued = 1;
    }
    pump_send(c);
    return 0;
}

int gcall_send(struct gcall *c, const ProtobufCMessage *msg)
{
    if (!c->owned)
        return -1;
    return queue_send(c, pack_message(msg), -1, NULL);
}

/* Ends the service's ownership; its reference is dropped once the current loop callback is over
 * (flush_released), so c stays valid to the service until then. */
static void let_go(struct gcall *c, struct gmsg *m, int code, const char *text)
{
    if (!c->owned) {
        if (m)
            drop_message(m);
        return;
    }
    c->owned = 0;
    if (code >= 0) {
        grpc_count_status(code);
        const char *rid = gcall_metadata(c, "x-request-id");
        grpc_access(c->call, c->details.method, c->start_us, code, c->sent_bytes + (m ? m->len : 0),
                    rid ? rid : c->id);
    }
    queue_send(c, m, code, text);
    c->next_released = G.released;
    G.released = c;
    event_active(G.ev_release, EV_READ, 0);
}

static void flush_released(void)
{
    struct gcall *c;
    while ((c = G.released)) {
        G.released = c->next_released;
        call_release(c);
    }
}

static void on_release(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    (void)arg;
    flush_released();
}

void gcall_set_backlog_cb(struct gcall *c, gcall_backlog_fn *cb)
{
    c->backlog_cb = cb;
}

void gcall_finish(struct gcall *c, int code, const char *msg)
{
    let_go(c, NULL, code, msg);
}

void gcall_send_finish(struct gcall *c, const ProtobufCMessage *msg, int code, const char *text)
{
    let_go(c, c->owned ? pack_message(msg) : NULL, code, text);
}

void gcall_hold_recv(struct gcall *c, int hold)
{
    c->recv_hold = hold;
    if (!hold && c->owned && c->method->client_stream)
        arm_recv(c, 0);
}

void *gcall_user(const struct gcall *c)
{
    return c->user;
}

void gcall_set_user(struct gcall *c, void *user)
{
    c->user = user;
}

const char *gcall_id(const struct gcall *c)
{
    return c->id;
}

/* gRPC core refuses a batch whose metadata has a key outside [0-9a-z_.-] or a value outside
 * printable ASCII; such an entry is refused here instead, and the call goes on without it. */
int gcall_add_metadata(struct gcall *c, const char *key, const char *value)
{
    if (c->md_sent || c->n_out_md == GCALL_MAX_METADATA || !*key)
        return -1;
    for (const char *p = key; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || strchr("_.-", *p)))
            return -1;
    for (const unsigned char *p = (const unsigned char *)value; *p; p++)
        if (*p < 0x20 || *p > 0x7e)
            return -1;
    grpc_metadata *md = &c->out_md[c->n_out_md++];
    memset(md, 0, sizeof(*md));
    md->key = grpc_slice_from_copied_string(key);
    md->value = grpc_slice_from_copied_string(value);
    return 0;
}

const char *gcall_metadata(struct gcall *c, const char *key)
{
    for (struct gmd *d = c->mdcache; d; d = d->next)
        if (!strcmp(d->key, key))
            return d->val;
    const char *found = NULL;
    for (size_t i = 0; i < c->md.count; i++) {
        if (grpc_slice_str_cmp(c->md.metadata[i].key, key) != 0)
            continue;
        struct gmd *d = xmalloc(sizeof(*d));
        d->key = xstrdup(key);
        d->val = xstrndup((const char *)GRPC_SLICE_START_PTR(c->md.metadata[i].value),
                          GRPC_SLICE_LENGTH(c->md.metadata[i].value));
        d->next = c->mdcache;
        c->mdcache = d;
        found = d->val;
        break;
    }
    return found;
}

/* ---- start / stop ---- */

static int add_server(struct gsrv *s, const char *name, const char *addr, int port,
                      const struct grpc_method *methods, enum auth_scope scope)
{
    s->name = name;
    s->methods = methods;
    s->scope = scope;
    s->shutdown_tag = (struct gtag){NULL, TAG_SHUTDOWN};
    grpc_arg arg[4];
    arg[0].type = GRPC_ARG_INTEGER;
    arg[0].key = (char *)GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
    arg[0].value.integer =
        srv->cfg.max_request_size > 0x7fffffff ? 0x7fffffff : (int)srv->cfg.max_request_size;
    /* gRPC binds with SO_REUSEPORT by default: a second server on a taken port would then
     * silently share it instead of failing */
    arg[1].type = GRPC_ARG_INTEGER;
    arg[1].key = (char *)GRPC_ARG_ALLOW_REUSEPORT;
    arg[1].value.integer = 0;
    /* TorchServe's grpc_*_max_connection_age(_grace)_ms: clients reconnect (and rebalance) */
    size_t n = 2, which = scope == AUTH_MANAGEMENT;
    int age = srv->cfg.grpc_max_connection_age_ms[which];
    int grace = srv->cfg.grpc_max_connection_age_grace_ms[which];
    if (age > 0) {
        arg[n].type = GRPC_ARG_INTEGER;
        arg[n].key = (char *)GRPC_ARG_MAX_CONNECTION_AGE_MS;
        arg[n++].value.integer = age;
    }
    if (grace > 0) {
        arg[n].type = GRPC_ARG_INTEGER;
        arg[n].key = (char *)GRPC_ARG_MAX_CONNECTION_AGE_GRACE_MS;
        arg[n++].value.integer = grace;
    }
    grpc_channel_args args = {n, arg};
    s->server = grpc_server_create(&args, NULL);
    grpc_server_register_completion_queue(s->server, G.cq, NULL);
    const char *host = addr && *addr ? addr : "127.0.0.1";
    char *target = strchr(host, ':') && host[0] != '[' ? xasprintf("[%s]:%d", host, port)
                                                       : xasprintf("%s:%d", host, port);
    grpc_server_credentials *creds = grpc_server_credentials_from_config();
    if (!creds) {
        free(target);
        grpc_server_destroy(s->server);
        s->server = NULL;
        return -1;
    }
    int bound = grpc_server_add_http2_port(s->server, target, creds);
    grpc_server_credentials_release(creds);
    if (bound == 0) {
        LOG_ERROR("gRPC %s API: cannot bind %s", name, target);
        fprintf(stderr, "torchserve-c: gRPC %s API: cannot bind %s\n", name, target);
        free(target);
        grpc_server_destroy(s->server);
        s->server = NULL;
        return -1;
    }
    grpc_server_start(s->server);
    for (int i = 0; i < ARMED_CALLS; i++)
        arm_new_call(s);
    LOG_INFO("gRPC %s API listening on %s", name, target);
    free(target);
    return 0;
}

int grpc_servers_start(void)
{
    if (!srv->cfg.enable_grpc)
        return 0;
    grpc_drive_init();
    G.cq = grpc_completion_queue_create_for_next(NULL);
    G.ev_release = event_new(srv->base, -1, 0, on_release, NULL);
    G.started = 1;
    G.n_srv = 0;
    if (add_server(&G.srv[G.n_srv], "inference", srv->cfg.grpc_inference_address,
                   srv->cfg.grpc_inference_port, grpc_inference_methods, AUTH_INFERENCE) != 0)
        return -1;
    G.n_srv++;
    if (add_server(&G.srv[G.n_srv], "management", srv->cfg.grpc_management_address,
                   srv->cfg.grpc_management_port, grpc_management_methods, AUTH_MANAGEMENT) != 0)
        return -1;
    G.n_srv++;
    return grpc_drive_start(G.cq, G.n_srv, handle);
}

static int stop_done(void)
{
    for (int i = 0; i < G.n_srv; i++)
        if (G.srv[i].shut_down != 2)
            return 0;
    return G.live_calls == 0;
}

void grpc_servers_stop(void)
{
    if (!G.started)
        return;
    G.started = 0;
    grpc_drive_stop();
    for (int i = 0; i < G.n_srv; i++) {
        G.srv[i].shut_down = 1;
        grpc_server_shutdown_and_notify(G.srv[i].server, G.cq, &G.srv[i].shutdown_tag);
        grpc_server_cancel_all_calls(G.srv[i].server);
    }
    /* the loop no longer runs: handle completions here until every call is gone */
    for (;;) {
        flush_released(); /* services may finish calls while they are cancelled */
        if (stop_done())
            break;
        grpc_event ev = grpc_completion_queue_next(
            G.cq,
            gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_millis(100, GPR_TIMESPAN)),
            NULL);
        if (ev.type == GRPC_OP_COMPLETE)
            handle(ev.tag, ev.success);
    }
    for (int i = 0; i < G.n_srv; i++)
        grpc_server_destroy(G.srv[i].server);
    grpc_completion_queue_shutdown(G.cq);
    while (grpc_completion_queue_next(G.cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL).type !=
           GRPC_QUEUE_SHUTDOWN)
        ;
    grpc_completion_queue_destroy(G.cq);
    event_free(G.ev_release);
    grpc_shutdown();
    LOG_INFO("gRPC servers stopped");
}
