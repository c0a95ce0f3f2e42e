"""OIP over gRPC as TorchServe's and Triton's clients use it (issue 35, points 3 and 4), against
the real server and workers:

- Triton's example clients, in their shape (grpc_explicit_int_content_client.py,
  grpc_explicit_int8_content_client.py, grpc_client.py), with stubs generated from our
  proto/oip_grpc.proto (Triton's package, message names and field numbers): typed contents in,
  raw_output_contents[i] read back; their error checks (contents beside raw_input_contents, a
  bad version string) find Triton's words; ModelConfig answers;
- inference.GRPCInferenceService answers raw whatever the request used; TorchServe's own
  org.pytorch.serve.grpc.openinference.GRPCInferenceService answers in the request's form (typed
  contents, as TorchServe does);
- ModelStreamInfer marks its last response triton_final_response=true, also when the handler's
  last frame is empty;
- gRPC statuses kept on purpose (docs/grpc.md): a missing token is UNAUTHENTICATED, a request for
  an expired sequence FAILED_PRECONDITION (HTTP 410), not TorchServe's PERMISSION_DENIED / 503.
"""
import os
import struct
import sys
import time

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from conftest import PYSTUBS  # noqa: E402

sys.path.insert(0, PYSTUBS)
import grpc  # noqa: E402
import numpy as np  # noqa: E402
import oip_grpc_pb2 as service_pb2  # noqa: E402  (Triton's tritonclient.grpc.service_pb2)
import oip_grpc_pb2_grpc as service_pb2_grpc  # noqa: E402

TS_SVC = "/org.pytorch.serve.grpc.openinference.GRPCInferenceService/"

SIMPLE_YAML = """minWorkers: 1
maxWorkers: 1
batchSize: 4
maxBatchDelay: 5
handler:
  inputs: [{{name: INPUT0, datatype: {dt}, shape: [-1, 16]}}, {{name: INPUT1, datatype: {dt}, shape: [-1, 16]}}]
  outputs: [{{name: OUTPUT0, datatype: {dt}, shape: [-1, 16]}}, {{name: OUTPUT1, datatype: {dt}, shape: [-1, 16]}}]
"""

DENSE_YAML = """minWorkers: 1
maxWorkers: 1
handler:
  inputs: [{name: data_0, datatype: FP32, shape: [3, 224, 224]}]
  outputs: [{name: fc6_1, datatype: FP32, shape: [1000]}]
"""


class Simple(torch.nn.Module):
    """Triton's "simple" model: the sum and the difference of two tensors."""

    def forward(self, INPUT0, INPUT1):
        return INPUT0 + INPUT1, INPUT0 - INPUT1


