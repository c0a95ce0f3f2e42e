/*
 * handler_loader: resolves a MANIFEST handler string to a `struct ts_handler`.
 *
 * A built-in name ("torchscript", alias "TorchScriptHandler" and "", "identity_text"), or a
 * shared library from the model directory, "libfoo.so" (symbol ts_handler_v1) or
 * "libfoo.so:symbol", whose symbol returns the handler; its abi_version must match; or a Python
 * handler (below).
 * Worker thread only. A loaded library stays loaded for the life of the process.
 */
#ifndef TS_HANDLER_LOADER_H
#define TS_HANDLER_LOADER_H

#include <stddef.h>

#include "handler.h"

/* The handler, or NULL with err set ("unknown handler ..."). A Python model (runtime "python"
 * in the manifest, a spec "x.py[:function]", or a TorchServe built-in name such as
 * "image_classifier") is served by the Python plugin <worker dir>/../lib/libts_python.so, in
 * its continuous variant when the model has continuousBatching. */
const struct ts_handler *handler_loader_find(const char *spec, const char *runtime, int continuous,
                                             const char *model_dir, char *err, size_t errlen);

/* Built-in handlers (backend/handlers/). */
const struct ts_handler *ts_handler_torchscript(void);
const struct ts_handler *ts_handler_identity_text(void);
const struct ts_handler *ts_handler_char_lm(void);
const struct ts_handler *ts_handler_stateful(void);
const struct ts_handler *ts_handler_lstm_stateful(void);

#endif
