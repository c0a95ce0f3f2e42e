/*
 * metrics: the histograms' bucket bounds and the per-model table of worker-reported metrics
 * (see metrics.h). The table is a small array searched by name: a handful of names per model,
 * looked up once per reported value.
 */
#include "metrics.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

const double hist_ms_bounds[HIST_BUCKETS - 1] = {0.1, 0.25, 0.5, 1,   2.5,  5,    10,   25,
                                                 50,  100,  250, 500, 1000, 2500, 10000};
const double hist_size_bounds[HIST_BUCKETS - 1] = {1,  2,  3,  4,   6,   8,   12,  16,
                                                   24, 32, 64, 128, 256, 512, 1024};

/* Families the frontend serves itself: a worker's metric must not shadow or split them. */
static int reserved(const char *name)
{
    static const char *const own[] = {"Requests2XX", "Requests4XX",      "Requests5XX",
                                      "QueueTime",   "WorkerThreadTime", "WorkerLoadTime"};
    if (!strncmp(name, "ts_", 3))
        return 1;
    for (size_t i = 0; i < sizeof(own) / sizeof(own[0]); i++)
        if (!strcmp(name, own[i]))
            return 1;
    return 0;
}

const struct custom_metric *custom_metrics_find(const struct custom_metrics *cm, const char *name)
{
    for (size_t i = 0; i < cm->n; i++)
        if (!strcmp(cm->v[i].name, name))
            return &cm->v[i];
    return NULL;
}

int custom_metrics_record(struct custom_metrics *cm, const struct otf_metric *m, char *why,
                          size_t n)
{
    struct custom_metric *c = (struct custom_metric *)custom_metrics_find(cm, m->name);
    if (!c) {
        if (reserved(m->name)) {
            snprintf(why, n, "%s is a metric the frontend serves itself", m->name);
            goto refuse;
        }
        int own = strcmp(m->name, "HandlerTime") && strcmp(m->name, "PredictionTime");
        if (own && cm->n_custom == CUSTOM_METRICS_MAX) {
            snprintf(why, n, "%s: the model has %d metric names already (the most it may have)",
                     m->name, CUSTOM_METRICS_MAX);
            goto refuse;
        }
        if (!cm->v)
            cm->v = xcalloc(CUSTOM_METRICS_MAX + 2, sizeof(*cm->v));
        cm->n_custom += own;
        c = &cm->v[cm->n++];
        memset(c, 0, sizeof(*c));
        strcpy(c->name, m->name);
        strcpy(c->unit, m->unit);
        c->kind = m->kind;
    } else if (c->kind != m->kind) {
        snprintf(why, n, "%s was a %s, not a %s", m->name,
                 c->kind == 'c'   ? "counter"
                 : c->kind == 'g' ? "gauge"
                                  : "histogram",
                 m->kind == 'c'   ? "counter"
                 : m->kind == 'g' ? "gauge"
                                  : "histogram");
        goto refuse;
    }
    switch (c->kind) {
    case 'c':
        if (m->value < 0) {
            snprintf(why, n, "%s is a counter and cannot go down (%g)", m->name, m->value);
            goto refuse;
        }
        c->value += m->value;
        break;
    case 'g':
        c->value = m->value;
        break;
    default:
        hist_observe(&c->h, hist_ms_bounds, m->value);
    }
    return 0;
refuse:
    cm->refused++;
    return -1;
}

void custom_metrics_free(struct custom_metrics *cm)
{
    free(cm->v);
    memset(cm, 0, sizeof(*cm));
}
