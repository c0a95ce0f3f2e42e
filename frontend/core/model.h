/*
 * model: the registry of served models (one `struct model` per name + version), each with its
 * job queue, its workers and its batching settings; submission and dispatch of jobs.
 *
 * Loop thread only. The registry owns every model; a model owns its queued jobs' queue
 * references and its workers. Unregistering a model fails its queued jobs and stops its workers.
 */
#ifndef TS_MODEL_H
#define TS_MODEL_H

#include <stdint.h>
#include <sys/queue.h>

#include "job.h"
#include "manifest.h"
#include "model_config.h"

struct event;
struct worker;
struct seq_table;
TAILQ_HEAD(worker_list, worker);

struct model {
    char *name;
    char *version;
    char *url;     /* what it was registered from (archive file name or path) */
    char *dir;     /* extracted model directory */
    char *tmp_dir; /* directory we created for the extraction (removed on unregister), or NULL */
    char *handler;
    int is_default;
    int loaded_at_startup;
    struct manifest manifest;
    struct model_config mc;
    /* effective settings */
    int batch_size;
    int max_batch_delay_ms;
    int response_timeout_s;
    int startup_timeout_s;
    int queue_max;
    int min_workers;
    int max_workers;
    int continuous; /* the handler keeps requests across steps (learned at load) */
    /* queue */
    struct job_list queue;
    int queue_len;
    struct event *batch_timer;
    /* workers */
    struct worker_list workers;
    int n_workers;
    struct seq_table *seqs; /* sequenceBatching: job groups (sequence.c) */
    /* stats */
    uint64_t n_requests;
    uint64_t n_batches;
    uint64_t max_batch_seen;
    LIST_ENTRY(model) link;
};

/* Registration settings; -1 / NULL means "from model-config.yaml, else default". */
struct model_reg {
    const char *url;
    const char *name;
    const char *handler;
    int batch_size;
    int max_batch_delay_ms;
    int initial_workers;
    int response_timeout_s;
    int startup_timeout_s;
    int loaded_at_startup;
};

void model_reg_init(struct model_reg *r);

/* Resolves the url inside the model store, extracts it, reads its manifest and yaml, and adds
 * the model (not yet with workers). *out = the new model. err gets a client-facing message. */
int model_register(const struct model_reg *r, struct model **out, char *err, size_t errlen);
typedef void model_registered_fn(void *arg, struct model *m, int rc, const char *err);
/* The same as model_register with the disk work (extraction, parsing) on a thread of its own;
 * cb runs later on the loop thread with the new model, or NULL and the error. */
void model_register_async(const struct model_reg *r, model_registered_fn *cb, void *arg);
/* Shutdown: waits for registrations in progress and drops them without calling back. */
void model_register_cancel_all(void);
/* Stops workers, fails queued jobs with 503, frees. */
void model_unregister(struct model *m);
/* NULL version = the default version. Returns TS_E_MODEL_NOT_FOUND / TS_E_VERSION_NOT_FOUND. */
int model_find(const char *name, const char *version, struct model **out);
struct model *model_first(void);
struct model *model_next(struct model *m);
void model_unregister_all(void);

/* Why a request was refused, for any transport (HTTP status; gRPC maps it). */
struct submit_error {
    int status;
    const char *type; /* TorchServe exception name */
    char msg[512];
};

/* The entry point for every transport: queues the job on the model's queue, or on its sequence
 * when the model has sequenceBatching (sequence info from the job's headers, named as configured
 * by ts_header_key_sequence_*). Returns 0 when queued; 1 when the request was a sequence cancel
 * the frontend carried out (e->msg is the answer, status 200); a negative code when refused. */
int model_submit_request(struct model *m, struct job *j, struct submit_error *e);

/* Queues a job (takes a queue reference). TS_E_QUEUE_FULL or TS_E_NO_WORKER on refusal (the
 * job is untouched then). */
int model_submit(struct model *m, struct job *j);
/* Removes a queued job (the caller drops the queue reference). */
void model_dequeue(struct model *m, struct job *j);
/* Sends queued jobs to workers with free slots, honouring batchSize and maxBatchDelay. */
void model_dispatch(struct model *m);

#endif