class Dense(torch.nn.Module):
    """A stand-in for densenet_onnx with its tensor names: [3,224,224] -> [1000]."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.fc = torch.nn.Linear(3, 1000)

    def forward(self, data_0):
        return self.fc(data_0.mean(dim=(1, 2)))


def add_model(store, name, module, yaml):
    import json
    d = store / name
    (d / "MAR-INF").mkdir(parents=True)
    torch.jit.script(module.eval()).save(str(d / "model.pt"))
    (d / "MAR-INF" / "MANIFEST.json").write_text(json.dumps({"runtime": "python", "model": {
        "modelName": name, "serializedFile": "model.pt", "handler": "torchscript",
        "modelVersion": "1.0", "configFile": "model-config.yaml"}}))
    (d / "model-config.yaml").write_text(yaml)


@pytest.fixture(scope="module")
def triton_srv(tmp_path_factory):
    from conftest import start_server
    tmp = tmp_path_factory.mktemp("oipgrpc")
    store = tmp / "store"
    add_model(store, "simple", Simple(), SIMPLE_YAML.format(dt="INT32"))
    add_model(store, "simple_int8", Simple(), SIMPLE_YAML.format(dt="INT8"))
    add_model(store, "densenet_onnx", Dense(), DENSE_YAML)
    import shutil
    from conftest import MODEL_STORE
    shutil.copy(os.path.join(MODEL_STORE, "identity_text.mar"), store)
    srv = start_server(str(tmp), store=str(store),
                       models=["simple", "simple_int8", "densenet_onnx", "identity_text"],
                       yaml={})
    stub = service_pb2_grpc.GRPCInferenceServiceStub(
        grpc.insecure_channel(f"127.0.0.1:{srv.ports['grpc']}"))
    deadline = time.time() + 90
    for m in ("simple", "simple_int8", "densenet_onnx", "identity_text"):
        while not stub.ModelReady(service_pb2.ModelReadyRequest(name=m)).ready:
            assert time.time() < deadline, srv.log()[-3000:]
            time.sleep(0.2)
    yield srv, stub
    srv.stop()


def explicit_int_client(stub, model, datatype, np_dtype):
    """grpc_explicit_int(8)_content_client.py's request and its reading of the answer."""
    request = service_pb2.ModelInferRequest()
    request.model_name = model
    request.model_version = ""
    input0_data = [i for i in range(16)]
    input1_data = [1 for i in range(16)]
    input0 = service_pb2.ModelInferRequest().InferInputTensor()
    input0.name = "INPUT0"
    input0.datatype = datatype
    input0.shape.extend([1, 16])
    input0.contents.int_contents[:] = input0_data
    input1 = service_pb2.ModelInferRequest().InferInputTensor()
    input1.name = "INPUT1"
    input1.datatype = datatype
    input1.shape.extend([1, 16])
    input1.contents.int_contents[:] = input1_data
    request.inputs.extend([input0, input1])
    output0 = service_pb2.ModelInferRequest().InferRequestedOutputTensor()
    output0.name = "OUTPUT0"
    output1 = service_pb2.ModelInferRequest().InferRequestedOutputTensor()
    output1.name = "OUTPUT1"
    request.outputs.extend([output0, output1])
    response = stub.ModelInfer(request)
    output_results = []
    for index, output in enumerate(response.outputs):
        shape = list(output.shape)
        output_results.append(np.resize(
            np.frombuffer(response.raw_output_contents[index], dtype=np_dtype), shape))
    assert len(output_results) == 2
    for i in range(16):
        assert input0_data[i] + input1_data[i] == output_results[0][0][i]
        assert input0_data[i] - input1_data[i] == output_results[1][0][i]
    return request, input0_data


def test_triton_explicit_int_content_client(triton_srv):
    _, stub = triton_srv
    request, input0_data = explicit_int_client(stub, "simple", "INT32", np.int32)
    # "Populating additional content field should generate an error"
    request.raw_input_contents.extend([np.array(input0_data[0:8]).tobytes()])
    request.inputs[0].contents.int_contents[:] = input0_data[8:]
    with pytest.raises(grpc.RpcError) as e:
        stub.ModelInfer(request)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert ("contents field must not be specified when using "
            "raw_input_contents for 'INPUT0' for model 'simple'") in e.value.__str__()


def test_triton_explicit_int8_content_client(triton_srv):
    _, stub = triton_srv
    request, _ = explicit_int_client(stub, "simple_int8", "INT8", np.int8)
    # "Server should catch wrong model version specification"
    request.model_version = "wrong_specification"
    with pytest.raises(grpc.RpcError) as e:
        stub.ModelInfer(request)
    assert ("failed to get model version from specified version string "
            "'wrong_specification'") in e.value.__str__()


