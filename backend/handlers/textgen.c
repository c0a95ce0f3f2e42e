/*
 * textgen: text generation with a KV cache under continuous batching, for TorchScript decoders
 * over bytes (scripts/models/tiny_gpt: its model.py documents the methods used here).
 *
 * The model exports new_cache(slots, ctx), which makes the keys and values of `slots` sequences
 * of up to `ctx` positions, and step(cache, tokens, slots, pos, groups, chunks), which runs one
 * iteration over rows of (token, slot, position), writes their keys and values into the cache in
 * place and returns the logits the server needs. The cache is made once, at load, with one slot
 * per request the worker may hold (batchSize) and stays in the worker, inside the shim
 * (tsh_call_keep): a request owns one slot from its first step until it finishes or is
 * cancelled. A model may also export clear_slot(cache, slot), which is called before a slot's
 * first use: its new_cache may then leave the memory unset, and a worker holds the pages of the
 * slots it has used, not of all of them.
 *
 * Decode attention reads keys and values, the larger part of a decode row's cost. The decode rows
 * go to step() in slot order, cut into groups of neighbouring slots: a group reads its slot range
 * up to its longest position, in one batched product, and costs a few small products of its own.
 * tg_plan_groups cuts them where that costs least (measured at load: tg_calibrate), so that a
 * sequence near the start of its context does not read as far as one near the end, and the free
 * slots between busy ones are not read. A new request takes the lowest free slot above the highest
 * busy one (or, at the top, the lowest free one): requests that arrive together sit together, in
 * the order of their positions, and those that finish first leave the bottom of the range.
 *
 * Every handle() call is one iteration of the running batch, one step() call: each request whose
 * prompt is in the cache feeds its last token (a decode row) and gets the next one. Prompts:
 *  - on the CPU (handler.prefill_thread, default true), by a thread of the worker's own while
 *    the batch decodes (struct tg_prefill): the oldest waiting prompts, up to
 *    handler.prefill_chunk tokens if set, else handler.max_prefill_tokens, in one step() of
 *    their own on the second core, so that a joining prompt delays no decode step; the first
 *    tokens go out at the first iteration after it, before that iteration's step. With nothing
 *    decoding and nothing in the thread, in the iteration itself, as below. With
 *    handler.split_decode (default false) the thread, when it has no prompt, runs the later
 *    decode groups of a step in a step() of its own while the main thread runs the others
 *    (tg_split_groups): more tokens/s on two cores, shorter steps, but a prompt's first token
 *    then waits for a whole step of the main thread, which runs alone while it is fed.
 *  - otherwise (a GPU, or prefill_thread false), in the decode steps: in chunks, oldest request
 *    first, within a budget of prompt tokens per step (chunked prefill): about as many as cost
 *    what this step's decode rows cost (with the costs measured at load), so that a joining
 *    prompt delays the others by about one step; the few last tokens of a prompt that cost less
 *    than a step's own cost come along (tg_tail_rides). handler.prefill_chunk fixes the budget.
 *    With nothing decoding a step takes up to handler.max_prefill_tokens.
 * The last chunk of a prompt gives its first token.
 * A new token goes through the request's stop sequences (common/textstop.h) and is streamed as
 * one partial result as soon as it is released; the request continues (ts_continue) until
 * max_new_tokens, a stop sequence, or a full context. Its final response carries the rest of
 * the text and its usage in headers: x-ts-prompt-tokens (set from its first frame on),
 * x-ts-completion-tokens and x-ts-finish-reason ("stop" or "length"), which the OpenAI API
 * reads (docs/openai.md).
 *
 * A token is a byte: a prompt is its UTF-8 bytes (an empty one is "\n"), and the streamed text
 * is held back at an incomplete UTF-8 sequence. Sampling: greedy when temperature is 0 (the
 * default), else temperature and top_p with a per-request generator seeded from "seed".
 *
 * Counters (x-ts-worker-* headers): tokens, steps, prefill_tokens (of which
 * prefill_thread_tokens by the thread, in prefill_jobs steps), split_steps, slots_in_use (which
 * goes down again when a request leaves, whether it finished or its client went away),
 * decode_groups, kv_read (slot positions the decode groups read, per layer) and kv_one (what one
 * group over the decoding slots would have read).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "handler.h"
#include "builtins.h"
#include "log.h"
#include "textgen_int.h"
#include "textgen_req.h"
#include "torch/torch_shim.h"
#include "util.h"

#define VOCAB 256
#define DEFAULT_MAX_NEW 64
#define DEFAULT_MAX_PREFILL 512

struct tg_seq {
    struct tg_state *s;
    int slot;
    unsigned char *prompt;
    int64_t plen, fed; /* prompt tokens, and how many are in the cache */
    int64_t next;      /* the last token generated, not yet in the cache; -1 before the first */
    int pf_k;          /* its chunk in the prefill thread's job, or -1 */
    int64_t ncache;    /* positions of the slot in the cache */
    long generated, max_new;
    double temperature, top_p;
    uint64_t rng;
    uint64_t arrival;
    struct textstop ts;
};

