/*
 * http_token: TorchServe's token rule for an HTTP request, used by the router, by the guard
 * (which judges a request from its head, before its body is read) and by the OpenAI routes
 * (which answer in OpenAI's error shape): the API description (OPTIONS / or GET
 * /api-description) needs no token, /token on the management API takes the API key, every
 * other request its listener's key. Loop thread only.
 */
#ifndef TS_HTTP_TOKEN_H
#define TS_HTTP_TOKEN_H

struct evhttp_request;
struct http_path;

/* 1 when the request is TorchServe's API description, which needs no token. */
int http_token_free_path(struct evhttp_request *req, const struct http_path *p);
/* 1 when req, on a listener of scope (an enum auth_scope), is refused for its token: a missing
 * or wrong key. Needs only the request line and headers; p is the request's parsed path. */
int http_token_refused(struct evhttp_request *req, const struct http_path *p, int scope);

#endif
