/*
 * describe: the JSON documents of the management API's list and describe answers, built from
 * the registry as TorchServe's ModelManager prints them (field names, order, Gson's dates).
 * Pure builders over the core's models: no I/O, no pending operations (management.c does those).
 */
#include "describe.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/model.h"
#include "core/nvml.h"
#include "core/sequence.h"
#include "core/worker_pool.h"
#include "util.h"

char *describe_text(json_t *o)
{
    char *s = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(o);
    char *r = xasprintf("%s\n", s);
    free(s);
    return r;
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

json_t *describe_list(int limit, int next_page_token)
{
    if (limit > 100 || limit < 0)
        limit = 100;
    if (next_page_token < 0)
        next_page_token = 0;
    /* one entry per model name (its default version), sorted by name */
    int n = 0;
    for (struct model *m = model_first(); m; m = model_next(m))
        n += m->is_default;
    const char **names = xcalloc((size_t)n + 1, sizeof(*names));
    int k = 0;
    for (struct model *m = model_first(); m; m = model_next(m))
        if (m->is_default)
            names[k++] = m->name;
    qsort(names, (size_t)n, sizeof(*names), cmp_names);

    json_t *o = json_object();
    long last = (long)next_page_token + limit;
    if (last > n) {
        last = n;
    } else {
        char tok[24];
        snprintf(tok, sizeof(tok), "%ld", last);
        json_object_set_new(o, "nextPageToken", json_string(tok));
    }
    json_t *arr = json_array();
    for (long i = next_page_token; i < last; i++) {
        struct model *m = NULL;
        if (model_find(names[i], NULL, &m))
            continue;
        json_t *e = json_object();
        json_object_set_new(e, "modelName", json_string(m->name));
        json_object_set_new(e, "modelUrl", json_string(m->url));
        json_array_append_new(arr, e);
    }
    json_object_set_new(o, "models", arr);
    free(names);
    return o;
}

/* Gson's date format for startTime: local time with a literal 'Z', as TorchServe prints it. */
static json_t *start_time(int64_t wall_ms)
{
    time_t t = (time_t)(wall_ms / 1000);
    struct tm tm;
    localtime_r(&t, &tm);
    char b[64];
    snprintf(b, sizeof(b), "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
             tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(wall_ms % 1000));
    return json_string(b);
}

/* n with Java's NumberFormat grouping ("81,559"), as TorchServe's MessageFormat prints it. */
static void java_int(char *out, size_t len, unsigned long long n)
{
    char d[32];
    int k = snprintf(d, sizeof(d), "%llu", n), o = 0;
    for (int i = 0; i < k && o + 2 < (int)len; i++) {
        if (i && (k - i) % 3 == 0)
            out[o++] = ',';
        out[o++] = d[i];
    }
    out[o] = '\0';
}

/* A worker's gpuUsage as TorchServe's Accelerator.utilizationToString() writes it, from NVML
 * now (TorchServe runs nvidia-smi for each describe): "N/A" on the CPU. */
static json_t *gpu_usage(const struct worker *w)
{
    if (w->gpu_id < 0)
        return json_string("N/A");
    struct nvml_usage u;
    if (nvml_usage(w->gpu_id, &u))
        return json_string("failed to obtained gpu usage"); /* sic, TorchServe's text */
    char id[32], g[32], mem[32], used[40];
    java_int(id, sizeof(id), (unsigned long long)w->gpu_id);
    java_int(g, sizeof(g), u.util_gpu);
    java_int(mem, sizeof(mem), u.util_mem);
    java_int(used, sizeof(used), u.mem_used >> 20);
    char b[256];
    snprintf(b, sizeof(b),
             "gpuId::%s utilization.gpu::%s %% utilization.memory::%s %% memory.used::%s MiB", id,
             g, mem, used);
    return json_string(b);
}

json_t *describe_model(const struct model *m)
{
    const struct model_config *mc = &m->mc;
    json_t *o = json_object();
    json_object_set_new(o, "modelName", json_string(m->name));
    json_object_set_new(o, "modelVersion", json_string(m->version));
    json_object_set_new(o, "modelUrl", json_string(m->url));
    json_object_set_new(
        o, "runtime",
        json_string(m->manifest.runtime && *m->manifest.runtime ? m->manifest.runtime : "python"));
    json_object_set_new(o, "minWorkers", json_integer(m->min_workers > 0 ? m->min_workers : 0));
    json_object_set_new(o, "maxWorkers", json_integer(m->max_workers > 0 ? m->max_workers : 0));
    json_object_set_new(o, "batchSize", json_integer(m->pool.batch_size));
    json_object_set_new(o, "maxBatchDelay", json_integer(m->max_batch_delay_ms));
    json_object_set_new(o, "responseTimeout", json_integer(m->pool.response_timeout_s));
    json_object_set_new(o, "startupTimeout", json_integer(m->pool.startup_timeout_s));
    json_object_set_new(o, "maxRetryTimeoutInSec", json_integer(mc->max_retry_timeout_s));
    json_object_set_new(o, "clientTimeoutInMills", json_integer(mc->client_timeout_ms));
    json_object_set_new(o, "parallelType", json_string(""));
    json_object_set_new(o, "parallelLevel", json_integer(0));
    /* the effective type, as TorchServe's Model decides it (gpu_assign.h), and the deviceIds it
     * kept (an invalid list is dropped, and Gson leaves a null out) */
    json_object_set_new(o, "deviceType", json_string(m->pool.gpu.on_gpu ? "gpu" : "cpu"));
    if (m->pool.gpu.n_ids > 0) {
        json_t *ids = json_array();
        for (int i = 0; i < m->pool.gpu.n_ids; i++)
            json_array_append_new(ids, json_integer(m->pool.gpu.ids[i]));
        json_object_set_new(o, "deviceIds", ids);
    }
    json_object_set_new(o, "continuousBatching",
                        json_boolean(mc->continuous_batching || m->pool.continuous));
    json_object_set_new(o, "useJobTicket", json_false());
    json_object_set_new(o, "useVenv", json_false());
    json_object_set_new(o, "stateful", json_boolean(mc->sequence_batching));
    json_object_set_new(o, "sequenceBatching", json_boolean(mc->sequence_batching));
    json_object_set_new(o, "sequenceMaxIdleMSec", json_integer(mc->seq_max_idle_ms));
    json_object_set_new(o, "sequenceTimeoutMSec", json_integer(mc->seq_timeout_ms));
    /* the effective value: TorchServe's silent default of 1 is what this project fixes */
    json_object_set_new(o, "maxNumSequence", json_integer(sequence_max_num(&m->mc, &m->pool)));
    json_object_set_new(o, "maxSequenceJobQueueSize",
                        json_integer(mc->max_seq_job_queue > 0 ? mc->max_seq_job_queue : 1));
    json_object_set_new(o, "openSequences", json_integer(sequence_open_count(m->seqs)));
    /* handler.cache.capacity; unset means the worker's default (STATE_DEFAULT_CAPACITY) */
    json_object_set_new(o, "cacheCapacity",
                        json_integer(mc->cache_capacity > 0 ? mc->cache_capacity : 1024));
    json_object_set_new(o, "loadedAtStartup", json_boolean(m->loaded_at_startup));
    json_t *ws = json_array();
    const struct worker *w;
    TAILQ_FOREACH(w, &m->pool.workers, link)
    {
        if (w->state == WORKER_STOPPING)
            continue;
        json_t *e = json_object();
        char id[16];
        snprintf(id, sizeof(id), "%d", w->id);
        json_object_set_new(e, "id", json_string(id));
        json_object_set_new(e, "startTime", start_time(w->start_wall_ms));
        json_object_set_new(e, "status", json_string(worker_state_name(w)));
        json_object_set_new(
            e, "memoryUsage",
            json_integer(w->pid > 0 ? (json_int_t)worker_rss_kb(w->pid) * 1024 : 0));
        json_object_set_new(e, "pid", json_integer(w->pid > 0 ? w->pid : -1));
        json_object_set_new(e, "gpu", json_boolean(w->gpu_id >= 0));
        json_object_set_new(e, "gpuUsage", gpu_usage(w));
        json_array_append_new(ws, e);
    }
    json_object_set_new(o, "workers", ws);
    if (m->pool.load_error[0])
        json_object_set_new(o, "loadError", json_string(m->pool.load_error));
    json_t *q = json_object();
    json_object_set_new(q, "remainingCapacity", json_integer(m->queue_max - m->queue_len));
    json_object_set_new(q, "pendingRequests", json_integer(m->queue_len));
    json_object_set_new(o, "jobQueueStatus", q);
    return o;
}

static int cmp_versions(const void *a, const void *b)
{
    const struct model *x = *(const struct model *const *)a, *y = *(const struct model *const *)b;
    return strcmp(x->version, y->version);
}

json_t *describe_versions(const char *name)
{
    int n = 0;
    for (struct model *o = model_first(); o; o = model_next(o))
        n += !strcmp(o->name, name);
    struct model **ms = xcalloc((size_t)n + 1, sizeof(*ms));
    int k = 0;
    for (struct model *o = model_first(); o; o = model_next(o))
        if (!strcmp(o->name, name))
            ms[k++] = o;
    qsort(ms, (size_t)n, sizeof(*ms), cmp_versions);
    json_t *arr = json_array();
    for (int i = 0; i < n; i++)
        json_array_append_new(arr, describe_model(ms[i]));
    free(ms);
    return arr;
}
