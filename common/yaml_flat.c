/*
 * yaml_flat: libyaml's event stream folded into (dotted path, scalar, line) triples.
 *
 * The event API is enough: a stack of open collections, each remembering the path that leads to
 * it and, for a mapping, whether the next scalar is a key or a value. Every scalar value becomes
 * one entry; an empty mapping or sequence produces nothing. Only the first document is read.
 * Aliases and non-scalar keys are refused rather than guessed at: model-config.yaml never needs
 * them, and a silent misreading of a config is worse than an error.
 */
#include "yaml_flat.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "util.h"

#define YFLAT_MAX_DEPTH 64
#define YFLAT_MAX_BYTES (16u << 20)

struct frame {
    int is_map;
    int want_key; /* mapping: next scalar is a key */
    size_t index; /* sequence: next item's index */
    char *prefix; /* path of this collection ("" at the root) */
    char *key;    /* mapping: the pending key */
};

static char *join(const char *prefix, const char *part)
{
    if (!*prefix)
        return xstrdup(part);
    return xasprintf("%s.%s", prefix, part);
}

/* Path of the value that comes next inside the top frame (or "" at document level). */
static char *next_path(struct frame *top)
{
    if (!top)
        return xstrdup("");
    if (top->is_map)
        return join(top->prefix, top->key ? top->key : "");
    char idx[32];
    snprintf(idx, sizeof idx, "%zu", top->index);
    return join(top->prefix, idx);
}

/* After a value (scalar or collection) has been consumed inside top. */
static void value_done(struct frame *top)
{
    if (!top)
        return;
    if (top->is_map) {
        free(top->key);
        top->key = NULL;
        top->want_key = 1;
    } else {
        top->index++;
    }
}

static void add_entry(struct yflat *y, size_t *cap, char *path, const char *value, size_t vlen,
                      int line)
{
    if (y->n == *cap) {
        *cap = *cap ? *cap * 2 : 16;
        y->e = xrealloc(y->e, *cap * sizeof *y->e);
    }
    y->e[y->n].path = path;
    y->e[y->n].value = xstrndup(value, vlen);
    y->e[y->n].line = line;
    y->n++;
}

static void parser_error(yaml_parser_t *p, const char *name, char *err, size_t errlen)
{
    size_t line = p->problem_mark.line + 1;
    if (p->error == YAML_MEMORY_ERROR) {
        snprintf(err, errlen, "%s: out of memory", name);
        return;
    }
    if (p->context)
        snprintf(err, errlen, "%s:%zu: %s %s", name, line, p->problem ? p->problem : "syntax error",
                 p->context);
    else
        snprintf(err, errlen, "%s:%zu: %s", name, line, p->problem ? p->problem : "syntax error");
}

