/*
 * grpc_status: TorchServe's HTTP -> gRPC status table (GRPCUtils.getGRPCStatusCode), declared
 * in grpc_server.h; the services answer with the status a REST client would get, mapped.
 */
#include "grpc_server.h"

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
