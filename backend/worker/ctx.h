/*
 * ctx: the worker's one `struct ts_ctx` (model, requests, output frames, counters) and the
 * implementation of the handler ABI (handler.h) on top of it: ctx.c, ctx_state.c for the state
 * API and the sequence state around a step, and ctx_park.c for a paused request's output.
 *
 * Owns: every request from the moment its 'I' frame is decoded (a deep copy, so the receive
 * buffer can move) until it finishes or is cancelled; the output buffer of response frames; the
 * frames parked for paused requests (ctx_park.c), which may outlive their request.
 * Threading: the worker's single thread only. Socket I/O is the loop's (worker.h): ctx reaches it
 * only through the struct ctx_io it was given, for ts_flush() and ts_is_cancelled().
 */
#ifndef TS_CTX_H
#define TS_CTX_H

#include <stddef.h>
#include <stdint.h>

#include "handler.h"
#include "otf.h"
#include "state.h"
#include "util.h"
#include "yaml_flat.h"

struct wkv {
    char *key;
    char *val;
};

struct wparam {
    char *name;
    char *ctype;
    char *value; /* NUL-terminated after len */
    size_t len;
};

/* A message of a request's streamed input ('D' frame), waiting for ts_input_next. */
struct winput {
    struct winput *next;
    char *ctype; /* ctype and body in one allocation with the struct */
    char *body;
    size_t len;
};

/* One request held by the worker: the struct, its header and parameter arrays and their strings
 * are one allocation (wreq_from_otf); the response fields are separate. */
struct wreq {
    struct wreq *next; /* pending / held list */
    char *id;
    struct wkv *headers;
    size_t n_headers;
    struct wparam *params;
    size_t n_params;
    void *user;
    void (*user_free)(void *);
    int is_new;    /* not yet passed to a completed handle call */
    int cancelled; /* a cancel arrived while it was in the current call */
    int paused;    /* its client reads slower than it streams: held, not stepped ('P'/'R') */
    int streamed;  /* at least one intermediate response was queued */
    int continued; /* ts_continue() called during the current call */
    int64_t delay_us;
    int64_t wake_us; /* held: due at this monotonic time */
    /* response */
    int has_response;
    int status;
    char *phrase;
    char *ctype;
    char *body;
    size_t body_len;
    struct wkv *rheaders;
    size_t n_rheaders;
    /* metric records (OTF_METRICS_KEY) waiting for the request's next prediction */
    struct buf metrics;
    /* the times of the latest step it led (first wanted request), for the same (OTF_STEP_KEY) */
    int has_step;
    struct otf_step step;
    int64_t read_us; /* when its 'I' frame was read (PredictionTime starts there) */
    uint64_t seqno;  /* its number among the requests read (otf_progress) */
    /* state API: the copy ts_state_get handed out; fresh: a start request dropped old state */
    void *state_copy;
    int state_fresh;
    /* streamed input (ctx_input.c): messages not yet taken, the one last taken, and whether
     * the client may send more (the OTF_INPUT_STREAM header) */
    struct winput *in_head, *in_tail, *in_taken;
    int input_open;
    int input_arrived; /* a message or the end came during the current handle call */
};

#define CTX_COUNTER_PREFIX "x-ts-worker-"
/* what a paused request may park without --stream-buffer-size: the frontend's default */
#define CTX_PARK_MAX_DEFAULT (4u << 20)
/* the message of every response frame the worker writes */
#define CTX_PREDICTION_MSG "Prediction success"

struct counter {
    char *key;        /* CTX_COUNTER_PREFIX "<name>": the header it travels as */
    const char *name; /* in key, after the prefix */
    int64_t total;
};

struct seq_ev {
    char *seq_id;
    int event;
};

struct ts_ctx;

/* What ctx needs of the loop in the middle of a handle call (the loop's own functions). */
struct ctx_io {
    /* Closes the open response frame and writes every queued frame (blocking, whole). 0, or
     * -errno when the frontend is gone. */
    int (*flush)(struct ts_ctx *c);
    /* Reads what the socket has without blocking and processes the complete frames: cancels
     * mark requests at once, new requests join the pending queue, sequence events wait for the
     * end of the step. */
    void (*poll_input)(struct ts_ctx *c);
    /* Flushes, then sleeps until the frontend writes, and processes what it wrote as poll_input
     * does (a send blocked on a paused request waits here for its resume). */
    void (*wait_input)(struct ts_ctx *c);
};

struct ctx_parked;