def test_triton_grpc_client_with_model_config(triton_srv):
    """grpc_client.py: health, metadata, ModelConfig, then a raw FP32 request."""
    _, stub = triton_srv
    model_name, model_version = "densenet_onnx", ""
    assert stub.ServerLive(service_pb2.ServerLiveRequest()).live
    assert stub.ServerReady(service_pb2.ServerReadyRequest()).ready
    assert stub.ModelReady(service_pb2.ModelReadyRequest(name=model_name,
                                                         version=model_version)).ready
    stub.ServerMetadata(service_pb2.ServerMetadataRequest())
    stub.ModelMetadata(service_pb2.ModelMetadataRequest(name=model_name, version=model_version))
    cfg = stub.ModelConfig(service_pb2.ModelConfigRequest(name=model_name,
                                                          version=model_version)).config
    assert cfg.name == "densenet_onnx" and cfg.platform == "pytorch_torchscript"
    assert cfg.backend == "pytorch" and cfg.max_batch_size == 0
    assert [(i.name, i.data_type, list(i.dims)) for i in cfg.input] == \
        [("data_0", service_pb2.TYPE_FP32, [3, 224, 224])]
    assert [(o.name, o.data_type, list(o.dims)) for o in cfg.output] == \
        [("fc6_1", service_pb2.TYPE_FP32, [1000])]
    assert cfg.instance_group[0].kind == service_pb2.ModelInstanceGroup.KIND_CPU
    assert cfg.instance_group[0].count == 1

    request = service_pb2.ModelInferRequest()
    request.model_name = model_name
    request.model_version = model_version
    request.id = "my request id"
    inp = service_pb2.ModelInferRequest().InferInputTensor()
    inp.name = "data_0"
    inp.datatype = "FP32"
    inp.shape.extend([3, 224, 224])
    request.inputs.extend([inp])
    out = service_pb2.ModelInferRequest().InferRequestedOutputTensor()
    out.name = "fc6_1"
    request.outputs.extend([out])
    raw = bytes(602112 * "a", "utf-8")
    request.raw_input_contents.extend([raw])
    response = stub.ModelInfer(request)
    assert response.id == "my request id" and response.outputs[0].name == "fc6_1"
    got = np.frombuffer(response.raw_output_contents[0], dtype=np.float32)
    x = torch.from_numpy(np.frombuffer(raw, dtype=np.float32).reshape(3, 224, 224).copy())
    want = Dense()(x).detach().numpy()
    assert np.abs(got - want).max() <= 1e-5 * max(1.0, float(np.abs(want).max()))


def test_model_config_of_a_batching_model(triton_srv):
    _, stub = triton_srv
    cfg = stub.ModelConfig(service_pb2.ModelConfigRequest(name="simple")).config
    # every declared tensor starts with -1: that is the batch dimension, left out of dims
    assert cfg.max_batch_size == 4
    assert [(i.name, i.data_type, list(i.dims)) for i in cfg.input] == \
        [("INPUT0", service_pb2.TYPE_INT32, [16]), ("INPUT1", service_pb2.TYPE_INT32, [16])]
    assert cfg.WhichOneof("scheduling_choice") == "dynamic_batching"
    assert cfg.dynamic_batching.max_queue_delay_microseconds == 5000
    with pytest.raises(grpc.RpcError) as e:
        stub.ModelConfig(service_pb2.ModelConfigRequest(name="nope"))
    assert e.value.code() == grpc.StatusCode.NOT_FOUND


def typed_simple_request(model="simple"):
    q = service_pb2.ModelInferRequest(model_name=model)
    for n, v in (("INPUT0", list(range(16))), ("INPUT1", [1] * 16)):
        t = q.inputs.add(name=n, datatype="INT32", shape=[1, 16])
        t.contents.int_contents.extend(v)
    return q


def test_answer_form_per_service_name(triton_srv):
    srv, stub = triton_srv
    ch = grpc.insecure_channel(f"127.0.0.1:{srv.ports['grpc']}")
    # Triton's / KServe's name: raw whatever the request used
    r = stub.ModelInfer(typed_simple_request())
    assert len(r.raw_output_contents) == 2 and not r.outputs[0].HasField("contents")
    assert list(struct.unpack("<16i", r.raw_output_contents[0])) == [i + 1 for i in range(16)]
    # TorchServe's name: the request's form (typed, as TorchServe answers)
    infer = ch.unary_unary(TS_SVC + "ModelInfer",
                           request_serializer=service_pb2.ModelInferRequest.SerializeToString,
                           response_deserializer=service_pb2.ModelInferResponse.FromString)
    r = infer(typed_simple_request(), timeout=30)
    assert not r.raw_output_contents
    assert list(r.outputs[1].contents.int_contents) == [i - 1 for i in range(16)]
    q = service_pb2.ModelInferRequest(model_name="simple")
    for n, v in (("INPUT0", list(range(16))), ("INPUT1", [1] * 16)):
        q.inputs.add(name=n, datatype="INT32", shape=[1, 16])
        q.raw_input_contents.append(struct.pack("<16i", *v))
    r = infer(q, timeout=30)
    assert list(struct.unpack("<16i", r.raw_output_contents[1])) == [i - 1 for i in range(16)]
    # the other rpcs of TorchServe's open_inference_grpc.proto
    live = ch.unary_unary(TS_SVC + "ServerLive",
                          request_serializer=service_pb2.ServerLiveRequest.SerializeToString,
                          response_deserializer=service_pb2.ServerLiveResponse.FromString)
    assert live(service_pb2.ServerLiveRequest(), timeout=10).live
    md = ch.unary_unary(TS_SVC + "ModelMetadata",
                        request_serializer=service_pb2.ModelMetadataRequest.SerializeToString,
                        response_deserializer=service_pb2.ModelMetadataResponse.FromString)
    assert md(service_pb2.ModelMetadataRequest(name="simple"), timeout=10).inputs[0].name == \
        "INPUT0"


