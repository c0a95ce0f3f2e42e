/*
 * server: start-up and shutdown of the frontend process (the foreground server).
 *
 * Order: config -> pidfile -> event base + signals -> listeners -> startup models (their
 * workers load while the loop runs; requests queue meanwhile) -> once each start-up model has
 * loaded or failed (startup.c), the failures logged -> "Model server started." -> loop. A model
 * named in --models that failed stops the server with exit status 1 instead, unless
 * --continue-on-model-error. SIGINT/SIGTERM break the loop; shutdown closes listeners, stops
 * every worker and waits for it, removes the scratch directory and the pidfile.
 */
#include "server.h"

#include <dirent.h>
#include <errno.h>
#include <event2/event.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "instance.h"
#include "core/core.h"
#include "core/ev_mem.h"
#include "core/loop_wait.h"
#include "core/model.h"
#include "core/nvml.h"
#include "core/pyinfo.h"
#include "core/sys_metrics.h"
#include "core/worker_exec.h"
#include "core/worker_pool.h"
#include "grpc/grpc_server.h"
#include "core/conn_budget.h"
#include "http/http_metrics.h"
#include "http/http_server.h"
#include "http/http_tls.h"
#include "log.h"
#include "mgmt/auth.h"
#include "rlog.h"
#include "mgmt/management.h"
#include "mgmt/model_register.h"
#include "mgmt/snapshot.h"
#include "startup.h"

static struct event *ev_sigint, *ev_sigterm;

static void on_stop_signal(evutil_socket_t sig, short what, void *arg)
{
    (void)what;
    (void)arg;
    LOG_INFO("received signal %d, shutting down", (int)sig);
    srv->stopping = 1;
    event_base_loopbreak(srv->base);
}

static int startup_fatal;

/* Every start-up model has loaded or failed (the failures are logged): the server is started,
 * or it stops because a model named on the command line failed. */
static void on_startup_done(void *arg, int fatal)
{
    const struct server_opts *o = arg;
    if (fatal && !o->continue_on_model_error) {
        LOG_ERROR("%d start-up model(s) failed to load, among them one named in --models; "
                  "stopping (--continue-on-model-error serves the others)",
                  startup_n_failed());
        startup_fatal = 1;
        event_base_loopbreak(srv->base);
        return;
    }
    printf("Model server started.\n");
    fflush(stdout);
    LOG_INFO("Model server started (model store %s, %d start-up model(s) failed)", srv->model_store,
             startup_n_failed());
    if (o->ready_fd >= 0) {
        if (write(o->ready_fd, "1", 1) != 1)
            LOG_WARN("could not notify the launcher");
        close(o->ready_fd);
    }
}

static void config_warn(const char *msg, void *arg)
{
    (void)arg;
    LOG_WARN("%s", msg);
}

