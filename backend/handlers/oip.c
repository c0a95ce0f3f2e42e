/*
 * oip (worker side): see oip.h. Each request is checked on its own first (payload, names,
 * datatypes, shapes against the declared tensors): a bad one gets its own 400 and leaves the
 * step. The good ones are grouped by signature and each group runs as one forward; when a model
 * does not keep the batch dimension (an output without one row per input row), a group falls back
 * to one forward per request.
 */
#include "oip.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "handler.h"
#include "jnum.h"
#include "log.h"
#include "oip_wire.h"
#include "util.h"

struct decl {
    char *name;
    int dtype; /* enum oip_dtype, -1 = any */
    int64_t shape[OIP_MAX_DIMS];
    int ndim; /* -1 = any shape */
};

struct oip_model {
    struct decl *in, *out;
    size_t n_in, n_out;
    char **args; /* forward()'s argument names */
    size_t n_args;
};

struct oreq {
    size_t idx;
    int ok;
    json_t *hdr; /* the payload header through jansson, or NULL: */
    char *hbuf;  /* read by oip_wire_scan: its copy, which names and outs point into */
    const char *outs[OIP_MAX_TENSORS]; /* fast scan: the outputs asked for */
    size_t nouts;
    struct oip_tensor t[OIP_MAX_TENSORS];
    size_t nt;
    size_t order[OIP_MAX_TENSORS]; /* forward argument p is tensor order[p] */
    size_t nargs;
    int64_t rows; /* dim 0 shared by every input, -1 if they differ (no batching) */
    int grouped;
};

static int to_tsh(int dtype)
{
    switch (dtype) {
    case OIP_FP32:
        return TSH_FLOAT32;
    case OIP_FP64:
        return TSH_FLOAT64;
    case OIP_FP16:
        return TSH_FLOAT16;
    case OIP_BF16:
        return TSH_BFLOAT16;
    case OIP_INT64:
        return TSH_INT64;
    case OIP_INT32:
        return TSH_INT32;
    case OIP_INT16:
        return TSH_INT16;
    case OIP_INT8:
        return TSH_INT8;
    case OIP_UINT8:
        return TSH_UINT8;
    case OIP_BOOL:
        return TSH_BOOL;
    default:
        return -1;
    }
}

static int from_tsh(int dtype)
{
    for (int d = 0; d < OIP_DTYPE_COUNT; d++)
        if (to_tsh(d) == dtype)
            return d;
    return -1;
}

/* ---------------------------------------------------------------- declared tensors */

static int read_decl(struct ts_ctx *ctx, const char *key, struct decl **out, size_t *n)
{
    char path[128];
    for (int i = 0;; i++) {
        snprintf(path, sizeof(path), "handler.%s.%d.name", key, i);
        const char *name = ts_config_get(ctx, path);
        if (!name)
            return 0;
        *out = xrealloc(*out, sizeof(**out) * (size_t)(i + 1));
        struct decl *d = &(*out)[i];
        memset(d, 0, sizeof(*d));
        d->name = xstrdup(name);
        d->dtype = -1;
        d->ndim = -1;
        (*n)++;
        snprintf(path, sizeof(path), "handler.%s.%d.datatype", key, i);
        const char *dt = ts_config_get(ctx, path);
        if (dt && (d->dtype = oip_dtype_from_name(dt)) < 0) {
            ts_set_load_error(ctx, "model-config.yaml: %s: unknown datatype \"%s\"", path, dt);
            return -1;
        }
        for (int k = 0;; k++) {
            snprintf(path, sizeof(path), "handler.%s.%d.shape.%d", key, i, k);
            const char *v = ts_config_get(ctx, path);
            if (!v)
                break;
            long x;
            if (k == OIP_MAX_DIMS || ts_parse_long(v, -1, 1L << 40, &x)) {
                ts_set_load_error(ctx, "model-config.yaml: %s: \"%s\" is not a size (or -1)", path,
                                  v);
                return -1;
            }
            d->ndim = k + 1;
            d->shape[k] = x;
        }
    }
}

static void decl_free(struct decl *d, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(d[i].name);
    free(d);
}

void oip_model_free(struct oip_model *om)
{
    if (!om)
        return;
    decl_free(om->in, om->n_in);
    decl_free(om->out, om->n_out);
    tsh_names_free(om->args, om->n_args);
    free(om);
}