static void seq_free(void *p)
{
    struct tg_seq *u = p;
    struct tg_state *s = u->s;
    if (u->pf_k >= 0) {
        /* its slot is written until the job ends, and its result is no one's */
        tg_pf_wait(s->pf);
        tg_pf_release(s->pf, 1);
    }
    s->used[u->slot] = 0;
    ts_counter_add(s->ctx, "slots_in_use", -1);
    textstop_free(&u->ts);
    free(u->prompt);
    free(u);
}

static struct tsh_arg targ(int dtype, const void *data, int ndim, int64_t d0, int64_t d1)
{
    struct tsh_arg a = {.kind = TSH_ARG_TENSOR};
    a.u.t.dtype = dtype;
    a.u.t.ndim = ndim;
    a.u.t.shape[0] = d0;
    a.u.t.shape[1] = d1;
    a.u.t.data = (void *)data;
    a.u.t.nbytes = (size_t)(d0 * (ndim > 1 ? d1 : 1)) * tsh_dtype_size(dtype);
    return a;
}

static struct tsh_arg iarg(int64_t v)
{
    struct tsh_arg a = {.kind = TSH_ARG_INT};
    a.u.i = v;
    return a;
}

/* Zeros a slot before its first use (the model's clear_slot). */
int tg_clear_slot(struct tg_state *s, int slot, char *err, size_t errlen)
{
    struct tsh_arg a[2] = {{.kind = TSH_ARG_VALUE, .u.value = s->cache}, iarg(slot)};
    struct tsh_tensor *out;
    size_t nout;
    char *e = NULL;
    if (tsh_call(s->m, "clear_slot", a, 2, &out, &nout, &e)) {
        snprintf(err, errlen, "clear_slot failed: %s", e);
        free(e);
        return -1;
    }
    tsh_tensors_free(out, nout);
    s->cleared[slot] = 1;
    return 0;
}

/* One step() over the first n rows of r, n_dec of them decoding in ngroups groups (groups),
 * and nchunks chunks: the logits, checked. */
int tg_run_step(struct tg_state *s, const struct tg_rows *r, size_t n, size_t n_dec,
                const int64_t *groups, size_t ngroups, const int64_t *chunks, size_t nchunks,
                struct tsh_tensor **out, size_t *nout, char *err, size_t errlen)
{
    static const int64_t none = 0;
    struct tsh_arg a[6];
    a[0].kind = TSH_ARG_VALUE;
    a[0].u.value = s->cache;
    a[1] = targ(TSH_INT64, r->tok, 1, (int64_t)n, 0);
    a[2] = targ(TSH_INT64, r->slot, 1, (int64_t)n, 0);
    a[3] = targ(TSH_INT64, r->pos, 1, (int64_t)n, 0);
    a[4] = targ(TSH_INT64, ngroups ? groups : &none, 2, (int64_t)ngroups, 4);
    a[5] = targ(TSH_INT64, nchunks ? chunks : &none, 2, (int64_t)nchunks, 3);
    char *e = NULL;
    if (tsh_call(s->m, "step", a, 6, out, nout, &e)) {
        snprintf(err, errlen, "step failed: %s", e);
        free(e);
        return -1;
    }
    struct tsh_tensor *o = *out;
    if (*nout != 1 || o->dtype != TSH_FLOAT32 || o->ndim != 2 ||
        o->shape[0] != (int64_t)(n_dec + nchunks) || o->shape[1] != VOCAB) {
        snprintf(err, errlen, "step must return logits float32 [%zu, %d]", n_dec + nchunks, VOCAB);
        tsh_tensors_free(*out, *nout);
        return -1;
    }
    return 0;
}

