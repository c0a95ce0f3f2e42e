/*
 * management: register, unregister, scale, list, describe and set-default, with TorchServe's
 * statuses, sentences and JSON (ManagementRequestHandler, ApiUtils, ModelManager).
 *
 * Most operations finish inside the call. Three kinds wait, as a `struct mgmt_op` on the
 * pending list:
 *   - a synchronous register or scale waits until enough workers of its model are READY (done
 *     200), or one of them failed to load or died while starting (done 500; a register is then
 *     undone, as TorchServe unregisters the model again). worker_pool tells us of every worker
 *     state change through on_workers_changed(); a deadline of startupTimeout + 5 s answers 206
 *     "Workers scaling in progress..." for a scale that is still short of workers.
 *   - an unregister waits until the model's worker processes are gone (polled, the reaper runs
 *     on SIGCHLD; a worker still there after 5 s is killed), up to unregister_model_timeout
 *     (408), so that a client sees no worker left once it has its 200.
 *   - a customized describe waits for the worker's answer to a DESCRIBE job.
 * A transport whose client goes away cancels its op: the op stays until its condition is met
 * (so the model is still cleaned up) but `done` is not called.
 */
#include "management.h"

#include <errno.h>
#include <event2/event.h>
#include <jansson.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/queue.h>
#include <time.h>

#include "core/core.h"
#include "core/model.h"
#include "core/sequence.h"
#include "core/worker_pool.h"
#include "log.h"
#include "describe.h"
#include "model_register.h"
#include "snapshot.h"

/* How long an unregister lets workers exit on their own before killing them. */
#define MGMT_KILL_GRACE_MS 5000

enum op_kind { OP_PREPARE, OP_REGISTER, OP_SCALE, OP_UNREGISTER, OP_DESCRIBE };

struct mgmt_op {
    enum op_kind kind;
    mgmt_done_fn *done; /* NULL once cancelled */
    void *arg;
    struct model *model; /* register/scale/describe; NULL once the model is gone */
    int target;          /* workers to wait for (OP_PREPARE: initial_workers) */
    int synchronous;     /* OP_PREPARE: wait for the workers once registered */
    char *name, *version;
    int version_given;
    pid_t *pids; /* unregister: processes to wait for */
    int n_pids;
    int64_t started_us, deadline_us;
    int killed; /* unregister: SIGKILL sent after the grace period */
    struct event *timer;
    struct job *job;  /* customized describe */
    json_t *describe; /* customized describe: the array being built */
    LIST_ENTRY(mgmt_op) link;
};

static LIST_HEAD(, mgmt_op) pending = LIST_HEAD_INITIALIZER(pending);

/* ---- small helpers ---- */

