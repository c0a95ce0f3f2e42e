/*
 * http_server: the three HTTP listeners (inference, management, metrics) on the loop's evhttp,
 * request routing, and the reply helpers every HTTP module uses: TorchServe's standard headers
 * (x-request-id, no-cache), its error body {"code","type","message"} with Connection: close, and
 * pretty JSON. Loop thread only.
 */
#ifndef TS_HTTP_SERVER_H
#define TS_HTTP_SERVER_H

#include <stddef.h>

struct evhttp_request;
struct evbuffer;
typedef struct json_t json_t;

/* Path split into percent-decoded segments (max 16). Free with http_path_free. */
struct http_path {
    char *seg[16];
    int n;
};

int http_servers_start(void);
void http_servers_stop(void);

void http_path_parse(struct evhttp_request *req, struct http_path *p);
void http_path_free(struct http_path *p);
/* What every API handler starts with: the request id and path, then, as TorchServe, the API
 * description (OPTIONS / or /api-description, no token) or the key check for scope (an enum
 * auth_scope, or HTTP_NO_TOKEN on the metrics port; /token on the management API takes the API
 * key). 1 when req has been answered here; either way p is parsed and freed by the caller. */
int http_api_begin(struct evhttp_request *req, char rid[40], struct http_path *p, int scope);
/* 1 when req, on a listener of scope (an enum auth_scope), would be refused for its token: the
 * check http_api_begin makes, without answering. Needs only the request line and headers. */
int http_token_refused(struct evhttp_request *req, int scope);
/* Query parameter value (decoded), NULL if absent. Free with free(). */
char *http_query_get(struct evhttp_request *req, const char *key);

/* The request id for a request: its x-request-id header if sane, else a new UUID. */
void http_request_id(struct evhttp_request *req, char out[40]);
void http_add_std_headers(struct evhttp_request *req, const char *req_id);
void http_count_status(int status);
/* Sends body (may be NULL) with status; adds the standard headers. */
void http_send(struct evhttp_request *req, const char *req_id, int status, const char *ctype,
               const void *body, size_t len);
/* Pretty JSON (2-space indent, trailing newline), takes ownership of obj. */
void http_send_json(struct evhttp_request *req, const char *req_id, int status, json_t *obj);
/* TorchServe's error body; status >= 400 also closes the connection. */
void http_send_error(struct evhttp_request *req, const char *req_id, int status, const char *type,
                     const char *fmt, ...) __attribute__((format(printf, 5, 6)));
/* {"code","type","message"} pretty-printed, malloc'd */
char *http_error_json(int status, const char *type, const char *msg);
const char *http_reason(int status);

/* The request's access-log line is written once its answer has been sent (http_access.c). */
void http_access_begin(struct evhttp_request *req);

/* per-listener entry points */
void http_inference_handle(struct evhttp_request *req);
void http_management_handle(struct evhttp_request *req);
void http_metrics_handle(struct evhttp_request *req);
/* metrics_mode=log: ts_metrics.log every metric_time_interval s (http_metrics.c); stop writes
 * the last values. 0, or -1 after logging why. */
int http_metrics_log_start(void);
void http_metrics_log_stop(void);
/* OPTIONS / and GET /api-description: an OpenAPI document of the API of the port whose scope is
 * given (AUTH_INFERENCE, AUTH_MANAGEMENT, or HTTP_NO_TOKEN for the metrics port); no token. */
void http_api_description(struct evhttp_request *req, const char *rid, int scope);

#endif
