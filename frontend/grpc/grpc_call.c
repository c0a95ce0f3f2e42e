/*
 * grpc_call: see grpc_call.h, which describes the batches a call runs.
 */
#include "grpc_call.h"

#include <event2/event.h>
#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/support/alloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "core/access_log.h"
#include "core/core.h"
#include "grpc_drive.h"
#include "jnum.h"
#include "log.h"
#include "pb_req.h"
#include "util.h"

/* a call still running at this age gets its own RECV_CLOSE_ON_SERVER (see grpc_call.h): a
 * client's cancellation or deadline reaches the service at most this much later than at once */
#define CLOSE_WATCH_MS 5

static struct {
    struct event *ev_release;      /* drops the service's references of C.released */
    struct event *ev_watch;        /* watch_sweep, while C.unwatched is not empty */
    TAILQ_HEAD(, gcall) unwatched; /* oldest first: calls whose close is not armed yet */
    struct gcall *released;        /* let go by their service in this loop turn */
    long live_calls;               /* allocated gcalls, armed ones included */
    long busy_calls;               /* calls between T_NEW and their end (grpc_drive_busy) */
    uint64_t next_id;
    int closing; /* grpc_servers_stop: a call's close is armed as soon as it is owned */
} C;

static void call_free(struct gcall *c);
static void unwatch(struct gcall *c);
static void on_close(struct gcall *c);

/* ---- call lifetime ---- */

void gcall_release(struct gcall *c)
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
    unwatch(c);
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
    for (size_t i = 0; i < c->n_out_tr; i++) {
        grpc_slice_unref(c->out_tr[i].key);
        grpc_slice_unref(c->out_tr[i].value);
    }
    grpc_metadata_array_destroy(&c->md);
    grpc_call_details_destroy(&c->details);
    if (c->call) {
        grpc_call_unref(c->call);
        grpc_drive_soon();
    }
    if (c->id[0] && --C.busy_calls == 0)
        grpc_drive_busy(0);
    free(c);
    C.live_calls--;
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

struct gcall *gcall_new(struct gsrv *s)
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
    C.live_calls++;
    c->pending = 1; /* the NEW completion */
    return c;
}

long gcall_live(void)
{
    return C.live_calls;
}

void gcall_begin(struct gcall *c)
{
    c->id[0] = 'g'; /* "g<n>"; a u64 is at most 20 digits */
    c->id[1 + jnum_u64(c->id + 1, ++C.next_id)] = '\0';
    c->start_us = access_log_clock_us();
    if (C.busy_calls++ == 0)
        grpc_drive_busy(1);
}

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

/* ---- the close of a call that runs past CLOSE_WATCH_MS (see grpc_call.h) ---- */

static void unwatch(struct gcall *c)
{
    if (c->close_waits) {
        TAILQ_REMOVE(&C.unwatched, c, unwatched);
        c->close_waits = 0;
    }
}

static void arm_close(struct gcall *c)
{
    unwatch(c);
    if (c->close_armed)
        return;
    c->close_armed = 1;
    grpc_op op;
    memset(&op, 0, sizeof(op));
    op.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    op.data.recv_close_on_server.cancelled = &c->close_cancelled;
    if (start_batch(c, &op, 1, &c->t_close) != 0 && c->owned)
        on_close(c); /* start_batch cancelled the call: the service must learn it now */
}

static void watch_timer(int64_t age_us)
{
    int64_t left = (int64_t)CLOSE_WATCH_MS * 1000 - age_us;
    struct timeval tv = {0, (suseconds_t)(left > 0 ? left : 0)};
    evtimer_add(C.ev_watch, &tv);
}

/* Arms the close of every call that reached CLOSE_WATCH_MS, then waits for the next one. */
static void watch_sweep(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    (void)arg;
    int64_t now = ts_now_us();
    struct gcall *c;
    while ((c = TAILQ_FIRST(&C.unwatched)) && now - c->watch_us >= CLOSE_WATCH_MS * 1000)
        arm_close(c);
    if (c)
        watch_timer(now - c->watch_us);
}

