/*
 * identity_text: MLServer's streaming example as a continuous handler. The request text (the
 * body as UTF-8, or the "text" field of a JSON object body) is split on whitespace and sent back
 * one word per intermediate response; word i > 0 carries one leading space, so the chunks joined
 * give single-spaced input back. Before each word the request waits delay_ms (yaml
 * handler.delay_ms, default 500; per request: header x-delay-ms) - by ts_continue(), never by
 * sleeping, so one worker steps up to batch_size streams together. The final response is empty.
 * Metrics (/metrics): StreamedWords (counter) and WordBytes (histogram of the words' lengths).
 */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "handler.h"
#include "builtins.h"
#include "util.h"

#define DEFAULT_DELAY_MS 500

struct it_state {
    long delay_ms;
};

struct it_req {
    char *text;
    size_t len;
    size_t pos; /* next unread byte */
    long sent;  /* words sent so far */
    int64_t delay_us;
};

static void it_req_free(void *p)
{
    struct it_req *u = p;
    free(u->text);
    free(u);
}

static int it_init(struct ts_ctx *ctx, void **state)
{
    struct it_state *s = xcalloc(1, sizeof(*s));
    s->delay_ms = ts_config_get_long(ctx, "handler.delay_ms", DEFAULT_DELAY_MS);
    if (s->delay_ms < 0)
        s->delay_ms = 0;
    *state = s;
    return 0;
}

/* The text of a request: a JSON object's "text" string, else the body itself. */
static char *request_text(struct ts_ctx *ctx, size_t i, size_t *len)
{
    size_t blen = 0;
    const char *ctype = "";
    const char *body = ts_get_body(ctx, i, &blen, &ctype);
    if (!body)
        body = "";
    if (ctype && strstr(ctype, "json")) {
        json_t *j = json_loadb(body, blen, 0, NULL);
        json_t *t = j ? json_object_get(j, "text") : NULL;
        if (json_is_string(t)) {
            *len = json_string_length(t);
            char *s = xstrndup(json_string_value(t), *len);
            json_decref(j);
            return s;
        }
        json_decref(j);
    }
    *len = blen;
    return xstrndup(body, blen);
}

static int64_t request_delay_us(struct ts_ctx *ctx, size_t i, const struct it_state *s)
{
    const char *h = ts_get_header(ctx, i, "x-delay-ms");
    long ms;
    if (!h || ts_parse_long(h, 0, 3600L * 1000, &ms))
        ms = s->delay_ms;
    return (int64_t)ms * 1000;
}

static int skip_space(struct it_req *u)
{
    while (u->pos < u->len && isspace((unsigned char)u->text[u->pos]))
        u->pos++;
    return u->pos < u->len;
}

static void it_handle(void *state, struct ts_ctx *ctx, size_t n)
{
    struct it_state *s = state;
    for (size_t i = 0; i < n; i++) {
        if (ts_is_cancelled(ctx, i))
            continue;
        struct it_req *u = ts_get_user(ctx, i);
        if (!u) {
            u = xcalloc(1, sizeof(*u));
            u->text = request_text(ctx, i, &u->len);
            u->delay_us = request_delay_us(ctx, i, s);
            ts_set_user(ctx, i, u, it_req_free);
            ts_set_content_type(ctx, i, "text/plain");
            if (!skip_space(u))
                ts_set_response(ctx, i, "", 0); /* no words: an empty, unstreamed answer */
            else
                ts_continue(ctx, i, u->delay_us);
            continue;
        }
        skip_space(u);
        size_t start = u->pos;
        while (u->pos < u->len && !isspace((unsigned char)u->text[u->pos]))
            u->pos++;
        size_t wlen = u->pos - start;
        char *chunk = xmalloc(wlen + 2);
        size_t clen = 0;
        if (u->sent > 0)
            chunk[clen++] = ' ';
        memcpy(chunk + clen, u->text + start, wlen);
        clen += wlen;
        ts_counter_add(ctx, "tokens", 1); /* before sending: the chunk reports it */
        /* handler metrics (ts_metric_add), served on /metrics with the model's labels */
        ts_metric_add(ctx, i, "StreamedWords", "Count", TS_METRIC_COUNTER, 1);
        ts_metric_add(ctx, i, "WordBytes", "Bytes", TS_METRIC_HISTOGRAM, (double)wlen);
        ts_send_intermediate_response(ctx, i, chunk, clen);
        free(chunk);
        u->sent++;
        if (skip_space(u))
            ts_continue(ctx, i, u->delay_us);
        else
            ts_set_response(ctx, i, "", 0);
    }
}

static void it_destroy(void *state)
{
    free(state);
}

static const struct ts_handler identity_text = {
    .abi_version = TS_HANDLER_ABI_VERSION,
    .name = "identity_text",
    .flags = TS_HANDLER_CONTINUOUS,
    .init = it_init,
    .handle = it_handle,
    .seq_event = NULL,
    .destroy = it_destroy,
};

const struct ts_handler *ts_handler_identity_text(void)
{
    return &identity_text;
}
