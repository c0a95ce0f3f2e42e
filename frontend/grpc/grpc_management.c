/*
 * grpc_management: TorchServe's ManagementAPIsService (port 7071). Each rpc decodes its request
 * into the transport-independent operation of management.h and answers one ManagementResponse
 * whose msg is what the operation reports (a status sentence, or the JSON document of list and
 * describe). Failures become gRPC statuses through grpc_status_from_http (NOT_FOUND,
 * INVALID_ARGUMENT, PERMISSION_DENIED "Model API disabled", INTERNAL, ...). A synchronous register
 * or scale answers once its workers are up; a client that goes away first detaches with
 * mgmt_op_cancel (the workers keep starting). Loop thread only.
 */
#include <stdlib.h>
#include <string.h>

#include "grpc_server.h"
#include "log.h"
#include "mgmt/management.h"
#include "management.pb-c.h"
#include "util.h"

struct mcall {
    struct gcall *g;
    struct mgmt_op *op; /* a pending operation, NULL once done */
    int returned;       /* the mgmt_* call has returned */
    int finished;       /* done ran */
};

static void on_done(void *arg, int http_status, const char *type, const char *msg)
{
    struct mcall *c = arg;
    if (http_status < 400) {
        Org__Pytorch__Serve__Grpc__Management__ManagementResponse r =
            ORG__PYTORCH__SERVE__GRPC__MANAGEMENT__MANAGEMENT_RESPONSE__INIT;
        r.msg = (char *)(msg ? msg : "");
        gcall_send_finish(c->g, &r.base, GS_OK, NULL);
    } else {
        /* TorchServe's ManagementImpl: the model API switched off is PERMISSION_DENIED */
        const char *m = msg;
        int code = grpc_status_from_http(http_status);
        if (http_status == 405 && type && !strcmp(type, "MethodNotAllowedException")) {
            m = "Model API disabled; " MGMT_MODEL_API_HOW;
            code = GS_PERMISSION_DENIED;
        }
        LOG_INFO("grpc management call %s: %d %s: %s", gcall_id(c->g), http_status,
                 type ? type : "", m ? m : "");
        gcall_finish(c->g, code, m);
    }
    c->finished = 1;
    c->op = NULL;
    if (c->returned)
        free(c);
}

static struct mcall *mcall_new(struct gcall *g)
{
    struct mcall *c = xcalloc(1, sizeof(*c));
    c->g = g;
    gcall_set_user(g, c);
    return c;
}

/* After the mgmt_* call returned op: keep c for a pending operation, else free it. */
static void mcall_started(struct mcall *c, struct mgmt_op *op)
{
    c->returned = 1;
    if (c->finished) {
        free(c);
        return;
    }
    if (!op) { /* the operation neither completed nor stayed pending: never leave a client hanging
                */
        gcall_finish(c->g, GS_INTERNAL, "management operation lost");
        free(c);
        return;
    }
    c->op = op;
}

static void mgmt_cancel(struct gcall *g)
{
    struct mcall *c = gcall_user(g);
    if (!c)
        return;
    if (c->op)
        mgmt_op_cancel(c->op);
    free(c);
}

static void bad_request(struct gcall *g, const char *what)
{
    char msg[128];
    snprintf(msg, sizeof(msg), "Cannot parse the %s", what);
    gcall_finish(g, GS_INVALID_ARGUMENT, msg);
}

static const char *str(const char *s)
{
    return s && *s ? s : NULL;
}

static void describe_message(struct gcall *g, const uint8_t *data, size_t len)
{
    Org__Pytorch__Serve__Grpc__Management__DescribeModelRequest *r =
        org__pytorch__serve__grpc__management__describe_model_request__unpack(NULL, len, data);
    if (!r)
        return bad_request(g, "DescribeModelRequest");
    struct mcall *c = mcall_new(g);
    mcall_started(c,
                  mgmt_describe(r->model_name, str(r->model_version), r->customized, on_done, c));
    org__pytorch__serve__grpc__management__describe_model_request__free_unpacked(r, NULL);
}

static void list_message(struct gcall *g, const uint8_t *data, size_t len)
{
    Org__Pytorch__Serve__Grpc__Management__ListModelsRequest *r =
        org__pytorch__serve__grpc__management__list_models_request__unpack(NULL, len, data);
    if (!r)
        return bad_request(g, "ListModelsRequest");
    struct mcall *c = mcall_new(g);
    mcall_started(c, mgmt_list(r->limit, r->next_page_token, on_done, c));
    org__pytorch__serve__grpc__management__list_models_request__free_unpacked(r, NULL);
}

