/*
 * config: config.properties mapped onto struct config.
 *
 * A table names every key we act on with its type and range; a second list names the TorchServe
 * keys we accept without acting on them, so that a TorchServe config.properties loads unchanged.
 * Anything else is probably a typo and is reported through warn_fn rather than failing the start.
 * A value that does not parse fails the load with "file:line: key: reason, got 'value'": a server
 * that silently fell back to a default port or size would be much harder to debug.
 */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <jansson.h>

#include "properties.h"
#include "rlog.h"
#include "util.h"

enum kind {
    K_ADDR,       /* struct listen_addr */
    K_INT,        /* int in [min, max] */
    K_LONG,       /* long in [min, max] */
    K_BOOL,       /* int 0/1 */
    K_STR,        /* char *, must not be empty */
    K_OPT_STR,    /* char *, empty = unset (NULL) */
    K_JSON,       /* char *, must parse as JSON; empty = unset */
    K_METRICS,    /* char *, log | prometheus | legacy */
    K_GRPC_HOST,  /* char *, a bare host name or address */
    K_POS_DOUBLE, /* double > 0 */
    K_SIZE,       /* long > 0 bytes: "10MB", "512KB", "4096" (rlog_parse_size) */
    K_STATE,      /* char *: lmdb (NULL) | redis://[:PASSWORD@]HOST:PORT[/DB] */
};

struct key {
    const char *name;
    enum kind kind;
    size_t off;
    long min, max;
};

#define F(field) offsetof(struct config, field)

