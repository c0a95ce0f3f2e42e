/*
 * otf: TorchServe's frontend <-> worker frame protocol ("OTF"), both directions, plus our
 * extensions. Used by the frontend (worker_conn.c) and the worker (backend/worker.c).
 *
 * Wire format (all integers int32 big-endian, strings = int32 length + bytes, lists end in -1):
 *   frontend -> worker
 *     'L' name path batch_size handler gpu_id envelope limit_max_image_pixels(u8)     load
 *     'I' { req_id headers{k v}* -1 params{name ctype value}* -1 }* -1                  inference
 *     'C' { req_id }* -1                                             cancel (our extension)
 *     'P' { req_id }* -1, 'R' { req_id }* -1       pause / resume a held request (ours: its
 *                                                  client reads slower than it streams)
 *     'S' seq_id event(int32) -1                                     sequence event (ours)
 *     'D' req_id ctype body                 one more input message for a running request whose
 *                                           client streams its input (ours; see OTF_INPUT_STREAM)
 *     'E' { req_id }* -1                    those requests' clients will send no more input (ours)
 *   worker -> frontend (no command byte)
 *     code msg { req_id ctype status phrase n_headers {k v}*n body }* -1
 *   The load reply is the same shape with no predictions.
 *
 * Pure: no global state, no logging. Decoders work on a contiguous byte range and return
 * pointers into it (zero copy): the decoded frame is valid only while that range is. They return
 * the number of bytes consumed, TS_E_INCOMPLETE when the range holds only part of a frame (call
 * again with more bytes), or TS_E_PROTOCOL / TS_E_TOO_LARGE for a frame that can never parse.
 */
#ifndef TS_OTF_H
#define TS_OTF_H

#include <stddef.h>
#include <stdint.h>

#include "util.h"

#define OTF_CMD_LOAD 'L'
#define OTF_CMD_INFER 'I'
#define OTF_CMD_CANCEL 'C'
#define OTF_CMD_PAUSE 'P'
#define OTF_CMD_RESUME 'R'
#define OTF_CMD_SEQ_EVENT 'S'
#define OTF_CMD_INPUT 'D'
#define OTF_CMD_INPUT_END 'E'

/* Header that marks streaming frames, as TorchServe defines it. */
#define OTF_STREAM_NEXT "ts_stream_next"

/* Streamed input (ours): a request whose client sends several messages (gRPC ModelStreamInfer to
 * a model that reads a stream of requests, as an MLServer runtime's predict_stream does) carries
 * this header with the value "true" in its 'I' frame. Its first message is its body; each later
 * one follows as a 'D' frame for its id, in the order the client sent them, and an 'E' frame
 * says that the client sent its last. The worker hands them to the handler (ts_input_next);
 * frames for a request it no longer holds are dropped. */
#define OTF_INPUT_STREAM "ts_input_stream"

/* Metadata a worker sends with a prediction, in two headers of ours (TorchServe's Python worker
 * prints its metrics on stdout instead). Both are binary; the frontend takes them out of the
 * prediction before any transport sees it, and handlers cannot set them (ts_set_header refuses
 * the names).
 * - OTF_METRICS_KEY: the handler's metrics (ts_metric_add), records of
 *     kind(u8: 'c' counter, 'g' gauge, 'h' histogram) name_len(u8, 1..64) unit_len(u8, 0..24)
 *     name unit value(the IEEE-754 bits of a finite double, 8 bytes big-endian)
 *   NAME [A-Za-z_:][A-Za-z0-9_:]*, UNIT [A-Za-z0-9_%/.-]* (empty for none). Exact, and read
 *   without parsing text on the frontend's request path.
 * - OTF_STEP_KEY: the step's HandlerTime and PredictionTime, fixed: handle_us predict_us (int64
 *   big-endian, >= 0), on the first still-wanted request of each step (its latest step's if it
 *   answers after several). */
