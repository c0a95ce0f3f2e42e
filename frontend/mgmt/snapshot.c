/*
 * snapshot: TorchServe's config snapshots (see snapshot.h).
 */
#include "snapshot.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "core/core.h"
#include "core/model.h"
#include "core/worker_pool.h"
#include "log.h"
#include "model_config.h"
#include "model_register.h"
#include "properties.h"
#include "util.h"

#define SUFFIX "-snapshot.cfg"

static int disabled;
static struct props start_props; /* the config the server started from, read once */
static int have_props;

void snapshot_disable(void)
{
    disabled = 1;
}

const char *snapshot_dir(void)
{
    const char *env = getenv("LOG_LOCATION");
    return env && *env ? env : "logs";
}

void snapshot_init(const char *config_path)
{
    char err[512];
    if (config_path && props_parse_file(config_path, &start_props, err, sizeof(err)) == 0)
        have_props = 1;
    else if (config_path)
        LOG_WARN("snapshot: cannot read %s again: %s; snapshots hold no settings", config_path,
                 err);
}

void snapshot_shutdown(void)
{
    if (have_props)
        props_free(&start_props);
    have_props = 0;
}

/* ---- reading ---- */

/* The numbers a snapshot (or models=) sets, held to the bounds model-config.yaml and the
 * management API hold them to (model_config.h): a snapshot of minWorkers 66 or batchSize 1e9
 * is refused at start with the field named, as a register call with those values is. */
static const struct {
    const char *name;
    long min, max;
} int_fields[] = {
    {"minWorkers", 0, MC_MAX_WORKERS},        {"maxWorkers", 0, MC_MAX_WORKERS},
    {"batchSize", 1, MC_MAX_BATCH_SIZE},      {"maxBatchDelay", 0, MC_MAX_DELAY_MS},
    {"responseTimeout", 0, MC_MAX_TIMEOUT_S}, {"startupTimeout", 0, MC_MAX_TIMEOUT_S},
};

static json_t *models_of(json_t *root, int models_only)
{
    return models_only ? root : json_object_get(root, "models");
}

int snapshot_check(const char *json, int models_only, char *why, size_t whylen)
{
    json_error_t je;
    json_t *root = json_loads(json, 0, &je);
    if (!root) {
        snprintf(why, whylen, "invalid JSON at column %d: %s", je.column, je.text);
        return -1;
    }
    int rc = -1;
    json_t *models = models_of(root, models_only);
    const char *name, *version;
    json_t *versions, *v;
    if (!json_is_object(models)) {
        snprintf(why, whylen, "%s",
                 models_only ? "expected an object of models" : "\"models\" must be an object");
        goto out;
    }
    json_object_foreach(models, name, versions)
    {
        char err[160];
        if (ts_check_model_name(name, err, sizeof(err))) {
            snprintf(why, whylen, "%s", err);
            goto out;
        }
        if (!json_is_object(versions) || json_object_size(versions) == 0) {
            snprintf(why, whylen, "model %.64s: expected an object of versions", name);
            goto out;
        }
        json_object_foreach(versions, version, v)
        {
            if (ts_check_model_version(version, err, sizeof(err))) {
                snprintf(why, whylen, "model %.64s: %s", name, err);
                goto out;
            }
            json_t *mar = json_object_get(v, "marName");
            /* where it points is checked when it is registered: inside the model store */
            if (!json_is_object(v) || !json_is_string(mar) || !*json_string_value(mar)) {
                snprintf(why, whylen,
                         "model %.64s version %.64s: \"marName\" must name an archive in the "
                         "model store",
                         name, version);
                goto out;
            }
            for (size_t i = 0; i < sizeof int_fields / sizeof int_fields[0]; i++) {
                json_t *f = json_object_get(v, int_fields[i].name);
                if (f && !json_is_integer(f)) {
                    snprintf(why, whylen, "model %.64s version %.64s: \"%s\" must be an integer",
                             name, version, int_fields[i].name);
                    goto out;
                }
                json_int_t n = f ? json_integer_value(f) : int_fields[i].min;
                if (n < int_fields[i].min || n > int_fields[i].max) {
                    snprintf(why, whylen,
                             "model %.64s version %.64s: \"%s\" %lld is outside %ld..%ld (the "
                             "bounds of model-config.yaml and the management API)",
                             name, version, int_fields[i].name, (long long)n, int_fields[i].min,
                             int_fields[i].max);
                    goto out;
                }
            }
            json_t *mn = json_object_get(v, "minWorkers"), *mx = json_object_get(v, "maxWorkers");
            if (mn && mx && json_integer_value(mx) < json_integer_value(mn)) {
                snprintf(why, whylen,
                         "model %.64s version %.64s: \"maxWorkers\" %lld is less than "
                         "\"minWorkers\" %lld",
                         name, version, (long long)json_integer_value(mx),
                         (long long)json_integer_value(mn));
                goto out;
            }
            json_t *d = json_object_get(v, "defaultVersion");
            if (d && !json_is_boolean(d)) {
                snprintf(why, whylen,
                         "model %.64s version %.64s: \"defaultVersion\" must be "
                         "true or false",
                         name, version);
                goto out;
            }
        }
    }
    rc = 0;
out:
    json_decref(root);
    return rc;
}

