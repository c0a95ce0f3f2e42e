/*
 * ctx: the handler ABI (handler.h) over the worker's request lists and output buffer. The state
 * API and the sequence state around a step are in ctx_state.c.
 *
 * Requests are deep copies with NUL-terminated strings, so handlers can treat bodies as C
 * strings and the receive buffer can be compacted under them. Responses are encoded into
 * c->out as soon as they are known; a frame is closed and written by the loop's flush (ctx_io). A
 * frame never carries two predictions for the same request: a second one (a partial followed by the
 * final, or two partials in one call) starts a new frame, so a frontend can match predictions to
 * jobs by id within a frame and still see them in order.
 */
#include "ctx.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <jansson.h>

#include "jnum.h"
#include "log.h"

#define CTX_METRICS_MAX 8192       /* bytes of metric records one request holds until it answers */
#define CTX_PAUSE_POLL_BYTES 65536 /* see ts_send_intermediate_response */

void ctx_init(struct ts_ctx *c, int fd, size_t max_field, const struct ctx_io *io)
{
    memset(c, 0, sizeof(*c));
    c->io = io;
    c->fd = fd;
    c->max_field = max_field;
    c->batch_size = 1;
    c->wake_fd = -1;
    c->step_max = 1;
    c->park_max = CTX_PARK_MAX_DEFAULT;
    c->gpu_id = -1;
    buf_init(&c->out);
    buf_init(&c->unsent);
    buf_init(&c->rx);
}

static void free_list(struct wreq *r)
{
    while (r) {
        struct wreq *next = r->next;
        wreq_free(r);
        r = next;
    }
}

void ctx_destroy(struct ts_ctx *c)
{
    free_list(c->pending_head);
    free_list(c->held_head);
    ctx_park_free_all(c);
    if (c->h && c->h->destroy && c->loaded)
        c->h->destroy(c->hstate);
    free(c->model_name);
    free(c->model_dir);
    free(c->serialized_file);
    free(c->handler_spec);
    free(c->state_dir);
    free(c->state_redis);
    state_close(c->state);
    yflat_free(&c->cfg);
    free(c->cur);
    free(c->out_ids);
    for (size_t i = 0; i < c->n_counters; i++)
        free(c->counters[i].key);
    free(c->counters);
    for (size_t i = 0; i < c->n_seq; i++)
        free(c->seq[i].seq_id);
    free(c->seq);
    buf_free(&c->out);
    buf_free(&c->unsent);
    buf_free(&c->rx);
    memset(c, 0, sizeof(*c));
}

/* ---------------------------------------------------------------- requests */

/* Copies s into *p as a NUL-terminated string and moves *p past it. */
static char *put_str(char **p, struct otf_str s, size_t *len)
{
    size_t n = s.len > 0 ? (size_t)s.len : 0;
    char *d = *p;
    if (n)
        memcpy(d, s.p, n);
    d[n] = '\0';
    *p = d + n + 1;
    if (len)
        *len = n;
    return d;
}

static size_t str_room(struct otf_str s)
{
    return (s.len > 0 ? (size_t)s.len : 0) + 1;
}

/* One allocation for the request, its arrays and its strings: a request with a dozen headers
 * would otherwise cost some thirty malloc/free pairs. */
struct wreq *wreq_from_otf(const struct otf_request *q)
{
    size_t room = str_room(q->id);
    for (size_t i = 0; i < q->n_headers; i++)
        room += str_room(q->headers[i].key) + str_room(q->headers[i].val);
    for (size_t i = 0; i < q->n_params; i++)
        room += str_room(q->params[i].name) + str_room(q->params[i].ctype) +
                str_room(q->params[i].value);
    size_t head = sizeof(struct wreq) + q->n_headers * sizeof(struct wkv) +
                  q->n_params * sizeof(struct wparam);
    struct wreq *r = xmalloc(head + room);
    memset(r, 0, sizeof(*r));
    r->headers = (struct wkv *)(r + 1);
    r->params = (struct wparam *)(r->headers + q->n_headers);
    char *p = (char *)r + head;
    r->id = put_str(&p, q->id, NULL);
    r->n_headers = q->n_headers;
    for (size_t i = 0; i < q->n_headers; i++) {
        r->headers[i].key = put_str(&p, q->headers[i].key, NULL);
        r->headers[i].val = put_str(&p, q->headers[i].val, NULL);
    }
    r->n_params = q->n_params;
    for (size_t i = 0; i < q->n_params; i++) {
        r->params[i].name = put_str(&p, q->params[i].name, NULL);
        r->params[i].ctype = put_str(&p, q->params[i].ctype, NULL);
        r->params[i].value = put_str(&p, q->params[i].value, &r->params[i].len);
    }
    r->is_new = 1;
    buf_init(&r->metrics);
    r->read_us = ts_now_us();
    ctx_input_init(r);
    return r;
}

