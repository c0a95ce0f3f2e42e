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
#include <string.h>
#include <strings.h>

#include "core/access_log.h"
#include "http_access.h"
#include "http_reply.h"
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

/* evhttp_find_header compares every header case-insensitively; the two we read sit at the
 * ends of the list (x-request-id is added first, Content-Length by evhttp last), and a length
 * and first-letter check skips the others. */
static const char *header(const struct evkeyvalq *h, const char *key, size_t klen, int from_end)
{
    struct evkeyval *kv;
    if (from_end) {
        TAILQ_FOREACH_REVERSE(kv, h, evkeyvalq, next)
        if ((kv->key[0] | 0x20) == key[0] && strlen(kv->key) == klen && !strcasecmp(kv->key, key))
            return kv->value;
    } else {
        TAILQ_FOREACH(kv, h, next)
        if ((kv->key[0] | 0x20) == key[0] && strlen(kv->key) == klen && !strcasecmp(kv->key, key))
            return kv->value;
    }
    return NULL;
}

static void on_complete(struct evhttp_request *req, void *arg)
{
    int64_t start_us = (int64_t)(intptr_t)arg;
    char client[80];
    client[0] = '\0';
    struct evhttp_connection *con = evhttp_request_get_connection(req);
    if (con) {
        char *addr = NULL;
        ev_uint16_t port = 0;
        evhttp_connection_get_peer(con, &addr, &port);
        if (addr) {
            size_t n = strnlen(addr, sizeof(client) - 8);
            memcpy(client, addr, n);
            client[n++] = ':';
            char t[8];
            int k = 0;
            do
                t[k++] = (char)('0' + port % 10);
            while ((port /= 10));
            while (k)
                client[n++] = t[--k];
            client[n] = '\0';
        }
    }
    const struct evkeyvalq *out = evhttp_request_get_output_headers(req);
    const char *cl = header(out, "content-length", 14, 1);
    int code = evhttp_request_get_response_code(req);
    char status[8] = {(char)('0' + code / 100 % 10), (char)('0' + code / 10 % 10),
                      (char)('0' + code % 10), '\0'};
    const char *uri = evhttp_request_get_uri(req);
    access_log_line(client, method_name(evhttp_request_get_command(req)), uri ? uri : "-",
                    "HTTP/1.1", status, cl ? atoll(cl) : -1, start_us,
                    header(out, "x-request-id", 12, 0));
}

void http_access_begin(struct evhttp_request *req)
{
    if (access_log_on())
        evhttp_request_set_on_complete_cb(req, on_complete,
                                          (void *)(intptr_t)access_log_clock_us());
}
