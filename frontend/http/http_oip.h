/*
 * http_oip: the Open Inference Protocol ("KServe v2") REST API on the inference port.
 *
 *   GET  /v2                                          server metadata
 *   GET  /v2/health/live, /v2/health/ready            health
 *   GET  /v2/models/{m}[/versions/{v}]                model metadata
 *   GET  /v2/models/{m}[/versions/{v}]/ready          model readiness
 *   POST /v2/models/{m}[/versions/{v}]/infer          one OIP response
 *   POST /v2/models/{m}[/versions/{v}]/infer_stream   SSE, `data: {OIP response}\n\n` per partial
 *   POST /v2/models/{m}[/versions/{v}]/generate       OIP generate ({"text_input"} -> text_output)
 *   POST /v2/models/{m}[/versions/{v}]/generate_stream  SSE of generate responses
 *
 * Errors are {"error": "..."}: 400 for a bad request (the message names the field), 404 for an
 * unknown model or version, 413 over max_request_size, 503 when the model cannot take the job.
 * An error found before a stream starts is a plain JSON reply; after it, `event: error`.
 * Loop thread only.
 */
#ifndef TS_HTTP_OIP_H
#define TS_HTTP_OIP_H

struct evhttp_request;
struct http_path;

/* p->seg[0] is "v2". */
void http_oip_handle(struct evhttp_request *req, const char *rid, const struct http_path *p);

#endif