static const struct key keys[] = {
    {"inference_address", K_ADDR, F(inference_address), 0, 0},
    {"management_address", K_ADDR, F(management_address), 0, 0},
    {"metrics_address", K_ADDR, F(metrics_address), 0, 0},
    {"grpc_inference_address", K_GRPC_HOST, F(grpc_inference_address), 0, 0},
    {"grpc_inference_port", K_INT, F(grpc_inference_port), 0, 65535},
    {"grpc_management_address", K_GRPC_HOST, F(grpc_management_address), 0, 0},
    {"grpc_management_port", K_INT, F(grpc_management_port), 0, 65535},
    {"enable_grpc", K_BOOL, F(enable_grpc), 0, 0},
    {"model_store", K_OPT_STR, F(model_store), 0, 0},
    {"load_models", K_OPT_STR, F(load_models), 0, 0},
    {"default_workers_per_model", K_INT, F(default_workers_per_model), 0, 4096},
    {"job_queue_size", K_INT, F(job_queue_size), 1, INT_MAX},
    /* the worker takes 1 KiB .. 2^31-1 (frame lengths are 32-bit); beyond that it would refuse
     * to start and leave every model at 503, so the config is refused here, with file:line */
    {"max_request_size", K_LONG, F(max_request_size), 1, 2147483647L},
    {"max_response_size", K_LONG, F(max_response_size), 1, 2147483647L},
    /* ours: per-stream backpressure (a client that stops reading pauses its request) */
    {"stream_buffer_size", K_LONG, F(stream_buffer_size), 1024, 1L << 30},
    {"stream_stall_timeout", K_INT, F(stream_stall_timeout), 1, 86400},
    /* ours: open HTTP connections on the three listeners together; 0 derives it from the fd
     * limit, keeping fds for workers, LMDB and gRPC */
    {"max_connections", K_INT, F(max_connections), 0, 1 << 24},
    /* TLS: https:// listeners and enable_grpc_ssl use these PEM files (tls.h) */
    {"private_key_file", K_OPT_STR, F(private_key_file), 0, 0},
    {"certificate_file", K_OPT_STR, F(certificate_file), 0, 0},
    {"enable_grpc_ssl", K_BOOL, F(enable_grpc_ssl), 0, 0},
    /* CORS as TorchServe: the origin enables it, methods and headers answer preflights */
    {"cors_allowed_origin", K_OPT_STR, F(cors_allowed_origin), 0, 0},
    {"cors_allowed_methods", K_OPT_STR, F(cors_allowed_methods), 0, 0},
    {"cors_allowed_headers", K_OPT_STR, F(cors_allowed_headers), 0, 0},
    {"grpc_inference_max_connection_age_ms", K_INT, F(grpc_max_connection_age_ms[0]), 0, INT_MAX},
    {"grpc_management_max_connection_age_ms", K_INT, F(grpc_max_connection_age_ms[1]), 0, INT_MAX},
    {"grpc_inference_max_connection_age_grace_ms", K_INT, F(grpc_max_connection_age_grace_ms[0]), 0,
     INT_MAX},
    {"grpc_management_max_connection_age_grace_ms", K_INT, F(grpc_max_connection_age_grace_ms[1]),
     0, INT_MAX},
    /* ours: a total for the archives extracted into the scratch directory (each one is also
     * capped on its own, archive.h), so that many registrations cannot fill the disk */
    {"max_extracted_bytes", K_LONG, F(max_extracted_bytes), 1, LONG_MAX},
    {"default_response_timeout", K_INT, F(default_response_timeout), 0, INT_MAX},
    {"default_startup_timeout", K_INT, F(default_startup_timeout), 0, INT_MAX},
    {"unregister_model_timeout", K_INT, F(unregister_model_timeout), 0, INT_MAX},
    {"enable_model_api", K_BOOL, F(enable_model_api), 0, 0},
    {"disable_token_authorization", K_BOOL, F(disable_token_authorization), 0, 0},
    {"token_expiration_min", K_POS_DOUBLE, F(token_expiration_min), 0, 0},
    {"allowed_urls", K_STR, F(allowed_urls), 0, 0},
    /* TorchServe's: TS_* environment variables override the file (and the command line) */
    {"enable_envvars_config", K_BOOL, F(enable_envvars_config), 0, 0},
    /* TorchServe's: a model's requirements.txt into a virtual environment of its own */
    {"install_py_dep_per_model", K_BOOL, F(install_py_dep_per_model), 0, 0},
    {"use_env_allowed_urls", K_BOOL, F(use_env_allowed_urls), 0, 0},
    {"enable_metrics_api", K_BOOL, F(enable_metrics_api), 0, 0},
    {"metrics_mode", K_METRICS, F(metrics_mode), 0, 0},
    /* TorchServe's metrics.yaml (metrics_config.h), and whether model metrics it does not
     * declare are registered when first reported */
    {"metrics_config", K_OPT_STR, F(metrics_config), 0, 0},
    {"model_metrics_auto_detect", K_BOOL, F(model_metrics_auto_detect), 0, 0},
    /* TorchServe's system-metrics period; also how often metrics_mode=log writes them */
    {"metric_time_interval", K_INT, F(metric_time_interval), 1, 86400},
    {"disable_system_metrics", K_BOOL, F(disable_system_metrics), 0, 0},
    /* GPUs workers are given (gpu_assign.h); capped at the visible ones at start-up */
    {"number_of_gpu", K_INT, F(number_of_gpu), 0, 4096},
    /* the interpreter of Python workers: the plugin's Python or a venv of it (pyinfo.h) */
    {"python", K_OPT_STR, F(python), 0, 0},
    {"initial_worker_port", K_INT, F(initial_worker_port), 1, 65535},
    {"worker_threads", K_INT, F(worker_threads), 1, 1024},
    {"ts_header_key_sequence_id", K_STR, F(ts_header_key_sequence_id), 0, 0},
    {"ts_header_key_sequence_start", K_STR, F(ts_header_key_sequence_start), 0, 0},
    {"ts_header_key_sequence_end", K_STR, F(ts_header_key_sequence_end), 0, 0},
    {"models", K_JSON, F(models_json), 0, 0},
    {"model_snapshot", K_JSON, F(snapshot_json), 0, 0},
    {"state_dir", K_STR, F(state_dir), 0, 0},
    /* ours: where workers keep sequence state; redis:// shares it between instances */
    {"state_store", K_STATE, F(state_store), 0, 0},
    {"log_location", K_STR, F(log_location), 0, 0},
    /* ours: access_log.log, model_log.log and ts_log.log rotate at log_max_size, keeping
     * log_max_files rotated files each (log4j2.xml's job in TorchServe) */
    {"log_max_size", K_SIZE, F(log_max_size), 0, 0},
    {"log_max_files", K_INT, F(log_max_files), 1, 1000},
    {"enable_access_log", K_BOOL, F(enable_access_log), 0, 0},
    /* ours: Linux's SCHED_BATCH for the frontend and its workers (server.c) */
    {"sched_batch", K_BOOL, F(sched_batch), 0, 0},
    /* ours: how long the frontend's loop and each worker look for their next event before they
     * sleep (common/busy_poll.h); 0, the default, never */
    {"busy_poll_us", K_INT, F(busy_poll_us), 0, 10000},
    {"oip_stream_response", K_STR, F(oip_stream_response), 0, 0},
    /* ours: the workers' debug counters (x-ts-worker-batch, -forward-us, ...) as response
     * headers, for tests and benchmarks; off, no client sees them (handler_reply.h) */
    {"worker_debug_headers", K_BOOL, F(worker_debug_headers), 0, 0},
    /* ours: what unfinished (so unauthenticated) request heads may hold together on the HTTP
     * listeners; past it the largest are closed (http/http_heads.h) */
    {"max_pending_heads_size", K_SIZE, F(max_pending_heads_size), 0, 0},
};

