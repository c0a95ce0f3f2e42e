/*
 * metrics: the histograms' bucket bounds and the per-model admission of worker-reported metric
 * names (see metrics.h). A small array searched by name: a handful of names per model, looked up
 * once per reported value.
 */
#include "metrics.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

const double hist_ms_bounds[HIST_BUCKETS - 1] = {0.1, 0.25, 0.5, 1,   2.5,  5,    10,   25,
                                                 50,  100,  250, 500, 1000, 2500, 10000};
/* Batch sizes are whole numbers from 1. histogram_quantile interpolates inside a bucket from the
 * bound below it, and takes 0 as the lower edge of the lowest bucket: with "le=1" lowest, batches
 * all of 1 read as p50 0.5 and p99 0.99, below any batch there was. An empty bucket up to 0.999
 * makes the bucket of 1 (0.999, 1], which reads 1 to three decimals at every quantile. */
const double hist_size_bounds[HIST_BUCKETS - 1] = {0.999, 1,  2,  3,   4,   6,   8,   12,
                                                   16,    32, 64, 128, 256, 512, 1024};

int metrics_frontend_family(const char *name)
{
    static const char *const own[] = {"Requests2XX",
                                      "Requests4XX",
                                      "Requests5XX",
                                      "QueueTime",
                                      "WorkerThreadTime",
                                      "WorkerLoadTime",
                                      "ts_inference_requests_total",
                                      "ts_inference_latency_microseconds",
                                      "ts_queue_latency_microseconds"};
    for (size_t i = 0; i < sizeof(own) / sizeof(own[0]); i++)
        if (!strcmp(name, own[i]))
            return 1;
    return 0;
}

/* Families the frontend serves itself: a worker's metric must not shadow or split them. */
static int reserved(const char *name)
{
    /* ts_handler_*: TorchServe's handler profiling (handler: {profile: true}) */
    if (!strncmp(name, "ts_", 3) && strncmp(name, "ts_handler_", 11))
        return 1;
    return metrics_frontend_family(name);
}

static const struct custom_metric *find(const struct custom_metrics *cm, const char *name,
                                        size_t len)
{
    for (size_t i = 0; i < cm->n; i++)
        if (cm->v[i].name_len == len && !memcmp(cm->v[i].name, name, len))
            return &cm->v[i];
    return NULL;
}

const char *metrics_kind_name(char kind)
{
    return kind == 'c' ? "counter" : kind == 'g' ? "gauge" : "histogram";
}

int custom_metrics_admit(struct custom_metrics *cm, char kind, const char *p, size_t len, char *why,
                         size_t n)
{
    const struct custom_metric *c = find(cm, p, len);
    if (c && c->kind == kind)
        return 0;
    char name[OTF_METRIC_NAME_MAX + 1]; /* the slow paths: a new name, a refusal */
    snprintf(name, sizeof(name), "%.*s",
             (int)(len < OTF_METRIC_NAME_MAX ? len : OTF_METRIC_NAME_MAX), p);
    if (c) {
        snprintf(why, n, "%s was a %s, not a %s", name, metrics_kind_name(c->kind),
                 metrics_kind_name(kind));
        goto refuse;
    }
    if (len > OTF_METRIC_NAME_MAX || reserved(name)) {
        snprintf(why, n, "%s is a metric the frontend serves itself", name);
        goto refuse;
    }
    int own = strcmp(name, "HandlerTime") && strcmp(name, "PredictionTime");
    if (own && cm->n_custom == CUSTOM_METRICS_MAX) {
        snprintf(why, n, "%s: the model has %d metric names already (the most it may have)", name,
                 CUSTOM_METRICS_MAX);
        goto refuse;
    }
    if (!cm->v)
        cm->v = xcalloc(CUSTOM_METRICS_MAX + 2, sizeof(*cm->v));
    cm->n_custom += own;
    struct custom_metric *e = &cm->v[cm->n++];
    memcpy(e->name, name, len + 1);
    e->name_len = len;
    e->kind = kind;
    return 0;
refuse:
    return -1;
}

void custom_metrics_free(struct custom_metrics *cm)
{
    free(cm->v);
    memset(cm, 0, sizeof(*cm));
}
