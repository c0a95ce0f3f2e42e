/*
 * stateful: TorchServe's stateful example (examples/stateful: sequence_batching and
 * sequence_continuous_batching) as a built-in continuous handler.
 *
 * Each request of a sequence carries an integer (the body as text, or JSON: a number, a numeric
 * string, [x], or an object with one such value). The start request sets the running sum to 0;
 * every request adds its integer and answers the new sum as text. `0` ends the sequence
 * (response header ts_request_sequence_end: true); `-1` cancels it: the answer is "-1" with
 * ts_request_sequence_cancel: true, and a stream of the same sequence that is still running stops
 * at its next step. Under continuousBatching (yaml) an odd number streams its answer: the sum is
 * sent as handler.stream_steps chunks (default 5) handler.stream_delay_ms apart (default 50),
 * then an empty final frame; an even number, and every number without continuousBatching, gets
 * one plain answer.
 *
 * The sum lives in the worker's state store (ts_state_*), written when the request is first
 * seen, so it is committed before its first byte is sent, and a respawned worker resumes from
 * it. Next to the sum the state keeps the id of the request that produced it: a retry of that
 * request (same x-request-id) after a crash gets the same answer instead of adding twice.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <jansson.h>

#include "handler.h"
#include "builtins.h"
#include "util.h"

#define DEFAULT_STREAM_STEPS 5
#define DEFAULT_STREAM_DELAY_MS 50
#define MAX_ID 128

struct sf_state {
    int streaming;
    long steps;
    int64_t delay_us;
    char **cancelled; /* sequences cancelled by a -1 whose end event has not come yet */
    size_t n_cancelled;
};

struct sf_req {
    char *seq;
    int64_t sum;
    long left; /* chunks still to send */
};

static void sf_req_free(void *p)
{
    struct sf_req *u = p;
    free(u->seq);
    free(u);
}

static int sf_init(struct ts_ctx *ctx, void **state)
{
    struct sf_state *s = xcalloc(1, sizeof(*s));
    const char *cb = ts_config_get(ctx, "continuousBatching");
    int b = 0;
    s->streaming = cb && ts_parse_bool(cb, &b) == 0 && b;
    s->steps = ts_config_get_long(ctx, "handler.stream_steps", DEFAULT_STREAM_STEPS);
    if (s->steps < 1)
        s->steps = 1;
    long ms = ts_config_get_long(ctx, "handler.stream_delay_ms", DEFAULT_STREAM_DELAY_MS);
    s->delay_us = (ms > 0 ? ms : 0) * 1000;
    *state = s;
    return 0;
}

static int is_cancelled(const struct sf_state *s, const char *seq)
{
    for (size_t i = 0; i < s->n_cancelled; i++)
        if (!strcmp(s->cancelled[i], seq))
            return 1;
    return 0;
}

static void mark_cancelled(struct sf_state *s, const char *seq)
{
    if (is_cancelled(s, seq))
        return;
    s->cancelled = xrealloc(s->cancelled, (s->n_cancelled + 1) * sizeof(*s->cancelled));
    s->cancelled[s->n_cancelled++] = xstrdup(seq);
}

static void forget_cancelled(struct sf_state *s, const char *seq)
{
    for (size_t i = 0; i < s->n_cancelled; i++)
        if (!strcmp(s->cancelled[i], seq)) {
            free(s->cancelled[i]);
            s->cancelled[i] = s->cancelled[--s->n_cancelled];
            return;
        }
}

static int json_int(json_t *j, long *out)
{
    if (json_is_integer(j)) {
        *out = (long)json_integer_value(j);
        return 0;
    }
    if (json_is_real(j) && json_real_value(j) == (double)(long)json_real_value(j)) {
        *out = (long)json_real_value(j);
        return 0;
    }
    if (json_is_string(j))
        return ts_parse_long(json_string_value(j), -__LONG_MAX__ - 1, __LONG_MAX__, out);
    if (json_is_array(j) && json_array_size(j) == 1)
        return json_int(json_array_get(j, 0), out);
    if (json_is_object(j) && json_object_size(j) == 1)
        return json_int(json_object_iter_value(json_object_iter(j)), out);
    return -EINVAL;
}

