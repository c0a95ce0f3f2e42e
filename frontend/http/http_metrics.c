/*
 * http_metrics: GET /metrics on the metrics port, Prometheus text format 0.0.4.
 *
 * TorchServe's names for what it has: Requests2XX/4XX/5XX (HTTP and gRPC answers),
 * ts_inference_requests_total, and its cumulative ts_inference_latency_microseconds and
 * ts_queue_latency_microseconds (model_version "default" for requests that named none, as
 * TorchServe labels them). What TorchServe lacks, as real histograms per model and version
 * (ts_request_latency_ms, ts_queue_wait_ms, ts_worker_time_ms, ts_time_to_first_token_ms,
 * ts_inter_token_ms, ts_batch_size) and gauges (queue depth, busy and idle workers, open
 * sequences). TorchServe's QueueTime, WorkerThreadTime and WorkerLoadTime gauges; with
 * metrics_config, only the TorchServe-named families its ts_metrics section lists. The model
 * metrics (model_metrics.h: HandlerTime, PredictionTime, handlers' own) with TorchServe's labels,
 * their dimensions (ModelName and Level by default) and Hostname. TorchServe's system metrics
 * (CPU, memory, disk, and per GPU), from the frontend's last sample (core/sys_metrics.h), as
 * metrics_config lets them. `/metrics?name[]=NAME`
 * (repeatable) keeps only those families, as TorchServe does.
 */
#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "core/core.h"
#include "core/model.h"
#include "core/sequence.h"
#include "core/sys_metrics.h"
#include "http_metrics.h"
#include "log.h"
#include "rlog.h"

struct out {
    struct buf b;
    struct evkeyvalq query;
    int filtered;
    char host[256];
};

/* name[] as sent, or percent-encoded (libevent decodes the values of a query, not its keys) */
static int is_name_key(const char *k)
{
    return !strcmp(k, "name[]") || !strcasecmp(k, "name%5B%5D");
}

