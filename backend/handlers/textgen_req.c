/*
 * textgen_req: the parameters of a generation request, checked with a message that names the
 * field, and sampling (see textgen_req.h).
 */
#include "textgen_req.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "util.h"

void textgen_params_free(struct textgen_params *p)
{
    free(p->prompt);
    p->prompt = NULL;
}

/* The value of key: at the top of the object, else in its "parameters"; where says which. */
static json_t *field(json_t *o, const char *key, const char **where)
{
    json_t *v = json_object_get(o, key);
    *where = "$.";
    if (v)
        return v;
    *where = "$.parameters.";
    return json_object_get(json_object_get(o, "parameters"), key);
}

static int read_stop(json_t *v, const char *where, struct textgen_params *p, char *err,
                     size_t errlen)
{
    if (!v || json_is_null(v))
        return 0;
    json_t *one = json_is_string(v) ? v : NULL;
    size_t n = one ? 1 : json_is_array(v) ? json_array_size(v) : (size_t)-1;
    if (n == (size_t)-1 || n > TEXTSTOP_MAX) {
        snprintf(err, errlen, "%sstop: expected a string or a list of at most %d strings", where,
                 TEXTSTOP_MAX);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *s = one ? one : json_array_get(v, i);
        size_t sl = json_is_string(s) ? json_string_length(s) : 0;
        if (!json_is_string(s) || sl == 0 || sl > TEXTSTOP_MAX_LEN) {
            snprintf(err, errlen, "%sstop: each stop sequence must be a string of 1 to %d bytes",
                     where, TEXTSTOP_MAX_LEN);
            return -1;
        }
        memcpy(p->stop[i], json_string_value(s), sl);
        p->stop_len[i] = sl;
    }
    p->nstop = n;
    return 0;
}

static int read_json(const char *body, size_t len, struct textgen_params *p, char *err,
                     size_t errlen)
{
    json_error_t jerr;
    json_t *o = json_loadb(body, len, 0, &jerr);
    if (!json_is_object(o)) {
        snprintf(err, errlen, "request body: %s", o ? "expected a JSON object" : jerr.text);
        json_decref(o);
        return -1;
    }
    const char *w;
    int rc = -1;
    json_t *v = field(o, "prompt", &w);
    if (!v)
        v = field(o, "text", &w);
    if (v && !json_is_string(v)) {
        snprintf(err, errlen, "%sprompt: expected a string", w);
        goto out;
    }
    p->plen = v ? json_string_length(v) : 0;
    p->prompt = xstrndup(v ? json_string_value(v) : "", p->plen);
    v = field(o, "max_new_tokens", &w);
    if (!v)
        v = field(o, "max_tokens", &w);
    if (v && !json_is_null(v)) {
        if (!json_is_integer(v) || json_integer_value(v) < 0 ||
            json_integer_value(v) > TEXTGEN_MAX_NEW_LIMIT) {
            snprintf(err, errlen, "%smax_new_tokens: expected an integer in [0, %ld]", w,
                     TEXTGEN_MAX_NEW_LIMIT);
            goto out;
        }
        p->max_new = (long)json_integer_value(v);
    }
    v = field(o, "temperature", &w);
    if (v && !json_is_null(v)) {
        double t = json_number_value(v);
        if (!json_is_number(v) || !isfinite(t) || t < 0 || t > 100) {
            snprintf(err, errlen, "%stemperature: expected a number in [0, 100]", w);
            goto out;
        }
        p->temperature = t;
    }
    v = field(o, "top_p", &w);
    if (v && !json_is_null(v)) {
        double t = json_number_value(v);
        if (!json_is_number(v) || !(t > 0 && t <= 1)) {
            snprintf(err, errlen, "%stop_p: expected a number in (0, 1]", w);
            goto out;
        }
        p->top_p = t;
    }
    v = field(o, "seed", &w);
    if (v && !json_is_null(v)) {
        if (!json_is_integer(v)) {
            snprintf(err, errlen, "%sseed: expected an integer", w);
            goto out;
        }
        p->has_seed = 1;
        p->seed = (uint64_t)json_integer_value(v);
    }
    v = field(o, "stop", &w);
    rc = read_stop(v, w, p, err, errlen);
out:
    json_decref(o);
    return rc;
}

int textgen_req_parse(const char *body, size_t len, const char *ctype, const char *max_new_param,
                      struct textgen_params *p, char *err, size_t errlen)
{
    memset(p, 0, sizeof(*p));
    p->max_new = -1;
    p->top_p = 1.0;
    if (!body)
        body = "";
    size_t k = 0;
    while (k < len && (body[k] == ' ' || body[k] == '\n' || body[k] == '\r' || body[k] == '\t'))
        k++;
    int is_json = (ctype && strstr(ctype, "json")) || (k < len && body[k] == '{');
    if (is_json) {
        if (read_json(body, len, p, err, errlen)) {
            textgen_params_free(p);
            return -1;
        }
    } else {
        p->prompt = xstrndup(body, len);
        p->plen = len;
    }
    if (max_new_param && p->max_new < 0) {
        long v;
        if (ts_parse_long(max_new_param, 0, TEXTGEN_MAX_NEW_LIMIT, &v)) {
            snprintf(err, errlen, "max_new_tokens: \"%s\" is not an integer in [0, %ld]",
                     max_new_param, TEXTGEN_MAX_NEW_LIMIT);
            textgen_params_free(p);
            return -1;
        }
        p->max_new = v;
    }
    return 0;
}

int64_t textgen_argmax(const float *logits, size_t n, float *gap)
{
    size_t best = 0;
    float second = -INFINITY;
    for (size_t i = 1; i < n; i++) {
        if (logits[i] > logits[best]) {
            second = logits[best];
            best = i;
        } else if (logits[i] > second) {
            second = logits[i];
        }
    }
    if (gap)
        *gap = n < 2 ? 0 : logits[best] - second;
    return (int64_t)best;
}

static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

struct cand {
    double p;
    size_t i;
};

static int by_prob(const void *a, const void *b)
{
    const struct cand *x = a, *y = b;
    if (x->p != y->p)
        return x->p < y->p ? 1 : -1;
    return x->i < y->i ? -1 : x->i > y->i;
}

int64_t textgen_sample(const float *logits, size_t n, double temperature, double top_p,
                       uint64_t *rng)
{
    if (temperature <= 0 || n < 2)
        return textgen_argmax(logits, n, NULL);
    float mx = logits[textgen_argmax(logits, n, NULL)];
    struct cand *c = xmalloc(n * sizeof(*c));
    double total = 0;
    for (size_t i = 0; i < n; i++) {
        c[i].p = exp(((double)logits[i] - mx) / temperature);
        c[i].i = i;
        total += c[i].p;
    }
    size_t keep = n;
    if (top_p < 1) {
        qsort(c, n, sizeof(*c), by_prob);
        double acc = 0;
        for (keep = 0; keep < n;) {
            acc += c[keep++].p;
            if (acc >= top_p * total)
                break;
        }
        total = acc;
    }
    /* 53 random bits: a uniform draw in [0, total) */
    double u = (double)(splitmix64(rng) >> 11) / 9007199254740992.0 * total;
    size_t pick = c[keep - 1].i;
    for (size_t k = 0; k < keep; k++) {
        if (u < c[k].p) {
            pick = c[k].i;
            break;
        }
        u -= c[k].p;
    }
    free(c);
    return (int64_t)pick;
}
