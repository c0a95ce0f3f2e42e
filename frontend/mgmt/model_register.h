/*
 * model_register: registration of a model from the model store: resolving the url inside the
 * store, extracting the archive, reading MANIFEST.json and model-config.yaml, and the effective
 * settings (register arguments > model-config.yaml > config.properties > defaults). The model
 * then enters the core's registry (model_add).
 *
 * Loop thread, except the disk work of model_register_async, which runs on a thread of its own
 * and touches nothing shared but the immutable config and the model store path.
 */
#ifndef TS_MODEL_REGISTER_H
#define TS_MODEL_REGISTER_H

#include <stddef.h>

struct model;

/* Registration settings; -1 / NULL means "from model-config.yaml, else default". */
struct model_reg {
    const char *url;
    const char *name;
    const char *handler;
    int batch_size;
    int max_batch_delay_ms;
    int initial_workers;
    int response_timeout_s;
    int startup_timeout_s;
    int loaded_at_startup;
};

void model_reg_init(struct model_reg *r);

/* Resolves the url inside the model store, extracts it, reads its manifest and yaml, and adds
 * the model (not yet with workers). *out = the new model. err gets a client-facing message. */
int model_register(const struct model_reg *r, struct model **out, char *err, size_t errlen);
typedef void model_registered_fn(void *arg, struct model *m, int rc, const char *err);
/* The same as model_register with the disk work (extraction, parsing) on a thread of its own;
 * cb runs later on the loop thread with the new model, or NULL and the error. */
void model_register_async(const struct model_reg *r, model_registered_fn *cb, void *arg);
/* Shutdown: waits for registrations in progress and drops them without calling back. */
void model_register_cancel_all(void);
/* m leaves the registry: what its extracted archive held of max_extracted_bytes is free again. */
void model_register_forget(struct model *m);

#endif
