/*
 * http_inference: TorchServe's inference API on the inference port (GET /ping, POST
 * /predictions/{model}[/{version}[/{path}]], /explanations/...) and, under /v2, the Open
 * Inference Protocol (http_oip). Loop thread only.
 */
#ifndef TS_HTTP_INFERENCE_H
#define TS_HTTP_INFERENCE_H

#include "http_reply.h"

http_api_fn http_inference_handle;

#endif
