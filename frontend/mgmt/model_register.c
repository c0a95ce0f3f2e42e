/*
 * model_register: registration from the model store, the management half of a model's life.
 *
 * Registration resolves a url strictly inside the model store (no "..", no absolute path
 * outside it), extracts archives into the server's run directory, and reads MANIFEST.json and
 * model-config.yaml. Settings follow TorchServe's precedence: register arguments >
 * model-config.yaml > config.properties > defaults. The disk work runs on a thread of its own
 * (model_register_async); the result enters the core's registry (model_add) on the loop thread.
 */
#include "model_register.h"

#include <errno.h>
#include <ftw.h>
#include <event2/event.h>
#include <limits.h>
#include <pthread.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include "archive.h"
#include "model_kind.h"
#include "model_venv.h"
#include "core/core.h"
#include "core/model.h"
#include "log.h"

void model_reg_init(struct model_reg *r)
{
    memset(r, 0, sizeof(*r));
    r->batch_size = -1;
    r->max_batch_delay_ms = -1;
    r->initial_workers = -1;
    r->response_timeout_s = -1;
    r->startup_timeout_s = -1;
}

/* model-config.yaml's warnings go to the log, naming the archive's model */
static void config_warning(const char *msg, void *arg)
{
    LOG_WARN("model %s: %s", arg ? (const char *)arg : "?", msg);
}

/* allowed_urls: comma-separated regexes, matched case-insensitively against the whole url (as
 * TorchServe's Pattern.matcher().matches()). A pattern that does not compile matches nothing. */
static int url_allowed(const char *url)
{
    const char *list = srv->cfg.allowed_urls ? srv->cfg.allowed_urls : "";
    char *copy = xstrdup(list), *save = NULL;
    int ok = 0;
    for (char *t = strtok_r(copy, ",", &save); t && !ok; t = strtok_r(NULL, ",", &save)) {
        while (*t == ' ')
            t++;
        if (!*t)
            continue;
        char *anchored = xasprintf("^(%s)$", t);
        regex_t re;
        if (regcomp(&re, anchored, REG_EXTENDED | REG_ICASE | REG_NOSUB) == 0) {
            ok = regexec(&re, url, 0, NULL, 0) == 0;
            regfree(&re);
        } else {
            LOG_WARN("allowed_urls: cannot compile pattern '%s'", t);
        }
        free(anchored);
    }
    free(copy);
    return ok;
}

static int path_in_store(const char *p)
{
    size_t n = strlen(srv->model_store);
    return !strncmp(p, srv->model_store, n) && (p[n] == '/' || p[n] == '\0');
}

/* The model store path for url, or an error (TorchServe's ModelArchive.downloadModel rules,
 * stricter where it was lax):
 *   - "" and anything with ".." are refused before the file system is touched;
 *   - a "scheme://" url must match allowed_urls ("Given URL ... does not match any allowed
 *     URL(s)"); an allowed file:// url is a local path; an allowed remote url is never fetched:
 *     there is no download (TS_E_EXISTS-like -EEXIST when the store already has that file name,
 *     as TorchServe's "Model file already exists", else -ENOTSUP);
 *   - a local path must resolve inside the model store: relative names are taken in it, an
 *     absolute path outside it is refused without being opened (TorchServe accepts any
 *     directory), and symlinks leading out of it are refused after realpath. */