#define OTF_METRICS_KEY "ts_worker_metrics"
#define OTF_STEP_KEY "ts_worker_step"
#define OTF_STEP_LEN 16
#define OTF_METRIC_NAME_MAX 64
#define OTF_METRIC_UNIT_MAX 24

/* A worker's progress (ours), in a page of shared memory: the frontend creates it as a memfd
 * named OTF_PROGRESS_NAME and passes it as the worker's fd OTF_PROGRESS_FD. Requests are numbered
 * from 0 at the spawn, in the order the 'I' frames carry them. Before a step's handle() the
 * worker sets started one past the last request the step takes; once the step's answers are
 * queued, finished the same. A worker may hold a step's answers back while its next step runs
 * (backend/worker.c), so when it dies the frontend tells from these which of its unanswered
 * requests had finished (their answers died with it), which were running, and which never
 * started. magic says that the worker keeps the two (a fake worker in the unit tests may not).
 * Written only by the worker; the frontend reads them once the worker is dead. */
#define OTF_PROGRESS_FD 4
#define OTF_PROGRESS_NAME "torchserve-c-progress"
#define OTF_PROGRESS_MAGIC 0x7473632d70726f67ULL /* "tsc-prog" */
struct otf_progress {
    uint64_t magic;
    uint64_t started;
    uint64_t finished;
};

/* Sequence events (our extension) */
enum otf_seq_event {
    OTF_SEQ_END = 1,     /* client ended the sequence */
    OTF_SEQ_CANCEL = 2,  /* client cancelled the sequence */
    OTF_SEQ_IDLE = 3,    /* idle longer than sequenceMaxIdleMSec */
    OTF_SEQ_TIMEOUT = 4, /* older than sequenceTimeoutMSec */
};

struct otf_str {
    const char *p; /* not NUL-terminated when decoded */
    int32_t len;   /* -1 encodes "null" (sent as length 0) */
};

struct otf_kv {
    struct otf_str key;
    struct otf_str val;
};

struct otf_param {
    struct otf_str name;
    struct otf_str ctype;
    struct otf_str value;
};

struct otf_load {
    struct otf_str model_name;
    struct otf_str model_path;
    int32_t batch_size;
    struct otf_str handler;
    int32_t gpu_id;
    struct otf_str envelope;
    uint8_t limit_max_image_pixels;
};

struct otf_request {
    struct otf_str id;
    struct otf_kv *headers;
    size_t n_headers;
    struct otf_param *params;
    size_t n_params;
};

struct otf_prediction {
    struct otf_str id;
    struct otf_str ctype;
    int32_t status;
    struct otf_str phrase;
    struct otf_kv *headers;
    size_t n_headers;
    struct otf_str body;
};

/* A decoded worker->frontend frame. Arrays are malloc'd; free with otf_response_free. */
struct otf_response {
    int32_t code;
    struct otf_str msg;
    struct otf_prediction *preds;
    size_t n_preds;
};

/* A decoded frontend->worker frame. */
struct otf_command {
    char cmd;
    struct otf_load load;     /* 'L' */
    struct otf_request *reqs; /* 'I' */
    size_t n_reqs;
    struct otf_str *ids; /* 'C', 'P', 'R', 'E' */
    size_t n_ids;
    struct otf_str seq_id; /* 'S' */
    int32_t seq_event;
    struct otf_str input_id, input_ctype, input_body; /* 'D' */
};

static inline struct otf_str otf_s(const char *s)
{
    struct otf_str r = {s, s ? (int32_t)__builtin_strlen(s) : -1};
    return r;
}

static inline struct otf_str otf_sn(const char *s, size_t n)
{
    struct otf_str r = {s, (int32_t)n};
    return r;
}

/* Case-sensitive exact match of a decoded string against a C string (inline: the length of a
 * literal folds at compile time, and the frontend compares every header of every prediction
 * with a few). */
