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

const struct custom_metric *custom_metrics_find(const struct custom_metrics *cm, const char *name,
                                                size_t len)
{
    for (size_t i = 0; i < cm->n; i++)
        if (cm->v[i].name_len == len && !memcmp(cm->v[i].name, name, len))
            return &cm->v[i];
    return NULL;
}

static const char *kind_name(char k)
{
    return k == 'c' ? "counter" : k == 'g' ? "gauge" : "histogram";
}

int custom_metrics_record(struct custom_metrics *cm, const struct otf_metric *m, char *why,
                          size_t n)
{
    size_t len = (size_t)m->name.len;
    struct custom_metric *c = (struct custom_metric *)custom_metrics_find(cm, m->name.p, len);
    char name[OTF_METRIC_NAME_MAX + 1]; /* for the slow paths: a new name, a refusal */
    if (!c || c->kind != m->kind || (c->kind == 'c' && m->value < 0))
        snprintf(name, sizeof(name), "%.*s", (int)len, m->name.p);
    if (!c) {
        if (reserved(name)) {
            snprintf(why, n, "%s is a metric the frontend serves itself", name);
            goto refuse;
        }
        int own = strcmp(name, "HandlerTime") && strcmp(name, "PredictionTime");
        if (own && cm->n_custom == CUSTOM_METRICS_MAX) {
            snprintf(why, n, "%s: the model has %d metric names already (the most it may have)",
                     name, CUSTOM_METRICS_MAX);
            goto refuse;
        }
        if (!cm->v)
            cm->v = xcalloc(CUSTOM_METRICS_MAX + 2, sizeof(*cm->v));
        cm->n_custom += own;
        c = &cm->v[cm->n++];
        memset(c, 0, sizeof(*c));
        memcpy(c->name, name, len + 1);
        c->name_len = len;
        snprintf(c->unit, sizeof(c->unit), "%.*s", (int)m->unit.len, m->unit.p);
        c->kind = m->kind;
    } else if (c->kind != m->kind) {
        snprintf(why, n, "%s was a %s, not a %s", name, kind_name(c->kind), kind_name(m->kind));
        goto refuse;
    }
    switch (c->kind) {
    case 'c':
        if (m->value < 0) {
            snprintf(why, n, "%s is a counter and cannot go down (%g)", name, m->value);
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
