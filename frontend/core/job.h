/*
 * job: one inference request on its way from a transport (HTTP, gRPC) to a worker and back.
 *
 * Owned by the loop thread. Refcounted: the transport holds one reference from job_new until it
 * has written its reply; the model queue / worker holds another while the job is queued or
 * running. The transport is reached only through the sink, and a transport that goes away calls
 * job_cancel(), which clears the sink first, so the worker side never calls into a freed
 * transport. Request data (headers, parameters) is owned by the job and freed with it.
 *
 * job is the bottom of the core: it names no module above it. The queue/worker side is reached
 * through the owner the dispatcher (model.c) sets when it queues the job, the transport through
 * the sink.
 */
#ifndef TS_JOB_H
#define TS_JOB_H

#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>

#include "otf.h"

struct job;
struct model;
struct worker;
struct seq;

/* The side that holds the job while it is queued or running (set by model.c when it queues it). */
struct job_owner {
    /* The client went away while the job was queued or running: take it off its queue or its
     * worker (the job is then ended with was_running as it was). */
    void (*withdraw)(struct job *j);
    /* A frame of the job is about to reach its sink. */
    void (*frame)(struct job *j, const struct otf_prediction *p);
    /* The job ended for good (final frame, failure or cancel); was_running: it had reached a
     * worker. Called before the queue side's reference is dropped. */
    void (*ended)(struct job *j, int was_running);
    /* The running job's client reads slower than it streams (paused = 1), or caught up. */
    void (*pause)(struct job *j, int paused);
    /* The running job has streamed input to send its worker (job_feed, job_feed_end). */
    void (*input)(struct job *j);
};

struct job_sink {
    /* A response frame for the job. final = 1 for the last one (the job is then done). */
    void (*on_frame)(struct job *j, const struct otf_prediction *p, int final);
    /* The job failed (terminal). status is an HTTP status; type a TorchServe exception name. */
    void (*on_error)(struct job *j, int status, const char *type, const char *msg);
};

enum job_state { JOB_NEW, JOB_QUEUED, JOB_RUNNING, JOB_DONE };

struct job_kv {
    char *key;
    char *val;
    size_t vlen;
};

struct job_param {
    char *name;
    char *ctype;
    char *value;
    size_t vlen;
};

/* A later message of a streamed input, not yet sent to the worker. */
struct job_input {
    struct job_input *next;
    char *ctype; /* shares the struct's allocation */
    char *body;  /* owned */
    size_t len;
};

struct job {
    int refs;
    enum job_state state;
    char id[40];  /* unique: the id on the worker socket */
    char rid[40]; /* the client's request id (x-request-id, OIP id), for logs */
    struct model *model;
    const struct job_owner *owner; /* while queued or running */
    const struct job_sink *sink;
    void *sink_arg;
    struct job_kv *headers;
    size_t n_headers, cap_headers;
    struct job_param *params;
    size_t n_params, cap_params;
    int64_t created_us;
    int64_t dispatched_us;
    uint64_t wseq; /* its number among the requests sent to its worker process (otf_progress) */
    int64_t last_frame_us; /* the inter-token histogram's previous frame */
    struct worker *worker; /* while running */
    int frames;            /* frames delivered so far */
    int worker_lost;       /* failed because its worker process died unexpectedly */
    int given_back;        /* times a dead worker's pool put it back in the queue */
    int paused;            /* running, but its worker holds it until its client catches up */
    struct seq *seq;       /* its sequence while queued or running (sequence.c) */
    int seq_end;           /* the request ends its sequence */
    int versioned;         /* the client named the model's version (TorchServe's metrics label
                              the others model_version="default") */
    int seq_new;           /* the request opened its sequence on this instance: its answer
                            * says ts_request_sequence_start: true (HTTP header, gRPC trailer) */
    char *seq_id;          /* echoed to the client in ts_request_sequence_id */
    /* streamed input (job_open_input): messages waiting for the worker, and the end */
    struct job_input *in_head, *in_tail;
    int input_stream;      /* job_open_input was called */
    int input_open;        /* the client may send more messages */
    int input_end_sent;    /* the worker was told that the input ended */
    TAILQ_ENTRY(job) link; /* model queue or worker in-flight list */
};

TAILQ_HEAD(job_list, job);

/* New job with one reference (the caller's). id: the client's request id (x-request-id, OIP
 * id) or NULL; it is passed to the handler as the x-request-id header, while the job's own id
 * (on the worker socket) is always a fresh UUID. */
struct job *job_new(const char *id, const struct job_sink *sink, void *sink_arg);
void job_ref(struct job *j);
void job_unref(struct job *j);

void job_add_header(struct job *j, const char *key, const char *val, size_t vlen);
/* Takes ownership of value (malloc'd) */
void job_add_param_owned(struct job *j, const char *name, const char *ctype, char *value,
                         size_t vlen);
const char *job_header(const struct job *j, const char *key); /* case-insensitive */

/* Streamed input (otf.h, OTF_INPUT_STREAM): the job's client sends more messages after this
 * one, as a gRPC stream to a model that reads a stream of requests does. Before submission. */
void job_open_input(struct job *j);
/* One more message (takes body, malloc'd): it reaches the job's worker in order, at once when
 * the job runs, else right after its dispatch. Dropped once the job ended. */
void job_feed(struct job *j, const char *ctype, char *body, size_t len);
/* The client sends no more messages. */
void job_feed_end(struct job *j);
/* Takes the next message waiting for the worker (the caller frees it with free() after body),
 * NULL when none. */
struct job_input *job_input_take(struct job *j);

/* The OTF request view of a job (pointers into the job). Its header and parameter arrays are
 * the few_ ones when the job's fit, which they do for nearly every request, else malloc'd. */
#define JOB_OTF_FEW_HEADERS 32
#define JOB_OTF_FEW_PARAMS 8
struct job_otf {
    struct otf_request r;
    struct otf_kv few_h[JOB_OTF_FEW_HEADERS];
    struct otf_param few_p[JOB_OTF_FEW_PARAMS];
};
void job_to_otf(const struct job *j, struct job_otf *o);
void job_otf_done(struct job_otf *o); /* frees what job_to_otf allocated */

/* Delivery, used by the worker side. Both end the job for good when final. */
void job_deliver_frame(struct job *j, const struct otf_prediction *p, int final);
void job_fail(struct job *j, int status, const char *type, const char *msg);

/* The transport is going away: detach the sink and drop the job wherever it is. */
void job_cancel(struct job *j);
/* Backpressure from the transport: its client stopped reading (paused = 1) or caught up
 * (paused = 0). A running job is paused on its worker, which leaves it out of its steps; other
 * requests go on. No effect on a job that is not running. */
void job_pause(struct job *j, int paused);

#endif
