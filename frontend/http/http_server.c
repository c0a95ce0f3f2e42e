/*
 * http_server: listeners and reply helpers (see http_server.h).
 *
 * The limits every request and connection meets are http_guard's.
 */
#include "http_server.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <jansson.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "http_flush.h"
#include "http_fmt.h"
#include "http_guard.h"
#include "http_tls.h"
#include "log.h"
#include "mgmt/auth.h"
#include "core/core.h"
#include "core/ev_mem.h"
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

/* as TorchServe: the API description needs no token; /token takes the API key */
static int is_api_description(struct evhttp_request *req, const struct http_path *p)
{
    return (p->n == 0 && evhttp_request_get_command(req) == EVHTTP_REQ_OPTIONS) ||
           (p->n == 1 && !strcmp(p->seg[0], "api-description"));
}

static int token_scope(const struct http_path *p, int scope)
{
    return scope == AUTH_MANAGEMENT && p->n == 1 && !strcmp(p->seg[0], "token") ? AUTH_API : scope;
}

static int token_ok(struct evhttp_request *req, const struct http_path *p, int scope)
{
    if (scope == HTTP_NO_TOKEN)
        return 1;
    return auth_check((enum auth_scope)token_scope(p, scope),
                      evhttp_find_header(evhttp_request_get_input_headers(req), "Authorization")) ==
           0;
}

int http_token_refused(struct evhttp_request *req, int scope)
{
    if (!auth_enabled())
        return 0;
    struct http_path p;
    http_path_parse(req, &p);
    int refused = !is_api_description(req, &p) && !token_ok(req, &p, scope);
    http_path_free(&p);
    return refused;
}

int http_api_begin(struct evhttp_request *req, char rid[40], struct http_path *p, int scope)
{
    http_request_id(req, rid);
    http_path_parse(req, p);
    if (is_api_description(req, p)) {
        http_api_description(req, rid, scope);
        return 1;
    }
    if (!token_ok(req, p, scope)) {
        http_send_error(req, rid, AUTH_FAIL_STATUS, AUTH_FAIL_TYPE, AUTH_FAIL_MSG);
        return 1;
    }
    return 0;
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

/* A CORS preflight (OPTIONS with Access-Control-Request-Method) is answered here, before the
 * token check: browsers send no credentials on it. 1 when answered. */
static int cors_preflight(struct evhttp_request *req)
{
    const struct config *c = &srv->cfg;
    struct evkeyvalq *in = evhttp_request_get_input_headers(req);
    if (!c->cors_allowed_origin || evhttp_request_get_command(req) != EVHTTP_REQ_OPTIONS ||
        !evhttp_find_header(in, "Access-Control-Request-Method"))
        return 0;
    struct evkeyvalq *h = evhttp_request_get_output_headers(req);
    if (c->cors_allowed_methods)
        evhttp_add_header(h, "Access-Control-Allow-Methods", c->cors_allowed_methods);
    if (c->cors_allowed_headers && evhttp_find_header(in, "Access-Control-Request-Headers"))
        evhttp_add_header(h, "Access-Control-Allow-Headers", c->cors_allowed_headers);
    char rid[40];
    http_request_id(req, rid);
    http_send(req, rid, 200, NULL, NULL, 0);
    return 1;
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

/* the three listeners (inference, management, metrics) */
static struct evhttp *http_inference, *http_management, *http_metrics;

static void on_inference(struct evhttp_request *req, void *arg)
{
    (void)arg;
    http_access_begin(req);
    if (http_guard_check(req) == 0 && !cors_preflight(req))
        http_inference_handle(req);
}

static void on_management(struct evhttp_request *req, void *arg)
{
    (void)arg;
    http_access_begin(req);
    if (http_guard_check(req) == 0 && !cors_preflight(req))
        http_management_handle(req);
}

static void on_metrics(struct evhttp_request *req, void *arg)
{
    (void)arg;
    http_access_begin(req);
    if (http_guard_check(req) == 0 && !cors_preflight(req))
        http_metrics_handle(req);
}

static struct ssl_ctx_st *tls_ctx; /* https:// listeners */

static struct evhttp *listen_on(const struct listen_addr *a,
                                void (*cb)(struct evhttp_request *, void *), int scope)
{
    int tls = !strcmp(a->scheme, "https");
    if (!tls && strcmp(a->scheme, "http")) {
        LOG_ERROR("%s://%s:%d: only http and https listeners are supported", a->scheme, a->host,
                  a->port);
        return NULL;
    }
    struct evhttp *h = evhttp_new(srv->base);
    if (!h)
        return NULL;
    evhttp_set_allowed_methods(h, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_PUT |
                                      EVHTTP_REQ_DELETE | EVHTTP_REQ_OPTIONS | EVHTTP_REQ_HEAD |
                                      EVHTTP_REQ_PATCH);
    evhttp_set_timeout(h, srv->cfg.default_response_timeout + 10);
    evhttp_set_gencb(h, cb, NULL);
    struct evhttp_bound_socket *bound =
        evhttp_bind_socket_with_handle(h, a->host, (ev_uint16_t)a->port);
    if (!bound) {
        int e = errno;
        char who[128];
        ts_port_holder(a->port, who, sizeof(who));
        LOG_ERROR("cannot listen on %s://%s:%d: %s%s%s", a->scheme, a->host, a->port, strerror(e),
                  *who ? "; held by " : "", who);
        evhttp_free(h);
        return NULL;
    }
    http_guard_attach(h, bound, tls ? tls_ctx : NULL, scope);
    if (tls) {
        /* OpenSSL writes a reply as several records; with Nagle on, the last one waits for the
         * client's delayed ACK (40 ms). Accepted sockets inherit TCP_NODELAY on Linux. */
        int one = 1;
        setsockopt(evhttp_bound_socket_get_fd(bound), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    }
    LOG_INFO("listening on %s://%s:%d", a->scheme, a->host, a->port);
    return h;
}

int http_servers_start(void)
{
    const struct config *c = &srv->cfg;
    http_guard_init();
    if (http_flush_init() != 0)
        return -1;
    if (!strcmp(c->inference_address.scheme, "https") ||
        !strcmp(c->management_address.scheme, "https") ||
        (c->enable_metrics_api && !strcmp(c->metrics_address.scheme, "https"))) {
        char err[512];
        if (!(tls_ctx =
                  http_tls_ctx_new(c->certificate_file, c->private_key_file, err, sizeof(err)))) {
            LOG_ERROR("https listener: %s", err);
            fprintf(stderr, "torchserve-c: https listener: %s\n", err);
            return -1;
        }
    }
    if (!(http_inference = listen_on(&c->inference_address, on_inference, AUTH_INFERENCE)))
        return -1;
    if (!(http_management = listen_on(&c->management_address, on_management, AUTH_MANAGEMENT)))
        return -1;
    if (c->enable_metrics_api &&
        !(http_metrics = listen_on(&c->metrics_address, on_metrics, HTTP_NO_TOKEN)))
        return -1;
    return 0;
}

void http_servers_stop(void)
{
    http_guard_shutdown();
    http_flush_stop();
    if (tls_ctx)
        http_tls_ctx_free(tls_ctx);
    tls_ctx = NULL;
    if (http_inference)
        evhttp_free(http_inference);
    if (http_management)
        evhttp_free(http_management);
    if (http_metrics)
        evhttp_free(http_metrics);
    http_inference = http_management = http_metrics = NULL;
}