struct oip_model *oip_model_new(struct ts_ctx *ctx, struct tsh_model *m)
{
    struct oip_model *om = xcalloc(1, sizeof(*om));
    if (read_decl(ctx, "inputs", &om->in, &om->n_in) ||
        read_decl(ctx, "outputs", &om->out, &om->n_out)) {
        oip_model_free(om);
        return NULL;
    }
    char *err = NULL;
    if (tsh_forward_arg_names(m, &om->args, &om->n_args, &err)) {
        ts_log(ctx, LOG_LEVEL_WARN, "forward() argument names unknown: %s", err);
        free(err);
        om->args = NULL;
        om->n_args = 0;
    }
    return om;
}

int oip_is_request(struct ts_ctx *ctx, size_t idx)
{
    const char *ctype = NULL;
    ts_get_body(ctx, idx, NULL, &ctype);
    return ctype && (!strcmp(ctype, OIP_WIRE_CTYPE) || !strcmp(ctype, OIP_WIRE_META_CTYPE));
}

static json_t *decl_json(const struct decl *d)
{
    json_t *shape = json_array();
    for (int k = 0; k < d->ndim; k++)
        json_array_append_new(shape, json_integer(d->shape[k]));
    if (d->ndim < 0)
        json_array_append_new(shape, json_integer(-1));
    return json_pack("{s:s, s:s, s:o}", "name", d->name, "datatype",
                     d->dtype >= 0 ? oip_dtype_name(d->dtype) : "FP32", "shape", shape);
}

/* Metadata: the declared tensors, else forward()'s argument names (the schema has no dtypes or
 * shapes: FP32 and [-1] are what /predictions assumes too). */
static void metadata(struct ts_ctx *ctx, const struct oip_model *om, size_t idx)
{
    json_t *ins = json_array(), *outs = json_array();
    for (size_t i = 0; i < om->n_in; i++)
        json_array_append_new(ins, decl_json(&om->in[i]));
    for (size_t i = 0; !om->n_in && i < om->n_args; i++) {
        struct decl d = {.name = om->args[i], .dtype = -1, .ndim = -1};
        json_array_append_new(ins, decl_json(&d));
    }
    for (size_t i = 0; i < om->n_out; i++)
        json_array_append_new(outs, decl_json(&om->out[i]));
    json_t *o = json_pack("{s:o, s:o}", "inputs", ins, "outputs", outs);
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    ts_set_response(ctx, idx, s, strlen(s));
    ts_set_content_type(ctx, idx, "application/json");
    free(s);
}

/* ---------------------------------------------------------------- requests */

static const char *arg_name(const struct oip_model *om, size_t p)
{
    if (om->n_in)
        return p < om->n_in ? om->in[p].name : "?";
    return p < om->n_args ? om->args[p] : "?";
}

static void names_list(const struct oip_model *om, char *out, size_t n)
{
    size_t cnt = om->n_in ? om->n_in : om->n_args, k = 0;
    out[0] = '\0';
    for (size_t i = 0; i < cnt && k < n; i++)
        k += (size_t)snprintf(out + k, n - k, "%s%s", i ? ", " : "", arg_name(om, i));
}

/* Inputs to forward() arguments: by name when every name is known, else by position. */
static int map_inputs(const struct oip_model *om, struct oreq *r, char *err, size_t errlen)
{
    size_t cnt = om->n_in ? om->n_in : om->n_args;
    char names[256];
    int by_name = cnt > 0;
    for (size_t k = 0; k < r->nt && by_name; k++) {
        int found = 0;
        for (size_t p = 0; p < cnt && !found; p++)
            found = !strcmp(r->t[k].name, arg_name(om, p));
        by_name = found;
    }
    if (by_name) {
        int filled[OIP_MAX_TENSORS] = {0};
        size_t maxp = 0;
        for (size_t k = 0; k < r->nt; k++) {
            size_t p = 0;
            while (strcmp(r->t[k].name, arg_name(om, p)))
                p++;
            if (p >= OIP_MAX_TENSORS || filled[p]) {
                snprintf(err, errlen, "inputs[%zu].name: \"%s\" given twice", k, r->t[k].name);
                return -1;
            }
            filled[p] = 1;
            r->order[p] = k;
            if (p + 1 > maxp)
                maxp = p + 1;
        }
        r->nargs = om->n_in ? om->n_in : maxp;
        for (size_t p = 0; p < r->nargs; p++)
            if (!filled[p]) {
                snprintf(err, errlen, "inputs: the model input \"%s\" is missing", arg_name(om, p));
                return -1;
            }
        return 0;
    }
    if (om->n_in && r->nt != om->n_in) {
        names_list(om, names, sizeof(names));
        snprintf(err, errlen, "inputs: %zu given, the model takes %zu (%s)", r->nt, om->n_in,
                 names);
        return -1;
    }
    if (om->n_args && r->nt > om->n_args) {
        names_list(om, names, sizeof(names));
        snprintf(err, errlen, "inputs: %zu given, forward() takes %zu (%s)", r->nt, om->n_args,
                 names);
        return -1;
    }
    for (size_t k = 0; k < r->nt; k++)
        r->order[k] = k;
    r->nargs = r->nt;
    return 0;
}

