"""Open Inference Protocol (issue 6): REST (/v2), SSE infer_stream / generate_stream in MLServer's
framing, Triton's binary tensor extension, and gRPC inference.GRPCInferenceService.
"""
import json
import os
import struct
import sys
import threading
import time

import pytest
import requests
import torch

from conftest import MODEL_STORE, PYSTUBS, mar_module, oip_text, torchscript_store

# MLServer's docs/examples/streaming/generate-request.json
MLSERVER_STREAM_REQUEST = {
    "inputs": [
        {
            "name": "prompt",
            "shape": [1],
            "datatype": "BYTES",
            "data": ["What is the capital of France?"],
            "parameters": {"content_type": "str"},
        }
    ],
    "outputs": [{"name": "output"}],
}
WORDS = ["What", " is", " the", " capital", " of", " France?"]


def sse_events(resp):
    """Parses a text/event-stream body into (event, data) pairs; checks MLServer's framing:
    every event is exactly `data: <json>` followed by a blank line (no id:)."""
    events = []
    for block in resp.text.split("\n\n"):
        if not block.strip():
            continue
        lines = block.split("\n")
        ev, data = None, []
        for ln in lines:
            if ln.startswith(":"):
                continue
            key, _, val = ln.partition(": ")
            assert key in ("data", "event"), f"unexpected SSE line {ln!r}"
            if key == "event":
                ev = val
            else:
                data.append(val)
        if data:
            events.append((ev, "\n".join(data)))
    return events


def check_oip_response(o, model, name="output"):
    assert o["model_name"] == model
    assert "model_version" in o and "id" in o
    outs = o["outputs"]
    assert isinstance(outs, list) and outs
    for t in outs:
        assert {"name", "datatype", "shape", "data"} <= set(t)
    return outs


def mlp_torch(x):
    """What torch computes for the archived mlp (the model.pt inside model-store/mlp.mar)."""
    m = mar_module("mlp")
    with torch.no_grad():
        return m(torch.tensor(x, dtype=torch.float32)).numpy()


@pytest.fixture(scope="module")
def x2():
    g = torch.Generator().manual_seed(7)
    return torch.randn(2, 64, generator=g).tolist()


@pytest.fixture
def text_srv(server_factory):
    srv = server_factory(models=["identity_text"], yaml={"identity_text": {"handler": {"delay_ms": 20}}})
    srv.wait_ready("identity_text")
    return srv


@pytest.fixture
def mlp_srv(server_factory):
    srv = server_factory(models=["mlp"])
    srv.wait_ready("mlp", body={"json": {"data": [0.0] * 64}})
    return srv


# ---------------------------------------------------------------- REST: health and metadata

@pytest.mark.smoke
def test_health_and_metadata(mlp_srv):
    srv = mlp_srv
    assert srv.get("/v2/health/live").json() == {"live": True}
    r = srv.get("/v2/health/ready")
    assert r.status_code == 200 and r.json() == {"ready": True}
    md = srv.get("/v2").json()
    assert md["name"] and md["version"] and "binary_tensor_data" in md["extensions"]
    r = srv.get("/v2/models/mlp")
    assert r.status_code == 200
    assert r.json() == {
        "name": "mlp", "versions": ["1.0"], "platform": "pytorch_torchscript",
        "inputs": [{"name": "input__0", "datatype": "FP32", "shape": [-1, 64]}],
        "outputs": [{"name": "output__0", "datatype": "FP32", "shape": [-1, 10]}],
    }
    assert srv.get("/v2/models/mlp/versions/1.0").json()["name"] == "mlp"
    assert srv.get("/v2/models/mlp/ready").json() == {"name": "mlp", "ready": True}
    assert srv.get("/v2/models/mlp/versions/1.0/ready").status_code == 200
    r = srv.get("/v2/models/nope")
    assert r.status_code == 404 and "nope" in r.json()["error"]
    r = srv.get("/v2/models/mlp/versions/9.9/ready")
    assert r.status_code == 404 and "9.9" in r.json()["error"]


# ---------------------------------------------------------------- REST: tensors