static void fail(mgmt_done_fn *done, void *arg, int status, const char *type, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static void fail(mgmt_done_fn *done, void *arg, int status, const char *type, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    done(arg, status, type, msg);
}

static void ok(mgmt_done_fn *done, void *arg, int status, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void ok(mgmt_done_fn *done, void *arg, int status, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    done(arg, status, NULL, msg);
}

/* TorchServe's lookup errors for name + version (NULL / "" = default). */
static int find_or_fail(const char *name, const char *version, struct model **m, mgmt_done_fn *done,
                        void *arg)
{
    if (!name || !*name) {
        fail(done, arg, 400, "BadRequestException", "Parameter model_name is required.");
        return -1;
    }
    struct submit_error e;
    if (model_lookup(name, version, m, &e)) {
        fail(done, arg, e.status, e.type, "%s", e.msg);
        return -1;
    }
    return 0;
}

static int count_ready(const struct model *m)
{
    int n = 0;
    const struct worker *w;
    TAILQ_FOREACH(w, &m->pool.workers, link)
    if (w->state == WORKER_READY)
        n++;
    return n;
}

static int count_live(const struct model *m)
{
    int n = 0;
    const struct worker *w;
    TAILQ_FOREACH(w, &m->pool.workers, link)
    if (w->state != WORKER_STOPPING)
        n++;
    return n;
}

static int any_failed(const struct model *m)
{
    const struct worker *w;
    TAILQ_FOREACH(w, &m->pool.workers, link)
    if (w->state == WORKER_FAILED || w->state == WORKER_BACKOFF)
        return 1;
    return 0;
}

/* ---- pending operations ---- */

static void op_free(struct mgmt_op *op)
{
    LIST_REMOVE(op, link);
    if (op->timer)
        event_free(op->timer);
    if (op->job) {
        op->job->sink_arg = NULL;
        job_cancel(op->job);
        job_unref(op->job);
    }
    if (op->describe)
        json_decref(op->describe);
    free(op->pids);
    free(op->name);
    free(op->version);
    free(op);
}

static void op_timer(evutil_socket_t fd, short what, void *arg);

static struct mgmt_op *op_new(enum op_kind kind, mgmt_done_fn *done, void *arg, int64_t wait_ms,
                              int poll_ms)
{
    struct mgmt_op *op = xcalloc(1, sizeof(*op));
    op->kind = kind;
    op->done = done;
    op->arg = arg;
    op->started_us = ts_now_us();
    op->deadline_us = op->started_us + wait_ms * 1000;
    op->timer = evtimer_new(srv->base, op_timer, op);
    struct timeval tv = {poll_ms / 1000, (poll_ms % 1000) * 1000};
    evtimer_add(op->timer, &tv);
    LIST_INSERT_HEAD(&pending, op, link);
    return op;
}

/* Calls done once (unless cancelled) and frees the op. */
static void op_finish(struct mgmt_op *op, int status, const char *type, const char *msg)
{
    /* what changed the model set or its workers is in the next snapshot (an unregister that
     * timed out has removed the model all the same) */
    if ((status < 300 || op->kind == OP_UNREGISTER) && op->kind != OP_DESCRIBE)
        snapshot_save();
    if (op->done)
        op->done(op->arg, status, type, msg);
    op_free(op);
}

static char *scaled_msg(const struct mgmt_op *op)
{
    if (op->kind == OP_REGISTER)
        return xasprintf("Model \"%s\" Version: %s registered with %d initial workers", op->name,
                         op->version, op->target);
    if (op->version_given)
        return xasprintf("Workers scaled to %d for model: %s, version: %s", op->target, op->name,
                         op->version);
    return xasprintf("Workers scaled to %d for model: %s", op->target, op->name);
}

/* Register/scale: complete when the workers are there or one has failed. 1 if finished (op
 * freed). */
static int op_check_workers(struct mgmt_op *op, int timed_out)
{
    struct model *m = op->model;
    if (!m) {
        op_finish(op, 500, "InternalServerException", "Failed to start workers");
        return 1;
    }
    if (count_ready(m) >= op->target) {
        char *msg = scaled_msg(op);
        op_finish(op, 200, NULL, msg);
        free(msg);
        return 1;
    }
    if (any_failed(m) || (timed_out && op->kind == OP_REGISTER)) {
        /* the worker's reason (e.g. a handler import error) is what the client needs to see */
        char *msg = xasprintf("Failed to start workers%s%s", *m->pool.load_error ? ": " : "",
                              m->pool.load_error);
        if (op->kind == OP_REGISTER) {
            LOG_WARN("model %s %s: workers failed to start; unregistering it", m->name, m->version);
            op->model = NULL;
            model_unregister(m);
        }
        op_finish(op, 500, "InternalServerException", msg);
        free(msg);
        return 1;
    }
    if (timed_out) {
        op_finish(op, 206, NULL, "Workers scaling in progress...");
        return 1;
    }
    return 0;
}

static int pids_alive(struct mgmt_op *op)
{
    int alive = 0;
    for (int i = 0; i < op->n_pids; i++) {
        if (op->pids[i] <= 0)
            continue;
        if (kill(op->pids[i], 0) == 0 || errno != ESRCH)
            alive++;
        else
            op->pids[i] = 0;
    }
    return alive;
}

static void op_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct mgmt_op *op = arg;
    int timed_out = ts_now_us() >= op->deadline_us;
    switch (op->kind) {
    case OP_REGISTER:
    case OP_SCALE:
        if (!op_check_workers(op, timed_out)) {
            struct timeval tv = {1, 0};
            evtimer_add(op->timer, &tv);
        }
        return;
    case OP_UNREGISTER:
        if (pids_alive(op) && !op->killed &&
            ts_now_us() - op->started_us > MGMT_KILL_GRACE_MS * 1000) {
            /* a worker busy in a long forward() only notices its closed socket afterwards */
            for (int i = 0; i < op->n_pids; i++)
                if (op->pids[i] > 0)
                    kill(op->pids[i], SIGKILL);
            op->killed = 1;
        }
        if (!pids_alive(op)) {
            char *msg = xasprintf("Model \"%s\" unregistered", op->name);
            op_finish(op, 200, NULL, msg);
            free(msg);
            return;
        }
        if (timed_out) {
            char *msg = xasprintf("Timed out while cleaning resources: %s", op->name);
            op_finish(op, 408, "RequestTimeoutException", msg);
            free(msg);
            return;
        }
        break;
    case OP_PREPARE: /* waits for register_prepared */
        break;
    case OP_DESCRIBE:
        if (timed_out) {
            op_finish(op, 500, "InternalServerException", "Worker did not respond in given time");
            return;
        }
        break;
    }
    struct timeval tv = {0, op->kind == OP_UNREGISTER ? 5000 : 500000};
    evtimer_add(op->timer, &tv);
}

void mgmt_op_cancel(struct mgmt_op *op)
{
    if (!op)
        return;
    op->done = NULL;
    if (op->kind == OP_DESCRIBE)
        op_free(op);
}

/* A worker of m changed state: pending synchronous register/scale calls re-check. */
static void on_workers_changed(struct model *m)
{
    struct mgmt_op *op, *next;
    for (op = LIST_FIRST(&pending); op; op = next) {
        next = LIST_NEXT(op, link);
        if (op->model == m && (op->kind == OP_REGISTER || op->kind == OP_SCALE))
            event_active(op->timer, EV_TIMEOUT, 1);
    }
}

/* m is going away: its pending operations fail, its extracted archive's share of
 * max_extracted_bytes is free again. */
static void on_model_gone(struct model *m)
{
    model_register_forget(m);
    struct mgmt_op *op, *next;
    for (op = LIST_FIRST(&pending); op; op = next) {
        next = LIST_NEXT(op, link);
        if (op->model != m)
            continue;
        op->model = NULL;
        if (op->kind == OP_DESCRIBE)
            op_finish(op, 404, "ModelNotFoundException", "Model was unregistered");
        else
            op_finish(op, 500, "InternalServerException", "Failed to start workers");
    }
}

static const struct model_events mgmt_model_events = {
    .workers_changed = on_workers_changed,
    .gone = on_model_gone,
};

void mgmt_init(void)
{
    model_set_events(&mgmt_model_events);
}

void mgmt_shutdown(void)
{
    struct mgmt_op *op;
    while ((op = LIST_FIRST(&pending))) {
        op->done = NULL;
        op_free(op);
    }
}

/* ---- argument defaults ---- */

void mgmt_register_init(struct mgmt_register_args *a)
{
    memset(a, 0, sizeof(*a));
    a->batch_size = -1;
    a->max_batch_delay = -100;
    a->initial_workers = srv ? srv->cfg.default_workers_per_model : 0;
    a->synchronous = 1;
    a->response_timeout = -1;
    a->startup_timeout = -1;
}

void mgmt_scale_init(struct mgmt_scale_args *a)
{
    memset(a, 0, sizeof(*a));
    a->min_worker = 1;
    a->max_worker = 1;
}

static const char *nonempty(const char *s)
{
    return s && *s ? s : NULL;
}

void mgmt_register_from_grpc(struct mgmt_register_args *a, const char *url, const char *model_name,
                             const char *handler, const char *runtime, int32_t batch_size,
                             int32_t max_batch_delay, int32_t initial_workers, int synchronous,
                             int32_t response_timeout, int32_t startup_timeout, int s3_sse_kms)
{
    mgmt_register_init(a);
    a->url = nonempty(url);
    a->model_name = nonempty(model_name);
    a->handler = nonempty(handler);
    a->runtime = nonempty(runtime);
    if (batch_size > 0)
        a->batch_size = batch_size;
    if (max_batch_delay > 0)
        a->max_batch_delay = max_batch_delay;
    if (initial_workers > 0)
        a->initial_workers = initial_workers;
    a->synchronous = synchronous != 0;
    if (response_timeout > 0)
        a->response_timeout = response_timeout;
    if (startup_timeout > 0)
        a->startup_timeout = startup_timeout;
    a->s3_sse_kms = s3_sse_kms != 0;
}

void mgmt_scale_from_grpc(struct mgmt_scale_args *a, const char *model_name,
                          const char *model_version, int32_t min_worker, int32_t max_worker,
                          int synchronous, int32_t number_gpu, int32_t timeout)
{
    mgmt_scale_init(a);
    a->number_gpu = number_gpu;
    a->timeout = timeout;
    a->model_name = model_name;
    a->model_version = nonempty(model_version);
    a->min_worker = min_worker > 0 ? min_worker : 1;
    a->max_worker = max_worker > 0 ? max_worker : a->min_worker;
    a->synchronous = synchronous != 0;
}

/* ---- register ---- */

static void model_api_disabled(mgmt_done_fn *done, void *arg)
{
    fail(done, arg, 405, "MethodNotAllowedException", "%s", MGMT_MODEL_API_OFF_MSG);
}

/* model_register's error codes as TorchServe's exceptions (see model.h). */
static void register_failed(int rc, const char *err, mgmt_done_fn *done, void *arg)
{
    switch (rc) {
    case TS_E_MODEL_NOT_FOUND:
        done(arg, 404, "ModelNotFoundException", err);
        break;
    case TS_E_EXISTS:
        done(arg, 409, "ConflictStatusException", err);
        break;
    case -EEXIST:
        done(arg, 500, "InternalServerException", err);
        break;
    case -ENOTSUP:
        done(arg, 400, "DownloadArchiveException", err);
        break;
    case TS_E_BAD_INPUT:
        done(arg, 400, "BadRequestException", err);
        break;
    case TS_E_BAD_ARCHIVE:
    case TS_E_BAD_CONFIG:
        done(arg, 400, "InvalidModelException", err);
        break;
    default:
        done(arg, 500, "InternalServerException", err);
        break;
    }
}

static void register_prepared(void *arg, struct model *m, int rc, const char *err);

struct mgmt_op *mgmt_register(const struct mgmt_register_args *a, mgmt_done_fn *done, void *arg)
{
    if (!srv->cfg.enable_model_api) {
        model_api_disabled(done, arg);
        return NULL;
    }
    if (!a->url) {
        fail(done, arg, 400, "BadRequestException", "Parameter url is required.");
        return NULL;
    }
    if (a->s3_sse_kms)
        LOG_WARN("register %s: s3_sse_kms is not used: models are not downloaded from S3 here",
                 a->url);
    if (a->runtime && strcmp(a->runtime, "python") && strcmp(a->runtime, "python3") &&
        strcmp(a->runtime, "LSP")) {
        fail(done, arg, 400, "BadRequestException", "Invalid RuntimeType value: %s", a->runtime);
        return NULL;
    }
    const struct {
        const char *name;
        int value, max;
    } bounds[] = {
        {"initial_workers", a->initial_workers, MC_MAX_WORKERS},
        {"batch_size", a->batch_size, MC_MAX_BATCH_SIZE},
        {"max_batch_delay", a->max_batch_delay, MC_MAX_DELAY_MS},
        {"response_timeout", a->response_timeout, MC_MAX_TIMEOUT_S},
        {"startup_timeout", a->startup_timeout, MC_MAX_TIMEOUT_S},
    };
    for (size_t i = 0; i < sizeof bounds / sizeof bounds[0]; i++)
        if (bounds[i].value > bounds[i].max) {
            fail(done, arg, 400, "BadRequestException", "%s %d exceeds the limit of %d",
                 bounds[i].name, bounds[i].value, bounds[i].max);
            return NULL;
        }
    struct model_reg r;
    model_reg_init(&r);
    r.url = a->url;
    r.name = a->model_name;
    r.handler = a->handler;
    r.batch_size = a->batch_size > 0 ? a->batch_size : -1;
    r.max_batch_delay_ms = a->max_batch_delay >= 0 ? a->max_batch_delay : -1;
    r.response_timeout_s = a->response_timeout >= 0 ? a->response_timeout : -1;
    r.startup_timeout_s = a->startup_timeout >= 0 ? a->startup_timeout : -1;
    /* the archive is extracted and parsed on a thread; register_prepared carries on */
    struct mgmt_op *op = op_new(OP_PREPARE, done, arg, 24 * 3600 * 1000LL, 3600 * 1000);
    op->target = a->initial_workers;
    op->synchronous = a->synchronous;
    model_register_async(&r, register_prepared, op);
    return op;
}

static void register_prepared(void *arg, struct model *m, int rc, const char *err)
{
    struct mgmt_op *op = arg;
    if (rc) {
        LOG_WARN("register refused: %s", err);
        if (op->done)
            register_failed(rc, err, op->done, op->arg);
        op->done = NULL;
        op_free(op);
        return;
    }
    /* as TorchServe: no workers only when neither initial_workers nor the model's own
     * minWorkers asks for any */
    if (op->target <= 0 && m->mc.min_workers <= 0) {
        m->min_workers = m->max_workers = 0;
        char *msg = xasprintf("Model \"%s\" Version: %s registered with 0 initial workers. Use "
                              "scale workers API to add workers for the model.",
                              m->name, m->version);
        op_finish(op, 200, NULL, msg);
        free(msg);
        return;
    }
    int n = op->target, max = n;
    if (m->mc.min_workers > 0 && m->mc.max_workers >= m->mc.min_workers &&
        m->mc.max_workers <= MC_MAX_WORKERS) {
        n = m->mc.min_workers;
        max = m->mc.max_workers;
    } else if (n <= 0) { /* minWorkers without a usable maxWorkers */
        n = max = m->mc.min_workers;
    }
    m->min_workers = n;
    m->max_workers = max;
    worker_pool_scale(&m->pool, n);
    if (!op->synchronous) {
        op_finish(op, 202, NULL, "Processing worker updates...");
        return;
    }
    op->kind = OP_REGISTER;
    op->model = m;
    op->target = n;
    op->name = xstrdup(m->name);
    op->version = xstrdup(m->version);
    op->deadline_us = ts_now_us() + ((int64_t)m->pool.startup_timeout_s * 1000 + 5000) * 1000;
    struct timeval tv = {1, 0};
    evtimer_add(op->timer, &tv);
    op_check_workers(op, 0);
}

/* ---- unregister ---- */

static int other_versions(const struct model *m)
{
    for (struct model *o = model_first(); o; o = model_next(o))
        if (o != m && !strcmp(o->name, m->name))
            return 1;
    return 0;
}

struct mgmt_op *mgmt_unregister(const char *name, const char *version, mgmt_done_fn *done,
                                void *arg)
{
    if (!srv->cfg.enable_model_api) {
        model_api_disabled(done, arg);
        return NULL;
    }
    struct model *m;
    if (find_or_fail(name, version, &m, done, arg))
        return NULL;
    if (m->is_default && other_versions(m)) {
        fail(done, arg, 403, "InvalidModelVersionException",
             "Cannot remove default version for model %s", name);
        return NULL;
    }
    struct mgmt_op *op =
        op_new(OP_UNREGISTER, done, arg, (int64_t)srv->cfg.unregister_model_timeout * 1000, 5);
    op->name = xstrdup(m->name);
    op->pids = xcalloc((size_t)m->pool.n_workers + 1, sizeof(pid_t));
    struct worker *w;
    TAILQ_FOREACH(w, &m->pool.workers, link)
    if (w->pid > 0)
        op->pids[op->n_pids++] = w->pid;
    LOG_INFO("unregistering model %s version %s", m->name, m->version);
    model_unregister(m);
    return op;
}

/* ---- scale ---- */

struct mgmt_op *mgmt_scale(const struct mgmt_scale_args *a, mgmt_done_fn *done, void *arg)
{
    if (a->max_worker < a->min_worker) {
        fail(done, arg, 400, "BadRequestException", "max_worker cannot be less than min_worker.");
        return NULL;
    }
    struct model *m;
    if (find_or_fail(a->model_name, a->model_version, &m, done, arg))
        return NULL;
    if (a->min_worker < 0) {
        fail(done, arg, 500, "InternalServerException",
             "Error while creating workers: min_worker cannot be negative.");
        return NULL;
    }
    if (a->max_worker > MC_MAX_WORKERS) {
        fail(done, arg, 400, "BadRequestException",
             "max_worker %d exceeds the limit of %d workers per model", a->max_worker,
             MC_MAX_WORKERS);
        return NULL;
    }
    if (a->number_gpu > 0)
        LOG_WARN("scale %s: number_gpu=%d is not used: a worker's GPU comes from number_of_gpu "
                 "and the model's deviceIds, as in TorchServe",
                 m->name, a->number_gpu);
    if (a->timeout > 0)
        LOG_WARN("scale %s: timeout=%d is not used, as in TorchServe", m->name, a->timeout);
    m->min_workers = a->min_worker;
    m->max_workers = a->max_worker;
    /* TorchServe's WorkLoadManager: add workers up to min, stop those above max */
    int live = count_live(m), n = live;
    if (n < a->min_worker)
        n = a->min_worker;
    if (n > a->max_worker)
        n = a->max_worker;
    LOG_INFO("scaling model %s version %s from %d to %d workers", m->name, m->version, live, n);
    worker_pool_scale(&m->pool, n);
    if (n == 0) /* what is queued would wait for a worker for ever */
        model_fail_if_no_worker(m, "it was scaled to 0 workers");
    if (!a->synchronous) {
        snapshot_save();
        ok(done, arg, 202, "Processing worker updates...");
        return NULL;
    }
    struct mgmt_op *op =
        op_new(OP_SCALE, done, arg, (int64_t)m->pool.startup_timeout_s * 1000 + 5000, 1000);
    op->model = m;
    op->target = n;
    op->name = xstrdup(m->name);
    op->version = xstrdup(a->model_version && *a->model_version ? a->model_version : m->version);
    op->version_given = a->model_version && *a->model_version;
    return op_check_workers(op, 0) ? NULL : op;
}

/* ---- list ---- */

struct mgmt_op *mgmt_list(int limit, int next_page_token, mgmt_done_fn *done, void *arg)
{
    char *s = describe_text(describe_list(limit, next_page_token));
    done(arg, 200, NULL, s);
    free(s);
    return NULL;
}

/* ---- describe ---- */

static void describe_frame(struct job *j, const struct otf_prediction *p, int final)
{
    struct mgmt_op *op = j->sink_arg;
    if (!op || !final)
        return;
    op->job = NULL;
    job_unref(j);
    json_t *o = json_array_get(op->describe, 0);
    size_t blen = p->body.len > 0 ? (size_t)p->body.len : 0;
    if (p->status >= 400) {
        /* the handler refused to describe itself: its answer is the error message */
        char *msg = xasprintf("Describe failed in the worker: %.*s", (int)(blen < 512 ? blen : 512),
                              blen ? p->body.p : "");
        op_finish(op, p->status, "InternalServerException", msg);
        free(msg);
        return;
    }
    if (blen) {
        json_error_t je;
        json_t *meta = json_loadb(p->body.p, blen, JSON_DECODE_ANY, &je);
        if (!meta)
            meta = json_stringn(p->body.p, blen);
        if (meta)
            json_object_set_new(o, "customizedMetadata", meta);
    }
    json_t *arr = op->describe;
    op->describe = NULL;
    char *s = describe_text(arr);
    op_finish(op, 200, NULL, s);
    free(s);
}

static void describe_error(struct job *j, int status, const char *type, const char *msg)
{
    struct mgmt_op *op = j->sink_arg;
    if (!op)
        return;
    op->job = NULL;
    job_unref(j);
    op_finish(op, status, type, msg);
}

static const struct job_sink describe_sink = {describe_frame, describe_error};

static struct mgmt_op *describe_customized(struct model *m, mgmt_done_fn *done, void *arg)
{
    struct mgmt_op *op =
        op_new(OP_DESCRIBE, done, arg, (int64_t)m->pool.response_timeout_s * 1000 + 1000, 1000);
    op->model = m;
    op->describe = json_array();
    json_array_append_new(op->describe, describe_model(m));
    struct job *j = job_new(NULL, &describe_sink, op);
    job_add_header(j, "describe", "True", 4);
    int rc = model_submit(m, j);
    if (rc) {
        job_unref(j);
        char *msg = xasprintf("Model \"%s\" has no worker to serve describe request. Please use "
                              "scale workers API to add workers.",
                              m->name);
        op_finish(op, 503, "ServiceUnavailableException", msg);
        free(msg);
        return NULL;
    }
    op->job = j;
    return op;
}

struct mgmt_op *mgmt_describe(const char *name, const char *version, int customized,
                              mgmt_done_fn *done, void *arg)
{
    int all = version && !strcmp(version, "all");
    struct model *m;
    if (find_or_fail(name, all ? NULL : version, &m, done, arg))
        return NULL;
    if (customized && !all)
        return describe_customized(m, done, arg);
    json_t *arr = all ? describe_versions(name) : json_array();
    if (!all)
        json_array_append_new(arr, describe_model(m));
    char *s = describe_text(arr);
    done(arg, 200, NULL, s);
    free(s);
    return NULL;
}

/* ---- set-default ---- */

struct mgmt_op *mgmt_set_default(const char *name, const char *version, mgmt_done_fn *done,
                                 void *arg)
{
    struct model *m, *def;
    struct submit_error e;
    if (model_lookup(name, NULL, &def, &e) == 0 && (!version || !*version)) {
        fail(done, arg, 400, "BadRequestException", "Parameter model_version is required.");
        return NULL;
    }
    if (model_lookup(name, NULL, &def, &e) || model_lookup(name, version, &m, &e)) {
        fail(done, arg, e.status, e.type, "%s", e.msg);
        return NULL;
    }
    for (struct model *o = model_first(); o; o = model_next(o))
        if (!strcmp(o->name, name))
            o->is_default = o == m;
    LOG_INFO("default version of model %s is now %s", name, version);
    snapshot_save();
    ok(done, arg, 200, "Default version successfully updated for model \"%s\" to \"%s\"", name,
       version);
    return NULL;
}
