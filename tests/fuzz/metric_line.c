/*
 * metric_line: a worker's "[METRICS]" lines (common/metric_line.c metric_line_parse), as the
 * frontend takes them out of a worker's output (frontend/core/worker_log.c) into the model
 * metrics (frontend/core/model_metrics.c). A parsed line's fields lie inside the input and hold
 * only the bytes /metrics and model_metrics.log may carry as they are; written back in the same
 * format they parse to the same fields; the table takes or refuses the sample without growing
 * past its bounds.
 */
#include <math.h>

#include "core/model_metrics.h"
#include "fuzz.h"
#include "metric_line.h"

static void inside(struct otf_str s, const uint8_t *p, size_t n)
{
    FUZZ_CHECK(s.len >= 0);
    if (s.len)
        FUZZ_CHECK((const uint8_t *)s.p >= p && (const uint8_t *)s.p + s.len <= p + n);
}

static void no_bytes(struct otf_str s, const char *bad)
{
    for (int32_t i = 0; i < s.len; i++)
        FUZZ_CHECK((unsigned char)s.p[i] >= 0x20 && !strchr(bad, s.p[i]));
}

static int same(struct otf_str a, struct otf_str b)
{
    return a.len == b.len && (a.len == 0 || !memcmp(a.p, b.p, (size_t)a.len));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct model_metrics mm;
    static int init;
    if (!init) {
        model_metrics_init(&mm, 1);
        init = 1;
    }
    struct metric_line m;
    char why[160];
    if (metric_line_parse((const char *)data, size, &m, why, sizeof(why))) {
        FUZZ_CHECK(why[0]);
        return 0;
    }
    FUZZ_CHECK(isfinite(m.value) && m.n_dims <= METRIC_LINE_DIMS_MAX);
    FUZZ_CHECK(strchr("cgh", m.kind));
    inside(m.name, data, size);
    inside(m.unit, data, size);
    inside(m.host, data, size);
    inside(m.timestamp, data, size);
    inside(m.request_ids, data, size);
    FUZZ_CHECK(m.name.len > 0 && m.name.len <= OTF_METRIC_NAME_MAX);
    no_bytes(m.name, " |,.\"\\{}=");
    no_bytes(m.unit, " |,:\"\\{}=");
    for (size_t i = 0; i < m.n_dims; i++) {
        inside(m.dim_name[i], data, size);
        inside(m.dim_value[i], data, size);
        no_bytes(m.dim_name[i], " |,:.\"\\{}=");
        no_bytes(m.dim_value[i], "|,\x7f");
    }
    /* written back, the same fields */
    struct buf b;
    buf_init(&b);
    buf_printf(&b, "%.*s.%.*s:%.17g|#", (int)m.name.len, m.name.p, (int)m.unit.len, m.unit.p,
               m.value);
    for (size_t i = 0; i < m.n_dims; i++)
        buf_printf(&b, "%s%.*s:%.*s", i ? "," : "", (int)m.dim_name[i].len, m.dim_name[i].p,
                   (int)m.dim_value[i].len, m.dim_value[i].p);
    buf_printf(&b, "|#type:%s|#hostname:%.*s,%.*s",
               m.kind == 'c'   ? "COUNTER"
               : m.kind == 'g' ? "GAUGE"
                               : "HISTOGRAM",
               (int)m.host.len, m.host.p, (int)m.timestamp.len, m.timestamp.p);
    if (m.request_ids.len)
        buf_printf(&b, ",%.*s", (int)m.request_ids.len, m.request_ids.p);
    struct metric_line m2;
    FUZZ_CHECK(metric_line_parse((const char *)b.data, b.len, &m2, why, sizeof(why)) == 0);
    FUZZ_CHECK(m2.kind == m.kind && m2.value == m.value && m2.n_dims == m.n_dims);
    FUZZ_CHECK(same(m2.name, m.name) && same(m2.unit, m.unit) && same(m2.host, m.host));
    FUZZ_CHECK(same(m2.request_ids, m.request_ids));
    for (size_t i = 0; i < m.n_dims; i++)
        FUZZ_CHECK(same(m2.dim_name[i], m.dim_name[i]) && same(m2.dim_value[i], m.dim_value[i]));
    buf_free(&b);
    /* into the table: taken or refused, within its bounds */
    if (model_metrics_record(&mm, &m, why, sizeof(why)))
        FUZZ_CHECK(why[0]);
    FUZZ_CHECK(mm.n <= MODEL_METRICS_MAX);
    for (size_t i = 0; i < mm.n; i++)
        FUZZ_CHECK(mm.v[i].n_series <= MODEL_METRICS_SERIES_MAX);
    return 0;
}