@pytest.mark.smoke
def test_mlp_json_matches_torch(mlp_srv, x2):
    want = mlp_torch(x2)
    # MLServer's request shape: flat data, one named input
    flat = [v for row in x2 for v in row]
    body = {"id": "req-1", "parameters": {"foo": "bar"},
            "inputs": [{"name": "input__0", "shape": [2, 64], "datatype": "FP32", "data": flat}]}
    r = mlp_srv.post("/v2/models/mlp/infer", json=body)
    assert r.status_code == 200, r.text
    assert r.headers["Content-Type"].startswith("application/json")
    o = r.json()
    assert o["id"] == "req-1" and o["model_name"] == "mlp" and o["model_version"] == "1.0"
    (out,) = o["outputs"]
    assert out["name"] == "output__0" and out["datatype"] == "FP32" and out["shape"] == [2, 10]
    assert torch.allclose(torch.tensor(out["data"]).reshape(2, 10), torch.tensor(want), atol=1e-5)
    # the same request where the fast reader steps aside (an escape, non-ASCII): same answer
    body = {"id": "r\u00e9q\n", "inputs": [{"name": "input__0", "shape": [2, 64],
                                            "datatype": "FP32", "data": flat}]}
    r = mlp_srv.post("/v2/models/mlp/infer", data=json.dumps(body, ensure_ascii=False).encode())
    assert r.status_code == 200, r.text
    assert r.json()["id"] == "r\u00e9q\n" and r.json()["outputs"] == o["outputs"]
    # nested data, unnamed-by-position input name, versioned path
    body = {"inputs": [{"name": "x", "shape": [2, 64], "datatype": "FP32", "data": x2}]}
    r = mlp_srv.post("/v2/models/mlp/versions/1.0/infer", json=body)
    assert r.status_code == 200, r.text
    got = torch.tensor(r.json()["outputs"][0]["data"]).reshape(2, 10)
    assert torch.allclose(got, torch.tensor(want), atol=1e-5)


@pytest.mark.smoke
def test_mlp_binary_extension_matches_torch(mlp_srv, x2):
    want = mlp_torch(x2)
    raw = struct.pack("<128f", *[v for row in x2 for v in row])
    hdr = json.dumps({
        "inputs": [{"name": "input__0", "shape": [2, 64], "datatype": "FP32",
                    "parameters": {"binary_data_size": len(raw)}}],
        "outputs": [{"name": "output__0", "parameters": {"binary_data": True}}],
    }).encode()
    r = mlp_srv.post("/v2/models/mlp/infer", data=hdr + raw,
                     headers={"Inference-Header-Content-Length": str(len(hdr)),
                              "Content-Type": "application/octet-stream"})
    assert r.status_code == 200, r.text
    n = int(r.headers["Inference-Header-Content-Length"])
    o = json.loads(r.content[:n])
    (out,) = o["outputs"]
    assert out["parameters"]["binary_data_size"] == 80 and "data" not in out
    got = torch.tensor(struct.unpack("<20f", r.content[n:])).reshape(2, 10)
    assert torch.allclose(got, torch.tensor(want), atol=1e-5)
    # binary input, JSON output
    hdr = json.dumps({"inputs": [{"name": "input__0", "shape": [2, 64], "datatype": "FP32",
                                  "parameters": {"binary_data_size": len(raw)}}]}).encode()
    r = mlp_srv.post("/v2/models/mlp/infer", data=hdr + raw,
                     headers={"Inference-Header-Content-Length": str(len(hdr))})
    assert r.status_code == 200, r.text
    got = torch.tensor(r.json()["outputs"][0]["data"]).reshape(2, 10)
    assert torch.allclose(got, torch.tensor(want), atol=1e-5)


