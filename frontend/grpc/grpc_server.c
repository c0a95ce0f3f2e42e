/*
 * grpc_server: gRPC C core servers on the loop thread: they arm and accept calls, check their
 * authorization and method, and hand every completion to the per-call state machine
 * (grpc_call.c).
 *
 * Threads: gRPC's completion queue is driven by grpc_drive.c, from the loop thread where gRPC's
 * poller can be watched, else by a completion-queue thread that hands completions over; either
 * way every completion is handled here on the loop thread (handle), next to the models and jobs
 * the services touch: the call state machine takes no lock.
 * A call with a single request message sends its initial metadata with its first answer, in
 * one write instead of two; until then a service may add entries to it (gcall_add_metadata),
 * e.g. the sequence id a balancer in front learns from the answer's headers.
 *
 * Calls that fail authorization or name an unknown method are answered without the service.
 */
#include "grpc_server.h"

#include <event2/event.h>
#include <grpc/grpc.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/conn_budget.h"
#include "core/core.h"
#include "grpc_accept.h"
#include "grpc_call.h"
#include "grpc_drive.h"
#include "log.h"
#include "mgmt/auth.h"
#include "util.h"

/* requests armed per server: new calls wait in gRPC only if this many arrive in one loop turn */
#define ARMED_CALLS 32

/* What gRPC core 1.51 lets a server bound before a call is authorized (docs/grpc.md, "Limits"):
 * streams at once on one connection (its default is unlimited), the request headers, and the
 * time a connection may take for its TLS and HTTP/2 handshakes (default 120 s). Connections are
 * bounded by the connection budget (grpc_accept.h). */
#define GRPC_MAX_STREAMS 128
#define GRPC_MAX_METADATA (8 * 1024) /* gRPC's own default, said explicitly */
#define GRPC_HANDSHAKE_MS 10000
/* gRPC buffers a whole message before max_receive_message_length refuses it (1.51 has no hook
 * on a message's length prefix): a memory quota over everything its transports hold bounds
 * that. Over it, gRPC resets the streams that hold the most (RST_STREAM ENHANCE_YOUR_CALM, the
 * client's RESOURCE_EXHAUSTED). At least GRPC_QUOTA_MIN, and room for a few messages of
 * max_request_size. */
#define GRPC_QUOTA_MIN (64L << 20)
#define GRPC_QUOTA_MESSAGES 4

static struct {
    int started;
    grpc_completion_queue *cq;
    struct gsrv srv[2];
    int n_srv;
    grpc_resource_quota *quota;
} G;

static grpc_arg int_arg(const char *key, int value)
{
    grpc_arg a;
    a.type = GRPC_ARG_INTEGER;
    a.key = (char *)key;
    a.value.integer = value;
    return a;
}

static void arm_new_call(struct gsrv *s)
{
    struct gcall *c = gcall_new(s);
    grpc_call_error e =
        grpc_server_request_call(s->server, &c->call, &c->details, &c->md, G.cq, G.cq, &c->t_new);
    if (e != GRPC_CALL_OK) {
        LOG_ERROR("grpc %s: request_call failed: %d", s->name, (int)e);
        gcall_release(c);
    }
}

