/*
 * metrics_config: see metrics_config.h. libyaml's document loader resolves the aliases that
 * TorchServe's metrics.yaml uses for its dimension names; the tree is then walked section by
 * section: {ts_metrics|model_metrics: {counter|gauge|histogram: [{name, unit, dimensions}]}}.
 */
#include "metrics_config.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "util.h"

#define METRICS_YAML_MAX (1u << 20)

struct walk {
    yaml_document_t *doc;
    const char *path;
    char *err;
    size_t errlen;
};

static int bad(struct walk *w, const yaml_node_t *n, const char *fmt, const char *what)
{
    char msg[256];
    snprintf(msg, sizeof(msg), fmt, what);
    snprintf(w->err, w->errlen, "%s:%lu: %s", w->path,
             n ? (unsigned long)n->start_mark.line + 1 : 0, msg);
    return TS_E_BAD_CONFIG;
}

static yaml_node_t *node(struct walk *w, int id)
{
    return yaml_document_get_node(w->doc, id);
}

static const char *scalar(const yaml_node_t *n)
{
    return n && n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : NULL;
}

/* The value of key in mapping m, or NULL. */
static yaml_node_t *get(struct walk *w, yaml_node_t *m, const char *key)
{
    for (yaml_node_pair_t *p = m->data.mapping.pairs.start; p < m->data.mapping.pairs.top; p++) {
        const char *k = scalar(node(w, p->key));
        if (k && !strcmp(k, key))
            return node(w, p->value);
    }
    return NULL;
}

static int kind_of(const char *s, char *kind)
{
    for (const char *k = "cgh"; *k; k++)
        if (!strcmp(s, metrics_kind_name(*k))) {
            *kind = *k;
            return 0;
        }
    return -1;
}

/* One metric entry {name, unit, dimensions} of a section. */
static int entry(struct walk *w, yaml_node_t *e, char kind, int model, struct model_metrics *mm,
                 struct metrics_config *mc)
{
    if (e->type != YAML_MAPPING_NODE)
        return bad(w, e, "%s: expected a mapping {name, unit, dimensions}", "metric");
    const char *name = scalar(get(w, e, "name"));
    if (!name || !*name)
        return bad(w, e, "%s: missing name", "metric");
    yaml_node_t *un = get(w, e, "unit");
    const char *unit = un ? scalar(un) : "";
    if (!unit)
        return bad(w, un, "%s: unit: expected a string", name);
    const char *dims[MODEL_METRICS_DIMS_MAX + 1];
    size_t nd = 0;
    yaml_node_t *dn = get(w, e, "dimensions");
    if (dn && !(dn->type == YAML_SCALAR_NODE && !*scalar(dn))) {
        if (dn->type != YAML_SEQUENCE_NODE)
            return bad(w, dn, "%s: dimensions: expected a list of names", name);
        for (yaml_node_item_t *i = dn->data.sequence.items.start; i < dn->data.sequence.items.top;
             i++) {
            const char *d = scalar(node(w, *i));
            if (!d)
                return bad(w, node(w, *i), "%s: dimensions: expected names", name);
            if (nd == MODEL_METRICS_DIMS_MAX)
                return bad(w, dn, "%s: more than 8 dimensions", name);
            dims[nd++] = d;
        }
    }
    if (!model) {
        mc->ts_names = xrealloc(mc->ts_names, (mc->n_ts + 1) * sizeof(*mc->ts_names));
        mc->ts_names[mc->n_ts++] = xstrdup(name);
        return 0;
    }
    char why[256];
    if (model_metrics_declare(mm, kind, name, unit, dims, nd, why, sizeof(why)))
        return bad(w, e, "%s", why);
    return 0;
}