void tg_grow_rows(struct tg_rows *r, size_t n)
{
    if (n <= r->cap)
        return;
    r->cap = n;
    r->tok = xrealloc(r->tok, n * sizeof(*r->tok));
    r->slot = xrealloc(r->slot, n * sizeof(*r->slot));
    r->pos = xrealloc(r->pos, n * sizeof(*r->pos));
}

static void state_free(struct tg_state *s)
{
    tg_pf_stop(s);
    tsh_value_free(s->cache);
    tsh_model_free(s->m);
    free(s->used);
    free(s->cleared);
    free(s->rows.tok);
    free(s->rows.slot);
    free(s->rows.pos);
    free(s->chunks);
    free(s->chunk_req);
    free(s->dec_req);
    free(s->groups);
    free(s->best);
    free(s->first);
    free(s);
}

static int tg_init(struct ts_ctx *ctx, void **state)
{
    const char *file = ts_serialized_file(ctx);
    if (!*file) {
        ts_set_load_error(ctx, "MANIFEST.json has no model.serializedFile for textgen");
        return -1;
    }
    struct tg_state *s = xcalloc(1, sizeof(*s));
    s->ctx = ctx;
    s->slots = ts_batch_size(ctx);
    s->max_new_default = ts_config_get_long(ctx, "handler.max_new_tokens", DEFAULT_MAX_NEW);
    s->chunk_fixed = ts_config_get_long(ctx, "handler.prefill_chunk", 0);
    s->max_prefill = ts_config_get_long(ctx, "handler.max_prefill_tokens", DEFAULT_MAX_PREFILL);
    long want_ctx = ts_config_get_long(ctx, "handler.context_length", 0);
    static const char *const flags[] = {"handler.decode_groups", "handler.prefill_thread",
                                        "handler.split_decode"};
    int flag[3] = {1, 1, 0};
    for (size_t k = 0; k < 3; k++) {
        const char *v = ts_config_get(ctx, flags[k]);
        if (v && ts_parse_bool(v, &flag[k])) {
            ts_set_load_error(ctx, "model-config.yaml: %s: \"%s\" is not true or false", flags[k],
                              v);
            free(s);
            return -1;
        }
    }
    s->split = flag[0];
    s->split_decode = flag[2];
    if (s->split_decode && !flag[1]) {
        ts_set_load_error(ctx, "model-config.yaml: handler.split_decode: true needs "
                               "handler.prefill_thread: true (its thread runs the part)");
        free(s);
        return -1;
    }
    if (s->max_new_default < 0 || s->max_new_default > TEXTGEN_MAX_NEW_LIMIT ||
        s->chunk_fixed < 0 || s->max_prefill < 1 || want_ctx < 0) {
        ts_set_load_error(ctx, "handler.max_new_tokens, handler.prefill_chunk, "
                               "handler.max_prefill_tokens and handler.context_length must be "
                               "non-negative integers (max_prefill_tokens at least 1)");
        free(s);
        return -1;
    }
    char *path = xasprintf("%s/%s", ts_model_dir(ctx), file);
    char *e = NULL;
    s->m = tsh_load(path, ts_gpu_id(ctx), &e);
    free(path);
    if (!s->m) {
        ts_set_load_error(ctx, "cannot load %s: %s", file, e);
        free(e);
        free(s);
        return -1;
    }
    static const char *const need[] = {"new_cache", "step", "context_length"};
    for (size_t i = 0; i < 3; i++)
        if (!tsh_has_method(s->m, need[i])) {
            ts_set_load_error(ctx,
                              "%s: the model has no method %s(): textgen needs new_cache, step "
                              "and context_length (scripts/models/tiny_gpt/model.py)",
                              file, need[i]);
            goto fail;
        }
    struct tsh_tensor *out;
    size_t nout;
    if (tsh_call(s->m, "context_length", NULL, 0, &out, &nout, &e)) {
        ts_set_load_error(ctx, "%s: context_length(): %s", file, e);
        free(e);
        goto fail;
    }
    int64_t model_ctx = nout == 1 && out[0].dtype == TSH_INT64 ? *(int64_t *)out[0].data : 0;
    tsh_tensors_free(out, nout);
    if (model_ctx < 1) {
        ts_set_load_error(ctx, "%s: context_length() must return a positive int", file);
        goto fail;
    }
    s->ctx_len = want_ctx > 0 && want_ctx < model_ctx ? want_ctx : model_ctx;
    struct tsh_arg a[2] = {iarg(s->slots), iarg(s->ctx_len)};
    if (tsh_call_keep(s->m, "new_cache", a, 2, &s->cache, &e)) {
        ts_set_load_error(ctx, "%s: new_cache(%d, %lld): %s", file, s->slots, (long long)s->ctx_len,
                          e);
        free(e);
        goto fail;
    }
    char err[512];
    s->used = xcalloc((size_t)s->slots, 1);
    s->cleared = xcalloc((size_t)s->slots, 1);
    s->has_clear = tsh_has_method(s->m, "clear_slot");
    s->chunks = xmalloc((size_t)s->slots * 3 * sizeof(*s->chunks));
    s->chunk_req = xmalloc((size_t)s->slots * sizeof(*s->chunk_req));
    s->dec_req = xmalloc((size_t)s->slots * sizeof(*s->dec_req));
    s->groups = xmalloc((size_t)s->slots * 4 * sizeof(*s->groups));
    s->best = xmalloc((size_t)s->slots * sizeof(*s->best));
    s->first = xmalloc((size_t)s->slots * sizeof(*s->first));
    if (tg_calibrate(s, err, sizeof(err))) {
        ts_set_load_error(ctx, "%s: %s", file, err);
        goto fail;
    }
    /* on a GPU the thread would run on another CUDA stream than the worker's (the current
     * stream is per thread): prompts are fed in the steps there */
    if (flag[1] && tsh_model_device(s->m) >= 0)
        ts_log(ctx, LOG_LEVEL_INFO,
               "textgen: prompts are fed in the decode steps on a GPU "
               "(handler.prefill_thread%s applies on the CPU)",
               s->split_decode ? " and handler.split_decode" : "");
    else if (flag[1] && tg_pf_start(s, err, sizeof(err))) {
        ts_set_load_error(ctx, "%s", err);
        goto fail;
    }
    ts_log(ctx, LOG_LEVEL_INFO,
           "textgen: %d slots of %lld positions, KV cache %.1f MB (%s); a step costs %.0f us, "
           "plus %.0f us per decode row, %.0f us per decode group%s and %.1f us per 1000 slot "
           "positions it reads, and %.0f us per prompt token; prompts fed %s",
           s->slots, (long long)s->ctx_len, (double)tsh_value_nbytes(s->cache) / 1048576.0,
           s->has_clear ? "touched as slots are first used" : "as new_cache made it", s->step_us,
           s->row_us, s->group_us, s->split ? "" : " (one group: handler.decode_groups false)",
           s->pos_us * 1000, s->tok_us,
           !s->pf            ? "in the decode steps"
           : s->split_decode ? "by a thread of their own while the batch decodes, which also runs "
                               "part of a decode step when it has none (split_decode)"
                             : "by a thread of their own while the batch decodes");
    *state = s;
    return 0;
fail:
    state_free(s);
    return -1;
}

