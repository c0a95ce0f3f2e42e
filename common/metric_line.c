/*
 * metric_line: see metric_line.h. The line is split at its '|' separators first (no field but
 * the last may hold one), then each field is checked byte by byte: what passes goes into the
 * Prometheus text and model_metrics.log as it is, so the checks are those of the binary metric
 * records (otf_metric_name_ok and the others, otf.h) plus the dimension values'.
 */
#include "metric_line.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static int is_digit(char c)
{
    return c >= '0' && c <= '9';
}

static int valid_dim_value(const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)p[i] < 0x20 || p[i] == 0x7f || p[i] == '|' || p[i] == ',')
            return 0;
    return 1;
}

static int fail(char *why, size_t n, const char *msg)
{
    snprintf(why, n, "%s", msg);
    return -1;
}

/* NAME.UNIT:VALUE */
static int parse_head(const char *p, size_t len, struct metric_line *m, char *why, size_t n)
{
    const char *dot = memchr(p, '.', len);
    const char *colon = NULL;
    for (size_t i = len; i > 0; i--)
        if (p[i - 1] == ':') {
            colon = p + i - 1;
            break;
        }
    if (!dot || !colon || colon < dot)
        return fail(why, n, "expected NAME.UNIT:VALUE before the first '|'");
    size_t nl = (size_t)(dot - p), ul = (size_t)(colon - dot - 1), vl = len - nl - ul - 2;
    if (nl > OTF_METRIC_NAME_MAX || !otf_metric_name_ok(p, nl))
        return fail(why, n, "metric name: expected [A-Za-z_:][A-Za-z0-9_:]*, at most 64 bytes");
    if (ul > OTF_METRIC_UNIT_MAX || !otf_metric_unit_ok(dot + 1, ul))
        return fail(why, n, "unit: expected [A-Za-z0-9_%/.-]*, at most 24 bytes");
    char num[64];
    if (vl == 0 || vl >= sizeof(num))
        return fail(why, n, "value: expected a number");
    memcpy(num, colon + 1, vl);
    num[vl] = '\0';
    for (size_t i = 0; i < vl; i++)
        if (!is_digit(num[i]) && !(num[i] && strchr("+-.eE", num[i])))
            return fail(why, n, "value: expected a number");
    char *end;
    double v = strtod(num, &end);
    if (*end || !isfinite(v))
        return fail(why, n, "value: expected a finite number");
    m->name = otf_sn(p, nl);
    m->unit = otf_sn(dot + 1, ul);
    m->value = v;
    return 0;
}

/* DIM:VAL,DIM:VAL (may be empty) */
static int parse_dims(const char *p, size_t len, struct metric_line *m, char *why, size_t n)
{
    m->n_dims = 0;
    const char *end = p + len;
    while (p < end) {
        const char *comma = memchr(p, ',', (size_t)(end - p));
        const char *e = comma ? comma : end;
        const char *colon = memchr(p, ':', (size_t)(e - p));
        if (!colon)
            return fail(why, n, "dimensions: expected NAME:VALUE pairs separated by ','");
        size_t kl = (size_t)(colon - p), vl = (size_t)(e - colon - 1);
        if (kl > METRIC_LINE_DIM_NAME_MAX || !otf_metric_dim_ok(p, kl))
            return fail(why, n, "dimension name: expected [A-Za-z_][A-Za-z0-9_]*");
        if (vl > METRIC_LINE_DIM_VALUE_MAX || !valid_dim_value(colon + 1, vl))
            return fail(why, n, "dimension value: at most 256 bytes, no control bytes");
        if (m->n_dims == METRIC_LINE_DIMS_MAX)
            return fail(why, n, "dimensions: more than 8");
        m->dim_name[m->n_dims] = otf_sn(p, kl);
        m->dim_value[m->n_dims++] = otf_sn(colon + 1, vl);
        p = comma ? comma + 1 : end;
        if (comma && p == end)
            return fail(why, n, "dimensions: a trailing ','");
    }
    return 0;
}

static int kind_of(const char *p, size_t len, char *kind)
{
    static const struct {
        const char *name;
        char kind;
    } k[] = {{"COUNTER", 'c'}, {"GAUGE", 'g'}, {"HISTOGRAM", 'h'}};
    for (size_t i = 0; i < 3; i++)
        if (strlen(k[i].name) == len && !strncasecmp(p, k[i].name, len)) {
            *kind = k[i].kind;
            return 0;
        }
    return -1;
}

int metric_line_parse(const char *p, size_t len, struct metric_line *out, char *why, size_t n)
{
    memset(out, 0, sizeof(*out));
    out->kind = 'g';
    const char *end = p + len;
    const char *bar = memchr(p, '|', len);
    if (!bar)
        return fail(why, n, "expected NAME.UNIT:VALUE|#dimensions|#hostname:HOST,TIMESTAMP");
    if (parse_head(p, (size_t)(bar - p), out, why, n))
        return -1;
    /* |#dims */
    const char *q = bar + 1;
    if (q >= end || *q != '#')
        return fail(why, n, "expected '|#' before the dimensions");
    q++;
    const char *next = memchr(q, '|', (size_t)(end - q));
    if (!next)
        return fail(why, n, "expected '|#hostname:' after the dimensions");
    if (parse_dims(q, (size_t)(next - q), out, why, n))
        return -1;
    q = next + 1;
    /* optional |#type:TYPE */
    if ((size_t)(end - q) > 6 && !strncmp(q, "#type:", 6)) {
        q += 6;
        next = memchr(q, '|', (size_t)(end - q));
        if (!next || kind_of(q, (size_t)(next - q), &out->kind))
            return fail(why, n, "type: expected COUNTER, GAUGE or HISTOGRAM");
        q = next + 1;
    }
    /* #hostname:HOST,TIMESTAMP[,REQUEST_IDS] */
    if ((size_t)(end - q) < 10 || strncmp(q, "#hostname:", 10))
        return fail(why, n, "expected '|#hostname:HOST,TIMESTAMP' at the end");
    q += 10;
    const char *c1 = memchr(q, ',', (size_t)(end - q));
    if (!c1 || c1 == q)
        return fail(why, n, "expected '|#hostname:HOST,TIMESTAMP' at the end");
    out->host = otf_sn(q, (size_t)(c1 - q));
    q = c1 + 1;
    const char *c2 = memchr(q, ',', (size_t)(end - q));
    const char *ts_end = c2 ? c2 : end;
    if (ts_end == q)
        return fail(why, n, "timestamp: expected seconds since the epoch");
    for (const char *t = q; t < ts_end; t++)
        if (!is_digit(*t))
            return fail(why, n, "timestamp: expected seconds since the epoch");
    out->timestamp = otf_sn(q, (size_t)(ts_end - q));
    if (c2) {
        for (const char *t = c2 + 1; t < end; t++)
            if ((unsigned char)*t < 0x20 || *t == 0x7f || *t == '|')
                return fail(why, n, "request ids: no control bytes or '|'");
        out->request_ids = otf_sn(c2 + 1, (size_t)(end - c2 - 1));
    }
    for (const char *t = out->host.p; t < out->host.p + out->host.len; t++)
        if ((unsigned char)*t <= 0x20 || *t == 0x7f || *t == '|')
            return fail(why, n, "hostname: no spaces or control bytes");
    return 0;
}