static int resolve_url(const char *url, char **path, char *err, size_t errlen)
{
    const char *p = url;
    if (!*url) {
        snprintf(err, errlen, "Model url is empty");
        return TS_E_MODEL_NOT_FOUND;
    }
    if (strstr(url, "..")) {
        snprintf(err, errlen, "Relative path is not allowed in url: %s", url);
        return TS_E_MODEL_NOT_FOUND;
    }
    const char *scheme_end = strstr(url, "://");
    if (scheme_end) {
        if (!url_allowed(url)) {
            snprintf(err, errlen, "Given URL %s does not match any allowed URL(s)", url);
            return TS_E_MODEL_NOT_FOUND;
        }
        if (!strncasecmp(url, "file://", 7)) {
            p = url + 7;
        } else {
            /* the archive name TorchServe would have saved the download under */
            const char *q = scheme_end + 3;
            size_t qlen = strcspn(q, "?#");
            const char *base = q;
            for (size_t i = 0; i < qlen; i++)
                if (q[i] == '/')
                    base = q + i + 1;
            char *name = xstrndup(base, (size_t)(q + qlen - base));
            int exists = 0;
            if (*name && strcmp(name, ".")) {
                char *fp = xasprintf("%s/%s", srv->model_store, name);
                struct stat st;
                exists = lstat(fp, &st) == 0;
                free(fp);
            }
            if (exists) {
                snprintf(err, errlen, "Model file already exists %s", name);
                free(name);
                return -EEXIST;
            }
            free(name);
            snprintf(err, errlen,
                     "Failed to download archive from: %s: remote model download is not "
                     "supported; copy the archive into the model store and register it by name",
                     url);
            return -ENOTSUP;
        }
    }
    if (!*p) {
        snprintf(err, errlen, "Model url is empty");
        return TS_E_MODEL_NOT_FOUND;
    }
    if (p[0] == '/' && !path_in_store(p)) {
        snprintf(err, errlen, "Model url %s is outside the model store", url);
        return TS_E_MODEL_NOT_FOUND;
    }
    char *full = p[0] == '/' ? xstrdup(p) : xasprintf("%s/%s", srv->model_store, p);
    char real[PATH_MAX];
    if (!realpath(full, real)) {
        snprintf(err, errlen, "Model not found at: %s", url);
        free(full);
        return TS_E_MODEL_NOT_FOUND;
    }
    free(full);
    if (!path_in_store(real)) {
        snprintf(err, errlen, "Model url %s is outside the model store", url);
        return TS_E_MODEL_NOT_FOUND;
    }
    *path = xstrdup(real);
    return 0;
}

/* Archive base name without .mar / .tar.gz / .tgz / .zip */
static char *name_from_path(const char *path)
{
    const char *b = strrchr(path, '/');
    b = b ? b + 1 : path;
    char *s = xstrdup(b);
    static const char *const exts[] = {".mar", ".tar.gz", ".tgz", ".zip", ".model"};
    for (size_t i = 0; i < sizeof(exts) / sizeof(exts[0]); i++) {
        size_t n = strlen(s), e = strlen(exts[i]);
        if (n > e && !strcmp(s + n - e, exts[i])) {
            s[n - e] = '\0';
            break;
        }
    }
    return s;
}

/* ---- the budget for extracted archives (max_extracted_bytes), shared by the registration
 * threads ---- */

static pthread_mutex_t budget_mu = PTHREAD_MUTEX_INITIALIZER;
static uint64_t budget_used;

/* Reserves up to want bytes; returns how many (0: nothing is left). */
static uint64_t budget_reserve(uint64_t want)
{
    pthread_mutex_lock(&budget_mu);
    uint64_t cap = (uint64_t)srv->cfg.max_extracted_bytes;
    uint64_t left = cap > budget_used ? cap - budget_used : 0;
    uint64_t got = want < left ? want : left;
    budget_used += got;
    pthread_mutex_unlock(&budget_mu);
    return got;
}

static void budget_release(uint64_t n)
{
    pthread_mutex_lock(&budget_mu);
    budget_used -= n < budget_used ? n : budget_used;
    pthread_mutex_unlock(&budget_mu);
}

static __thread uint64_t tree_sum;

static int add_size(const char *p, const struct stat *st, int flag, struct FTW *f)
{
    (void)p;
    (void)f;
    if (flag == FTW_F)
        tree_sum += (uint64_t)st->st_size;
    return 0;
}