static void set_usage(struct ts_ctx *ctx, size_t i, const char *key, long v)
{
    char num[24];
    snprintf(num, sizeof(num), "%ld", v);
    ts_set_header(ctx, i, key, num);
}

/* The request ends: the rest of its text is its final response, with its usage. */
static void finish(struct ts_ctx *ctx, size_t i, struct tg_seq *u, struct buf *text,
                   const char *reason)
{
    if (strcmp(reason, "stop"))
        textstop_finish(&u->ts, text);
    set_usage(ctx, i, "x-ts-completion-tokens", u->generated);
    ts_set_header(ctx, i, "x-ts-finish-reason", reason);
    ts_set_response(ctx, i, text->data ? (const char *)text->data : "", text->len);
}

/* The slot for a new request: the lowest free one above the highest busy one, else the lowest
 * free one; -1 when all are busy. Requests that arrive together sit together, in the order of
 * their positions, which tg_plan_groups cuts into short reads, and the busy range does not
 * wander over the cache (whose pages a slot takes at its first use). */
static int free_slot(const struct tg_state *s)
{
    int top = s->slots;
    while (top > 0 && !s->used[top - 1])
        top--;
    if (top < s->slots)
        return top;
    for (int k = 0; k < s->slots; k++)
        if (!s->used[k])
            return k;
    return -1;
}

