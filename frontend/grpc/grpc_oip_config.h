/*
 * grpc_oip_config: Triton's ModelConfig rpc on inference.GRPCInferenceService, answered from
 * what torchserve-c knows of a model: its name, platform and backend, the tensors its
 * model-config.yaml declares (handler.inputs / handler.outputs, as OIP metadata reports them),
 * the batch size and delay, sequence batching, and its workers as a CPU instance group.
 * Triton's clients read it (tritonclient's get_model_config, perf_analyzer, the example
 * grpc_client.py). Loop thread only; nothing is kept after the call.
 */
#ifndef TS_GRPC_OIP_CONFIG_H
#define TS_GRPC_OIP_CONFIG_H

struct gcall;
struct model;

/* Sends m's ModelConfigResponse and finishes the call with OK. */
void grpc_oip_config_send(struct gcall *c, struct model *m);

#endif