/* Bytes of the regular files under dir (what an extraction wrote). */
static uint64_t tree_bytes(const char *dir)
{
    tree_sum = 0;
    nftw(dir, add_size, 16, FTW_PHYS);
    return tree_sum;
}

void model_register_forget(struct model *m)
{
    budget_release(m->extracted_bytes);
    m->extracted_bytes = 0;
}

/* Frees a model that never entered the registry, with what it held of the budget. */
static void discard(struct model *m)
{
    model_register_forget(m);
    model_free(m);
}

/* A scratch directory of the model's own under the run directory (removed with the model). */
static int make_tmp_dir(struct model *m, const char *kind, char *err, size_t errlen)
{
    char *models = xasprintf("%s/models", srv->run_dir);
    mkdir(models, 0700);
    free(models);
    m->tmp_dir = xasprintf("%s/models/%s.XXXXXX", srv->run_dir, kind);
    if (mkdtemp(m->tmp_dir))
        return 0;
    int e = errno;
    snprintf(err, errlen, "cannot create a directory for the model: %s", strerror(e));
    free(m->tmp_dir);
    m->tmp_dir = NULL;
    return -e;
}

/* install_py_dep_per_model=true: the archive's requirements file into a virtual environment of
 * the model's own (model_venv.h), in its scratch directory, before the model is registered: a
 * failed install fails the registration with pip's message, as TorchServe's
 * "Custom pip package installation failed". */
static int install_requirements(struct model *m, char *err, size_t errlen)
{
    const char *req = m->manifest.requirements_file;
    if (!srv->cfg.install_py_dep_per_model || !req || !*req)
        return 0;
    if (req[0] == '/' || strstr(req, "..")) {
        snprintf(err, errlen, "requirementsFile '%s': must be a path inside the archive", req);
        return TS_E_BAD_ARCHIVE;
    }
    int rc;
    if (!m->tmp_dir && (rc = make_tmp_dir(m, "v", err, errlen)))
        return rc;
    /* a hidden name: the model directory (which may be tmp_dir) is on the handler's sys.path */
    m->venv = xasprintf("%s/.venv", m->tmp_dir);
    char why[900];
    /* a venv of the Python the workers run, so that the plugin can run it */
    rc = model_venv_install(srv->python_exe ? srv->python_exe : "/usr/bin/python3", m->venv, m->dir,
                            req, why, sizeof(why));
    if (rc)
        snprintf(err, errlen, "Custom pip package installation failed for model %s: %s", m->name,
                 why);
    return rc;
}

/* ---- what a manifest may name: files inside the model's directory ---- */

/* rel (a manifest field, or the register call's handler file) must name something inside the
 * model's directory: relative, with no ".." segment, and, once links are followed, inside the
 * directory whose real path is root. A file that does not exist passes: the worker says so. */
static int inside_model_dir(const char *dir, const char *root, const char *what, const char *rel,
                            char *err, size_t errlen)
{
    if (!rel || !*rel)
        return 0;
    if (rel[0] == '/') {
        snprintf(err, errlen, "%s '%s' is an absolute path: it must name a file of the model", what,
                 rel);
        return TS_E_BAD_ARCHIVE;
    }
    for (const char *p = rel; *p;) {
        size_t n = strcspn(p, "/");
        if (n == 2 && p[0] == '.' && p[1] == '.') {
            snprintf(err, errlen, "%s '%s' leads out of the model's directory (..)", what, rel);
            return TS_E_BAD_ARCHIVE;
        }
        p += n;
        p += *p == '/';
    }
    char *full = xasprintf("%s/%s", dir, rel);
    char real[PATH_MAX];
    int rc = 0;
    size_t rl = strlen(root);
    if (realpath(full, real) &&
        !(strncmp(real, root, rl) == 0 && (real[rl] == '/' || real[rl] == '\0'))) {
        snprintf(err, errlen, "%s '%.200s' resolves to %.200s, outside the model's directory", what,
                 rel, real);
        rc = TS_E_BAD_ARCHIVE;
    }
    free(full);
    return rc;
}

