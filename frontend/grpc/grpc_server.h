/*
 * grpc_server: the two gRPC servers (InferenceAPIsService on grpc_inference_address:port, 7070;
 * ManagementAPIsService on grpc_management_address:port, 7071) on gRPC C core, and the call
 * machinery the services in grpc_inference.c / grpc_management.c are written against.
 *
 * Threads: gRPC's sockets are polled from the loop thread (see grpc_server.c), so every
 * service callback and every gcall_* function runs on the loop thread, and services may touch
 * jobs and models freely. grpc_servers_start/stop run on the loop thread.
 *
 * A service sees a call as a `struct gcall`: it gets each request message (on_message), the
 * client's half-close (client-streaming methods), and on_cancel if the call ends before the
 * service finished it (client cancel, deadline, disconnect, shutdown). The service answers with
 * gcall_send (queued, sent in order, one SEND_MESSAGE in flight) and ends with gcall_finish
 * (the status goes out after the queued messages). After gcall_finish or on_cancel the service
 * must forget the call once its current callback returns (until then the gcall stays valid, e.g.
 * for a redundant gcall_finish); the gcall itself is freed by this module once gRPC is done
 * with it.
 */
#ifndef TS_GRPC_SERVER_H
#define TS_GRPC_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <protobuf-c/protobuf-c.h>

struct gcall;

struct grpc_method {
    const char *path;  /* "/package.Service/Method" */
    int client_stream; /* several request messages (bidi): on_half_close ends them */
    /* One request message; the bytes are valid during the call only. */
    void (*on_message)(struct gcall *c, const uint8_t *data, size_t len);
    /* Client-streaming methods: the client will send nothing more. */
    void (*on_half_close)(struct gcall *c);
    /* The call is over before gcall_finish: stop work (job_cancel) and forget c. May be NULL. */
    void (*on_cancel)(struct gcall *c);
    /* The request message's type: its string fields, nested ones included, are checked for NUL
     * bytes (protobuf-c hands strings over as C strings, which would end at the first NUL and
     * turn "victim\0junk" into "victim"; pb_req.h). NULL: no check. */
    const ProtobufCMessageDescriptor *input;
};

/* The services (NULL path terminates each table). */
extern const struct grpc_method grpc_inference_methods[];
extern const struct grpc_method grpc_management_methods[];
/* inference.GRPCInferenceService (OIP, grpc_oip.c), served on the inference port too, and the
 * same rpcs under TorchServe's name, org.pytorch.serve.grpc.openinference.GRPCInferenceService */
extern const struct grpc_method grpc_oip_methods[];
extern const struct grpc_method grpc_oip_ts_methods[];

/* gRPC status codes used by the services (the values of grpc_status_code). */
enum {
    GS_OK = 0,
    GS_CANCELLED = 1,
    GS_UNKNOWN = 2,
    GS_INVALID_ARGUMENT = 3,
    GS_DEADLINE_EXCEEDED = 4,
    GS_NOT_FOUND = 5,
    GS_ALREADY_EXISTS = 6,
    GS_PERMISSION_DENIED = 7,
    GS_RESOURCE_EXHAUSTED = 8,
    GS_FAILED_PRECONDITION = 9,
    GS_ABORTED = 10,
    GS_OUT_OF_RANGE = 11,
    GS_UNIMPLEMENTED = 12,
    GS_INTERNAL = 13,
    GS_UNAVAILABLE = 14,
    GS_UNAUTHENTICATED = 16,
};

/* Binds and starts both servers when enable_grpc is true; 0, or -1 after logging why. Must run
 * before any fork (workers are posix_spawn'ed, so that holds). */
int grpc_servers_start(void);
/* Cancels every call (services get on_cancel), waits for them to end, destroys the servers and
 * shuts gRPC down. Call before models and workers go away. No-op if not started. */
void grpc_servers_stop(void);

/* Queues one response message (packed now). -1 if the call is already over. */
int gcall_send(struct gcall *c, const ProtobufCMessage *msg);
/* Ends the call with code and message (NULL = none) once the queued messages are out. */
void gcall_finish(struct gcall *c, int code, const char *msg);
/* gcall_send + gcall_finish in one batch: the last message goes out with the status (a unary
 * answer costs one write instead of two). */
void gcall_send_finish(struct gcall *c, const ProtobufCMessage *msg, int code, const char *text);
/* Client-streaming methods: stop (hold = 1) or resume (0) reading request messages, e.g. while
 * too many requests wait for the model. */
void gcall_hold_recv(struct gcall *c, int hold);
/* Backpressure for streams: when more than stream_buffer_size bytes of answers wait for a
 * client that does not read, cb(c, 1) asks the service to pause its work (job_pause); cb(c, 0)
 * when half of that is left. A client that takes nothing for stream_stall_timeout seconds while
 * over the limit has its call cancelled (RESOURCE_EXHAUSTED; on_cancel follows). */
typedef void gcall_backlog_fn(struct gcall *c, int paused);
void gcall_set_backlog_cb(struct gcall *c, gcall_backlog_fn *cb);
/* Per-call state of the service. */
void *gcall_user(const struct gcall *c);
void gcall_set_user(struct gcall *c, void *user);
/* Adds key: value to the call's initial metadata (the answer's headers), which goes out with
 * the first answer of a call with one request message. -1 (nothing added) once it has gone out
 * (always, for client-streaming calls), past GCALL_MAX_METADATA entries, or for a key outside
 * [0-9a-z_.-] or a value outside printable ASCII. */
#define GCALL_MAX_METADATA 2
int gcall_add_metadata(struct gcall *c, const char *key, const char *value);
/* Adds key: value to the call's trailing metadata, which goes out with its status. -1 (nothing
 * added) once the status is queued, past GCALL_MAX_TRAILERS entries, or for a key or value as
 * gcall_add_metadata refuses them. */
#define GCALL_MAX_TRAILERS 2
int gcall_add_trailer(struct gcall *c, const char *key, const char *value);
/* Client metadata value for key (lower case), NULL if absent. Valid for the call's life. */
const char *gcall_metadata(struct gcall *c, const char *key);
/* A short id for log lines. */
const char *gcall_id(const struct gcall *c);

/* TorchServe's HTTP -> gRPC status table (GRPCUtils.getGRPCStatusCode). */
/* Counts a call's final status in Requests2XX/4XX/5XX (srv->counters), as HTTP answers are. */
void grpc_count_status(int code);
/* The access-log line of an answered call (grpc_status.c): bytes of response messages sent. */
void grpc_access(grpc_call *call, grpc_slice method, int64_t start_us, int code, size_t bytes,
                 const char *rid);
int grpc_status_from_http(int http_status);

/* grpc_tls.c: insecure credentials, or TLS from certificate_file and private_key_file when
 * enable_grpc_ssl is set (the files were checked at start, http_tls); NULL (logged) if a file
 * cannot be read. */
grpc_server_credentials *grpc_server_credentials_from_config(void);

#endif