static void free_kvs(struct wkv *kv, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(kv[i].key);
        free(kv[i].val);
    }
    free(kv);
}

void wreq_free(struct wreq *r)
{
    if (!r)
        return;
    if (r->user && r->user_free)
        r->user_free(r->user);
    free(r->phrase);
    free(r->ctype);
    free(r->body);
    free_kvs(r->rheaders, r->n_rheaders);
    free(r->state_copy);
    buf_free(&r->metrics);
    ctx_input_free(r);
    free(r); /* with its arrays and strings */
}

struct wreq *ctx_req_at(struct ts_ctx *c, size_t idx)
{
    if (idx < c->ncur)
        return c->cur[idx];
    LOG_ERROR("handler used request index %zu, the call has %zu", idx, c->ncur);
    return NULL;
}

/* ---------------------------------------------------------------- output frames */

static const char *error_type(int status)
{
    switch (status) {
    case 400:
        return "BadRequestException";
    case 404:
        return "ResourceNotFoundException";
    case 408:
        return "RequestTimeoutException";
    case 413:
        return "RequestEntityTooLargeException";
    case 503:
        return "ServiceUnavailableException";
    case 507:
        return "OutOfMemoryException";
    default:
        return "InternalServerException";
    }
}

char *ctx_error_json(int status, const char *msg)
{
    json_t *o = json_object();
    json_object_set_new(o, "code", json_integer(status));
    json_object_set_new(o, "type", json_string(error_type(status)));
    /* json_string refuses invalid UTF-8; a message quoting client bytes may contain some */
    json_t *m = json_string(msg);
    json_object_set_new(o, "message", m ? m : json_string("(message is not valid UTF-8)"));
    char *s = json_dumps(o, JSON_PRESERVE_ORDER);
    json_decref(o);
    if (!s)
        abort();
    return s;
}

void ctx_close_frame(struct ts_ctx *c)
{
    if (!c->out_open)
        return;
    otf_encode_list_end(&c->out);
    c->out_open = 0;
    c->n_out_ids = 0;
}

void ctx_out_sent(struct ts_ctx *c)
{
    buf_reset(&c->out);
    buf_reset(&c->unsent);
}

static void open_frame_for(struct ts_ctx *c, const struct wreq *r)
{
    for (size_t i = 0; c->out_open && i < c->n_out_ids; i++)
        if (c->out_ids[i] == r) {
            ctx_close_frame(c);
            break;
        }
    if (!c->out_open) {
        otf_encode_response_begin(&c->out, 200, otf_s(CTX_PREDICTION_MSG));
        c->out_open = 1;
    }
    if (c->n_out_ids == c->out_ids_cap) {
        c->out_ids_cap = c->out_ids_cap ? c->out_ids_cap * 2 : 16;
        c->out_ids = xrealloc(c->out_ids, c->out_ids_cap * sizeof(*c->out_ids));
    }
    c->out_ids[c->n_out_ids++] = r;
}

/* Headers of one prediction kept on the stack (the usual case); more are malloc'd. */
#define PRED_KV_STACK 16

/* Encodes r's prediction into the open frame of c->out, or, parked (r is paused), as a frame of
 * its own into what is parked for r. */
