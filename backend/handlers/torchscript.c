/*
 * torchscript: the built-in handler for TorchScript archives (TorchServe's "TorchScriptHandler").
 *
 * init loads <model_dir>/<serializedFile> through the shim onto the worker's device (the GPU the
 * frontend assigned, else the CPU), optimizes it for inference as handler.optimize says
 * (tsh_freeze; handler.jit_freeze is its older name) and, when model-config.yaml gives the
 * per-sample shape (handler.input_shape: [64]), runs one warm-up forward. With
 * handler.cuda_graph: true (and an input_shape) a model on a GPU has its forward captured as a
 * CUDA graph per batch size and replayed (tsh_cuda_graphs). Each step validates every request on
 * its own first (shape, element types, JSON syntax): a bad request gets its own 400 and leaves
 * the batch. The good ones are concatenated along dim 0 and run as ONE forward; the output rows
 * are split back per request. Without input_shape each request is one sample of whatever shape
 * it has, and requests of equal shape are stacked into one forward.
 */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "handler.h"
#include "builtins.h"
#include "jnum.h"
#include "log.h"
#include "oip.h"
#include "tjson.h"
#include "torch/torch_shim.h"
#include "util.h"

struct tsc_state {
    struct tsh_model *m;
    int has_shape;
    int64_t shape[TSH_MAX_DIMS]; /* per-sample input shape */
    int ndim;
    struct oip_model *oip; /* OIP tensor requests (oip.c) */
};

struct item {
    int ok;
    int grouped;
    struct tjson_input in;
    int64_t rows;
    int single; /* the request is one sample: answer the row itself, not a list of rows */
    int64_t sample[TSH_MAX_DIMS];
    int sdim;
};

/* handler.input_shape as [a, b] (entries .0, .1, ...) or a single integer. */
static int read_input_shape(struct ts_ctx *ctx, struct tsc_state *s)
{
    char key[64];
    for (int i = 0;; i++) {
        snprintf(key, sizeof(key), "handler.input_shape.%d", i);
        const char *v = ts_config_get(ctx, key);
        if (!v)
            break;
        long n;
        if (i == TSH_MAX_DIMS - 1 || ts_parse_long(v, 1, 1L << 40, &n)) {
            ts_set_load_error(ctx,
                              "model-config.yaml: %s: \"%s\" is not a dimension size "
                              "(or more than %d dimensions)",
                              key, v, TSH_MAX_DIMS - 1);
            return -1;
        }
        s->shape[s->ndim++] = n;
    }
    const char *v = ts_config_get(ctx, "handler.input_shape");
    if (!s->ndim && v) {
        long n;
        if (ts_parse_long(v, 1, 1L << 40, &n)) {
            ts_set_load_error(ctx,
                              "model-config.yaml: handler.input_shape: \"%s\" is not a "
                              "list of sizes",
                              v);
            return -1;
        }
        s->shape[s->ndim++] = n;
    }
    s->has_shape = s->ndim > 0;
    if (s->has_shape && tsh_numel(s->shape, s->ndim) < 0) {
        ts_set_load_error(ctx, "model-config.yaml: handler.input_shape has too many elements");
        return -1;
    }
    return 0;
}

/* handler.optimize: inference (the default: torch.jit.optimize_for_inference's passes and
 * ours), freeze (torch.jit.freeze without numeric folding and our passes), none; true and false
 * stand for inference and none. handler.jit_freeze, its older name, keeps its meaning: true is
 * freeze, false none. Both keys may be given only when they agree. 0 = none, else a
 * TSH_OPT_* level; -1 after setting the load error. */
#define TSC_OPT_DEFAULT TSH_OPT_INFERENCE

static const char *config_scalar(struct ts_ctx *ctx, const char *key)
{
    char sub[64];
    const char *v = ts_config_get(ctx, key);
    snprintf(sub, sizeof(sub), "%s.0", key);
    if (!v && ts_config_get(ctx, sub))
        v = "[...]";
    return v;
}

static const char *const level_names[] = {"none", "freeze", "inference"};