@pytest.mark.smoke
def test_bad_requests(mlp_srv):
    srv = mlp_srv

    def err(path, status, *words, **kw):
        r = srv.post(path, **kw)
        assert r.status_code == status, r.text
        assert r.headers["Content-Type"].startswith("application/json")
        msg = r.json()["error"]
        for w in words:
            assert w in msg, msg
        return msg

    ok = {"name": "input__0", "shape": [1, 64], "datatype": "FP32", "data": [0.5] * 64}
    # wrong datatype: unknown name, data of another type, or not what the model takes
    err("/v2/models/mlp/infer", 400, "inputs[0].datatype", "FP33",
        json={"inputs": [dict(ok, datatype="FP33")]})
    err("/v2/models/mlp/infer", 400, "inputs[0].data[0]", "FP32",
        json={"inputs": [dict(ok, data=["a"] * 64)]})
    err("/v2/models/mlp/infer", 400, "inputs[0].datatype", "INT64", "FP32",
        json={"inputs": [dict(ok, datatype="INT64", data=[1] * 64)]})
    # shape against data, and against the model
    err("/v2/models/mlp/infer", 400, "inputs[0].shape [2,3] does not match 5 data elements",
        json={"inputs": [dict(ok, shape=[2, 3], data=[1.0] * 5)]})
    err("/v2/models/mlp/infer", 400, "inputs[0].shape [1,63]", "[-1,64]",
        json={"inputs": [dict(ok, shape=[1, 63], data=[1.0] * 63)]})
    # unknown model / version
    err("/v2/models/nope/infer", 404, "nope", json={"inputs": [ok]})
    err("/v2/models/mlp/versions/7/infer", 404, "7", json={"inputs": [ok]})
    # malformed JSON, missing inputs, bad id
    err("/v2/models/mlp/infer", 400, "malformed JSON", data=b'{"inputs": [')
    # the fast path skips keys it does not read, but never over malformed JSON
    body = json.dumps({"inputs": [ok]})[:-1].encode()
    err("/v2/models/mlp/infer", 400, "malformed JSON", data=body + b', "x": {"k": 2v"}}')
    err("/v2/models/mlp/infer", 400, "malformed JSON",
        data=body[:-2] + b', "x": tru}]}')
    # a repeated key means what JSON parsers make of it, the last one: the data of an input
    # whose datatype is given twice is read as the second (it was read as the first)
    want = srv.post("/v2/models/mlp/infer", json={"inputs": [dict(ok, data=[1] * 64)]}).json()
    dup = json.dumps(dict(ok, datatype="INT8", data=[1] * 64))[:-1] + ', "datatype": "FP32"}'
    r = srv.post("/v2/models/mlp/infer", data=('{"inputs": [%s]}' % dup).encode())
    assert r.status_code == 200, r.text
    assert r.json()["outputs"] == want["outputs"]
    # nor over a number jansson refuses: 1e400 is not an infinity
    data = json.dumps({"inputs": [dict(ok, data=[0.5] * 63 + [7.0])]}).replace("7.0", "1e400")
    err("/v2/models/mlp/infer", 400, "real number overflow", data=data.encode())
    err("/v2/models/mlp/infer", 400, "inputs", json={"id": "x"})
    err("/v2/models/mlp/infer", 400, "id", json={"id": 5, "inputs": [ok]})
    err("/v2/models/mlp/infer", 400, "outputs[0].name", "nope",
        json={"inputs": [ok], "outputs": [{"name": "nope"}]})
    # binary extension: size that does not fit
    hdr = json.dumps({"inputs": [dict(ok, data=None, parameters={"binary_data_size": 256})]})
    hdr = json.dumps({"inputs": [{"name": "input__0", "shape": [1, 64], "datatype": "FP32",
                                  "parameters": {"binary_data_size": 256}}]}).encode()
    err("/v2/models/mlp/infer", 400, "binary_data_size", data=hdr + b"\0" * 100,
        headers={"Inference-Header-Content-Length": str(len(hdr))})
    # infer_stream: an error before streaming starts is a plain JSON error
    msg = err("/v2/models/mlp/infer_stream", 400, "inputs[0].shape",
              json={"inputs": [dict(ok, shape=[2, 3], data=[1.0] * 5)]})
    msg = err("/v2/models/mlp/infer_stream", 400, "[-1,64]",
              json={"inputs": [dict(ok, shape=[1, 63], data=[1.0] * 63)]})
    # the server still serves
    assert srv.post("/v2/models/mlp/infer", json={"inputs": [ok]}).status_code == 200


def test_malformed_json_refused_on_both_paths(mlp_srv):
    """Whatever the hand-written fast path reads, a body jansson refuses is a 400 naming the
    JSON error, never a prediction or a shape error of what the fast path made of it. A data
    value given before its datatype is skipped first and read later: `1x` and `truex` were one
    token to the skip and read as 1 and true (the server then answered on that)."""
    ok = {"name": "input__0", "shape": [1, 64], "datatype": "FP32", "data": [0.5] * 64}
    good = json.dumps({"inputs": [ok]})
    first = '{"inputs": [{"name": "input__0", "shape": [1], "data": %s, "datatype": "%s"}]}'
    bodies = [
        good + "x", good + "}", good[:-1] + ",}", good[:-2] + ",]}", good[:-3] + ",}]}",
        good.replace("0.5]", "0.5,]"), good.replace("[0.5", "[0.5 ", 1).replace("0.5 ,", "0.5 0"),
        good.replace('"input__0"', '"input__0'), good.replace('"input__0"', '"\\ud800"'),
        good.replace('"input__0"', '"in\x01put"'), good.replace('"input__0"', '"in\xffput"'),
        good[:-1] + ', "id": "\\udc00"}', good[:-1] + ' /* c */}', good[:-1] + ', "id": "a\x02"}',
    ]
    for num in ["1.", ".5", "01", "1e", "-", "NaN", "Infinity", "-Infinity", "+1", "0x1"]:
        bodies.append(good.replace("0.5]", num + "]"))
        bodies.append(first % (num, "FP32"))
    bodies += [first % ("1x", "FP32"), first % ("1-", "INT64"), first % ("truex", "BOOL"),
               first % ("falsey", "BOOL"), first % ("1.5.5", "FP32"), first % ("1e5e5", "FP64")]
    for body in bodies:
        r = mlp_srv.post("/v2/models/mlp/infer", data=body.encode("latin-1"),
                         headers={"Content-Type": "application/json"})
        assert r.status_code == 400, (body[-80:], r.text)
        assert "malformed JSON" in r.json()["error"], (body[-80:], r.text)
    assert mlp_srv.post("/v2/models/mlp/infer", json={"inputs": [ok]}).status_code == 200


# ---------------------------------------------------------------- REST: SSE

