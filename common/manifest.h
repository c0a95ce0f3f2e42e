/*
 * manifest: MAR-INF/MANIFEST.json of a model archive (TorchServe's layout):
 * {"createdOn", "runtime", "model": {"modelName", "serializedFile", "handler", "modelFile",
 *  "modelVersion", "requirementsFile", "configFile", "extensions", "envelope", ...},
 *  "archiverVersion"}. Pure (jansson).
 */
#ifndef TS_MANIFEST_H
#define TS_MANIFEST_H

#include <stddef.h>

struct manifest {
    char *runtime;           /* "" if absent */
    char *model_name;        /* "" if absent */
    char *model_version;     /* "" if absent */
    char *serialized_file;   /* "" if absent */
    char *handler;           /* "" if absent */
    char *model_file;        /* eager-mode model.py, "" if absent */
    char *requirements_file; /* "" if absent; never installed (no pip) */
    char *config_file;       /* "" if absent */
    char *envelope;          /* "" if absent */
    char *created_on;        /* "dd/mm/YYYY HH:MM:SS", "" if absent */
    char *archiver_version;  /* "" if absent */
};

/* Reads <model_dir>/MAR-INF/MANIFEST.json. A missing file gives an empty manifest (as
 * TorchServe does); malformed JSON gives TS_E_BAD_ARCHIVE with err naming the problem. */
int manifest_load(const char *model_dir, struct manifest *m, char *err, size_t errlen);
/* Writes a manifest JSON (pretty) to a malloc'd string. NULL or "" fields are left out, so a
 * zero-initialised struct with a few fields set is a valid argument. */
char *manifest_to_json(const struct manifest *m);
void manifest_free(struct manifest *m);

#endif