/* A new request: its parameters, a slot. 0 when it goes on; else it has been answered. */
static int start(struct ts_ctx *ctx, size_t i, struct tg_state *s)
{
    char err[512];
    size_t blen = 0;
    const char *ctype = "";
    const char *body = ts_get_body(ctx, i, &blen, &ctype);
    struct textgen_params p;
    if (textgen_req_parse(body, blen, ctype, ts_get_param(ctx, i, "max_new_tokens", NULL, NULL), &p,
                          err, sizeof(err))) {
        ts_set_error(ctx, i, 400, "%s", err);
        return -1;
    }
    ts_set_content_type(ctx, i, "text/plain; charset=utf-8");
    if (p.plen == 0) {
        free(p.prompt);
        p.prompt = xstrdup("\n");
        p.plen = 1;
    }
    if ((int64_t)p.plen > s->ctx_len) {
        ts_set_error(ctx, i, 400,
                     "prompt: %zu tokens (bytes), the context holds %lld "
                     "(handler.context_length)",
                     p.plen, (long long)s->ctx_len);
        textgen_params_free(&p);
        return -1;
    }
    long max_new = p.max_new >= 0 ? p.max_new : s->max_new_default;
    set_usage(ctx, i, "x-ts-prompt-tokens", (long)p.plen);
    if (max_new == 0) {
        set_usage(ctx, i, "x-ts-completion-tokens", 0);
        ts_set_header(ctx, i, "x-ts-finish-reason", "length");
        ts_set_response(ctx, i, "", 0);
        textgen_params_free(&p);
        return -1;
    }
    int slot = free_slot(s);
    if (slot < 0) {
        /* the frontend sends a worker at most batchSize requests at once: a handler bug */
        ts_set_error(ctx, i, 503, "textgen: all %d KV cache slots are in use", s->slots);
        textgen_params_free(&p);
        return -1;
    }
    if (s->has_clear && !s->cleared[slot] && tg_clear_slot(s, slot, err, sizeof(err))) {
        ts_set_error(ctx, i, 500, "textgen: %s", err);
        textgen_params_free(&p);
        return -1;
    }
    struct tg_seq *u = xcalloc(1, sizeof(*u));
    u->s = s;
    u->slot = slot;
    u->prompt = (unsigned char *)p.prompt;
    u->plen = (int64_t)p.plen;
    u->next = -1;
    u->pf_k = -1;
    u->max_new = max_new;
    u->temperature = p.temperature;
    u->top_p = p.top_p;
    if (p.has_seed)
        u->rng = p.seed;
    else if (getrandom(&u->rng, sizeof(u->rng), 0) != sizeof(u->rng))
        u->rng = (uint64_t)ts_now_us() ^ ((uint64_t)s->arrivals << 32);
    u->arrival = s->arrivals++;
    const char *stops[TEXTSTOP_MAX];
    for (size_t k = 0; k < p.nstop; k++)
        stops[k] = p.stop[k];
    textstop_init(&u->ts, stops, p.stop_len, p.nstop); /* textgen_req checked the limits */
    s->used[slot] = 1;
    ts_counter_add(ctx, "slots_in_use", 1);
    ts_set_user(ctx, i, u, seq_free);
    return 0;
}

/* A token for request i: stream what it releases, or finish. 1 when the request goes on. */
static int take_token(struct ts_ctx *ctx, size_t i, struct tg_seq *u, int64_t tok)
{
    unsigned char b = (unsigned char)tok;
    struct buf text;
    buf_init(&text);
    u->generated++;
    int stopped = textstop_push(&u->ts, &b, 1, &text);
    int go = 0;
    if (stopped)
        finish(ctx, i, u, &text, "stop");
    else if (u->generated >= u->max_new || u->ncache >= u->s->ctx_len)
        finish(ctx, i, u, &text, "length");
    else {
        if (text.len)
            ts_send_intermediate_response(ctx, i, text.data, text.len);
        u->next = tok;
        go = 1;
    }
    buf_free(&text);
    return go;
}

static int by_arrival(const void *a, const void *b, void *arg)
{
    struct ts_ctx *ctx = arg;
    const struct tg_seq *x = ts_get_user(ctx, *(const size_t *)a);
    const struct tg_seq *y = ts_get_user(ctx, *(const size_t *)b);
    return x->arrival < y->arrival ? -1 : x->arrival > y->arrival;
}

