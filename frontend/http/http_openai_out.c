/*
 * http_openai_out: OpenAI's response objects, SSE chunks and errors from a job's frames (see
 * http_openai_out.h). The JSON is written by hand, keys in OpenAI's order; every string goes
 * through textstop_utf8 first, so that a model's malformed UTF-8 becomes U+FFFD instead of
 * invalid JSON.
 */
#include "http_openai_out.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/job.h"
#include "http_stream.h"
#include "oip/oip_req.h"
#include "oip_wire.h"
#include "otf.h"

struct oai_call *http_openai_out_new(int chat, int stream, int include_usage, const char *model,
                                     const char *text_output, const char *const *stop,
                                     const size_t *stop_len, size_t nstop)
{
    struct oai_call *o = xcalloc(1, sizeof(*o));
    o->chat = chat;
    o->stream = stream;
    o->include_usage = include_usage;
    char uuid[37], *q = o->id + snprintf(o->id, sizeof(o->id), "%s", chat ? "chatcmpl-" : "cmpl-");
    ts_uuid(uuid);
    for (const char *p = uuid; *p; p++)
        if (*p != '-')
            *q++ = *p;
    *q = '\0';
    o->created = (long long)(ts_wall_ms() / 1000);
    o->model = xstrdup(model);
    o->text_output = text_output && *text_output ? xstrdup(text_output) : NULL;
    textstop_init(&o->ts, stop, stop_len, nstop);
    buf_init(&o->text);
    o->prompt_tokens = o->completion_tokens = -1;
    return o;
}

void http_openai_out_free(void *arg)
{
    struct oai_call *o = arg;
    if (!o)
        return;
    free(o->model);
    free(o->text_output);
    textstop_free(&o->ts);
    buf_free(&o->text);
    free(o);
}

/* s as a JSON string, malformed UTF-8 replaced */
static void put_str(struct buf *b, const char *s, size_t n)
{
    struct buf u;
    buf_init(&u);
    textstop_utf8((const unsigned char *)s, n, 0, &u);
    oip_wire_put_jstr(b, u.data ? (const char *)u.data : "", u.len);
    buf_free(&u);
}

static const char *error_type(int status)
{
    if (status == 429)
        return "rate_limit_error";
    if (status >= 500)
        return "server_error";
    return "invalid_request_error";
}

static void put_error(struct buf *b, int status, const char *msg, const char *param,
                      const char *code)
{
    if (!code && status == 401)
        code = "invalid_api_key";
    if (!code && status == 429)
        code = "rate_limit_exceeded";
    buf_puts(b, "{\"error\":{\"message\":");
    put_str(b, msg, strlen(msg));
    buf_puts(b, ",\"type\":\"");
    buf_puts(b, error_type(status));
    buf_puts(b, "\",\"param\":");
    if (param)
        put_str(b, param, strlen(param));
    else
        buf_puts(b, "null");
    buf_puts(b, ",\"code\":");
    if (code)
        put_str(b, code, strlen(code));
    else
        buf_puts(b, "null");
    buf_puts(b, "}}");
}

char *http_openai_error_json(int status, const char *msg, const char *param, const char *code)
{
    struct buf b;
    buf_init(&b);
    put_error(&b, status, msg, param, code);
    buf_put_u8(&b, '\n');
    return (char *)b.data;
}

/* An error once the SSE stream has started: an event with the error object, as vLLM sends it
 * (the openai clients raise it), and the end of the stream. */
static void put_error_events(struct buf *b, int status, const char *msg)
{
    buf_puts(b, "data: ");
    put_error(b, status, msg, NULL, NULL);
    buf_puts(b, "\n\ndata: [DONE]\n\n");
}

char *http_openai_out_error_body(struct http_call *c, int status, const char *type, const char *msg)
{
    (void)type;
    if (c->started) {
        struct buf b;
        buf_init(&b);
        put_error_events(&b, status, msg);
        return (char *)b.data;
    }
    return http_openai_error_json(status, msg, NULL, NULL);
}

/* ---------------------------------------------------------------- frames */