/* 1 when the family is wanted (no name[] filter, or named in it); writes its HELP and TYPE. */
static int family(struct out *o, const char *name, const char *type, const char *help)
{
    if (o->filtered) {
        int want = 0;
        struct evkeyval *kv;
        TAILQ_FOREACH(kv, &o->query, next)
        {
            if (is_name_key(kv->key) && !strcmp(kv->value, name))
                want = 1;
        }
        if (!want)
            return 0;
    }
    buf_printf(&o->b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
    return 1;
}

static void hist_lines(struct out *o, const char *name, const struct model *m, const struct hist *h,
                       const double *bounds)
{
    uint64_t cum = 0;
    for (int i = 0; i < HIST_BUCKETS; i++) {
        cum += h->counts[i];
        char le[32];
        if (i < HIST_BUCKETS - 1)
            snprintf(le, sizeof(le), "%g", bounds[i]);
        else
            snprintf(le, sizeof(le), "+Inf");
        buf_printf(&o->b, "%s_bucket{model_name=\"%s\",model_version=\"%s\",le=\"%s\"} %llu\n",
                   name, m->name, m->version, le, (unsigned long long)cum);
    }
    buf_printf(&o->b, "%s_sum{model_name=\"%s\",model_version=\"%s\"} %.6f\n", name, m->name,
               m->version, h->sum);
    buf_printf(&o->b, "%s_count{model_name=\"%s\",model_version=\"%s\"} %llu\n", name, m->name,
               m->version, (unsigned long long)h->count);
}

/* A per-model histogram family; field picks the histogram out of a model. */
static void histogram(struct out *o, const char *name, const char *help, size_t field,
                      const double *bounds)
{
    if (!family(o, name, "histogram", help))
        return;
    for (struct model *m = model_first(); m; m = model_next(m))
        hist_lines(o, name, m, (const struct hist *)((const char *)m + field), bounds);
}

/* The frontend families that carry TorchServe's names: with metrics_config, only those its
 * ts_metrics section names are served, as TorchServe serves only what its metrics.yaml declares. */
static int ts_family_on(const char *name)
{
    return !srv->cfg.metrics_config || metrics_config_ts_declared(&srv->metrics_decl, name);
}

/* TorchServe's three per-model counters. As TorchServe labels them: model_version is the version
 * a request named, "default" for the requests that named none (one series per model name, all
 * its versions together). which: 0 requests, 1 latency, 2 time in the queue. */
static uint64_t ts_counter(const struct model *m, int which, int versioned)
{
    return which == 0   ? m->n_requests[versioned]
           : which == 1 ? m->latency_us_total[versioned]
                        : m->queue_us_total[versioned];
}

static void ts_counters(struct out *o, const char *name, const char *unit, int which)
{
    char help[96];
    snprintf(help, sizeof(help), "Torchserve prometheus counter metric with unit: %s", unit);
    if (!ts_family_on(name) || !family(o, name, "counter", help))
        return;
    for (struct model *m = model_first(); m; m = model_next(m)) {
        struct model *first = model_first();
        while (strcmp(first->name, m->name))
            first = model_next(first);
        if (first != m)
            continue; /* the name's "default" series was written with its first version */
        uint64_t sum = 0;
        for (struct model *v = m; v; v = model_next(v))
            if (!strcmp(v->name, m->name))
                sum += ts_counter(v, which, 0);
        buf_printf(&o->b,
                   "%s{model_name=\"%s\",model_version=\"default\",hostname=\"%s\",} %llu.0\n",
                   name, m->name, o->host, (unsigned long long)sum);
    }
    for (struct model *m = model_first(); m; m = model_next(m))
        if (m->n_requests[1])
            buf_printf(&o->b,
                       "%s{model_name=\"%s\",model_version=\"%s\",hostname=\"%s\",} %llu.0\n", name,
                       m->name, m->version, o->host, (unsigned long long)ts_counter(m, which, 1));
}

/* A per-model value in TorchServe's label style. */
static void per_model(struct out *o, const char *name, const char *type, const char *help,
                      uint64_t (*value)(const struct model *))
{
    if (!family(o, name, type, help))
        return;
    for (struct model *m = model_first(); m; m = model_next(m))
        buf_printf(&o->b, "%s{model_name=\"%s\",model_version=\"%s\",hostname=\"%s\",} %llu.0\n",
                   name, m->name, m->version, o->host, (unsigned long long)value(m));
}

static uint64_t v_batches(const struct model *m)
{
    return m->pool.n_batches;
}
static uint64_t v_max_batch(const struct model *m)
{
    return m->pool.max_batch_seen;
}
static uint64_t v_queue_depth(const struct model *m)
{
    return (uint64_t)m->queue_len;
}
static uint64_t v_busy(const struct model *m)
{
    uint64_t n = 0;
    struct worker *w;
    TAILQ_FOREACH(w, &m->pool.workers, link)
    {
        n += w->state == WORKER_READY && w->n_inflight > 0;
    }
    return n;
}
static uint64_t v_idle(const struct model *m)
{
    uint64_t n = 0;
    struct worker *w;
    TAILQ_FOREACH(w, &m->pool.workers, link)
    {
        n += w->state == WORKER_READY && w->n_inflight == 0;
    }
    return n;
}
static uint64_t v_sequences(const struct model *m)
{
    return m->seqs ? (uint64_t)sequence_open_count(m->seqs) : 0;
}

/* A label value with Prometheus' escapes (backslash, double quote). */
static void label_value(struct buf *b, const char *v)
{
    for (; *v; v++) {
        if (*v == '\\' || *v == '"')
            buf_put(b, "\\", 1);
        buf_put(b, v, 1);
    }
}

static void series_labels(struct out *o, const struct mm_metric *mt, const struct mm_series *se)
{
    for (size_t d = 0; d < mt->n_dims; d++) {
        buf_printf(&o->b, "%s=\"", mt->dims[d]);
        label_value(&o->b, se->values[d]);
        buf_puts(&o->b, "\",");
    }
    buf_printf(&o->b, "Hostname=\"%s\",", o->host);
}

/* The model metrics (model_metrics.h): HandlerTime, PredictionTime and the handlers' own, with
 * TorchServe's labels: their dimensions, then Hostname. */
static void model_families(struct out *o)
{
    const struct model_metrics *mm = &srv->model_metrics;
    for (size_t i = 0; i < mm->n; i++) {
        const struct mm_metric *mt = &mm->v[i];
        char help[96];
        snprintf(help, sizeof(help), "Torchserve prometheus %s metric with unit: %s",
                 metrics_kind_name(mt->kind), mt->unit[0] ? mt->unit : "none");
        if (!family(o, mt->name, metrics_kind_name(mt->kind), help))
            continue;
        for (size_t k = 0; k < mt->n_series; k++) {
            const struct mm_series *se = &mt->series[k];
            char v[40];
            if (mt->kind != 'h') {
                model_metrics_fmt_value(v, sizeof(v), se->value);
                buf_printf(&o->b, "%s{", mt->name);
                series_labels(o, mt, se);
                buf_printf(&o->b, "} %s\n", v);
                continue;
            }
            uint64_t cum = 0;
            for (int b = 0; b < HIST_BUCKETS; b++) {
                cum += se->h.counts[b];
                buf_printf(&o->b, "%s_bucket{", mt->name);
                series_labels(o, mt, se);
                if (b < HIST_BUCKETS - 1)
                    buf_printf(&o->b, "le=\"%g\",} %llu\n", hist_ms_bounds[b],
                               (unsigned long long)cum);
                else
                    buf_printf(&o->b, "le=\"+Inf\",} %llu\n", (unsigned long long)cum);
            }
            buf_printf(&o->b, "%s_count{", mt->name);
            series_labels(o, mt, se);
            buf_printf(&o->b, "} %llu\n", (unsigned long long)se->h.count);
            model_metrics_fmt_value(v, sizeof(v), se->h.sum);
            buf_printf(&o->b, "%s_sum{", mt->name);
            series_labels(o, mt, se);
            buf_printf(&o->b, "} %s\n", v);
        }
    }
}

/* TorchServe's QueueTime, WorkerThreadTime (host gauges, last value) and WorkerLoadTime (per
 * worker, named W-<id>-<model>_<version> as TorchServe's W-<port>-...). */
static void torchserve_gauges(struct out *o)
{
    const char *help = "Torchserve prometheus gauge metric with unit: Milliseconds";
    if (ts_family_on("QueueTime") && family(o, "QueueTime", "gauge", help))
        buf_printf(&o->b, "QueueTime{Level=\"Host\",Hostname=\"%s\",} %.3f\n", o->host,
                   srv->counters.queue_time_ms);
    if (ts_family_on("WorkerThreadTime") && family(o, "WorkerThreadTime", "gauge", help))
        buf_printf(&o->b, "WorkerThreadTime{Level=\"Host\",Hostname=\"%s\",} %.3f\n", o->host,
                   srv->counters.worker_thread_time_ms);
    if (!ts_family_on("WorkerLoadTime") || !family(o, "WorkerLoadTime", "gauge", help))
        return;
    for (struct model *m = model_first(); m; m = model_next(m)) {
        struct worker *w;
        TAILQ_FOREACH(w, &m->pool.workers, link)
        {
            if (w->load_ms > 0)
                buf_printf(&o->b,
                           "WorkerLoadTime{WorkerName=\"W-%d-%s_%s\",Level=\"Host\","
                           "Hostname=\"%s\",} %lld.0\n",
                           w->id, m->name, m->version, o->host, (long long)w->load_ms);
        }
    }
}

/* A host gauge of TorchServe's system metrics (Level=Host). */
static void host_gauge(struct out *o, const char *name, const char *unit, double v)
{
    char help[96];
    snprintf(help, sizeof(help), "Torchserve prometheus gauge metric with unit: %s", unit);
    if (ts_family_on(name) && family(o, name, "gauge", help))
        buf_printf(&o->b, "%s{Level=\"Host\",Hostname=\"%s\",} %.10g\n", name, o->host, v);
}

/* TorchServe's system metrics (metrics.yaml's names, units and dimensions), from the last
 * sample; none when disable_system_metrics=true, no GPU families without GPUs; with
 * metrics_config, those its ts_metrics section declares. */
static void system_families(struct out *o)
{
    const struct sys_sample *s = sys_metrics_last();
    if (!s->valid)
        return;
    host_gauge(o, "CPUUtilization", "Percent", s->cpu_pct);
    host_gauge(o, "MemoryUsed", "Megabytes", s->mem_used_mb);
    host_gauge(o, "MemoryAvailable", "Megabytes", s->mem_avail_mb);
    host_gauge(o, "MemoryUtilization", "Percent", s->mem_pct);
    if (s->disk_ok) {
        host_gauge(o, "DiskUsage", "Gigabytes", s->disk_used_gb);
        host_gauge(o, "DiskAvailable", "Gigabytes", s->disk_avail_gb);
        host_gauge(o, "DiskUtilization", "Percent", s->disk_pct);
    }
    static const struct {
        const char *name, *unit;
        size_t off;
    } gpu[] = {
        {"GPUMemoryUtilization", "Percent", offsetof(struct sys_sample, gpu[0].mem_pct)},
        {"GPUMemoryUsed", "Megabytes", offsetof(struct sys_sample, gpu[0].mem_used_mb)},
        {"GPUUtilization", "Percent", offsetof(struct sys_sample, gpu[0].util_pct)},
    };
    for (size_t k = 0; k < sizeof(gpu) / sizeof(gpu[0]); k++) {
        int first = 1;
        for (int i = 0; i < s->n_gpu; i++) {
            if (!s->gpu[i].ok)
                continue;
            /* the family's HELP and TYPE once, then a line per device */
            char help[96];
            snprintf(help, sizeof(help), "Torchserve prometheus gauge metric with unit: %s",
                     gpu[k].unit);
            if (first && (!ts_family_on(gpu[k].name) || !family(o, gpu[k].name, "gauge", help)))
                break;
            first = 0;
            const double *v =
                (const double *)((const char *)s + gpu[k].off + (size_t)i * sizeof(s->gpu[0]));
            buf_printf(&o->b, "%s{Level=\"Host\",DeviceId=\"%d\",Hostname=\"%s\",} %.10g\n",
                       gpu[k].name, i, o->host, *v);
        }
    }
}

/* models: with the model metrics (/metrics), or without (ts_metrics.log: they have their own
 * log, model_metrics.log) */
static void render(struct out *o, int models)
{
    const char *names[3] = {"Requests2XX", "Requests4XX", "Requests5XX"};
    uint64_t vals[3] = {srv->counters.requests_2xx, srv->counters.requests_4xx,
                        srv->counters.requests_5xx};
    for (int i = 0; i < 3; i++)
        if (ts_family_on(names[i]) &&
            family(o, names[i], "counter", "Torchserve prometheus counter metric with unit: Count"))
            buf_printf(&o->b, "%s{Level=\"Host\",Hostname=\"%s\",} %llu.0\n", names[i], o->host,
                       (unsigned long long)vals[i]);
    ts_counters(o, "ts_inference_requests_total", "Count", 0);
    ts_counters(o, "ts_inference_latency_microseconds", "Microseconds", 1);
    ts_counters(o, "ts_queue_latency_microseconds", "Microseconds", 2);
    histogram(o, "ts_request_latency_ms", "request latency, from arrival to the end, ms",
              offsetof(struct model, h_latency), hist_ms_bounds);
    histogram(o, "ts_queue_wait_ms", "time in the queue before a worker took the request, ms",
              offsetof(struct model, h_queue), hist_ms_bounds);
    histogram(o, "ts_worker_time_ms", "time on the worker, from dispatch to the end, ms",
              offsetof(struct model, h_worker), hist_ms_bounds);
    histogram(o, "ts_time_to_first_token_ms", "time from arrival to the first frame, ms",
              offsetof(struct model, h_ttft), hist_ms_bounds);
    histogram(o, "ts_inter_token_ms", "time between a stream's frames, ms",
              offsetof(struct model, h_itl), hist_ms_bounds);
    histogram(o, "ts_batch_size", "requests per batch sent to a worker",
              offsetof(struct model, pool) + offsetof(struct worker_group, batch_sizes),
              hist_size_bounds);
    per_model(o, "ts_batches_total", "counter", "batches sent to workers", v_batches);
    per_model(o, "ts_max_batch_size", "gauge", "largest batch sent to a worker", v_max_batch);
    per_model(o, "ts_queue_depth", "gauge", "requests waiting for a worker", v_queue_depth);
    per_model(o, "ts_workers_busy", "gauge", "ready workers holding requests", v_busy);
    per_model(o, "ts_workers_idle", "gauge", "ready workers holding nothing", v_idle);
    per_model(o, "ts_sequences_open", "gauge", "open sequences", v_sequences);
    torchserve_gauges(o);
    system_families(o);
    if (models)
        model_families(o);
}

/* ---- metrics_mode=log: ts_metrics.log, in TorchServe's log format ----
 * Every metric_time_interval seconds (default 60) and once at shutdown, each sample of the
 * frontend's families that /metrics would serve becomes a line
 * "<log4j ISO8601 time> - Name.Unit:value|#dim:v,dim:v|#hostname:h,timestamp:T" (TorchServe's
 * log format, whose "%d{ISO8601} - " prefix its benchmark tools split on; the unit from the
 * family's HELP line, else Milliseconds for *_ms families and Count). The model metrics are not
 * here: each reported value is a line of model_metrics.log (model.c), as in TorchServe. Written
 * through an rlog (rotated like the other logs). */
static struct rlog *metrics_log;
static struct event *metrics_timer;
static char *log_path;
static int log_interval_s = 60;

/* One sample line of the Prometheus text into a log line. */
static void log_sample(struct buf *b, const char *ln, size_t n, const char *unit, const char *host,
                       long long ts)
{
    const char *end = ln + n, *p = ln;
    while (p < end && *p != '{' && *p != ' ')
        p++;
    buf_put(b, ln, (size_t)(p - ln));
    const char *labels = NULL, *labels_end = NULL;
    if (p < end && *p == '{') {
        labels = p + 1;
        labels_end = memchr(p, '}', (size_t)(end - p));
        if (!labels_end)
            return;
        p = labels_end + 1;
    }
    while (p < end && *p == ' ')
        p++;
    buf_printf(b, ".%s:%.*s|#", unit, (int)(end - p), p);
    int first = 1;
    for (const char *q = labels; q && q < labels_end;) {
        const char *eq = memchr(q, '=', (size_t)(labels_end - q));
        if (!eq || eq + 1 >= labels_end || eq[1] != '"')
            break;
        const char *vend = memchr(eq + 2, '"', (size_t)(labels_end - eq - 2));
        if (!vend)
            break;
        size_t klen = (size_t)(eq - q);
        if (!(klen == 8 && !strncasecmp(q, "hostname", 8))) {
            buf_printf(b, "%s%.*s:%.*s", first ? "" : ",", (int)klen, q, (int)(vend - eq - 2),
                       eq + 2);
            first = 0;
        }
        q = vend + 1;
        if (q < labels_end && *q == ',')
            q++;
    }
    buf_printf(b, "|#hostname:%s,timestamp:%lld\n", host, ts);
}

static void write_metrics_log(void)
{
    struct out o;
    memset(&o, 0, sizeof(o));
    buf_init(&o.b);
    TAILQ_INIT(&o.query);
    snprintf(o.host, sizeof(o.host), "%s", srv->host);
    render(&o, 0);
    struct buf lines;
    buf_init(&lines);
    long long ts = (long long)(ts_wall_ms() / 1000);
    char when[32];
    ts_log4j_time(when, sizeof(when));
    char unit[64] = "Count";
    const char *p = (const char *)o.b.data, *end = p + o.b.len;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
        if (n > 7 && !strncmp(p, "# HELP ", 7)) {
            const char *u = memmem(p, n, "with unit: ", 11);
            const char *name_end = memchr(p + 7, ' ', n - 7);
            if (u) {
                snprintf(unit, sizeof(unit), "%.*s", (int)(p + n - u - 11), u + 11);
            } else {
                size_t nl_ = name_end ? (size_t)(name_end - p - 7) : 0;
                snprintf(unit, sizeof(unit), "%s",
                         nl_ > 3 && !strncmp(p + 7 + nl_ - 3, "_ms", 3) ? "Milliseconds" : "Count");
            }
        } else if (n && p[0] != '#') {
            buf_printf(&lines, "%s - ", when); /* log4j's %d{ISO8601} - , as TorchServe's */
            log_sample(&lines, p, n, unit, o.host, ts);
        }
        p += n + 1;
    }
    if (lines.len)
        rlog_write(metrics_log, (const char *)lines.data, lines.len);
    buf_free(&lines);
    buf_free(&o.b);
}