int yflat_parse_string(const char *text, size_t len, const char *name, struct yflat *out, char *err,
                       size_t errlen)
{
    out->e = NULL;
    out->n = 0;
    if (!name)
        name = "yaml";
    yaml_parser_t parser;
    if (!yaml_parser_initialize(&parser)) {
        snprintf(err, errlen, "%s: cannot initialise the YAML parser", name);
        return -ENOMEM;
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);

    struct frame stack[YFLAT_MAX_DEPTH];
    int depth = 0;
    size_t cap = 0;
    int rc = 0, done = 0;

    while (!done) {
        yaml_event_t ev;
        if (!yaml_parser_parse(&parser, &ev)) {
            parser_error(&parser, name, err, errlen);
            rc = TS_E_BAD_CONFIG;
            break;
        }
        int line = (int)ev.start_mark.line + 1;
        struct frame *top = depth ? &stack[depth - 1] : NULL;
        switch (ev.type) {
        case YAML_STREAM_END_EVENT:
            done = 1;
            break;
        case YAML_DOCUMENT_END_EVENT:
            done = 1; /* only the first document matters */
            break;
        case YAML_ALIAS_EVENT:
            snprintf(err, errlen, "%s:%d: YAML aliases are not supported", name, line);
            rc = TS_E_BAD_CONFIG;
            break;
        case YAML_SCALAR_EVENT: {
            const char *v = (const char *)ev.data.scalar.value;
            size_t vl = ev.data.scalar.length;
            if (!top) {
                /* a bare scalar document: only an empty one (null) is acceptable */
                if (vl && !(vl == 1 && v[0] == '~') && strcmp(v, "null")) {
                    snprintf(err, errlen, "%s:%d: expected a mapping at the top level", name, line);
                    rc = TS_E_BAD_CONFIG;
                }
                break;
            }
            if (top->is_map && top->want_key) {
                if (memchr(v, '\0', vl)) {
                    snprintf(err, errlen, "%s:%d: key contains a NUL byte", name, line);
                    rc = TS_E_BAD_CONFIG;
                    break;
                }
                top->key = xstrndup(v, vl);
                top->want_key = 0;
                break;
            }
            if (memchr(v, '\0', vl)) { /* "\0" in quotes: "1\0junk" must not read as 1 */
                snprintf(err, errlen, "%s:%d: value contains a NUL byte", name, line);
                rc = TS_E_BAD_CONFIG;
                break;
            }
            add_entry(out, &cap, next_path(top), v, vl, line);
            value_done(top);
            break;
        }
        case YAML_SEQUENCE_START_EVENT:
        case YAML_MAPPING_START_EVENT:
            if (top && top->is_map && top->want_key) {
                snprintf(err, errlen, "%s:%d: complex (non-scalar) keys are not supported", name,
                         line);
                rc = TS_E_BAD_CONFIG;
                break;
            }
            if (depth == YFLAT_MAX_DEPTH) {
                snprintf(err, errlen, "%s:%d: nesting deeper than %d levels", name, line,
                         YFLAT_MAX_DEPTH);
                rc = TS_E_BAD_CONFIG;
                break;
            }
            stack[depth].is_map = ev.type == YAML_MAPPING_START_EVENT;
            stack[depth].want_key = 1;
            stack[depth].index = 0;
            stack[depth].prefix = next_path(top);
            stack[depth].key = NULL;
            depth++;
            break;
        case YAML_SEQUENCE_END_EVENT:
        case YAML_MAPPING_END_EVENT:
            if (depth) {
                depth--;
                free(stack[depth].prefix);
                free(stack[depth].key);
                value_done(depth ? &stack[depth - 1] : NULL);
            }
            break;
        default:
            break;
        }
        yaml_event_delete(&ev);
        if (rc)
            break;
    }
    while (depth) {
        depth--;
        free(stack[depth].prefix);
        free(stack[depth].key);
    }
    yaml_parser_delete(&parser);
    if (rc)
        yflat_free(out);
    return rc;
}

int yflat_parse_file(const char *path, const char *name, struct yflat *out, char *err,
                     size_t errlen)
{
    out->e = NULL;
    out->n = 0;
    if (!name)
        name = path;
    struct buf b;
    buf_init(&b);
    int rc = buf_read_file(&b, path, YFLAT_MAX_BYTES);
    if (rc == TS_E_TOO_LARGE)
        snprintf(err, errlen, "%s: file larger than %u bytes", name, YFLAT_MAX_BYTES);
    else if (rc)
        snprintf(err, errlen, "%s: cannot open %s: %s", name, path, strerror(-rc));
    else
        rc = yflat_parse_string(b.data ? (const char *)b.data : "", b.len, name, out, err, errlen);
    buf_free(&b);
    return rc;
}

const struct yflat_entry *yflat_get(const struct yflat *y, const char *path)
{
    /* last occurrence wins, like a later duplicate key in a YAML mapping */
    for (size_t i = y->n; i-- > 0;)
        if (!strcmp(y->e[i].path, path))
            return &y->e[i];
    return NULL;
}

void yflat_free(struct yflat *y)
{
    for (size_t i = 0; i < y->n; i++) {
        free(y->e[i].path);
        free(y->e[i].value);
    }
    free(y->e);
    y->e = NULL;
    y->n = 0;
}
