/*
 * char_lm: greedy decoding of a character-level language model (scripts/models/char_lm), one
 * character per partial result, with continuous batching.
 *
 * The TorchScript module's forward is one decoding step, batch first:
 *     forward(x: int64 [B, T], h: float32 [B, L, H]) -> (logits [B, V], h2 [B, L, H])
 * and vocab.json (next to the model) gives the characters ({"vocab": "...", "layers": L,
 * "hidden": H}; token id = index of the character, UTF-8 aware).
 *
 * Request: a JSON object {"prompt": "...", "max_new_tokens": N} or the prompt as plain text
 * (max_new_tokens then from the query / form parameter of that name, else handler.max_new_tokens).
 * Characters missing from the vocabulary are read as a space; an empty prompt starts from "\n".
 * For tests of error delivery, a JSON "fail_after": K makes the request fail with a 500 after K
 * characters, as a handler error in the middle of a stream.
 *
 * Every handle() call is one step. New requests first run their whole prompt through the model
 * (one forward each, T = prompt length). Then every live stream emits the argmax of its current
 * logits as one partial result, the partials are flushed at once, and the streams that go on are
 * stacked into ONE forward [B, 1] that yields the logits and state for the next step. A stream
 * finishes after max_new_tokens characters (empty final response); a cancelled one just leaves.
 *
 * Pacing: handler.delay_ms (or header x-delay-ms) > 0 makes streams emit on a shared clock: each
 * continues to the next multiple of the delay, so streams that started apart still step
 * together. With 0 (the default) every step runs as soon as the previous one is done.
 *
 * Counters (x-ts-worker-* headers): tokens (characters generated), steps (shared decode
 * forwards) and stepped (rows in those forwards): stepped / steps is the mean batch.
 */
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "handler.h"
#include "builtins.h"
#include "log.h"
#include "torch/torch_shim.h"
#include "util.h"

#define DEFAULT_MAX_NEW_TOKENS 64
#define MAX_NEW_TOKENS_LIMIT 100000L
/* the prompt runs as one forward of T steps: its memory grows with T */
#define DEFAULT_MAX_PROMPT_CHARS 8192

struct clm_token {
    size_t off, len; /* bytes of the character in vocab */
};

struct clm_state {
    struct tsh_model *m;
    char *vocab;
    struct clm_token *tok;
    size_t ntok;
    int ascii[128]; /* token id of an ASCII character, -1 if none */
    int64_t layers, hidden;
    long delay_ms;
    long max_new_default;
    long max_prompt;
    int64_t start_tok; /* for an empty prompt */
    int64_t unk_tok;   /* for characters outside the vocabulary */
};

struct clm_req {
    float *h;     /* [L, H] */
    int64_t next; /* token to emit at the next step */
    long generated;
    long max_new;
    long fail_after; /* -1: never */
    int64_t delay_us;
};

static void clm_req_free(void *p)
{
    struct clm_req *u = p;
    free(u->h);
    free(u);
}

/* Length of the UTF-8 sequence that starts with byte c (1 for anything malformed). */
static size_t utf8_len(unsigned char c)
{
    if (c >= 0xf0 && c < 0xf8)
        return 4;
    if (c >= 0xe0)
        return c < 0xf0 ? 3 : 1;
    if (c >= 0xc0)
        return 2;
    return 1;
}

static int64_t lookup(const struct clm_state *s, const char *p, size_t len)
{
    if (len == 1 && (unsigned char)p[0] < 128)
        return s->ascii[(unsigned char)p[0]] >= 0 ? s->ascii[(unsigned char)p[0]] : s->unk_tok;
    for (size_t i = 0; i < s->ntok; i++)
        if (s->tok[i].len == len && !memcmp(s->vocab + s->tok[i].off, p, len))
            return (int64_t)i;
    return s->unk_tok;
}