static int get_int(json_t *v, const char *key, int dflt)
{
    json_t *f = json_object_get(v, key);
    return json_is_integer(f) ? (int)json_integer_value(f) : dflt;
}

void snapshot_apply(const char *json, int models_only)
{
    json_t *root = json_loads(json, 0, NULL);
    json_t *models = root ? models_of(root, models_only) : NULL;
    const char *name, *version;
    json_t *versions, *v;
    json_object_foreach(models, name, versions)
    {
        json_object_foreach(versions, version, v)
        {
            struct model_reg r;
            model_reg_init(&r);
            r.loaded_at_startup = 1;
            r.name = name;
            r.url = json_string_value(json_object_get(v, "marName"));
            r.batch_size = get_int(v, "batchSize", -1);
            r.max_batch_delay_ms = get_int(v, "maxBatchDelay", -1);
            r.response_timeout_s = get_int(v, "responseTimeout", -1);
            r.startup_timeout_s = get_int(v, "startupTimeout", -1);
            struct model *m;
            char err[1024];
            if (model_register(&r, &m, err, sizeof(err)) != 0) {
                LOG_ERROR("snapshot: cannot restore model %s version %s: %s", name, version, err);
                continue;
            }
            if (strcmp(m->version, version))
                LOG_WARN("snapshot: model %s from %s is version %s, not %s", name, r.url,
                         m->version, version);
            m->min_workers = get_int(v, "minWorkers", 1);
            m->max_workers = get_int(v, "maxWorkers", m->min_workers);
            if (json_is_true(json_object_get(v, "defaultVersion")))
                for (struct model *o = model_first(); o; o = model_next(o))
                    if (!strcmp(o->name, m->name))
                        o->is_default = o == m;
            worker_pool_scale(&m->pool, m->min_workers);
            LOG_INFO("snapshot: restored model %s version %s with %d worker(s)", m->name,
                     m->version, m->min_workers);
        }
    }
    json_decref(root);
}

char *snapshot_newest(const char *dir)
{
    char *cfgdir = xasprintf("%s/config", dir);
    DIR *d = opendir(cfgdir);
    char *best = NULL;
    struct dirent *e;
    size_t sl = strlen(SUFFIX);
    while (d && (e = readdir(d))) {
        size_t n = strlen(e->d_name);
        /* names start with the timestamp, so the newest sorts last */
        if (n > sl && !strcmp(e->d_name + n - sl, SUFFIX) && e->d_name[0] != '.' &&
            (!best || strcmp(e->d_name, best) > 0)) {
            free(best);
            best = xstrdup(e->d_name);
        }
    }
    if (d)
        closedir(d);
    char *path = best ? xasprintf("%s/%s", cfgdir, best) : NULL;
    free(best);
    free(cfgdir);
    return path;
}

/* ---- writing ---- */

static json_t *models_json(void)
{
    json_t *models = json_object();
    for (struct model *m = model_first(); m; m = model_next(m)) {
        json_t *versions = json_object_get(models, m->name);
        if (!versions) {
            versions = json_object();
            json_object_set_new(models, m->name, versions);
        }
        json_t *v = json_object();
        json_object_set_new(v, "defaultVersion", json_boolean(m->is_default));
        json_object_set_new(v, "marName", json_string(m->url));
        int live = m->pool.n_workers; /* -1: never set (a startup model); what runs now */
        json_object_set_new(v, "minWorkers",
                            json_integer(m->min_workers >= 0 ? m->min_workers : live));
        json_object_set_new(v, "maxWorkers",
                            json_integer(m->max_workers >= 0 ? m->max_workers : live));
        json_object_set_new(v, "batchSize", json_integer(m->pool.batch_size));
        json_object_set_new(v, "maxBatchDelay", json_integer(m->max_batch_delay_ms));
        json_object_set_new(v, "responseTimeout", json_integer(m->pool.response_timeout_s));
        json_object_set_new(v, "startupTimeout", json_integer(m->pool.startup_timeout_s));
        json_object_set_new(versions, m->version, v);
    }
    return models;
}

