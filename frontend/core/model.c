/*
 * model: the registry, queueing and dispatch; the top of the core.
 *
 * Dispatch asks the batcher (a pure policy) what to send where, repeatedly, until nothing more
 * can go out; a partial batch waiting for maxBatchDelay arms the model's batch timer. A model
 * with sequenceBatching dispatches through its sequence table instead. The registry is the
 * owner of every job it queues (job_owner) and of every worker group (worker_group_ops): the
 * events of the layers below come back here and are routed to the sequence table, the
 * dispatcher, or the layer above (model_events).
 */
#include "model.h"

#include <event2/event.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batcher.h"
#include "core.h"
#include "log.h"
#include "metric_line.h"
#include "rlog.h"
#include "sequence.h"
#include "worker_pool.h"

static const struct model_events *events;

void model_set_events(const struct model_events *ev)
{
    events = ev;
}

/* ---- what the layers below report (job owner, worker group ops) ---- */

static struct model *model_of_group(struct worker_group *g)
{
    return (struct model *)((char *)g - offsetof(struct model, pool));
}

/* Removes a queued job (the caller drops the queue reference). */
static void model_dequeue(struct model *m, struct job *j)
{
    if (j->seq) {
        sequence_dequeue(j);
        return;
    }
    TAILQ_REMOVE(&m->queue, j, link);
    m->queue_len--;
}

static void job_withdraw(struct job *j)
{
    if (j->state == JOB_QUEUED)
        model_dequeue(j->model, j);
    else if (j->state == JOB_RUNNING)
        worker_cancel_job(j->worker, j);
}

static void job_frame(struct job *j, const struct otf_prediction *p)
{
    int64_t now = ts_now_us();
    struct model *m = j->model;
    if (j->frames == 1)
        hist_observe(&m->h_ttft, hist_ms_bounds, (double)(now - j->created_us) / 1000.0);
    else
        hist_observe(&m->h_itl, hist_ms_bounds, (double)(now - j->last_frame_us) / 1000.0);
    j->last_frame_us = now;
    if (j->seq)
        sequence_frame_seen(j, p);
}

static void job_ended(struct job *j, int was_running)
{
    int64_t now = ts_now_us();
    struct model *m = j->model;
    int64_t total = now - j->created_us;
    hist_observe(&m->h_latency, hist_ms_bounds, (double)total / 1000.0);
    m->latency_us_total[j->versioned != 0] += (uint64_t)total;
    if (j->dispatched_us) {
        int64_t queued = j->dispatched_us - j->created_us;
        hist_observe(&m->h_queue, hist_ms_bounds, (double)queued / 1000.0);
        srv->counters.queue_time_ms = (double)queued / 1000.0;
        m->queue_us_total[j->versioned != 0] += (uint64_t)queued;
        hist_observe(&m->h_worker, hist_ms_bounds, (double)(now - j->dispatched_us) / 1000.0);
    }
    if (j->seq)
        sequence_job_done(j, was_running);
}

static void job_paused(struct job *j, int paused)
{
    worker_pause_job(j->worker, j, paused);
}

static void job_input(struct job *j)
{
    worker_send_input(j->worker, j);
}

static const struct job_owner model_job_owner = {
    .withdraw = job_withdraw,
    .frame = job_frame,
    .ended = job_ended,
    .pause = job_paused,
    .input = job_input,
};

static void group_ready(struct worker_group *g, struct worker *w)
{
    struct model *m = model_of_group(g);
    if (m->seqs)
        sequence_worker_ready(m->seqs, w);
    model_dispatch(m);
    if (events)
        events->workers_changed(m);
}

static void group_gone(struct worker_group *g, struct worker *w)
{
    struct model *m = model_of_group(g);
    if (m->seqs)
        sequence_worker_gone(m->seqs, w);
}

static void group_slots(struct worker_group *g)
{
    model_dispatch(model_of_group(g));
}

/* Jobs a dead worker had not started: first in the queue again, in the order they were sent.
 * They are dispatched when a worker takes jobs (another one now, or the respawned one). */