struct ts_ctx {
    const struct ctx_io *io;
    /* model */
    char *model_name;
    char *model_dir;
    char *serialized_file;
    char *handler_spec;
    int batch_size;
    int step_max; /* requests a step takes: batch_size, or twice that (sequence joins: worker.c) */
    int gpu_id;   /* the load frame's; -1: the CPU */
    struct yflat cfg;
    char load_err[1024];
    const struct ts_handler *h;
    void *hstate;
    int loaded;
    /* requests: pending = new, FIFO; held = continuing (TS_HANDLER_CONTINUOUS) in arrival order */
    struct wreq *pending_head, *pending_tail;
    struct wreq *held_head, *held_tail;
    struct wreq **cur; /* the requests of the current handle call */
    size_t ncur, cur_cap;
    int in_handle;
    /* response frames waiting to be written */
    struct buf out;
    int out_open;                /* a frame is open in out (code + msg written) */
    const struct wreq **out_ids; /* requests with a prediction in the open frame */
    size_t n_out_ids, out_ids_cap;
    /* one record per prediction in out, for ctx_fail_uncommitted: a byte (1: it streamed), the
     * request id, a NUL; emptied when out is written */
    struct buf unsent;
    struct counter *counters;
    size_t n_counters;
    /* sequence events, delivered after the current step */
    struct seq_ev *seq;
    size_t n_seq, seq_cap;
    /* socket */
    int fd;
    int eof; /* 1: the frontend closed the socket or a write failed; 2: protocol error */
    struct buf rx;
    size_t rx_off;
    int64_t last_read_us;   /* when the socket was last read (ts_is_cancelled rate limit) */
    size_t sent_since_read; /* bytes of intermediate responses queued since then */
    /* paused requests' output (ctx_park.c), at most park_max bytes each */
    struct ctx_parked *parked;
    size_t park_max;
    /* answers held back in out while the next step runs (worker.c, hold_answers) */
    int64_t held_since_us; /* when the oldest was queued; 0: none held */
    int n_held;
    struct otf_progress *progress; /* the frontend's progress page (otf.h), or NULL */
    uint64_t arrived;              /* requests read so far: the next one's number */
    size_t max_field;
    char *state_dir;
    char *state_redis;         /* --state-redis URL: sequence state shared in Redis, or NULL */
    struct state_store *state; /* opened at the first ts_state_* call */
    int64_t state_failed_us;   /* when opening it last failed (a full disk, say): until
                                  STATE_RETRY_US later every ts_state_* call fails at once */
    int wake_fd;               /* ts_set_wake_fd, -1 for none */
};

void ctx_init(struct ts_ctx *c, int fd, size_t max_field, const struct ctx_io *io);
void ctx_destroy(struct ts_ctx *c);

/* The request at idx of the current handle call, or NULL (a handler bug: logged). For ctx.c and
 * ctx_state.c, which implement the handler ABI on it. */
struct wreq *ctx_req_at(struct ts_ctx *c, size_t idx);

/* Deep copy of a decoded request. */
struct wreq *wreq_from_otf(const struct otf_request *q);
/* Frees the request and its user data. */
void wreq_free(struct wreq *r);

/* Queue a prediction for r into the output buffer. stream_next: "true", "false" or NULL. */
void ctx_queue_prediction(struct ts_ctx *c, struct wreq *r, const void *body, size_t len,
                          const char *stream_next);
/* Queue r's final response (the step is over for it and it did not continue). */
void ctx_queue_final(struct ts_ctx *c, struct wreq *r);
/* Closes the open frame, if any; the bytes stay in c->out for the caller to write. */
void ctx_close_frame(struct ts_ctx *c);
/* After c->out was written (or dropped): empties it and its record of predictions. */
void ctx_out_sent(struct ts_ctx *c);

/* ctx_state.c: the state API's side of a step. */

/* Commits the state writes of the step; called before any response frame is written. A
 * failure means an acknowledged state might not be on disk: the caller must not send frames. */
int ctx_state_commit(struct ts_ctx *c);
/* After a failed commit (rc, e.g. a full disk): the unsent frames are replaced by one 507 naming
 * the failure for each request that had a prediction in them (a stream ends with it), held
 * requests answered so are dropped, and the state cache forgets what was not stored, so that
 * later requests read what is on disk. */
void ctx_fail_uncommitted(struct ts_ctx *c, int rc);
/* A sequence ended (any 'S' event): drops its state from the LRU and LMDB, committed at once. */
void ctx_state_drop(struct ts_ctx *c, const char *seq_id);

/* ctx_input.c: streamed input. */

/* r's streamed input is open when its 'I' frame carried OTF_INPUT_STREAM: true. */
void ctx_input_init(struct wreq *r);
/* A 'D' frame: appends a copy of the message to r's input. */
void ctx_input_add(struct wreq *r, struct otf_str ctype, struct otf_str body);
/* An 'E' frame: r's client sends no more. */
void ctx_input_end(struct wreq *r);
/* Frees what r's input holds (wreq_free). */
void ctx_input_free(struct wreq *r);

/* ctx_park.c: the output of a paused request, held until it is resumed. */

/* Whether output is parked for the request with this id. */
int ctx_park_has(struct ts_ctx *c, const char *id);
/* The buffer of whole response frames parked for id (made if none; streamed: the frame about to
 * be added is an intermediate response). */
struct buf *ctx_park_buf(struct ts_ctx *c, const char *id, int streamed);
/* Bytes parked for id. */
size_t ctx_park_bytes(struct ts_ctx *c, const char *id);
/* The request was resumed: its parked frames go to c->out (the caller flushes); 1 if it had any. */
int ctx_unpark(struct ts_ctx *c, const char *id);
/* The request was cancelled: its parked frames are dropped. */
void ctx_park_drop(struct ts_ctx *c, const char *id);
void ctx_park_free_all(struct ts_ctx *c);

/* Adds a metric record to r's next prediction (kind 'c', 'g' or 'h'; see otf.h). */
void ctx_metric(struct wreq *r, char kind, const char *name, const char *unit, double value);

/* Error body {"code": status, "type": ..., "message": msg}, malloc'd. */
char *ctx_error_json(int status, const char *msg);

#endif
