/*
 * http_apidoc: TorchServe's API description (OPTIONS / and GET /api-description, no token), on
 * every port, as TorchServe's ApiDescriptionRequestHandler: a compact OpenAPI 3 document of the
 * port's paths. Loop thread only.
 */
#ifndef TS_HTTP_APIDOC_H
#define TS_HTTP_APIDOC_H

struct evhttp_request;

/* scope: the port's (AUTH_INFERENCE, AUTH_MANAGEMENT, or HTTP_NO_TOKEN for the metrics port) */
void http_api_description(struct evhttp_request *req, const char *rid, int scope);

#endif
