/*
 * model_metrics: see model_metrics.h. Metrics and series are small arrays searched linearly: a
 * handful of metrics with a handful of series each, looked up once per reported value. A series'
 * values are copied once, when it is first seen.
 */
#include "model_metrics.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void model_metrics_init(struct model_metrics *mm, int auto_detect)
{
    memset(mm, 0, sizeof(*mm));
    mm->auto_detect = auto_detect;
}

const struct mm_metric *model_metrics_find(const struct model_metrics *mm, const char *name,
                                           size_t len)
{
    for (size_t i = 0; i < mm->n; i++)
        if (strlen(mm->v[i].name) == len && !memcmp(mm->v[i].name, name, len))
            return &mm->v[i];
    return NULL;
}

static int valid_name(const char *p, size_t n)
{
    return n <= OTF_METRIC_NAME_MAX && otf_metric_name_ok(p, n);
}

static int valid_dim(const char *p, size_t n)
{
    return n <= METRIC_LINE_DIM_NAME_MAX && otf_metric_dim_ok(p, n);
}

static int valid_unit(const char *p, size_t n)
{
    return n <= MODEL_METRICS_UNIT_MAX && otf_metric_unit_ok(p, n);
}

static struct mm_metric *add_metric(struct model_metrics *mm, char kind, const char *name,
                                    size_t name_len, const char *unit, size_t unit_len)
{
    if (!mm->v)
        mm->v = xcalloc(MODEL_METRICS_MAX, sizeof(*mm->v));
    struct mm_metric *m = &mm->v[mm->n++];
    memset(m, 0, sizeof(*m));
    memcpy(m->name, name, name_len);
    memcpy(m->unit, unit, unit_len);
    m->kind = kind;
    return m;
}

int model_metrics_declare(struct model_metrics *mm, char kind, const char *name, const char *unit,
                          const char *const *dims, size_t n_dims, char *why, size_t n)
{
    size_t nl = strlen(name), ul = strlen(unit);
    if (!valid_name(name, nl)) {
        snprintf(why, n, "metric name '%s': expected [A-Za-z_:][A-Za-z0-9_:]*, at most %d bytes",
                 name, OTF_METRIC_NAME_MAX);
        return -1;
    }
    if (!valid_unit(unit, ul)) {
        snprintf(why, n, "%s: unit '%s': expected [A-Za-z0-9_%%/.-]*, at most %d bytes", name, unit,
                 MODEL_METRICS_UNIT_MAX);
        return -1;
    }
    if (model_metrics_find(mm, name, nl)) {
        snprintf(why, n, "%s is declared twice", name);
        return -1;
    }
    if (mm->n == MODEL_METRICS_MAX) {
        snprintf(why, n, "%s: more than %d model metrics", name, MODEL_METRICS_MAX);
        return -1;
    }
    if (n_dims > MODEL_METRICS_DIMS_MAX) {
        snprintf(why, n, "%s: more than %d dimensions", name, MODEL_METRICS_DIMS_MAX);
        return -1;
    }
    for (size_t i = 0; i < n_dims; i++)
        if (!valid_dim(dims[i], strlen(dims[i])) || !strcmp(dims[i], "Hostname")) {
            snprintf(why, n,
                     "%s: dimension '%s': expected [A-Za-z_][A-Za-z0-9_]* (Hostname is "
                     "added to every model metric)",
                     name, dims[i]);
            return -1;
        }
    struct mm_metric *m = add_metric(mm, kind, name, nl, unit, ul);
    m->declared = 1;
    for (size_t i = 0; i < n_dims; i++)
        m->dims[m->n_dims++] = xstrdup(dims[i]);
    return 0;
}

/* The sample's value of dimension name, or NULL. */
static const struct otf_str *dim_value(const struct metric_line *s, const char *name)
{
    size_t len = strlen(name);
    for (size_t i = 0; i < s->n_dims; i++)
        if ((size_t)s->dim_name[i].len == len && !memcmp(s->dim_name[i].p, name, len))
            return &s->dim_value[i];
    return NULL;
}

static int refuse(struct model_metrics *mm)
{
    mm->refused++;
    return -1;
}