@pytest.mark.smoke
def test_mlserver_example_infer_stream(text_srv):
    r = text_srv.post("/v2/models/identity_text/infer_stream", json=MLSERVER_STREAM_REQUEST,
                      stream=True)
    assert r.status_code == 200
    assert r.headers["Content-Type"].startswith("text/event-stream")
    assert "gzip" not in r.headers.get("Content-Encoding", "")
    raw = r.content.decode()
    # exactly `data: {json}\n\n` per event
    assert raw.startswith("data: {") and raw.endswith("}\n\n") and "id:" not in raw
    events = sse_events(r)
    assert [e for e, _ in events] == [None] * len(WORDS)
    got = []
    for _, d in events:
        o = json.loads(d)
        (out,) = check_oip_response(o, "identity_text")
        assert out["name"] == "output" and out["datatype"] == "BYTES" and out["shape"] == [1]
        got.append(out["data"][0])
    assert got == WORDS
    # generate_stream is the same stream (MLServer aliases it); /infer answers once
    r = text_srv.post("/v2/models/identity_text/generate_stream", json=MLSERVER_STREAM_REQUEST)
    assert [json.loads(d)["outputs"][0]["data"][0] for _, d in sse_events(r)] == WORDS
    r = text_srv.post("/v2/models/identity_text/infer", json=dict(MLSERVER_STREAM_REQUEST, id="q7"))
    o = r.json()
    assert o["id"] == "q7" and o["outputs"][0]["data"] == ["".join(WORDS)]


@pytest.mark.smoke
def test_generate_shape(text_srv):
    body = {"text_input": "hello big wide world", "parameters": {"max_tokens": 10,
                                                                 "temperature": 0.5,
                                                                 "stop": ["x"]}}
    r = text_srv.post("/v2/models/identity_text/generate", json=body)
    assert r.status_code == 200, r.text
    o = r.json()
    assert o["text_output"] == "hello big wide world" and o["model_name"] == "identity_text"
    r = text_srv.post("/v2/models/identity_text/generate_stream", json=body)
    outs = [json.loads(d) for _, d in sse_events(r)]
    assert [o["text_output"] for o in outs] == ["hello", " big", " wide", " world"]
    r = text_srv.post("/v2/models/identity_text/generate", json={"text_input": 5})
    assert r.status_code == 400 and "text_input" in r.json()["error"]
    r = text_srv.post("/v2/models/identity_text/generate",
                      json={"text_input": "a", "parameters": {"max_tokens": "many"}})
    assert r.status_code == 400 and "parameters.max_tokens" in r.json()["error"]


def test_generate_char_lm(server_factory):
    if not os.path.exists(os.path.join(MODEL_STORE, "char_lm.mar")):
        pytest.skip("char_lm not built")
    srv = server_factory(models=["char_lm"])
    srv.wait_ready("char_lm", body={"json": {"prompt": "a", "max_new_tokens": 1}})
    ref = srv.post("/predictions/char_lm", json={"prompt": "The ", "max_new_tokens": 12}).text
    r = srv.post("/v2/models/char_lm/generate",
                 json={"text_input": "The ", "parameters": {"max_tokens": 12}})
    assert r.status_code == 200, r.text
    assert r.json()["text_output"] == ref and len(ref) == 12
    r = srv.post("/v2/models/char_lm/generate_stream",
                 json={"text_input": "The ", "parameters": {"max_tokens": 12}})
    chunks = [json.loads(d)["text_output"] for _, d in sse_events(r)]
    assert len(chunks) == 12 and "".join(chunks) == ref


@pytest.mark.smoke
def test_stream_error_event_after_start(text_srv):
    """A worker that dies mid-stream: the 200 stream ends with `event: error` + {"error"}."""
    body = {"inputs": [{"name": "prompt", "shape": [1], "datatype": "BYTES",
                        "data": [" ".join(["w"] * 50)]}]}
    r = text_srv.post("/v2/models/identity_text/infer_stream", json=body,
                      headers={"x-delay-ms": "50"}, stream=True, timeout=30)
    assert r.status_code == 200
    lines, killed = [], False
    for line in r.iter_lines(decode_unicode=True):
        lines.append(line)
        if not killed and sum(ln.startswith("data: ") for ln in lines) == 2:
            for pid in text_srv.worker_pids():
                os.kill(pid, 9)
            killed = True
    assert killed
    events = [b for b in "\n".join(lines).split("\n\n") if b.strip()]
    assert events[-1].startswith("event: error\ndata: {")
    assert "error" in json.loads(events[-1].split("data: ", 1)[1])
    assert all(e.startswith("data: {") for e in events[:-1]) and len(events) >= 3