def test_stream_final_flag_on_an_empty_last_frame(triton_srv):
    """identity_text ends every stream with an empty frame: the client still gets a last
    response with triton_final_response true (an empty one), and every earlier one false."""
    _, stub = triton_srv
    q = service_pb2.ModelInferRequest(model_name="identity_text", id="f1")
    q.inputs.add(name="prompt", datatype="BYTES", shape=[1]).contents.bytes_contents.append(
        b"one two three")
    resps = list(stub.ModelStreamInfer(iter([q]), timeout=30))
    finals = [r.infer_response.parameters["triton_final_response"].bool_param for r in resps]
    assert finals == [False, False, False, True], finals
    words = []
    for r in resps[:-1]:
        b = r.infer_response.raw_output_contents[0]
        words.append(b[4:4 + struct.unpack("<I", b[:4])[0]].decode())
    assert "".join(words) == "one two three"
    assert len(resps[-1].infer_response.outputs) == 0


# ---- point 4: the statuses kept, and why (docs/grpc.md) ----

def test_missing_token_is_unauthenticated(server_factory):
    srv = server_factory(models=["mlp"], config={"disable_token_authorization": "false"})
    ch = grpc.insecure_channel(f"127.0.0.1:{srv.ports['grpc']}")
    stub = service_pb2_grpc.GRPCInferenceServiceStub(ch)
    for call in (lambda: stub.ServerLive(service_pb2.ServerLiveRequest(), timeout=10),
                 lambda: stub.ModelInfer(typed_simple_request("mlp"), timeout=10)):
        with pytest.raises(grpc.RpcError) as e:
            call()
        assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert "Token Authorization failed" in e.value.details()


def test_expired_sequence_is_failed_precondition_not_unavailable(server_factory):
    import inference_pb2 as ipb
    import inference_pb2_grpc as igrpc
    srv = server_factory(models=["stateful"], yaml={"stateful": {
        "continuousBatching": False, "maxBatchDelay": 5, "sequenceMaxIdleMSec": 300}})
    st = igrpc.InferenceAPIsServiceStub(grpc.insecure_channel(f"127.0.0.1:{srv.ports['grpc']}"))

    def msg(v, sid):
        return ipb.PredictionsRequest(model_name="stateful", sequence_id=sid,
                                      input={"data": str(v).encode()})
    deadline = time.time() + 60
    while True:
        try:
            st.Predictions(msg(1, "warm"), timeout=10)
            break
        except grpc.RpcError:
            assert time.time() < deadline
            time.sleep(0.2)
    assert st.Predictions(msg(2, "idle-1"), timeout=10).prediction == b"2"
    time.sleep(1.0)  # past sequenceMaxIdleMSec
    with pytest.raises(grpc.RpcError) as e:
        st.Predictions(msg(3, "idle-1"), timeout=10)
    assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION, e.value
    assert "expired" in e.value.details()
    r = srv.post("/predictions/stateful", data="4", headers={"ts_request_sequence_id": "idle-1"})
    assert r.status_code == 410 and "expired" in r.json()["message"], r.text