static void on_metrics_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    (void)arg;
    write_metrics_log();
}

int http_metrics_log_start(void)
{
    const struct config *c = &srv->cfg;
    if (strcmp(c->metrics_mode, "log")) {
        if (c->metric_time_interval > 0 && c->disable_system_metrics)
            LOG_WARN("metric_time_interval has no effect: disable_system_metrics=true, and the "
                     "metrics are served on the metrics API (metrics_mode=%s)",
                     c->metrics_mode);
        return 0;
    }
    if (c->metric_time_interval > 0)
        log_interval_s = c->metric_time_interval;
    const char *dir = c->log_location;
    log_path = xasprintf("%s%sts_metrics.log", dir, dir[strlen(dir) - 1] == '/' ? "" : "/");
    char why[512];
    if (!(metrics_log = rlog_open(log_path, c->log_max_size, c->log_max_files, why, sizeof(why)))) {
        LOG_ERROR("metrics_mode=log: %s", why);
        return -1;
    }
    metrics_timer = event_new(srv->base, -1, EV_PERSIST, on_metrics_timer, NULL);
    struct timeval tv = {log_interval_s, 0};
    event_add(metrics_timer, &tv);
    LOG_INFO("metrics_mode=log: metrics written to %s every %d s", log_path, log_interval_s);
    return 0;
}

