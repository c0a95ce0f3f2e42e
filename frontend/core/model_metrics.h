/*
 * model_metrics: the server's table of model metrics, TorchServe's "model_metrics" (its
 * metrics.yaml and MetricCache's backend metrics): HandlerTime and PredictionTime as the workers
 * measure them, the metrics C handlers add (ts_metric_add) and the ones Python handlers emit
 * through context.metrics. Each metric has a type, a unit and dimension names; each distinct set
 * of dimension values is one series, served on /metrics as
 * `Name{Dim="value",...,Hostname="host",} v` (TorchServe's labels). A metric is declared by
 * metrics.yaml (model_metrics_declare) or, with auto-detection on, by its first sample, which
 * gives it the sample's type, unit and dimension names in their order. A sample is mapped onto
 * its metric's dimensions by name.
 *
 * Bounded: at most MODEL_METRICS_MAX metrics and MODEL_METRICS_SERIES_MAX series each; beyond,
 * samples are refused (counted). Loop thread only; pure (no logging: callers log refusals).
 */
#ifndef TS_MODEL_METRICS_H
#define TS_MODEL_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "metric_line.h"
#include "metrics.h"
#include "util.h"

#define MODEL_METRICS_MAX 256
#define MODEL_METRICS_SERIES_MAX 256
#define MODEL_METRICS_DIMS_MAX METRIC_LINE_DIMS_MAX
#define MODEL_METRICS_UNIT_MAX 32

/* A sample, one value as a worker reports it, is a struct metric_line (metric_line.h): its
 * kind, name, unit, value, dimensions and request ids, views into the worker's bytes (a C
 * handler's binary record or the step times fill one with the default dimensions, model.c). */

struct mm_series {
    char *values[MODEL_METRICS_DIMS_MAX];
    double value; /* counter: the sum; gauge: the last value */
    struct hist h;
};

struct mm_metric {
    char name[OTF_METRIC_NAME_MAX + 1];
    char unit[MODEL_METRICS_UNIT_MAX + 1];
    char kind;
    int declared; /* by metrics.yaml */
    size_t n_dims;
    char *dims[MODEL_METRICS_DIMS_MAX];
    struct mm_series *series;
    size_t n_series;
};

struct model_metrics {
    struct mm_metric *v;
    size_t n;
    int auto_detect; /* undeclared metrics are registered by their first sample */
    uint64_t refused;
};

void model_metrics_init(struct model_metrics *mm, int auto_detect);
/* Declares a metric (metrics.yaml): 0, or -1 with why (a bad name or unit, too many metrics or
 * dimensions, the name declared twice). */
int model_metrics_declare(struct model_metrics *mm, char kind, const char *name, const char *unit,
                          const char *const *dims, size_t n_dims, char *why, size_t n);
/* Records one sample: 0, or -1 with why (undeclared without auto-detection, another type than
 * the metric's, a declared dimension the sample lacks, a counter going down, a bound reached). */
int model_metrics_record(struct model_metrics *mm, const struct metric_line *s, char *why,
                         size_t n);
const struct mm_metric *model_metrics_find(const struct model_metrics *mm, const char *name,
                                           size_t len);
/* TorchServe's model_metrics.log line for s, without the time prefix: "Name.Unit:value|#Dim:v,..|
 * #hostname:host[,requestID:ids],timestamp:T\n" (ids: s's request_ids). unit: the metric's
 * declared unit, else s's. */
void model_metrics_log_line(struct buf *b, const struct metric_line *s, const char *unit,
                            const char *host, long long ts);
/* The value as TorchServe writes one: at least one decimal ("1.0", "2.5", "17.63"). */
void model_metrics_fmt_value(char *out, size_t n, double v);
void model_metrics_free(struct model_metrics *mm);

#endif
