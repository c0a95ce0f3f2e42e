/*
 * http_management: the management API on port 8081, TorchServe's REST paths over the
 * transport-independent operations of management.c:
 *
 *   GET    /models[?limit=&next_page_token=]          list
 *   POST   /models?url=&model_name=&...  (or a JSON body with the same keys)   register
 *   GET    /models/{m}[/{v}|/all][?customized=true]   describe
 *   PUT    /models/{m}[/{v}]?min_worker=&max_worker=&synchronous=    scale
 *   DELETE /models/{m}[/{v}]                          unregister
 *   PUT    /models/{m}/{v}/set-default                set the default version
 *   GET    /v1/models/{m}                             KServe v1 readiness
 *   GET    /token?type=management|inference           key rotation (API key)
 *   OPTIONS /, GET /api-description                   OpenAPI description (no token)
 *
 * Parameters are read as TorchServe's Netty handlers read them: an integer that does not parse
 * takes its default, a boolean is true only for "true" (any case). A request waiting on a
 * synchronous operation watches its connection: a client that goes away cancels the wait.
 */
#include <event2/buffer.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <jansson.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "mgmt/auth.h"
#include "http_apidoc.h"
#include "http_management.h"
#include "log.h"
#include "mgmt/management.h"
#include "core/model.h"
#include "core/core.h"
#include "util.h"
#include "core/worker_pool.h"

#define NOT_ALLOWED_MSG "Requested method is not allowed, please refer to API document."

/* One REST request waiting for its management operation. */
struct rest_call {
    struct evhttp_request *req;
    struct evhttp_connection *evcon;
    struct mgmt_op *op;
    int raw_json; /* list/describe: msg is the JSON body; else {"status": msg} */
    char rid[40];
};

static void rest_on_close(struct evhttp_connection *evcon, void *arg)
{
    struct rest_call *c = arg;
    evhttp_connection_set_closecb(evcon, NULL, NULL);
    LOG_REQ(LOG_LEVEL_INFO, c->rid, "client closed the connection during a management call");
    mgmt_op_cancel(c->op);
    /* a request evhttp detached from its dead connection is ours to free */
    if (!evhttp_request_get_connection(c->req))
        evhttp_request_free(c->req);
    free(c);
}

static void rest_done(void *arg, int status, const char *type, const char *msg)
{
    struct rest_call *c = arg;
    if (c->op && c->evcon)
        evhttp_connection_set_closecb(c->evcon, NULL, NULL);
    if (type) {
        http_send_error(c->req, c->rid, status, type, "%s", msg);
    } else if (c->raw_json) {
        http_send(c->req, c->rid, status, "application/json", msg, strlen(msg));
    } else {
        json_t *o = json_object();
        json_object_set_new(o, "status", json_string(msg));
        http_send_json(c->req, c->rid, status, o);
    }
    free(c);
}

static struct rest_call *rest_call_new(struct evhttp_request *req, const char *rid, int raw_json)
{
    struct rest_call *c = xcalloc(1, sizeof(*c));
    c->req = req;
    c->evcon = evhttp_request_get_connection(req);
    c->raw_json = raw_json;
    snprintf(c->rid, sizeof(c->rid), "%s", rid);
    return c;
}

/* The operation is pending (op != NULL): watch the client. c is freed by rest_done otherwise. */
static void rest_call_wait(struct rest_call *c, struct mgmt_op *op)
{
    if (!op)
        return;
    c->op = op;
    if (c->evcon)
        evhttp_connection_set_closecb(c->evcon, rest_on_close, c);
}

/* ---- parameters ---- */

struct params {
    struct evkeyvalq kv;
};

static void params_parse(struct evhttp_request *req, struct params *p)
{
    TAILQ_INIT(&p->kv);
    const char *q = evhttp_uri_get_query(evhttp_request_get_evhttp_uri(req));
    if (q && evhttp_parse_query_str(q, &p->kv) != 0) {
        evhttp_clear_headers(&p->kv);
        TAILQ_INIT(&p->kv);
    }
}

static const char *param_str(struct params *p, const char *key)
{
    return evhttp_find_header(&p->kv, key);
}

/* Netty's getIntParameter: the default when absent or not an integer. */
static int param_int(struct params *p, const char *key, int def)
{
    const char *v = param_str(p, key);
    long n;
    if (!v || ts_parse_long(v, INT_MIN, INT_MAX, &n) != 0)
        return def;
    return (int)n;
}

/* Boolean.parseBoolean: true only for "true". */
static int param_bool(struct params *p, const char *key, int def)
{
    const char *v = param_str(p, key);
    if (!v)
        return def;
    return !strcasecmp(v, "true");
}

/* ---- register ---- */

static int is_json(struct evhttp_request *req)
{
    const char *ct = evhttp_find_header(evhttp_request_get_input_headers(req), "Content-Type");
    if (!ct)
        return 0;
    size_t n = strcspn(ct, "; ");
    return n == 16 && !strncasecmp(ct, "application/json", 16);
}