/* TorchServe keys we do not act on. A key whose effect a user relies on (security, where data
 * goes, the request format) is refused unless its value asks for nothing ("refuse"); one that
 * only tunes TorchServe's JVM, Python or GPU machinery is loaded with a warning that names it.
 * Either way nothing is silently ignored. */
enum unsupported { WARN, REFUSE };

static const struct {
    const char *name;
    enum unsupported what;
    const char *off; /* a value that asks for nothing (accepted quietly), or NULL */
    const char *why;
} unsupported[] = {
    {"number_of_netty_threads", WARN, NULL, "there is no Netty: one libevent loop serves HTTP"},
    {"netty_client_threads", WARN, NULL, "there is no Netty: workers speak over Unix sockets"},
    {"async_logging", WARN, NULL, "the access and model logs are always written by a thread"},
    {"prefer_direct_buffer", WARN, NULL, "a JVM setting"},
    {"use_native_io", WARN, NULL, "a JVM setting"},
    {"io_ratio", WARN, NULL, "a JVM setting"},
    {"vmargs", WARN, NULL, "a JVM setting"},
    {"plugins_path", REFUSE, "", "Java plugins cannot be loaded"},
    {"default_service_handler", WARN, NULL, "handlers are named per model"},
    {"service_envelope", REFUSE, "", "requests use TorchServe's default format only"},
    {"decode_input_request", WARN, NULL, "Python handlers always get JSON parsed, text decoded"},
    {"limit_max_image_pixels", WARN, NULL, "the image handlers keep PIL's own pixel limit"},
    {"cpu_launcher_enable", WARN, NULL, "workers use worker_threads intra-op threads each"},
    {"cpu_launcher_args", WARN, NULL, "workers use worker_threads intra-op threads each"},
    {"ipex_enable", WARN, NULL, "Intel Extension for PyTorch is not used"},
    {"ipex_gpu_enable", WARN, NULL, "Intel Extension for PyTorch is not used"},
    {"blacklist_env_vars", WARN, NULL, "Python workers run isolated: PYTHON* is not read"},
    {"workflow_store", WARN, NULL, "workflows are not supported"},
    {"system_metrics_cmd", WARN, NULL,
     "system metrics are collected by the server itself (disable_system_metrics=true turns "
     "them off)"},
    {"keystore", REFUSE, "",
     "Java keystores are not read: use certificate_file and "
     "private_key_file (PEM)"},
    {"keystore_pass", REFUSE, "", "Java keystores are not read"},
    {"keystore_type", REFUSE, "", "Java keystores are not read"},
    {"ts_open_inference_protocol", WARN, NULL, "OIP is always served on /v2 and gRPC"},
    {"debug", WARN, NULL, "use --foreground and the log levels instead"},
    {"initial_distribution_port", WARN, NULL, "distributed inference is not supported"},
};

static void set_str(char **dst, const char *v)
{
    free(*dst);
    *dst = v ? xstrdup(v) : NULL;
}

static void set_addr(struct listen_addr *a, const char *scheme, const char *host, int port)
{
    set_str(&a->scheme, scheme);
    set_str(&a->host, host);
    a->port = port;
}

