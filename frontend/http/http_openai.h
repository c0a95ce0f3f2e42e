/*
 * http_openai: the OpenAI-compatible API on the inference port (docs/openai.md).
 *
 *   GET  /v1/models, /v1/models/{model}       the models whose model-config.yaml sets
 *                                             openai.enabled
 *   POST /v1/completions, /v1/chat/completions non-streaming, or SSE chunks and data: [DONE]
 *
 * and the same under TorchServe 0.12's URLs for its LLM handlers (the vLLM example):
 * /predictions/{model}/{version}/v1/models, .../v1/completions, .../v1/chat/completions, for a
 * model with openai.enabled (the URL names the model; other models get the path as url_path, as
 * before). A request becomes an OIP text request (oip/oip_req.h: the prompt in the model's
 * openai.promptInput, the sampling parameters as parameters) and its job streams back through
 * http_stream with http_openai_out's transform. Loop thread only.
 */
#ifndef TS_HTTP_OPENAI_H
#define TS_HTTP_OPENAI_H

struct evhttp_request;

/* Answers req when its path is one of the routes above: 1, else 0 (not an OpenAI route; the
 * caller routes it). Token authorization is checked here and refused in OpenAI's error shape. */
int http_openai_handle(struct evhttp_request *req);
/* Whether the request target (a URI from the request line) is an OpenAI route, so that a
 * refusal decided from the request's head (http_guard) answers in OpenAI's error shape. */
int http_openai_target(const char *uri);

#endif