static int load_vocab(struct ts_ctx *ctx, struct clm_state *s)
{
    char *path = xasprintf("%s/vocab.json", ts_model_dir(ctx));
    json_error_t jerr;
    json_t *j = json_load_file(path, 0, &jerr);
    if (!j) {
        ts_set_load_error(ctx, "%s:%d: %s", path, jerr.line, jerr.text);
        free(path);
        return -1;
    }
    json_t *v = json_object_get(j, "vocab");
    json_t *l = json_object_get(j, "layers");
    json_t *h = json_object_get(j, "hidden");
    if (!json_is_string(v) || !json_string_length(v) || !json_is_integer(l) ||
        !json_is_integer(h) || json_integer_value(l) < 1 || json_integer_value(h) < 1 ||
        json_integer_value(l) * json_integer_value(h) > (1 << 24)) {
        ts_set_load_error(ctx,
                          "%s: needs \"vocab\" (a non-empty string), \"layers\" and "
                          "\"hidden\" (positive integers)",
                          path);
        json_decref(j);
        free(path);
        return -1;
    }
    size_t vlen = json_string_length(v);
    s->vocab = xstrndup(json_string_value(v), vlen);
    s->layers = json_integer_value(l);
    s->hidden = json_integer_value(h);
    json_decref(j);
    free(path);

    s->tok = xcalloc(vlen, sizeof(*s->tok));
    for (int c = 0; c < 128; c++)
        s->ascii[c] = -1;
    for (size_t off = 0; off < vlen;) {
        size_t n = utf8_len((unsigned char)s->vocab[off]);
        if (off + n > vlen)
            n = vlen - off;
        if (n == 1 && (unsigned char)s->vocab[off] < 128 &&
            s->ascii[(unsigned char)s->vocab[off]] < 0)
            s->ascii[(unsigned char)s->vocab[off]] = (int)s->ntok;
        s->tok[s->ntok].off = off;
        s->tok[s->ntok].len = n;
        s->ntok++;
        off += n;
    }
    s->unk_tok = s->ascii[' '] >= 0 ? s->ascii[' '] : 0;
    s->start_tok = s->ascii['\n'] >= 0 ? s->ascii['\n'] : s->unk_tok;
    return 0;
}

/* forward(x [B, T], h [B, L, H]): logits [B, V] and h2 [B, L, H], checked. */
static int step_forward(struct clm_state *s, const int64_t *ids, int64_t b, int64_t t,
                        const float *h, struct tsh_tensor **out, size_t *nout, char *err,
                        size_t errlen)
{
    struct tsh_tensor in[2] = {
        {.dtype = TSH_INT64,
         .ndim = 2,
         .shape = {b, t},
         .data = (void *)ids,
         .nbytes = (size_t)(b * t) * sizeof(int64_t)},
        {.dtype = TSH_FLOAT32,
         .ndim = 3,
         .shape = {b, s->layers, s->hidden},
         .data = (void *)h,
         .nbytes = (size_t)(b * s->layers * s->hidden) * sizeof(float)},
    };
    char *e = NULL;
    *out = NULL;
    *nout = 0;
    if (tsh_forward(s->m, in, 2, out, nout, &e)) {
        snprintf(err, errlen, "forward failed: %s", e);
        free(e);
        return -1;
    }
    struct tsh_tensor *o = *out;
    if (*nout != 2 || o[0].dtype != TSH_FLOAT32 || o[0].ndim != 2 || o[0].shape[0] != b ||
        o[0].shape[1] != (int64_t)s->ntok || o[1].dtype != TSH_FLOAT32 || o[1].ndim != 3 ||
        o[1].shape[0] != b || o[1].shape[1] != s->layers || o[1].shape[2] != s->hidden) {
        snprintf(err, errlen,
                 "the model must return (logits float32 [B, %zu], h float32 [B, %lld, %lld])",
                 s->ntok, (long long)s->layers, (long long)s->hidden);
        tsh_tensors_free(*out, *nout);
        *out = NULL;
        *nout = 0;
        return -1;
    }
    return 0;
}