/* The file part of a handler spec: "handler.py[:fn]", "lib.so[:sym]" or a path; NULL for a
 * built-in name (torchscript, image_classifier, ...), which names no file. */
static char *handler_file(const char *spec)
{
    if (!spec || !*spec)
        return NULL;
    size_t n = strcspn(spec, ":");
    int file = memchr(spec, '/', n) != NULL || (n > 3 && !strncmp(spec + n - 3, ".py", 3)) ||
               (n > 3 && !strncmp(spec + n - 3, ".so", 3));
    return file ? xstrndup(spec, n) : NULL;
}

/* What a link walk found: the first link out of the directory. */
static const char *walk_root;
static char walk_bad[PATH_MAX];
static char walk_target[PATH_MAX];
static size_t walk_count;

#define WALK_MAX_ENTRIES 100000

static int walk_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)ftw;
    if (++walk_count > WALK_MAX_ENTRIES)
        return 2;
    if (flag != FTW_SL)
        return 0;
    char real[PATH_MAX];
    size_t rl = strlen(walk_root);
    if (realpath(path, real) && strncmp(real, walk_root, rl) == 0 &&
        (real[rl] == '/' || real[rl] == '\0'))
        return 0;
    snprintf(walk_bad, sizeof(walk_bad), "%s", path);
    ssize_t n = readlink(path, walk_target, sizeof(walk_target) - 1);
    walk_target[n > 0 ? n : 0] = '\0';
    return 1;
}

/* Every path the manifest names, and every link of the model's directory (a directory in the
 * store is served in place: a link in it to /etc/shadow or another model's files would be read
 * by the worker), stays inside the directory. Registration runs on one thread at a time (the
 * registration thread, or the loop before it exists), so the walk's statics are not shared. */
static int check_model_paths(const struct model *m, const char *handler, char *err, size_t errlen)
{
    char root[PATH_MAX];
    if (!realpath(m->dir, root)) {
        snprintf(err, errlen, "%s: %s", m->dir, strerror(errno));
        return TS_E_BAD_ARCHIVE;
    }
    const struct manifest *mf = &m->manifest;
    char *hf = handler_file(handler);
    int rc = inside_model_dir(m->dir, root, "serializedFile", mf->serialized_file, err, errlen);
    if (!rc)
        rc = inside_model_dir(m->dir, root, "configFile", mf->config_file, err, errlen);
    if (!rc)
        rc = inside_model_dir(m->dir, root, "modelFile", mf->model_file, err, errlen);
    if (!rc)
        rc = inside_model_dir(m->dir, root, "requirementsFile", mf->requirements_file, err, errlen);
    if (!rc)
        rc = inside_model_dir(m->dir, root, "handler", hf, err, errlen);
    free(hf);
    if (rc)
        return rc;
    walk_root = root;
    walk_count = 0;
    int w = nftw(root, walk_entry, 16, FTW_PHYS);
    if (w == 1) {
        snprintf(err, errlen, "%.200s is a link to %.200s, outside the model's directory: refused",
                 walk_bad + strlen(root) + (walk_bad[strlen(root)] == '/'), walk_target);
        return TS_E_BAD_ARCHIVE;
    }
    if (w == 2) {
        snprintf(err, errlen, "the model's directory holds more than %d entries", WALK_MAX_ENTRIES);
        return TS_E_BAD_ARCHIVE;
    }
    return 0;
}

/* The disk part of a registration: resolve, extract, read the manifest and the yaml, name the
 * model. Touches nothing shared but the immutable config and model store path, so it runs on
 * the registration thread. */