static void group_requeue(struct worker_group *g, struct job **jobs, int n)
{
    struct model *m = model_of_group(g);
    for (int i = n - 1; i >= 0; i--) {
        jobs[i]->state = JOB_QUEUED;
        TAILQ_INSERT_HEAD(&m->queue, jobs[i], link);
        m->queue_len++;
    }
    model_dispatch(m);
}

void model_fail_if_no_worker(struct model *m, const char *why)
{
    if (worker_pool_alive(&m->pool) > 0)
        return;
    struct job *j;
    char msg[512];
    snprintf(msg, sizeof(msg), "Model \"%s\" has no worker to serve inference request: %s", m->name,
             why);
    while ((j = TAILQ_FIRST(&m->queue))) {
        model_dequeue(m, j);
        job_fail(j, 503, "ServiceUnavailableException", msg);
    }
}

/* Fails the model's queued jobs when no worker can ever serve them. */
static void group_changed(struct worker_group *g, const char *why)
{
    struct model *m = model_of_group(g);
    if (why)
        model_fail_if_no_worker(m, why);
    if (events)
        events->workers_changed(m);
}

/* A refused value of m's workers: logged the first time and every 1,000th after. */
static void metric_refused(struct model *m, const char *why)
{
    if (++m->custom.refused % 1000 == 1)
        LOG_WARN("model %s %s: metric refused (%llu so far): %s", m->name, m->version,
                 (unsigned long long)m->custom.refused, why);
}

/* One value of m's workers into the server's table (and, with metrics_mode=log, a line of
 * model_metrics.log, as TorchServe writes each backend metric). */
static void record_sample(struct model *m, const struct metric_line *s)
{
    char why[200];
    if (custom_metrics_admit(&m->custom, s->kind, s->name.p, (size_t)s->name.len, why,
                             sizeof(why))) {
        metric_refused(m, why);
        return;
    }
    if (model_metrics_record(&srv->model_metrics, s, why, sizeof(why))) {
        metric_refused(m, why);
        return;
    }
    if (!srv->model_metrics_log)
        return;
    const struct mm_metric *mm =
        model_metrics_find(&srv->model_metrics, s->name.p, (size_t)s->name.len);
    char t[32];
    ts_log4j_time(t, sizeof(t));
    struct buf b;
    buf_init(&b);
    buf_printf(&b, "%s - ", t);
    model_metrics_log_line(&b, s, mm ? mm->unit : "", srv->host, (long long)(ts_wall_ms() / 1000));
    rlog_write(srv->model_metrics_log, (const char *)b.data, b.len);
    buf_free(&b);
}

/* A value measured or reported without dimensions (a C handler's ts_metric_add, the step times):
 * TorchServe's default dimensions of a model metric, ModelName and Level. */
static void record_plain(struct model *m, char kind, struct otf_str name, struct otf_str unit,
                         double value, const char *request_ids)
{
    struct metric_line s = {.kind = kind, .name = name, .unit = unit, .value = value, .n_dims = 2};
    s.dim_name[0] = otf_s("ModelName");
    s.dim_value[0] = otf_s(m->name);
    s.dim_name[1] = otf_s("Level");
    s.dim_value[1] = otf_s("Model");
    if (request_ids)
        s.request_ids = otf_s(request_ids);
    record_sample(m, &s);
}

/* The worker's metrics for m: the handler's records, then the step's HandlerTime and
 * PredictionTime (TorchServe's gauges, ms). A bad record ends the list (the worker is ours: a
 * bug, logged). */
