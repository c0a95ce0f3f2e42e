/*
 * grpc_server: gRPC C core servers, the completion-queue thread, the mailbox to the loop thread,
 * and the per-call state machine.
 *
 * Design (see reference/c-engineering-notes.md §1.6, "hybrid"): one CQ, registered with both
 * servers, is drained by one thread that moves (tag, success) pairs into a locked mailbox and
 * wakes the loop through an eventfd (a plain read event of the loop, so the two threads never
 * contend for the event base's lock). The loop thread owns models and jobs and runs every service
 * callback, so services never need locks. Three kinds of completion stay on the CQ thread
 * because they need nothing from the loop:
 *   - a new call (its setup batches then need no wake-up of the poller);
 *   - every SEND: the CQ thread starts the call's next queued message (or its status) itself, so
 *     a stream's messages go out back to back without waking the loop once per message; the
 *     loop only appends to the out-queue and starts a send when none is in flight;
 *   - the RECV_CLOSE of a call whose status has been sent.
 * When the loop queues a send while the CQ thread is awake, it hands the call over (kick_send)
 * and the CQ thread starts the batch before it sleeps again; only when it sleeps does the loop
 * start the batch itself. Two threads writing the same transports made gRPC contend for its
 * combiners and offload writes to its executor threads (perf: futex wake-ups on every call).
 * A call with a single request message sends its initial metadata with its first answer, in
 * one write instead of two.
 * Shared between the threads, hence under the call's mutex `mu`: the out-queue, send_pending,
 * send_bb, the queued status and `closed`. Everything else in a call is touched by one thread at
 * a time, handed over through the mailbox's lock or gRPC's own completion ordering.
 *
 * Lifetime: `pending` is an atomic count of references: one per outstanding batch (taken before
 * the batch starts) and one for the service while it holds the call (`owned`). Whoever drops it
 * to 0, on either thread, frees the call. The loop touches a call only while it holds one of
 * those references (the service's, or the count of the completion it is handling), so the CQ
 * thread can never free a call under it. The service's reference outlives gcall_finish /
 * gcall_send_finish until the loop's current callback has returned (it is dropped from a loop
 * event, `released`): services may still look at the call, e.g. gcall_finish after
 * gcall_send_finish, in the same callback. On on_cancel it is dropped when on_cancel returns.
 *
 * A call runs these batches, each with its own tag and at most one outstanding per op type:
 *   at T_NEW   {RECV_CLOSE_ON_SERVER} alone: completes when the call is over; cancelled = 1
 *              means the client went away, the deadline passed, or the server is shutting down
 *              {SEND_INITIAL_METADATA, RECV_MESSAGE}: always initial metadata first
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
#include <grpc/grpc_security.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>
#include <pthread.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/queue.h>
#include <unistd.h>

#include "auth.h"
#include "log.h"
#include "server.h"
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
    struct gtag t_new, t_close, t_recv, t_send;
    atomic_int pending; /* references: outstanding batches + 1 while owned (see top) */
    int owned;          /* the service holds the call (between dispatch and finish/cancel) */
    int close_cancelled;
    int recv_pending, recv_done, recv_hold; /* loop thread (CQ thread before the first recv) */
    grpc_byte_buffer *recv_bb;
    pthread_mutex_t mu; /* the send side below, shared by both threads */
    int closed;         /* RECV_CLOSE_ON_SERVER handled on the loop (before the status went out) */
    int send_pending;
    grpc_byte_buffer *send_bb;
    int status_queued;
    int md_sent;            /* initial metadata has gone out (or is in the first send batch) */
    atomic_int status_sent; /* also read by the CQ thread without mu (RECV_CLOSE shortcut) */
    grpc_status_code status;
    grpc_slice status_details;
    STAILQ_HEAD(, gmsg) out;
    void *user;
    struct gmd *mdcache;
    struct gcall *next_released; /* G.released (loop thread) */
    int in_handoff;              /* in G.hand (under G.mu) */
};

struct mail {
    void *tag;
    int success;
};