static char *self_dir(void)
{
    char buf[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
    if (n <= 0)
        return xstrdup(".");
    buf[n] = '\0';
    char *slash = strrchr(buf, '/');
    if (slash)
        *slash = '\0';
    return xstrdup(buf);
}

static int is_archive_name(const char *n)
{
    size_t l = strlen(n);
    return (l > 4 && !strcmp(n + l - 4, ".mar")) || (l > 7 && !strcmp(n + l - 7, ".tar.gz")) ||
           (l > 4 && !strcmp(n + l - 4, ".tgz")) || (l > 6 && !strcmp(n + l - 6, ".model"));
}

/* TorchServe's getDefaultWorkers for a start-up model: default_workers_per_model, else one per
 * GPU, else one per CPU. */
static int startup_workers(const struct model *m)
{
    if (m->mc.min_workers > 0 && m->mc.max_workers >= m->mc.min_workers)
        return m->mc.min_workers;
    if (srv->cfg.default_workers_per_model > 0)
        return srv->cfg.default_workers_per_model;
    if (srv->n_gpu > 0)
        return srv->n_gpu;
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

/* spec: NAME=FILE, FILE or NAME; named: it was named on the command line (not through all) */
static void load_one(const char *spec, int named)
{
    struct model_reg r;
    model_reg_init(&r);
    r.loaded_at_startup = 1;
    char *copy = xstrdup(spec);
    char *eq = strchr(copy, '=');
    if (eq && !strstr(copy, "://")) {
        *eq = '\0';
        r.name = copy;
        r.url = eq + 1;
    } else {
        r.url = copy;
    }
    struct model *m;
    char err[1024];
    if (model_register(&r, &m, err, sizeof(err)) != 0) {
        startup_failed(spec, err, named);
    } else {
        m->min_workers = m->max_workers = startup_workers(m);
        worker_pool_scale(&m->pool, m->min_workers);
        startup_registered(m->name, m->version, spec, named);
    }
    free(copy);
}

static void load_all(void)
{
    DIR *d = opendir(srv->model_store);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char *p = xasprintf("%s/%s", srv->model_store, e->d_name);
        char *mf = xasprintf("%s/MAR-INF/MANIFEST.json", p);
        struct stat st;
        if (is_archive_name(e->d_name) || (stat(mf, &st) == 0))
            load_one(e->d_name, 0);
        free(mf);
        free(p);
    }
    closedir(d);
}

static void load_startup_models(const struct server_opts *o)
{
    if (srv->cfg.snapshot_json)
        snapshot_apply(srv->cfg.snapshot_json, 0);
    if (srv->cfg.models_json)
        snapshot_apply(srv->cfg.models_json, 1);
    /* as TorchServe: TS_LOAD_MODELS (enable_envvars_config) wins over --models */
    if (o->n_models > 0 && !config_from_env(&srv->cfg, "load_models")) {
        for (int i = 0; i < o->n_models; i++) {
            if (!strcasecmp(o->models[i], "all"))
                load_all();
            else
                load_one(o->models[i], 1);
        }
        return;
    }
    if (!srv->cfg.load_models)
        return;
    char *list = xstrdup(srv->cfg.load_models), *save = NULL;
    for (char *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        while (*t == ' ')
            t++;
        if (!strcasecmp(t, "all"))
            load_all();
        else if (*t)
            load_one(t, 0);
    }
    free(list);
}

/* As TorchServe: TS_CONFIG_FILE, --ts-config, else the newest snapshot in logs/config (unless
 * --ncs), else ./config.properties. Malloc'd or NULL. */
static char *config_path(const struct server_opts *o)
{
    const char *env = getenv("TS_CONFIG_FILE");
    if (env && *env)
        return xstrdup(env);
    if (o->ts_config)
        return xstrdup(o->ts_config);
    char *snap = o->ncs ? NULL : snapshot_newest(snapshot_dir());
    if (snap)
        return snap;
    if (access("config.properties", R_OK) == 0)
        return xstrdup("config.properties");
    return NULL;
}

/* model_snapshot= and models= are checked whole before anything starts: a corrupt one refuses
 * the start with file:line and is never partly applied. */
static int check_snapshots(const struct config *c)
{
    char why[512];
    if (c->snapshot_json && snapshot_check(c->snapshot_json, 0, why, sizeof(why))) {
        fprintf(stderr, "torchserve-c: %s:%d: model_snapshot: %s\n", c->path, c->snapshot_line,
                why);
        return -1;
    }
    if (c->models_json && snapshot_check(c->models_json, 1, why, sizeof(why))) {
        fprintf(stderr, "torchserve-c: %s:%d: models: %s\n", c->path, c->models_line, why);
        return -1;
    }
    return 0;
}

static void metrics_config_warn(const char *msg, void *arg)
{
    (void)arg;
    LOG_WARN("metrics_config: %s", msg);
}

/* Whether this server collects a frontend metric a metrics.yaml names (ts_metrics): NULL, or
 * why not. The system metrics are sampled unless disable_system_metrics=true (sys_metrics.h),
 * the GPU ones on a server with GPUs. */
static const char *not_collected(const char *name)
{
    static const char *const sys[] = {"CPUUtilization",    "MemoryUsed", "MemoryAvailable",
                                      "MemoryUtilization", "DiskUsage",  "DiskAvailable",
                                      "DiskUtilization"};
    static const char *const gpu[] = {"GPUMemoryUtilization", "GPUMemoryUsed", "GPUUtilization"};
    if (metrics_frontend_family(name))
        return NULL;
    for (size_t i = 0; i < sizeof(sys) / sizeof(sys[0]); i++)
        if (!strcmp(sys[i], name))
            return srv->cfg.disable_system_metrics ? "disable_system_metrics=true" : NULL;
    for (size_t i = 0; i < sizeof(gpu) / sizeof(gpu[0]); i++)
        if (!strcmp(gpu[i], name))
            return srv->cfg.disable_system_metrics ? "disable_system_metrics=true"
                   : srv->n_gpu == 0               ? "this server has no GPU"
                                                   : NULL;
    return "torchserve-c does not measure it";
}

/* The model metrics' table, and metrics.yaml when metrics_config names one (TorchServe's
 * default: auto-detection off then; without it every model metric is served). -1 after saying
 * why. */
static int metrics_setup(void)
{
    const struct config *c = &srv->cfg;
    strcpy(srv->host, "localhost");
    gethostname(srv->host, sizeof(srv->host) - 1);
    int autod =
        c->model_metrics_auto_detect >= 0 ? c->model_metrics_auto_detect : !c->metrics_config;
    model_metrics_init(&srv->model_metrics, autod);
    if (!c->metrics_config)
        return 0;
    char err[1024];
    if (metrics_config_load(c->metrics_config, &srv->model_metrics, &srv->metrics_decl,
                            metrics_config_warn, NULL, err, sizeof(err)) != 0) {
        fprintf(stderr, "torchserve-c: metrics_config: %s\n", err);
        return -1;
    }
    for (size_t i = 0; i < srv->metrics_decl.n_ts; i++) {
        const char *why = not_collected(srv->metrics_decl.ts_names[i]);
        if (why)
            LOG_WARN("metrics_config: %s (ts_metrics) is not collected: %s",
                     srv->metrics_decl.ts_names[i], why);
    }
    char *json = metrics_config_worker_json(&srv->model_metrics);
    srv->worker_metrics_env = xasprintf(WORKER_ENV_METRICS "=%s", json);
    free(json);
    LOG_INFO("metrics_config %s: %zu model metrics declared, %zu frontend metrics served; "
             "model_metrics_auto_detect %s",
             c->metrics_config, srv->model_metrics.n, srv->metrics_decl.n_ts,
             autod ? "true" : "false");
    return 0;
}

/* access_log.log and model_log.log under log_location, and ts_log.log's rotation when our
 * stderr is that file (the background start points it there; --foreground keeps the
 * terminal). -1 after saying why. */
static int open_logs(void)
{
    const struct config *c = &srv->cfg;
    const char *dir = c->log_location;
    const char *sep = dir[strlen(dir) - 1] == '/' ? "" : "/";
    char why[512];
    char *p = xasprintf("%s%smodel_log.log", dir, sep);
    srv->model_log = rlog_open(p, c->log_max_size, c->log_max_files, why, sizeof(why));
    free(p);
    if (c->enable_access_log && srv->model_log) {
        p = xasprintf("%s%saccess_log.log", dir, sep);
        srv->access_log = rlog_open(p, c->log_max_size, c->log_max_files, why, sizeof(why));
        free(p);
    }
    if (!srv->model_log || (c->enable_access_log && !srv->access_log)) {
        LOG_ERROR("log_location: %s", why);
        fprintf(stderr, "torchserve-c: log_location: %s\n", why);
        return -1;
    }
    if (!strcmp(c->metrics_mode, "log")) {
        /* TorchServe's model_metrics.log: one line per model metric a worker reports */
        p = xasprintf("%s%smodel_metrics.log", dir, sep);
        srv->model_metrics_log = rlog_open(p, c->log_max_size, c->log_max_files, why, sizeof(why));
        free(p);
        if (!srv->model_metrics_log) {
            LOG_ERROR("log_location: %s", why);
            fprintf(stderr, "torchserve-c: log_location: %s\n", why);
            return -1;
        }
    }
    p = xasprintf("%s%sts_log.log", dir, sep);
    struct stat a, b;
    if (fstat(2, &a) == 0 && stat(p, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino)
        srv->ts_log = rlog_adopt_stdio(p, c->log_max_size, c->log_max_files, why, sizeof(why));
    free(p);
    LOG_INFO("logs in %s: rotated at %ld bytes, %d files kept; access log %s", dir, c->log_max_size,
             c->log_max_files, c->enable_access_log ? "on" : "off");
    return 0;
}

static void close_logs(void)
{
    rlog_close(srv->access_log);
    rlog_close(srv->model_log);
    rlog_close(srv->ts_log);
    rlog_close(srv->model_metrics_log);
    srv->access_log = srv->model_log = srv->ts_log = srv->model_metrics_log = NULL;
}

/* SCHED_BATCH (sched(7)) for this thread, before any other exists: gRPC's, the logs' and the
 * registrations' threads inherit it, and so do the workers (posix_spawn keeps the policy).
 * A task woken under it does not preempt the one running: a worker woken by a job lets the
 * frontend finish its loop turn, which dispatches the other jobs that arrived with it, and the
 * frontend woken by an answer lets the worker start its next batch. Under SCHED_OTHER each
 * hand-off could switch tasks at once; on 2 cores gRPC calls at batchSize 1 went up 12-47% and HTTP
 * requests at batchSize 8 7% (docs/performance.md). Nice values and CPU shares are unchanged. */
static void sched_policy(int batch)
{
    int now = sched_getscheduler(0);
    if (!batch || now == SCHED_BATCH) {
        LOG_INFO("CPU scheduling: %s (sched_batch=%s)",
                 now == SCHED_BATCH ? "SCHED_BATCH" : "as started", batch ? "true" : "false");
        return;
    }
    struct sched_param sp = {0};
    if (sched_setscheduler(0, SCHED_BATCH, &sp) != 0)
        LOG_WARN("sched_batch: cannot switch to SCHED_BATCH (%s); the default policy stays",
                 strerror(errno));
    else
        LOG_INFO("CPU scheduling: SCHED_BATCH for the frontend and its workers (sched_batch=true)");
}

/* The GPUs workers may be given: the visible ones (NVML, CUDA_VISIBLE_DEVICES), at most
 * number_of_gpu of them, as TorchServe caps it; in the start-up log as TorchServe's "Number of
 * GPUs", with each one's name. */
static void setup_gpus(void)
{
    const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
    char why[256];
    int visible = nvml_open(cvd, why, sizeof(why));
    int want = srv->cfg.number_of_gpu;
    srv->n_gpu = want < 0 || want > visible ? visible : want;
    if (want > visible)
        LOG_WARN("number_of_gpu=%d, but %d GPU(s) are visible: %d used", want, visible, visible);
    if (visible == 0) {
        LOG_INFO("Number of GPUs: 0 (%s): every model runs on the CPU", why);
        return;
    }
    LOG_INFO("Number of GPUs: %d (%d visible%s%s%s)", srv->n_gpu, visible,
             cvd ? ", CUDA_VISIBLE_DEVICES=" : "", cvd ? cvd : "",
             want >= 0 ? ", number_of_gpu set" : "");
    for (int i = 0; i < visible; i++) {
        char name[128];
        int idx;
        struct nvml_usage u;
        if (nvml_describe(i, name, sizeof(name), &idx) == 0)
            LOG_INFO("GPU %d: %s (NVML index %d, %llu MiB)%s", i, name, idx,
                     nvml_usage(i, &u) == 0 ? u.mem_total >> 20 : 0ULL,
                     i < srv->n_gpu ? "" : ", not used (number_of_gpu)");
    }
}

/* The Python of the workers' plugin (its info file, next to it), and config.properties' python
 * when set: the plugin's interpreter or a venv of it, else the start is refused. */
static int setup_python(void)
{
    char *dir = xstrdup(srv->worker_bin);
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = '\0';
    char *info = xasprintf("%s/../lib/libts_python.info", dir);
    free(dir);
    struct pyinfo pi;
    char err[PATH_MAX + 512];
    int rc = 0;
    if (pyinfo_load(info, &pi, err, sizeof(err))) {
        if (srv->cfg.python) {
            fprintf(stderr, "torchserve-c: python=%s: the Python plugin is not built (%s)\n",
                    srv->cfg.python, err);
            rc = -1;
        } else {
            LOG_INFO("Python executable: none (%s): Python models cannot be served", err);
        }
        free(info);
        return rc;
    }
    free(info);
    if (srv->cfg.python) {
        char resolved[PATH_MAX];
        if (pyinfo_check(&pi, srv->cfg.python, resolved, sizeof(resolved), err, sizeof(err))) {
            fprintf(stderr, "torchserve-c: %s: %s\n", srv->cfg.path ? srv->cfg.path : "config",
                    err);
            LOG_ERROR("%s", err);
            return -1;
        }
        srv->python_exe = xstrdup(resolved);
    } else {
        srv->python_exe = xstrdup(pi.executable);
    }
    LOG_INFO("Python executable: %s (Python %s, %s)", srv->python_exe, pi.version,
             srv->cfg.python ? "config.properties python" : "the one the plugin was built for");
    return 0;
}

int server_main(const struct server_opts *o)
{
    static struct server s;
    srv = &s;
    LIST_INIT(&srv->models);
    srv->start_us = ts_now_us();
    log_init('F', stderr);
    setvbuf(stdout, NULL, _IOLBF, 0);

    config_defaults(&srv->cfg);
    char *cp = config_path(o);
    char err[1024];
    if (cp && config_load(cp, &srv->cfg, config_warn, NULL, err, sizeof(err)) != 0) {
        fprintf(stderr, "torchserve-c: %s\n", err);
        free(cp);
        return 1;
    }
    if (cp)
        LOG_INFO("config: %s", cp);
    sched_policy(srv->cfg.sched_batch);
    /* this thread runs the loop */
    loop_wait_busy_poll(srv->cfg.busy_poll_us);
    if (srv->cfg.busy_poll_us > 0)
        LOG_INFO("busy polling: the loop and each worker look for events for %d us before they "
                 "sleep (busy_poll_us)",
                 srv->cfg.busy_poll_us);
    snapshot_init(cp);
    free(cp);
    if (check_snapshots(&srv->cfg) != 0)
        return 1;
    if (o->ncs)
        snapshot_disable();
    /* the command line overrides the file; a TS_* variable (enable_envvars_config) overrides
     * both, as in TorchServe */
    if (o->disable_token_auth && !config_from_env(&srv->cfg, "disable_token_authorization"))
        srv->cfg.disable_token_authorization = 1;
    if (o->enable_model_api && !config_from_env(&srv->cfg, "enable_model_api"))
        srv->cfg.enable_model_api = 1;
    const char *store = o->model_store && !config_from_env(&srv->cfg, "model_store")
                            ? o->model_store
                            : srv->cfg.model_store;
    if (!store) {
        fprintf(stderr, "torchserve-c: --model-store is required (or model_store in "
                        "config.properties)\n");
        return 1;
    }
    char real[PATH_MAX];
    if (!realpath(store, real)) {
        fprintf(stderr, "torchserve-c: model store %s: %s\n", store, strerror(errno));
        return 1;
    }
    srv->model_store = xstrdup(real);
    srv->next_worker_id = srv->cfg.initial_worker_port;

    char *dir = self_dir();
    srv->worker_bin = xasprintf("%s/torchserve-c-worker", dir);
    free(dir);
    if (access(srv->worker_bin, X_OK) != 0) {
        fprintf(stderr, "torchserve-c: worker binary %s: %s\n", srv->worker_bin, strerror(errno));
        return 1;
    }
    if (setup_python() != 0)
        return 1;
    setup_gpus(); /* before metrics_setup: which GPU metrics there are */
    if (metrics_setup() != 0)
        return 1;

    if (instance_acquire(&srv->cfg) != 0)
        return 1;
    if (instance_make_run_dir(&srv->run_dir) != 0) {
        instance_release();
        return 1;
    }

    if (!srv->cfg.state_dir)
        srv->cfg.state_dir = xasprintf("%s/state", srv->run_dir);
    mkdir(srv->cfg.state_dir, 0700);

    signal(SIGPIPE, SIG_IGN);
    ev_mem_install(); /* before any other libevent call */
    /* No evthread_use_pthreads: every libevent object lives on the loop thread (the registration
     * and gRPC completion-queue threads wake it through an eventfd), and libevent's locks cost
     * 5% of the frontend's instructions per request. */
    /* epoll's changelist folds the interest changes of one loop turn into one epoll_ctl per fd:
     * evhttp turns a connection's read and write interest off and on around each request, which
     * cost 4 epoll_ctl calls per request (scripts/bench/syscalls.sh). Its caveat, an fd and its
     * dup() both registered, does not arise here: the only dup (http_guard) is closed at once. */
    struct event_config *ecfg = event_config_new();
    event_config_set_flag(ecfg, EVENT_BASE_FLAG_EPOLL_USE_CHANGELIST);
    srv->base = event_base_new_with_config(ecfg);
    event_config_free(ecfg);
    if (!srv->base)
        srv->base = event_base_new();
    ev_sigint = evsignal_new(srv->base, SIGINT, on_stop_signal, NULL);
    ev_sigterm = evsignal_new(srv->base, SIGTERM, on_stop_signal, NULL);
    evsignal_add(ev_sigint, NULL);
    evsignal_add(ev_sigterm, NULL);
    worker_pool_init();
    mgmt_init();

    int rc = 1;
    if (open_logs() != 0)
        goto out;
    if (auth_init(!srv->cfg.disable_token_authorization, srv->cfg.token_expiration_min) != 0) {
        LOG_ERROR("cannot write %s in the working directory: %s", AUTH_KEY_FILE, strerror(errno));
        goto out;
    }
    conn_budget_init(srv->cfg.max_connections); /* HTTP's and gRPC's, before any listener */
    if (http_servers_start() != 0)
        goto out;
    if (srv->cfg.enable_grpc && srv->cfg.enable_grpc_ssl) {
        /* the same check as for https listeners: a start with a broken key fails here, with
         * the reason, instead of at every client's handshake */
        char err[512];
        struct ssl_ctx_st *ctx = http_tls_ctx_new(srv->cfg.certificate_file,
                                                  srv->cfg.private_key_file, err, sizeof(err));
        if (!ctx) {
            LOG_ERROR("enable_grpc_ssl: %s", err);
            fprintf(stderr, "torchserve-c: enable_grpc_ssl: %s\n", err);
            goto out;
        }
        http_tls_ctx_free(ctx);
    }
    if (grpc_servers_start() != 0)
        goto out;
    if (!srv->cfg.disable_system_metrics)
        sys_metrics_start(srv->base,
                          srv->cfg.metric_time_interval > 0 ? srv->cfg.metric_time_interval : 60,
                          srv->n_gpu);
    if (http_metrics_log_start() != 0)
        goto out;
    load_startup_models(o);
    startup_watch(on_startup_done, (void *)o);
    event_base_dispatch(srv->base);
    rc = startup_fatal;
out:
    startup_free();
    http_metrics_log_stop();
    sys_metrics_stop();
    http_servers_stop();
    /* before mgmt_shutdown: cancelled gRPC calls detach from their pending operations */
    grpc_servers_stop();
    model_register_cancel_all();
    mgmt_shutdown();
    snapshot_shutdown();
    model_unregister_all();
    worker_pool_shutdown();
    event_free(ev_sigint);
    event_free(ev_sigterm);
    auth_shutdown();
    event_base_free(srv->base);
    close_logs();
    if (ts_rmtree(srv->run_dir) != 0)
        LOG_WARN("could not remove %s", srv->run_dir);
    free(srv->run_dir);
    nvml_close();
    free(srv->python_exe);
    free(srv->worker_bin);
    free(srv->model_store);
    model_metrics_free(&srv->model_metrics);
    metrics_config_free(&srv->metrics_decl);
    free(srv->worker_metrics_env);
    config_free(&srv->cfg);
    instance_release();
    LOG_INFO("torchserve-c stopped");
    return rc;
}