static void encode_prediction(struct ts_ctx *c, struct wreq *r, const void *body, size_t len,
                              const char *stream_next, int park)
{
    size_t nh = r->n_rheaders + c->n_counters + 4;
    struct otf_kv kv_stack[PRED_KV_STACK];
    char num_stack[PRED_KV_STACK][JNUM_MAX];
    struct otf_kv *kv = kv_stack;
    char(*num)[JNUM_MAX] = num_stack;
    if (nh > PRED_KV_STACK) {
        kv = xmalloc(nh * sizeof(*kv));
        num = xmalloc((c->n_counters + 1) * sizeof(*num));
    }
    size_t k = 0;
    for (size_t i = 0; i < r->n_rheaders; i++, k++) {
        kv[k].key = otf_s(r->rheaders[i].key);
        kv[k].val = otf_s(r->rheaders[i].val);
    }
    if (stream_next) {
        kv[k].key = otf_s(OTF_STREAM_NEXT);
        kv[k++].val = otf_s(stream_next);
    }
    for (size_t i = 0; i < c->n_counters; i++, k++) {
        kv[k].key = otf_s(c->counters[i].key);
        kv[k].val = otf_sn(num[i], jnum_i64(num[i], c->counters[i].total));
    }
    kv[k].key = otf_s(CTX_COUNTER_PREFIX "batch");
    kv[k++].val = otf_sn(num[c->n_counters], jnum_u64(num[c->n_counters], c->ncur));
    if (r->metrics.len) {
        kv[k].key = otf_s(OTF_METRICS_KEY);
        kv[k++].val = otf_sn((const char *)r->metrics.data, r->metrics.len);
    }
    uint8_t step[OTF_STEP_LEN];
    if (r->has_step) {
        otf_step_encode(step, &r->step);
        kv[k].key = otf_s(OTF_STEP_KEY);
        kv[k++].val = otf_sn((const char *)step, sizeof(step));
    }

    if (!park)
        open_frame_for(c, r);
    struct otf_prediction p = {
        .id = otf_s(r->id),
        .ctype = otf_s(r->ctype ? r->ctype : ""),
        .status = r->status ? r->status : 200,
        .phrase = otf_s(r->phrase ? r->phrase : ""),
        .headers = kv,
        .n_headers = k,
        .body = otf_sn(body ? body : "", len),
    };
    if (park) {
        struct buf *b = ctx_park_buf(c, r->id, stream_next != NULL);
        otf_encode_response_begin(b, 200, otf_s(CTX_PREDICTION_MSG));
        otf_encode_prediction(b, &p);
        otf_encode_list_end(b);
    } else {
        otf_encode_prediction(&c->out, &p);
        buf_put_u8(&c->unsent, stream_next != NULL);
        buf_put(&c->unsent, r->id, strlen(r->id) + 1);
    }
    buf_reset(&r->metrics);
    r->has_step = 0;
    if (kv != kv_stack) {
        free(kv);
        free(num);
    }
}

/* r's client reads too slowly: more than park_max bytes wait for it in the worker. r alone is
 * cancelled, with an answer that says why (its client may still read it); the others go on. */
static void too_slow(struct ts_ctx *c, struct wreq *r)
{
    size_t held = ctx_park_bytes(c, r->id);
    ctx_park_drop(c, r->id);
    r->cancelled = 1;
    LOG_REQ(LOG_LEVEL_WARN, r->id,
            "client reads its stream too slowly: %zu bytes of it wait in the worker "
            "(stream_buffer_size %zu); cancelled",
            held, c->park_max);
    char msg[256];
    snprintf(msg, sizeof(msg),
             "The client read its stream too slowly: %zu bytes of it waited in the worker, over "
             "stream_buffer_size (%zu bytes); the request was cancelled",
             held, c->park_max);
    char *err = ctx_error_json(429, msg);
    r->status = 429;
    free(r->ctype);
    r->ctype = xstrdup("application/json");
    encode_prediction(c, r, err, strlen(err), r->streamed ? "false" : NULL, 0);
    free(err);
}

void ctx_queue_prediction(struct ts_ctx *c, struct wreq *r, const void *body, size_t len,
                          const char *stream_next)
{
    if (!r->paused && !ctx_park_has(c, r->id)) {
        encode_prediction(c, r, body, len, stream_next, 0);
        return;
    }
    encode_prediction(c, r, body, len, stream_next, 1);
    if (ctx_park_bytes(c, r->id) > c->park_max)
        too_slow(c, r);
}

void ctx_queue_final(struct ts_ctx *c, struct wreq *r)
{
    const char *next = r->streamed ? "false" : NULL;
    if (!r->has_response && !r->streamed) {
        LOG_REQ(LOG_LEVEL_ERROR, r->id, "handler %s produced no response", c->h->name);
        char *err = ctx_error_json(500, "handler produced no response");
        r->status = 500;
        free(r->ctype);
        r->ctype = xstrdup("application/json");
        ctx_queue_prediction(c, r, err, strlen(err), NULL);
        free(err);
        return;
    }
    ctx_queue_prediction(c, r, r->body, r->body_len, next);
}

/* ---------------------------------------------------------------- handler ABI: model */

const char *ts_model_name(struct ts_ctx *ctx)
{
    return ctx->model_name;
}

