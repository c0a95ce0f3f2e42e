/*
 * metrics_config: TorchServe's metrics.yaml (config.properties metrics_config=FILE): its
 * model_metrics section declares model metrics (type, unit, dimension names) into the server's
 * table (model_metrics.h), its ts_metrics section names the frontend metrics to serve. The
 * `dimensions` section and YAML anchors/aliases (&model_name / *model_name) are read as
 * TorchServe's file uses them.
 *
 * Read once at start, on the loop thread, before anything is served; errors are
 * "file:line: reason". The worker of each model gets the model_metrics declarations as JSON
 * (metrics_config_worker_json), so that a Python handler's context.metrics.get_metric finds a
 * metric that only metrics.yaml declares, as in TorchServe.
 */
#ifndef TS_METRICS_CONFIG_H
#define TS_METRICS_CONFIG_H

#include <stddef.h>

#include "model_metrics.h"

struct metrics_config {
    char **ts_names; /* the ts_metrics section's names */
    size_t n_ts;
};

typedef void metrics_config_warn_fn(const char *msg, void *arg);

/* Reads path: model_metrics into mm (model_metrics_declare), ts_metrics into mc (zeroed first).
 * 0, or TS_E_BAD_CONFIG / -errno with err. warn may be NULL. */
int metrics_config_load(const char *path, struct model_metrics *mm, struct metrics_config *mc,
                        metrics_config_warn_fn *warn, void *warn_arg, char *err, size_t errlen);
/* 1 when name is in the ts_metrics section. */
int metrics_config_ts_declared(const struct metrics_config *mc, const char *name);
/* The declared model metrics as a JSON array of {"name","unit","type","dimensions"}; malloc'd. */
char *metrics_config_worker_json(const struct model_metrics *mm);
void metrics_config_free(struct metrics_config *mc);

#endif