static struct {
    int started;
    grpc_completion_queue *cq;
    pthread_t thread;
    struct gsrv srv[2];
    int n_srv;
    int efd;                  /* eventfd: the CQ thread rings it when the mailbox was empty */
    struct event *ev;         /* the loop's read event on efd */
    struct event *ev_release; /* drops the service's references of G.released */
    struct gcall *released;   /* let go by their service in this loop turn (loop thread) */
    pthread_mutex_t mu;
    pthread_cond_t cond;
    /* the mailbox (struct mail items) and its spare storage, swapped by drain_mailbox */
    struct buf box, box_spare;
    int draining;
    int cq_blocked; /* the CQ thread sleeps (or is about to) in grpc_completion_queue_next */
    /* calls (struct gcall * items) whose next send the CQ thread starts before it sleeps
     * (kick_send), each holding a reference; hand_spare is the CQ thread's */
    struct buf hand, hand_spare;
    atomic_long live_calls; /* allocated gcalls, armed ones included */
    uint64_t next_id;       /* CQ thread only */
} G = {.efd = -1, .mu = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};

/* ---- CQ thread ---- */

static void on_new(struct gcall *c, int success);
static void on_send(struct gcall *c, int success);
static void call_release(struct gcall *c);
static void call_free(struct gcall *c);

static void pump_send(struct gcall *c);

/* Takes the items of a locked queue (G.mu held), leaving the queue empty on the spare's storage;
 * the caller gives the storage back as the spare once done, so a warm queue never allocates. */
static struct buf queue_take(struct buf *q, struct buf *spare)
{
    struct buf items = *q;
    *q = *spare;
    buf_reset(q);
    return items;
}

static void pump_send_locked(struct gcall *c)
{
    pthread_mutex_lock(&c->mu);
    pump_send(c);
    pthread_mutex_unlock(&c->mu);
}

/* Starts the sends the loop handed over (kick_send) while this thread was busy, until none is
 * left; then marks this thread as about to sleep, so the loop starts its sends itself. */
static void flush_handoff(void)
{
    for (;;) {
        pthread_mutex_lock(&G.mu);
        struct buf taken = queue_take(&G.hand, &G.hand_spare);
        struct gcall **h = (struct gcall **)taken.data;
        size_t n = taken.len / sizeof(*h);
        for (size_t i = 0; i < n; i++)
            h[i]->in_handoff = 0;
        G.cq_blocked = n == 0;
        pthread_mutex_unlock(&G.mu);
        for (size_t i = 0; i < n; i++) {
            pump_send_locked(h[i]);
            call_release(h[i]);
        }
        G.hand_spare = taken; /* only this thread swaps the spare */
        if (n == 0)
            return;
    }
}