void http_metrics_log_stop(void)
{
    if (!metrics_log)
        return;
    write_metrics_log(); /* the final values */
    event_free(metrics_timer);
    rlog_close(metrics_log);
    free(log_path);
    metrics_log = NULL;
    metrics_timer = NULL;
    log_path = NULL;
}

void http_metrics_handle(struct evhttp_request *req, const char *rid, struct http_path *p)
{
    if (p->n != 1 || strcmp(p->seg[0], "metrics")) {
        http_send_not_found(req, rid);
        return;
    }
    struct out o;
    memset(&o, 0, sizeof(o));
    buf_init(&o.b);
    TAILQ_INIT(&o.query);
    const char *q = evhttp_uri_get_query(evhttp_request_get_evhttp_uri(req));
    if (q && evhttp_parse_query_str(q, &o.query) == 0) {
        struct evkeyval *kv;
        TAILQ_FOREACH(kv, &o.query, next)
        {
            o.filtered |= is_name_key(kv->key);
        }
    }
    snprintf(o.host, sizeof(o.host), "%s", srv->host);

    if (!strcmp(srv->cfg.metrics_mode, "log")) {
        char note[512];
        int n = snprintf(note, sizeof(note),
                         "# metrics_mode=log: the metrics are written to %s every %d s, the "
                         "model metrics to model_metrics.log as they are reported\n",
                         log_path ? log_path : "ts_metrics.log", log_interval_s);
        evhttp_clear_headers(&o.query);
        buf_free(&o.b);
        http_send(req, rid, 200, "text/plain; version=0.0.4; charset=utf-8", note, (size_t)n);
        return;
    }
    render(&o, 1);

    evhttp_clear_headers(&o.query);
    http_send(req, rid, 200, "text/plain; version=0.0.4; charset=utf-8", o.b.data, o.b.len);
    buf_free(&o.b);
}
