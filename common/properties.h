/*
 * properties: Java-style `key=value` files (config.properties): '#' and '!' comments, blank
 * lines, `key = value` or `key: value`, trailing-backslash continuation, and TorchServe's
 * `$$ENV_VAR$$` substitution in values. Keeps the line of every key for error messages.
 * Pure.
 */
#ifndef TS_PROPERTIES_H
#define TS_PROPERTIES_H

#include <stddef.h>

struct prop {
    char *key;
    char *value;
    int line;
};

struct props {
    struct prop *p;
    size_t n;
};

int props_parse_file(const char *path, struct props *out, char *err, size_t errlen);
int props_parse_string(const char *text, size_t len, struct props *out, char *err, size_t errlen);
/* last occurrence wins */
const struct prop *props_get(const struct props *ps, const char *key);
void props_free(struct props *ps);

#endif