static int model_prepare(const struct model_reg *r, struct model **out, char *err, size_t errlen)
{
    char *path = NULL;
    int rc = resolve_url(r->url, &path, err, errlen);
    if (rc)
        return rc;

    struct model *m = model_new();
    struct model_kind_info kind = {0};
    m->url = xstrdup(r->url);
    m->loaded_at_startup = r->loaded_at_startup;

    enum archive_format fmt;
    if ((rc = archive_detect(path, &fmt))) {
        snprintf(err, errlen, "%s is not a model archive (.mar, .tar.gz or directory)", r->url);
        goto fail;
    }
    if (fmt == ARCHIVE_FMT_DIR) {
        m->dir = xstrdup(path);
    } else {
        if ((rc = make_tmp_dir(m, "m", err, errlen)))
            goto fail;
        struct archive_limits lim;
        archive_default_limits(&lim);
        uint64_t per_archive = lim.max_total_bytes;
        lim.max_total_bytes = m->extracted_bytes = budget_reserve(per_archive);
        if (lim.max_total_bytes == 0) {
            snprintf(err, errlen,
                     "%s: the extracted archives of the registered models already hold "
                     "max_extracted_bytes (%ld bytes)",
                     r->url, srv->cfg.max_extracted_bytes);
            rc = TS_E_BAD_ARCHIVE;
            goto fail;
        }
        char aerr[512];
        if ((rc = archive_extract(path, m->tmp_dir, &lim, aerr, sizeof(aerr)))) {
            if (lim.max_total_bytes < per_archive)
                snprintf(err, errlen, "%s: %s (what is left of max_extracted_bytes %ld)", r->url,
                         aerr, srv->cfg.max_extracted_bytes);
            else
                snprintf(err, errlen, "%s: %s", r->url, aerr);
            goto fail;
        }
        /* hold what it really takes, not the whole reservation */
        uint64_t used = tree_bytes(m->tmp_dir);
        if (used < m->extracted_bytes) {
            budget_release(m->extracted_bytes - used);
            m->extracted_bytes = used;
        }
        /* torch-model-archiver's tgz puts every entry under NAME/ */
        m->dir = archive_model_root(m->tmp_dir);
    }

    char merr[512];
    if ((rc = manifest_load(m->dir, &m->manifest, merr, sizeof(merr)))) {
        snprintf(err, errlen, "%s: %s", r->url, merr);
        goto fail;
    }
    /* an MLServer or Inferless folder, when neither the archive nor the request names a
     * handler; its model-config.yaml, if it has one, sets its workers and batchSize, and its
     * requirements.txt is what install_py_dep_per_model installs (as an archive's
     * requirementsFile: the import error of a missing package says to put it there) */
    if (!*m->manifest.handler && !(r->handler && *r->handler)) {
        if ((rc = model_kind_detect(m->dir, &kind, merr, sizeof(merr)))) {
            snprintf(err, errlen, "%s: %s", r->url, merr);
            goto fail;
        }
        if (kind.kind != MODEL_KIND_NONE && !*m->manifest.config_file &&
            ts_file_in(m->dir, "model-config.yaml")) {
            free(m->manifest.config_file);
            m->manifest.config_file = xstrdup("model-config.yaml");
        }
        if (kind.kind != MODEL_KIND_NONE &&
            !(m->manifest.requirements_file && *m->manifest.requirements_file) &&
            ts_file_in(m->dir, "requirements.txt")) {
            free(m->manifest.requirements_file);
            m->manifest.requirements_file = xstrdup("requirements.txt");
        }
    }
    if ((rc = check_model_paths(m, r->handler && *r->handler ? r->handler : m->manifest.handler,
                                merr, sizeof(merr)))) {
        snprintf(err, errlen, "%s: %s", r->url, merr);
        goto fail;
    }
    model_config_defaults(&m->mc);
    if (m->manifest.config_file && *m->manifest.config_file) {
        char *yp = xasprintf("%s/%s", m->dir, m->manifest.config_file);
        rc = model_config_load(yp, &m->mc, config_warning, m->manifest.model_name, merr,
                               sizeof(merr));
        free(yp);
        if (rc) {
            snprintf(err, errlen, "%s", merr);
            rc = TS_E_BAD_CONFIG;
            goto fail;
        }
    }

    if (kind.kind != MODEL_KIND_NONE && m->mc.batch_size <= 0)
        m->mc.batch_size = model_kind_default_batch(kind.kind);

    if (r->name && *r->name)
        m->name = xstrdup(r->name);
    else if (m->manifest.model_name && *m->manifest.model_name)
        m->name = xstrdup(m->manifest.model_name);
    else if (kind.name && *kind.name)
        m->name = xstrdup(kind.name);
    else
        m->name = name_from_path(path);
    if (ts_check_model_name(m->name, err, errlen)) {
        rc = TS_E_BAD_INPUT;
        goto fail;
    }
    /* the version names the worker's state directory: a manifest's "1/../../x" must not */
    m->version =
        xstrdup(m->manifest.model_version && *m->manifest.model_version ? m->manifest.model_version
                : kind.version && *kind.version                         ? kind.version
                                                                        : "1.0");
    if (ts_check_model_version(m->version, err, errlen)) {
        rc = TS_E_BAD_INPUT;
        goto fail;
    }
    m->handler = xstrdup(r->handler && *r->handler      ? r->handler
                         : *m->manifest.handler         ? m->manifest.handler
                         : kind.kind != MODEL_KIND_NONE ? model_kind_handler(kind.kind)
                                                        : "");
    model_kind_free(&kind);
    if ((rc = install_requirements(m, err, errlen)))
        goto fail;
    free(path);
    *out = m;
    return 0;
fail:
    model_kind_free(&kind);
    free(path);
    discard(m);
    return rc;
}