static const struct otf_kv *frame_header(const struct otf_prediction *p, const char *key)
{
    size_t kl = strlen(key);
    for (size_t i = 0; i < p->n_headers; i++)
        if (p->headers[i].key.len == (int32_t)kl && !strncasecmp(p->headers[i].key.p, key, kl))
            return &p->headers[i];
    return NULL;
}

static long header_long(const struct otf_prediction *p, const char *key, long old)
{
    const struct otf_kv *kv = frame_header(p, key);
    if (!kv || kv->val.len <= 0 || kv->val.len > 18)
        return old;
    char num[20];
    memcpy(num, kv->val.p, (size_t)kv->val.len);
    num[kv->val.len] = '\0';
    long v;
    return ts_parse_long(num, 0, 1L << 40, &v) ? old : v;
}

/* What the model says of its usage, on any frame (the latest wins). */
static void read_usage(struct oai_call *o, const struct otf_prediction *p)
{
    o->prompt_tokens = header_long(p, "x-ts-prompt-tokens", o->prompt_tokens);
    o->completion_tokens = header_long(p, "x-ts-completion-tokens", o->completion_tokens);
    const struct otf_kv *f = frame_header(p, "x-ts-finish-reason");
    if (f && f->val.len > 0 && (size_t)f->val.len < sizeof(o->finish)) {
        memcpy(o->finish, f->val.p, (size_t)f->val.len);
        o->finish[f->val.len] = '\0';
    }
}

static const char *finish_reason(const struct oai_call *o)
{
    if (o->frontend_stop)
        return "stop";
    if (!strcmp(o->finish, "length") || !strcmp(o->finish, "content_filter"))
        return o->finish;
    return "stop";
}

static void put_usage(struct buf *b, const struct oai_call *o)
{
    if (o->prompt_tokens < 0 || o->completion_tokens < 0) {
        buf_puts(b, "null");
        return;
    }
    buf_printf(b, "{\"prompt_tokens\":%ld,\"completion_tokens\":%ld,\"total_tokens\":%ld}",
               o->prompt_tokens, o->completion_tokens, o->prompt_tokens + o->completion_tokens);
}

static void put_head(struct buf *b, const struct oai_call *o, const char *object)
{
    buf_puts(b, "{\"id\":\"");
    buf_puts(b, o->id);
    buf_printf(b, "\",\"object\":\"%s\",\"created\":%lld,\"model\":", object, o->created);
    put_str(b, o->model, strlen(o->model));
}

/* One SSE chunk: text (may be empty) and, on the last one, the finish reason. */
static void put_chunk(struct buf *b, struct oai_call *o, const char *text, size_t n,
                      const char *finish)
{
    buf_puts(b, "data: ");
    put_head(b, o, o->chat ? "chat.completion.chunk" : "text_completion");
    buf_puts(b, ",\"choices\":[{\"index\":0,");
    if (o->chat) {
        buf_puts(b, "\"delta\":{");
        int comma = 0;
        if (!o->role_sent) {
            buf_puts(b, "\"role\":\"assistant\"");
            o->role_sent = comma = 1;
        }
        if (n || !finish) {
            buf_puts(b, comma ? ",\"content\":" : "\"content\":");
            put_str(b, text, n);
        }
        buf_puts(b, "},");
    } else {
        buf_puts(b, "\"text\":");
        put_str(b, text, n);
        buf_put_u8(b, ',');
    }
    buf_puts(b, "\"logprobs\":null,\"finish_reason\":");
    if (finish)
        buf_printf(b, "\"%s\"", finish);
    else
        buf_puts(b, "null");
    buf_puts(b, "}]");
    if (o->include_usage)
        buf_puts(b, ",\"usage\":null");
    buf_puts(b, "}\n\n");
}

static void put_end_events(struct buf *b, struct oai_call *o)
{
    put_chunk(b, o, "", 0, finish_reason(o));
    if (o->include_usage) {
        buf_puts(b, "data: ");
        put_head(b, o, o->chat ? "chat.completion.chunk" : "text_completion");
        buf_puts(b, ",\"choices\":[],\"usage\":");
        put_usage(b, o);
        buf_puts(b, "}\n\n");
    }
    buf_puts(b, "data: [DONE]\n\n");
}