/* The request's integer: the body as text, else as JSON. */
static int request_value(struct ts_ctx *ctx, size_t i, long *out)
{
    size_t len = 0;
    const char *body = ts_get_body(ctx, i, &len, NULL);
    if (!body)
        return -EINVAL;
    while (len && strchr(" \t\r\n", body[len - 1]))
        len--;
    while (len && strchr(" \t\r\n", *body)) {
        body++;
        len--;
    }
    char tmp[32];
    if (len && len < sizeof(tmp)) {
        memcpy(tmp, body, len);
        tmp[len] = '\0';
        if (ts_parse_long(tmp, -__LONG_MAX__ - 1, __LONG_MAX__, out) == 0)
            return 0;
    }
    json_t *j = json_loadb(body, len, JSON_DECODE_ANY, NULL);
    int rc = j ? json_int(j, out) : -EINVAL;
    json_decref(j);
    return rc;
}

/* State bytes: "<sum> <request id>". */
/* The client's request id (x-request-id): a retry carries the same one. */
static const char *client_id(struct ts_ctx *ctx, size_t i)
{
    const char *h = ts_get_header(ctx, i, "x-request-id");
    return h && *h ? h : ts_request_id(ctx, i);
}

static int load_sum(struct ts_ctx *ctx, size_t i, int64_t *sum, char last[MAX_ID])
{
    size_t len;
    const char *v = ts_state_get(ctx, i, &len);
    last[0] = '\0';
    if (!v)
        return -ENOENT;
    char fmt[32];
    snprintf(fmt, sizeof(fmt), "%%" SCNd64 " %%%ds", MAX_ID - 1);
    return sscanf(v, fmt, sum, last) >= 1 ? 0 : -EINVAL;
}

static int save_sum(struct ts_ctx *ctx, size_t i, int64_t sum)
{
    char v[MAX_ID + 32];
    int n = snprintf(v, sizeof(v), "%" PRId64 " %.*s", sum, MAX_ID - 1, client_id(ctx, i));
    return ts_state_put(ctx, i, v, (size_t)n);
}

static void answer(struct ts_ctx *ctx, size_t i, int64_t v)
{
    char b[32];
    int n = snprintf(b, sizeof(b), "%" PRId64, v);
    ts_set_response(ctx, i, b, (size_t)n);
}

static void send_chunk(struct ts_ctx *ctx, size_t i, struct sf_state *s, struct sf_req *u)
{
    char b[32];
    int n = snprintf(b, sizeof(b), "%" PRId64, u->sum);
    ts_send_intermediate_response(ctx, i, b, (size_t)n);
    if (--u->left > 0)
        ts_continue(ctx, i, s->delay_us);
    else
        ts_set_response(ctx, i, "", 0);
}

static int opened_here(struct ts_ctx *ctx, size_t i)
{
    const char *h = ts_get_header(ctx, i, TS_SEQ_NEW_HEADER);
    int b = 0;
    return h && ts_parse_bool(h, &b) == 0 && b;
}