static void on_new(struct gcall *c, int success)
{
    struct gsrv *s = c->srv;
    if (!success) { /* shutting down: the armed request is returned unused */
        return;
    }
    if (!s->shut_down)
        arm_new_call(s);
    gcall_begin(c);

    for (const struct grpc_method *m = s->methods; m->path; m++)
        if (grpc_slice_str_cmp(c->details.method, m->path) == 0)
            c->method = m;
    /* the inference port also serves OIP's GRPCInferenceService (grpc_oip.c), under Triton's
     * and KServe's name and under TorchServe's */
    const struct grpc_method *oip[2] = {NULL, NULL};
    if (s->methods == grpc_inference_methods) {
        oip[0] = grpc_oip_methods;
        oip[1] = grpc_oip_ts_methods;
    }
    for (int t = 0; t < 2; t++)
        for (const struct grpc_method *m = oip[t]; m && !c->method && m->path; m++)
            if (grpc_slice_str_cmp(c->details.method, m->path) == 0)
                c->method = m;
    if (auth_check(s->scope, gcall_metadata(c, "authorization")) != 0) {
        LOG_INFO("grpc %s call %s: token authorization failed", s->name, c->id);
        gcall_reject(c, GRPC_STATUS_UNAUTHENTICATED, AUTH_FAIL_MSG);
        return;
    }
    if (!c->method) {
        char *path = grpc_slice_to_c_string(c->details.method);
        LOG_INFO("grpc %s call %s: unknown method %s", s->name, c->id, path);
        gpr_free(path);
        gcall_reject(c, GRPC_STATUS_UNIMPLEMENTED, "Method not found");
        return;
    }
    gcall_own(c);
}

static void handle(void *tag, int success)
{
    struct gtag *t = tag;
    if (t->kind == TAG_SHUTDOWN) {
        struct gsrv *s = (struct gsrv *)((char *)t - offsetof(struct gsrv, shutdown_tag));
        s->shut_down = 2;
        return;
    }
    if (t->kind == TAG_NEW)
        on_new(t->call, success);
    else
        gcall_completed(t, success);
    gcall_release(t->call);
}

/* ---- start / stop ---- */

static int add_server(struct gsrv *s, const char *name, const char *addr, int port,
                      const struct grpc_method *methods, enum auth_scope scope)
{
    s->name = name;
    s->methods = methods;
    s->scope = scope;
    s->shutdown_tag = (struct gtag){NULL, TAG_SHUTDOWN};
    grpc_arg arg[10];
    size_t n = 0;
    arg[n++] = int_arg(GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, srv->cfg.max_request_size > 0x7fffffff
                                                                ? 0x7fffffff
                                                                : (int)srv->cfg.max_request_size);
    /* gRPC binds with SO_REUSEPORT by default: a second server on a taken port would then
     * silently share it instead of failing */
    arg[n++] = int_arg(GRPC_ARG_ALLOW_REUSEPORT, 0);
    arg[n++] = int_arg(GRPC_ARG_MAX_CONCURRENT_STREAMS, GRPC_MAX_STREAMS);
    arg[n++] = int_arg(GRPC_ARG_MAX_METADATA_SIZE, GRPC_MAX_METADATA);
    arg[n++] = int_arg(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS, GRPC_HANDSHAKE_MS);
    arg[n].type = GRPC_ARG_POINTER;
    arg[n].key = (char *)GRPC_ARG_RESOURCE_QUOTA;
    arg[n].value.pointer.p = G.quota;
    arg[n++].value.pointer.vtable = grpc_resource_quota_arg_vtable();
    /* TorchServe's grpc_*_max_connection_age(_grace)_ms: clients reconnect (and rebalance) */
    size_t which = scope == AUTH_MANAGEMENT;
    int age = srv->cfg.grpc_max_connection_age_ms[which];
    int grace = srv->cfg.grpc_max_connection_age_grace_ms[which];
    if (age > 0)
        arg[n++] = int_arg(GRPC_ARG_MAX_CONNECTION_AGE_MS, age);
    if (grace > 0)
        arg[n++] = int_arg(GRPC_ARG_MAX_CONNECTION_AGE_GRACE_MS, grace);
    grpc_channel_args args = {n, arg};
    s->server = grpc_server_create(&args, NULL);
    grpc_server_register_completion_queue(s->server, G.cq, NULL);
    const char *host = addr && *addr ? addr : "127.0.0.1";
    char *target = strchr(host, ':') && host[0] != '[' ? xasprintf("[%s]:%d", host, port)
                                                       : xasprintf("%s:%d", host, port);
    grpc_server_credentials *creds = grpc_server_credentials_from_config();
    if (!creds) {
        free(target);
        grpc_server_destroy(s->server);
        s->server = NULL;
        return -1;
    }
    int bound = grpc_server_add_http2_port(s->server, target, creds);
    grpc_server_credentials_release(creds);
    if (bound == 0) {
        LOG_ERROR("gRPC %s API: cannot bind %s", name, target);
        fprintf(stderr, "torchserve-c: gRPC %s API: cannot bind %s\n", name, target);
        free(target);
        grpc_server_destroy(s->server);
        s->server = NULL;
        return -1;
    }
    grpc_accept_watch_port(bound);
    grpc_server_start(s->server);
    for (int i = 0; i < ARMED_CALLS; i++)
        arm_new_call(s);
    LOG_INFO("gRPC %s API listening on %s", name, target);
    free(target);
    return 0;
}

