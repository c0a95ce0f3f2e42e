/*
 * sequence: stateful sequences of a model (sequenceBatching: true). Each sequence is a job
 * group: its own queue (bounded by maxSequenceJobQueueSize), the worker it is pinned to for its
 * whole life, its idle and session deadlines. The aggregator builds each batch for a worker from
 * at most one request per sequence, so order within a sequence holds while many sequences share
 * a batch. Without continuous batching a sequence's next request waits until the previous one is
 * answered. With it (a continuous handler and continuousBatching), the next request joins its
 * running predecessor, as TorchServe polls a sequence's queue after every step: it goes once
 * every earlier request of the sequence has been through a step (has a frame), so the handler
 * never gets two new requests of one sequence in one step, and sees them in arrival order; a
 * worker serves at most batchSize sequences and holds at most 2 x batchSize requests. Every end
 * of life (end header, cancel, idle, session timeout) is an explicit event:
 * the pinned worker is told with an 'S' frame, and the id is remembered as closed, so a later
 * request gets a distinct error (410) instead of silently starting a new sequence. A
 * client-chosen id never seen starts a new sequence, as in TorchServe; so do a request without
 * an id (one is generated, "ts-seq-<uuid>") and a start flag on a closed id. An unknown id of the
 * generated form is 404: some server made it, and its sequence is gone (instance died).
 *
 * Loop thread only. A model owns its sequence table (struct model.seqs); a sequence holds queue
 * references on its queued jobs; a job points at its sequence while it is queued or running.
 * The table sends batches to the model's worker group itself (worker_pool.h); it knows nothing
 * of the registry above it: the dispatcher (model.c) calls in and routes the group's events here.
 */
#ifndef TS_SEQUENCE_H
#define TS_SEQUENCE_H

#include <stddef.h>

struct job;
struct worker;
struct worker_group;
struct seq_table;
struct model_config;
struct otf_prediction;

/* What a request says about its sequence (from headers, gRPC fields or OIP parameters). */
struct seq_request {
    const char *id; /* NULL or "" = none given */
    int start;
    int end;
    int cancel;
};

/* Canonical header names sent to the worker, whatever names the client used. */
#define SEQ_HDR_ID "ts_request_sequence_id"
#define SEQ_HDR_START "ts_request_sequence_start"
#define SEQ_HDR_END "ts_request_sequence_end"
#define SEQ_HDR_CANCEL "ts_request_sequence_cancel"
/* to the worker only: this request opened, on this instance, the sequence of a client-chosen
 * id without the start flag (backend/handler.h, TS_SEQ_NEW_HEADER) */
#define SEQ_HDR_NEW "ts_request_sequence_new"

/* Reads the (configurable) sequence headers of a job. */
void sequence_request_from_job(const struct job *j, struct seq_request *r);

/* The sequences of one model, whose workers are g, with its sequence settings (mc: borrowed, and
 * outliving the table) and maxBatchDelay. */
struct seq_table *sequence_table_new(struct worker_group *g, const struct model_config *mc,
                                     int max_batch_delay_ms);
/* Fails every queued request (503), then frees every sequence and the table. */
void sequence_table_free(struct seq_table *t);

/* Sequence ids (client-given or ours) are at most SEQ_ID_MAX bytes of printable ASCII without
 * spaces: they become LMDB keys (511 bytes at most) and header values. 0, or -1 with msg (400). */
#define SEQ_ID_MAX 256
int sequence_id_check(const char *id, char *msg, size_t msglen);

/* Attaches the job to its sequence (a new one for an unknown id) and queues it. Returns 0 when
 * queued; 1 when the request was a cancel that has been carried out (reply 200 with msg, do not
 * expect frames); or a negative code with *status (400, 404 for a cancel of an unknown id or an
 * unknown generated id, 409, 410, 429, 503) and msg for the client. */
int sequence_submit(struct seq_table *t, struct job *j, const struct seq_request *r, int *status,
                    char *msg, size_t msglen);
/* TorchServe-style exception name for a sequence_submit status. */
const char *sequence_error_type(int status);
/* A job of a sequence ended (final frame, failure or cancel); was_running: it had reached a
 * worker. */
void sequence_job_done(struct job *j, int was_running);
/* Removes a queued job from its sequence queue (the caller drops the queue reference). */
void sequence_dequeue(struct job *j);
/* Fails every queued request of every sequence (the model is going away). */
void sequence_fail_queued(struct seq_table *t);
/* A frame of a sequence's job: the handler may end (response header ts_request_sequence_end) or
 * cancel (ts_request_sequence_cancel) the sequence, as TorchServe's stateful handlers do. */
void sequence_frame_seen(struct job *j, const struct otf_prediction *p);
/* Sends ready sequence requests to workers with free slots. */
void sequence_dispatch(struct seq_table *t);
/* The worker is going away for good: re-pin its sequences elsewhere. */
void sequence_worker_gone(struct seq_table *t, struct worker *w);
/* A worker of the model became ready: it gets the end events of the sequences closed while no
 * worker was connected (it drops their state). */
void sequence_worker_ready(struct seq_table *t, struct worker *w);
/* Number of open sequences, for describe/metrics (0 for NULL). */
int sequence_open_count(const struct seq_table *t);
/* Effective maxNumSequence (yaml, else batchSize x maxWorkers). */
int sequence_max_num(const struct model_config *mc, const struct worker_group *g);

#endif
