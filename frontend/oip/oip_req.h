/*
 * oip_req: the transport-independent half of the Open Inference Protocol (REST http_oip.c and
 * gRPC grpc_oip.c): a parsed OIP request becomes a job (body, sequence headers), a worker frame
 * becomes OIP outputs, and model metadata comes from model-config.yaml.
 *
 * Two kinds of job body, chosen per request:
 *  - tensors: the normalized payload of common/oip_wire.h (content type OIP_WIRE_CTYPE), for the
 *    torchscript handler (backend/handlers/oip.c) and any handler that reads that layout;
 *  - text: a request with a BYTES input, or the generate shape, goes to a text handler as the
 *    JSON body identity_text and char_lm read:
 *        {"text": T, "prompt": T, "max_new_tokens"?: N, "temperature"?: x, "stop"?: [...],
 *         "parameters"?: {...}}   (application/json)
 *    where T is text_input or the first element of the first BYTES input, and N is the
 *    parameter max_tokens (OIP generate) or max_new_tokens. The handler's chunks (text) come
 *    back as a BYTES output "output" of shape [1], or as text_output for generate.
 * Models of other servers' contracts (an MLServer runtime, an Inferless app: handler "mlserver"
 * or "inferless", mgmt/model_kind.h) always get tensors, BYTES ones too, and two more header
 * keys: "stream": true on infer_stream / generate_stream / ModelStreamInfer (the runtime then
 * streams: predict_stream, an Inferless stream), and "generate": true for the generate shape,
 * whose text is then the one BYTES input "text_input" (the runtime maps it to its prompt input
 * and answers text, which becomes text_output).
 *
 * Loop thread only.
 */
#ifndef TS_OIP_REQ_H
#define TS_OIP_REQ_H

#include <stddef.h>

#include "oip_wire.h"

struct model;
struct job;
struct otf_prediction;
typedef struct json_t json_t;

/* What a transport hands over once it has parsed the request. Everything is borrowed. */
struct oip_request {
    const char *id;     /* request id to echo, NULL if none */
    json_t *parameters; /* request parameters (an object), NULL if none */
    struct oip_tensor inputs[OIP_MAX_TENSORS];
    size_t n_inputs;
    const char *outputs[OIP_MAX_TENSORS]; /* requested outputs, none = all */
    size_t n_outputs;
    int generate;           /* the generate shape: text_input + parameters */
    int stream;             /* the call streams its answer (set by the transport) */
    const char *text_input; /* generate only */
    size_t text_len;
};

/* The checks every transport makes of input i once it has read its datatype and shape:
 * the element count exists and fits max_request_size. *numel gets it and sh the shape's text
 * for later messages. 0, or -1 with err naming inputs[i]. */
int oip_req_check_shape(const struct oip_tensor *t, size_t i, int64_t *numel, char *sh,
                        size_t shlen, char *err, size_t errlen);
/* The data of input i was converted from the transport's encoding (JSON numbers, protobuf
 * contents) into raw at off[i] when from_raw[i]: points those inputs into raw, once it has
 * stopped growing (it may have moved). */
void oip_req_point_inputs(struct oip_request *r, const struct buf *raw, const size_t *off,
                          const int *from_raw);

/* Checks r against the model and adds the job's body parameter and its sequence headers.
 * *text = 1 when the request went out as text. 0, or -1 with err = a client-facing message
 * naming the field (HTTP 400 / INVALID_ARGUMENT). */
int oip_req_to_job(struct model *m, const struct oip_request *r, struct job *j, int *text,
                   char *err, size_t errlen);

/* The model serves another server's contract (handler "mlserver" or "inferless"). */
int oip_req_runtime(const struct model *m);
/* The model reads a stream of requests in one call (an MLServer runtime's predict_stream): a
 * gRPC ModelStreamInfer call is then one job, and its later messages are fed to it. */
int oip_req_reads_stream(const struct model *m);
/* One later message of such a call: checked as a request is, then fed to j (job_feed). 0, or
 * -1 with err naming the field. */
int oip_req_feed(const struct oip_request *r, struct job *j, char *err, size_t errlen);

/* A worker frame read as OIP. */
struct oip_result {
    int status;  /* the frame's status; >= 400: error holds the message */
    char *error; /* malloc'd, or NULL */
    /* text handlers (any body that is not an OIP payload): the chunk */
    int is_text;
    const char *text;
    size_t text_len;
    /* tensor handlers */
    json_t *header;     /* owned (NULL when the fast scan read the header) */
    char *hbuf;         /* owned: the header's copy the fast scan's names point into */
    json_t *parameters; /* borrowed from header, NULL if none */
    struct oip_tensor outputs[OIP_MAX_TENSORS];
    size_t n_outputs;
};

/* Always fills r; a frame that claims to be an OIP payload but is not gives status 500. */
void oip_req_result(const struct otf_prediction *p, struct oip_result *r);
void oip_req_result_free(struct oip_result *r);

/* {"name","versions","platform","inputs","outputs"} for GET /v2/models/{m} and ModelMetadata:
 * tensors from model-config.yaml `handler.inputs` / `handler.outputs` (lists of {name, datatype,
 * shape}); text handlers default to BYTES prompt -> BYTES output. */
json_t *oip_req_metadata(struct model *m);
/* The yaml declares no inputs and the handler is torchscript: ask the worker (forward()'s
 * argument names). */
int oip_req_metadata_from_worker(const struct model *m, json_t *md);
/* Makes j a metadata request (see OIP_WIRE_META_CTYPE). */
void oip_req_metadata_job(struct job *j);
/* Merges the worker's metadata answer into md (left as is when the answer is unusable). */
void oip_req_metadata_merge(json_t *md, const struct otf_prediction *p);
/* "pytorch_torchscript" for TorchScript handlers, "torchserve-c_<handler>" otherwise. */
const char *oip_req_platform(const struct model *m);
/* Readiness is the core's one rule: model_ready, model_server_ready (core/model.h). */
/* {"name","version","extensions"} */
json_t *oip_req_server_metadata(void);

#endif