static int read_optimize(struct ts_ctx *ctx)
{
    int level = -1, freeze_level = -1, b;
    const char *opt = config_scalar(ctx, "handler.optimize");
    const char *fz = config_scalar(ctx, "handler.jit_freeze");
    if (opt) {
        for (int i = 0; i < 3; i++)
            if (!strcasecmp(opt, level_names[i]))
                level = i;
        if (level < 0 && !ts_parse_bool(opt, &b))
            level = b ? TSH_OPT_INFERENCE : 0;
        if (level < 0) {
            ts_set_load_error(ctx,
                              "model-config.yaml: handler.optimize: \"%s\" is not inference, "
                              "freeze, none, true or false",
                              opt);
            return -1;
        }
    }
    if (fz) {
        if (ts_parse_bool(fz, &b)) {
            ts_set_load_error(
                ctx, "model-config.yaml: handler.jit_freeze: \"%s\" is not true or false", fz);
            return -1;
        }
        freeze_level = b ? TSH_OPT_FREEZE : 0;
    }
    if (level >= 0 && freeze_level >= 0 && level != freeze_level) {
        ts_set_load_error(ctx,
                          "model-config.yaml: handler.optimize: %s and handler.jit_freeze: %s "
                          "disagree (jit_freeze: true is optimize: freeze, false is none)",
                          level_names[level], fz);
        return -1;
    }
    return level >= 0 ? level : freeze_level >= 0 ? freeze_level : TSC_OPT_DEFAULT;
}

/* A module that cannot be optimized is served as loaded, with a warning that says why. */
static void freeze_module(struct ts_ctx *ctx, struct tsh_model *m, int level)
{
    char *err = NULL;
    struct tsh_freeze_info fi;
    int64_t t0 = ts_now_us();
    if (tsh_freeze(m, level, &fi, &err)) {
        ts_log(ctx, LOG_LEVEL_WARN,
               "cannot optimize forward (handler.optimize: %s), serving it "
               "as loaded: %s",
               level_names[level], err);
        free(err);
        return;
    }
    double ms = (double)(ts_now_us() - t0) / 1000.0;
    if (fi.extra_bytes) {
        ts_log(ctx, LOG_LEVEL_INFO,
               "serving forward as loaded: its transposed linear weights would hold %.1f MiB "
               "more (a weight that something else reads too)",
               (double)fi.extra_bytes / (1 << 20));
        return;
    }
    ts_log(ctx, LOG_LEVEL_INFO,
           "froze forward in %.1f ms (handler.optimize: %s): %d linear call(s) with transposed "
           "weights, %.1f MiB of constants, %d product(s) with a matrix-vector path for few "
           "rows, %d operation(s) in place, %d on oneDNN",
           ms, level_names[level], fi.transposed, (double)fi.bytes / (1 << 20), fi.few_rows,
           fi.in_place, fi.onednn);
}

/* What the CUDA graphs did in the last forwards (captures, failures), in the log. */
static void graph_note(struct ts_ctx *ctx, struct tsc_state *s)
{
    char *note = tsh_graph_note(s->m);
    if (note)
        ts_log(ctx, LOG_LEVEL_INFO, "%s", note);
    free(note);
}

/* handler.cuda_graph (default false): one graph per batch size, the first time it is seen, at
 * most twice batchSize of them (16 at least, for requests of several rows). It needs fixed
 * sample shapes (handler.input_shape): refused without. A model that is not on a GPU (a host
 * without one, number_of_gpu=0) or a worker built without CUDA graphs serves eagerly, with a
 * warning that says why. */
static int cuda_graphs(struct ts_ctx *ctx, struct tsc_state *s)
{
    const char *v = ts_config_get(ctx, "handler.cuda_graph");
    int on = 0;
    if (!v)
        return 0;
    if (ts_parse_bool(v, &on)) {
        ts_set_load_error(ctx, "model-config.yaml: handler.cuda_graph: \"%s\" is not true or false",
                          v);
        return -1;
    }
    if (!on)
        return 0;
    if (!s->has_shape) {
        ts_set_load_error(ctx, "model-config.yaml: handler.cuda_graph: true needs "
                               "handler.input_shape (a graph is captured for fixed shapes)");
        return -1;
    }
    int max = ts_batch_size(ctx) * 2 > 16 ? ts_batch_size(ctx) * 2 : 16;
    char *err = NULL;
    if (tsh_cuda_graphs(s->m, max, &err)) {
        ts_log(ctx, LOG_LEVEL_WARN, "handler.cuda_graph: %s; forward runs eagerly", err);
        free(err);
    } else {
        ts_log(ctx, LOG_LEVEL_INFO,
               "handler.cuda_graph: forward captured per batch size (at most "
               "%d graphs)",
               max);
    }
    return 0;
}

