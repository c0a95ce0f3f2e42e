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
 *    (tg_split_groups): more tokens/s on two cores, shorter steps. While the thread has a
 *    prompt that should be done within the step (by the measured costs), the main thread runs
 *    the two parts one after the other, and between them hands out the prompt's first token if
 *    its job is done and gives the thread the next waiting prompt (seq steps). With nothing
 *    decoding a prompt's step runs on handler.prefill_cores BLAS threads (default 1;
 *    tsh_blas_threads), as plain PyTorch runs it.
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
 * prefill_thread_tokens by the thread, in prefill_jobs steps), prefill_wide_steps (steps on
 * prefill_cores BLAS threads), split_steps, seq_steps, slots_in_use (which
 * goes down again when a request leaves, whether it finished or its client went away),
 * decode_groups, kv_read (slot positions the decode groups read, per layer) and kv_one (what one
 * group over the decoding slots would have read); and per request, on its first response:
 * wait_us, prefill_us and collect_us (take_chunk).
 *
 * On the CPU the model's linears run on XNNPACK (handler.xnnpack, default true where it can:
 * tsh_xnnpack, textgen_model.c), the prefill thread on a copy of its own.
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
    uint64_t seen_us, fed_us; /* when it came to the handler; when its first chunk went to a step */
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

static void set_num_header(struct ts_ctx *ctx, size_t i, const char *key, long v)
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
    set_num_header(ctx, i, "x-ts-completion-tokens", u->generated);
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
    uint64_t seen = ts_now_us();
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
    set_num_header(ctx, i, "x-ts-prompt-tokens", (long)p.plen);
    if (max_new == 0) {
        set_num_header(ctx, i, "x-ts-completion-tokens", 0);
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
    u->seen_us = seen;
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
        if (!u->fed_us)
            u->fed_us = ts_now_us();
        for (int64_t t = 0; t < take; t++, nrows++) {
            r->tok[nrows] = u->prompt[u->fed + t];
            r->slot[nrows] = u->slot;
            r->pos[nrows] = u->fed + t;
        }
        left -= take;
    }
    return nrows - from;
}

/* Request i's chunk of `took` prompt tokens is in the cache, since done_us; its prompt fed, it
 * samples its first token from logits (its chunk's row). 1 when it took a token. Its first
 * response says where its time to first token went (debug headers, for llm_bench): from the
 * handler's first sight of it to its first chunk's step (wait), from there to the end of its
 * last chunk's (prefill), and from there to now (collect). */
static int take_chunk(struct ts_ctx *ctx, size_t i, int64_t took, const float *logits,
                      uint64_t done_us)
{
    struct tg_seq *u = ts_get_user(ctx, i);
    u->fed += took;
    u->ncache += took;
    if (u->fed < u->plen) {
        ts_continue(ctx, i, 0);
        return 0;
    }
    set_num_header(ctx, i, "x-ts-worker-wait_us", (long)(u->fed_us - u->seen_us));
    set_num_header(ctx, i, "x-ts-worker-prefill_us", (long)(done_us - u->fed_us));
    set_num_header(ctx, i, "x-ts-worker-collect_us", (long)(ts_now_us() - done_us));
    int64_t t = textgen_sample(logits, VOCAB, u->temperature, u->top_p, &u->rng);
    if (take_token(ctx, i, u, t))
        ts_continue(ctx, i, 0);
    return 1;
}

/* The prompts' chunks a step that ended at done gave (logits: one row per chunk after the n_dec
 * decode rows). Returns the tokens. */
