/*
 * http_reply: the replies every HTTP module sends (see http_reply.h).
 */
#include "http_reply.h"

#include <event2/buffer.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "core/ev_mem.h"
#include "core/model.h"
#include "http_flush.h"
#include "http_fmt.h"
#include "util.h"

const char *http_reason(int status)
{
    switch (status) {
    case 200:
        return "OK";
    case 202:
        return "Accepted";
    case 206:
        return "Partial Content";
    case 400:
        return "Bad Request";
    case 401:
        return "Unauthorized";
    case 403:
        return "Forbidden";
    case 404:
        return "Not Found";
    case 405:
        return "Method Not Allowed";
    case 408:
        return "Request Timeout";
    case 409:
        return "Conflict";
    case 410:
        return "Gone";
    case 413:
        return "Request Entity Too Large";
    case 414:
        return "URI Too Long";
    case 431:
        return "Request Header Fields Too Large";
    case 429:
        return "Too Many Requests";
    case 500:
        return "Internal Server Error";
    case 501:
        return "Not Implemented";
    case 503:
        return "Service Unavailable";
    case 504:
        return "Gateway Timeout";
    case 505:
        return "HTTP Version Not Supported";
    case 507:
        return "Insufficient Storage";
    default:
        return status < 300 ? "OK" : status < 500 ? "Bad Request" : "Internal Server Error";
    }
}

void http_count_status(int status)
{
    if (status < 300)
        srv->counters.requests_2xx++;
    else if (status < 500)
        srv->counters.requests_4xx++;
    else
        srv->counters.requests_5xx++;
}

void http_path_parse(struct evhttp_request *req, struct http_path *p)
{
    memset(p, 0, sizeof(*p));
    const char *path = evhttp_uri_get_path(evhttp_request_get_evhttp_uri(req));
    if (!path)
        return;
    const char *s = path;
    while (*s && p->n < 16) {
        while (*s == '/')
            s++;
        if (!*s)
            break;
        const char *e = strchr(s, '/');
        size_t n = e ? (size_t)(e - s) : strlen(s);
        char *raw = xstrndup(s, n);
        char *dec = evhttp_uridecode(raw, 0, NULL);
        free(raw);
        p->seg[p->n++] = xstrdup(dec ? dec : "");
        ev_mem_free(dec); /* libevent's allocation */
        s += n;
    }
}

void http_path_free(struct http_path *p)
{
    for (int i = 0; i < p->n; i++)
        free(p->seg[i]);
    p->n = 0;
}

char *http_query_get(struct evhttp_request *req, const char *key)
{
    const char *q = evhttp_uri_get_query(evhttp_request_get_evhttp_uri(req));
    if (!q)
        return NULL;
    struct evkeyvalq kv;
    TAILQ_INIT(&kv);
    if (evhttp_parse_query_str(q, &kv) != 0)
        return NULL;
    const char *v = evhttp_find_header(&kv, key);
    char *r = v ? xstrdup(v) : NULL;
    evhttp_clear_headers(&kv);
    return r;
}

void http_request_id(struct evhttp_request *req, char out[40])
{
    const char *h = evhttp_find_header(evhttp_request_get_input_headers(req), "x-request-id");
    if (h && *h && strlen(h) < 40 && !strpbrk(h, "\r\n\"\\")) {
        strcpy(out, h);
        return;
    }
    ts_uuid(out);
}

void http_add_std_headers(struct evhttp_request *req, const char *req_id)
{
    struct evkeyvalq *h = evhttp_request_get_output_headers(req);
    if (req_id)
        evhttp_add_header(h, "x-request-id", req_id);
    evhttp_add_header(h, "Pragma", "no-cache");
    evhttp_add_header(h, "Cache-Control", "no-cache; no-store, must-revalidate, private");
    evhttp_add_header(h, "Expires", "Thu, 01 Jan 1970 00:00:00 UTC");
    if (srv->cfg.cors_allowed_origin &&
        evhttp_find_header(evhttp_request_get_input_headers(req), "Origin"))
        evhttp_add_header(h, "Access-Control-Allow-Origin", srv->cfg.cors_allowed_origin);
    http_fmt_add_date(req);
}

void http_send(struct evhttp_request *req, const char *req_id, int status, const char *ctype,
               const void *body, size_t len)
{
    http_add_std_headers(req, req_id);
    struct evkeyvalq *h = evhttp_request_get_output_headers(req);
    if (ctype && *ctype)
        evhttp_add_header(h, "Content-Type", ctype);
    if (status >= 400)
        evhttp_add_header(h, "Connection", "close");
    struct evbuffer *b = evbuffer_new();
    if (len)
        evbuffer_add(b, body, len);
    http_count_status(status);
    http_flush_later(req);
    evhttp_send_reply(req, status, http_reason(status), b);
    evbuffer_free(b);
}

void http_send_json(struct evhttp_request *req, const char *req_id, int status, json_t *obj)
{
    char *s = json_dumps(obj, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(obj);
    size_t n = strlen(s);
    s = xrealloc(s, n + 2);
    s[n++] = '\n';
    s[n] = '\0';
    http_send(req, req_id, status, "application/json", s, n);
    free(s);
}

char *http_error_json(int status, const char *type, const char *msg)
{
    json_t *o = json_object();
    json_object_set_new(o, "code", json_integer(status));
    json_object_set_new(o, "type", json_string(type));
    json_object_set_new(o, "message", json_string(msg));
    char *s = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(o);
    char *r = xasprintf("%s\n", s);
    free(s);
    return r;
}

void http_send_error(struct evhttp_request *req, const char *req_id, int status, const char *type,
                     const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    char *body = http_error_json(status, type, msg);
    http_send(req, req_id, status, "application/json", body, strlen(body));
    free(body);
}

void http_send_refusal(struct evhttp_request *req, const char *req_id, const struct submit_error *e)
{
    http_send_error(req, req_id, e->status, e->type, "%s", e->msg);
}

void http_send_not_found(struct evhttp_request *req, const char *req_id)
{
    http_send_error(req, req_id, 404, "ResourceNotFoundException", HTTP_NOT_FOUND_MSG);
}
