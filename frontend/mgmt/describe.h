/*
 * describe: the JSON documents of GET /models (list) and GET /models/{name}[/{version}]
 * (describe), shared by REST and gRPC. Loop thread only (they read the registry). Each builder
 * returns a new reference the caller owns; describe_text consumes one.
 */
#ifndef TS_DESCRIBE_H
#define TS_DESCRIBE_H

#include <jansson.h>

struct model;

/* The document as both transports send it: 2-space indent, trailing newline (malloc'd). */
char *describe_text(json_t *o);
/* {"nextPageToken"?, "models": [{modelName, modelUrl}]}: the default version of each name,
 * sorted by name. limit > 100 or < 0 is 100; a negative token is 0. */
json_t *describe_list(int limit, int next_page_token);
/* One model as TorchServe describes it, workers and queue included. */
json_t *describe_model(const struct model *m);
/* Every version of name, sorted by version. */
json_t *describe_versions(const char *name);

#endif
