/*
 * grpc_status: TorchServe's HTTP -> gRPC status table (GRPCUtils.getGRPCStatusCode), declared
 * in grpc_server.h, with which the services answer the status a REST client would get; and the
 * other way, the Requests2XX/4XX/5XX class of a gRPC answer for /metrics; and the access-log
 * line of an answered call.
 */
#include "grpc_server.h"

#include <grpc/grpc.h>
#include <grpc/support/alloc.h>
#include <stdio.h>
#include <string.h>

#include "core/access_log.h"
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

/* by code: 0 OK ... 16 UNAUTHENTICATED */
static const char *const status_names[] = {
    "OK",        "CANCELLED",      "UNKNOWN",           "INVALID_ARGUMENT",   "DEADLINE_EXCEEDED",
    "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
    "ABORTED",   "OUT_OF_RANGE",   "UNIMPLEMENTED",     "INTERNAL",           "UNAVAILABLE",
    "DATA_LOSS", "UNAUTHENTICATED"};

void grpc_access(grpc_call *call, grpc_slice method, int64_t start_us, int code, size_t bytes,
                 const char *rid)
{
    if (!access_log_on())
        return;
    char *peer = call ? grpc_call_get_peer(call) : NULL;
    const char *client = peer ? peer : "";
    /* "ipv4:127.0.0.1:5000" -> "127.0.0.1:5000" */
    if (!strncmp(client, "ipv4:", 5) || !strncmp(client, "ipv6:", 5))
        client += 5;
    char target[256];
    size_t tl = GRPC_SLICE_LENGTH(method) < sizeof(target) - 1 ? GRPC_SLICE_LENGTH(method)
                                                               : sizeof(target) - 1;
    memcpy(target, GRPC_SLICE_START_PTR(method), tl);
    target[tl] = '\0';
    char num[24];
    const char *status = num;
    if (code >= 0 && code < (int)(sizeof(status_names) / sizeof(status_names[0])))
        status = status_names[code];
    else
        snprintf(num, sizeof(num), "%d", code);
    access_log_line(client, "POST", target, "HTTP/2", status, (long long)bytes, start_us, rid);
    gpr_free(peer);
}