static inline int otf_str_eq(struct otf_str s, const char *c)
{
    size_t n = __builtin_strlen(c);
    return s.len >= 0 && (size_t)s.len == n && (n == 0 || __builtin_memcmp(s.p, c, n) == 0);
}
/* malloc'd NUL-terminated copy (a null string gives ""). */
char *otf_strdup(struct otf_str s);

/* ---- encoding ---- */
void otf_put_str(struct buf *b, struct otf_str s);
void otf_encode_load(struct buf *b, const struct otf_load *l);
void otf_encode_infer_begin(struct buf *b);
void otf_encode_request(struct buf *b, const struct otf_request *r);
void otf_encode_list_end(struct buf *b); /* the -1 that closes a batch / prediction list */
void otf_encode_cancel(struct buf *b, const struct otf_str *ids, size_t n);
/* 'P' (paused = 1) or 'R' (paused = 0) for the requests ids. */
void otf_encode_pause(struct buf *b, const struct otf_str *ids, size_t n, int paused);
void otf_encode_seq_event(struct buf *b, struct otf_str seq_id, int32_t event);
/* 'D': one more input message (body, of content type ctype) for the running request id. */
void otf_encode_input(struct buf *b, struct otf_str id, struct otf_str ctype, struct otf_str body);
/* 'E': the clients of the requests ids will send no more input. */
void otf_encode_input_end(struct buf *b, const struct otf_str *ids, size_t n);
void otf_encode_response_begin(struct buf *b, int32_t code, struct otf_str msg);
void otf_encode_prediction(struct buf *b, const struct otf_prediction *p);

/* ---- decoding ---- (see the top of this file for the return convention) */
long otf_decode_response(const uint8_t *p, size_t len, size_t max_field, struct otf_response *out);
void otf_response_free(struct otf_response *r);
long otf_decode_command(const uint8_t *p, size_t len, size_t max_field, struct otf_command *out);
void otf_command_free(struct otf_command *c);

/* What /metrics writes as it is, byte by byte (the records here, TorchServe's metric lines
 * (metric_line.h), metrics.yaml's declarations): 1 when [p, p+n) is a metric name
 * [A-Za-z_:][A-Za-z0-9_:]*, a dimension (label) name [A-Za-z_][A-Za-z0-9_]*, or a unit
 * [A-Za-z0-9_%/.-]* (empty allowed). Lengths are the caller's to bound. */
int otf_metric_name_ok(const char *p, size_t n);
int otf_metric_dim_ok(const char *p, size_t n);
int otf_metric_unit_ok(const char *p, size_t n);

/* A decoded metric record; name and unit point into the record (zero copy, as the frames). */
struct otf_metric {
    char kind; /* 'c', 'g' or 'h' */
    struct otf_str name;
    struct otf_str unit; /* len 0 for none */
    double value;
};

/* Appends one metric record. The name and unit are made valid (other bytes become '_', a leading
 * digit gets a '_' before it, both are cut at their maximum); -EINVAL for an unknown kind, an
 * empty name or a value that is not finite (nothing appended). */
int otf_metric_encode(struct buf *b, char kind, const char *name, const char *unit, double value);
/* The next metric record of [p, p+len): bytes consumed (> 0), 0 at the end, or TS_E_PROTOCOL for
 * one that is not as otf_metric_encode writes them (the rest cannot be trusted). */
long otf_metric_next(const char *p, size_t len, struct otf_metric *m);

/* A step's times (OTF_STEP_KEY). */
struct otf_step {
    int64_t handle_us;  /* the handle() call */
    int64_t predict_us; /* from the oldest new request's arrival to the call's end */
};
void otf_step_encode(uint8_t out[OTF_STEP_LEN], const struct otf_step *s);
/* 0, or TS_E_PROTOCOL for a value of another length or a negative time. */
int otf_step_decode(struct otf_str v, struct otf_step *s);

/* Header lookups on decoded lists (last match wins, as proto3 maps do). */
const struct otf_kv *otf_find_kv(const struct otf_kv *kv, size_t n, const char *key);

#endif
