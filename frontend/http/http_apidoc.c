/*
 * http_apidoc: the API description of the inference, management and metrics ports (see
 * http_apidoc.h).
 */
#include "http_apidoc.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "http_guard.h"
#include "http_reply.h"
#include "mgmt/auth.h"
#include "util.h"

/* A compact OpenAPI 3 document: every path with its methods and parameters. */
static json_t *op_doc(const char *summary, const char *params_csv)
{
    json_t *o = json_object();
    json_object_set_new(o, "summary", json_string(summary));
    json_t *ps = json_array();
    if (params_csv) {
        char *copy = xstrdup(params_csv), *save = NULL;
        for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
            int in_path = t[0] == '{';
            char *name = in_path ? xstrndup(t + 1, strlen(t) - 2) : xstrdup(t);
            json_t *p = json_object();
            json_object_set_new(p, "name", json_string(name));
            json_object_set_new(p, "in", json_string(in_path ? "path" : "query"));
            json_object_set_new(p, "required", json_boolean(in_path || !strcmp(name, "url")));
            json_t *sch = json_object();
            json_object_set_new(sch, "type", json_string("string"));
            json_object_set_new(p, "schema", sch);
            json_array_append_new(ps, p);
            free(name);
        }
        free(copy);
    }
    json_object_set_new(o, "parameters", ps);
    return o;
}

void http_api_description(struct evhttp_request *req, const char *rid, int scope)
{
    int management = scope == AUTH_MANAGEMENT, metrics = scope == HTTP_NO_TOKEN;
    json_t *doc = json_object();
    json_object_set_new(doc, "openapi", json_string("3.0.1"));
    json_t *info = json_object();
    json_object_set_new(info, "title",
                        json_string(management ? "TorchServe-c Management APIs"
                                    : metrics  ? "TorchServe-c Metrics APIs"
                                               : "TorchServe-c Inference APIs"));
    json_object_set_new(info, "version", json_string("0.1.0"));
    json_object_set_new(doc, "info", info);
    json_t *paths = json_object();
    json_t *p;
    if (management) {
        p = json_object();
        json_object_set_new(p, "get", op_doc("List registered models", "limit,next_page_token"));
        json_object_set_new(p, "post",
                            op_doc("Register a model",
                                   "url,model_name,handler,runtime,batch_size,max_batch_delay,"
                                   "initial_workers,synchronous,response_timeout,"
                                   "startup_timeout"));
        json_object_set_new(paths, "/models", p);
        p = json_object();
        json_object_set_new(p, "get",
                            op_doc("Describe the default version", "{model_name},customized"));
        json_object_set_new(p, "put",
                            op_doc("Scale the default version's workers",
                                   "{model_name},min_worker,max_worker,synchronous"));
        json_object_set_new(p, "delete", op_doc("Unregister the default version", "{model_name}"));
        json_object_set_new(paths, "/models/{model_name}", p);
        p = json_object();
        json_object_set_new(
            p, "get",
            op_doc("Describe a version (or all)", "{model_name},{model_version},customized"));
        json_object_set_new(
            p, "put",
            op_doc("Scale a version's workers",
                   "{model_name},{model_version},min_worker,max_worker,synchronous"));
        json_object_set_new(p, "delete",
                            op_doc("Unregister a version", "{model_name},{model_version}"));
        json_object_set_new(paths, "/models/{model_name}/{model_version}", p);
        p = json_object();
        json_object_set_new(p, "put",
                            op_doc("Set the default version", "{model_name},{model_version}"));
        json_object_set_new(paths, "/models/{model_name}/{model_version}/set-default", p);
        p = json_object();
        json_object_set_new(p, "get", op_doc("Rotate a key (needs the API key)", "type"));
        json_object_set_new(paths, "/token", p);
    } else if (metrics) {
        p = json_object();
        json_object_set_new(p, "get",
                            op_doc("The metrics in Prometheus text format 0.0.4", "name[]"));
        json_object_set_new(paths, "/metrics", p);
    } else {
        p = json_object();
        json_object_set_new(p, "get", op_doc("Health", NULL));
        json_object_set_new(paths, "/ping", p);
        p = json_object();
        json_object_set_new(p, "post", op_doc("Predict with the default version", "{model_name}"));
        json_object_set_new(paths, "/predictions/{model_name}", p);
        p = json_object();
        json_object_set_new(p, "post",
                            op_doc("Predict with a version", "{model_name},{model_version}"));
        json_object_set_new(paths, "/predictions/{model_name}/{model_version}", p);
        p = json_object();
        json_object_set_new(p, "post", op_doc("Explain with the default version", "{model_name}"));
        json_object_set_new(paths, "/explanations/{model_name}", p);
        /* the OpenAI-compatible API (http_openai.c, docs/openai.md) */
        p = json_object();
        json_object_set_new(p, "get", op_doc("Models served on the OpenAI API", NULL));
        json_object_set_new(paths, "/v1/models", p);
        p = json_object();
        json_object_set_new(p, "post", op_doc("OpenAI completions", NULL));
        json_object_set_new(paths, "/v1/completions", p);
        p = json_object();
        json_object_set_new(p, "post", op_doc("OpenAI chat completions", NULL));
        json_object_set_new(paths, "/v1/chat/completions", p);
    }
    p = json_object();
    json_object_set_new(p, "options", op_doc("This document", NULL));
    json_object_set_new(paths, "/", p);
    json_object_set_new(doc, "paths", paths);
    http_send_json(req, rid, 200, doc);
}