static int64_t argmax(const float *p, size_t n)
{
    size_t best = 0;
    for (size_t i = 1; i < n; i++)
        if (p[i] > p[best])
            best = i;
    return (int64_t)best;
}

static int clm_init(struct ts_ctx *ctx, void **state)
{
    const char *file = ts_serialized_file(ctx);
    if (!*file) {
        ts_set_load_error(ctx, "MANIFEST.json has no model.serializedFile for char_lm");
        return -1;
    }
    struct clm_state *s = xcalloc(1, sizeof(*s));
    s->delay_ms = ts_config_get_long(ctx, "handler.delay_ms", 0);
    if (s->delay_ms < 0)
        s->delay_ms = 0;
    s->max_new_default = ts_config_get_long(ctx, "handler.max_new_tokens", DEFAULT_MAX_NEW_TOKENS);
    if (s->max_new_default < 0 || s->max_new_default > MAX_NEW_TOKENS_LIMIT)
        s->max_new_default = DEFAULT_MAX_NEW_TOKENS;
    s->max_prompt = ts_config_get_long(ctx, "handler.max_prompt_chars", DEFAULT_MAX_PROMPT_CHARS);
    if (s->max_prompt < 1)
        s->max_prompt = DEFAULT_MAX_PROMPT_CHARS;
    if (load_vocab(ctx, s)) {
        free(s);
        return -1;
    }
    if (!(s->m = ts_builtin_load(ctx, file)))
        goto fail;
    /* one step on a zero state checks the signature and warms the model up */
    float *h = xcalloc((size_t)(s->layers * s->hidden), sizeof(float));
    struct tsh_tensor *out;
    size_t nout;
    char err[512];
    int rc = step_forward(s, &s->start_tok, 1, 1, h, &out, &nout, err, sizeof(err));
    free(h);
    if (rc) {
        ts_set_load_error(ctx, "%s: %s", file, err);
        tsh_model_free(s->m);
        goto fail;
    }
    tsh_tensors_free(out, nout);
    ts_log(ctx, LOG_LEVEL_INFO,
           "char_lm: %zu tokens, %lld layer(s) x %lld hidden, delay %ld ms, on %s%.0d", s->ntok,
           (long long)s->layers, (long long)s->hidden, s->delay_ms,
           tsh_model_device(s->m) >= 0 ? "cuda:" : "the CPU",
           tsh_model_device(s->m) >= 0 ? tsh_model_device(s->m) : 0);
    *state = s;
    return 0;
fail:
    free(s->vocab);
    free(s->tok);
    free(s);
    return -1;
}

