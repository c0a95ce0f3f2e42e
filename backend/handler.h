/*
 * handler.h: the C handler ABI of torchserve-c-worker (version 1).
 *
 * A handler is a `struct ts_handler`. Built-in handlers are compiled into the worker
 * (backend/handlers/); any other handler is a shared library shipped in the model archive and
 * named in MANIFEST.json as "libfoo.so" (symbol `ts_handler_v1`) or "libfoo.so:symbol". The
 * symbol is a function `const struct ts_handler *symbol(void)`.
 *
 * Threading: the worker is single-threaded; every callback and every ts_* function below runs on
 * that one thread. Memory: strings and buffers the worker hands out stay valid until the callback
 * returns (request data: until the request finishes). Everything a handler passes in is copied.
 *
 * Requests and steps. Each call of `handle` receives n requests, indexed 0..n-1 in this call.
 * When `handle` returns, each request is finished, and its final frame goes to the frontend
 * (ts_stream_next: false if the request streamed), unless the handler called ts_continue() on it.
 * Only handlers with TS_HANDLER_CONTINUOUS may continue requests: they hold up to batch_size
 * requests at once (under sequenceBatching up to twice that: a sequence's next request joins its
 * running one); every call is one step over the requests that are due, new ones join at the
 * next step and finished ones leave (continuous batching). Indices change between calls: use
 * ts_request_id() or ts_set_user() to keep per-request state.
 *
 * Streaming: ts_send_intermediate_response() queues a partial result (ts_stream_next: true).
 * Queued partials are written when `handle` returns, or at once by ts_flush(). A request whose
 * client reads slower than its stream is paused by the frontend: a send for it then waits for
 * the client when this call serves that request alone and nothing else waits; otherwise its
 * output is held in the worker, and past stream_buffer_size the request is cancelled (its
 * client gets a 429 saying it read too slowly) and the send returns -ECANCELED.
 */
#ifndef TS_HANDLER_H
#define TS_HANDLER_H

#include <stddef.h>
#include <stdint.h>

#define TS_HANDLER_ABI_VERSION 1

/* handler flags */
#define TS_HANDLER_CONTINUOUS 0x1u

/* sequence events delivered to seq_event (same values as the wire, common/otf.h) */
#define TS_SEQ_END 1
#define TS_SEQ_CANCEL 2
#define TS_SEQ_IDLE 3
#define TS_SEQ_TIMEOUT 4

struct ts_ctx; /* opaque, one per worker */

struct ts_handler {
    int abi_version; /* TS_HANDLER_ABI_VERSION */
    const char *name;
    unsigned flags;
    /* Load the model. Return 0, or a negative value after ts_set_load_error(). */
    int (*init)(struct ts_ctx *ctx, void **state);
    /* Process the n requests of this step. */
    void (*handle)(void *state, struct ts_ctx *ctx, size_t n);
    /* Optional: a sequence ended (TS_SEQ_*); drop its state. */
    void (*seq_event)(void *state, struct ts_ctx *ctx, const char *seq_id, int event);
    /* Optional: free everything. */
    void (*destroy)(void *state);
};

typedef const struct ts_handler *ts_handler_get_fn(void);

/* ---- model ---- */
const char *ts_model_name(struct ts_ctx *ctx);
const char *ts_model_dir(struct ts_ctx *ctx);
int ts_batch_size(struct ts_ctx *ctx);
/* The GPU the frontend assigned this worker (TorchServe's gpu_id: an index into the CUDA
 * devices the server sees, CUDA_VISIBLE_DEVICES applied), or -1 for the CPU. A C handler
 * loads its model there (torch_shim.h: tsh_load); a Python handler sees it as
 * context.system_properties["gpu_id"] (None for -1). */
int ts_gpu_id(struct ts_ctx *ctx);
/* The handler string the model was loaded with (MANIFEST.json model.handler, or the register
 * request's handler). */
