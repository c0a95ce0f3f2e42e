/*
 * metrics: histograms with fixed buckets for the per-model latencies and batch sizes that
 * /metrics serves (TorchServe has only ever-growing counters for them). Counts per bucket, not
 * cumulative (the Prometheus output accumulates); observing is a few comparisons and adds, on
 * the loop thread only.
 */
#ifndef TS_METRICS_H
#define TS_METRICS_H

#include <stdint.h>

#define HIST_BUCKETS 16 /* HIST_BUCKETS - 1 bounds, then +Inf */

struct hist {
    uint64_t counts[HIST_BUCKETS];
    double sum;
    uint64_t count;
};

/* Milliseconds: 0.1 ms to 10 s. */
extern const double hist_ms_bounds[HIST_BUCKETS - 1];
/* Batch sizes: 1 to 1024. */
extern const double hist_size_bounds[HIST_BUCKETS - 1];

static inline void hist_observe(struct hist *h, const double *bounds, double v)
{
    int i = 0;
    while (i < HIST_BUCKETS - 1 && v > bounds[i])
        i++;
    h->counts[i]++;
    h->sum += v;
    h->count++;
}

#endif
