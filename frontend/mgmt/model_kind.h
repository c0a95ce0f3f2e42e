/*
 * model_kind: model folders of other servers' contracts, recognised by their files, and what
 * registration takes from them.
 *
 *   model-settings.json                 an MLServer runtime (handler "mlserver"): its "name"
 *                                       and "parameters.version" name the model
 *   app.py and input_schema.py          an Inferless app (handler "inferless")
 *
 * Both are served by the Python worker (backend/python/tsc_runtimes/), always with continuous
 * batching: batchSize is how many requests one worker runs at once (their default below).
 * Pure file reading: any thread (registration's disk work runs on its own). Owns the strings of
 * a model_kind_info until model_kind_free.
 */
#ifndef TS_MODEL_KIND_H
#define TS_MODEL_KIND_H

#include <stddef.h>

enum model_kind {
    MODEL_KIND_NONE = 0, /* a TorchServe archive: MANIFEST.json and its handler */
    MODEL_KIND_MLSERVER,
    MODEL_KIND_INFERLESS,
};

#define MODEL_KIND_SETTINGS "model-settings.json"
/* requests one worker runs at once when model-config.yaml sets no batchSize: an MLServer
 * runtime's coroutines interleave (MLServer runs every request of a model at once); an Inferless
 * app's infer() runs one request at a time (the example's streamer is shared by the instance) */
#define MODEL_KIND_MLSERVER_BATCH 32
#define MODEL_KIND_INFERLESS_BATCH 1

struct model_kind_info {
    enum model_kind kind;
    char *name;    /* MLServer: model-settings.json "name", or NULL */
    char *version; /* MLServer: "parameters"."version", or NULL */
};

/* Looks at dir's files. 0 with *out filled (kind NONE when it is neither), or TS_E_BAD_ARCHIVE
 * with err naming the file and the problem (model-settings.json that is not a JSON object, a
 * name or version that is not a string). */
int model_kind_detect(const char *dir, struct model_kind_info *out, char *err, size_t errlen);
void model_kind_free(struct model_kind_info *k);
/* The handler spec of a kind ("mlserver", "inferless"), NULL for NONE. */
const char *model_kind_handler(enum model_kind k);
int model_kind_default_batch(enum model_kind k);

#endif