static void warm_up(struct ts_ctx *ctx, struct tsc_state *s)
{
    struct tsh_tensor in = {.dtype = TSH_FLOAT32, .ndim = s->ndim + 1};
    in.shape[0] = 1;
    memcpy(in.shape + 1, s->shape, sizeof(int64_t) * (size_t)s->ndim);
    int64_t numel = tsh_numel(in.shape, in.ndim);
    in.nbytes = (size_t)numel * sizeof(float);
    in.data = xcalloc((size_t)numel, sizeof(float));
    struct tsh_tensor *out = NULL;
    size_t nout = 0;
    char *err = NULL;
    int64_t t0 = ts_now_us();
    if (tsh_forward(s->m, &in, 1, &out, &nout, &err)) {
        ts_log(ctx, LOG_LEVEL_WARN, "warm-up forward with input_shape failed: %s", err);
        free(err);
    } else {
        ts_log(ctx, LOG_LEVEL_INFO, "warm-up forward: %.2f ms",
               (double)(ts_now_us() - t0) / 1000.0);
    }
    tsh_tensors_free(out, nout);
    free(in.data);
    graph_note(ctx, s);
}

static int tsc_init(struct ts_ctx *ctx, void **state)
{
    const char *file = ts_serialized_file(ctx);
    if (!*file) {
        ts_set_load_error(ctx, "MANIFEST.json has no model.serializedFile for the torchscript "
                               "handler");
        return -1;
    }
    int level = read_optimize(ctx);
    if (level < 0)
        return -1;
    struct tsc_state *s = xcalloc(1, sizeof(*s));
    if (read_input_shape(ctx, s)) {
        free(s);
        return -1;
    }
    char *path = xasprintf("%s/%s", ts_model_dir(ctx), file);
    char *err = NULL;
    int64_t t0 = ts_now_us();
    s->m = tsh_load(path, ts_gpu_id(ctx), &err);
    if (!s->m) {
        ts_set_load_error(ctx, "cannot load %s: %s", file, err);
        free(err);
        free(path);
        free(s);
        return -1;
    }
    char dev[16] = "cpu";
    if (tsh_model_device(s->m) >= 0)
        snprintf(dev, sizeof(dev), "cuda:%d", tsh_model_device(s->m));
    ts_log(ctx, LOG_LEVEL_INFO, "loaded %s onto %s in %.1f ms", path, dev,
           (double)(ts_now_us() - t0) / 1000.0);
    free(path);
    if (level)
        freeze_module(ctx, s->m, level);
    else
        ts_log(ctx, LOG_LEVEL_INFO, "serving forward as loaded (handler.optimize: none)");
    if (cuda_graphs(ctx, s)) {
        tsh_model_free(s->m);
        free(s);
        return -1;
    }
    char **names = NULL;
    size_t nnames = 0;
    if (!tsh_forward_arg_names(s->m, &names, &nnames, &err)) {
        struct buf b;
        buf_init(&b);
        for (size_t i = 0; i < nnames; i++)
            buf_printf(&b, "%s%s", i ? ", " : "", names[i]);
        ts_log(ctx, LOG_LEVEL_INFO, "forward(%s)", b.data ? (char *)b.data : "");
        buf_free(&b);
        tsh_names_free(names, nnames);
    } else {
        free(err);
    }
    if (!(s->oip = oip_model_new(ctx, s->m))) {
        tsh_model_free(s->m);
        free(s);
        return -1;
    }
    if (s->has_shape)
        warm_up(ctx, s);
    *state = s;
    return 0;
}

static int shape_eq(const int64_t *a, int na, const int64_t *b, int nb)
{
    return na == nb && !memcmp(a, b, sizeof(int64_t) * (size_t)na);
}