static void *cq_thread(void *arg)
{
    (void)arg;
    for (;;) {
        flush_handoff();
        grpc_event ev = grpc_completion_queue_next(G.cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
        pthread_mutex_lock(&G.mu);
        G.cq_blocked = 0;
        if (ev.type == GRPC_QUEUE_SHUTDOWN) {
            pthread_mutex_unlock(&G.mu);
            break;
        }
        if (ev.type != GRPC_OP_COMPLETE) {
            pthread_mutex_unlock(&G.mu);
            continue;
        }
        struct gtag *t = ev.tag;
        if (t->kind == TAG_NEW && ev.success && !G.draining) {
            /* A new call is set up here, on the poller's own thread: its first batches then
             * need no wake-up of this thread. The loop sees the call only through the
             * completions of those batches, which come back through this thread and the
             * mailbox, so the two threads never touch it at the same time. */
            pthread_mutex_unlock(&G.mu);
            struct gcall *c = t->call;
            on_new(c, 1);
            call_release(c);
            continue;
        }
        if (t->kind == TAG_SEND && !G.draining) {
            /* The next message of the call goes out from here (under the call's lock), with
             * no loop wake-up; a batch started here completes on this thread's next turn. */
            pthread_mutex_unlock(&G.mu);
            on_send(t->call, ev.success);
            call_release(t->call);
            continue;
        }
        if (t->kind == TAG_CLOSE && !G.draining && t->call->status_sent) {
            /* The call is over after its status went out, so the service had let go of it:
             * nothing for the loop to do. Whoever drops `pending` to 0 frees the call, and the
             * loop holds a reference whenever it touches it (see the top of this file). */
            pthread_mutex_unlock(&G.mu);
            call_release(t->call);
            continue;
        }
        struct mail m = {ev.tag, ev.success};
        int first = G.box.len == 0;
        buf_put(&G.box, &m, sizeof(m));
        if (G.draining)
            pthread_cond_signal(&G.cond);
        pthread_mutex_unlock(&G.mu);
        /* the loop's own read event on an eventfd, not event_active: no contention on the
         * event base's lock with the loop thread */
        uint64_t one = 1;
        if (first && write(G.efd, &one, sizeof(one)) < 0)
            LOG_ERROR("grpc: cannot wake the loop: %s", strerror(errno));
    }
    return NULL;
}

/* ---- call lifetime ---- */

/* Drops one reference of c (a completed batch, or the service's): frees c with the last one.
 * Called from both threads, hence the atomic decrement; c must not be touched after it. */
static void call_release(struct gcall *c)
{
    if (atomic_fetch_sub(&c->pending, 1) == 1)
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
    while (c->mdcache) {
        struct gmd *n = c->mdcache->next;
        free(c->mdcache->key);
        free(c->mdcache->val);
        free(c->mdcache);
        c->mdcache = n;
    }
    if (c->status_queued)
        grpc_slice_unref(c->status_details);
    grpc_metadata_array_destroy(&c->md);
    grpc_call_details_destroy(&c->details);
    if (c->call)
        grpc_call_unref(c->call);
    pthread_mutex_destroy(&c->mu);
    free(c);
    G.live_calls--;
    pthread_mutex_lock(&G.mu);
    if (G.draining) /* grpc_servers_stop waits for the last call */
        pthread_cond_signal(&G.cond);
    pthread_mutex_unlock(&G.mu);
}

static int start_batch(struct gcall *c, const grpc_op *ops, size_t n, struct gtag *tag)
{
    /* counted before it starts: its completion may be released on the CQ thread at once */
    c->pending++;
    grpc_call_error e = grpc_call_start_batch(c->call, ops, n, tag, NULL);
    if (e != GRPC_CALL_OK) {
        c->pending--; /* never 0 here: the caller's own completion still holds a count */
        /* a bug in this state machine: end the call rather than leave the client hanging */
        LOG_ERROR("grpc call %s: start_batch (%d ops, first %d) failed: %d", c->id, (int)n,
                  (int)ops[0].op, (int)e);
        grpc_call_cancel_with_status(c->call, GRPC_STATUS_INTERNAL, "internal error", NULL);
        return -1;
    }
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
    pthread_mutex_init(&c->mu, NULL);
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
 * is the last one and the service has finished), or the status alone. Either thread, with c->mu
 * held (the batch starts under it, so the two threads' sends cannot overtake each other). */
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
        n++;
        c->md_sent = 1;
    }
    if (m) {
        STAILQ_REMOVE_HEAD(&c->out, link);
        c->send_bb = m->bb;
        free(m);
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
    snprintf(c->id, sizeof(c->id), "g%llu", (unsigned long long)++G.next_id);

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
    c->method->on_message(c, GRPC_SLICE_START_PTR(sl), GRPC_SLICE_LENGTH(sl));
    grpc_slice_unref(sl);
    if (c->method->client_stream && c->owned && !c->recv_hold)
        arm_recv(c, 0);
}

/* A send batch completed: the CQ thread normally (the loop while stopping). */
static void on_send(struct gcall *c, int success)
{
    pthread_mutex_lock(&c->mu);
    c->send_pending = 0;
    grpc_byte_buffer *bb = c->send_bb;
    c->send_bb = NULL;
    if (success)
        pump_send(c);
    pthread_mutex_unlock(&c->mu);
    if (bb)
        grpc_byte_buffer_destroy(bb);
}

static void on_close(struct gcall *c)
{
    pthread_mutex_lock(&c->mu);
    c->closed = 1;
    pthread_mutex_unlock(&c->mu);
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

/* Takes everything out of the mailbox (under the lock) and handles it (without). */
static size_t drain_mailbox(void)
{
    pthread_mutex_lock(&G.mu);
    struct buf taken = queue_take(&G.box, &G.box_spare);
    pthread_mutex_unlock(&G.mu);
    const struct mail *box = (const struct mail *)taken.data;
    size_t n = taken.len / sizeof(*box);
    for (size_t i = 0; i < n; i++)
        handle(box[i].tag, box[i].success);
    G.box_spare = taken;
    return n;
}

static void on_mail(evutil_socket_t fd, short what, void *arg)
{
    (void)what;
    (void)arg;
    uint64_t rings; /* read before draining: a later ring then finds the mailbox refilled */
    if (read(fd, &rings, sizeof(rings)) < 0 && errno != EAGAIN)
        LOG_ERROR("grpc: mailbox eventfd: %s", strerror(errno));
    drain_mailbox();
}

/* ---- the service API ---- */

/* One response message, packed now (outside the call's lock). */
static struct gmsg *pack_message(const ProtobufCMessage *msg)
{
    size_t len = protobuf_c_message_get_packed_size(msg);
    grpc_slice sl = grpc_slice_malloc(len);
    protobuf_c_message_pack(msg, GRPC_SLICE_START_PTR(sl));
    struct gmsg *m = xmalloc(sizeof(*m));
    m->bb = grpc_raw_byte_buffer_create(&sl, 1);
    grpc_slice_unref(sl);
    return m;
}

static void drop_message(struct gmsg *m)
{
    grpc_byte_buffer_destroy(m->bb);
    free(m);
}

/* Gets c's queued sends going. Loop thread, c->mu not held. While the CQ thread is awake, it
 * gets the call handed over and starts the batch itself before it sleeps: then only that thread
 * drives the transports, and gRPC neither contends for a transport nor offloads the write to
 * its executor threads. While it sleeps, the batch starts here at once. */
static void kick_send(struct gcall *c)
{
    pthread_mutex_lock(&G.mu);
    if (!G.cq_blocked && !G.draining) {
        if (!c->in_handoff) {
            buf_put(&G.hand, &c, sizeof(c));
            c->in_handoff = 1;
            c->pending++; /* dropped by the CQ thread once the send started */
        }
        pthread_mutex_unlock(&G.mu);
        return;
    }
    pthread_mutex_unlock(&G.mu);
    pump_send_locked(c);
}

/* Queues m (NULL: none) and the status (code >= 0, only while the service owns the call), and
 * gets them going. Loop thread. 0 if queued; m is freed if it was not. */
static int queue_send(struct gcall *c, struct gmsg *m, int code, const char *text)
{
    int ret = 0;
    pthread_mutex_lock(&c->mu);
    if (c->closed || c->status_queued) {
        ret = -1;
    } else {
        if (m) {
            STAILQ_INSERT_TAIL(&c->out, m, link);
            m = NULL;
        }
        if (code >= 0) {
            c->status = (grpc_status_code)code;
            c->status_details = grpc_slice_from_copied_string(text ? text : "");
            c->status_queued = 1;
        }
    }
    pthread_mutex_unlock(&c->mu);
    if (m)
        drop_message(m);
    else if (ret == 0)
        kick_send(c);
    return ret;
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

int grpc_status_from_http(int s)
{
    switch (s) {
    case 400:
        return GS_INVALID_ARGUMENT;
    case 401:
        return GS_UNAUTHENTICATED;
    case 403:
        return GS_PERMISSION_DENIED;
    case 404:
        return GS_NOT_FOUND;
    case 409:
        return GS_ABORTED;
    case 413:
    case 429:
        return GS_RESOURCE_EXHAUSTED;
    case 416:
        return GS_OUT_OF_RANGE;
    case 499:
        return GS_CANCELLED;
    case 501:
        return GS_UNIMPLEMENTED;
    case 503:
        return GS_UNAVAILABLE;
    case 504:
        return GS_DEADLINE_EXCEEDED;
    }
    if (s >= 200 && s < 300)
        return GS_OK;
    if (s >= 400 && s < 500)
        return GS_FAILED_PRECONDITION;
    if (s >= 500 && s < 600)
        return GS_INTERNAL;
    return GS_UNKNOWN;
}

/* ---- start / stop ---- */

static int add_server(struct gsrv *s, const char *name, const char *addr, int port,
                      const struct grpc_method *methods, enum auth_scope scope)
{
    s->name = name;
    s->methods = methods;
    s->scope = scope;
    s->shutdown_tag = (struct gtag){NULL, TAG_SHUTDOWN};
    grpc_arg arg[2];
    arg[0].type = GRPC_ARG_INTEGER;
    arg[0].key = (char *)GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
    arg[0].value.integer =
        srv->cfg.max_request_size > 0x7fffffff ? 0x7fffffff : (int)srv->cfg.max_request_size;
    /* gRPC binds with SO_REUSEPORT by default: a second server on a taken port would then
     * silently share it instead of failing */
    arg[1].type = GRPC_ARG_INTEGER;
    arg[1].key = (char *)GRPC_ARG_ALLOW_REUSEPORT;
    arg[1].value.integer = 0;
    grpc_channel_args args = {2, arg};
    s->server = grpc_server_create(&args, NULL);
    grpc_server_register_completion_queue(s->server, G.cq, NULL);
    const char *host = addr && *addr ? addr : "127.0.0.1";
    char *target = strchr(host, ':') && host[0] != '[' ? xasprintf("[%s]:%d", host, port)
                                                       : xasprintf("%s:%d", host, port);
    grpc_server_credentials *creds = grpc_insecure_server_credentials_create();
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
    grpc_init();
    G.cq = grpc_completion_queue_create_for_next(NULL);
    G.efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (G.efd < 0) {
        LOG_ERROR("gRPC: eventfd: %s", strerror(errno));
        return -1;
    }
    G.ev = event_new(srv->base, G.efd, EV_READ | EV_PERSIST, on_mail, NULL);
    event_add(G.ev, NULL);
    G.ev_release = event_new(srv->base, -1, 0, on_release, NULL);
    G.started = 1;
    if (pthread_create(&G.thread, NULL, cq_thread, NULL) != 0) {
        LOG_ERROR("cannot start the gRPC completion-queue thread");
        return -1;
    }
    G.n_srv = 0;
    if (add_server(&G.srv[G.n_srv], "inference", srv->cfg.grpc_inference_address,
                   srv->cfg.grpc_inference_port, grpc_inference_methods, AUTH_INFERENCE) != 0)
        return -1;
    G.n_srv++;
    if (add_server(&G.srv[G.n_srv], "management", srv->cfg.grpc_management_address,
                   srv->cfg.grpc_management_port, grpc_management_methods, AUTH_MANAGEMENT) != 0)
        return -1;
    G.n_srv++;
    return 0;
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
    pthread_mutex_lock(&G.mu);
    G.draining = 1;
    pthread_mutex_unlock(&G.mu);
    for (int i = 0; i < G.n_srv; i++) {
        G.srv[i].shut_down = 1;
        grpc_server_shutdown_and_notify(G.srv[i].server, G.cq, &G.srv[i].shutdown_tag);
        grpc_server_cancel_all_calls(G.srv[i].server);
    }
    /* the loop no longer runs: handle completions here until every call is gone */
    while (!stop_done()) {
        flush_released(); /* services may finish calls while the mailbox is drained here */
        pthread_mutex_lock(&G.mu);
        while (G.box.len == 0 && !stop_done())
            pthread_cond_wait(&G.cond, &G.mu);
        pthread_mutex_unlock(&G.mu);
        drain_mailbox();
    }
    for (int i = 0; i < G.n_srv; i++)
        grpc_server_destroy(G.srv[i].server);
    grpc_completion_queue_shutdown(G.cq);
    pthread_join(G.thread, NULL);
    grpc_completion_queue_destroy(G.cq);
    event_free(G.ev);
    event_free(G.ev_release);
    close(G.efd);
    G.efd = -1;
    buf_free(&G.box);
    buf_free(&G.box_spare);
    buf_free(&G.hand);
    buf_free(&G.hand_spare);
    grpc_shutdown();
    LOG_INFO("gRPC servers stopped");
}
