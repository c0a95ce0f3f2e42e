/*
 * grpc_status: TorchServe's HTTP -> gRPC status table (GRPCUtils.getGRPCStatusCode), declared
 * in grpc_server.h, with which the services answer the status a REST client would get; and the
 * other way, the Requests2XX/4XX/5XX class of a gRPC answer for /metrics.
 */
#include "grpc_server.h"

#include <grpc/grpc.h>

#include "core/core.h"

int grpc_status_from_http(int s)
{
    switch (s) {
    case 400:
        return GS_INVALID_ARGUMENT;
    case 401:
        return GS_UNAUTHENTICATED;
    case 403:
        return GS_PERMISSION_DENIED;
    case 404:
        return GS_NOT_FOUND;
    case 409:
        return GS_ABORTED;
    case 413:
    case 429:
        return GS_RESOURCE_EXHAUSTED;
    case 416:
        return GS_OUT_OF_RANGE;
    case 499:
        return GS_CANCELLED;
    case 501:
        return GS_UNIMPLEMENTED;
    case 503:
        return GS_UNAVAILABLE;
    case 504:
        return GS_DEADLINE_EXCEEDED;
    }
    if (s >= 200 && s < 300)
        return GS_OK;
    if (s >= 400 && s < 500)
        return GS_FAILED_PRECONDITION;
    if (s >= 500 && s < 600)
        return GS_INTERNAL;
    return GS_UNKNOWN;
}

/* Requests2XX/4XX/5XX count gRPC answers too: OK, the client's mistakes, the server's. */
void grpc_count_status(int code)
{
    switch (code) {
    case GRPC_STATUS_OK:
        srv->counters.requests_2xx++;
        break;
    case GRPC_STATUS_INVALID_ARGUMENT:
    case GRPC_STATUS_NOT_FOUND:
    case GRPC_STATUS_ALREADY_EXISTS:
    case GRPC_STATUS_PERMISSION_DENIED:
    case GRPC_STATUS_UNAUTHENTICATED:
    case GRPC_STATUS_FAILED_PRECONDITION:
    case GRPC_STATUS_OUT_OF_RANGE:
    case GRPC_STATUS_RESOURCE_EXHAUSTED:
    case GRPC_STATUS_CANCELLED:
    case GRPC_STATUS_ABORTED:
        srv->counters.requests_4xx++;
        break;
    default:
        srv->counters.requests_5xx++;
    }
}