const char *ts_model_dir(struct ts_ctx *ctx)
{
    return ctx->model_dir;
}

int ts_batch_size(struct ts_ctx *ctx)
{
    return ctx->batch_size;
}

int ts_gpu_id(struct ts_ctx *ctx)
{
    return ctx->gpu_id;
}

const char *ts_handler_spec(struct ts_ctx *ctx)
{
    return ctx->handler_spec ? ctx->handler_spec : "";
}

const char *ts_serialized_file(struct ts_ctx *ctx)
{
    return ctx->serialized_file ? ctx->serialized_file : "";
}

const char *ts_config_get(struct ts_ctx *ctx, const char *path)
{
    const struct yflat_entry *e = yflat_get(&ctx->cfg, path);
    return e ? e->value : NULL;
}

long ts_config_get_long(struct ts_ctx *ctx, const char *path, long dflt)
{
    const char *v = ts_config_get(ctx, path);
    long out;
    if (!v)
        return dflt;
    if (ts_parse_long(v, -__LONG_MAX__ - 1, __LONG_MAX__, &out)) {
        LOG_WARN("model-config.yaml: %s: \"%s\" is not an integer, using %ld", path, v, dflt);
        return dflt;
    }
    return out;
}

void ts_set_load_error(struct ts_ctx *ctx, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ctx->load_err, sizeof(ctx->load_err), fmt, ap);
    va_end(ap);
}

/* ---------------------------------------------------------------- handler ABI: requests */

const char *ts_request_id(struct ts_ctx *ctx, size_t idx)
{
    struct wreq *r = ctx_req_at(ctx, idx);
    return r ? r->id : NULL;
}

const char *ts_get_header(struct ts_ctx *ctx, size_t idx, const char *name)
{
    struct wreq *r = ctx_req_at(ctx, idx);
    const char *found = NULL;
    for (size_t i = 0; r && i < r->n_headers; i++)
        if (!strcasecmp(r->headers[i].key, name))
            found = r->headers[i].val;
    return found;
}

static const void *param_out(const struct wparam *p, size_t *len, const char **ctype)
{
    if (len)
        *len = p->len;
    if (ctype)
        *ctype = p->ctype;
    return p->value;
}

const void *ts_get_param(struct ts_ctx *ctx, size_t idx, const char *name, size_t *len,
                         const char **ctype)
{
    struct wreq *r = ctx_req_at(ctx, idx);
    for (size_t i = 0; r && i < r->n_params; i++)
        if (!strcmp(r->params[i].name, name))
            return param_out(&r->params[i], len, ctype);
    return NULL;
}

const void *ts_get_body(struct ts_ctx *ctx, size_t idx, size_t *len, const char **ctype)
{
    const void *p = ts_get_param(ctx, idx, "body", len, ctype);
    if (!p)
        p = ts_get_param(ctx, idx, "data", len, ctype);
    struct wreq *r = ctx_req_at(ctx, idx);
    if (!p && r && r->n_params)
        p = param_out(&r->params[0], len, ctype);
    return p;
}

size_t ts_header_count(struct ts_ctx *ctx, size_t idx)
{
    struct wreq *r = ctx_req_at(ctx, idx);
    return r ? r->n_headers : 0;
}

const char *ts_header_at(struct ts_ctx *ctx, size_t idx, size_t i, const char **name)
{
    struct wreq *r = ctx_req_at(ctx, idx);
    if (!r || i >= r->n_headers)
        return NULL;
    if (name)
        *name = r->headers[i].key;
    return r->headers[i].val;
}

size_t ts_param_count(struct ts_ctx *ctx, size_t idx)
{
    struct wreq *r = ctx_req_at(ctx, idx);
    return r ? r->n_params : 0;
}

const void *ts_param_at(struct ts_ctx *ctx, size_t idx, size_t i, const char **name, size_t *len,
                        const char **ctype)
{
    struct wreq *r = ctx_req_at(ctx, idx);
    if (!r || i >= r->n_params)
        return NULL;
    if (name)
        *name = r->params[i].name;
    return param_out(&r->params[i], len, ctype);
}

int ts_is_new(struct ts_ctx *ctx, size_t idx)
{
    struct wreq *r = ctx_req_at(ctx, idx);
    return r ? r->is_new : 0;
}

void *ts_get_user(struct ts_ctx *ctx, size_t idx)
{
    struct wreq *r = ctx_req_at(ctx, idx);
    return r ? r->user : NULL;
}