/* The loop-thread part: the effective settings (register arguments > model-config.yaml >
 * config.properties > defaults), then entry into the registry. Frees m on error. */
static int model_commit(struct model *m, const struct model_reg *r, char *err, size_t errlen)
{
    const struct config *c = &srv->cfg;
    m->pool.batch_size = r->batch_size > 0      ? r->batch_size
                         : m->mc.batch_size > 0 ? m->mc.batch_size
                                                : 1;
    m->max_batch_delay_ms = r->max_batch_delay_ms >= 0      ? r->max_batch_delay_ms
                            : m->mc.max_batch_delay_ms >= 0 ? m->mc.max_batch_delay_ms
                                                            : 100;
    m->pool.response_timeout_s = r->response_timeout_s >= 0     ? r->response_timeout_s
                                 : m->mc.response_timeout_s > 0 ? m->mc.response_timeout_s
                                                                : c->default_response_timeout;
    m->pool.startup_timeout_s = r->startup_timeout_s >= 0     ? r->startup_timeout_s
                                : m->mc.startup_timeout_s > 0 ? m->mc.startup_timeout_s
                                                              : c->default_startup_timeout;
    m->queue_max = m->mc.job_queue_size > 0 ? m->mc.job_queue_size : c->job_queue_size;
    m->min_workers = m->mc.min_workers;
    m->max_workers = m->mc.max_workers;
    char note[512];
    gpu_plan_init(&m->pool.gpu, m->mc.device_type, m->mc.device_ids, m->mc.n_device_ids, srv->n_gpu,
                  note, sizeof(note));
    int rc = model_add(m, err, errlen);
    if (rc) {
        discard(m);
        return rc;
    }
    LOG_INFO("registered model %s version %s from %s (batchSize %d, maxBatchDelay %d ms, "
             "workers on %s%.0d%s)",
             m->name, m->version, r->url, m->pool.batch_size, m->max_batch_delay_ms,
             m->pool.gpu.n_cores ? "" : "the CPU", m->pool.gpu.n_cores,
             m->pool.gpu.n_cores ? " GPU(s)" : "");
    if (note[0])
        LOG_WARN("model %s: %s", m->name, note);
    m->pool.venv = m->venv;
    if (m->manifest.requirements_file && *m->manifest.requirements_file && !m->venv)
        LOG_WARN("model %s: %s from the archive is not installed (install_py_dep_per_model=true "
                 "installs it into a virtual environment of the model's own); its packages must "
                 "come from Debian python3-* packages",
                 m->name, m->manifest.requirements_file);
    return 0;
}

