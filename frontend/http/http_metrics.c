/*
 * http_metrics: GET /metrics on the metrics port, Prometheus text format 0.0.4.
 *
 * TorchServe's names for what it has: Requests2XX/4XX/5XX (HTTP and gRPC answers),
 * ts_inference_requests_total, and its cumulative ts_inference_latency_microseconds and
 * ts_queue_latency_microseconds. What TorchServe lacks, as real histograms per model and
 * version (ts_request_latency_ms, ts_queue_wait_ms, ts_worker_time_ms,
 * ts_time_to_first_token_ms, ts_inter_token_ms, ts_batch_size) and gauges (queue depth, busy
 * and idle workers, open sequences). TorchServe's QueueTime, WorkerThreadTime and WorkerLoadTime
 * gauges; HandlerTime, PredictionTime and handlers' own metrics as the workers report them
 * (ts_metric_add), labelled with the model and version. `/metrics?name[]=NAME` (repeatable) keeps
 * only those families, as TorchServe does.
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
#include "http_guard.h"
#include "http_server.h"
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

static uint64_t v_requests(const struct model *m)
{
    return m->n_requests;
}
static uint64_t v_latency_us(const struct model *m)
{
    return m->latency_us_total;
}
static uint64_t v_queue_us(const struct model *m)
{
    return m->queue_us_total;
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

static const char *kind_type(char kind)
{
    return kind == 'c' ? "counter" : kind == 'g' ? "gauge" : "histogram";
}

/* The workers' metrics (HandlerTime, PredictionTime, handlers' own): one family per name across
 * models, typed by the first model that reported it (a model that reported the name as another
 * kind is left out of that family). */
static void worker_families(struct out *o)
{
    for (struct model *m = model_first(); m; m = model_next(m)) {
        for (size_t i = 0; i < m->custom.n; i++) {
            const struct custom_metric *c = &m->custom.v[i];
            struct model *prev = model_first();
            while (prev != m && !custom_metrics_find(&prev->custom, c->name, c->name_len))
                prev = model_next(prev);
            if (prev != m)
                continue; /* its family was written with an earlier model */
            char help[96];
            snprintf(help, sizeof(help), "Torchserve prometheus %s metric with unit: %s",
                     kind_type(c->kind), c->unit[0] ? c->unit : "none");
            if (!family(o, c->name, kind_type(c->kind), help))
                continue;
            for (struct model *k = m; k; k = model_next(k)) {
                const struct custom_metric *kc =
                    custom_metrics_find(&k->custom, c->name, c->name_len);
                if (!kc || kc->kind != c->kind)
                    continue;
                if (c->kind == 'h')
                    hist_lines(o, c->name, k, &kc->h, hist_ms_bounds);
                else
                    buf_printf(&o->b,
                               "%s{model_name=\"%s\",model_version=\"%s\",Level=\"Model\","
                               "Hostname=\"%s\",} %.10g\n",
                               c->name, k->name, k->version, o->host, kc->value);
            }
        }
    }
}

/* TorchServe's QueueTime, WorkerThreadTime (host gauges, last value) and WorkerLoadTime (per
 * worker, named W-<id>-<model>_<version> as TorchServe's W-<port>-...). */
static void torchserve_gauges(struct out *o)
{
    const char *help = "Torchserve prometheus gauge metric with unit: Milliseconds";
    if (family(o, "QueueTime", "gauge", help))
        buf_printf(&o->b, "QueueTime{Level=\"Host\",Hostname=\"%s\",} %.3f\n", o->host,
                   srv->counters.queue_time_ms);
    if (family(o, "WorkerThreadTime", "gauge", help))
        buf_printf(&o->b, "WorkerThreadTime{Level=\"Host\",Hostname=\"%s\",} %.3f\n", o->host,
                   srv->counters.worker_thread_time_ms);
    if (!family(o, "WorkerLoadTime", "gauge", help))
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

static void render(struct out *o)
{
    const char *names[3] = {"Requests2XX", "Requests4XX", "Requests5XX"};
    uint64_t vals[3] = {srv->counters.requests_2xx, srv->counters.requests_4xx,
                        srv->counters.requests_5xx};
    for (int i = 0; i < 3; i++)
        if (family(o, names[i], "counter", "Torchserve prometheus counter metric with unit: Count"))
            buf_printf(&o->b, "%s{Level=\"Host\",Hostname=\"%s\",} %llu.0\n", names[i], o->host,
                       (unsigned long long)vals[i]);
    per_model(o, "ts_inference_requests_total", "counter",
              "Torchserve prometheus counter metric with unit: Count", v_requests);
    per_model(o, "ts_inference_latency_microseconds", "counter",
              "Torchserve prometheus counter metric with unit: Microseconds", v_latency_us);
    per_model(o, "ts_queue_latency_microseconds", "counter",
              "Torchserve prometheus counter metric with unit: Microseconds", v_queue_us);
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
    worker_families(o);
}

/* ---- metrics_mode=log: ts_metrics.log, in TorchServe's log format ----
 * Every metric_time_interval seconds (default 60) and once at shutdown, each sample that
 * /metrics would serve becomes a line "Name.Unit:value|#dim:v,dim:v|#hostname:h,timestamp:T"
 * (TorchServe's StatsD-like format; the unit from the family's HELP line, else Milliseconds for
 * *_ms families and Count). Written through an rlog (rotated like the other logs). */
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
    strcpy(o.host, "localhost");
    gethostname(o.host, sizeof(o.host) - 1);
    render(&o);
    struct buf lines;
    buf_init(&lines);
    long long ts = (long long)(ts_wall_ms() / 1000);
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
        if (c->metric_time_interval > 0)
            LOG_WARN("metric_time_interval is used by metrics_mode=log only (this server serves "
                     "the metrics on the metrics API and collects no system metrics)");
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

void http_metrics_handle(struct evhttp_request *req)
{
    char rid[40];
    struct http_path p;
    /* OPTIONS / and /api-description answer the port's API description, as on the others */
    if (http_api_begin(req, rid, &p, HTTP_NO_TOKEN)) {
        http_path_free(&p);
        return;
    }
    if (p.n != 1 || strcmp(p.seg[0], "metrics")) {
        http_path_free(&p);
        http_send_error(req, rid, 404, "ResourceNotFoundException",
                        "Requested resource is not found, please refer to API document.");
        return;
    }
    http_path_free(&p);
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
    strcpy(o.host, "localhost");
    gethostname(o.host, sizeof(o.host) - 1);

    if (!strcmp(srv->cfg.metrics_mode, "log")) {
        char note[512];
        int n = snprintf(note, sizeof(note),
                         "# metrics_mode=log: the metrics are written to %s every %d s\n",
                         log_path ? log_path : "ts_metrics.log", log_interval_s);
        evhttp_clear_headers(&o.query);
        buf_free(&o.b);
        http_send(req, rid, 200, "text/plain; version=0.0.4; charset=utf-8", note, (size_t)n);
        return;
    }
    render(&o);

    evhttp_clear_headers(&o.query);
    http_send(req, rid, 200, "text/plain; version=0.0.4; charset=utf-8", o.b.data, o.b.len);
    buf_free(&o.b);
}