static void put_whole(struct buf *b, const struct oai_call *o)
{
    const char *text = o->text.data ? (const char *)o->text.data : "";
    put_head(b, o, o->chat ? "chat.completion" : "text_completion");
    buf_puts(b, ",\"choices\":[{\"index\":0,");
    if (o->chat) {
        buf_puts(b, "\"message\":{\"role\":\"assistant\",\"content\":");
        put_str(b, text, o->text.len);
        buf_puts(b, "},");
    } else {
        buf_puts(b, "\"text\":");
        put_str(b, text, o->text.len);
        buf_put_u8(b, ',');
    }
    buf_printf(b, "\"logprobs\":null,\"finish_reason\":\"%s\"}],\"usage\":", finish_reason(o));
    put_usage(b, o);
    buf_puts(b, "}\n");
}

/* The text of a frame: a text handler's chunk, or the first element of the model's text output.
 * 0, or -1 with the reason in err. */
static int frame_text(const struct oai_call *o, const struct oip_result *r, const char **s,
                      size_t *n, char *err, size_t errlen)
{
    if (r->is_text) {
        *s = r->text;
        *n = r->text_len;
        return 0;
    }
    for (size_t i = 0; i < r->n_outputs; i++) {
        const struct oip_tensor *t = &r->outputs[i];
        if (o->text_output ? strcmp(t->name, o->text_output) != 0 : t->dtype != OIP_BYTES)
            continue;
        if (t->dtype != OIP_BYTES) {
            snprintf(err, errlen, "the model's output %s is %s, not BYTES text", t->name,
                     oip_dtype_name(t->dtype));
            return -1;
        }
        const uint8_t *p = t->data, *e;
        uint32_t len;
        if (oip_bytes_next(&p, t->data + t->nbytes, &e, &len) != 1) {
            *s = "";
            *n = 0;
            return 0;
        }
        *s = (const char *)e;
        *n = len;
        return 0;
    }
    if (r->n_outputs == 0) { /* a frame with no output at all adds no text */
        *s = "";
        *n = 0;
        return 0;
    }
    snprintf(err, errlen, "the model answered no %s%s%s output (openai.textOutput)",
             o->text_output ? "output named " : "BYTES", o->text_output ? o->text_output : "", "");
    return -1;
}

char *http_openai_out_transform(struct http_call *c, const struct otf_prediction *p, int final,
                                size_t *len)
{
    struct oai_call *o = c->arg;
    struct buf out;
    buf_init(&out);
    read_usage(o, p);
    struct oip_result r;
    oip_req_result(p, &r);
    const char *text = NULL;
    size_t tn = 0;
    char err[256];
    int status = r.status;
    const char *msg = r.error ? r.error : "";
    if (status < 400 && frame_text(o, &r, &text, &tn, err, sizeof(err))) {
        status = c->status = 500;
        msg = err;
    }
    if (status >= 400) {
        /* an error frame is final; a frame we cannot read ends the reply and cancels the job */
        if (c->started)
            put_error_events(&out, status, msg);
        else
            put_error(&out, status, msg, NULL, NULL);
        if (!final)
            c->end_now = 1;
        oip_req_result_free(&r);
        *len = out.len;
        return out.data ? (char *)out.data : xstrdup("");
    }
    struct buf piece;
    buf_init(&piece);
    int stopped = textstop_push(&o->ts, text, tn, &piece);
    oip_req_result_free(&r);
    if (stopped && !final)
        c->end_now = 1;
    if (stopped)
        o->frontend_stop = 1;
    else if (final)
        textstop_finish(&o->ts, &piece);
    int last = final || stopped;
    if (o->stream) {
        if (piece.len)
            put_chunk(&out, o, (const char *)piece.data, piece.len, NULL);
        if (last)
            put_end_events(&out, o);
    } else {
        buf_put(&o->text, piece.data, piece.len);
        if (last)
            put_whole(&out, o);
    }
    buf_free(&piece);
    *len = out.len;
    return out.data ? (char *)out.data : xstrdup("");
}