int model_register(const struct model_reg *r, struct model **out, char *err, size_t errlen)
{
    int rc = model_prepare(r, out, err, errlen);
    if (rc == 0 && (rc = model_commit(*out, r, err, errlen)) != 0)
        *out = NULL;
    return rc;
}

/* ---- registration off the loop thread ---- */

struct reg_task {
    struct model_reg r; /* strings owned (copies) */
    model_registered_fn *cb;
    void *arg;
    struct model *m;
    int rc;
    char err[1024];
    pthread_t thread;
    /* The thread writes done_fd when the disk work is over; done_ev is the loop's read event on
     * it. libevent runs without its thread locks (server.c): nothing but the loop thread may touch
     * an event, so a thread signals through a file descriptor. */
    int done_fd;
    struct event *done_ev;
    LIST_ENTRY(reg_task) link;
};

static LIST_HEAD(, reg_task) reg_tasks = LIST_HEAD_INITIALIZER(reg_tasks);

static void reg_task_free(struct reg_task *t)
{
    LIST_REMOVE(t, link);
    event_free(t->done_ev);
    if (t->done_fd >= 0)
        close(t->done_fd);
    free((char *)t->r.url);
    free((char *)t->r.name);
    free((char *)t->r.handler);
    free(t);
}

static void *reg_thread(void *arg)
{
    struct reg_task *t = arg;
    t->rc = model_prepare(&t->r, &t->m, t->err, sizeof(t->err));
    uint64_t one = 1;
    while (write(t->done_fd, &one, sizeof(one)) < 0 && errno == EINTR)
        ;
    return NULL;
}

static void reg_done(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct reg_task *t = arg;
    if (!pthread_equal(t->thread, pthread_self()))
        pthread_join(t->thread, NULL);
    if (t->rc == 0 && (t->rc = model_commit(t->m, &t->r, t->err, sizeof(t->err))) != 0)
        t->m = NULL;
    t->cb(t->arg, t->rc == 0 ? t->m : NULL, t->rc, t->err);
    reg_task_free(t);
}

void model_register_async(const struct model_reg *r, model_registered_fn *cb, void *arg)
{
    struct reg_task *t = xcalloc(1, sizeof(*t));
    t->r = *r;
    t->r.url = r->url ? xstrdup(r->url) : NULL;
    t->r.name = r->name ? xstrdup(r->name) : NULL;
    t->r.handler = r->handler ? xstrdup(r->handler) : NULL;
    t->cb = cb;
    t->arg = arg;
    t->done_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    t->done_ev = event_new(srv->base, t->done_fd, EV_READ, reg_done, t);
    LIST_INSERT_HEAD(&reg_tasks, t, link);
    int rc = t->done_fd < 0 ? errno : pthread_create(&t->thread, NULL, reg_thread, t);
    if (rc == 0) {
        event_add(t->done_ev, NULL);
    } else { /* no thread: do the disk work here rather than fail */
        LOG_WARN("registration thread: %s; extracting on the loop thread", strerror(rc));
        t->rc = model_prepare(&t->r, &t->m, t->err, sizeof(t->err));
        t->thread = pthread_self();
        event_active(t->done_ev, EV_TIMEOUT, 1);
        return;
    }
}

void model_register_cancel_all(void)
{
    struct reg_task *t;
    while ((t = LIST_FIRST(&reg_tasks))) {
        if (!pthread_equal(t->thread, pthread_self()))
            pthread_join(t->thread, NULL);
        if (t->rc == 0 && t->m)
            discard(t->m);
        reg_task_free(t);
    }
}