static int by_slot(const void *a, const void *b, void *arg)
{
    struct ts_ctx *ctx = arg;
    const struct tg_seq *x = ts_get_user(ctx, *(const size_t *)a);
    const struct tg_seq *y = ts_get_user(ctx, *(const size_t *)b);
    return (x->slot > y->slot) - (x->slot < y->slot);
}

/* Chunks of the prompts of requests pre[0..npre) (oldest first) into rows r from row `from`
 * on, at most budget tokens (and a tail that rides, tg_tail_rides): each chunk (slot, first row,
 * tokens) in chunks, its request in chunk_req. Returns the rows the chunks take. */
static size_t fill_chunks(struct tg_state *s, struct ts_ctx *ctx, struct tg_rows *r, size_t from,
                          const size_t *pre, size_t npre, long budget, size_t n_dec,
                          int64_t *chunks, size_t *chunk_req, size_t *nchunks)
{
    size_t nrows = from;
    long left = budget;
    *nchunks = 0;
    for (size_t k = 0; k < npre && left > 0; k++) {
        struct tg_seq *u = ts_get_user(ctx, pre[k]);
        int64_t rest = u->plen - u->fed;
        int64_t take = rest < left ? rest : left;
        if (rest > left && tg_tail_rides(s, n_dec, budget, rest - left))
            take = rest;
        int64_t *c = chunks + 3 * *nchunks;
        c[0] = u->slot;
        c[1] = (int64_t)nrows;
        c[2] = take;
        chunk_req[(*nchunks)++] = pre[k];
        for (int64_t t = 0; t < take; t++, nrows++) {
            r->tok[nrows] = u->prompt[u->fed + t];
            r->slot[nrows] = u->slot;
            r->pos[nrows] = u->fed + t;
        }
        left -= take;
    }
    return nrows - from;
}

/* Request i's chunk of `took` prompt tokens is in the cache; its prompt fed, it samples its
 * first token from logits (its chunk's row). 1 when it took a token. */
static int take_chunk(struct ts_ctx *ctx, size_t i, int64_t took, const float *logits)
{
    struct tg_seq *u = ts_get_user(ctx, i);
    u->fed += took;
    u->ncache += took;
    if (u->fed < u->plen) {
        ts_continue(ctx, i, 0);
        return 0;
    }
    int64_t t = textgen_sample(logits, VOCAB, u->temperature, u->top_p, &u->rng);
    if (take_token(ctx, i, u, t))
        ts_continue(ctx, i, 0);
    return 1;
}

/* The prompts' chunks a step gave (logits: one row per chunk after the n_dec decode rows).
 * Returns the tokens. */
static int64_t take_chunks(struct ts_ctx *ctx, const float *logits, size_t n_dec,
                           const int64_t *chunks, const size_t *chunk_req, size_t nchunks)
{
    int64_t ntok = 0;
    for (size_t k = 0; k < nchunks; k++)
        ntok += take_chunk(ctx, chunk_req[k], chunks[3 * k + 2], logits + (n_dec + k) * VOCAB);
    return ntok;
}

/* Gives the prefill thread the oldest waiting prompts' chunks, up to handler.prefill_chunk
 * tokens when it is set, else max_prefill_tokens. */
static void pf_post(struct tg_state *s, struct ts_ctx *ctx, const size_t *pre, size_t npre)
{
    struct tg_prefill *pf = s->pf;
    size_t nchunks;
    long budget =
        s->chunk_fixed && s->chunk_fixed < s->max_prefill ? s->chunk_fixed : s->max_prefill;
    pf->n =
        fill_chunks(s, ctx, &pf->rows, 0, pre, npre, budget, 0, pf->chunks, s->chunk_req, &nchunks);
    pf->r = &pf->rows;
    pf->n_dec = 0;
    pf->groups = NULL;
    pf->ngroups = 0;
    pf->chunkp = pf->chunks;
    pf->nchunks = nchunks;
    for (size_t k = 0; k < nchunks; k++)
        ((struct tg_seq *)ts_get_user(ctx, s->chunk_req[k]))->pf_k = (int)k;
    ts_counter_add(ctx, "prefill_jobs", 1);
    tg_pf_run(pf, nchunks);
}

/* Gives the prefill thread the decode rows from row `from` on, in the groups from group g on
 * (the rest of this step's: the main thread runs rows 0..from-1 meanwhile). */