/* One key of the JSON body: integers, numeric strings (Gson coerces them) or booleans. */
static int json_int_field(json_t *o, const char *key, int *out, char *err, size_t errlen)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v))
        return 0;
    if (json_is_integer(v) && json_integer_value(v) >= INT_MIN &&
        json_integer_value(v) <= INT_MAX) {
        *out = (int)json_integer_value(v);
        return 0;
    }
    long n;
    if (json_is_string(v) && ts_parse_long(json_string_value(v), INT_MIN, INT_MAX, &n) == 0) {
        *out = (int)n;
        return 0;
    }
    snprintf(err, errlen, "$.%s: expected an integer", key);
    return -1;
}

static int json_str_field(json_t *o, const char *key, const char **out, char *err, size_t errlen)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_string(v)) {
        snprintf(err, errlen, "$.%s: expected a string", key);
        return -1;
    }
    *out = json_string_value(v);
    return 0;
}

static int json_bool_field(json_t *o, const char *key, int *out, char *err, size_t errlen)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v))
        return 0;
    if (json_is_boolean(v)) {
        *out = json_is_true(v);
        return 0;
    }
    if (json_is_string(v)) {
        *out = !strcasecmp(json_string_value(v), "true");
        return 0;
    }
    snprintf(err, errlen, "$.%s: expected a boolean", key);
    return -1;
}

static void register_model(struct evhttp_request *req, const char *rid, struct params *p)
{
    struct mgmt_register_args a;
    mgmt_register_init(&a);
    json_t *body = NULL;
    if (is_json(req)) {
        struct evbuffer *in = evhttp_request_get_input_buffer(req);
        size_t len = evbuffer_get_length(in);
        struct submit_error e;
        if (model_check_body(len, &e) != 0) {
            http_send_refusal(req, rid, &e);
            return;
        }
        json_error_t je;
        body = json_loadb((const char *)evbuffer_pullup(in, -1), len, 0, &je);
        if (!body || !json_is_object(body)) {
            http_send_error(req, rid, 400, "BadRequestException",
                            "Invalid JSON body: %s (line %d, column %d)",
                            body ? "expected an object" : je.text, je.line, je.column);
            json_decref(body);
            return;
        }
        char err[256] = "";
        if (json_str_field(body, "url", &a.url, err, sizeof(err)) ||
            json_str_field(body, "model_name", &a.model_name, err, sizeof(err)) ||
            json_str_field(body, "handler", &a.handler, err, sizeof(err)) ||
            json_str_field(body, "runtime", &a.runtime, err, sizeof(err)) ||
            json_int_field(body, "batch_size", &a.batch_size, err, sizeof(err)) ||
            json_int_field(body, "max_batch_delay", &a.max_batch_delay, err, sizeof(err)) ||
            json_int_field(body, "initial_workers", &a.initial_workers, err, sizeof(err)) ||
            json_bool_field(body, "synchronous", &a.synchronous, err, sizeof(err)) ||
            json_int_field(body, "response_timeout", &a.response_timeout, err, sizeof(err)) ||
            json_int_field(body, "startup_timeout", &a.startup_timeout, err, sizeof(err)) ||
            json_bool_field(body, "s3_sse_kms", &a.s3_sse_kms, err, sizeof(err))) {
            http_send_error(req, rid, 400, "BadRequestException", "Invalid JSON body: %s", err);
            json_decref(body);
            return;
        }
    } else {
        a.url = param_str(p, "url");
        a.model_name = param_str(p, "model_name");
        a.handler = param_str(p, "handler");
        a.runtime = param_str(p, "runtime");
        a.batch_size = param_int(p, "batch_size", a.batch_size);
        a.max_batch_delay = param_int(p, "max_batch_delay", a.max_batch_delay);
        a.initial_workers = param_int(p, "initial_workers", a.initial_workers);
        a.synchronous = param_bool(p, "synchronous", a.synchronous);
        a.response_timeout = param_int(p, "response_timeout", a.response_timeout);
        a.startup_timeout = param_int(p, "startup_timeout", a.startup_timeout);
        a.s3_sse_kms = param_bool(p, "s3_sse_kms", 0);
    }
    struct rest_call *c = rest_call_new(req, rid, 0);
    rest_call_wait(c, mgmt_register(&a, rest_done, c));
    json_decref(body);
}

/* ---- token rotation ---- */

static void token(struct evhttp_request *req, const char *rid, struct params *p)
{
    const char *type = param_str(p, "type");
    enum auth_scope s;
    if (type && !strcmp(type, "management"))
        s = AUTH_MANAGEMENT;
    else if (type && !strcmp(type, "inference"))
        s = AUTH_INFERENCE;
    else {
        http_send_error(req, rid, 400, AUTH_FAIL_TYPE,
                        "Invalid token type '%s': use type=management or type=inference",
                        type ? type : "");
        return;
    }
    char key[16], expires[64];
    int rc = auth_rotate(s, key, expires);
    if (rc != 0) {
        LOG_ERROR("%s key not rotated: %s: %s", type, AUTH_KEY_FILE, strerror(-rc));
        http_send_error(req, rid, 500, "InternalServerException",
                        "Failed to update key file %s (%s): the %s key is unchanged", AUTH_KEY_FILE,
                        strerror(-rc), type);
        return;
    }
    LOG_INFO("%s key rotated", type);
    /* TorchServe answers an empty body; this one is the key file's entry for the new key */
    http_send_json(req, rid, 200,
                   json_pack("{s:{s:s, s:s}}", type, "key", key, "expiration time", expires));
}