static void group_metrics(struct worker_group *g, struct job *j, struct otf_str records,
                          const struct otf_step *step)
{
#ifdef TS_METRICS_OFF
    (void)g, (void)j, (void)records, (void)step;
    return;
#endif
    struct model *m = model_of_group(g);
    const char *rid = j ? j->rid : NULL;
    const char *p = records.p;
    size_t left = records.len > 0 ? (size_t)records.len : 0;
    struct otf_metric om;
    long n;
    while ((n = otf_metric_next(p, left, &om)) > 0) {
        p += n;
        left -= (size_t)n;
        record_plain(m, om.kind, om.name, om.unit, om.value, rid);
    }
    if (n < 0)
        LOG_WARN("model %s %s: a worker sent a malformed metric record", m->name, m->version);
    if (!step)
        return;
    double predict_ms = (double)step->predict_us / 1000.0;
    record_plain(m, 'g', otf_s("HandlerTime"), otf_s("ms"), (double)step->handle_us / 1000.0, rid);
    record_plain(m, 'g', otf_s("PredictionTime"), otf_s("ms"), predict_ms, rid);
    /* the first frame of a job: its time with the worker less the worker's own */
    if (j && j->frames == 0 && j->dispatched_us) {
        double ms = (double)(ts_now_us() - j->dispatched_us) / 1000.0 - predict_ms;
        srv->counters.worker_thread_time_ms = ms > 0 ? ms : 0;
    }
}

/* A "[METRICS]" line of a worker of m: a Python handler's context.metrics, or a handler that
 * prints TorchServe's metric lines itself. */
static void group_metric_line(struct worker_group *g, const char *line, size_t len)
{
    struct model *m = model_of_group(g);
    struct metric_line ml;
    char why[160];
    if (metric_line_parse(line, len, &ml, why, sizeof(why))) {
        char msg[256];
        snprintf(msg, sizeof(msg), "a [METRICS] line that does not parse: %s", why);
        metric_refused(m, msg);
        return;
    }
    record_sample(m, &ml);
}

static const struct worker_group_ops model_group_ops = {
    .ready = group_ready,
    .gone = group_gone,
    .slots = group_slots,
    .requeue = group_requeue,
    .changed = group_changed,
    .metrics = group_metrics,
    .metric_line = group_metric_line,
};

/* ---- the registry ---- */

struct model *model_new(void)
{
    struct model *m = xcalloc(1, sizeof(*m));
    TAILQ_INIT(&m->queue);
    worker_group_init(&m->pool, &model_group_ops);
    return m;
}

void model_free(struct model *m)
{
    if (m->seqs)
        sequence_table_free(m->seqs);
    if (m->batch_timer)
        event_free(m->batch_timer);
    manifest_free(&m->manifest);
    custom_metrics_free(&m->custom);
    if (m->tmp_dir && ts_rmtree(m->tmp_dir) != 0)
        LOG_WARN("could not remove %s", m->tmp_dir);
    free(m->name);
    free(m->version);
    free(m->url);
    free(m->dir);
    free(m->tmp_dir);
    free(m->venv);
    free(m->handler);
    free(m);
}

static void on_batch_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    model_dispatch(arg);
}

int model_add(struct model *m, char *err, size_t errlen)
{
    struct model *dup;
    if (model_find(m->name, m->version, &dup) == 0) {
        snprintf(err, errlen, "Model version %s is already registered for model %s", m->version,
                 m->name);
        return TS_E_EXISTS;
    }
    m->pool.name = m->name;
    m->pool.version = m->version;
    m->pool.dir = m->dir;
    m->pool.handler = m->handler;
    m->pool.envelope = m->manifest.envelope;
    m->batch_timer = evtimer_new(srv->base, on_batch_timer, m);
    if (m->mc.sequence_batching)
        m->seqs = sequence_table_new(&m->pool, &m->mc, m->max_batch_delay_ms);
    struct model *def;
    m->is_default = model_find(m->name, NULL, &def) != 0;
    LIST_INSERT_HEAD(&srv->models, m, link);
    return 0;
}

int model_workers_alive(const struct model *m)
{
    return worker_pool_alive(&m->pool);
}

int model_ready(const struct model *m)
{
    int want = m->min_workers > 1 ? m->min_workers : 1;
    return worker_pool_ready(&m->pool) >= want;
}

int model_server_ready(void)
{
    for (struct model *m = model_first(); m; m = model_next(m))
        if (m->min_workers > 0 && worker_pool_ready(&m->pool) < m->min_workers)
            return 0;
    return 1;
}

