/*
 * grpc_bare: the baseline of grpc_bench.sh, a bare gRPC C core server that answers every unary
 * call with the same fixed message (a PredictionResponse the size of mlp's answer), with no
 * decoding, no model and no hand-off between threads: one thread runs the completion queue.
 *
 *   grpc_bare HOST:PORT SECONDS
 *
 * Per call: {SEND_INITIAL_METADATA, RECV_MESSAGE}, then {SEND_MESSAGE, SEND_STATUS_FROM_SERVER,
 * RECV_CLOSE_ON_SERVER}. Exits after SECONDS (or when killed). Linked with the frontend's
 * grpc_absl.cpp: the same gRPC core as torchserve-c's, without Abseil's debug-only mutex
 * deadlock detection.
 */
#include <grpc/byte_buffer.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ARMED 64

void grpc_absl_release_mode(void); /* frontend/grpc/grpc_absl.cpp */

enum stage { NEW, RECEIVED, DONE };

struct call {
    grpc_call *call;
    grpc_call_details details;
    grpc_metadata_array md;
    grpc_byte_buffer *req, *resp;
    int cancelled;
    enum stage stage;
};

static grpc_server *server;
static grpc_completion_queue *cq;
static grpc_slice answer;

static void arm(void)
{
    struct call *c = calloc(1, sizeof(*c));
    grpc_call_details_init(&c->details);
    grpc_metadata_array_init(&c->md);
    c->stage = NEW;
    grpc_server_request_call(server, &c->call, &c->details, &c->md, cq, cq, c);
}

static void release(struct call *c)
{
    if (c->req)
        grpc_byte_buffer_destroy(c->req);
    if (c->resp)
        grpc_byte_buffer_destroy(c->resp);
    grpc_call_details_destroy(&c->details);
    grpc_metadata_array_destroy(&c->md);
    if (c->call)
        grpc_call_unref(c->call);
    free(c);
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s HOST:PORT SECONDS\n", argv[0]);
        return 2;
    }
    /* a PredictionResponse{prediction = 130 bytes}, like mlp's JSON list of 10 logits */
    char msg[132];
    msg[0] = 0x0a;
    msg[1] = 130;
    memset(msg + 2, '7', 130);
    answer = grpc_slice_from_copied_buffer(msg, sizeof(msg));

    grpc_absl_release_mode();
    grpc_init();
    server = grpc_server_create(NULL, NULL);
    cq = grpc_completion_queue_create_for_next(NULL);
    grpc_server_register_completion_queue(server, cq, NULL);
    grpc_server_credentials *cr = grpc_insecure_server_credentials_create();
    if (!grpc_server_add_http2_port(server, argv[1], cr)) {
        fprintf(stderr, "grpc_bare: cannot bind %s\n", argv[1]);
        return 1;
    }
    grpc_server_credentials_release(cr);
    grpc_server_start(server);
    for (int i = 0; i < ARMED; i++)
        arm();
    printf("listening\n");
    fflush(stdout);
    gpr_timespec end =
        gpr_time_add(gpr_now(GPR_CLOCK_REALTIME),
                     gpr_time_from_millis((int64_t)(atof(argv[2]) * 1000), GPR_TIMESPAN));
    for (;;) {
        grpc_event ev = grpc_completion_queue_next(cq, end, NULL);
        if (ev.type == GRPC_QUEUE_TIMEOUT)
            break;
        if (ev.type != GRPC_OP_COMPLETE)
            continue;
        struct call *c = ev.tag;
        grpc_op ops[3];
        memset(ops, 0, sizeof(ops));
        if (!ev.success) {
            release(c);
            continue;
        }
        switch (c->stage) {
        case NEW:
            arm();
            c->stage = RECEIVED;
            ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
            ops[1].op = GRPC_OP_RECV_MESSAGE;
            ops[1].data.recv_message.recv_message = &c->req;
            grpc_call_start_batch(c->call, ops, 2, c, NULL);
            break;
        case RECEIVED: {
            c->stage = DONE;
            grpc_slice s = grpc_slice_ref(answer);
            c->resp = grpc_raw_byte_buffer_create(&s, 1);
            grpc_slice_unref(s);
            ops[0].op = GRPC_OP_SEND_MESSAGE;
            ops[0].data.send_message.send_message = c->resp;
            ops[1].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
            ops[1].data.send_status_from_server.status = GRPC_STATUS_OK;
            ops[2].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
            ops[2].data.recv_close_on_server.cancelled = &c->cancelled;
            grpc_call_start_batch(c->call, ops, 3, c, NULL);
            break;
        }
        case DONE:
            release(c);
            break;
        }
    }
    grpc_server_shutdown_and_notify(server, cq, NULL);
    grpc_server_cancel_all_calls(server);
    for (;;) {
        grpc_event ev = grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
        if (ev.type == GRPC_OP_COMPLETE && ev.tag == NULL)
            break;
        if (ev.type == GRPC_OP_COMPLETE)
            release(ev.tag);
    }
    grpc_server_destroy(server);
    grpc_completion_queue_shutdown(cq);
    while (grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
           GRPC_QUEUE_SHUTDOWN)
        ;
    grpc_completion_queue_destroy(cq);
    grpc_slice_unref(answer);
    grpc_shutdown();
    return 0;
}
