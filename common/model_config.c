/*
 * model_config: the frontend's keys of model-config.yaml, read through yaml_flat.
 *
 * Only the keys in the table, deviceType and deviceIds are typed here; every other key (the
 * handler's section, ...) belongs to the worker, which reads the same file, so they pass
 * silently. A
 * value that is present but wrong fails the load with the file's line: a batchSize of "abc"
 * quietly becoming 1 would be found only in production. A null value (`batchSize:`) leaves the
 * default, as TorchServe's SnakeYAML reader does.
 */
#include "model_config.h"

#include <errno.h>
#include <stdarg.h>
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
    {"openai.enabled", MC_BOOL, F(openai_enabled), 0, 1},
};

/* The string keys: tensor names (printable ASCII, no spaces, up to MC_NAME_MAX - 1 bytes). */
static const struct {
    const char *name;
    size_t off;
} mc_names[] = {
    {"openai.promptInput", F(openai_prompt_input)},
    {"openai.textOutput", F(openai_text_output)},
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
    mc->openai_enabled = 0;
    snprintf(mc->openai_prompt_input, sizeof(mc->openai_prompt_input), "prompt");
    mc->openai_text_output[0] = '\0';
    mc->device_type = MC_DEVICE_UNSET;
    mc->n_device_ids = -1;
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

/* TorchServe's model-config.yaml keys that we do not act on (GPU and distributed inference,
 * Python environments): a warning that names them. */
static const struct {
    const char *name, *why;
} no_effect[] = {
    {"parallelType", "a worker is one process on one device"},
    {"parallelLevel", "a worker is one process on one device"},
    {"torchrun", "distributed inference is not supported"},
    {"pippy", "distributed inference is not supported"},
    {"tp_config", "distributed inference is not supported"},
    {"useVenv", "Python handlers are not supported"},
    {"asyncCommunication", "workers always stream over their socket"},
    {"pt2", "models are TorchScript, run by libtorch"},
    {"compile", "models are TorchScript, run by libtorch"},
};

static void say(model_config_warn_fn *warn, void *arg, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void say(model_config_warn_fn *warn, void *arg, const char *fmt, ...)
{
    if (!warn)
        return;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    warn(msg, arg);
}

/* A key that is not one of mc_keys: the handler's section, deviceType and deviceIds (read by
 * devices()), one TorchServe has and we do not act on (a warning), or unknown (a warning with
 * the closest key). 0. */
static int other_key(const char *name, const struct yflat_entry *e, model_config_warn_fn *warn,
                     void *arg, char *err, size_t errlen)
{
    char top[64];
    size_t n = strcspn(e->path, ".");
    snprintf(top, sizeof(top), "%.*s", (int)(n < sizeof(top) ? n : sizeof(top) - 1), e->path);
    if (!strcmp(top, "handler"))
        return 0; /* the worker's */
    const char *names[sizeof mc_keys / sizeof mc_keys[0] + 2];
    for (size_t i = 0; i < sizeof mc_keys / sizeof mc_keys[0]; i++) {
        names[i] = mc_keys[i].name;
        if (!strcmp(mc_keys[i].name, e->path))
            return 0;
    }
    if (!strcmp(top, "openai")) {
        static const char *const sub[] = {"openai.enabled", "openai.promptInput",
                                          "openai.textOutput"};
        for (size_t i = 0; i < sizeof sub / sizeof sub[0]; i++)
            if (!strcmp(sub[i], e->path))
                return 0;
        const char *near = ts_closest(e->path, sub, sizeof sub / sizeof sub[0]);
        say(warn, arg, "%s:%d: unknown key '%s' (ignored%s%s%s)", name, e->line, e->path,
            near ? "; did you mean '" : "", near ? near : "", near ? "'?" : "");
        return 0;
    }
    (void)err;
    (void)errlen;
    if (!strcmp(top, "deviceType") || !strcmp(top, "deviceIds"))
        return 0;
    for (size_t i = 0; i < sizeof no_effect / sizeof no_effect[0]; i++)
        if (!strcmp(top, no_effect[i].name)) {
            say(warn, arg, "%s:%d: %s has no effect in torchserve-c: %s", name, e->line, top,
                no_effect[i].why);
            return 0;
        }
    names[sizeof mc_keys / sizeof mc_keys[0]] = "deviceType";
    names[sizeof mc_keys / sizeof mc_keys[0] + 1] = "deviceIds";
    const char *near = ts_closest(top, names, sizeof names / sizeof names[0]);
    if (near)
        say(warn, arg, "%s:%d: unknown key '%s' (ignored; did you mean '%s'?)", name, e->line, top,
            near);
    else
        say(warn, arg, "%s:%d: unknown key '%s' (ignored)", name, e->line, top);
    return 0;
}

/* deviceType (cpu or gpu, in any case, as TorchServe reads it) and deviceIds (a list of
 * integers: the GPUs, by gpu_id, the model's workers rotate over). Whether they can be used on
 * this host is the frontend's to say (gpu_assign.h); here only their form. 0 or
 * TS_E_BAD_CONFIG. */
static int devices(const char *name, const struct yflat *y, struct model_config *mc, char *err,
                   size_t errlen)
{
    const struct yflat_entry *e = yflat_get(y, "deviceType");
    if (e && !is_null(e->value)) {
        if (!strcasecmp(e->value, "cpu"))
            mc->device_type = MC_DEVICE_CPU;
        else if (!strcasecmp(e->value, "gpu"))
            mc->device_type = MC_DEVICE_GPU;
        else {
            snprintf(err, errlen, "%s:%d: deviceType: expected cpu or gpu, got '%s'", name, e->line,
                     e->value);
            return TS_E_BAD_CONFIG;
        }
    }
    e = yflat_get(y, "deviceIds");
    if (e && !is_null(e->value)) {
        snprintf(err, errlen, "%s:%d: deviceIds: expected a list of GPU ids, got '%s'", name,
                 e->line, e->value);
        return TS_E_BAD_CONFIG;
    }
    for (int i = 0;; i++) {
        char key[32];
        snprintf(key, sizeof(key), "deviceIds.%d", i);
        if (!(e = yflat_get(y, key)))
            break;
        long v;
        if (i >= MC_MAX_DEVICE_IDS) {
            snprintf(err, errlen, "%s:%d: deviceIds: at most %d GPU ids", name, e->line,
                     MC_MAX_DEVICE_IDS);
            return TS_E_BAD_CONFIG;
        }
        if (ts_parse_long(e->value, 0, INT_MAX, &v) || !strchr("+0123456789", e->value[0])) {
            snprintf(err, errlen, "%s:%d: deviceIds: expected a GPU id (0, 1, ...), got '%s'", name,
                     e->line, e->value);
            return TS_E_BAD_CONFIG;
        }
        mc->device_ids[i] = (int)v;
        mc->n_device_ids = i + 1;
    }
    return 0;
}

int model_config_load(const char *path, struct model_config *mc, model_config_warn_fn *warn,
                      void *warn_arg, char *err, size_t errlen)
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
    for (size_t i = 0; i < sizeof mc_names / sizeof mc_names[0] && !rc; i++) {
        const struct yflat_entry *e = yflat_get(&y, mc_names[i].name);
        if (!e || is_null(e->value))
            continue;
        size_t n = strlen(e->value);
        int ok = n > 0 && n < MC_NAME_MAX;
        for (size_t k = 0; ok && k < n; k++)
            ok = e->value[k] > ' ' && e->value[k] < 0x7f;
        if (!ok) {
            snprintf(err, errlen,
                     "%s:%d: %s: expected a tensor name (1 to %d printable bytes, no spaces), "
                     "got '%s'",
                     name, e->line, mc_names[i].name, MC_NAME_MAX - 1, e->value);
            rc = TS_E_BAD_CONFIG;
        } else {
            memcpy((char *)mc + mc_names[i].off, e->value, n + 1);
        }
    }
    if (!rc)
        rc = devices(name, &y, mc, err, errlen);
    for (size_t i = 0; i < y.n && !rc; i++)
        rc = other_key(name, &y.e[i], warn, warn_arg, err, errlen);
    yflat_free(&y);
    if (rc)
        model_config_defaults(mc);
    return rc;
}