/* Prompt and max_new_tokens of a request; -1 with err set for a bad request. */
static int parse_request(struct ts_ctx *ctx, size_t i, const struct clm_state *s, char **prompt,
                         size_t *plen, long *max_new, long *fail_after, char *err, size_t errlen)
{
    *fail_after = -1;
    size_t blen = 0;
    const char *ctype = "";
    const char *body = ts_get_body(ctx, i, &blen, &ctype);
    if (!body)
        body = "";
    *max_new = s->max_new_default;
    const char *mp = ts_get_param(ctx, i, "max_new_tokens", NULL, NULL);
    if (mp && ts_parse_long(mp, 0, MAX_NEW_TOKENS_LIMIT, max_new)) {
        snprintf(err, errlen, "max_new_tokens: \"%s\" is not an integer in [0, %ld]", mp,
                 MAX_NEW_TOKENS_LIMIT);
        return -1;
    }
    size_t k = 0;
    while (k < blen && (body[k] == ' ' || body[k] == '\n' || body[k] == '\r' || body[k] == '\t'))
        k++;
    int is_json = (ctype && strstr(ctype, "json")) || (k < blen && body[k] == '{');
    if (!is_json) {
        *prompt = xstrndup(body, blen);
        *plen = blen;
        return 0;
    }
    json_error_t jerr;
    json_t *j = json_loadb(body, blen, 0, &jerr);
    if (!json_is_object(j)) {
        snprintf(err, errlen, "request body: %s", j ? "expected a JSON object" : jerr.text);
        json_decref(j);
        return -1;
    }
    json_t *p = json_object_get(j, "prompt");
    json_t *n = json_object_get(j, "max_new_tokens");
    if (p && !json_is_string(p)) {
        snprintf(err, errlen, "$.prompt: expected a string");
        json_decref(j);
        return -1;
    }
    if (n && (!json_is_integer(n) || json_integer_value(n) < 0 ||
              json_integer_value(n) > MAX_NEW_TOKENS_LIMIT)) {
        snprintf(err, errlen, "$.max_new_tokens: expected an integer in [0, %ld]",
                 MAX_NEW_TOKENS_LIMIT);
        json_decref(j);
        return -1;
    }
    if (n)
        *max_new = (long)json_integer_value(n);
    json_t *f = json_object_get(j, "fail_after");
    if (json_is_integer(f) && json_integer_value(f) >= 0 &&
        json_integer_value(f) <= MAX_NEW_TOKENS_LIMIT)
        *fail_after = (long)json_integer_value(f);
    *plen = p ? json_string_length(p) : 0;
    *prompt = xstrndup(p ? json_string_value(p) : "", *plen);
    json_decref(j);
    return 0;
}

static int64_t request_delay_us(struct ts_ctx *ctx, size_t i, const struct clm_state *s)
{
    const char *h = ts_get_header(ctx, i, "x-delay-ms");
    long ms;
    if (!h || ts_parse_long(h, 0, 3600L * 1000, &ms))
        ms = s->delay_ms;
    return (int64_t)ms * 1000;
}

/* A new request: parse it, run its prompt, and keep its state. 0 when it goes on streaming. */
static int start_request(struct ts_ctx *ctx, size_t i, struct clm_state *s)
{
    char err[512];
    char *prompt = NULL;
    size_t plen = 0;
    long max_new, fail_after;
    if (parse_request(ctx, i, s, &prompt, &plen, &max_new, &fail_after, err, sizeof(err))) {
        ts_set_error(ctx, i, 400, "%s", err);
        return -1;
    }
    ts_set_content_type(ctx, i, "text/plain");
    if (max_new == 0) {
        free(prompt);
        ts_set_response(ctx, i, "", 0);
        return -1;
    }
    int64_t *ids = xmalloc((plen ? plen : 1) * sizeof(int64_t));
    int64_t t = 0;
    for (size_t off = 0; off < plen;) {
        size_t n = utf8_len((unsigned char)prompt[off]);
        if (off + n > plen)
            n = plen - off;
        ids[t++] = lookup(s, prompt + off, n);
        off += n;
    }
    free(prompt);
    if (t > s->max_prompt) {
        free(ids);
        ts_set_error(ctx, i, 400, "prompt: %lld characters, at most %ld (handler.max_prompt_chars)",
                     (long long)t, s->max_prompt);
        return -1;
    }
    if (t == 0)
        ids[t++] = s->start_tok;

    struct clm_req *u = xcalloc(1, sizeof(*u));
    u->h = xcalloc((size_t)(s->layers * s->hidden), sizeof(float));
    u->max_new = max_new;
    u->fail_after = fail_after;
    u->delay_us = request_delay_us(ctx, i, s);
    ts_set_user(ctx, i, u, clm_req_free);

    struct tsh_tensor *out;
    size_t nout;
    int rc = step_forward(s, ids, 1, t, u->h, &out, &nout, err, sizeof(err));
    free(ids);
    if (rc) {
        ts_set_error(ctx, i, 500, "%s", err);
        return -1;
    }
    u->next = argmax(out[0].data, s->ntok);
    memcpy(u->h, out[1].data, out[1].nbytes);
    tsh_tensors_free(out, nout);
    return 0;
}

