/*
 * textgen_model.c: the textgen handler's model: its load (tg_load: the handler.* keys, the
 * TorchScript module, its KV cache, the cost of a step, the prefill thread), the calls of its
 * methods (step, clear_slot) and the state's end. backend/handlers/textgen.c documents the
 * handler.
 */
#include <stdlib.h>
#include <string.h>

#include "handler.h"
#include "builtins.h"
#include "log.h"
#include "textgen_int.h"
#include "textgen_req.h"
#include "torch/torch_shim.h"
#include "util.h"

#define DEFAULT_MAX_NEW 64
#define DEFAULT_MAX_PREFILL 512
#define PREFILL_CORES_MAX 256

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
int tg_run_step(struct tg_state *s, struct tsh_model *m, const struct tg_rows *r, size_t n,
                size_t n_dec, const int64_t *groups, size_t ngroups, const int64_t *chunks,
                size_t nchunks, struct tsh_tensor **out, size_t *nout, char *err, size_t errlen)
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
    if (tsh_call(m, "step", a, 6, out, nout, &e)) {
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

void tg_state_free(struct tg_state *s)
{
    tg_pf_stop(s);
    tsh_value_free(s->cache);
    tsh_model_free(s->m);
    tsh_model_free(s->m_pf);
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

/* handler.xnnpack (default true on a CPU): the model's linears on XNNPACK (tsh_xnnpack). Where
 * it was asked for, a failure fails the load; by default the model stays as loaded, with a
 * warning. */
static int use_xnnpack(struct tg_state *s, const char *file, const char *const *methods, size_t n,
                       int asked)
{
    int linears;
    char *e = NULL;
    if (tsh_xnnpack(s->m, methods, n, &linears, &e)) {
        if (asked)
            ts_set_load_error(s->ctx, "model-config.yaml: handler.xnnpack: true: %s: %s", file, e);
        else
            ts_log(s->ctx, LOG_LEVEL_WARN,
                   "textgen: %s: the linears stay as loaded (handler.xnnpack): %s", file, e);
        free(e);
        return asked ? -1 : 0;
    }
    s->xnnpack_linears = linears;
    ts_log(s->ctx, LOG_LEVEL_INFO, "textgen: %d linears run on XNNPACK (handler.xnnpack)", linears);
    return 0;
}

/* The prefill thread's own copy of the model, its linears on XNNPACK too: an XNNPACK operator
 * keeps the pointers of the call it runs, so two threads may not run one at once. NULL after
 * setting the load error (whether handler.xnnpack was set or not: the first copy is rewritten
 * already, and this is a second load of the same file, which failing means memory ran out). */
static struct tsh_model *pf_model(struct tg_state *s, const char *file, const char *const *methods,
                                  size_t n)
{
    struct tsh_model *m = ts_builtin_load(s->ctx, file);
    if (!m)
        return NULL;
    int linears = 0;
    char *e = NULL;
    if (!tsh_xnnpack(m, methods, n, &linears, &e) && linears == s->xnnpack_linears)
        return m;
    ts_set_load_error(s->ctx, "%s: the prefill thread's copy (handler.xnnpack): %s", file,
                      e ? e : "other linears than the first copy's");
    free(e);
    tsh_model_free(m);
    return NULL;
}

int tg_load(struct ts_ctx *ctx, void **state)
{
    const char *file = ts_serialized_file(ctx);
    if (!*file) {
        ts_set_load_error(ctx, "MANIFEST.json has no model.serializedFile for textgen");
        return -1;
    }
    struct tg_state *s = xcalloc(1, sizeof(*s));
    s->ctx = ctx;
    s->xnnpack_linears = -1;
    s->slots = ts_batch_size(ctx);
    s->max_new_default = ts_config_get_long(ctx, "handler.max_new_tokens", DEFAULT_MAX_NEW);
    s->chunk_fixed = ts_config_get_long(ctx, "handler.prefill_chunk", 0);
    s->max_prefill = ts_config_get_long(ctx, "handler.max_prefill_tokens", DEFAULT_MAX_PREFILL);
    long want_ctx = ts_config_get_long(ctx, "handler.context_length", 0);
    long cores = 1;
    const char *cores_v = ts_config_get(ctx, "handler.prefill_cores");
    if (cores_v && ts_parse_long(cores_v, 0, PREFILL_CORES_MAX + 1L, &cores))
        cores = 0; /* refused below */
    static const char *const flags[] = {"handler.decode_groups", "handler.prefill_thread",
                                        "handler.split_decode", "handler.xnnpack"};
    int flag[4] = {1, 1, 0, -1}; /* xnnpack: -1 unset (on where it can be) */
    for (size_t k = 0; k < 4; k++) {
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
    if (cores < 1 || cores > PREFILL_CORES_MAX) {
        ts_set_load_error(ctx,
                          "model-config.yaml: handler.prefill_cores must be an integer from 1 "
                          "to %d",
                          PREFILL_CORES_MAX);
        free(s);
        return -1;
    }
    s->pre_cores = (int)cores;
    if (s->max_new_default < 0 || s->max_new_default > TEXTGEN_MAX_NEW_LIMIT ||
        s->chunk_fixed < 0 || s->max_prefill < 1 || want_ctx < 0) {
        ts_set_load_error(ctx, "handler.max_new_tokens, handler.prefill_chunk, "
                               "handler.max_prefill_tokens and handler.context_length must be "
                               "non-negative integers (max_prefill_tokens at least 1)");
        free(s);
        return -1;
    }
    if (!(s->m = ts_builtin_load(ctx, file))) {
        free(s);
        return -1;
    }
    char *e = NULL;
    static const char *const need[] = {"new_cache", "step", "context_length", "clear_slot"};
    for (size_t i = 0; i < 3; i++)
        if (!tsh_has_method(s->m, need[i])) {
            ts_set_load_error(ctx,
                              "%s: the model has no method %s(): textgen needs new_cache, step "
                              "and context_length (scripts/models/tiny_gpt/model.py)",
                              file, need[i]);
            goto fail;
        }
    s->has_clear = tsh_has_method(s->m, "clear_slot");
    size_t nkeep = 3 + (size_t)s->has_clear; /* the methods textgen calls */
    int on_gpu = tsh_model_device(s->m) >= 0;
    if (!on_gpu && flag[3] > 0 && cores > 1) {
        ts_set_load_error(ctx,
                          "model-config.yaml: handler.prefill_cores: %ld widens the BLAS's "
                          "products, and with handler.xnnpack: true the linears are not "
                          "on the BLAS: set one of them",
                          cores);
        goto fail;
    }
    /* unset, XNNPACK runs the linears where nothing asks for the BLAS's */
    if (!on_gpu && (flag[3] > 0 || (flag[3] < 0 && cores == 1)) &&
        use_xnnpack(s, file, need, nkeep, flag[3] > 0))
        goto fail;
    if (!on_gpu && flag[3] < 0 && cores > 1)
        ts_log(ctx, LOG_LEVEL_INFO,
               "textgen: the linears stay on the BLAS, whose products handler.prefill_cores: %ld "
               "widens (handler.xnnpack)",
               cores);
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
    s->chunks = xmalloc((size_t)s->slots * 3 * sizeof(*s->chunks));
    s->chunk_req = xmalloc((size_t)s->slots * sizeof(*s->chunk_req));
    s->dec_req = xmalloc((size_t)s->slots * sizeof(*s->dec_req));
    s->groups = xmalloc((size_t)s->slots * 4 * sizeof(*s->groups));
    s->best = xmalloc((size_t)s->slots * sizeof(*s->best));
    s->first = xmalloc((size_t)s->slots * sizeof(*s->first));
    /* on a GPU the BLAS does not run the model */
    if (on_gpu)
        s->pre_cores = 1;
    else if (cores > 1 && tsh_blas_threads(0) < 0) {
        ts_set_load_error(ctx,
                          "model-config.yaml: handler.prefill_cores: %ld needs a BLAS whose "
                          "threads can be set while the worker runs (OpenBLAS); this "
                          "libtorch's cannot: set it to 1",
                          cores);
        goto fail;
    }
    if (tg_calibrate(s, err, sizeof(err))) {
        ts_set_load_error(ctx, "%s: %s", file, err);
        goto fail;
    }
    /* on a GPU the thread would run on another CUDA stream than the worker's (the current
     * stream is per thread): prompts are fed in the steps there */
    if (flag[1] && on_gpu)
        ts_log(ctx, LOG_LEVEL_INFO,
               "textgen: prompts are fed in the decode steps on a GPU "
               "(handler.prefill_thread%s applies on the CPU)",
               s->split_decode ? " and handler.split_decode" : "");
    else if (flag[1] && s->xnnpack_linears >= 0 && !(s->m_pf = pf_model(s, file, need, nkeep))) {
        goto fail;
    } else if (flag[1] && tg_pf_start(s, err, sizeof(err))) {
        ts_set_load_error(ctx, "%s", err);
        goto fail;
    }
    ts_log(ctx, LOG_LEVEL_INFO,
           "textgen: %d slots of %lld positions, KV cache %.1f MB (%s); a step costs %.0f us, "
           "plus %.0f us per decode row, %.0f us per decode group%s and %.1f us per 1000 slot "
           "positions it reads, and %.0f us per prompt token; prompts fed %s; a prompt fed while "
           "nothing decodes runs on %d BLAS thread%s (handler.prefill_cores%s)",
           s->slots, (long long)s->ctx_len, (double)tsh_value_nbytes(s->cache) / 1048576.0,
           s->has_clear ? "touched as slots are first used" : "as new_cache made it", s->step_us,
           s->row_us, s->group_us, s->split ? "" : " (one group: handler.decode_groups false)",
           s->pos_us * 1000, s->tok_us,
           !s->pf            ? "in the decode steps"
           : s->split_decode ? "by a thread of their own while the batch decodes, which also runs "
                               "part of a decode step when it has none (split_decode)"
                             : "by a thread of their own while the batch decodes",
           s->pre_cores, s->pre_cores > 1 ? "s" : "",
           on_gpu && cores > 1 ? ": it applies on the CPU" : "");
    if (on_gpu && flag[3] > 0)
        ts_log(ctx, LOG_LEVEL_INFO, "textgen: handler.xnnpack applies on the CPU");
    *state = s;
    return 0;
fail:
    tg_state_free(s);
    return -1;
}