/* ---- routing ---- */

static void not_found(struct evhttp_request *req, const char *rid)
{
    http_send_not_found(req, rid);
}

static void not_allowed(struct evhttp_request *req, const char *rid)
{
    http_send_error(req, rid, 405, "MethodNotAllowedException", NOT_ALLOWED_MSG);
}

/* registering and unregistering with enable_model_api off: TorchServe's 405, saying how */
static void model_api_off(struct evhttp_request *req, const char *rid)
{
    http_send_error(req, rid, 405, "MethodNotAllowedException", MGMT_MODEL_API_OFF_MSG);
}

static void kserve_ready(struct evhttp_request *req, const char *rid, const char *name)
{
    struct model *m;
    struct submit_error e;
    if (model_lookup(name, NULL, &m, &e)) {
        http_send_refusal(req, rid, &e);
        return;
    }
    json_t *o = json_object();
    json_object_set_new(o, "name", json_string(name));
    json_object_set_new(o, "ready", json_boolean(model_ready(m)));
    http_send_json(req, rid, 200, o);
}

static void models(struct evhttp_request *req, const char *rid, struct http_path *path,
                   struct params *p, enum evhttp_cmd_type cmd)
{
    struct rest_call *c;
    if (path->n == 1) {
        if (cmd == EVHTTP_REQ_GET) {
            c = rest_call_new(req, rid, 1);
            mgmt_list(param_int(p, "limit", 100), param_int(p, "next_page_token", 0), rest_done, c);
        } else if (cmd == EVHTTP_REQ_POST && srv->cfg.enable_model_api) {
            register_model(req, rid, p);
        } else if (cmd == EVHTTP_REQ_POST) {
            model_api_off(req, rid);
        } else {
            not_allowed(req, rid);
        }
        return;
    }
    const char *name = path->seg[1];
    if (path->n == 4) {
        if (strcmp(path->seg[3], "set-default"))
            not_found(req, rid);
        else if (cmd == EVHTTP_REQ_PUT) {
            c = rest_call_new(req, rid, 0);
            mgmt_set_default(name, path->seg[2], rest_done, c);
        } else
            not_allowed(req, rid);
        return;
    }
    const char *version = path->n == 3 ? path->seg[2] : NULL;
    switch (cmd) {
    case EVHTTP_REQ_GET:
        c = rest_call_new(req, rid, 1);
        rest_call_wait(c,
                       mgmt_describe(name, version, param_bool(p, "customized", 0), rest_done, c));
        break;
    case EVHTTP_REQ_PUT: {
        struct mgmt_scale_args a;
        mgmt_scale_init(&a);
        a.model_name = name;
        a.model_version = version ? version : param_str(p, "model_version");
        a.min_worker = param_int(p, "min_worker", 1);
        a.max_worker = param_int(p, "max_worker", a.min_worker);
        a.synchronous = param_bool(p, "synchronous", 0);
        a.number_gpu = param_int(p, "number_gpu", 0);
        a.timeout = param_int(p, "timeout", 0);
        c = rest_call_new(req, rid, 0);
        rest_call_wait(c, mgmt_scale(&a, rest_done, c));
        break;
    }
    case EVHTTP_REQ_DELETE:
        if (!srv->cfg.enable_model_api) {
            model_api_off(req, rid);
            break;
        }
        c = rest_call_new(req, rid, 0);
        rest_call_wait(c, mgmt_unregister(name, version, rest_done, c));
        break;
    case EVHTTP_REQ_OPTIONS: {
        struct model *m;
        struct submit_error e;
        if (model_lookup(name, version, &m, &e))
            http_send_refusal(req, rid, &e);
        else
            http_api_description(req, rid, AUTH_MANAGEMENT);
        break;
    }
    default:
        not_allowed(req, rid);
    }
}

void http_management_handle(struct evhttp_request *req, const char *rid, struct http_path *path)
{
    enum evhttp_cmd_type cmd = evhttp_request_get_command(req);
    int is_token = path->n == 1 && !strcmp(path->seg[0], "token");
    struct params p;
    params_parse(req, &p);
    if (is_token && auth_enabled() && cmd == EVHTTP_REQ_GET)
        token(req, rid, &p);
    else if (path->n >= 1 && path->n <= 4 && !strcmp(path->seg[0], "models"))
        models(req, rid, path, &p, cmd);
    else if (path->n == 3 && !strcmp(path->seg[0], "v1") && !strcmp(path->seg[1], "models") &&
             cmd == EVHTTP_REQ_GET)
        kserve_ready(req, rid, path->seg[2]);
    else
        not_found(req, rid);
    evhttp_clear_headers(&p.kv);
}