static int check_inputs(const struct oip_model *om, struct oreq *r, char *err, size_t errlen)
{
    r->rows = -2;
    for (size_t p = 0; p < r->nargs; p++) {
        size_t k = r->order[p];
        const struct oip_tensor *t = &r->t[k];
        if (to_tsh(t->dtype) < 0) {
            snprintf(err, errlen,
                     "inputs[%zu].datatype: %s is not a tensor type TorchScript "
                     "takes",
                     k, oip_dtype_name(t->dtype));
            return -1;
        }
        const struct decl *d = p < om->n_in ? &om->in[p] : NULL;
        if (d && d->dtype >= 0 && d->dtype != t->dtype) {
            snprintf(err, errlen, "inputs[%zu].datatype: %s does not match the model input %s (%s)",
                     k, oip_dtype_name(t->dtype), d->name, oip_dtype_name(d->dtype));
            return -1;
        }
        if (d && d->ndim >= 0) {
            int ok = d->ndim == t->ndim;
            for (int i = 0; ok && i < t->ndim; i++)
                ok = d->shape[i] < 0 || d->shape[i] == t->shape[i];
            if (!ok) {
                char got[128], want[128];
                oip_shape_str(got, sizeof(got), t->shape, t->ndim);
                oip_shape_str(want, sizeof(want), d->shape, d->ndim);
                snprintf(err, errlen, "inputs[%zu].shape %s does not match the model input %s %s",
                         k, got, d->name, want);
                return -1;
            }
        }
        /* batchable: every input has a dim 0 of the same size, free in the declaration */
        int64_t rows = t->ndim >= 1 && (!d || d->ndim < 0 || d->shape[0] < 0) ? t->shape[0] : -1;
        r->rows = r->rows == -2 ? rows : r->rows == rows ? rows : -1;
    }
    if (r->rows == -2)
        r->rows = -1;
    return 0;
}

static int parse_one(struct ts_ctx *ctx, const struct oip_model *om, struct oreq *r, char *err,
                     size_t errlen)
{
    size_t len = 0;
    const void *body = ts_get_body(ctx, r->idx, &len, NULL);
    const char *js;
    size_t jl, rawlen;
    const uint8_t *raw;
    if (oip_wire_split(body, len, &js, &jl, &raw, &rawlen, err, errlen))
        return -1;
    r->hbuf = xmalloc(jl + 1);
    if (!oip_wire_scan(js, jl, r->hbuf, "inputs", raw, rawlen, r->t, OIP_MAX_TENSORS, &r->nt,
                       r->outs, &r->nouts)) {
        /* not the plain form (parameters, escapes) or not valid: jansson has the words */
        r->nt = r->nouts = 0;
        json_error_t jerr;
        r->hdr = json_loadb(js, jl, 0, &jerr);
        if (!r->hdr) {
            snprintf(err, errlen, "OIP payload header: %s", jerr.text);
            return -1;
        }
        if (oip_wire_tensors(r->hdr, "inputs", raw, rawlen, r->t, OIP_MAX_TENSORS, &r->nt, err,
                             errlen))
            return -1;
    }
    if (!r->nt) {
        snprintf(err, errlen, "inputs: at least one input is required");
        return -1;
    }
    if (map_inputs(om, r, err, errlen))
        return -1;
    return check_inputs(om, r, err, errlen);
}

static int same_signature(const struct oreq *a, const struct oreq *b)
{
    if (a->nargs != b->nargs || a->rows < 0 || b->rows < 0)
        return 0;
    for (size_t p = 0; p < a->nargs; p++) {
        const struct oip_tensor *x = &a->t[a->order[p]], *y = &b->t[b->order[p]];
        if (x->dtype != y->dtype || x->ndim != y->ndim ||
            memcmp(x->shape + 1, y->shape + 1, sizeof(int64_t) * (size_t)(x->ndim - 1)))
            return 0;
    }
    return 1;
}

/* ---------------------------------------------------------------- responses */

