/*
 * grpc_call: one gRPC call's state machine, private to frontend/grpc. grpc_server.c arms and
 * accepts calls and hands every completion here on the loop thread; the services see a call
 * through the gcall_* API of grpc_server.h, implemented here.
 *
 * Lifetime: `pending` counts a call's references: one per outstanding batch (taken before the
 * batch starts) and one for the service while it holds the call (`owned`). Whoever drops it to
 * 0 frees the call. The service's reference outlives gcall_finish / gcall_send_finish until the
 * loop's current callback has returned (it is dropped from a loop event, `released`): services
 * may still look at the call, e.g. gcall_finish after gcall_send_finish, in the same callback.
 * On on_cancel it is dropped when on_cancel returns.
 *
 * A call runs these batches, each with its own tag and at most one outstanding per op type:
 *   at T_NEW   {SEND_INITIAL_METADATA, RECV_MESSAGE} (bidi), {RECV_MESSAGE} (one request)
 *   then       RECV_MESSAGE re-armed after each message for client-streaming methods (a NULL
 *              buffer is the half-close);
 *              {SEND_MESSAGE} one at a time from the call's out-queue, the last one joined by
 *              SEND_STATUS_FROM_SERVER once the service has finished the call;
 *              RECV_CLOSE_ON_SERVER: it completes when the call is over, and cancelled = 1 means
 *              the client went away, the deadline passed, or the server is shutting down. A
 *              call the service finishes within CLOSE_WATCH_MS gets it in its status batch, as
 *              one more op; a longer one gets it alone when it reaches that age (watch_sweep), so
 *              that a cancellation reaches the service. A separate batch costs gRPC about 5% of
 *              a short call's instructions, and most calls are short.
 */
#ifndef TS_GRPC_CALL_H
#define TS_GRPC_CALL_H

#include <grpc/grpc.h>
#include <stdint.h>
#include <sys/queue.h>

#include "grpc_server.h"
#include "mgmt/auth.h"

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
    int closed;      /* RECV_CLOSE_ON_SERVER completed before the status went out */
    int close_armed; /* RECV_CLOSE_ON_SERVER is in a batch */
    int close_waits; /* on the list of calls to watch: owned by the service, its close not armed yet
                      */
    int64_t watch_us; /* when it joined that list (monotonic) */
    TAILQ_ENTRY(gcall) unwatched;
    int send_pending;
    grpc_byte_buffer *send_bb;
    int status_queued;
    int md_sent; /* initial metadata has gone out (or is in the first send batch) */
    grpc_metadata out_md[GCALL_MAX_METADATA]; /* initial metadata a service added */
    size_t n_out_md;
    grpc_metadata out_tr[GCALL_MAX_TRAILERS]; /* trailing metadata a service added */
    size_t n_out_tr;
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
    struct gcall *next_released; /* the list of calls let go in this loop turn */
};

/* A call to arm with grpc_server_request_call: its NEW completion holds the one reference. */
struct gcall *gcall_new(struct gsrv *s);
/* Drops one reference of c (a completed batch, or the service's): frees c with the last one;
 * c must not be touched after it. */
void gcall_release(struct gcall *c);
/* The call arrived: its id and start time. */
void gcall_begin(struct gcall *c);
/* Answers a call without involving a service (auth failure, unknown method). */
void gcall_reject(struct gcall *c, grpc_status_code code, const char *msg);
/* Hands c to its method's service and starts reading its request. */
void gcall_own(struct gcall *c);
/* A completion of one of c's batches (TAG_CLOSE, TAG_RECV, TAG_SEND); the caller then drops
 * the batch's reference. */
void gcall_completed(struct gtag *t, int success);
/* Drops the references services let go of in this loop turn. */
void gcall_flush_released(void);
/* Allocated calls, armed ones included. */
long gcall_live(void);
/* Shutdown: arms the close of every call that has none, so that cancel_all_calls ends them, and
 * of every call owned from now on (the stop loop handles completions without the loop's timers). */
void gcall_close_all(void);
void gcall_setup(void);
void gcall_teardown(void);

#endif