/* The properties of the config file the server started from, except what the snapshot itself
 * sets. Values are written back as read (properties escapes are not re-applied: a value with a
 * backslash or a line break is left out, with a warning). */
static void copy_config(FILE *f)
{
    const char *path = srv->cfg.path;
    if (!have_props)
        return;
    for (size_t i = 0; i < start_props.n; i++) {
        const struct prop *p = &start_props.p[i];
        if (!strcmp(p->key, "model_snapshot") || !strcmp(p->key, "models") ||
            !strcmp(p->key, "load_models") || !strcmp(p->key, "model_store"))
            continue;
        if (strpbrk(p->key, "\\\n\r=: ") || strpbrk(p->value, "\\\n\r")) {
            LOG_WARN("snapshot: %s:%d: %s left out (escapes)", path, p->line, p->key);
            continue;
        }
        fprintf(f, "%s=%s\n", p->key, p->value);
    }
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void prune(const char *cfgdir)
{
    DIR *d = opendir(cfgdir);
    if (!d)
        return;
    char **names = NULL;
    size_t n = 0, cap = 0, sl = strlen(SUFFIX);
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (len <= sl || strcmp(e->d_name + len - sl, SUFFIX) || e->d_name[0] == '.')
            continue;
        if (n == cap)
            names = xrealloc(names, (cap = cap ? cap * 2 : 32) * sizeof(*names));
        names[n++] = xstrdup(e->d_name);
    }
    closedir(d);
    qsort(names, n, sizeof(*names), cmp_names);
    for (size_t i = 0; i < n; i++) {
        if (i + SNAPSHOT_KEEP < n) {
            char *p = xasprintf("%s/%s", cfgdir, names[i]);
            unlink(p);
            free(p);
        }
        free(names[i]);
    }
    free(names);
}

void snapshot_save(void)
{
    if (disabled)
        return;
    const char *loc = snapshot_dir();
    char *cfgdir = xasprintf("%s/config", loc);
    mkdir(loc, 0755);
    mkdir(cfgdir, 0755);
    struct timeval tv;
    gettimeofday(&tv, NULL);
    struct tm tm;
    localtime_r(&tv.tv_sec, &tm);
    char stamp[32];
    strftime(stamp, sizeof(stamp), "%Y%m%d%H%M%S", &tm);
    char *name = xasprintf("%s%03ld" SUFFIX, stamp, (long)(tv.tv_usec / 1000));
    char *path = xasprintf("%s/%s", cfgdir, name);
    char *tmp = xasprintf("%s/.%s.tmp", cfgdir, name);

    json_t *snap = json_object();
    json_t *models = models_json();
    json_object_set_new(snap, "name", json_string(name));
    json_object_set_new(snap, "modelCount", json_integer((json_int_t)json_object_size(models)));
    json_object_set_new(snap, "created",
                        json_integer((json_int_t)tv.tv_sec * 1000 + tv.tv_usec / 1000));
    json_object_set_new(snap, "models", models);
    char *text = json_dumps(snap, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(snap);

    int ok = 0;
    FILE *f = fopen(tmp, "w");
    if (f) {
        fprintf(f, "# torchserve-c config snapshot %s\n", name);
        copy_config(f);
        fprintf(f, "model_store=%s\n", srv->model_store);
        fprintf(f, "model_snapshot=%s\n", text);
        ok = fflush(f) == 0 && fsync(fileno(f)) == 0;
        ok = fclose(f) == 0 && ok;
    }
    if (ok && rename(tmp, path) == 0) {
        int dfd = open(cfgdir, O_RDONLY | O_DIRECTORY);
        if (dfd >= 0) {
            fsync(dfd);
            close(dfd);
        }
        LOG_INFO("snapshot %s written", path);
        prune(cfgdir);
    } else {
        LOG_ERROR("cannot write the snapshot %s: %s", path, strerror(errno));
        unlink(tmp);
    }
    free(text);
    free(tmp);
    free(path);
    free(name);
    free(cfgdir);
}
