/*
 * py_builtins: TorchServe's built-in Python handlers, by name: the one list the archiver (which
 * accepts the names without a file), the worker's handler loader (which serves them with the
 * Python plugin) and the plugin's `ts` package (which imports ts.torch_handler.<name>) all read.
 * Header only, so that the plugin, which links nothing of common/, reads the same list.
 */
#ifndef TS_PY_BUILTINS_H
#define TS_PY_BUILTINS_H

#include <stddef.h>
#include <string.h>

static const char *const PY_BUILTIN_HANDLERS[] = {
    "base_handler",    "image_classifier", "object_detector",
    "image_segmenter", "text_classifier",  "vision_handler",
};
#define PY_BUILTIN_HANDLERS_N (sizeof(PY_BUILTIN_HANDLERS) / sizeof(PY_BUILTIN_HANDLERS[0]))

/* 1 when name[0..len) is one of them. */
static inline int py_builtin_handler(const char *name, size_t len)
{
    for (size_t i = 0; i < PY_BUILTIN_HANDLERS_N; i++)
        if (strlen(PY_BUILTIN_HANDLERS[i]) == len && !memcmp(name, PY_BUILTIN_HANDLERS[i], len))
            return 1;
    return 0;
}

#endif
