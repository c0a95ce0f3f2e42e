/*
 * http_management: the management API on port 8081 (TorchServe's REST paths).
 */
#include <event2/http.h>
#include <string.h>

#include "http_server.h"

void http_management_handle(struct evhttp_request *req)
{
    char rid[40];
    http_request_id(req, rid);
    http_send_error(req, rid, 404, "ResourceNotFoundException",
                    "Requested resource is not found, please refer to API document.");
}