static void pf_post_decode(struct tg_state *s, size_t from, size_t g, size_t n_dec)
{
    struct tg_prefill *pf = s->pf;
    pf->view.tok = s->rows.tok + from;
    pf->view.slot = s->rows.slot + from;
    pf->view.pos = s->rows.pos + from;
    pf->r = &pf->view;
    pf->n = pf->n_dec = n_dec - from;
    pf->groups = s->groups + 4 * g;
    pf->ngroups = s->ngroups - g;
    pf->chunkp = NULL;
    pf->nchunks = 0;
    tg_pf_run(pf, 0);
}

/* When the prefill thread's job is done: its requests among this call's take their chunks (each
 * marked in answered: continued or finished). Returns how many there were. */
static size_t pf_collect(struct tg_state *s, struct ts_ctx *ctx, size_t n, unsigned char *answered)
{
    struct tg_prefill *pf = s->pf;
    if (tg_pf_state(pf) != PF_DONE)
        return 0;
    size_t got = 0;
    int64_t fed = 0, ntok = 0;
    for (size_t i = 0; i < n; i++) {
        struct tg_seq *u = ts_get_user(ctx, i);
        if (!u || u->pf_k < 0 || ts_is_cancelled(ctx, i))
            continue; /* a cancelled one lets go of the job in seq_free */
        size_t k = (size_t)u->pf_k;
        u->pf_k = -1;
        answered[i] = 1;
        got++;
        if (pf->rc) {
            ts_set_error(ctx, i, 500, "%s", pf->err);
            continue;
        }
        int64_t took = pf->chunks[3 * k + 2];
        fed += took;
        ntok += take_chunk(ctx, i, took, (const float *)pf->out[0].data + k * VOCAB);
    }
    if (pf->rc && got)
        ts_log(ctx, LOG_LEVEL_ERROR, "textgen: %s", pf->err);
    ts_counter_add(ctx, "prefill_tokens", fed);
    ts_counter_add(ctx, "prefill_thread_tokens", fed);
    ts_counter_add(ctx, "tokens", ntok);
    if (got)
        tg_pf_release(pf, got);
    return got;
}

