/*
 * yaml_flat: reads a YAML document (libyaml) into a flat list of dotted paths and scalar values,
 * keeping the line of each value, e.g. `handler:\n  delay_ms: 200` -> "handler.delay_ms" = "200"
 * at line 2; sequence items get their index: "deviceIds.0". Used for model-config.yaml by both
 * the frontend (typed keys, model_config.c) and the worker (the handler: section).
 * Pure; errors are "file:line: reason" written into err.
 */
#ifndef TS_YAML_FLAT_H
#define TS_YAML_FLAT_H

#include <stddef.h>

struct yflat_entry {
    char *path;
    char *value;
    int line;
};

struct yflat {
    struct yflat_entry *e;
    size_t n;
};

/* 0, or TS_E_BAD_CONFIG / -errno with err set. name is used in messages ("model-config.yaml"). */
int yflat_parse_file(const char *path, const char *name, struct yflat *out, char *err,
                     size_t errlen);
int yflat_parse_string(const char *text, size_t len, const char *name, struct yflat *out, char *err,
                       size_t errlen);
const struct yflat_entry *yflat_get(const struct yflat *y, const char *path);
void yflat_free(struct yflat *y);

#endif
