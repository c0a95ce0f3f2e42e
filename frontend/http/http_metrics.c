/*
 * http_metrics: GET /metrics on the metrics port, Prometheus text format 0.0.4, with
 * TorchServe's metric names (Requests2XX/4XX/5XX, ts_inference_requests_total) plus our
 * per-model batching counters (ts_batches_total, ts_max_batch_size) that show batching at work.
 */
#include <event2/buffer.h>
#include <event2/http.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "http_server.h"
#include "core/model.h"
#include "core/core.h"

void http_metrics_handle(struct evhttp_request *req)
{
    char rid[40];
    http_request_id(req, rid);
    struct http_path p;
    http_path_parse(req, &p);
    if (p.n != 1 || strcmp(p.seg[0], "metrics")) {
        http_path_free(&p);
        http_send_error(req, rid, 404, "ResourceNotFoundException",
                        "Requested resource is not found, please refer to API document.");
        return;
    }
    http_path_free(&p);
    char host[256] = "localhost";
    gethostname(host, sizeof(host) - 1);
    struct buf b;
    buf_init(&b);
    const char *names[3] = {"Requests2XX", "Requests4XX", "Requests5XX"};
    uint64_t vals[3] = {srv->counters.requests_2xx, srv->counters.requests_4xx,
                        srv->counters.requests_5xx};
    for (int i = 0; i < 3; i++)
        buf_printf(&b,
                   "# HELP %s Torchserve prometheus counter metric with unit: Count\n"
                   "# TYPE %s counter\n%s{Level=\"Host\",Hostname=\"%s\",} %llu.0\n",
                   names[i], names[i], names[i], host, (unsigned long long)vals[i]);
    buf_printf(&b, "# HELP ts_inference_requests_total Torchserve prometheus counter metric with "
                   "unit: Count\n# TYPE ts_inference_requests_total counter\n");
    for (struct model *m = model_first(); m; m = model_next(m))
        buf_printf(&b,
                   "ts_inference_requests_total{model_name=\"%s\",model_version=\"%s\","
                   "hostname=\"%s\",} %llu.0\n",
                   m->name, m->version, host, (unsigned long long)m->n_requests);
    buf_printf(&b, "# HELP ts_batches_total batches sent to workers\n"
                   "# TYPE ts_batches_total counter\n");
    for (struct model *m = model_first(); m; m = model_next(m))
        buf_printf(&b, "ts_batches_total{model_name=\"%s\",model_version=\"%s\",} %llu.0\n",
                   m->name, m->version, (unsigned long long)m->pool.n_batches);
    buf_printf(&b, "# HELP ts_max_batch_size largest batch sent to a worker\n"
                   "# TYPE ts_max_batch_size gauge\n");
    for (struct model *m = model_first(); m; m = model_next(m))
        buf_printf(&b, "ts_max_batch_size{model_name=\"%s\",model_version=\"%s\",} %llu.0\n",
                   m->name, m->version, (unsigned long long)m->pool.max_batch_seen);
    http_send(req, rid, 200, "text/plain; version=0.0.4; charset=utf-8", b.data, b.len);
    buf_free(&b);
}
