/*
 * http_stream: the HTTP reply sink of a job (see http_inference.c for the streaming rules).
 * Used by every HTTP inference entry point (TorchServe paths, OIP). Loop thread only.
 * The call owns the transport's job reference and frees itself once the reply is complete or
 * the client has gone.
 */
#ifndef TS_HTTP_STREAM_H
#define TS_HTTP_STREAM_H

#include <stddef.h>
#include <stdint.h>

#include "core/job.h"

struct evhttp_request;
struct evhttp_connection;
struct evbuffer_cb_entry;
struct event;
struct model;

enum http_stream_mode { HTTP_STREAM_AUTO, HTTP_STREAM_SSE, HTTP_STREAM_CHUNKED };

struct http_call;

/* Optional per-transport formatting (OIP): turns a frame's body into what goes on the wire.
 * Return a malloc'd buffer and its length, or NULL to send the body as is. */
typedef char *http_transform_fn(struct http_call *c, const struct otf_prediction *p, int final,
                                size_t *len);
/* Optional error body format for errors before the stream starts (default: TorchServe's). */
typedef char *http_error_body_fn(struct http_call *c, int status, const char *type,
                                 const char *msg);

struct http_call {
    struct evhttp_request *req;
    struct evhttp_connection *evcon;
    struct job *job;
    char rid[40];
    int sse;
    int started;
    uint64_t events;
    int64_t last_event_us;
    struct event *keepalive;
    http_transform_fn *transform;
    http_error_body_fn *error_body;
    void *arg; /* for transform / error_body */
    /* called with arg when the call is freed (may be NULL) */
    void (*arg_free)(void *arg);
    const char *ctype; /* content type override for whole replies (OIP: application/json) */
    /* OIP (MLServer's SSE framing): events are bare `data:` lines without `id:`; a frame with an
     * error status is an error (a plain JSON reply before the stream, `event: error` after) */
    int sse_bare;
    /* answer once, at the final frame: intermediate frames only go through transform, which
     * keeps what it needs (OIP /infer and /generate on a streaming handler) */
    int whole;
    /* with sse: transform and error_body return whole SSE events (`data: ...` lines and the
     * blank line), written as they are (the OpenAI API: its chunks, then `data: [DONE]`) */
    int sse_raw;
    /* set by transform: the reply ends with this frame although the job goes on (the OpenAI API
     * found a stop sequence); the job is then cancelled, which frees its place on the worker */
    int end_now;
    /* set by transform with end_now: the reply's HTTP status, in place of the frame's (a frame
     * the transform could not read is a 500 of ours); 0: the frame's */
    int status;
    /* backpressure: the connection's output passed stream_buffer_size, the job is paused */
    int paused;
    struct event *stall;                /* stream_stall_timeout without progress */
    struct evbuffer_cb_entry *drain_cb; /* on the connection's output buffer */
};

extern const struct job_sink http_call_sink;

struct http_call *http_call_new(struct evhttp_request *req, const char *rid,
                                enum http_stream_mode mode);
/* The job was queued: watch the connection for a client that goes away. */
void http_call_watch(struct http_call *c);
/* Frees a call whose reply was already sent (or never will be). */
void http_call_free(struct http_call *c);
/* Refuses a job before submission with status/type/msg (the transport's error format). */
void http_call_reject(struct http_call *c, int status, const char *type, const char *msg);

#endif