static void tg_handle(void *state, struct ts_ctx *ctx, size_t n)
{
    struct tg_state *s = state;
    size_t *pre = xmalloc((n ? n : 1) * sizeof(*pre));
    size_t *job = xmalloc((n ? n : 1) * sizeof(*job));
    unsigned char *answered = xcalloc(n ? n : 1, 1);
    size_t npre = 0, n_dec = 0, njob = 0;
    size_t got = s->pf ? pf_collect(s, ctx, n, answered) : 0;
    if (got)
        ts_flush(ctx); /* first tokens: not after this step */
    for (size_t i = 0; i < n; i++) {
        if (answered[i] || ts_is_cancelled(ctx, i))
            continue;
        if (!ts_get_user(ctx, i) && start(ctx, i, s))
            continue;
        struct tg_seq *u = ts_get_user(ctx, i);
        if (u->pf_k >= 0)
            job[njob++] = i;
        else if (u->fed < u->plen)
            pre[npre++] = i;
        else
            s->dec_req[n_dec++] = i; /* one slot each: at most s->slots */
    }
    if (s->pf && !n_dec && !got && njob) {
        /* nothing decodes: the job's prompts are the next tokens */
        tg_pf_wait(s->pf);
        got = pf_collect(s, ctx, n, answered);
    }
    /* prompts are fed in this step when nothing else would wait for them; with a prefill thread,
     * by the thread otherwise */
    int inline_pre = !s->pf || (!n_dec && !got && !njob);
    if (npre > 1)
        qsort_r(pre, npre, sizeof(*pre), by_arrival, ctx);
    if (!inline_pre && npre && tg_pf_state(s->pf) == PF_IDLE)
        pf_post(s, ctx, pre, npre);
    /* the rows: decode rows first, in slot order and cut into groups, then the oldest prompts'
     * chunks within the budget */
    if (n_dec > 1)
        qsort_r(s->dec_req, n_dec, sizeof(*s->dec_req), by_slot, ctx);
    tg_grow_rows(&s->rows,
                 n_dec + (size_t)s->max_prefill); /* a step's prompt tokens: at most that */
    for (size_t k = 0; k < n_dec; k++) {
        struct tg_seq *u = ts_get_user(ctx, s->dec_req[k]);
        s->rows.tok[k] = u->next;
        s->rows.slot[k] = u->slot;
        s->rows.pos[k] = u->ncache;
    }
    double dec_us = tg_plan_groups(s, ctx, n_dec);
    /* the prefill thread, if it has no prompt, takes the later groups of this step */
    size_t rows_a = n_dec, groups_a = s->ngroups;
    if (s->split_decode && s->pf && !inline_pre && tg_pf_state(s->pf) == PF_IDLE &&
        (groups_a = tg_split_groups(s, &rows_a)) < s->ngroups) {
        pf_post_decode(s, rows_a, groups_a, n_dec);
        ts_counter_add(ctx, "split_steps", 1);
    }
    size_t nchunks = 0, n_pre_rows = 0;
    if (inline_pre)
        n_pre_rows =
            fill_chunks(s, ctx, &s->rows, n_dec, pre, npre, tg_prefill_budget(s, n_dec, dec_us),
                        n_dec, s->chunks, s->chunk_req, &nchunks);
    size_t nrows = rows_a + n_pre_rows;
    if (nrows) {
        struct tsh_tensor *out;
        size_t nout;
        char err[512];
        int rc = tg_run_step(s, &s->rows, nrows, rows_a, s->groups, groups_a, s->chunks, nchunks,
                             &out, &nout, err, sizeof(err));
        const float *logits_b = NULL; /* rows rows_a..n_dec-1, from the thread */
        if (rows_a < n_dec) {
            tg_pf_wait(s->pf);
            if (rc == 0 && s->pf->rc) {
                snprintf(err, sizeof(err), "%s", s->pf->err);
                tsh_tensors_free(out, nout);
                rc = -1;
            }
            logits_b = s->pf->rc ? NULL : s->pf->out[0].data;
        }
        if (rc) {
            /* every request of the step fails: the cache may hold half of this step */
            ts_log(ctx, LOG_LEVEL_ERROR, "textgen: %s", err);
            for (size_t k = 0; k < n_dec; k++)
                ts_set_error(ctx, s->dec_req[k], 500, "%s", err);
            for (size_t k = 0; k < nchunks; k++) {
                ts_set_error(ctx, s->chunk_req[k], 500, "%s", err);
                answered[s->chunk_req[k]] = 1;
            }
        } else {
            const float *logits = out[0].data;
            ts_counter_add(ctx, "steps", 1);
            ts_counter_add(ctx, "prefill_tokens", (int64_t)n_pre_rows);
            int64_t ntok = 0;
            for (size_t k = 0; k < n_dec; k++) {
                struct tg_seq *u = ts_get_user(ctx, s->dec_req[k]);
                u->ncache++;
                const float *l = k < rows_a ? logits + k * VOCAB : logits_b + (k - rows_a) * VOCAB;
                int64_t t = textgen_sample(l, VOCAB, u->temperature, u->top_p, &u->rng);
                ntok++;
                if (take_token(ctx, s->dec_req[k], u, t))
                    ts_continue(ctx, s->dec_req[k], 0);
            }
            ntok += take_chunks(ctx, logits, rows_a, s->chunks, s->chunk_req, nchunks);
            for (size_t k = 0; k < nchunks; k++)
                answered[s->chunk_req[k]] = 1;
            ts_counter_add(ctx, "tokens", ntok);
            tsh_tensors_free(out, nout);
        }
        if (rows_a < n_dec)
            tg_pf_release(s->pf, 0);
    }
    /* prompts still waiting, or with the prefill thread, wait for the next step */
    for (size_t k = 0; k < npre; k++)
        if (!answered[pre[k]])
            ts_continue(ctx, pre[k], 0);
    for (size_t k = 0; k < njob; k++)
        if (!answered[job[k]])
            ts_continue(ctx, job[k], 0);
    free(answered);
    free(job);
    free(pre);
}

static void tg_destroy(void *state)
{
    state_free(state);
}

static const struct ts_handler textgen = {
    .abi_version = TS_HANDLER_ABI_VERSION,
    .name = "textgen",
    .flags = TS_HANDLER_CONTINUOUS,
    .init = tg_init,
    .handle = tg_handle,
    .seq_event = NULL,
    .destroy = tg_destroy,
};

const struct ts_handler *ts_handler_textgen(void)
{
    return &textgen;
}
