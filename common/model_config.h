/*
 * model_config: the frontend keys of model-config.yaml, typed, with TorchServe's defaults.
 * Any other key (the `handler:` section, ...) is left to the worker, which reads the same file.
 * Pure. Errors: "model-config.yaml:LINE: KEY: expected an integer, got 'abc'".
 */
#ifndef TS_MODEL_CONFIG_H
#define TS_MODEL_CONFIG_H

/* Upper bounds on the numbers a model's config or a management call may set (model-config.yaml,
 * REST and gRPC alike): a typo or a hostile call must not fork-bomb the host, make one batch
 * allocate gigabytes, or park a timer for years. TorchServe has none of them. */
#define MC_MAX_WORKERS 64
#define MC_MAX_BATCH_SIZE 1024
#define MC_MAX_DELAY_MS 600000  /* 10 minutes */
#define MC_MAX_TIMEOUT_S 604800 /* a week */
#define MC_MAX_QUEUE (1 << 20)
#define MC_NAME_MAX 64 /* bytes of a tensor name in the openai section, NUL included */

#include <stddef.h>

/* deviceType */
#define MC_DEVICE_UNSET 0 /* the server's default: gpu when it has GPUs */
#define MC_DEVICE_CPU 1
#define MC_DEVICE_GPU 2
#define MC_MAX_DEVICE_IDS 64

typedef void model_config_warn_fn(const char *msg, void *arg);

struct model_config {
    int min_workers;         /* minWorkers, -1 = unset */
    int max_workers;         /* maxWorkers, -1 = unset */
    int batch_size;          /* batchSize, -1 = unset (default 1) */
    int max_batch_delay_ms;  /* maxBatchDelay, -1 = unset (default 100) */
    int response_timeout_s;  /* responseTimeout, -1 = unset (server default) */
    int startup_timeout_s;   /* startupTimeout, -1 = unset (server default) */
    int job_queue_size;      /* jobQueueSize, -1 = unset (server job_queue_size) */
    int max_retry_timeout_s; /* maxRetryTimeoutInSec, default 300 */
    int client_timeout_ms;   /* clientTimeoutInMills, 0 = none */
    /* sequences (stateful issue) */
    int sequence_batching;   /* sequenceBatching, 0/1 */
    int continuous_batching; /* continuousBatching, 0/1 */
    int seq_max_idle_ms;     /* sequenceMaxIdleMSec, 0 = unset */
    int seq_timeout_ms;      /* sequenceTimeoutMSec, 0 = never */
    int max_seq_job_queue;   /* maxSequenceJobQueueSize, default 1 */
    int max_num_sequence;    /* maxNumSequence, -1 = unset (batchSize x maxWorkers) */
    int cache_capacity;      /* handler.cache.capacity, -1 = unset */
    /* the OpenAI-compatible API (docs/openai.md): the model generates text */
    int openai_enabled;                    /* openai.enabled, 0/1 */
    char openai_prompt_input[MC_NAME_MAX]; /* openai.promptInput: the OIP input of the prompt */
    char openai_text_output[MC_NAME_MAX];  /* openai.textOutput: the OIP output of the text,
                                            * "" = the first BYTES output */
    /* devices (frontend/core/gpu_assign.h decides what they mean on this host) */
    int device_type;                   /* deviceType: MC_DEVICE_* */
    int device_ids[MC_MAX_DEVICE_IDS]; /* deviceIds: GPUs by gpu_id */
    int n_device_ids;                  /* -1 = unset */
};

void model_config_defaults(struct model_config *mc);
/* Reads the yaml file at path into mc (starting from defaults). 0 or TS_E_BAD_CONFIG/-errno
 * (deviceType other than cpu or gpu, deviceIds that are not a list of integers). Keys of
 * TorchServe's that we do not act on, and unknown keys (with the closest known one), are reported
 * to warn ("file:line: ..."), which may be NULL. */
int model_config_load(const char *path, struct model_config *mc, model_config_warn_fn *warn,
                      void *warn_arg, char *err, size_t errlen);

#endif
