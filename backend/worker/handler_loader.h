/*
 * handler_loader: resolves a MANIFEST handler string to a `struct ts_handler`.
 *
 * A built-in name (the table handler_loader_builtins() was given: "torchscript", alias
 * "TorchScriptHandler" and "", "identity_text", ...), or a
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
 * its continuous variant when the model has continuousBatching. "mlserver" (an MLServer runtime:
 * model-settings.json) and "inferless" (an Inferless app.py) are served by the same plugin, always
 * continuous. */
const struct ts_handler *handler_loader_find(const char *spec, const char *runtime, int continuous,
                                             const char *model_dir, char *err, size_t errlen);

/* A built-in handler's name and constructor. */
struct handler_builtin {
    const char *name;
    ts_handler_get_fn *get;
};

/* The built-in handlers, by name (the worker's main gives backend/handlers/' table; the table
 * is borrowed for the life of the process). Before the first handler_loader_find(). */
void handler_loader_builtins(const struct handler_builtin *table, size_t n);

#endif
