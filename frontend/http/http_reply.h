/*
 * http_reply: what every HTTP module answers with. The request's id and path, query
 * parameters, TorchServe's standard headers (x-request-id, no-cache), whole replies, pretty
 * JSON, and TorchServe's error body {"code","type","message"} with Connection: close.
 *
 * Loop thread only. Uses nothing of the HTTP transport above it: the router (http_server) and
 * the APIs it routes to call down into this module, never the other way round.
 */
#ifndef TS_HTTP_REPLY_H
#define TS_HTTP_REPLY_H

#include <stddef.h>

struct evhttp_request;
struct submit_error;
typedef struct json_t json_t;

/* Path split into percent-decoded segments (max 16). Free with http_path_free. */
struct http_path {
    char *seg[16];
    int n;
};

/* An API's entry point: the router (http_server) has checked the request and parsed its id and
 * path, which it frees after the call. */
typedef void http_api_fn(struct evhttp_request *req, const char *rid, struct http_path *p);

void http_path_parse(struct evhttp_request *req, struct http_path *p);
void http_path_free(struct http_path *p);
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
/* A refusal of the core (model_lookup, model_check_body, ...) as TorchServe's error body. */
void http_send_refusal(struct evhttp_request *req, const char *req_id,
                       const struct submit_error *e);
/* {"code","type","message"} pretty-printed, malloc'd */
char *http_error_json(int status, const char *type, const char *msg);
const char *http_reason(int status);

/* TorchServe's answer to a path no API serves */
#define HTTP_NOT_FOUND_MSG "Requested resource is not found, please refer to API document."
void http_send_not_found(struct evhttp_request *req, const char *req_id);

#endif