/* Delay to the next multiple of the stream's period: streams share a clock and step together. */
static int64_t pace(int64_t delay_us)
{
    if (delay_us <= 0)
        return 0;
    int64_t now = ts_now_us();
    return delay_us - now % delay_us;
}

static void clm_handle(void *state, struct ts_ctx *ctx, size_t n)
{
    struct clm_state *s = state;
    size_t *live = xmalloc((n ? n : 1) * sizeof(size_t));
    size_t nlive = 0;
    for (size_t i = 0; i < n; i++) {
        if (ts_is_cancelled(ctx, i))
            continue;
        if (!ts_get_user(ctx, i) && start_request(ctx, i, s))
            continue;
        struct clm_req *u = ts_get_user(ctx, i);
        if (u->fail_after >= 0 && u->generated >= u->fail_after) {
            ts_set_error(ctx, i, 500,
                         "char_lm: failing after %ld characters, as the request "
                         "asked (fail_after)",
                         u->generated);
            continue;
        }
        live[nlive++] = i;
    }

    /* emit one character per live stream, and send them before the next forward */
    ts_counter_add(ctx, "tokens", (int64_t)nlive);
    size_t ngo = 0;
    for (size_t k = 0; k < nlive; k++) {
        size_t i = live[k];
        struct clm_req *u = ts_get_user(ctx, i);
        const struct clm_token *tk = &s->tok[u->next];
        ts_send_intermediate_response(ctx, i, s->vocab + tk->off, tk->len);
        if (++u->generated >= u->max_new)
            ts_set_response(ctx, i, "", 0);
        else
            live[ngo++] = i;
    }
    ts_flush(ctx);

    if (ngo) {
        int64_t lh = s->layers * s->hidden;
        int64_t *ids = xmalloc(ngo * sizeof(int64_t));
        float *h = xmalloc(ngo * (size_t)lh * sizeof(float));
        for (size_t k = 0; k < ngo; k++) {
            struct clm_req *u = ts_get_user(ctx, live[k]);
            ids[k] = u->next;
            memcpy(h + k * (size_t)lh, u->h, (size_t)lh * sizeof(float));
        }
        struct tsh_tensor *out;
        size_t nout;
        char err[512];
        if (step_forward(s, ids, (int64_t)ngo, 1, h, &out, &nout, err, sizeof(err))) {
            ts_log(ctx, LOG_LEVEL_ERROR, "char_lm: %s", err);
            for (size_t k = 0; k < ngo; k++)
                ts_set_error(ctx, live[k], 500, "%s", err);
        } else {
            ts_counter_add(ctx, "steps", 1);
            ts_counter_add(ctx, "stepped", (int64_t)ngo);
            const float *logits = out[0].data;
            const float *h2 = out[1].data;
            for (size_t k = 0; k < ngo; k++) {
                struct clm_req *u = ts_get_user(ctx, live[k]);
                u->next = argmax(logits + k * s->ntok, s->ntok);
                memcpy(u->h, h2 + k * (size_t)lh, (size_t)lh * sizeof(float));
                ts_continue(ctx, live[k], pace(u->delay_us));
            }
            tsh_tensors_free(out, nout);
        }
        free(ids);
        free(h);
    }
    free(live);
}

static void clm_destroy(void *state)
{
    struct clm_state *s = state;
    tsh_model_free(s->m);
    free(s->vocab);
    free(s->tok);
    free(s);
}

static const struct ts_handler char_lm = {
    .abi_version = TS_HANDLER_ABI_VERSION,
    .name = "char_lm",
    .flags = TS_HANDLER_CONTINUOUS,
    .init = clm_init,
    .handle = clm_handle,
    .seq_event = NULL,
    .destroy = clm_destroy,
};

const struct ts_handler *ts_handler_char_lm(void)
{
    return &char_lm;
}
