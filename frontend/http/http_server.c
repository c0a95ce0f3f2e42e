/*
 * http_server: the three HTTP listeners and the router (see http_server.h).
 *
 * The router is the one front door of the HTTP APIs: each request passes the limits every
 * request meets (http_guard), a CORS preflight, the API description and the token check here,
 * before the API of its listener sees it. The APIs answer with http_reply, which knows nothing
 * of this module, so no API calls back up into the router.
 */
#include "http_server.h"

#include <errno.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "core/core.h"
#include "http_access.h"
#include "http_apidoc.h"
#include "http_flush.h"
#include "http_guard.h"
#include "http_heads.h"
#include "http_inference.h"
#include "http_management.h"
#include "http_metrics.h"
#include "http_openai.h"
#include "http_reply.h"
#include "http_token.h"
#include "http_tls.h"
#include "log.h"
#include "mgmt/auth.h"
#include "util.h"

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

/* the three listeners (inference, management, metrics) */
static struct evhttp *http_inference, *http_management, *http_metrics;

/* What every API starts with: the request id and path, then, as TorchServe, the API
 * description (OPTIONS / or /api-description, no token, on every port) or the key check for
 * the listener's scope (an enum auth_scope; /token on the management API takes the API key;
 * the metrics port has none). The OpenAI routes on the inference port answer in OpenAI's error
 * shape, their token's refusal included: they are handed over whole (http_openai.c). */
static void route(struct evhttp_request *req, int scope, http_api_fn *api)
{
    http_access_begin(req);
    if (http_guard_check(req) != 0 || cors_preflight(req))
        return;
    if (scope == AUTH_INFERENCE && http_openai_target(evhttp_request_get_uri(req)) &&
        http_openai_handle(req))
        return;
    char rid[40];
    struct http_path p;
    http_request_id(req, rid);
    http_path_parse(req, &p);
    if (http_token_free_path(req, &p))
        http_api_description(req, rid, scope);
    else if (scope != HTTP_NO_TOKEN && http_token_refused(req, &p, scope))
        http_send_error(req, rid, AUTH_FAIL_STATUS, AUTH_FAIL_TYPE, AUTH_FAIL_MSG);
    else
        api(req, rid, &p);
    http_path_free(&p);
}

static void on_inference(struct evhttp_request *req, void *arg)
{
    (void)arg;
    route(req, AUTH_INFERENCE, http_inference_handle);
}

static void on_management(struct evhttp_request *req, void *arg)
{
    (void)arg;
    route(req, AUTH_MANAGEMENT, http_management_handle);
}

static void on_metrics(struct evhttp_request *req, void *arg)
{
    (void)arg;
    route(req, HTTP_NO_TOKEN, http_metrics_handle);
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
    http_heads_start();
    return 0;
}

void http_servers_stop(void)
{
    http_heads_stop();
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
