/*
 * http_access: the access-log line of each HTTP request (access_log.log, TorchServe's format),
 * written once its answer has been sent. Loop thread only.
 */
#ifndef TS_HTTP_ACCESS_H
#define TS_HTTP_ACCESS_H

struct evhttp_request;

/* Called first for every request; the line is written when evhttp completes the request. */
void http_access_begin(struct evhttp_request *req);

#endif
