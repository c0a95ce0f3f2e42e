/*
 * lstm_stateful: a TorchScript LSTM whose hidden state is carried across the requests of a
 * sequence through the state API.
 *
 * The module's forward(x [B, in], h [B, hid], c [B, hid]) returns (y [B, out], h2, c2)
 * (scripts/models/lstm_stateful/build.py). Each request is one time step: a JSON list of `in`
 * floats (or an object whose one value is that list). A step's requests belong to different
 * sequences (the frontend's aggregator sends at most one request per sequence per batch), so
 * their (h, c) are stacked along the batch dimension and the whole step is ONE forward. The new
 * (h, c) go back to the store as the bytes of the float32 rows (h then c), committed before the
 * answers leave. A start request begins from zeros; a request whose sequence has no state (its
 * start never completed) gets an error and ends the sequence.
 *
 * yaml: handler.input_size (default 4), handler.hidden_size (default 32).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "handler.h"
#include "builtins.h"
#include "torch/torch_shim.h"
#include "util.h"

struct lstm_state {
    struct tsh_model *m;
    long in, hid;
};

static int ls_init(struct ts_ctx *ctx, void **state)
{
    struct lstm_state *s = xcalloc(1, sizeof(*s));
    s->in = ts_config_get_long(ctx, "handler.input_size", 4);
    s->hid = ts_config_get_long(ctx, "handler.hidden_size", 32);
    if (s->in < 1 || s->hid < 1 || s->in > 1 << 20 || s->hid > 1 << 20) {
        ts_set_load_error(ctx, "model-config.yaml: handler.input_size / hidden_size out of range");
        free(s);
        return -1;
    }
    char *path = xasprintf("%s/%s", ts_model_dir(ctx), ts_serialized_file(ctx));
    char *err = NULL;
    s->m = tsh_load(path, ts_gpu_id(ctx), &err);
    free(path);
    if (!s->m) {
        ts_set_load_error(ctx, "lstm_stateful: %s", err ? err : "load failed");
        free(err);
        free(s);
        return -1;
    }
    *state = s;
    return 0;
}

static const json_t *input_list(const json_t *j)
{
    if (json_is_object(j) && json_object_size(j) == 1)
        return json_object_iter_value(json_object_iter((json_t *)j));
    return j;
}

/* The request's x into row (in floats): 0, or -1 with a 400 error set. */
static int read_x(struct ts_ctx *ctx, size_t i, const struct lstm_state *s, float *row)
{
    size_t len = 0;
    const char *body = ts_get_body(ctx, i, &len, NULL);
    json_error_t jerr;
    json_t *j = body ? json_loadb(body, len, 0, &jerr) : NULL;
    const json_t *l = j ? input_list(j) : NULL;
    int rc = 0;
    if (!json_is_array(l) || json_array_size(l) != (size_t)s->in) {
        ts_set_error(ctx, i, 400, "expected a JSON list of %ld numbers", s->in);
        rc = -1;
    } else {
        for (long k = 0; k < s->in && !rc; k++) {
            const json_t *e = json_array_get(l, (size_t)k);
            if (!json_is_number(e)) {
                ts_set_error(ctx, i, 400, "element %ld is not a number", k);
                rc = -1;
            } else {
                row[k] = (float)json_number_value(e);
            }
        }
    }
    json_decref(j);
    return rc;
}

/* The sequence's (h, c) into hrow / crow: zeros for a start. 0, or -1 with an error set. */
static int read_hc(struct ts_ctx *ctx, size_t i, const struct lstm_state *s, float *hrow,
                   float *crow)
{
    const char *seq = ts_sequence_id(ctx, i);
    const char *st = ts_get_header(ctx, i, "ts_request_sequence_start");
    int start = 0;
    size_t hb = (size_t)s->hid * sizeof(float);
    if (!seq || !*seq) {
        ts_set_error(ctx, i, 400, "model %s needs sequenceBatching: the request has no sequence id",
                     ts_model_name(ctx));
        return -1;
    }
    if (st && ts_parse_bool(st, &start))
        start = 0;
    size_t len = 0;
    const void *v = ts_state_get(ctx, i, &len);
    /* a client-chosen id new to this instance without state anywhere starts from zero too (the
     * frontend's answer says ts_request_sequence_start: true) */
    const char *opened = ts_get_header(ctx, i, TS_SEQ_NEW_HEADER);
    int b = 0;
    if (!v && opened && ts_parse_bool(opened, &b) == 0 && b)
        start = 1;
    if (start) {
        memset(hrow, 0, hb);
        memset(crow, 0, hb);
        return 0;
    }
    if (!v || len != 2 * hb) {
        ts_set_header(ctx, i, "ts_request_sequence_end", "true");
        ts_set_error(ctx, i, 500, "no state for sequence %s: its start request never completed",
                     seq);
        return -1;
    }
    memcpy(hrow, v, hb);
    memcpy(crow, (const char *)v + hb, hb);
    return 0;
}