int model_lookup(const char *name, const char *version, struct model **out, struct submit_error *e)
{
    if (version && !*version)
        version = NULL;
    int rc = model_find(name ? name : "", version, out);
    if (rc == 0)
        return 0;
    e->status = 404;
    if (rc == TS_E_VERSION_NOT_FOUND) {
        e->type = "ModelVersionNotFoundException";
        snprintf(e->msg, sizeof(e->msg), "Model version: %s does not exist for model: %s", version,
                 name);
    } else {
        e->type = "ModelNotFoundException";
        snprintf(e->msg, sizeof(e->msg), "Model not found: %s", name ? name : "");
    }
    return -1;
}

int model_lookup_triton(const char *name, const char *version, struct model **out,
                        struct submit_error *e)
{
    int rc = model_lookup(name, version, out, e);
    if (rc && !strcmp(e->type, "ModelVersionNotFoundException"))
        snprintf(e->msg, sizeof(e->msg),
                 "failed to get model version from specified version string '%s': model %s has "
                 "no such version",
                 version, name);
    return rc;
}

int model_check_body(size_t len, struct submit_error *e)
{
    if (len <= (size_t)srv->cfg.max_request_size)
        return 0;
    e->status = 413;
    e->type = "RequestEntityTooLargeException";
    snprintf(e->msg, sizeof(e->msg),
             "Request body of %zu bytes exceeds max_request_size (%ld bytes)", len,
             srv->cfg.max_request_size);
    return -1;
}

void model_unregister(struct model *m)
{
    if (events)
        events->gone(m);
    struct job *j;
    while ((j = TAILQ_FIRST(&m->queue))) {
        model_dequeue(m, j);
        job_fail(j, 503, "ServiceUnavailableException", "Model was unregistered");
    }
    if (m->seqs)
        sequence_fail_queued(m->seqs);
    worker_pool_scale(&m->pool, 0);
    LIST_REMOVE(m, link);
    if (m->is_default) {
        /* promote another version, as TorchServe keeps one default per name */
        struct model *o;
        LIST_FOREACH(o, &srv->models, link)
        if (!strcmp(o->name, m->name)) {
            o->is_default = 1;
            break;
        }
    }
    model_free(m);
}

void model_unregister_all(void)
{
    struct model *m;
    while ((m = LIST_FIRST(&srv->models)))
        model_unregister(m);
}

int model_find(const char *name, const char *version, struct model **out)
{
    struct model *m;
    int name_seen = 0;
    LIST_FOREACH(m, &srv->models, link)
    {
        if (strcmp(m->name, name))
            continue;
        name_seen = 1;
        if ((!version || !*version) ? m->is_default : !strcmp(m->version, version)) {
            *out = m;
            return 0;
        }
    }
    return name_seen ? TS_E_VERSION_NOT_FOUND : TS_E_MODEL_NOT_FOUND;
}

struct model *model_first(void)
{
    return LIST_FIRST(&srv->models);
}

struct model *model_next(struct model *m)
{
    return LIST_NEXT(m, link);
}

/* The worker takes no frame field over max_request_size: it exits on one (otf.c), failing every
 * job it holds. A transport may make a field bigger than what its client sent (an OIP text
 * request goes to the handler as JSON holding the text twice, escaped), so that is refused
 * here, for every transport. 1 when refused. */
static int job_too_large(const struct job *j, struct submit_error *e)
{
    size_t max = (size_t)srv->cfg.max_request_size;
    const char *what = NULL;
    size_t len = 0;
    for (size_t i = 0; i < j->n_params && !what; i++)
        if (j->params[i].vlen > max)
            what = j->params[i].name, len = j->params[i].vlen;
    for (size_t i = 0; i < j->n_headers && !what; i++)
        if (j->headers[i].vlen > max)
            what = j->headers[i].key, len = j->headers[i].vlen;
    if (!what)
        return 0;
    e->status = 413;
    e->type = "RequestEntityTooLargeException";
    snprintf(e->msg, sizeof(e->msg),
             "the request's \"%s\" for the handler is %zu bytes, over max_request_size (%zu bytes)",
             what, len, max);
    return 1;
}