/* Decides the item's rows against the model's per-sample shape. */
static int fit_shape(const struct tsc_state *s, struct item *it, char *err, size_t errlen)
{
    const struct tjson_input *in = &it->in;
    if (!s->has_shape) {
        it->rows = 1;
        it->single = 1;
        it->sdim = in->ndim;
        memcpy(it->sample, in->shape, sizeof(int64_t) * (size_t)in->ndim);
        return 0;
    }
    it->sdim = s->ndim;
    memcpy(it->sample, s->shape, sizeof(int64_t) * (size_t)s->ndim);
    if (shape_eq(in->shape, in->ndim, s->shape, s->ndim)) {
        it->rows = 1;
        it->single = 1;
        return 0;
    }
    if (in->ndim == s->ndim + 1 && shape_eq(in->shape + 1, s->ndim, s->shape, s->ndim)) {
        it->rows = in->shape[0];
        return 0;
    }
    char got[160], want[160];
    tjson_format_shape(got, sizeof(got), in->shape, in->ndim);
    tjson_format_shape(want, sizeof(want), s->shape, s->ndim);
    snprintf(err, errlen, "input shape %s does not match the model input %s", got, want);
    return -1;
}

static int parse_request(struct ts_ctx *ctx, size_t i, const struct tsc_state *s, struct item *it,
                         char *err, size_t errlen)
{
    size_t len = 0;
    const char *ctype = NULL;
    const char *body = ts_get_body(ctx, i, &len, &ctype);
    if (!ctype || !*ctype)
        ctype = ts_get_header(ctx, i, "content-type");
    if (ctype && strstr(ctype, "octet-stream")) {
        int64_t shape[TSH_MAX_DIMS];
        int ndim = 0;
        const char *xs = ts_get_header(ctx, i, "x-shape");
        if (xs) {
            if (tjson_parse_shape(xs, shape, &ndim, err, errlen))
                return -1;
        } else if (s->has_shape) {
            int64_t per = tsh_numel(s->shape, s->ndim);
            int64_t numel = (int64_t)(len / sizeof(float));
            if (len % sizeof(float) == 0 && numel % per == 0 && numel > per) {
                shape[0] = numel / per;
                memcpy(shape + 1, s->shape, sizeof(int64_t) * (size_t)s->ndim);
                ndim = s->ndim + 1;
            } else {
                memcpy(shape, s->shape, sizeof(int64_t) * (size_t)s->ndim);
                ndim = s->ndim;
            }
        } else {
            snprintf(err, errlen,
                     "a raw float32 body needs an X-Shape header (e.g. X-Shape: 2,64)");
            return -1;
        }
        if (tjson_parse_raw(body, body ? len : 0, shape, ndim, &it->in, err, errlen))
            return -1;
    } else if (tjson_parse_json(body, body ? len : 0, TSH_MAX_DIMS - 1, &it->in, err, errlen)) {
        return -1;
    }
    if (fit_shape(s, it, err, errlen)) {
        tjson_input_free(&it->in);
        return -1;
    }
    return 0;
}

