/*
 * core: the frontend's one global, `struct server`: the settings, the event base and the model
 * registry that every layer reads. It is defined here, in the lowest frontend layer that needs it,
 * so that nothing in core/ includes a header above it; frontend/server.c fills it in at start-up.
 *
 * Loop thread only: everything mutable here is touched on the libevent base's thread (the
 * registration thread reads the immutable config, model_store and run_dir only).
 */
#ifndef TS_CORE_H
#define TS_CORE_H

#include <stdint.h>
#include <sys/queue.h>

#include "config.h"
#include "metrics_config.h"
#include "model_metrics.h"

struct event_base;
struct model;
struct rlog;

struct metrics_counters {
    uint64_t requests_2xx, requests_4xx, requests_5xx;
    /* TorchServe's host-level gauges, ms: the last request's wait in a queue, and the last
     * batch's time with its worker beyond the worker's own PredictionTime (the frame trip) */
    double queue_time_ms, worker_thread_time_ms;
};

struct server {
    struct event_base *base;
    struct config cfg;
    char *worker_bin;  /* torchserve-c-worker next to our own binary */
    char *model_store; /* absolute */
    char *run_dir;     /* per-instance scratch dir: extracted archives */
    int next_worker_id;
    int n_gpu;        /* GPUs workers are given: number_of_gpu, capped at the visible ones */
    int gpu_counter;  /* TorchServe's one round-robin counter across models (gpu_assign.h) */
    char *python_exe; /* what Python workers run: config.properties' python once checked
                       * (pyinfo.h), else the plugin's; NULL without the plugin */
    int stopping;
    int64_t start_us;
    struct metrics_counters counters;
    /* under log_location (access_log.c, server.c); NULL when off or not opened */
    struct rlog *access_log, *model_log, *ts_log;
    /* metrics_mode=log: model metrics, one line per reported value (model.c); NULL otherwise */
    struct rlog *model_metrics_log;
    /* the workers' metrics (model_metrics.h), metrics.yaml's declarations (metrics_config.h),
     * and those declarations for the workers' environment ("TS_WORKER_MODEL_METRICS=[...]",
     * NULL without metrics_config) */
    struct model_metrics model_metrics;
    struct metrics_config metrics_decl;
    char *worker_metrics_env;
    char host[256]; /* gethostname(), the Hostname of metrics */
    LIST_HEAD(, model) models;
};

extern struct server *srv;

#endif