int model_submit_request(struct model *m, struct job *j, struct submit_error *e)
{
    if (job_too_large(j, e))
        return -1;
    if (m->mc.sequence_batching) {
        struct seq_request sr;
        sequence_request_from_job(j, &sr);
        j->model = m;
        j->owner = &model_job_owner;
        int rc = sequence_submit(m->seqs, j, &sr, &e->status, e->msg, sizeof(e->msg));
        e->type = rc == 1 ? "" : sequence_error_type(e->status);
        if (rc == 1)
            e->status = 200;
        if (rc == 0)
            m->n_requests[j->versioned != 0]++;
        return rc;
    }
    int rc = model_submit(m, j);
    if (rc == 0)
        return 0;
    e->status = 503;
    e->type = "ServiceUnavailableException";
    if (rc == TS_E_QUEUE_FULL)
        snprintf(e->msg, sizeof(e->msg),
                 "Model \"%s\" has no worker to serve inference request. Please use scale workers "
                 "API to add workers. (job queue is full: %d requests queued)",
                 m->name, m->queue_len);
    else
        snprintf(e->msg, sizeof(e->msg),
                 "Model \"%s\" has no worker to serve inference request. Please use scale workers "
                 "API to add workers.",
                 m->name);
    return rc;
}

int model_submit(struct model *m, struct job *j)
{
    if (worker_pool_alive(&m->pool) == 0)
        return TS_E_NO_WORKER;
    if (m->queue_len >= m->queue_max)
        return TS_E_QUEUE_FULL;
    job_ref(j);
    j->model = m;
    j->owner = &model_job_owner;
    j->state = JOB_QUEUED;
    TAILQ_INSERT_TAIL(&m->queue, j, link);
    m->queue_len++;
    m->n_requests[j->versioned != 0]++;
    model_dispatch(m);
    return 0;
}

#define BATCH_FEW 64    /* a batch of up to this many jobs is gathered on the stack */
#define PLAN_WORKERS 64 /* the workers a plan sees: the first 64 of a model */
void model_dispatch(struct model *m)
{
    struct batcher_worker bw[PLAN_WORKERS];
    struct worker *ws[PLAN_WORKERS];
    struct batcher_batch plan[PLAN_WORKERS];
    if (m->seqs) {
        sequence_dispatch(m->seqs);
        /* a sequence model's own queue holds only jobs outside any sequence: a customized
         * describe (management), which goes to a worker like any batch */
        if (m->queue_len == 0)
            return;
    }
    for (;;) {
        if (m->queue_len == 0)
            return;
        int n = 0;
        struct worker *w;
        TAILQ_FOREACH(w, &m->pool.workers, link)
        {
            if (n == PLAN_WORKERS)
                break;
            bw[n].ready = worker_takes_jobs(w);
            bw[n].inflight = w->n_inflight;
            ws[n++] = w;
        }
        struct batcher_view v = {
            .batch_size = m->pool.batch_size,
            .max_batch_delay_ms = m->max_batch_delay_ms,
            .continuous = m->pool.continuous,
            .queue_len = m->queue_len,
            .oldest_us = TAILQ_FIRST(&m->queue)->created_us,
            .now_us = ts_now_us(),
            .step_us = m->pool.step_us,
            .workers = bw,
            .n_workers = n,
        };
        int64_t wait_us;
        int nb = batcher_plan(&v, plan, &wait_us);
        if (nb == 0) {
            if (wait_us >= 0 && !evtimer_pending(m->batch_timer, NULL)) {
                struct timeval tv = {wait_us / 1000000, wait_us % 1000000};
                evtimer_add(m->batch_timer, &tv);
            }
            return;
        }
        for (int b = 0; b < nb; b++) {
            /* batchSize is a client's number (the register API): a large batch is not sized on
             * the stack */
            struct job *few[BATCH_FEW];
            int count = plan[b].count;
            struct job **batch = few_or_alloc(few, BATCH_FEW, (size_t)count, sizeof(*batch));
            for (int i = 0; i < count; i++) {
                batch[i] = TAILQ_FIRST(&m->queue);
                model_dequeue(m, batch[i]);
            }
            worker_send_batch(ws[plan[b].worker], batch, count);
            free_unless_few(batch, few);
        }
    }
}
