/*
 * oip (worker side): OIP tensor requests (common/oip_wire.h payloads) for the torchscript
 * handler. Inputs map to forward() arguments by name or by position, against the model's
 * declared tensors (model-config.yaml):
 *
 *     handler:
 *       inputs:  [{name: input__0, datatype: FP32, shape: [-1, 64]}]
 *       outputs: [{name: output__0, datatype: FP32, shape: [-1, 10]}]
 *
 * or, without that list, against forward()'s argument names. -1 in a declared shape matches any
 * size. Outputs (forward's result flattened depth-first) are named from `handler.outputs`, else
 * output__0, output__1, ... (Triton's convention for TorchScript). Requests whose inputs agree in
 * datatypes and in every dimension but the first run as one forward, concatenated along dim 0.
 *
 * Worker thread only (the worker is single-threaded).
 */
#ifndef TS_HANDLER_OIP_H
#define TS_HANDLER_OIP_H

#include <stddef.h>

#include "torch/torch_shim.h"

struct ts_ctx;
struct oip_model;

/* Reads the declared tensors; NULL after ts_set_load_error() when they are malformed. */
struct oip_model *oip_model_new(struct ts_ctx *ctx, struct tsh_model *m);
void oip_model_free(struct oip_model *om);

/* 1 if request idx carries an OIP tensor payload. */
int oip_is_request(struct ts_ctx *ctx, size_t idx);

/* Answers the OIP requests idx[0..n) of this step. */
void oip_handle(struct ts_ctx *ctx, struct oip_model *om, struct tsh_model *m, const size_t *idx,
                size_t n);

#endif