/* One forward over the good items whose sample shape equals items[first]'s. */
static void run_group(struct ts_ctx *ctx, struct tsc_state *s, struct item *items, size_t n,
                      size_t first)
{
    struct item *lead = &items[first];
    int64_t per = tsh_numel(lead->sample, lead->sdim);
    int64_t total = 0;
    for (size_t i = first; i < n; i++)
        if (items[i].ok && !items[i].grouped &&
            shape_eq(items[i].sample, items[i].sdim, lead->sample, lead->sdim)) {
            items[i].grouped = 2; /* member of this group */
            total += items[i].rows;
        }
    struct tsh_tensor in = {.dtype = TSH_FLOAT32, .ndim = lead->sdim + 1};
    in.shape[0] = total;
    memcpy(in.shape + 1, lead->sample, sizeof(int64_t) * (size_t)lead->sdim);
    in.nbytes = (size_t)(total * per) * sizeof(float);
    in.data = xmalloc(in.nbytes ? in.nbytes : 1);
    size_t off = 0;
    for (size_t i = first; i < n; i++)
        if (items[i].grouped == 2) {
            size_t nb = (size_t)(items[i].rows * per) * sizeof(float);
            memcpy((char *)in.data + off, items[i].in.data, nb);
            off += nb;
        }

    struct tsh_tensor *out = NULL;
    size_t nout = 0;
    char *err = NULL;
    char msg[512] = "";
    int64_t t0 = ts_now_us();
    int rc = tsh_forward(s->m, &in, 1, &out, &nout, &err);
    /* each response of the group carries it (x-ts-worker-forward-us), so a client can tell the
     * model's own time from the serving overhead */
    char fwd_us[JNUM_MAX + 1];
    fwd_us[jnum_i64(fwd_us, ts_now_us() - t0)] = '\0';
    if (rc) {
        snprintf(msg, sizeof(msg), "%s", err);
        free(err);
    } else {
        ts_log(ctx, LOG_LEVEL_DEBUG, "forward: %lld row(s), %s us", (long long)total, fwd_us);
        if (!nout)
            snprintf(msg, sizeof(msg), "the model returned no tensor");
        for (size_t k = 0; k < nout && !msg[0]; k++)
            if (out[k].ndim < 1 || out[k].shape[0] != total) {
                char sh[160];
                tjson_format_shape(sh, sizeof(sh), out[k].shape, out[k].ndim);
                snprintf(msg, sizeof(msg),
                         "model output %zu has shape %s: expected %lld row(s) in dim 0", k, sh,
                         (long long)total);
            }
    }
    free(in.data);

    int64_t row = 0;
    struct buf b;
    buf_init(&b);
    for (size_t i = first; i < n; i++) {
        if (items[i].grouped != 2)
            continue;
        items[i].grouped = 1;
        ts_set_header(ctx, i, "x-ts-worker-forward-us", fwd_us);
        if (msg[0]) {
            ts_set_error(ctx, i, 500, "%s", msg);
            continue;
        }
        buf_reset(&b);
        if (nout > 1)
            buf_put_u8(&b, '[');
        for (size_t k = 0; k < nout; k++) {
            if (k)
                buf_put(&b, ", ", 2);
            tjson_write_rows(&b, &out[k], row, items[i].rows, items[i].single);
        }
        if (nout > 1)
            buf_put_u8(&b, ']');
        row += items[i].rows;
        ts_set_response(ctx, i, b.data, b.len);
        ts_set_content_type(ctx, i, "application/json");
    }
    buf_free(&b);
    tsh_tensors_free(out, nout);
}

static void tsc_handle(void *state, struct ts_ctx *ctx, size_t n)
{
    struct tsc_state *s = state;
    struct item *items = xcalloc(n ? n : 1, sizeof(*items));
    char err[512];
    /* OIP tensor requests (application/x-ts-oip) are answered by oip.c */
    size_t *oip_idx = xcalloc(n ? n : 1, sizeof(*oip_idx)), n_oip = 0;
    for (size_t i = 0; i < n; i++)
        if (oip_is_request(ctx, i)) {
            oip_idx[n_oip++] = i;
            items[i].grouped = 1;
        }
    if (n_oip)
        oip_handle(ctx, s->oip, s->m, oip_idx, n_oip);
    free(oip_idx);
    for (size_t i = 0; i < n; i++) {
        if (ts_is_cancelled(ctx, i) || items[i].grouped)
            continue;
        if (parse_request(ctx, i, s, &items[i], err, sizeof(err))) {
            ts_log(ctx, LOG_LEVEL_DEBUG, "request %s: %s", ts_request_id(ctx, i), err);
            ts_set_error(ctx, i, 400, "%s", err);
            continue;
        }
        items[i].ok = 1;
    }
    for (size_t i = 0; i < n; i++)
        if (items[i].ok && !items[i].grouped)
            run_group(ctx, s, items, n, i);
    for (size_t i = 0; i < n; i++)
        tjson_input_free(&items[i].in);
    free(items);
    graph_note(ctx, s);
}

static void tsc_destroy(void *state)
{
    struct tsc_state *s = state;
    oip_model_free(s->oip);
    tsh_model_free(s->m);
    free(s);
}

static const struct ts_handler torchscript = {
    .abi_version = TS_HANDLER_ABI_VERSION,
    .name = "torchscript",
    .flags = 0,
    .init = tsc_init,
    .handle = tsc_handle,
    .seq_event = NULL,
    .destroy = tsc_destroy,
};

const struct ts_handler *ts_handler_torchscript(void)
{
    return &torchscript;
}