const char *ts_handler_spec(struct ts_ctx *ctx);
/* MANIFEST.json model.serializedFile (may be ""). */
const char *ts_serialized_file(struct ts_ctx *ctx);
/* model-config.yaml value by dotted path, e.g. "handler.delay_ms", "batchSize". NULL if absent. */
const char *ts_config_get(struct ts_ctx *ctx, const char *path);
long ts_config_get_long(struct ts_ctx *ctx, const char *path, long dflt);
void ts_set_load_error(struct ts_ctx *ctx, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* ---- requests of the current call ---- */
const char *ts_request_id(struct ts_ctx *ctx, size_t idx);
/* Request header (case-insensitive name), NUL-terminated; NULL if absent. */
const char *ts_get_header(struct ts_ctx *ctx, size_t idx, const char *name);
/* A parameter by name; NULL if absent. *len and *ctype (may be "") are optional. */
const void *ts_get_param(struct ts_ctx *ctx, size_t idx, const char *name, size_t *len,
                         const char **ctype);
/* The request body: the parameter named "body", else "data", else the first one. */
const void *ts_get_body(struct ts_ctx *ctx, size_t idx, size_t *len, const char **ctype);
/* All request headers, in arrival order: the count, and name/value of header i. */
size_t ts_header_count(struct ts_ctx *ctx, size_t idx);
const char *ts_header_at(struct ts_ctx *ctx, size_t idx, size_t i, const char **name);
size_t ts_param_count(struct ts_ctx *ctx, size_t idx);
const void *ts_param_at(struct ts_ctx *ctx, size_t idx, size_t i, const char **name, size_t *len,
                        const char **ctype);
/* 1 the first time a request is passed to handle. */
int ts_is_new(struct ts_ctx *ctx, size_t idx);
/* Per-request handler data, freed with free_fn when the request finishes or is cancelled. */
void *ts_get_user(struct ts_ctx *ctx, size_t idx);
void ts_set_user(struct ts_ctx *ctx, size_t idx, void *user, void (*free_fn)(void *));
/* The request's sequence id (header ts_request_sequence_id), NULL if none. */
const char *ts_sequence_id(struct ts_ctx *ctx, size_t idx);
/* Request header set by the frontend (and only by it) on the request that opened a sequence on
 * this instance for an id the client chose, without the client's start flag: the handler was
 * not told to start (TorchServe's contract), and may continue state it finds for the id (a
 * shared state backend) or start from nothing. The answer then says which: the frontend adds
 * ts_request_sequence_start: true unless the handler's answer sets that header itself (the
 * state API answers "false" when it found the sequence's state). */
#define TS_SEQ_NEW_HEADER "ts_request_sequence_new"
/* 1 once the client went away or the sequence was cancelled: stop producing for it. */
int ts_is_cancelled(struct ts_ctx *ctx, size_t idx);

/* ---- responses ---- */
void ts_set_response(struct ts_ctx *ctx, size_t idx, const void *data, size_t len);
void ts_set_status(struct ts_ctx *ctx, size_t idx, int status, const char *phrase);
void ts_set_content_type(struct ts_ctx *ctx, size_t idx, const char *ctype);
void ts_set_header(struct ts_ctx *ctx, size_t idx, const char *key, const char *val);
/* Status + JSON body {"code": status, "type": "...", "message": msg}. */
void ts_set_error(struct ts_ctx *ctx, size_t idx, int status, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Queue a partial result (TorchServe's send_intermediate_predict_response). 0, or -ECANCELED when
 * the request was cancelled (its client went away, or read too slowly: see Streaming above). */
int ts_send_intermediate_response(struct ts_ctx *ctx, size_t idx, const void *data, size_t len);
/* Write queued partials now. */
int ts_flush(struct ts_ctx *ctx);
/* TS_HANDLER_CONTINUOUS only: keep the request and pass it to handle again after delay_us. */
void ts_continue(struct ts_ctx *ctx, size_t idx, int64_t delay_us);

/* ---- streamed input (our extension) ----
 * A request whose client streams its input (gRPC ModelStreamInfer to a model that reads a stream
 * of requests, as an MLServer runtime's predict_stream does) has the header ts_input_stream: true;
 * its first message is its body, and later messages arrive while it runs (continuous handlers
 * only: the request must be kept with ts_continue() to receive them). ts_input_next() takes the
 * next one: 1 with *body, *len and *ctype set (valid until the next ts_input_next() for the
 * request or its end), 0 when none has arrived yet, -1 when the client will send no more (at
 * once for a request that does not stream its input). A held request is due at once when a
 * message or the end of its input arrives, whatever its ts_continue() delay. */
int ts_input_next(struct ts_ctx *ctx, size_t idx, const void **body, size_t *len,
                  const char **ctype);

/* ---- waking held requests (our extension) ----
 * For a continuous handler whose work goes on outside handle(), in threads or an event loop:
 * while it holds requests (ts_continue), the worker also waits for fd to become readable, and
 * then every held request is due at once, whatever its delay. The handler owns fd and drains it
 * in handle() (an fd that stays readable makes every wait end at once). -1 stops it. */
void ts_set_wake_fd(struct ts_ctx *ctx, int fd);

/* ---- per-sequence state (LRU + LMDB write-through; see the stateful issue) ---- */
const void *ts_state_get(struct ts_ctx *ctx, size_t idx, size_t *len);
int ts_state_put(struct ts_ctx *ctx, size_t idx, const void *data, size_t len);
int ts_state_del(struct ts_ctx *ctx, size_t idx);

/* ---- counters, reported by the worker (X-TS-Worker-* response headers, metrics) ---- */
void ts_counter_add(struct ts_ctx *ctx, const char *name, int64_t delta);

/* ---- metrics, served on /metrics per model and version (TorchServe's context.metrics) ----
 * kind: TS_METRIC_COUNTER adds up (add_counter; the value must be >= 0), TS_METRIC_GAUGE keeps
 * the last value (add_time, add_size and add_percent are gauges in TorchServe), and
 * TS_METRIC_HISTOGRAM observes every value into buckets from 0.1 to 10000 (in the metric's unit).
 * The name becomes the Prometheus family name: bytes outside [A-Za-z0-9_:] become '_', it is cut
 * at 64 bytes; unit (e.g. "ms", "Count", "MB", "Percent"; may be NULL) goes into its HELP line.
 * The metric travels with request idx's next response to the frontend, never to the client.
 * The frontend keeps at most 32 distinct names per model besides HandlerTime and PredictionTime
 * (gauges, ms, which the worker reports for every step); values past that, for a name whose kind
 * changes, or for a name the frontend serves itself (ts_*, Requests2XX, QueueTime, ...) are
 * dropped, and the frontend logs the name. */
#define TS_METRIC_COUNTER 0
#define TS_METRIC_GAUGE 1
#define TS_METRIC_HISTOGRAM 2
void ts_metric_add(struct ts_ctx *ctx, size_t idx, const char *name, const char *unit, int kind,
                   double value);

/* ---- logging through the worker's logger ---- */
void ts_log(struct ts_ctx *ctx, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
