/*
 * oip_pb: OIP requests and responses in their gRPC encoding (proto/oip_grpc.proto, protobuf-c):
 * a ModelInferRequest read into the transport-neutral struct oip_request (tensors in `contents`
 * or `raw_input_contents`, parameters as JSON), whose checks it shares with the REST encoding
 * (oip/oip_req.h); and a worker's result written as a ModelInferResponse. Loop thread only.
 */
#ifndef TS_OIP_PB_H
#define TS_OIP_PB_H

#include <stddef.h>
#include <stdint.h>

#include "oip/oip_req.h"
#include "oip_grpc.pb-c.h"
#include "util.h"

/* A parsed request. r points into the request message and into this struct: both must outlive
 * it. Zero it and buf_init(raw) before oip_pb_parse; free with oip_pb_req_free either way. */
struct oip_pb_req {
    struct oip_request r;
    struct buf raw; /* contents converted to raw tensors */
    size_t off[OIP_MAX_TENSORS];
    int from_raw[OIP_MAX_TENSORS];
    json_t *params;
    json_t *in_params[OIP_MAX_TENSORS];
    int raw_in; /* the request used raw_input_contents */
};

/* 0, or -1 with err naming the field (INVALID_ARGUMENT). */
int oip_pb_parse(const Inference__ModelInferRequest *q, struct oip_pb_req *ps, char *err,
                 size_t errlen);
void oip_pb_req_free(struct oip_pb_req *ps);

/* One ModelInferResponse and everything it points to (the strings given to init and the result's
 * tensors are borrowed: they must outlive the send). */
struct oip_pb_resp {
    Inference__ModelInferResponse m;
    Inference__ModelInferResponse__InferOutputTensor outs[OIP_MAX_TENSORS];
    Inference__ModelInferResponse__InferOutputTensor *outp[OIP_MAX_TENSORS];
    Inference__InferTensorContents contents[OIP_MAX_TENSORS];
    ProtobufCBinaryData raw[OIP_MAX_TENSORS];
    void *conv[OIP_MAX_TENSORS];
    Inference__ModelInferResponse__ParametersEntry pe;
    Inference__ModelInferResponse__ParametersEntry *pep;
    Inference__InferParameter pv;
    uint8_t textraw[4];
    struct buf textbuf;
};

void oip_pb_resp_init(struct oip_pb_resp *rs, const char *model_name, const char *model_version,
                      const char *id);
/* parameters {"triton_final_response": final} (Triton's decoupled streams). */
void oip_pb_resp_final_flag(struct oip_pb_resp *rs, int final);
/* The result's tensors as outputs: raw_output_contents when raw_out (the request was raw) or an
 * output is FP16/BF16 (contents cannot carry them), typed contents otherwise. */
void oip_pb_resp_tensors(struct oip_pb_resp *rs, int raw_out, const struct oip_result *r);
/* A text handler's chunk as the BYTES output "output" of shape [1]. */
void oip_pb_resp_text(struct oip_pb_resp *rs, int raw_out, const char *s, size_t n);
void oip_pb_resp_free(struct oip_pb_resp *rs);

#endif
