/*
 * manifest: reads and writes MAR-INF/MANIFEST.json with jansson.
 *
 * Reading is lenient where TorchServe's Gson reader is (unknown keys ignored, a number where a
 * string is expected is taken as its text, e.g. "modelVersion": 2) and strict where a silent
 * guess would load the wrong thing (a non-object, an array as a handler name). Errors give the
 * file and line for syntax, or the JSON path of the bad field.
 */
#include "manifest.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

#include "util.h"

#define MANIFEST_MAX_BYTES (1u << 20)

static void set_empty(struct manifest *m)
{
    m->runtime = xstrdup("");
    m->model_name = xstrdup("");
    m->model_version = xstrdup("");
    m->serialized_file = xstrdup("");
    m->handler = xstrdup("");
    m->model_file = xstrdup("");
    m->requirements_file = xstrdup("");
    m->config_file = xstrdup("");
    m->envelope = xstrdup("");
    m->created_on = xstrdup("");
    m->archiver_version = xstrdup("");
}

/* Replaces *dst with the string at obj[key]. 0, or -1 with err naming the JSON path. */
static int take_str(json_t *obj, const char *key, const char *jpath, char **dst, const char *file,
                    char *err, size_t errlen)
{
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v))
        return 0;
    char *s;
    if (json_is_string(v))
        s = xstrndup(json_string_value(v), json_string_length(v));
    else if (json_is_integer(v))
        s = xasprintf("%lld", (long long)json_integer_value(v));
    else if (json_is_real(v))
        s = xasprintf("%g", json_real_value(v));
    else {
        snprintf(err, errlen, "%s: %s: expected a string", file, jpath);
        return -1;
    }
    free(*dst);
    *dst = s;
    return 0;
}

int manifest_load(const char *model_dir, struct manifest *m, char *err, size_t errlen)
{
    set_empty(m);
    char *path = xasprintf("%s/MAR-INF/MANIFEST.json", model_dir);
    struct stat st;
    if (stat(path, &st) != 0) {
        int e = errno;
        if (e == ENOENT || e == ENOTDIR) {
            free(path);
            return 0;
        }
        snprintf(err, errlen, "%s: %s", path, strerror(e));
        free(path);
        manifest_free(m);
        set_empty(m);
        return -e;
    }
    if (!S_ISREG(st.st_mode) || st.st_size > (off_t)MANIFEST_MAX_BYTES) {
        snprintf(err, errlen, "%s: %s", path,
                 S_ISREG(st.st_mode) ? "larger than 1 MiB" : "not a regular file");
        free(path);
        return TS_E_BAD_ARCHIVE;
    }
    json_error_t je;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        snprintf(err, errlen, "%s:%d: %s", path, je.line, je.text);
        free(path);
        return TS_E_BAD_ARCHIVE;
    }
    int rc = 0;
    json_t *model = json_object_get(root, "model");
    if (!json_is_object(root)) {
        snprintf(err, errlen, "%s: expected a JSON object at the top level", path);
        rc = TS_E_BAD_ARCHIVE;
    } else if (model && !json_is_object(model)) {
        snprintf(err, errlen, "%s: model: expected an object", path);
        rc = TS_E_BAD_ARCHIVE;
    } else if (take_str(root, "runtime", "runtime", &m->runtime, path, err, errlen) ||
               take_str(root, "createdOn", "createdOn", &m->created_on, path, err, errlen) ||
               take_str(root, "archiverVersion", "archiverVersion", &m->archiver_version, path, err,
                        errlen) ||
               (model &&
                (take_str(model, "modelName", "model.modelName", &m->model_name, path, err,
                          errlen) ||
                 take_str(model, "modelVersion", "model.modelVersion", &m->model_version, path, err,
                          errlen) ||
                 take_str(model, "serializedFile", "model.serializedFile", &m->serialized_file,
                          path, err, errlen) ||
                 take_str(model, "handler", "model.handler", &m->handler, path, err, errlen) ||
                 take_str(model, "modelFile", "model.modelFile", &m->model_file, path, err,
                          errlen) ||
                 take_str(model, "requirementsFile", "model.requirementsFile",
                          &m->requirements_file, path, err, errlen) ||
                 take_str(model, "configFile", "model.configFile", &m->config_file, path, err,
                          errlen) ||
                 take_str(model, "envelope", "model.envelope", &m->envelope, path, err, errlen)))) {
        rc = TS_E_BAD_ARCHIVE;
    }
    json_decref(root);
    free(path);
    if (rc) {
        manifest_free(m);
        set_empty(m);
    }
    return rc;
}

static void put(json_t *obj, const char *key, const char *v)
{
    if (v && *v)
        json_object_set_new(obj, key, json_string(v));
}

char *manifest_to_json(const struct manifest *m)
{
    json_t *root = json_object();
    put(root, "createdOn", m->created_on);
    put(root, "runtime", m->runtime);
    json_t *model = json_object();
    put(model, "modelName", m->model_name);
    put(model, "serializedFile", m->serialized_file);
    put(model, "handler", m->handler);
    put(model, "modelFile", m->model_file);
    put(model, "modelVersion", m->model_version);
    put(model, "requirementsFile", m->requirements_file);
    put(model, "configFile", m->config_file);
    put(model, "envelope", m->envelope);
    json_object_set_new(root, "model", model);
    put(root, "archiverVersion", m->archiver_version);
    char *s = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(root);
    if (!s) {
        fprintf(stderr, "out of memory writing a manifest\n");
        abort();
    }
    /* a text file ends in a newline */
    char *out = xasprintf("%s\n", s);
    free(s);
    return out;
}

void manifest_free(struct manifest *m)
{
    free(m->runtime);
    free(m->model_name);
    free(m->model_version);
    free(m->serialized_file);
    free(m->handler);
    free(m->model_file);
    free(m->requirements_file);
    free(m->config_file);
    free(m->envelope);
    free(m->created_on);
    free(m->archiver_version);
    memset(m, 0, sizeof *m);
}
