/*
 * config: the server's config.properties, typed, with TorchServe's keys and defaults.
 * Loaded once at start on the main thread, read-only afterwards (owned by struct server).
 * Unknown keys produce a warning through warn_fn; a bad value fails with "file:line: reason".
 */
#ifndef TS_CONFIG_H
#define TS_CONFIG_H

#include <stddef.h>

struct listen_addr {
    char *scheme; /* "http" or "https" */
    char *host;   /* "127.0.0.1" */
    int port;
};

struct config {
    char *path;                            /* file it came from, NULL for defaults only */
    struct listen_addr inference_address;  /* http://127.0.0.1:8080 */
    struct listen_addr management_address; /* http://127.0.0.1:8081 */
    struct listen_addr metrics_address;    /* http://127.0.0.1:8082 */
    char *grpc_inference_address;          /* 127.0.0.1 */
    int grpc_inference_port;               /* 7070 */
    char *grpc_management_address;         /* 127.0.0.1 */
    int grpc_management_port;              /* 7071 */
    int enable_grpc;                       /* our key: enable_grpc, default true */
    char *model_store;                     /* NULL unless set */
    char *load_models;                     /* NULL unless set */
    int default_workers_per_model;         /* 0 = number of CPUs for startup models */
    int job_queue_size;                    /* 100 */
    long max_request_size;                 /* 6553500 */
    long max_response_size;                /* 6553500 */
    long stream_buffer_size;               /* 4 MiB: a slow client's stream is paused beyond */
    int stream_stall_timeout;              /* 60 s: a stream paused that long is cancelled */
    int max_connections;                   /* 0: derived from RLIMIT_NOFILE (http_guard.h) */
    char *private_key_file;                /* PEM, for https:// listeners and gRPC TLS */
    char *certificate_file;                /* PEM (a chain: the server's certificate first) */
    int enable_grpc_ssl;                   /* false */
    char *cors_allowed_origin;             /* NULL: no CORS headers at all */
    char *cors_allowed_methods;            /* preflight Access-Control-Allow-Methods */
    char *cors_allowed_headers;            /* preflight Access-Control-Allow-Headers */
    int grpc_max_connection_age_ms[2];     /* inference, management; 0 = none */
    int grpc_max_connection_age_grace_ms[2];
    long max_extracted_bytes;           /* 16 GiB: all extracted archives together */
    int default_response_timeout;       /* 120 s */
    int default_startup_timeout;        /* 120 s */
    int unregister_model_timeout;       /* 120 s */
    int enable_model_api;               /* false */
    int disable_token_authorization;    /* false */
    double token_expiration_min;        /* 60; a fraction is allowed (TorchServe: Double) */
    char *allowed_urls;                 /* "file://.*|http(s)?://.*" */
    int enable_metrics_api;             /* true */
    char *metrics_mode;                 /* "prometheus" (ours), or "log": ts_metrics.log */
    int metric_time_interval;           /* system metrics and log mode: seconds; -1 unset (60) */
    char *metrics_config;               /* TorchServe's metrics.yaml, NULL unless set */
    int model_metrics_auto_detect;      /* -1 unset: true without metrics_config (every model
                                           metric is served, as before it existed), false with
                                           it (TorchServe's default) */
    int initial_worker_port;            /* 9000: worker ids count up from here */
    int worker_threads;                 /* our key: intra-op threads per worker, default 1 */
    char *ts_header_key_sequence_id;    /* ts_request_sequence_id */
    char *ts_header_key_sequence_start; /* ts_request_sequence_start */
    char *ts_header_key_sequence_end;   /* ts_request_sequence_end */
    char *models_json;                  /* `models=` JSON, NULL unless set */
    int models_line;                    /* its line in the file (snapshot_check's errors) */
    char *snapshot_json;                /* `model_snapshot=` JSON, NULL unless set */
    int snapshot_line;
    char *state_dir;              /* our key: state_dir; default <run dir>/state */
    char *state_store;            /* our key: NULL = LMDB under state_dir (the default, "lmdb"),
                                   * or redis://...: sequence state shared by the instances */
    char *log_location;           /* logs/ */
    long log_max_size;            /* our key: rotate each log past this many bytes (100 MiB) */
    int log_max_files;            /* our key: rotated files kept per log (5) */
    int enable_access_log;        /* our key: access_log.log (true) */
    int sched_batch;              /* our key: frontend and workers under SCHED_BATCH (true) */
    int busy_poll_us;             /* our key: look for events this long before sleeping (0) */
    char *oip_stream_response;    /* our key: triton (default) | mlserver */
    int enable_envvars_config;    /* TS_<KEY> environment variables override the file (false) */
    int use_env_allowed_urls;     /* ... and TS_ALLOWED_URLS among them (false) */
    int install_py_dep_per_model; /* a model's requirements.txt into its own venv (false) */
    char **env_keys;              /* the keys the environment set (config_from_env) */
    size_t n_env_keys;
    int worker_debug_headers;    /* our key: pass the workers' x-ts-worker-* counters (false) */
    long max_pending_heads_size; /* our key: unfinished request heads together (64 MiB) */
    int number_of_gpu;           /* -1 unset: every visible GPU; capped at the visible ones */
    char *python;                /* NULL unless set: the Python workers' interpreter (pyinfo.h) */
    int disable_system_metrics;  /* false: CPU, memory, disk and GPU metrics (sys_metrics.h) */
};

typedef void config_warn_fn(const char *msg, void *arg);

void config_defaults(struct config *c);
/* Reads path over c, which config_defaults() (or an earlier config_load) initialised.
 * 0, or TS_E_BAD_CONFIG / -errno with err = "file:line: reason". Whatever the result, c holds
 * valid values (keys before the bad one applied) and is released with config_free.
 * warn may be NULL. */
int config_load(const char *path, struct config *c, config_warn_fn *warn, void *warn_arg, char *err,
                size_t errlen);
/* With enable_envvars_config=true in the file, config_load then reads TorchServe's TS_<KEY>
 * variables (TS_ and the key in upper case; TS_TOKEN_EXPIRATION_TIME_MIN and
 * TS_HEADER_KEY_SEQUENCE_{ID,START,END} as TorchServe spells them) over the file's values, with
 * the same checks; an error names the variable. 1 when key's value came from the environment:
 * as in TorchServe, such a value also wins over the command line (--model-store, --models,
 * --disable-token-auth, --enable-model-api). */
int config_from_env(const struct config *c, const char *key);
/* Parses "http(s)://host[:port]" (TorchServe's address syntax; the port defaults to 80/443, an
 * IPv6 host is written in brackets). 0 with out's strings malloc'd, or -EINVAL. */
int config_parse_address(const char *s, struct listen_addr *out);
void config_free(struct config *c);

#endif