static const char *output_name(const struct oip_model *om, size_t o, char *tmp, size_t n)
{
    if (o < om->n_out)
        return om->out[o].name;
    snprintf(tmp, n, "output__%zu", o);
    return tmp;
}

/* The outputs a request asked for, as indices into out (all when it named none). */
static int wanted(const struct oip_model *om, const struct oreq *r, size_t nout, size_t *sel,
                  size_t *nsel, char *err, size_t errlen)
{
    json_t *outs = r->hdr ? json_object_get(r->hdr, "outputs") : NULL;
    size_t nwant = r->hdr ? json_array_size(outs) : r->nouts;
    char tmp[32];
    *nsel = 0;
    if (!nwant) {
        for (size_t o = 0; o < nout && o < OIP_MAX_TENSORS; o++)
            sel[(*nsel)++] = o;
        return 0;
    }
    for (size_t i = 0; i < nwant; i++) {
        const char *want = r->hdr ? json_string_value(json_array_get(outs, i)) : r->outs[i];
        size_t o = 0;
        while (o < nout && (!want || strcmp(want, output_name(om, o, tmp, sizeof(tmp)))))
            o++;
        if (o == nout || *nsel == OIP_MAX_TENSORS) {
            snprintf(err, errlen, "outputs[%zu].name: \"%s\" is not an output of the model", i,
                     want ? want : "");
            return -1;
        }
        sel[(*nsel)++] = o;
    }
    return 0;
}

/* Rows [row, row + rows) of every selected output (all of it when rows < 0). */
static void respond(struct ts_ctx *ctx, const struct oip_model *om, const struct oreq *r,
                    const struct tsh_tensor *out, size_t nout, int64_t row, int64_t rows)
{
    size_t sel[OIP_MAX_TENSORS], nsel;
    char err[512], tmp[32];
    if (wanted(om, r, nout, sel, &nsel, err, sizeof(err))) {
        ts_set_error(ctx, r->idx, 400, "%s", err);
        return;
    }
    struct buf h; /* the header by hand: jansson's DOM costs more than small tensors */
    buf_init(&h);
    buf_puts(&h, "{\"outputs\":[");
    size_t total = 0;
    size_t off[OIP_MAX_TENSORS], len[OIP_MAX_TENSORS];
    for (size_t s = 0; s < nsel; s++) {
        const struct tsh_tensor *t = &out[sel[s]];
        int64_t shape[OIP_MAX_DIMS];
        int ndim = t->ndim < OIP_MAX_DIMS ? t->ndim : OIP_MAX_DIMS;
        memcpy(shape, t->shape, sizeof(int64_t) * (size_t)ndim);
        off[s] = 0;
        len[s] = t->nbytes;
        if (rows >= 0 && t->shape[0] > 0) {
            size_t per = t->nbytes / (size_t)t->shape[0];
            off[s] = per * (size_t)row;
            len[s] = per * (size_t)rows;
            shape[0] = rows;
        }
        int dt = from_tsh(t->dtype);
        oip_wire_put_desc(&h, s == 0, output_name(om, sel[s], tmp, sizeof(tmp)), dt, shape, ndim,
                          len[s]);
        total += len[s];
    }
    buf_puts(&h, "]}");
    struct buf b;
    buf_init(&b);
    buf_reserve(&b, 8 + h.len + total);
    oip_wire_put_header(&b, (const char *)h.data, h.len);
    buf_free(&h);
    for (size_t s = 0; s < nsel; s++)
        buf_put(&b, (const uint8_t *)out[sel[s]].data + off[s], len[s]);
    ts_set_response(ctx, r->idx, b.data, b.len);
    ts_set_content_type(ctx, r->idx, OIP_WIRE_CTYPE);
    buf_free(&b);
}