void ts_set_user(struct ts_ctx *ctx, size_t idx, void *user, void (*free_fn)(void *))
{
    struct wreq *r = ctx_req_at(ctx, idx);
    if (!r)
        return;
    if (r->user && r->user != user && r->user_free)
        r->user_free(r->user);
    r->user = user;
    r->user_free = free_fn;
}

const char *ts_sequence_id(struct ts_ctx *ctx, size_t idx)
{
    return ts_get_header(ctx, idx, "ts_request_sequence_id");
}

int ts_is_cancelled(struct ts_ctx *ctx, size_t idx)
{
    struct wreq *r = ctx_req_at(ctx, idx);
    if (!r)
        return 1;
    /* a read() per call would cost a syscall per request per step; a cancel seen within a
     * millisecond is soon enough */
    if (!r->cancelled && ts_now_us() - ctx->last_read_us >= 1000)
        ctx->io->poll_input(ctx);
    return r->cancelled;
}

/* ---------------------------------------------------------------- handler ABI: responses */

void ts_set_response(struct ts_ctx *ctx, size_t idx, const void *data, size_t len)
{
    struct wreq *r = ctx_req_at(ctx, idx);
    if (!r)
        return;
    free(r->body);
    r->body = xmalloc(len + 1);
    if (len)
        memcpy(r->body, data, len);
    r->body[len] = '\0';
    r->body_len = len;
    r->has_response = 1;
}

void ts_set_status(struct ts_ctx *ctx, size_t idx, int status, const char *phrase)
{
    struct wreq *r = ctx_req_at(ctx, idx);
    if (!r)
        return;
    r->status = status;
    free(r->phrase);
    r->phrase = xstrdup(phrase ? phrase : "");
    r->has_response = 1;
}

void ts_set_content_type(struct ts_ctx *ctx, size_t idx, const char *ctype)
{
    struct wreq *r = ctx_req_at(ctx, idx);
    if (!r)
        return;
    free(r->ctype);
    r->ctype = xstrdup(ctype ? ctype : "");
}

void ts_set_header(struct ts_ctx *ctx, size_t idx, const char *key, const char *val)
{
    struct wreq *r = ctx_req_at(ctx, idx);
    if (!r || !key)
        return;
    if (!strcasecmp(key, OTF_METRICS_KEY) || !strcasecmp(key, OTF_STEP_KEY)) {
        LOG_REQ(LOG_LEVEL_ERROR, r->id, "handler %s: header %s is reserved (use ts_metric_add)",
                ctx->h->name, key);
        return;
    }
    for (size_t i = 0; i < r->n_rheaders; i++)
        if (!strcasecmp(r->rheaders[i].key, key)) {
            free(r->rheaders[i].val);
            r->rheaders[i].val = xstrdup(val ? val : "");
            return;
        }
    r->rheaders = xrealloc(r->rheaders, (r->n_rheaders + 1) * sizeof(*r->rheaders));
    r->rheaders[r->n_rheaders].key = xstrdup(key);
    r->rheaders[r->n_rheaders].val = xstrdup(val ? val : "");
    r->n_rheaders++;
}

void ts_set_error(struct ts_ctx *ctx, size_t idx, int status, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    struct wreq *r = ctx_req_at(ctx, idx);
    if (!r)
        return;
    /* an error is never a success: a status that is not one (0 would read as "none set", 200) is
     * a handler bug, answered as the frontend answers any status outside 200-599 */
    if (status < 200 || status > 599) {
        LOG_REQ(LOG_LEVEL_WARN, r->id, "handler %s: error status %d is not an HTTP status; 500",
                ctx->h->name, status);
        status = 500;
    }
    char *body = ctx_error_json(status, msg);
    ts_set_response(ctx, idx, body, strlen(body));
    free(body);
    ts_set_status(ctx, idx, status, "");
    ts_set_content_type(ctx, idx, "application/json");
}

/* Whether the current handle call serves r alone and nothing else waits for a step: then a send
 * for r may wait for r's client without keeping anyone else waiting. */
static int serves_only(struct ts_ctx *c, const struct wreq *r)
{
    if (c->ncur != 1 || c->cur[0] != r || c->pending_head)
        return 0;
    for (const struct wreq *h = c->held_head; h; h = h->next)
        if (!h->paused)
            return 0;
    return 1;
}

