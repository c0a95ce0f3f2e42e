/*
 * model: the registry of served models (one `struct model` per name + version), each with its
 * job queue, its worker group and its sequences; submission and dispatch of jobs. The top of the
 * core: it owns the worker groups and sequence tables below it and routes their events.
 *
 * Loop thread only. The registry owns every model; a model owns its queued jobs' queue
 * references and its workers. Unregistering a model fails its queued jobs and stops its workers.
 * Registration from the model store (archives, manifests, settings) is management's
 * (mgmt/model_register.h): it builds a model with model_new and hands it to model_add.
 */
#ifndef TS_MODEL_H
#define TS_MODEL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>

#include "job.h"
#include "manifest.h"
#include "metrics.h"
#include "model_config.h"
#include "worker_pool.h"

struct event;
struct seq_table;

struct model {
    char *name;
    char *version;
    char *url;     /* what it was registered from (archive file name or path) */
    char *dir;     /* extracted model directory */
    char *tmp_dir; /* directory we created for the extraction (removed on unregister), or NULL */
    char *venv;    /* its virtual environment (install_py_dep_per_model, inside tmp_dir), or NULL */
    char *handler;
    uint64_t extracted_bytes; /* what its extraction holds of max_extracted_bytes */
    int is_default;
    int loaded_at_startup;
    struct manifest manifest;
    struct model_config mc;
    /* effective settings (the workers' own are in pool: batch_size and the timeouts) */
    int max_batch_delay_ms;
    int queue_max;
    int min_workers;
    int max_workers;
    /* queue */
    struct job_list queue;
    int queue_len;
    struct event *batch_timer;
    struct worker_group pool; /* its workers */
    struct seq_table *seqs;   /* sequenceBatching: job groups (sequence.c), else NULL */
    /* stats; [0]: requests that named no version (TorchServe's model_version "default"),
     * [1]: requests for this version by name */
    uint64_t n_requests[2];
    /* /metrics: per request, from the client's request to its end (latency), in the queue, on a
     * worker (dispatch to end), to the first frame, between frames; TorchServe's cumulative
     * ts_inference_latency_microseconds and ts_queue_latency_microseconds */
    struct hist h_latency, h_queue, h_worker, h_ttft, h_itl;
    uint64_t latency_us_total[2], queue_us_total[2];
    struct custom_metrics custom; /* the metric names its workers report (admission) */
    LIST_ENTRY(model) link;
};

/* What the registry tells the layer above it (management); set once at start-up. */
struct model_events {
    /* A worker of m changed state (loaded, failed, died, respawning). */
    void (*workers_changed)(struct model *m);
    /* m is about to be freed. */
    void (*gone)(struct model *m);
};
void model_set_events(const struct model_events *ev);

/* A new, unregistered model with empty lists (the caller fills in name, version, dir, ...). */
struct model *model_new(void);
/* Frees a model that model_add refused or never saw. */
void model_free(struct model *m);
/* Enters m (its settings filled in) into the registry: the first version of a name becomes
 * the default. TS_E_EXISTS (and a message) when that name and version are registered already;
 * the caller still owns m then. */
int model_add(struct model *m, char *err, size_t errlen);
/* Stops workers, fails queued jobs with 503, frees. */
void model_unregister(struct model *m);
void model_unregister_all(void);
/* NULL version = the default version. Returns TS_E_MODEL_NOT_FOUND / TS_E_VERSION_NOT_FOUND. */
int model_find(const char *name, const char *version, struct model **out);
struct model *model_first(void);
struct model *model_next(struct model *m);
/* Workers alive (starting, ready or respawning): 0 means requests would wait forever. */
int model_workers_alive(const struct model *m);

/* Readiness: the one rule behind GET /ping, /v2/health/ready, /v2/models/M/ready,
 * /v1/models/M and gRPC Ping, ServerReady and ModelReady. A worker counts once it has loaded
 * the model (not while it starts or waits to respawn). A model is ready when at least
 * max(minWorkers, 1) of its workers have loaded; the server is ready when every model has
 * loaded its minWorkers (a model registered with minWorkers 0 does not hold it back). Liveness
 * (/v2/health/live) is not this: the process answers. */
int model_ready(const struct model *m);
int model_server_ready(void);
/* When no worker is alive, fails the queued requests (not a sequence's) with 503 "Model \"NAME\"
 * has no worker to serve inference request: WHY": they would wait for ever. */
void model_fail_if_no_worker(struct model *m, const char *why);

/* Why a request was refused, for any transport (HTTP status; gRPC maps it). */
struct submit_error {
    int status;
    const char *type; /* TorchServe exception name */
    char msg[512];
};

/* name + version (NULL or "" = the default version) with TorchServe's errors for every
 * transport: 0 and *out, or -1 with e = 404 ModelNotFoundException "Model not found: NAME" or
 * ModelVersionNotFoundException "Model version: V does not exist for model: NAME". */
int model_lookup(const char *name, const char *version, struct model **out, struct submit_error *e);
/* The same for the Open Inference Protocol over gRPC, whose clients (Triton's examples) look
 * for Triton's words when a version does not exist: "failed to get model version from
 * specified version string 'V': model NAME has no such version". */
int model_lookup_triton(const char *name, const char *version, struct model **out,
                        struct submit_error *e);
/* A request body of len bytes against max_request_size: 0, or -1 with e = 413. Each transport
 * checks the body it read before it builds a job from it. */
int model_check_body(size_t len, struct submit_error *e);

/* The entry point for every transport: queues the job on the model's queue, or on its sequence
 * when the model has sequenceBatching (sequence info from the job's headers, named as configured
 * by ts_header_key_sequence_*). Returns 0 when queued; 1 when the request was a sequence cancel
 * the frontend carried out (e->msg is the answer, status 200); a negative code when refused. */
int model_submit_request(struct model *m, struct job *j, struct submit_error *e);

/* Queues a job (takes a queue reference). TS_E_QUEUE_FULL or TS_E_NO_WORKER on refusal (the
 * job is untouched then). */
int model_submit(struct model *m, struct job *j);
/* Sends queued jobs to workers with free slots, honouring batchSize and maxBatchDelay. */
void model_dispatch(struct model *m);

#endif