int model_metrics_record(struct model_metrics *mm, const struct metric_line *s, char *why, size_t n)
{
    const char *name = s->name.p;
    size_t nl = (size_t)s->name.len;
    struct mm_metric *m = (struct mm_metric *)model_metrics_find(mm, name, nl);
    if (!m) {
        if (!mm->auto_detect) {
            snprintf(why, n,
                     "%.*s is not declared in metrics_config (model_metrics_auto_detect is off)",
                     (int)nl, name);
            return refuse(mm);
        }
        if (mm->n == MODEL_METRICS_MAX) {
            snprintf(why, n, "%.*s: the server has %d model metrics already (the most it may have)",
                     (int)nl, name, MODEL_METRICS_MAX);
            return refuse(mm);
        }
        if (!valid_name(name, nl) || !valid_unit(s->unit.p, (size_t)s->unit.len) ||
            s->n_dims > MODEL_METRICS_DIMS_MAX) {
            snprintf(why, n, "%.*s: a name, unit or dimension list /metrics cannot carry", (int)nl,
                     name);
            return refuse(mm);
        }
        for (size_t i = 0; i < s->n_dims; i++)
            if (!valid_dim(s->dim_name[i].p, (size_t)s->dim_name[i].len)) {
                snprintf(why, n, "%.*s: dimension names must be [A-Za-z_][A-Za-z0-9_]*", (int)nl,
                         name);
                return refuse(mm);
            }
        m = add_metric(mm, s->kind, name, nl, s->unit.p, (size_t)s->unit.len);
        for (size_t i = 0; i < s->n_dims; i++)
            m->dims[m->n_dims++] = xstrndup(s->dim_name[i].p, (size_t)s->dim_name[i].len);
    }
    if (m->kind != s->kind) {
        snprintf(why, n, "%s is a %s, not a %s", m->name, metrics_kind_name(m->kind),
                 metrics_kind_name(s->kind));
        return refuse(mm);
    }
    if (m->kind == 'c' && s->value < 0) {
        snprintf(why, n, "%s is a counter and cannot go down (%g)", m->name, s->value);
        return refuse(mm);
    }
    const struct otf_str *vals[MODEL_METRICS_DIMS_MAX];
    for (size_t d = 0; d < m->n_dims; d++) {
        vals[d] = dim_value(s, m->dims[d]);
        if (!vals[d]) {
            snprintf(why, n, "%s: the sample has no value for its dimension %s", m->name,
                     m->dims[d]);
            return refuse(mm);
        }
    }
    struct mm_series *ser = NULL;
    for (size_t k = 0; k < m->n_series && !ser; k++) {
        size_t d = 0;
        while (d < m->n_dims && strlen(m->series[k].values[d]) == (size_t)vals[d]->len &&
               !memcmp(m->series[k].values[d], vals[d]->p, (size_t)vals[d]->len))
            d++;
        if (d == m->n_dims)
            ser = &m->series[k];
    }
    if (!ser) {
        if (m->n_series == MODEL_METRICS_SERIES_MAX) {
            snprintf(why, n, "%s has %d series already (the most a metric may have)", m->name,
                     MODEL_METRICS_SERIES_MAX);
            return refuse(mm);
        }
        if (!m->series)
            m->series = xcalloc(MODEL_METRICS_SERIES_MAX, sizeof(*m->series));
        ser = &m->series[m->n_series++];
        memset(ser, 0, sizeof(*ser));
        for (size_t d = 0; d < m->n_dims; d++)
            ser->values[d] = xstrndup(vals[d]->p, (size_t)vals[d]->len);
    }
    switch (m->kind) {
    case 'c':
        ser->value += s->value;
        break;
    case 'g':
        ser->value = s->value;
        break;
    default:
        hist_observe(&ser->h, hist_ms_bounds, s->value);
    }
    return 0;
}

void model_metrics_fmt_value(char *out, size_t n, double v)
{
    int k = snprintf(out, n, "%.15g", v);
    if (k > 0 && (size_t)k + 2 < n && !strpbrk(out, ".eEn"))
        strcat(out, ".0");
}

void model_metrics_log_line(struct buf *b, const struct metric_line *s, const char *unit,
                            const char *host, long long ts)
{
    char v[40];
    model_metrics_fmt_value(v, sizeof(v), s->value);
    buf_printf(b, "%.*s.%s:%s|#", (int)s->name.len, s->name.p, unit, v);
    for (size_t i = 0; i < s->n_dims; i++)
        buf_printf(b, "%s%.*s:%.*s", i ? "," : "", (int)s->dim_name[i].len, s->dim_name[i].p,
                   (int)s->dim_value[i].len, s->dim_value[i].p);
    buf_printf(b, "|#hostname:%s", host);
    if (s->request_ids.len > 0)
        buf_printf(b, ",requestID:%.*s", (int)s->request_ids.len, s->request_ids.p);
    buf_printf(b, ",timestamp:%lld\n", ts);
}

void model_metrics_free(struct model_metrics *mm)
{
    for (size_t i = 0; i < mm->n; i++) {
        struct mm_metric *m = &mm->v[i];
        for (size_t k = 0; k < m->n_series; k++)
            for (size_t d = 0; d < m->n_dims; d++)
                free(m->series[k].values[d]);
        for (size_t d = 0; d < m->n_dims; d++)
            free(m->dims[d]);
        free(m->series);
    }
    free(mm->v);
    memset(mm, 0, sizeof(*mm));
}