static int64_t take_chunks(struct ts_ctx *ctx, const float *logits, size_t n_dec,
                           const int64_t *chunks, const size_t *chunk_req, size_t nchunks,
                           uint64_t done)
{
    int64_t ntok = 0;
    for (size_t k = 0; k < nchunks; k++)
        ntok +=
            take_chunk(ctx, chunk_req[k], chunks[3 * k + 2], logits + (n_dec + k) * VOCAB, done);
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
    s->pf_end_us = (double)ts_now_us() + s->step_us + s->tok_us * (double)pf->n;
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
        ntok += take_chunk(ctx, i, took, (const float *)pf->out[0].data + k * VOCAB, pf->done_us);
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
    /* the prefill thread, if it has no prompt, takes the later groups of this step; if it has
     * one that should be done within this step (by the measured costs), this thread runs them
     * after the others and hands out the prompt's first token in between if it is (seq: the
     * parts' second fixed cost buys that) */
    size_t rows_a = n_dec, groups_a = s->ngroups;
    int seq = 0;
    if (s->split_decode && s->pf && !inline_pre &&
        (groups_a = tg_split_groups(s, &rows_a)) < s->ngroups) {
        if (tg_pf_state(s->pf) == PF_IDLE) {
            pf_post_decode(s, rows_a, groups_a, n_dec);
            ts_counter_add(ctx, "split_steps", 1);
        } else if (s->pf_end_us <=
                   (double)ts_now_us() + s->step_us + s->row_us * (double)n_dec + dec_us) {
            seq = 1;
            ts_counter_add(ctx, "seq_steps", 1);
        } else {
            rows_a = n_dec;
            groups_a = s->ngroups;
        }
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
        /* prompts while nothing decodes: on prefill_cores BLAS threads, when that is more than
         * the BLAS has (nothing else computes meanwhile) */
        int wide = !n_dec && n_pre_rows && s->pre_cores > 1 &&
                   (!s->pf || tg_pf_state(s->pf) != PF_RUN) && tsh_blas_threads(0) < s->pre_cores;
        int had = wide ? tsh_blas_threads(s->pre_cores) : 0;
        int rc = tg_run_step(s, s->m, &s->rows, nrows, rows_a, s->groups, groups_a, s->chunks,
                             nchunks, &out, &nout, err, sizeof(err));
        if (wide) {
            tsh_blas_threads(had);
            ts_counter_add(ctx, "prefill_wide_steps", 1);
        }
        const float *logits_b = NULL; /* rows rows_a..n_dec-1, from the thread or seq */
        struct tsh_tensor *out_b = NULL;
        size_t nout_b = 0;
        if (seq && rc == 0) {
            if (pf_collect(s, ctx, n, answered)) {
                ts_flush(ctx);
                /* the thread is free: the next job, of the prompts not yet fed, oldest first (a
                 * prompt the job fed in part was answered, continued, and goes on from there) */
                size_t *waiting = xmalloc((njob + npre + 1) * sizeof(*waiting)), left = 0;
                for (size_t k = 0; k < njob + npre; k++) {
                    size_t i = k < njob ? job[k] : pre[k - njob];
                    struct tg_seq *u = ts_get_user(ctx, i);
                    if (!ts_is_cancelled(ctx, i) && u->pf_k < 0 && u->fed < u->plen)
                        waiting[left++] = i;
                }
                if (left && tg_pf_state(s->pf) == PF_IDLE)
                    pf_post(s, ctx, waiting, left);
                free(waiting);
            }
            struct tg_rows b = {s->rows.tok + rows_a, s->rows.slot + rows_a, s->rows.pos + rows_a,
                                0};
            rc = tg_run_step(s, s->m, &b, n_dec - rows_a, n_dec - rows_a, s->groups + 4 * groups_a,
                             s->ngroups - groups_a, NULL, 0, &out_b, &nout_b, err, sizeof(err));
            if (rc)
                tsh_tensors_free(out, nout);
            else
                logits_b = out_b[0].data;
        } else if (rows_a < n_dec && !seq) {
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
            uint64_t done = ts_now_us(); /* the prompts' chunks' end, before any sampling */
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
            ntok += take_chunks(ctx, logits, rows_a, s->chunks, s->chunk_req, nchunks, done);
            for (size_t k = 0; k < nchunks; k++)
                answered[s->chunk_req[k]] = 1;
            ts_counter_add(ctx, "tokens", ntok);
            tsh_tensors_free(out, nout);
            tsh_tensors_free(out_b, nout_b);
        }
        if (rows_a < n_dec && !seq)
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
    tg_state_free(state);
}

static const struct ts_handler textgen = {
    .abi_version = TS_HANDLER_ABI_VERSION,
    .name = "textgen",
    .flags = TS_HANDLER_CONTINUOUS,
    .init = tg_load,
    .handle = tg_handle,
    .seq_event = NULL,
    .destroy = tg_destroy,
};

const struct ts_handler *ts_handler_textgen(void)
{
    return &textgen;
}
