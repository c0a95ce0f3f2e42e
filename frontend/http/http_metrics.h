/*
 * http_metrics: GET /metrics on the metrics port (Prometheus text, TorchServe's names and
 * ours), and metrics_mode=log (ts_metrics.log every metric_time_interval seconds). Loop thread
 * only.
 */
#ifndef TS_HTTP_METRICS_H
#define TS_HTTP_METRICS_H

#include "http_reply.h"

http_api_fn http_metrics_handle;
/* metrics_mode=log: starts the timer; stop writes the last values. 0, or -1 after logging why. */
int http_metrics_log_start(void);
void http_metrics_log_stop(void);

#endif
