/*
 * model_config: the frontend's keys of model-config.yaml, read through yaml_flat.
 *
 * Only the keys in the table are typed here; every other key (the handler's section, deviceIds,
 * torchrun, ...) belongs to the worker, which reads the same file, so they pass silently. A
 * value that is present but wrong fails the load with the file's line: a batchSize of "abc"
 * quietly becoming 1 would be found only in production. A null value (`batchSize:`) leaves the
 * default, as TorchServe's SnakeYAML reader does.
 */
#include "model_config.h"

#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "util.h"
#include "yaml_flat.h"

enum mc_kind { MC_INT, MC_BOOL };

struct mc_key {
    const char *name;
    enum mc_kind kind;
    size_t off;
    long min, max;
};

#define F(field) offsetof(struct model_config, field)

static const struct mc_key mc_keys[] = {
    {"minWorkers", MC_INT, F(min_workers), 0, MC_MAX_WORKERS},
    {"maxWorkers", MC_INT, F(max_workers), 0, MC_MAX_WORKERS},
    {"batchSize", MC_INT, F(batch_size), 1, MC_MAX_BATCH_SIZE},
    {"maxBatchDelay", MC_INT, F(max_batch_delay_ms), 0, MC_MAX_DELAY_MS},
    {"responseTimeout", MC_INT, F(response_timeout_s), 1, MC_MAX_TIMEOUT_S},
    {"startupTimeout", MC_INT, F(startup_timeout_s), 1, MC_MAX_TIMEOUT_S},
    {"jobQueueSize", MC_INT, F(job_queue_size), 1, MC_MAX_QUEUE},
    {"maxRetryTimeoutInSec", MC_INT, F(max_retry_timeout_s), 0, MC_MAX_TIMEOUT_S},
    {"clientTimeoutInMills", MC_INT, F(client_timeout_ms), 0, INT_MAX},
    {"sequenceBatching", MC_BOOL, F(sequence_batching), 0, 1},
    {"continuousBatching", MC_BOOL, F(continuous_batching), 0, 1},
    {"sequenceMaxIdleMSec", MC_INT, F(seq_max_idle_ms), 0, INT_MAX},
    {"sequenceTimeoutMSec", MC_INT, F(seq_timeout_ms), 0, INT_MAX},
    {"maxSequenceJobQueueSize", MC_INT, F(max_seq_job_queue), 1, MC_MAX_QUEUE},
    {"maxNumSequence", MC_INT, F(max_num_sequence), 1, MC_MAX_QUEUE},
    {"handler.cache.capacity", MC_INT, F(cache_capacity), 0, MC_MAX_QUEUE},
};

void model_config_defaults(struct model_config *mc)
{
    mc->min_workers = -1;
    mc->max_workers = -1;
    mc->batch_size = -1;
    mc->max_batch_delay_ms = -1;
    mc->response_timeout_s = -1;
    mc->startup_timeout_s = -1;
    mc->job_queue_size = -1;
    mc->max_retry_timeout_s = 300;
    mc->client_timeout_ms = 0;
    mc->sequence_batching = 0;
    mc->continuous_batching = 0;
    mc->seq_max_idle_ms = 0;
    mc->seq_timeout_ms = 0;
    mc->max_seq_job_queue = 1;
    mc->max_num_sequence = -1;
    mc->cache_capacity = -1;
}

/* YAML 1.1 booleans, as SnakeYAML reads them. */
static int parse_yaml_bool(const char *v, int *out)
{
    static const char *const yes[] = {"true", "yes", "on", "y"};
    static const char *const no[] = {"false", "no", "off", "n"};
    for (size_t i = 0; i < 4; i++) {
        if (!strcasecmp(v, yes[i])) {
            *out = 1;
            return 0;
        }
        if (!strcasecmp(v, no[i])) {
            *out = 0;
            return 0;
        }
    }
    return -EINVAL;
}

static int is_null(const char *v)
{
    return !*v || !strcmp(v, "~") || !strcasecmp(v, "null");
}

int model_config_load(const char *path, struct model_config *mc, char *err, size_t errlen)
{
    model_config_defaults(mc);
    const char *slash = strrchr(path, '/');
    const char *name = slash ? slash + 1 : path;
    struct yflat y;
    int rc = yflat_parse_file(path, name, &y, err, errlen);
    if (rc)
        return rc == TS_E_TOO_LARGE ? TS_E_BAD_CONFIG : rc;
    for (size_t i = 0; i < sizeof mc_keys / sizeof mc_keys[0] && !rc; i++) {
        const struct mc_key *k = &mc_keys[i];
        const struct yflat_entry *e = yflat_get(&y, k->name);
        if (!e || is_null(e->value))
            continue;
        int *field = (int *)((char *)mc + k->off);
        const char *reason = NULL;
        char why[48];
        if (k->kind == MC_BOOL) {
            if (parse_yaml_bool(e->value, field))
                reason = "expected true or false";
        } else {
            long v;
            int prc = ts_parse_long(e->value, LONG_MIN, LONG_MAX, &v);
            if (prc == -ERANGE || (!prc && (v > INT_MAX || v < INT_MIN)))
                reason = "integer out of range";
            else if (prc || !strchr("+-0123456789", e->value[0]))
                reason = "expected an integer";
            else if (v < k->min)
                reason = k->min ? "must be at least 1" : "must not be negative";
            else if (v > k->max) {
                snprintf(why, sizeof(why), "must be at most %ld", k->max);
                reason = why;
            } else
                *field = (int)v;
        }
        if (reason) {
            snprintf(err, errlen, "%s:%d: %s: %s, got '%s'", name, e->line, k->name, reason,
                     e->value);
            rc = TS_E_BAD_CONFIG;
        }
    }
    yflat_free(&y);
    if (rc)
        model_config_defaults(mc);
    return rc;
}
