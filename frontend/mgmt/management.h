/*
 * management: TorchServe's management operations, independent of the transport. REST
 * (http_management.c, port 8081) and gRPC (ManagementAPIsService, port 7071) only decode their
 * arguments into the structs below, call one mgmt_* function and encode what `done` reports.
 *
 * Loop thread only (gRPC's calls run on the loop too, see grpc_server.c).
 *
 * Completion: every operation reports exactly once through `done(arg, status, type, msg)`:
 *   - success: status 200 / 202 / 206, type NULL. msg is
 *       register, unregister, scale, set-default: the status sentence, e.g.
 *         Model "mlp" Version: 1.0 registered with 0 initial workers. Use scale workers API ...
 *         (REST sends {"status": msg}; gRPC sends ManagementResponse.msg = msg)
 *       list, describe: the pretty JSON document (2-space indent, trailing newline) that both
 *         REST and gRPC send as is.
 *   - failure: status >= 400, type = TorchServe's exception simple name
 *     ("ModelNotFoundException", "BadRequestException", "MethodNotAllowedException", ...),
 *     msg = the message (REST builds {"code","type","message"}; gRPC maps the status with
 *     grpc_status_from_http(), grpc/grpc_status.c).
 * `done` may run before the mgmt_* call returns (most operations complete at once). A
 * synchronous register/scale completes later, when its workers are READY or have failed; for
 * those the call returns a handle that the transport passes to mgmt_op_cancel() if its client
 * goes away (then `done` is never called). Every mgmt_* function returns NULL when `done` has
 * already been called. Strings passed in are borrowed for the duration of the call only; msg
 * is valid only during `done`.
 */
#ifndef TS_MANAGEMENT_H
#define TS_MANAGEMENT_H

#include <stdint.h>

struct model;
struct mgmt_op;

/* The 405 of register and unregister while the model API is off (TorchServe's default), for
 * every transport (gRPC: PERMISSION_DENIED "Model API disabled; ..."): it says how to turn it on.
 */
#define MGMT_MODEL_API_HOW                                                                         \
    "enable it with enable_model_api=true in config.properties or --enable-model-api at start"
#define MGMT_MODEL_API_OFF_MSG                                                                     \
    "Requested method is not allowed: the model API (register, unregister) is "                    \
    "disabled; " MGMT_MODEL_API_HOW

typedef void mgmt_done_fn(void *arg, int http_status, const char *exception_type, const char *msg);

/* POST /models, RegisterModel. Unset = the value mgmt_register_init gives. */
struct mgmt_register_args {
    const char *url;        /* required: NULL -> 400 "Parameter url is required." */
    const char *model_name; /* NULL: from the manifest, else the archive name */
    const char *handler;    /* NULL: from the manifest */
    const char *runtime;    /* NULL, or python|python3|LSP (anything else -> 400) */
    int batch_size;         /* -1: model-config.yaml, else 1 */
    int max_batch_delay;    /* -100: model-config.yaml, else 100 ms */
    int initial_workers;    /* default_workers_per_model; <= 0 registers with no worker */
    int synchronous;        /* REST: true (TorchServe's code default); gRPC: as sent */
    int response_timeout;   /* -1: model-config.yaml, else default_response_timeout (s) */
    int startup_timeout;    /* -1: model-config.yaml, else default_startup_timeout (s) */
    int s3_sse_kms;         /* TorchServe's S3 download option: not used here (a log line) */
};

/* PUT /models/{m}[/{v}], ScaleWorker */
struct mgmt_scale_args {
    const char *model_name;
    const char *model_version; /* NULL or "": the default version */
    int min_worker;            /* REST default 1 */
    int max_worker;            /* REST default min_worker */
    int synchronous;           /* default false */
    /* TorchServe's keys that it does not act on either; > 0: the log says they are not used */
    int number_gpu; /* a worker's GPU comes from number_of_gpu and deviceIds */
    int timeout;
};

/* REST defaults (the query or JSON body then overrides field by field). */
void mgmt_register_init(struct mgmt_register_args *a);
void mgmt_scale_init(struct mgmt_scale_args *a);

/* gRPC defaults (TorchServe's GRPCUtils.getRegisterParam): an int counts only when > 0, a
 * string only when non-empty; synchronous is the proto value (false when unset). The strings
 * are borrowed. */
void mgmt_register_from_grpc(struct mgmt_register_args *a, const char *url, const char *model_name,
                             const char *handler, const char *runtime, int32_t batch_size,
                             int32_t max_batch_delay, int32_t initial_workers, int synchronous,
                             int32_t response_timeout, int32_t startup_timeout, int s3_sse_kms);
/* min_worker defaults to 1 and max_worker to min_worker unless > 0. */
void mgmt_scale_from_grpc(struct mgmt_scale_args *a, const char *model_name,
                          const char *model_version, int32_t min_worker, int32_t max_worker,
                          int synchronous, int32_t number_gpu, int32_t timeout);

/* Model API control (enable_model_api=false, TorchServe's default) is checked inside
 * mgmt_register and mgmt_unregister: they then fail with 405 MethodNotAllowedException, which
 * gRPC answers as PERMISSION_DENIED "Model API disabled" (grpc_management.c). */
struct mgmt_op *mgmt_register(const struct mgmt_register_args *a, mgmt_done_fn *done, void *arg);
/* version NULL or "": the default version (refused with 403 while other versions exist). */
struct mgmt_op *mgmt_unregister(const char *name, const char *version, mgmt_done_fn *done,
                                void *arg);
struct mgmt_op *mgmt_scale(const struct mgmt_scale_args *a, mgmt_done_fn *done, void *arg);
/* limit: > 100 or < 0 becomes 100 (REST passes 100 when absent; gRPC passes the field, so an
 * unset limit gives an empty page as in TorchServe). next_page_token: offset, < 0 becomes 0. */
struct mgmt_op *mgmt_list(int limit, int next_page_token, mgmt_done_fn *done, void *arg);
/* version NULL or "": the default version; "all": every version. customized: also ask the
 * backend for its describe output ("customizedMetadata"); completes when the worker answers. */
struct mgmt_op *mgmt_describe(const char *name, const char *version, int customized,
                              mgmt_done_fn *done, void *arg);
struct mgmt_op *mgmt_set_default(const char *name, const char *version, mgmt_done_fn *done,
                                 void *arg);

/* The transport's client went away: `done` will not be called for op. The operation itself
 * (workers starting) goes on. */
void mgmt_op_cancel(struct mgmt_op *op);

/* Start-up: subscribes to the registry's events (a worker of a model changed state, a model is
 * going away), which complete or fail pending synchronous operations. */
void mgmt_init(void);
/* Server shutdown: drops pending operations without calling them. */
void mgmt_shutdown(void);

#endif
