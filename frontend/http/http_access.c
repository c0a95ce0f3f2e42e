/*
 * http_access: the access-log line of each HTTP request (core/access_log.h), written when evhttp
 * has sent the whole answer (its on-complete callback), so the status, size and request id are
 * the ones the client got. The start time rides in the callback's argument: nothing is
 * allocated per request. A client that goes away before the answer is sent gets no line.
 */
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/access_log.h"
#include "http_server.h"
#include "util.h"

static const char *method_name(enum evhttp_cmd_type c)
{
    switch (c) {
    case EVHTTP_REQ_GET:
        return "GET";
    case EVHTTP_REQ_POST:
        return "POST";
    case EVHTTP_REQ_PUT:
        return "PUT";
    case EVHTTP_REQ_DELETE:
        return "DELETE";
    case EVHTTP_REQ_OPTIONS:
        return "OPTIONS";
    case EVHTTP_REQ_HEAD:
        return "HEAD";
    case EVHTTP_REQ_PATCH:
        return "PATCH";
    default:
        return "OTHER";
    }
}

static void on_complete(struct evhttp_request *req, void *arg)
{
    int64_t start_us = (int64_t)(intptr_t)arg;
    char client[80] = "";
    struct evhttp_connection *con = evhttp_request_get_connection(req);
    if (con) {
        char *addr = NULL;
        ev_uint16_t port = 0;
        evhttp_connection_get_peer(con, &addr, &port);
        if (addr)
            snprintf(client, sizeof(client), "%s:%u", addr, (unsigned)port);
    }
    struct evkeyvalq *out = evhttp_request_get_output_headers(req);
    const char *cl = evhttp_find_header(out, "Content-Length");
    char status[16];
    snprintf(status, sizeof(status), "%d", evhttp_request_get_response_code(req));
    const char *uri = evhttp_request_get_uri(req);
    access_log_line(client, method_name(evhttp_request_get_command(req)), uri ? uri : "-",
                    "HTTP/1.1", status, cl ? atoll(cl) : -1, start_us,
                    evhttp_find_header(out, "x-request-id"));
}

void http_access_begin(struct evhttp_request *req)
{
    if (access_log_on())
        evhttp_request_set_on_complete_cb(req, on_complete, (void *)(intptr_t)ts_now_us());
}