/* %.9g round-trips a float32 exactly */
static void put_list(struct buf *b, const float *v, size_t n)
{
    buf_puts(b, "[");
    for (size_t k = 0; k < n; k++)
        buf_printf(b, "%s%.9g", k ? ", " : "", (double)v[k]);
    buf_puts(b, "]");
}

static void ls_handle(void *state, struct ts_ctx *ctx, size_t n)
{
    struct lstm_state *s = state;
    size_t in = (size_t)s->in, hid = (size_t)s->hid;
    float *x = xcalloc(n * in, sizeof(float));
    float *h = xcalloc(n * hid, sizeof(float));
    float *c = xcalloc(n * hid, sizeof(float));
    size_t *rows = xcalloc(n, sizeof(*rows));
    size_t b = 0;
    for (size_t i = 0; i < n; i++) {
        if (ts_is_cancelled(ctx, i))
            continue;
        ts_set_content_type(ctx, i, "application/json");
        if (read_x(ctx, i, s, x + b * in) || read_hc(ctx, i, s, h + b * hid, c + b * hid))
            continue;
        rows[b++] = i;
    }
    if (b == 0)
        goto out;

    struct tsh_tensor args[3] = {
        {.dtype = TSH_FLOAT32,
         .ndim = 2,
         .shape = {(int64_t)b, (int64_t)in},
         .data = x,
         .nbytes = b * in * sizeof(float)},
        {.dtype = TSH_FLOAT32,
         .ndim = 2,
         .shape = {(int64_t)b, (int64_t)hid},
         .data = h,
         .nbytes = b * hid * sizeof(float)},
        {.dtype = TSH_FLOAT32,
         .ndim = 2,
         .shape = {(int64_t)b, (int64_t)hid},
         .data = c,
         .nbytes = b * hid * sizeof(float)},
    };
    struct tsh_tensor *o = NULL;
    size_t no = 0;
    char *err = NULL;
    int bad = tsh_forward(s->m, args, 3, &o, &no, &err);
    if (!bad &&
        (no != 3 || o[0].dtype != TSH_FLOAT32 || o[0].ndim != 2 || o[0].shape[0] != (int64_t)b ||
         o[1].dtype != TSH_FLOAT32 || o[1].nbytes != b * hid * sizeof(float) ||
         o[2].dtype != TSH_FLOAT32 || o[2].nbytes != b * hid * sizeof(float))) {
        bad = 1;
        err = xstrdup("forward() must return (y [B, out], h [B, hidden], c [B, hidden]) float32");
    }
    if (bad) {
        for (size_t k = 0; k < b; k++)
            ts_set_error(ctx, rows[k], 500, "lstm_stateful: %s", err ? err : "forward failed");
        free(err);
        tsh_tensors_free(o, no);
        goto out;
    }
    size_t ny = (size_t)o[0].shape[1];
    const float *y = o[0].data, *h2 = o[1].data, *c2 = o[2].data;
    size_t hb = hid * sizeof(float);
    char *st = xmalloc(2 * hb);
    struct buf out;
    buf_init(&out);
    for (size_t k = 0; k < b; k++) {
        size_t i = rows[k];
        memcpy(st, h2 + k * hid, hb);
        memcpy(st + hb, c2 + k * hid, hb);
        int rc = ts_state_put(ctx, i, st, 2 * hb);
        if (rc) {
            ts_set_error(ctx, i, 507, "could not store the sequence state (error %d)", rc);
            continue;
        }
        buf_reset(&out);
        put_list(&out, y + k * ny, ny);
        ts_set_response(ctx, i, out.data, out.len);
    }
    buf_free(&out);
    free(st);
    tsh_tensors_free(o, no);
out:
    free(x);
    free(h);
    free(c);
    free(rows);
}

static void ls_destroy(void *state)
{
    struct lstm_state *s = state;
    tsh_model_free(s->m);
    free(s);
}

static const struct ts_handler lstm_stateful = {
    .abi_version = TS_HANDLER_ABI_VERSION,
    .name = "lstm_stateful",
    .flags = 0,
    .init = ls_init,
    .handle = ls_handle,
    .seq_event = NULL,
    .destroy = ls_destroy,
};

const struct ts_handler *ts_handler_lstm_stateful(void)
{
    return &lstm_stateful;
}
