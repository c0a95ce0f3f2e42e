/*
 * model_kind: recognises MLServer and Inferless model folders (model_kind.h).
 *
 * The folder's files decide, as each server decides what to load: MLServer loads a folder that
 * holds model-settings.json, Inferless a repository with app.py and input_schema.py. Only what
 * registration needs is read here (the model's name and version); the worker reads the rest and
 * reports what is wrong with it as the load error.
 */
#include "model_kind.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

#define SETTINGS_MAX_BYTES (1u << 20)

/* obj[key] as a malloc'd string into *out (absent or null: NULL). -1 for another type. */
static int take(json_t *obj, const char *key, char **out)
{
    json_t *v = json_object_get(obj, key);
    *out = NULL;
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_string(v))
        return -1;
    *out = xstrdup(json_string_value(v));
    return 0;
}

static int read_settings(const char *dir, struct model_kind_info *out, char *err, size_t errlen)
{
    char *path = xasprintf("%s/%s", dir, MODEL_KIND_SETTINGS);
    struct buf b;
    buf_init(&b);
    int rc = buf_read_file(&b, path, SETTINGS_MAX_BYTES);
    free(path);
    if (rc) {
        snprintf(err, errlen, "%s: %s", MODEL_KIND_SETTINGS,
                 rc == TS_E_TOO_LARGE ? "larger than 1 MiB" : strerror(-rc));
        buf_free(&b);
        return TS_E_BAD_ARCHIVE;
    }
    json_error_t je;
    json_t *root = json_loadb(b.data ? (const char *)b.data : "", b.len, 0, &je);
    buf_free(&b);
    if (!root) {
        snprintf(err, errlen, "%s:%d: %s", MODEL_KIND_SETTINGS, je.line, je.text);
        return TS_E_BAD_ARCHIVE;
    }
    json_t *prm = json_object_get(root, "parameters");
    if (!json_is_object(root)) {
        snprintf(err, errlen, "%s: expected a JSON object", MODEL_KIND_SETTINGS);
        rc = TS_E_BAD_ARCHIVE;
    } else if (take(root, "name", &out->name)) {
        snprintf(err, errlen, "%s: name: expected a string", MODEL_KIND_SETTINGS);
        rc = TS_E_BAD_ARCHIVE;
    } else if (prm && !json_is_null(prm) && !json_is_object(prm)) {
        snprintf(err, errlen, "%s: parameters: expected an object", MODEL_KIND_SETTINGS);
        rc = TS_E_BAD_ARCHIVE;
    } else if (prm && take(prm, "version", &out->version)) {
        snprintf(err, errlen, "%s: parameters.version: expected a string", MODEL_KIND_SETTINGS);
        rc = TS_E_BAD_ARCHIVE;
    }
    json_decref(root);
    return rc;
}

int model_kind_detect(const char *dir, struct model_kind_info *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof(*out));
    if (ts_file_in(dir, MODEL_KIND_SETTINGS)) {
        out->kind = MODEL_KIND_MLSERVER;
        int rc = read_settings(dir, out, err, errlen);
        if (rc)
            model_kind_free(out);
        return rc;
    }
    if (ts_file_in(dir, "app.py") && ts_file_in(dir, "input_schema.py"))
        out->kind = MODEL_KIND_INFERLESS;
    return 0;
}

void model_kind_free(struct model_kind_info *k)
{
    free(k->name);
    free(k->version);
    memset(k, 0, sizeof(*k));
}

const char *model_kind_handler(enum model_kind k)
{
    return k == MODEL_KIND_MLSERVER ? "mlserver" : k == MODEL_KIND_INFERLESS ? "inferless" : NULL;
}

int model_kind_default_batch(enum model_kind k)
{
    return k == MODEL_KIND_MLSERVER ? MODEL_KIND_MLSERVER_BATCH : MODEL_KIND_INFERLESS_BATCH;
}
