/*
 * metrics: histograms with fixed buckets for the per-model latencies and batch sizes that
 * /metrics serves (TorchServe has only ever-growing counters for them). Counts per bucket, not
 * cumulative (the Prometheus output accumulates); observing is a few comparisons and adds, on
 * the loop thread only.
 */
#ifndef TS_METRICS_H
#define TS_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "otf.h"

#define HIST_BUCKETS 16 /* HIST_BUCKETS - 1 bounds, then +Inf */

struct hist {
    uint64_t counts[HIST_BUCKETS];
    double sum;
    uint64_t count;
};

/* Milliseconds: 0.1 ms to 10 s. */
extern const double hist_ms_bounds[HIST_BUCKETS - 1];
/* Batch sizes: 1 to 1024, below an empty bucket up to 0.999 (metrics.c says why). */
extern const double hist_size_bounds[HIST_BUCKETS - 1];

/* Building with -DTS_METRICS_OFF (make EXTRA_CFLAGS=-DTS_METRICS_OFF BUILD=build-nometrics)
 * leaves out the histograms and the workers' metric lines: the baseline of the metrics' cost
 * (scripts/bench/cg_request.sh), not a configuration. */
static inline void hist_observe(struct hist *h, const double *bounds, double v)
{
#ifdef TS_METRICS_OFF
    (void)h, (void)bounds, (void)v;
    return;
#endif
    int i = 0;
    while (i < HIST_BUCKETS - 1 && v > bounds[i])
        i++;
    h->counts[i]++;
    h->sum += v;
    h->count++;
}

/* ---- the names each model's workers report (binary records, metric lines): a model may bring
 * at most CUSTOM_METRICS_MAX names of its own besides HandlerTime and PredictionTime, so that a
 * handler that makes names up per request cannot grow the frontend's memory or /metrics without
 * bound; a name keeps the kind it was first reported with; the frontend's own families cannot be
 * shadowed. The values themselves are in the server's table (model_metrics.h). */
#define CUSTOM_METRICS_MAX 32

struct custom_metric {
    char name[OTF_METRIC_NAME_MAX + 1];
    size_t name_len;
    char kind; /* 'c' counter, 'g' gauge, 'h' histogram */
};

struct custom_metrics {
    struct custom_metric *v;
    size_t n;         /* entries in v */
    size_t n_custom;  /* of them, the handler's own (not HandlerTime or PredictionTime) */
    uint64_t refused; /* values dropped, counted by the owner (model.c) */
};

/* 1 for the frontend's families that carry TorchServe's names (Requests2XX, QueueTime,
 * ts_inference_requests_total, ...: what metrics.yaml's ts_metrics section may name and a
 * worker's metric may not). */
int metrics_frontend_family(const char *name);
/* A metric kind ('c', 'g' or 'h', as otf.h and metric_line.h carry it) by its name in Prometheus'
 * TYPE lines and metrics.yaml: "counter", "gauge", "histogram". */
const char *metrics_kind_name(char kind);

/* Admits one value of name (kind 'c', 'g' or 'h') for the model: 0, or -1 with why (the name
 * over the cap, a kind that differs from the name's first one, a name the frontend serves
 * itself). */
int custom_metrics_admit(struct custom_metrics *cm, char kind, const char *name, size_t len,
                         char *why, size_t n);
void custom_metrics_free(struct custom_metrics *cm);

#endif