def test_stream_many_clients_two_workers(server_factory):
    srv = server_factory(models=["identity_text"],
                         yaml={"identity_text": {"minWorkers": 2, "maxWorkers": 2, "batchSize": 4,
                                                 "handler": {"delay_ms": 10}}},
                         config={"default_workers_per_model": 2})
    srv.wait_ready("identity_text")
    n = 16
    results = [None] * n

    def client(i):
        text = " ".join(f"c{i}w{k}" for k in range(12))
        body = {"id": f"c{i}", "inputs": [{"name": "prompt", "shape": [1], "datatype": "BYTES",
                                           "data": [text]}]}
        r = srv.post("/v2/models/identity_text/infer_stream", json=body, timeout=60)
        outs = [json.loads(d) for _, d in sse_events(r)]
        results[i] = (r.status_code, text, outs)

    ts = [threading.Thread(target=client, args=(i,)) for i in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    assert len(srv.worker_pids()) == 2
    for i, (status, text, outs) in enumerate(results):
        assert status == 200
        assert all(o["id"] == f"c{i}" for o in outs)
        assert "".join(o["outputs"][0]["data"][0] for o in outs) == text
        assert len(outs) == 12


def test_sequence_parameters_become_headers(server_factory):
    """OIP sequence parameters reach the sequence machinery: an unknown sequence without
    sequence_start is refused the same way as with the ts_request_sequence_* headers."""
    srv = server_factory(models=["identity_text"],
                         yaml={"identity_text": {"sequenceBatching": "true",
                                                 "sequenceMaxIdleMSec": 5000,
                                                 "handler": {"delay_ms": 0}}})
    srv.wait_ready("identity_text")
    body = {"inputs": [{"name": "prompt", "shape": [1], "datatype": "BYTES", "data": ["a b"]}]}
    hdr = srv.post("/predictions/identity_text", data="a b",
                   headers={"ts_request_sequence_id": "s-hdr"})
    oip = srv.post("/v2/models/identity_text/infer",
                   json=dict(body, parameters={"sequence_id": "s-oip"}))
    assert hdr.status_code == oip.status_code
    r1 = srv.post("/v2/models/identity_text/infer",
                  json=dict(body, parameters={"sequence_id": "s1", "sequence_start": True}))
    assert r1.status_code == 200, r1.text
    r2 = srv.post("/v2/models/identity_text/infer",
                  json=dict(body, parameters={"sequence_id": "s1", "sequence_end": True}))
    assert r2.status_code == 200, r2.text
    r3 = srv.post("/v2/models/identity_text/infer", json=dict(body, parameters={"sequence_id": "s1"}))
    assert r3.status_code >= 400


# ---------------------------------------------------------------- gRPC

def grpc_stubs():
    if PYSTUBS not in sys.path:
        sys.path.insert(0, PYSTUBS)
    import grpc
    import oip_grpc_pb2 as pb
    import oip_grpc_pb2_grpc as pbg
    return grpc, pb, pbg


def raw_text(b):
    """A BYTES element in raw form (4-byte little-endian length, then the bytes), as Triton's
    and MLServer's clients decode raw_output_contents."""
    return b[4:4 + struct.unpack("<I", b[:4])[0]].decode()


def grpc_client(srv):
    grpc, pb, pbg = grpc_stubs()
    ch = grpc.insecure_channel(f"127.0.0.1:{srv.ports['grpc']}")
    return grpc, pb, pbg.GRPCInferenceServiceStub(ch)


def text_request(pb, text, rid="", model="identity_text", raw=False):
    q = pb.ModelInferRequest(model_name=model, id=rid)
    t = q.inputs.add(name="prompt", datatype="BYTES", shape=[1])
    if raw:
        b = text.encode()
        q.raw_input_contents.append(struct.pack("<I", len(b)) + b)
    else:
        t.contents.bytes_contents.append(text.encode())
    q.outputs.add(name="output")
    return q


@pytest.mark.smoke
def test_grpc_health_metadata_and_infer(mlp_srv, x2):
    grpc, pb, stub = grpc_client(mlp_srv)
    assert stub.ServerLive(pb.ServerLiveRequest()).live
    assert stub.ServerReady(pb.ServerReadyRequest()).ready
    assert stub.ModelReady(pb.ModelReadyRequest(name="mlp")).ready
    md = stub.ServerMetadata(pb.ServerMetadataRequest())
    assert md.name and "binary_tensor_data" in md.extensions
    mm = stub.ModelMetadata(pb.ModelMetadataRequest(name="mlp", version="1.0"))
    assert mm.platform == "pytorch_torchscript" and list(mm.versions) == ["1.0"]
    assert (mm.inputs[0].name, mm.inputs[0].datatype, list(mm.inputs[0].shape)) == \
        ("input__0", "FP32", [-1, 64])
    assert (mm.outputs[0].name, list(mm.outputs[0].shape)) == ("output__0", [-1, 10])
    with pytest.raises(grpc.RpcError) as e:
        stub.ModelMetadata(pb.ModelMetadataRequest(name="nope"))
    assert e.value.code() == grpc.StatusCode.NOT_FOUND

    want = torch.tensor(mlp_torch(x2))
    flat = [v for row in x2 for v in row]
    # contents in, raw_output_contents out (Triton's form, whatever the request used)
    q = pb.ModelInferRequest(model_name="mlp", id="g1")
    q.inputs.add(name="input__0", datatype="FP32", shape=[2, 64]).contents.fp32_contents.extend(flat)
    r = stub.ModelInfer(q)
    assert r.id == "g1" and r.model_name == "mlp" and r.outputs[0].name == "output__0"
    assert list(r.outputs[0].shape) == [2, 10] and r.outputs[0].datatype == "FP32"
    assert not r.outputs[0].HasField("contents")
    got = torch.tensor(struct.unpack("<20f", r.raw_output_contents[0])).reshape(2, 10)
    assert torch.allclose(got, want, atol=1e-5)
    # raw_input_contents -> raw_output_contents
    q = pb.ModelInferRequest(model_name="mlp", model_version="1.0")
    q.inputs.add(name="input__0", datatype="FP32", shape=[2, 64])
    q.raw_input_contents.append(struct.pack("<128f", *flat))
    r = stub.ModelInfer(q)
    got = torch.tensor(struct.unpack("<20f", r.raw_output_contents[0])).reshape(2, 10)
    assert torch.allclose(got, want, atol=1e-5)
    # bad requests: status + a message naming the field
    q = pb.ModelInferRequest(model_name="mlp")
    q.inputs.add(name="input__0", datatype="FP32", shape=[2, 3]).contents.fp32_contents.extend([1] * 5)
    with pytest.raises(grpc.RpcError) as e:
        stub.ModelInfer(q)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "inputs[0].shape [2,3]" in e.value.details()
    q = pb.ModelInferRequest(model_name="mlp", model_version="3")
    with pytest.raises(grpc.RpcError) as e:
        stub.ModelInfer(q)
    assert e.value.code() == grpc.StatusCode.NOT_FOUND
    # a datatype "FP32\0junk" is not FP32: NULs in nested strings are refused by name
    q = pb.ModelInferRequest(model_name="mlp")
    q.inputs.add(name="input__0", datatype="FP32\0junk", shape=[1, 64]).contents.fp32_contents.extend(
        flat[:64])
    with pytest.raises(grpc.RpcError) as e:
        stub.ModelInfer(q)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "'inputs.datatype'" in e.value.details()


@pytest.mark.smoke
def test_grpc_model_stream_infer_mlserver_example(text_srv):
    grpc, pb, stub = grpc_client(text_srv)
    ex = MLSERVER_STREAM_REQUEST["inputs"][0]["data"][0]
    resps = list(stub.ModelStreamInfer(iter([text_request(pb, ex, "s1")]), timeout=30))
    # one response per word, then an empty one marked final (the handler's last frame is empty)
    assert len(resps) == len(WORDS) + 1
    got = []
    for r in resps[:-1]:
        assert r.error_message == ""
        ir = r.infer_response
        assert ir.model_name == "identity_text" and ir.id == "s1"
        (out,) = ir.outputs
        assert out.name == "output" and out.datatype == "BYTES" and list(out.shape) == [1]
        got.append(raw_text(ir.raw_output_contents[0]))
    assert got == WORDS
    assert not resps[-1].infer_response.outputs
    assert resps[-1].infer_response.parameters["triton_final_response"].bool_param


@pytest.mark.smoke
def test_grpc_stream_two_requests_in_order_and_errors_in_band(text_srv):
    grpc, pb, stub = grpc_client(text_srv)
    bad = pb.ModelInferRequest(model_name="identity_text", id="bad")
    bad.inputs.add(name="prompt", datatype="FP33", shape=[1])
    reqs = [text_request(pb, "one two three four five", "a"),
            bad,
            text_request(pb, "six seven", "b", raw=True),
            pb.ModelInferRequest(model_name="nope", id="nf")]
    resps = list(stub.ModelStreamInfer(iter(reqs), timeout=30))
    seq = []
    for r in resps:
        if r.error_message:
            seq.append((r.infer_response.id, "ERR:" + r.error_message))
        elif r.infer_response.outputs:  # the empty final responses are left out
            ir = r.infer_response
            seq.append((ir.id, raw_text(ir.raw_output_contents[0])))
    ids = [i for i, _ in seq]
    assert ids == ["a"] * 5 + ["bad", "b", "b", "nf"], seq
    assert "".join(w for i, w in seq if i == "a") == "one two three four five"
    assert "inputs[0].datatype" in seq[5][1]
    assert [w for i, w in seq if i == "b"] == ["six", " seven"]
    assert "nope" in seq[-1][1]


def test_grpc_mlserver_stream_form(server_factory):
    """oip_stream_response=mlserver: ModelStreamInfer answers plain ModelInferResponse."""
    srv = server_factory(models=["identity_text"], config={"oip_stream_response": "mlserver"},
                         yaml={"identity_text": {"handler": {"delay_ms": 5}}})
    srv.wait_ready("identity_text")
    grpc, pb, _ = grpc_client(srv)
    ch = grpc.insecure_channel(f"127.0.0.1:{srv.ports['grpc']}")
    call = ch.stream_stream("/inference.GRPCInferenceService/ModelStreamInfer",
                            request_serializer=pb.ModelInferRequest.SerializeToString,
                            response_deserializer=pb.ModelInferResponse.FromString)
    ex = MLSERVER_STREAM_REQUEST["inputs"][0]["data"][0]
    resps = list(call(iter([text_request(pb, ex, "m1")]), timeout=30))
    assert [raw_text(r.raw_output_contents[0]) for r in resps] == WORDS
    assert all(r.model_name == "identity_text" and r.id == "m1" for r in resps)


@pytest.mark.smoke
def test_grpc_empty_final_response(text_srv):
    grpc, pb, stub = grpc_client(text_srv)
    q = text_request(pb, "x y", "e1")
    q.parameters["triton_enable_empty_final_response"].bool_param = True
    resps = list(stub.ModelStreamInfer(iter([q]), timeout=30))
    finals = [r.infer_response.parameters["triton_final_response"].bool_param for r in resps]
    assert finals == [False, False, True]
    assert len(resps[-1].infer_response.outputs) == 0


class DtypeModel(torch.nn.Module):
    def forward(self, a, b, c, d, e, f, g, h):
        # type: (Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor) -> Tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]
        return (a * 2, b + 1, ~c, d - 1, e + 1, f * 2, g * 3, h + 7)


@pytest.mark.smoke
def test_datatypes_and_mapping_by_name(server_factory, tmp_path):
    """Every TorchScript datatype through OIP, inputs mapped to forward() by argument name."""
    store = torchscript_store(tmp_path, "dtypes", torch.jit.script(DtypeModel()))
    srv = server_factory(models=["dtypes"], store=store)
    ins = [  # name, datatype, data, expected output datatype, expected output
        ("h", "INT16", [1, -2], "INT16", [8, 5]),
        ("a", "INT64", [5, -(2 ** 40)], "INT64", [10, -(2 ** 41)]),
        ("b", "FP64", [0.5, 1e-300], "FP64", [1.5, 1.0]),
        ("c", "BOOL", [True, False], "BOOL", [False, True]),
        ("d", "INT8", [-128, 5], "INT8", [127, 4]),  # wraps as torch does
        ("e", "UINT8", [0, 254], "UINT8", [1, 255]),
        ("f", "FP16", [1.5, -0.25], "FP16", [3.0, -0.5]),
        ("g", "INT32", [7, -1], "INT32", [21, -3]),
    ]
    body = {"inputs": [{"name": n, "datatype": dt, "shape": [2], "data": v}
                       for n, dt, v, _, _ in ins]}
    deadline = time.time() + 60
    while True:
        r = srv.post("/v2/models/dtypes/infer", json=body)
        if r.status_code != 503 or time.time() > deadline:
            break
        time.sleep(0.2)
    assert r.status_code == 200, r.text
    outs = r.json()["outputs"]
    want = {n: (odt, ov) for n, _, _, odt, ov in ins}
    order = "abcdefgh"
    for k, o in enumerate(outs):
        assert o["name"] == f"output__{k}" and o["shape"] == [2]
        odt, ov = want[order[k]]
        assert o["datatype"] == odt, o
        assert o["data"] == ov, o
    # metadata without handler.inputs: forward()'s argument names, from the TorchScript module
    md = srv.get("/v2/models/dtypes").json()
    assert [t["name"] for t in md["inputs"]] == list("abcdefgh"), md
    assert md["platform"] == "pytorch_torchscript"
    # gRPC with raw contents: FP16 only travels raw; the answer is raw too
    grpc, pb, stub = grpc_client(srv)
    q = pb.ModelInferRequest(model_name="dtypes")
    fmt = {"INT16": "h", "INT64": "q", "FP64": "d", "BOOL": "?", "INT8": "b", "UINT8": "B",
           "FP16": "e", "INT32": "i"}
    for n, dt, v, _, _ in ins:
        q.inputs.add(name=n, datatype=dt, shape=[2])
        q.raw_input_contents.append(struct.pack("<2" + fmt[dt], *v))
    resp = stub.ModelInfer(q)
    for k, o in enumerate(resp.outputs):
        odt, ov = want[order[k]]
        assert o.datatype == odt
        assert list(struct.unpack("<2" + fmt[odt], resp.raw_output_contents[k])) == ov
    # UINT32 is no TorchScript type: a 400 naming the field
    bad = {"inputs": [dict(body["inputs"][0], datatype="UINT32", data=[1, 2])] + body["inputs"][1:]}
    r = srv.post("/v2/models/dtypes/infer", json=bad)
    assert r.status_code == 400 and "inputs[0].datatype" in r.json()["error"], r.text


class NotSelf(torch.nn.Module):
    def forward(me, a, b):
        # type: (Tensor, Tensor) -> Tensor
        return a - 2 * b


def test_forward_whose_module_argument_is_not_called_self(server_factory, tmp_path):
    """forward's first argument is the module whatever its name: not an input of the model."""
    store = torchscript_store(tmp_path, "notself", torch.jit.script(NotSelf()))
    srv = server_factory(models=["notself"], store=store)
    srv.wait_ready("notself")
    md = srv.get("/v2/models/notself").json()
    assert [t["name"] for t in md["inputs"]] == ["a", "b"], md
    body = {"inputs": [{"name": "b", "datatype": "FP32", "shape": [2], "data": [1.0, 2.0]},
                       {"name": "a", "datatype": "FP32", "shape": [2], "data": [10.0, 20.0]}]}
    r = srv.post("/v2/models/notself/infer", json=body)
    assert r.status_code == 200, r.text
    assert r.json()["outputs"][0]["data"] == [8.0, 16.0]  # a - 2b, inputs mapped by name
    me = {"name": "me", "datatype": "FP32", "shape": [2], "data": [0.0, 0.0]}
    r = srv.post("/v2/models/notself/infer", json={"inputs": body["inputs"] + [me]})
    assert r.status_code == 400 and "forward() takes 2 (a, b)" in r.json()["error"], r.text


def test_cancel_frees_the_worker(server_factory):
    """A client that goes away (SSE disconnect, gRPC cancel) stops its generation: with one
    stream slot, the next request is served instead of after 4000 words (200 s). The timeouts
    only guard against a hang: served at all means the long one was stopped."""
    srv = server_factory(models=["identity_text"],
                         yaml={"identity_text": {"batchSize": 1, "handler": {"delay_ms": 50}}})
    srv.wait_ready("identity_text")
    long_text = " ".join(["w"] * 4000)
    body = {"inputs": [{"name": "prompt", "shape": [1], "datatype": "BYTES", "data": [long_text]}]}
    short = {"inputs": [{"name": "prompt", "shape": [1], "datatype": "BYTES", "data": ["a b"]}]}
    # SSE: read two events, then hang up
    r = srv.post("/v2/models/identity_text/infer_stream", json=body, stream=True)
    n = 0
    for line in r.iter_lines():
        n += line.startswith(b"data: ")
        if n == 2:
            break
    r.close()
    r = srv.post("/v2/models/identity_text/infer", json=short, timeout=60)
    assert r.status_code == 200 and r.json()["outputs"][0]["data"] == ["a b"]
    # gRPC: cancel the stream after two responses
    grpc, pb, stub = grpc_client(srv)
    it = stub.ModelStreamInfer(iter([text_request(pb, long_text, "long")]))
    for k, _ in enumerate(it):
        if k == 1:
            it.cancel()
            break
    r = stub.ModelInfer(text_request(pb, "a b", "short"), timeout=60)
    assert raw_text(r.raw_output_contents[0]) == "a b"
    assert "client went away" in srv.log()


def test_text_that_grows_past_max_request_size_is_refused(server_factory):
    """An OIP text request goes to its handler as JSON holding the text twice ({"text",
    "prompt"}, escaped). One within max_request_size whose JSON for the handler is over it is
    refused with 413 naming the limit, over REST and gRPC; before, the worker got a field over
    its limit, exited, and failed its other requests. The worker is the same afterwards."""
    srv = server_factory(models=["identity_text"], config={"max_request_size": 1000000},
                         yaml={"identity_text": {"handler": {"delay_ms": 0}}})
    srv.wait_ready("identity_text")
    (wpid,) = srv.worker_pids()
    words = " ".join(["w" * 99] * 6000)  # 600 KB: the JSON for the handler holds 1.2 MB
    r = srv.post("/v2/models/identity_text/infer", json=oip_text(words), timeout=60)
    assert r.status_code == 413, r.text
    msg = r.json()["error"]
    assert "max_request_size (1000000 bytes)" in msg and '"body"' in msg, msg
    grpc, pb, stub = grpc_client(srv)
    with pytest.raises(grpc.RpcError) as ei:
        stub.ModelInfer(text_request(pb, words, "big"), timeout=60)
    assert ei.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, ei.value
    assert "max_request_size (1000000 bytes)" in ei.value.details()
    # half of it passes, whole, and nothing restarted the worker
    half = " ".join(["w" * 99] * 3000)
    r = srv.post("/v2/models/identity_text/infer", json=oip_text(half), timeout=60)
    assert r.status_code == 200 and r.json()["outputs"][0]["data"] == [half]
    assert srv.worker_pids() == [wpid]
    assert "exiting" not in srv.log()