static int section(struct walk *w, yaml_node_t *s, int model, struct model_metrics *mm,
                   struct metrics_config *mc)
{
    const char *sname = model ? "model_metrics" : "ts_metrics";
    if (s->type == YAML_SCALAR_NODE && !*scalar(s))
        return 0; /* an empty section */
    if (s->type != YAML_MAPPING_NODE)
        return bad(w, s, "%s: expected counter, gauge and histogram lists", sname);
    for (yaml_node_pair_t *p = s->data.mapping.pairs.start; p < s->data.mapping.pairs.top; p++) {
        const char *t = scalar(node(w, p->key));
        char kind;
        if (!t || kind_of(t, &kind))
            return bad(w, node(w, p->key), "%s: metric type must be counter, gauge or histogram",
                       sname);
        yaml_node_t *list = node(w, p->value);
        if (list->type == YAML_SCALAR_NODE && !*scalar(list))
            continue;
        if (list->type != YAML_SEQUENCE_NODE)
            return bad(w, list, "%s: expected a list of metrics", t);
        for (yaml_node_item_t *i = list->data.sequence.items.start;
             i < list->data.sequence.items.top; i++) {
            int rc = entry(w, node(w, *i), kind, model, mm, mc);
            if (rc)
                return rc;
        }
    }
    return 0;
}

int metrics_config_load(const char *path, struct model_metrics *mm, struct metrics_config *mc,
                        metrics_config_warn_fn *warn, void *warn_arg, char *err, size_t errlen)
{
    memset(mc, 0, sizeof(*mc));
    struct buf b;
    buf_init(&b);
    int rc = buf_read_file(&b, path, METRICS_YAML_MAX);
    if (rc) {
        snprintf(err, errlen, "%s: %s", path,
                 rc == TS_E_TOO_LARGE ? "larger than 1 MiB" : strerror(-rc));
        buf_free(&b);
        return rc == TS_E_TOO_LARGE ? TS_E_BAD_CONFIG : rc;
    }
    yaml_parser_t parser;
    yaml_document_t doc;
    yaml_parser_initialize(&parser);
    yaml_parser_set_input_string(&parser, b.data ? b.data : (const unsigned char *)"", b.len);
    if (!yaml_parser_load(&parser, &doc)) {
        snprintf(err, errlen, "%s:%lu: %s", path, (unsigned long)parser.problem_mark.line + 1,
                 parser.problem ? parser.problem : "not valid YAML");
        yaml_parser_delete(&parser);
        buf_free(&b);
        return TS_E_BAD_CONFIG;
    }
    struct walk w = {&doc, path, err, errlen};
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    rc = 0;
    if (!root || root->type != YAML_MAPPING_NODE) {
        rc = bad(&w, root, "%s: expected a mapping (dimensions, ts_metrics, model_metrics)",
                 "metrics.yaml");
    } else {
        for (yaml_node_pair_t *p = root->data.mapping.pairs.start;
             !rc && p < root->data.mapping.pairs.top; p++) {
            const char *k = scalar(node(&w, p->key));
            if (k && !strcmp(k, "model_metrics"))
                rc = section(&w, node(&w, p->value), 1, mm, mc);
            else if (k && !strcmp(k, "ts_metrics"))
                rc = section(&w, node(&w, p->value), 0, mm, mc);
            else if (!(k && !strcmp(k, "dimensions")) && warn) {
                char msg[512];
                snprintf(msg, sizeof(msg), "%s:%lu: unknown section '%s' (ignored)", path,
                         (unsigned long)node(&w, p->key)->start_mark.line + 1, k ? k : "?");
                warn(msg, warn_arg);
            }
        }
    }
    yaml_document_delete(&doc);
    yaml_parser_delete(&parser);
    buf_free(&b);
    return rc;
}

int metrics_config_ts_declared(const struct metrics_config *mc, const char *name)
{
    for (size_t i = 0; i < mc->n_ts; i++)
        if (!strcmp(mc->ts_names[i], name))
            return 1;
    return 0;
}

char *metrics_config_worker_json(const struct model_metrics *mm)
{
    json_t *a = json_array();
    for (size_t i = 0; i < mm->n; i++) {
        const struct mm_metric *m = &mm->v[i];
        if (!m->declared)
            continue;
        json_t *dims = json_array();
        for (size_t d = 0; d < m->n_dims; d++)
            json_array_append_new(dims, json_string(m->dims[d]));
        json_array_append_new(a, json_pack("{s:s, s:s, s:s, s:o}", "name", m->name, "unit", m->unit,
                                           "type", metrics_kind_name(m->kind), "dimensions", dims));
    }
    char *s = json_dumps(a, JSON_COMPACT);
    json_decref(a);
    return s;
}

void metrics_config_free(struct metrics_config *mc)
{
    for (size_t i = 0; i < mc->n_ts; i++)
        free(mc->ts_names[i]);
    free(mc->ts_names);
    memset(mc, 0, sizeof(*mc));
}