static void handle_new(struct sf_state *s, struct ts_ctx *ctx, size_t i)
{
    const char *seq = ts_sequence_id(ctx, i);
    const char *start_h = ts_get_header(ctx, i, "ts_request_sequence_start");
    int start = 0;
    long v;
    ts_set_content_type(ctx, i, "text/plain");
    if (!seq || !*seq) {
        ts_set_error(ctx, i, 400, "model %s needs sequenceBatching: the request has no sequence id",
                     ts_model_name(ctx));
        return;
    }
    ts_set_header(ctx, i, "ts_request_sequence_id", seq);
    if (start_h && ts_parse_bool(start_h, &start))
        start = 0;
    if (request_value(ctx, i, &v)) {
        ts_set_error(ctx, i, 400, "expected an integer as the request body");
        return;
    }
    if (is_cancelled(s, seq)) {
        ts_set_error(ctx, i, 410, "Sequence %s was cancelled", seq);
        return;
    }
    if (v == -1) {
        mark_cancelled(s, seq);
        ts_set_header(ctx, i, "ts_request_sequence_cancel", "true");
        answer(ctx, i, -1);
        return;
    }

    int64_t sum = 0;
    char last[MAX_ID];
    int rc = start ? 0 : load_sum(ctx, i, &sum, last);
    if (rc == -ENOENT && opened_here(ctx, i)) {
        /* a client-chosen id this instance had not seen, and no state for it: a new sequence,
         * from zero (the frontend's answer says ts_request_sequence_start: true) */
        start = 1;
    } else if (rc) {
        /* TorchServe closes such a sequence; so do we, with an error instead of a number */
        ts_set_header(ctx, i, "ts_request_sequence_end", "true");
        ts_set_error(ctx, i, 500, "no state for sequence %s: its start request never completed",
                     seq);
        return;
    }
    if (!start && !strcmp(last, client_id(ctx, i))) {
        answer(ctx, i, sum); /* a retry of the request that produced this sum */
        return;
    }
    sum += v;
    rc = save_sum(ctx, i, sum);
    if (rc) {
        ts_set_error(ctx, i, 507, "could not store the state of sequence %s (error %d)", seq, rc);
        return;
    }
    if (v == 0) {
        ts_set_header(ctx, i, "ts_request_sequence_end", "true");
        answer(ctx, i, sum);
    } else if (s->streaming && (v & 1)) {
        struct sf_req *u = xcalloc(1, sizeof(*u));
        u->seq = xstrdup(seq);
        u->sum = sum;
        u->left = s->steps;
        ts_set_user(ctx, i, u, sf_req_free);
        send_chunk(ctx, i, s, u);
    } else {
        answer(ctx, i, sum);
    }
}

static void sf_handle(void *state, struct ts_ctx *ctx, size_t n)
{
    struct sf_state *s = state;
    /* a -1 in this step stops the streams of its sequence that are already running (they come
     * first in the call: held requests precede new ones) */
    for (size_t i = 0; i < n; i++) {
        long v;
        const char *seq = ts_sequence_id(ctx, i);
        if (ts_is_new(ctx, i) && seq && request_value(ctx, i, &v) == 0 && v == -1) {
            for (size_t k = 0; k < n; k++) {
                struct sf_req *u = ts_is_new(ctx, k) ? NULL : ts_get_user(ctx, k);
                if (u && !strcmp(u->seq, seq))
                    u->left = 0;
            }
        }
    }
    for (size_t i = 0; i < n; i++) {
        if (ts_is_cancelled(ctx, i))
            continue;
        if (ts_is_new(ctx, i)) {
            handle_new(s, ctx, i);
            continue;
        }
        struct sf_req *u = ts_get_user(ctx, i);
        if (u->left <= 0 || is_cancelled(s, u->seq))
            ts_set_response(ctx, i, "", 0); /* cancelled: the stream ends here */
        else
            send_chunk(ctx, i, s, u);
    }
}

static void sf_seq_event(void *state, struct ts_ctx *ctx, const char *seq_id, int event)
{
    (void)ctx;
    (void)event;
    forget_cancelled(state, seq_id); /* the worker drops the stored sum itself */
}

static void sf_destroy(void *state)
{
    struct sf_state *s = state;
    for (size_t i = 0; i < s->n_cancelled; i++)
        free(s->cancelled[i]);
    free(s->cancelled);
    free(s);
}

static const struct ts_handler stateful = {
    .abi_version = TS_HANDLER_ABI_VERSION,
    .name = "stateful",
    .flags = TS_HANDLER_CONTINUOUS,
    .init = sf_init,
    .handle = sf_handle,
    .seq_event = sf_seq_event,
    .destroy = sf_destroy,
};

const struct ts_handler *ts_handler_stateful(void)
{
    return &stateful;
}