int ts_send_intermediate_response(struct ts_ctx *ctx, size_t idx, const void *data, size_t len)
{
    struct wreq *r = ctx_req_at(ctx, idx);
    if (!r)
        return -EINVAL;
    /* A pause ('P') is looked for every millisecond or CTX_PAUSE_POLL_BYTES sent, whichever
     * comes first: a handler streaming large chunks in one call otherwise runs far past the
     * frontend's stream_buffer_size before it reads the pause. */
    ctx->sent_since_read += len;
    if (!r->cancelled &&
        (ctx->sent_since_read >= CTX_PAUSE_POLL_BYTES || ts_now_us() - ctx->last_read_us >= 1000))
        ctx->io->poll_input(ctx);
    /* paused: a call that serves r alone waits for its client (the frontend resumes or cancels
     * it); in a batch, or with requests waiting, r's output is parked (ctx_park.c) */
    while (r->paused && !r->cancelled && !ctx->eof && serves_only(ctx, r))
        ctx->io->wait_input(ctx);
    if (r->cancelled)
        return -ECANCELED;
    r->streamed = 1;
    ctx_queue_prediction(ctx, r, data, len, "true");
    return r->cancelled ? -ECANCELED : 0; /* cancelled: too slow a reader */
}

int ts_flush(struct ts_ctx *ctx)
{
    return ctx->io->flush(ctx);
}

void ts_continue(struct ts_ctx *ctx, size_t idx, int64_t delay_us)
{
    struct wreq *r = ctx_req_at(ctx, idx);
    if (!r)
        return;
    if (!(ctx->h->flags & TS_HANDLER_CONTINUOUS)) {
        LOG_REQ(LOG_LEVEL_ERROR, r->id,
                "handler %s called ts_continue without TS_HANDLER_CONTINUOUS; ignored",
                ctx->h->name);
        return;
    }
    r->continued = 1;
    r->delay_us = delay_us > 0 ? delay_us : 0;
}

/* ---------------------------------------------------------------- counters, metrics, log */

void ts_counter_add(struct ts_ctx *ctx, const char *name, int64_t delta)
{
    for (size_t i = 0; i < ctx->n_counters; i++)
        if (!strcmp(ctx->counters[i].name, name)) {
            ctx->counters[i].total += delta;
            return;
        }
    ctx->counters = xrealloc(ctx->counters, (ctx->n_counters + 1) * sizeof(*ctx->counters));
    struct counter *ct = &ctx->counters[ctx->n_counters];
    ct->key = xasprintf(CTX_COUNTER_PREFIX "%s", name);
    ct->name = ct->key + strlen(CTX_COUNTER_PREFIX);
    ct->total = delta;
    ctx->n_counters++;
}

void ctx_metric(struct wreq *r, char kind, const char *name, const char *unit, double value)
{
    /* a request that continues for many steps without answering holds its metrics meanwhile */
    if (r->metrics.len > CTX_METRICS_MAX) {
        LOG_REQ(LOG_LEVEL_DEBUG, r->id, "metric %s dropped: %zu bytes of metrics wait already",
                name ? name : "", r->metrics.len);
        return;
    }
    if (otf_metric_encode(&r->metrics, kind, name, unit, value))
        LOG_REQ(LOG_LEVEL_ERROR, r->id, "metric %s: no name, or a value that is not finite",
                name ? name : "(null)");
}

void ts_metric_add(struct ts_ctx *ctx, size_t idx, const char *name, const char *unit, int kind,
                   double value)
{
    static const char kinds[] = {'c', 'g', 'h'};
    struct wreq *r = ctx_req_at(ctx, idx);
    if (!r)
        return;
    if (kind < TS_METRIC_COUNTER || kind > TS_METRIC_HISTOGRAM) {
        LOG_REQ(LOG_LEVEL_ERROR, r->id, "metric %s: unknown kind %d", name ? name : "", kind);
        return;
    }
    if (kind == TS_METRIC_COUNTER && value < 0) {
        LOG_REQ(LOG_LEVEL_ERROR, r->id, "metric %s: a counter cannot go down (%g)",
                name ? name : "", value);
        return;
    }
    ctx_metric(r, kinds[kind], name, unit, value);
}

void ts_log(struct ts_ctx *ctx, int level, const char *fmt, ...)
{
    (void)ctx;
    if (level < log_min_level)
        return;
    char msg[1536];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    log_write(level < LOG_LEVEL_DEBUG ? LOG_LEVEL_DEBUG
                                      : (level > LOG_LEVEL_ERROR ? LOG_LEVEL_ERROR : level),
              NULL, "%s", msg);
}