void config_defaults(struct config *c)
{
    memset(c, 0, sizeof *c);
    set_addr(&c->inference_address, "http", "127.0.0.1", 8080);
    set_addr(&c->management_address, "http", "127.0.0.1", 8081);
    set_addr(&c->metrics_address, "http", "127.0.0.1", 8082);
    c->grpc_inference_address = xstrdup("127.0.0.1");
    c->grpc_inference_port = 7070;
    c->grpc_management_address = xstrdup("127.0.0.1");
    c->grpc_management_port = 7071;
    c->enable_grpc = 1;
    c->default_workers_per_model = 0;
    c->job_queue_size = 100;
    c->max_request_size = 6553500;
    c->max_response_size = 6553500;
    c->stream_buffer_size = 4L << 20;
    c->stream_stall_timeout = 60;
    c->max_extracted_bytes = 16L << 30;
    c->default_response_timeout = 120;
    c->default_startup_timeout = 120;
    c->unregister_model_timeout = 120;
    c->enable_model_api = 0;
    c->disable_token_authorization = 0;
    c->token_expiration_min = 60;
    c->allowed_urls = xstrdup("file://.*|http(s)?://.*");
    c->enable_metrics_api = 1;
    c->metrics_mode = xstrdup("prometheus");
    c->metric_time_interval = -1;      /* unset: 60 s in log mode */
    c->model_metrics_auto_detect = -1; /* unset: see config.h */
    c->initial_worker_port = 9000;
    c->worker_threads = 1;
    c->ts_header_key_sequence_id = xstrdup("ts_request_sequence_id");
    c->ts_header_key_sequence_start = xstrdup("ts_request_sequence_start");
    c->ts_header_key_sequence_end = xstrdup("ts_request_sequence_end");
    c->state_dir = NULL; /* default: <run dir>/state, see server.c */
    c->log_location = xstrdup("logs/");
    c->log_max_size = 100L << 20;
    c->max_pending_heads_size = 64L << 20;
    c->log_max_files = 5;
    c->enable_access_log = 1;
    c->sched_batch = 1;
    c->busy_poll_us = 0;
    c->oip_stream_response = xstrdup("triton");
    c->number_of_gpu = -1;
    c->python = NULL;
    c->disable_system_metrics = 0;
}

/* The reason an address does not parse, or NULL when it does (out then filled). */
static const char *parse_address(const char *s, struct listen_addr *out)
{
    static const char *const want = "expected http(s)://host[:port]";
    const char *scheme;
    const char *p;
    int port;
    if (!strncasecmp(s, "http://", 7)) {
        scheme = "http";
        p = s + 7;
        port = 80;
    } else if (!strncasecmp(s, "https://", 8)) {
        scheme = "https";
        p = s + 8;
        port = 443;
    } else {
        return want;
    }
    const char *host = p, *host_end;
    if (*p == '[') { /* IPv6 literal, kept without brackets */
        const char *close = strchr(p, ']');
        if (!close || close == p + 1)
            return want;
        host = p + 1;
        host_end = close;
        p = close + 1;
    } else {
        while (*p && *p != ':' && *p != '/')
            p++;
        host_end = p;
        if (host_end == host)
            return "missing host";
    }
    for (const char *h = host; h < host_end; h++)
        if (*h == ' ' || *h == '\t' || *h == '@')
            return want;
    if (*p == ':') {
        /* digits, then nothing or one '/' as in "http://0.0.0.0:8080/" */
        const char *d = ++p;
        long v = 0;
        while (*p >= '0' && *p <= '9' && p - d < 6)
            v = v * 10 + (*p++ - '0');
        if (p == d || (*p && strcmp(p, "/")) || v > 65535)
            return "port must be an integer between 0 and 65535";
        port = (int)v;
    } else if (*p && strcmp(p, "/")) {
        return want;
    }
    out->scheme = xstrdup(scheme);
    out->host = xstrndup(host, (size_t)(host_end - host));
    out->port = port;
    return NULL;
}

int config_parse_address(const char *s, struct listen_addr *out)
{
    return parse_address(s, out) ? -EINVAL : 0;
}