/* One forward over members[0..n) (n > 1 only when they share a signature). */
static void run(struct ts_ctx *ctx, const struct oip_model *om, struct tsh_model *m,
                struct oreq **members, size_t n)
{
    struct oreq *lead = members[0];
    struct tsh_tensor in[OIP_MAX_TENSORS];
    int64_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += members[i]->rows;
    for (size_t p = 0; p < lead->nargs; p++) {
        const struct oip_tensor *t = &lead->t[lead->order[p]];
        struct tsh_tensor *x = &in[p];
        memset(x, 0, sizeof(*x));
        x->dtype = to_tsh(t->dtype);
        x->ndim = t->ndim;
        memcpy(x->shape, t->shape, sizeof(int64_t) * (size_t)t->ndim);
        size_t nb = 0;
        for (size_t i = 0; i < n; i++)
            nb += members[i]->t[members[i]->order[p]].nbytes;
        if (n > 1)
            x->shape[0] = total;
        /* a private, aligned copy: payload offsets are not aligned for the dtype */
        x->data = xmalloc(nb ? nb : 1);
        x->nbytes = nb;
        size_t o = 0;
        for (size_t i = 0; i < n; i++) {
            const struct oip_tensor *ti = &members[i]->t[members[i]->order[p]];
            memcpy((uint8_t *)x->data + o, ti->data, ti->nbytes);
            o += ti->nbytes;
        }
    }
    struct tsh_tensor *out = NULL;
    size_t nout = 0;
    char *err = NULL;
    int64_t t0 = ts_now_us();
    int rc = tsh_forward(m, in, lead->nargs, &out, &nout, &err);
    char fwd_us[JNUM_MAX + 1]; /* as the torchscript handler reports it: latency - forward */
    fwd_us[jnum_i64(fwd_us, ts_now_us() - t0)] = '\0';
    for (size_t p = 0; p < lead->nargs; p++)
        free(in[p].data);
    if (rc) {
        for (size_t i = 0; i < n; i++)
            ts_set_error(ctx, members[i]->idx, n > 1 ? 500 : 400, "forward(): %s", err);
        free(err);
        return;
    }
    int split = n > 1;
    for (size_t o = 0; o < nout && split; o++)
        split = out[o].ndim >= 1 && out[o].shape[0] == total && from_tsh(out[o].dtype) >= 0;
    if (n > 1 && !split) {
        /* the model does not keep rows apart: answer each request from its own forward */
        tsh_tensors_free(out, nout);
        for (size_t i = 0; i < n; i++)
            run(ctx, om, m, &members[i], 1);
        return;
    }
    for (size_t o = 0; o < nout; o++)
        if (from_tsh(out[o].dtype) < 0) {
            for (size_t i = 0; i < n; i++)
                ts_set_error(ctx, members[i]->idx, 500,
                             "output %zu has a dtype (%s) OIP cannot "
                             "carry",
                             o, tsh_dtype_name(out[o].dtype));
            tsh_tensors_free(out, nout);
            return;
        }
    int64_t row = 0;
    for (size_t i = 0; i < n; i++) {
        ts_set_header(ctx, members[i]->idx, "x-ts-worker-forward-us", fwd_us);
        respond(ctx, om, members[i], out, nout, row, n > 1 ? members[i]->rows : -1);
        row += members[i]->rows;
    }
    tsh_tensors_free(out, nout);
}

void oip_handle(struct ts_ctx *ctx, struct oip_model *om, struct tsh_model *m, const size_t *idx,
                size_t n)
{
    /* not calloc: an oreq is mostly tensor slots, filled only as far as they are used */
    struct oreq *rs = xmalloc((n ? n : 1) * sizeof(*rs));
    struct oreq **members = xcalloc(n ? n : 1, sizeof(*members));
    char err[512];
    for (size_t i = 0; i < n; i++) {
        rs[i].idx = idx[i];
        rs[i].ok = rs[i].grouped = 0;
        rs[i].hdr = NULL;
        rs[i].hbuf = NULL;
        rs[i].nt = rs[i].nouts = 0;
        if (ts_is_cancelled(ctx, idx[i]))
            continue;
        const char *ctype = NULL;
        ts_get_body(ctx, idx[i], NULL, &ctype);
        if (ctype && !strcmp(ctype, OIP_WIRE_META_CTYPE)) {
            metadata(ctx, om, idx[i]);
            continue;
        }
        if (parse_one(ctx, om, &rs[i], err, sizeof(err))) {
            ts_log(ctx, LOG_LEVEL_DEBUG, "request %s: %s", ts_request_id(ctx, idx[i]), err);
            ts_set_error(ctx, idx[i], 400, "%s", err);
            continue;
        }
        rs[i].ok = 1;
    }
    for (size_t i = 0; i < n; i++) {
        if (!rs[i].ok || rs[i].grouped)
            continue;
        size_t k = 0;
        members[k++] = &rs[i];
        rs[i].grouped = 1;
        for (size_t j = i + 1; j < n && rs[i].rows >= 0; j++)
            if (rs[j].ok && !rs[j].grouped && same_signature(&rs[i], &rs[j])) {
                rs[j].grouped = 1;
                members[k++] = &rs[j];
            }
        run(ctx, om, m, members, k);
    }
    for (size_t i = 0; i < n; i++) {
        json_decref(rs[i].hdr);
        free(rs[i].hbuf);
    }
    free(members);
    free(rs);
}