int grpc_servers_start(void)
{
    if (!srv->cfg.enable_grpc)
        return 0;
    grpc_drive_init();
    grpc_accept_init();
    long quota = GRPC_QUOTA_MESSAGES * srv->cfg.max_request_size;
    if (quota < GRPC_QUOTA_MIN)
        quota = GRPC_QUOTA_MIN;
    G.quota = grpc_resource_quota_create("torchserve-c");
    grpc_resource_quota_resize(G.quota, (size_t)quota);
    LOG_INFO("gRPC: at most %d streams per connection, %d connections, %ld MiB held by its "
             "transports",
             GRPC_MAX_STREAMS, conn_budget_grpc_max(), quota >> 20);
    G.cq = grpc_completion_queue_create_for_next(NULL);
    gcall_setup();
    G.started = 1;
    G.n_srv = 0;
    if (add_server(&G.srv[G.n_srv], "inference", srv->cfg.grpc_inference_address,
                   srv->cfg.grpc_inference_port, grpc_inference_methods, AUTH_INFERENCE) != 0)
        return -1;
    G.n_srv++;
    if (add_server(&G.srv[G.n_srv], "management", srv->cfg.grpc_management_address,
                   srv->cfg.grpc_management_port, grpc_management_methods, AUTH_MANAGEMENT) != 0)
        return -1;
    G.n_srv++;
    return grpc_drive_start(G.cq, G.n_srv, handle);
}

static int stop_done(void)
{
    for (int i = 0; i < G.n_srv; i++)
        if (G.srv[i].shut_down != 2)
            return 0;
    return gcall_live() == 0;
}

void grpc_servers_stop(void)
{
    if (!G.started)
        return;
    G.started = 0;
    grpc_drive_stop();
    for (int i = 0; i < G.n_srv; i++) {
        G.srv[i].shut_down = 1;
        grpc_server_shutdown_and_notify(G.srv[i].server, G.cq, &G.srv[i].shutdown_tag);
        grpc_server_cancel_all_calls(G.srv[i].server);
    }
    /* the loop no longer runs: a call the services hold ends through its close's cancellation */
    gcall_close_all();
    /* the loop no longer runs: handle completions here until every call is gone */
    for (;;) {
        gcall_flush_released(); /* services may finish calls while they are cancelled */
        if (stop_done())
            break;
        grpc_event ev = grpc_completion_queue_next(
            G.cq,
            gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_millis(100, GPR_TIMESPAN)),
            NULL);
        if (ev.type == GRPC_OP_COMPLETE)
            handle(ev.tag, ev.success);
    }
    for (int i = 0; i < G.n_srv; i++)
        grpc_server_destroy(G.srv[i].server);
    grpc_completion_queue_shutdown(G.cq);
    while (grpc_completion_queue_next(G.cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL).type !=
           GRPC_QUEUE_SHUTDOWN)
        ;
    grpc_completion_queue_destroy(G.cq);
    if (G.quota)
        grpc_resource_quota_unref(G.quota);
    G.quota = NULL;
    grpc_accept_shutdown();
    gcall_teardown();
    grpc_shutdown();
    LOG_INFO("gRPC servers stopped");
}