static void register_message(struct gcall *g, const uint8_t *data, size_t len)
{
    Org__Pytorch__Serve__Grpc__Management__RegisterModelRequest *r =
        org__pytorch__serve__grpc__management__register_model_request__unpack(NULL, len, data);
    if (!r)
        return bad_request(g, "RegisterModelRequest");
    struct mgmt_register_args a;
    mgmt_register_from_grpc(&a, r->url, r->model_name, r->handler, r->runtime, r->batch_size,
                            r->max_batch_delay, r->initial_workers, r->synchronous,
                            r->response_timeout, r->startup_timeout, r->s3_sse_kms);
    struct mcall *c = mcall_new(g);
    mcall_started(c, mgmt_register(&a, on_done, c));
    org__pytorch__serve__grpc__management__register_model_request__free_unpacked(r, NULL);
}

static void scale_message(struct gcall *g, const uint8_t *data, size_t len)
{
    Org__Pytorch__Serve__Grpc__Management__ScaleWorkerRequest *r =
        org__pytorch__serve__grpc__management__scale_worker_request__unpack(NULL, len, data);
    if (!r)
        return bad_request(g, "ScaleWorkerRequest");
    struct mgmt_scale_args a;
    mgmt_scale_from_grpc(&a, r->model_name, r->model_version, r->min_worker, r->max_worker,
                         r->synchronous, r->number_gpu, r->timeout);
    struct mcall *c = mcall_new(g);
    mcall_started(c, mgmt_scale(&a, on_done, c));
    org__pytorch__serve__grpc__management__scale_worker_request__free_unpacked(r, NULL);
}

static void set_default_message(struct gcall *g, const uint8_t *data, size_t len)
{
    Org__Pytorch__Serve__Grpc__Management__SetDefaultRequest *r =
        org__pytorch__serve__grpc__management__set_default_request__unpack(NULL, len, data);
    if (!r)
        return bad_request(g, "SetDefaultRequest");
    struct mcall *c = mcall_new(g);
    mcall_started(c, mgmt_set_default(r->model_name, r->model_version, on_done, c));
    org__pytorch__serve__grpc__management__set_default_request__free_unpacked(r, NULL);
}

static void unregister_message(struct gcall *g, const uint8_t *data, size_t len)
{
    Org__Pytorch__Serve__Grpc__Management__UnregisterModelRequest *r =
        org__pytorch__serve__grpc__management__unregister_model_request__unpack(NULL, len, data);
    if (!r)
        return bad_request(g, "UnregisterModelRequest");
    struct mcall *c = mcall_new(g);
    mcall_started(c, mgmt_unregister(r->model_name, str(r->model_version), on_done, c));
    org__pytorch__serve__grpc__management__unregister_model_request__free_unpacked(r, NULL);
}

#define MANAGEMENT_SVC "/org.pytorch.serve.grpc.management.ManagementAPIsService/"

const struct grpc_method grpc_management_methods[] = {
    {MANAGEMENT_SVC "DescribeModel", 0, describe_message, NULL, mgmt_cancel,
     &org__pytorch__serve__grpc__management__describe_model_request__descriptor},
    {MANAGEMENT_SVC "ListModels", 0, list_message, NULL, mgmt_cancel,
     &org__pytorch__serve__grpc__management__list_models_request__descriptor},
    {MANAGEMENT_SVC "RegisterModel", 0, register_message, NULL, mgmt_cancel,
     &org__pytorch__serve__grpc__management__register_model_request__descriptor},
    {MANAGEMENT_SVC "ScaleWorker", 0, scale_message, NULL, mgmt_cancel,
     &org__pytorch__serve__grpc__management__scale_worker_request__descriptor},
    {MANAGEMENT_SVC "SetDefault", 0, set_default_message, NULL, mgmt_cancel,
     &org__pytorch__serve__grpc__management__set_default_request__descriptor},
    {MANAGEMENT_SVC "UnregisterModel", 0, unregister_message, NULL, mgmt_cancel,
     &org__pytorch__serve__grpc__management__unregister_model_request__descriptor},
    {NULL, 0, NULL, NULL, NULL, NULL},
};