/* A call the service now owns: its close is armed with its status, or at CLOSE_WATCH_MS (at
 * once while the servers stop: the loop that would sweep no longer runs). */
static void watch_later(struct gcall *c)
{
    if (C.closing) {
        arm_close(c);
        return;
    }
    c->watch_us = ts_now_us();
    c->close_waits = 1;
    TAILQ_INSERT_TAIL(&C.unwatched, c, unwatched);
    if (!evtimer_pending(C.ev_watch, NULL))
        watch_timer(0);
}

static void pump_send(struct gcall *c)
{
    if (c->send_pending || c->closed || c->status_sent)
        return;
    grpc_op ops[4];
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
        ops[n].data.send_status_from_server.trailing_metadata_count = c->n_out_tr;
        ops[n].data.send_status_from_server.trailing_metadata = c->out_tr;
        n++;
        c->status_sent = 1;
        if (!c->close_armed) { /* a short call: its close rides with the status */
            unwatch(c);
            ops[n].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
            ops[n].data.recv_close_on_server.cancelled = &c->close_cancelled;
            n++;
            c->close_armed = 1;
        }
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

void gcall_reject(struct gcall *c, grpc_status_code code, const char *msg)
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
        gcall_release(c); /* the service's; the close's own is dropped by grpc_server.c */
    }
}

void gcall_own(struct gcall *c)
{
    c->owned = 1;
    c->pending++; /* the service's reference */
    watch_later(c);
    /* A bidi call sends its initial metadata at once; a call with one request message sends it
     * with its first answer, in the same write. */
    arm_recv(c, c->method->client_stream);
}

void gcall_completed(struct gtag *t, int success)
{
    switch (t->kind) {
    case TAG_CLOSE:
        on_close(t->call);
        break;
    case TAG_RECV:
        on_recv(t->call, success);
        break;
    case TAG_SEND:
        on_send(t->call, success);
        break;
    default:
        break;
    }
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
    c->next_released = C.released;
    C.released = c;
    event_active(C.ev_release, EV_READ, 0);
}

void gcall_flush_released(void)
{
    struct gcall *c;
    while ((c = C.released)) {
        C.released = c->next_released;
        gcall_release(c);
    }
}

static void on_release(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    (void)arg;
    gcall_flush_released();
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
static int md_ok(const char *key, const char *value)
{
    if (!*key)
        return 0;
    for (const char *p = key; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || strchr("_.-", *p)))
            return 0;
    for (const unsigned char *p = (const unsigned char *)value; *p; p++)
        if (*p < 0x20 || *p > 0x7e)
            return 0;
    return 1;
}

static void md_set(grpc_metadata *md, const char *key, const char *value)
{
    memset(md, 0, sizeof(*md));
    md->key = grpc_slice_from_copied_string(key);
    md->value = grpc_slice_from_copied_string(value);
}

int gcall_add_metadata(struct gcall *c, const char *key, const char *value)
{
    if (c->md_sent || c->n_out_md == GCALL_MAX_METADATA || !md_ok(key, value))
        return -1;
    md_set(&c->out_md[c->n_out_md++], key, value);
    return 0;
}

int gcall_add_trailer(struct gcall *c, const char *key, const char *value)
{
    if (c->status_queued || c->n_out_tr == GCALL_MAX_TRAILERS || !md_ok(key, value))
        return -1;
    md_set(&c->out_tr[c->n_out_tr++], key, value);
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

/* ---- setup and shutdown ---- */

void gcall_setup(void)
{
    C.ev_release = event_new(srv->base, -1, 0, on_release, NULL);
    C.ev_watch = evtimer_new(srv->base, watch_sweep, NULL);
    TAILQ_INIT(&C.unwatched);
}

void gcall_close_all(void)
{
    C.closing = 1;
    while (!TAILQ_EMPTY(&C.unwatched))
        arm_close(TAILQ_FIRST(&C.unwatched));
}

void gcall_teardown(void)
{
    event_free(C.ev_release);
    event_free(C.ev_watch);
}
