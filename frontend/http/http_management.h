/*
 * http_management: TorchServe's REST management API on the management port (see the table at
 * the top of http_management.c); each route decodes its arguments and calls one mgmt_*
 * operation. Loop thread only.
 */
#ifndef TS_HTTP_MANAGEMENT_H
#define TS_HTTP_MANAGEMENT_H

#include "http_reply.h"

http_api_fn http_management_handle;

#endif