/* Applies one known key. NULL, or the reason the value is refused. */
static const char *apply(struct config *c, const struct key *k, const char *v, char *why,
                         size_t whylen)
{
    void *field = (char *)c + k->off;
    long n;
    int rc;
    switch (k->kind) {
    case K_ADDR: {
        struct listen_addr a;
        const char *r = parse_address(v, &a);
        if (r)
            return r;
        struct listen_addr *dst = field;
        free(dst->scheme);
        free(dst->host);
        *dst = a;
        return NULL;
    }
    case K_POS_DOUBLE: {
        char *end;
        errno = 0;
        double d = strtod(v, &end);
        if (end == v || *end || errno || !(d > 0) || d > 1e9)
            return "expected a positive number";
        *(double *)field = d;
        return NULL;
    }
    case K_INT:
    case K_LONG:
        rc = ts_parse_long(v, LONG_MIN, LONG_MAX, &n);
        if (rc == -ERANGE)
            return "integer out of range";
        if (rc)
            return "expected an integer";
        if (n < k->min || n > k->max) {
            if (k->min == 0 && n < 0)
                return "must not be negative";
            if (k->min == 1 && n < 1 && k->max >= INT_MAX)
                return "must be a positive integer";
            snprintf(why, whylen, "must be between %ld and %ld", k->min, k->max);
            return why;
        }
        if (k->kind == K_INT)
            *(int *)field = (int)n;
        else
            *(long *)field = n;
        return NULL;
    case K_BOOL: {
        int b;
        if (ts_parse_bool(v, &b))
            return "expected true or false";
        *(int *)field = b;
        return NULL;
    }
    case K_STR:
        if (!*v)
            return "must not be empty";
        set_str(field, v);
        return NULL;
    case K_OPT_STR:
        set_str(field, *v ? v : NULL);
        return NULL;
    case K_GRPC_HOST:
        if (!*v)
            return "must not be empty";
        if (strpbrk(v, "/ \t"))
            return "expected a host name or address";
        set_str(field, v);
        return NULL;
    case K_METRICS:
        if (!strcmp(v, "legacy"))
            return "not supported by torchserve-c: metrics are served in Prometheus format on "
                   "the metrics API (metrics_mode=prometheus) or written to ts_metrics.log "
                   "(metrics_mode=log)";
        if (strcmp(v, "prometheus") && strcmp(v, "log"))
            return "expected prometheus or log (legacy is TorchServe's, not supported)";
        set_str(field, v);
        return NULL;
    case K_SIZE:
        if (rlog_parse_size(v, (long *)field))
            return "expected a size in bytes, e.g. 10MB, 512KB or 4096";
        return NULL;
    case K_STATE: {
        if (!strcmp(v, "lmdb")) {
            set_str(field, NULL);
            return NULL;
        }
        /* the worker connects; here only the form, so that a typo stops the start */
        const char *hp = !strncmp(v, "redis://", 8) ? v + 8 : NULL;
        if (hp && strchr(hp, '@'))
            hp = strchr(hp, '@') + 1;
        const char *colon = hp ? strchr(hp, ':') : NULL;
        long port;
        char *p = colon ? xstrndup(colon + 1, strcspn(colon + 1, "/")) : NULL;
        int bad =
            !colon || colon == hp || ts_parse_long(p, 1, 65535, &port) || strpbrk(v + 8, " \t");
        free(p);
        if (bad)
            return "expected lmdb (each instance's own store, the default) or "
                   "redis://[:PASSWORD@]HOST:PORT[/DB] (shared by the instances)";
        set_str(field, v);
        return NULL;
    }
    case K_JSON: {
        if (!*v) {
            set_str(field, NULL);
            return NULL;
        }
        json_error_t je;
        json_t *j = json_loads(v, 0, &je);
        if (!j) {
            snprintf(why, whylen, "invalid JSON at column %d: %s", je.column, je.text);
            return why;
        }
        int is_obj = json_is_object(j);
        json_decref(j);
        if (!is_obj)
            return "expected a JSON object";
        set_str(field, v);
        return NULL;
    }
    }
    return "unsupported key type";
}

/* The closest key of ours to a mistyped one (one of the edit distance's best), or NULL. */
static const char *closest_key(const char *s)
{
    const char *names[sizeof keys / sizeof keys[0]];
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        names[i] = keys[i].name;
    return ts_closest(s, names, sizeof keys / sizeof keys[0]);
}

/* A key that is not ours: refused, warned about by name, or unknown (a warning with the
 * closest key). 0, or TS_E_BAD_CONFIG with err. */
static int not_ours(const char *path, const struct prop *p, config_warn_fn *warn, void *warn_arg,
                    char *err, size_t errlen)
{
    char where[512];
    if (p->line > 0)
        snprintf(where, sizeof where, "%s:%d", path, p->line);
    else
        snprintf(where, sizeof where, "%s", path);
    for (size_t j = 0; j < sizeof unsupported / sizeof unsupported[0]; j++) {
        if (strcmp(unsupported[j].name, p->key))
            continue;
        const char *off = unsupported[j].off;
        int asks_nothing = off && !strcasecmp(p->value, off);
        if (unsupported[j].what == REFUSE && !asks_nothing) {
            snprintf(err, errlen, "%s: %s is not supported by torchserve-c: %s", where, p->key,
                     unsupported[j].why);
            return TS_E_BAD_CONFIG;
        }
        if (!asks_nothing && warn) {
            char *msg = xasprintf("%s: %s has no effect in torchserve-c: %s", where, p->key,
                                  unsupported[j].why);
            warn(msg, warn_arg);
            free(msg);
        }
        return 0;
    }
    if (warn) {
        const char *near = closest_key(p->key);
        char *msg = near ? xasprintf("%s: unknown key '%s' (ignored; did you mean '%s'?)", where,
                                     p->key, near)
                         : xasprintf("%s: unknown key '%s' (ignored)", where, p->key);
        warn(msg, warn_arg);
        free(msg);
    }
    return 0;
}

/* One key = value, from the file (line > 0) or the environment (env names the variable). */
static int apply_prop(const char *path, const struct prop *p, const char *env, struct config *c,
                      config_warn_fn *warn, void *warn_arg, char *err, size_t errlen)
{
    const struct key *k = NULL;
    for (size_t j = 0; j < sizeof keys / sizeof keys[0]; j++)
        if (!strcmp(keys[j].name, p->key)) {
            k = &keys[j];
            break;
        }
    if (!k) {
        if (!env)
            return not_ours(path, p, warn, warn_arg, err, errlen);
        char *where = xasprintf("environment %s", env);
        int rc = not_ours(where, p, warn, warn_arg, err, errlen); /* p->line is 0 */
        free(where);
        return rc;
    }
    char why[256];
    const char *reason = apply(c, k, p->value, why, sizeof why);
    if (!reason && k->off == F(models_json))
        c->models_line = p->line;
    if (!reason && k->off == F(snapshot_json))
        c->snapshot_line = p->line;
    if (reason) {
        if (env)
            snprintf(err, errlen, "environment %s: %s: %s, got '%s'", env, p->key, reason,
                     p->value);
        else
            snprintf(err, errlen, "%s:%d: %s: %s, got '%s'", path, p->line, p->key, reason,
                     p->value);
        return TS_E_BAD_CONFIG;
    }
    return 0;
}

/* TorchServe's variable for a key: TS_ and the key in upper case, except these few, whose
 * names TorchServe's ConfigManager spells otherwise. */
static const struct {
    const char *key, *env;
} env_names[] = {
    {"token_expiration_min", "TS_TOKEN_EXPIRATION_TIME_MIN"},
    {"ts_header_key_sequence_id", "TS_HEADER_KEY_SEQUENCE_ID"},
    {"ts_header_key_sequence_start", "TS_HEADER_KEY_SEQUENCE_START"},
    {"ts_header_key_sequence_end", "TS_HEADER_KEY_SEQUENCE_END"},
    {"ts_open_inference_protocol", "TS_OPEN_INFERENCE_PROTOCOL"},
};

static void env_name(const char *key, char *out, size_t n)
{
    for (size_t i = 0; i < sizeof env_names / sizeof env_names[0]; i++)
        if (!strcmp(env_names[i].key, key)) {
            snprintf(out, n, "%s", env_names[i].env);
            return;
        }
    size_t k = (size_t)snprintf(out, n, "TS_");
    for (; *key && k + 1 < n; key++)
        out[k++] = (char)(*key >= 'a' && *key <= 'z' ? *key - 'a' + 'A' : *key);
    out[k] = '\0';
}

/* Keys that are never read from the environment: the switch itself, as TorchServe; the model
 * lists that hold JSON (TorchServe has no variable for them); allowed_urls unless
 * use_env_allowed_urls=true (a variable must not widen what may be downloaded). */
static int env_allowed(const struct config *c, const char *key)
{
    if (!strcmp(key, "enable_envvars_config") || !strcmp(key, "use_env_allowed_urls") ||
        !strcmp(key, "models") || !strcmp(key, "model_snapshot"))
        return 0;
    return strcmp(key, "allowed_urls") || c->use_env_allowed_urls;
}

static void note_env_key(struct config *c, const char *key)
{
    c->env_keys = xrealloc(c->env_keys, (c->n_env_keys + 1) * sizeof(*c->env_keys));
    c->env_keys[c->n_env_keys++] = xstrdup(key);
}

/* enable_envvars_config=true: every key TS_<KEY> names in the environment overrides the file. */
static int apply_env(const char *path, struct config *c, config_warn_fn *warn, void *warn_arg,
                     char *err, size_t errlen)
{
    size_t nk = sizeof keys / sizeof keys[0], nu = sizeof unsupported / sizeof unsupported[0];
    for (size_t i = 0; i < nk + nu; i++) {
        const char *key = i < nk ? keys[i].name : unsupported[i - nk].name;
        if (!env_allowed(c, key))
            continue;
        char var[96];
        env_name(key, var, sizeof var);
        const char *v = getenv(var);
        if (!v)
            continue;
        struct prop p = {(char *)key, (char *)v, 0};
        int rc = apply_prop(path, &p, var, c, warn, warn_arg, err, errlen);
        if (rc)
            return rc;
        note_env_key(c, key);
    }
    return 0;
}

int config_from_env(const struct config *c, const char *key)
{
    for (size_t i = 0; i < c->n_env_keys; i++)
        if (!strcmp(c->env_keys[i], key))
            return 1;
    return 0;
}

int config_load(const char *path, struct config *c, config_warn_fn *warn, void *warn_arg, char *err,
                size_t errlen)
{
    set_str(&c->path, path);
    struct props ps;
    int rc = props_parse_file(path, &ps, err, errlen);
    if (rc) {
        if (rc > TS_E_BASE && rc != TS_E_TOO_LARGE) /* -errno: keep it; parse errors are config */
            return rc;
        return TS_E_BAD_CONFIG;
    }
    for (size_t i = 0; i < ps.n && !rc; i++)
        rc = apply_prop(path, &ps.p[i], NULL, c, warn, warn_arg, err, errlen);
    props_free(&ps);
    if (!rc && c->enable_envvars_config)
        rc = apply_env(path, c, warn, warn_arg, err, errlen);
    else if (!rc && c->use_env_allowed_urls && warn) {
        char *msg = xasprintf("%s: use_env_allowed_urls has no effect without "
                              "enable_envvars_config=true (TS_ALLOWED_URLS is not read)",
                              path);
        warn(msg, warn_arg);
        free(msg);
    }
    return rc;
}

void config_free(struct config *c)
{
    free(c->path);
    struct listen_addr *addrs[] = {&c->inference_address, &c->management_address,
                                   &c->metrics_address};
    for (size_t i = 0; i < 3; i++) {
        free(addrs[i]->scheme);
        free(addrs[i]->host);
    }
    free(c->grpc_inference_address);
    free(c->grpc_management_address);
    free(c->private_key_file);
    free(c->cors_allowed_origin);
    free(c->cors_allowed_methods);
    free(c->cors_allowed_headers);
    free(c->certificate_file);
    free(c->model_store);
    free(c->load_models);
    free(c->allowed_urls);
    free(c->metrics_mode);
    free(c->metrics_config);
    free(c->ts_header_key_sequence_id);
    free(c->ts_header_key_sequence_start);
    free(c->ts_header_key_sequence_end);
    free(c->models_json);
    free(c->snapshot_json);
    free(c->state_dir);
    free(c->log_location);
    free(c->oip_stream_response);
    for (size_t i = 0; i < c->n_env_keys; i++)
        free(c->env_keys[i]);
    free(c->env_keys);
    free(c->python);
    free(c->state_store);
    memset(c, 0, sizeof *c);
}
