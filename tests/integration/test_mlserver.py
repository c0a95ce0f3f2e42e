"""MLServer runtimes, unchanged (issue 36, part 1).

A model folder with model-settings.json and its runtime's .py is served as an archive is: listed,
described, registered over the management API, with MLServer's metadata. Runtimes import our own
`mlserver` package. The four shapes: unary predict (REST infer, gRPC ModelInfer, /predictions
with a JSON body); predict_stream over REST infer_stream / generate_stream (SSE) and gRPC
ModelStreamInfer; and stream->stream, five messages on one gRPC call reaching one predict_stream.
Several predict_stream calls run at once in one worker; a runtime that fails or answers a
malformed response gets its error in band and the worker keeps serving.

The clients are written with requests and grpcio (the stubs of proto/oip_grpc.proto), never with
our mlserver package, so that a bug shared by both ends cannot hide. Runtimes are in
tests/integration/runtimes/: our TextModel in the shape of MLServer's streaming example, and
probe_models.py. test_mlserver_example_verbatim runs MLServer's own example files from the
directory TS_MLSERVER_EXAMPLE names (SeldonIO/MLServer docs/examples/streaming).
"""
import json
import os
import queue
import shutil
import sys
import tarfile
import tempfile
import threading
import time
import zipfile

import pytest
import requests

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from conftest import PYSTUBS, start_server  # noqa: E402

sys.path.insert(0, PYSTUBS)
import grpc  # noqa: E402
import oip_grpc_pb2 as pb  # noqa: E402
import oip_grpc_pb2_grpc as pbg  # noqa: E402
from oip_values import results, values  # noqa: E402

RUNTIMES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "runtimes")
PROBE = os.path.join(RUNTIMES, "mlserver_probe", "probe_models.py")
TEXT_DIR = os.path.join(RUNTIMES, "mlserver_text")

QUESTION = "What is the capital of France?"
WORDS = ["What", " is", " the", " capital", " of", " France?"]
# MLServer's generate-request.json as its REST client sends it: types.InferenceRequest
# .parse_file(...).dict(), which writes every unset optional field as null
EXAMPLE_REST_BODY = {
    "id": None,
    "parameters": None,
    "inputs": [{"name": "prompt", "shape": [1], "datatype": "BYTES",
                "parameters": {"content_type": "str", "headers": None}, "data": [QUESTION]}],
    "outputs": [{"name": "output", "parameters": None}],
}


def add_runtime(store, folder, settings, sources):
    d = os.path.join(store, folder)
    os.makedirs(d)
    for src in sources:
        shutil.copy(src, d)
    with open(os.path.join(d, "model-settings.json"), "w") as f:
        json.dump(settings, f, indent=2)
    return d


def text_settings(name="text-model", delay_s=0.05, **extra):
    with open(os.path.join(TEXT_DIR, "model-settings.json")) as f:
        s = json.load(f)
    s["name"] = name
    s["parameters"]["extra"] = {"delay_s": delay_s}
    s.update(extra)
    return s


def probe(name, cls, **extra):
    s = {"name": name, "implementation": f"probe_models.{cls}"}
    if extra:
        s["parameters"] = {"extra": extra}
    return s


def wait_models(srv, names, timeout=90):
    """Until every worker of each model has loaded it (OIP's ready counts a starting one)."""
    deadline = time.time() + timeout
    for n in names:
        while True:
            r = srv.get(f"/models/{n}", api="management")
            ws = r.json()[0]["workers"] if r.status_code == 200 else []
            if ws and all(w["status"] == "READY" for w in ws):
                break
            assert time.time() < deadline, f"{n} not ready\n{srv.log()[-3000:]}"
            time.sleep(0.1)


@pytest.fixture(scope="module")
def srv():
    tmp = tempfile.mkdtemp(prefix="tsc-mlserver-")
    store = os.path.join(tmp, "store")
    os.makedirs(store)
    text_py = os.path.join(TEXT_DIR, "text_model.py")
    add_runtime(store, "text-model", text_settings(), [text_py])
    add_runtime(store, "echo", probe("echo", "Echo"), [PROBE])
    add_runtime(store, "gated", probe("gated", "Gated"), [PROBE])
    add_runtime(store, "barrier", probe("barrier", "Barrier", parties=4), [PROBE])
    add_runtime(store, "faulty", probe("faulty", "Faulty"), [PROBE])
    names = ["text-model", "echo", "gated", "barrier", "faulty"]
    s = start_server(tmp, models=names, store=store, config={"oip_stream_response": "mlserver"})
    try:
        wait_models(s, names)
        yield s
    finally:
        s.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def stub(srv):
    ch = grpc.insecure_channel(f"127.0.0.1:{srv.ports['grpc']}")
    return pbg.GRPCInferenceServiceStub(ch)


def mlserver_stream(srv):
    """ModelStreamInfer with MLServer's answer type (plain ModelInferResponse)."""
    ch = grpc.insecure_channel(f"127.0.0.1:{srv.ports['grpc']}")
    return ch.stream_stream("/inference.GRPCInferenceService/ModelStreamInfer",
                            request_serializer=pb.ModelInferRequest.SerializeToString,
                            response_deserializer=pb.ModelInferResponse.FromString)


def text_input(name, text):
    return {"name": name, "shape": [1], "datatype": "BYTES", "data": [text],
            "parameters": {"content_type": "str"}}


def sse(resp):
    """(event, data) of each Server-Sent Event, as it arrives."""
    event, data = "message", []
    for line in resp.iter_lines(chunk_size=None):
        if line == b"":
            if data:
                yield event, json.loads(b"\n".join(data))
            event, data = "message", []
        elif line.startswith(b"data: "):
            data.append(line[6:])
        elif line.startswith(b"event: "):
            event = line[7:].decode()
    if data:
        yield event, json.loads(b"\n".join(data))


def grpc_text_request(model, text, **params):
    """A ModelInferRequest as MLServer's gRPC example builds it: StringCodec.encode_input
    ("prompt", [text]) (shape [1, 1], content_type "str"), ModelInferRequestConverter."""
    q = pb.ModelInferRequest(model_name=model, model_version="")
    t = q.inputs.add(name="prompt", datatype="BYTES", shape=[1, 1])
    t.parameters["content_type"].string_param = "str"
    t.contents.bytes_contents.append(text.encode())
    for k, v in params.items():
        q.parameters[k].string_param = v
    return q


def worker_pid(srv, model):
    r = srv.get(f"/models/{model}", api="management")
    assert r.status_code == 200, r.text
    (w,) = r.json()[0]["workers"]
    return w["pid"]


# ---------------------------------------------------------------- the folder, served

def test_listed_described_and_metadata(srv):
    models = {m["modelName"] for m in srv.get("/models", api="management").json()["models"]}
    assert {"text-model", "echo", "gated", "barrier", "faulty"} <= models
    (d,) = srv.get("/models/text-model", api="management").json()
    # the version is model-settings.json's parameters.version
    assert d["modelVersion"] == "v1.2.3"
    assert d["continuousBatching"] is True and d["batchSize"] == 32
    assert [w["status"] for w in d["workers"]] == ["READY"]

    md = srv.get("/v2/models/text-model").json()
    assert md == {"name": "text-model", "versions": ["text-model/v1.2.3"], "platform": "mlserver",
                  "inputs": [{"name": "prompt", "datatype": "BYTES", "shape": [1]}],
                  "outputs": [{"name": "output", "datatype": "BYTES", "shape": [1]}]}
    g = stub(srv).ModelMetadata(pb.ModelMetadataRequest(name="text-model"), timeout=10)
    assert (g.name, list(g.versions), g.platform) == ("text-model", ["text-model/v1.2.3"],
                                                      "mlserver")
    assert [(t.name, t.datatype, list(t.shape)) for t in g.inputs] == [("prompt", "BYTES", [1])]
    assert srv.get("/v2/models/text-model/versions/v1.2.3/ready").json()["ready"] is True


def test_register_over_management_api(server_factory, tmp_path):
    store = str(tmp_path / "store")
    os.makedirs(store)
    text_py = os.path.join(TEXT_DIR, "text_model.py")
    # the folder's name is not the model's: model-settings.json names it
    add_runtime(store, "runtime-dir", dict(text_settings("named-by-settings"),
                                           parameters={"version": "2.5",
                                                       "extra": {"delay_s": 0}}), [text_py])
    add_runtime(store, "no-module", probe("no-module", "Echo"), [])
    add_runtime(store, "not-json", {}, [])
    with open(os.path.join(store, "not-json", "model-settings.json"), "w") as f:
        f.write('{"name": "x",\n "implementation": }\n')
    # an archive of the folder, as `tar czf NAME.tar.gz NAME` makes it
    with tarfile.open(os.path.join(store, "packed.tar.gz"), "w:gz") as t:
        t.add(os.path.join(store, "runtime-dir"), arcname="packed")
    # and a .mar (zip) holding the folder's files, without a MANIFEST.json
    with zipfile.ZipFile(os.path.join(store, "zipped.mar"), "w") as z:
        for f in os.listdir(os.path.join(store, "runtime-dir")):
            z.write(os.path.join(store, "runtime-dir", f), f)
    srv = server_factory(store=store, extra_args=["--enable-model-api"])
    r = srv.post("/models?url=runtime-dir&initial_workers=1&synchronous=true", api="management",
                 timeout=120)
    assert r.status_code == 200, r.text
    (d,) = srv.get("/models/named-by-settings/2.5", api="management").json()
    assert d["modelUrl"] == "runtime-dir" and d["modelVersion"] == "2.5"
    r = srv.post("/v2/models/named-by-settings/infer", json={"inputs": [text_input("prompt", "a b")]})
    assert r.status_code == 200, r.text
    assert r.json()["outputs"][0]["data"] == ["A B"]
    assert r.json()["model_version"] == "2.5"

    # a runtime whose module is missing fails its load with the reason, and describe keeps it
    r = srv.post("/models?url=no-module&initial_workers=1&synchronous=true", api="management",
                 timeout=120)
    assert r.status_code == 500, r.text
    assert "No module named 'probe_models'" in r.text
    r = srv.post("/models?url=not-json&initial_workers=1&synchronous=true", api="management")
    assert r.status_code == 400 and "model-settings.json:2:" in r.text, r.text

    r = srv.post("/models?url=packed.tar.gz&model_name=packed&initial_workers=1&synchronous=true",
                 api="management", timeout=120)
    assert r.status_code == 200, r.text
    r = srv.post("/v2/models/packed/infer", json={"inputs": [text_input("prompt", "tgz")]})
    assert r.status_code == 200 and r.json()["outputs"][0]["data"] == ["TGZ"], r.text
    r = srv.post("/models?url=zipped.mar&model_name=zipped&initial_workers=1&synchronous=true",
                 api="management", timeout=120)
    assert r.status_code == 200, r.text
    r = srv.post("/v2/models/zipped/infer", json={"inputs": [text_input("prompt", "mar")]})
    assert r.status_code == 200 and r.json()["outputs"][0]["data"] == ["MAR"], r.text

    assert srv.delete("/models/named-by-settings/2.5").status_code == 200
    assert srv.get("/v2/models/named-by-settings").status_code == 404


# ---------------------------------------------------------------- unary

def test_unary_predict_rest_grpc_and_predictions(srv):
    r = srv.post("/v2/models/text-model/infer", json={"id": "u1", "inputs": [text_input("prompt", "a b c")]})
    assert r.status_code == 200, r.text
    out = r.json()
    assert (out["id"], out["model_name"], out["model_version"]) == ("u1", "text-model", "v1.2.3")
    assert out["outputs"] == [{"name": "output", "datatype": "BYTES", "shape": [1, 1],
                               "data": ["A B C"]}]
    g = stub(srv).ModelInfer(grpc_text_request("text-model", "x y"), timeout=30)
    assert values(g, 0) == [b"X Y"]
    assert list(g.outputs[0].shape) == [1, 1]
    # TorchServe's API with an OIP JSON body: MLServer's JSON response
    r = srv.post("/predictions/text-model", json={"inputs": [text_input("prompt", "q")]})
    assert r.status_code == 200, r.text
    assert r.json()["outputs"][0]["data"] == ["Q"]
    assert r.json()["outputs"][0]["parameters"] == {"content_type": "str"}
    r = srv.post("/predictions/text-model", data=b"plain text")
    assert r.status_code == 400 and "MLServer runtime" in r.json()["message"]


# ---------------------------------------------------------------- unary -> stream

def test_rest_stream_example_client_shape(srv):
    """The body MLServer's REST client sends, on generate_stream and infer_stream."""
    for route in ("generate_stream", "infer_stream"):
        with requests.post(srv.url(f"/v2/models/text-model/{route}"), json=EXAMPLE_REST_BODY,
                           stream=True, timeout=30) as r:
            assert r.status_code == 200
            assert r.headers["content-type"].startswith("text/event-stream")
            events = list(sse(r))
        assert [e for e, _ in events] == ["message"] * len(WORDS)
        assert [d["outputs"][0]["data"] for _, d in events] == [[w] for w in WORDS]
        assert all(d["model_name"] == "text-model" for _, d in events)


def test_rest_stream_each_word_as_produced(srv, tmp_path):
    """Word k+1 is only produced once the client has read word k (gate files): a server that
    held the words back would never finish."""
    gate = str(tmp_path)
    body = {"inputs": [text_input("prompt", "one two three four")],
            "parameters": {"gate_dir": gate}}
    open(os.path.join(gate, "0"), "w").close()
    got = []
    with requests.post(srv.url("/v2/models/gated/infer_stream"), json=body, stream=True,
                       timeout=30) as r:
        assert r.status_code == 200
        for _, d in sse(r):
            got.append(d["outputs"][0]["data"][0])
            open(os.path.join(gate, str(len(got))), "w").close()
    assert got == ["one", " two", " three", " four"]


def test_generate_shape_text_in_text_out(srv):
    """text_input reaches the runtime as its first BYTES input; each response answers as
    text_output (what an OpenAI route can map to)."""
    with requests.post(srv.url("/v2/models/text-model/generate_stream"),
                       json={"text_input": "one two"}, stream=True, timeout=30) as r:
        assert r.status_code == 200
        assert [d["text_output"] for _, d in sse(r)] == ["one", " two"]
    r = srv.post("/v2/models/text-model/generate", json={"text_input": "one two"})
    assert r.status_code == 200 and r.json()["text_output"] == "ONE TWO", r.text


def test_grpc_stream_example_client_shape(srv):
    call = mlserver_stream(srv)
    got = [r for r in call(iter([grpc_text_request("text-model", QUESTION)]), timeout=30)]
    assert [values(r, 0) for r in got] == [[w.encode()] for w in WORDS]
    assert all(r.model_name == "text-model" and r.model_version == "v1.2.3" for r in got)


def test_grpc_stream_each_word_as_produced(srv, tmp_path):
    gate = str(tmp_path)
    open(os.path.join(gate, "0"), "w").close()
    got = []
    req = grpc_text_request("gated", "alpha beta gamma", gate_dir=gate)
    for r in mlserver_stream(srv)(iter([req]), timeout=30):
        got.append(values(r, 0)[0].decode())
        open(os.path.join(gate, str(len(got))), "w").close()
    assert got == ["alpha", " beta", " gamma"]


# ---------------------------------------------------------------- stream -> stream

def echo_request(x):
    q = pb.ModelInferRequest(model_name="echo")
    t = q.inputs.add(name="x", datatype="FP32", shape=[1])
    t.contents.fp32_contents.append(x)
    return q


def test_grpc_stream_to_stream_one_predict_stream(srv):
    """Five messages on one call, each sent only after the answer to the one before: each
    answer depends on its own message, and all come from one predict_stream call."""
    def run(xs):
        q = queue.Queue()

        def messages():
            while True:
                m = q.get()
                if m is None:
                    return
                yield m

        answers = mlserver_stream(srv)(messages(), timeout=30)
        got = []
        for x in xs:
            q.put(echo_request(x))
            a = next(answers)
            got.append((values(a, 0)[0], values(a, 1)[0].decode()))
        q.put(None)
        assert list(answers) == []  # the call ends with the half-close
        return got

    xs = [0.5, 3.0, -1.25, 10.0, 7.5]
    first = run(xs)
    assert [y for y, _ in first] == [2 * x + k for k, x in enumerate(xs)]
    calls = {tag.split()[0] for _, tag in first}
    assert len(calls) == 1, first
    assert [tag.split()[1] for _, tag in first] == [f"message{k}" for k in range(5)]
    second = run([1.0, 2.0])
    assert {tag.split()[0] for _, tag in second} != calls  # a new call, a new predict_stream


@pytest.mark.smoke
def test_grpc_stream_to_stream_triton_form(server_factory, tmp_path):
    """The same over Triton's answer type (the server's default)."""
    store = str(tmp_path / "store")
    os.makedirs(store)
    add_runtime(store, "echo", probe("echo", "Echo"), [PROBE])
    srv = server_factory(store=store, models=["echo"])
    wait_models(srv, ["echo"])
    answers = results(list(stub(srv).ModelStreamInfer(
        iter([echo_request(float(x)) for x in range(5)]), timeout=30)))
    assert [a.error_message for a in answers] == [""] * 5
    assert [values(a.infer_response, 0)[0] for a in answers] == [2.0 * x + x for x in range(5)]
    tags = [values(a.infer_response, 1)[0].decode() for a in answers]
    assert len({t.split()[0] for t in tags}) == 1


# ---------------------------------------------------------------- concurrency

def test_predict_streams_run_at_once_in_one_worker(srv):
    """Four predict_stream calls of one worker each wait until all four run (Barrier): run one
    after another, the first would time out."""
    pid = worker_pid(srv, "barrier")
    results = [None] * 4

    def client(i):
        with requests.post(srv.url("/v2/models/barrier/infer_stream"),
                           json={"inputs": [text_input("prompt", str(i))]}, stream=True,
                           timeout=60) as r:
            results[i] = (r.status_code, list(sse(r)))

    threads = [threading.Thread(target=client, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for status, events in results:
        assert status == 200
        assert [e for e, _ in events] == ["message"] * 3, events
        assert {d["outputs"][0]["data"][0] for _, d in events} == {"4"}
    assert worker_pid(srv, "barrier") == pid


# ---------------------------------------------------------------- failures

def stream_events(srv, model, text):
    with requests.post(srv.url(f"/v2/models/{model}/infer_stream"),
                       json={"inputs": [text_input("prompt", text)]}, stream=True,
                       timeout=30) as r:
        if not r.headers["content-type"].startswith("text/event-stream"):
            return r.status_code, r.json()
        return r.status_code, list(sse(r))


def test_runtime_errors_in_band_and_worker_keeps_serving(srv):
    pid = worker_pid(srv, "faulty")
    r = srv.post("/v2/models/faulty/infer", json={"inputs": [text_input("prompt", "refuse")]})
    assert (r.status_code, r.json()) == (400, {"error": "the runtime refuses this input"})
    r = srv.post("/v2/models/faulty/infer", json={"inputs": [text_input("prompt", "crash")]})
    assert (r.status_code, r.json()) == (500, {"error": "RuntimeError: the runtime crashed"})

    # before the first answer: a plain error, not a 200 stream
    assert stream_events(srv, "faulty", "early") == \
        (500, {"error": "RuntimeError: the runtime failed before answering"})
    # after it: the answer, then an SSE error event
    for mode, message in [
        ("raise", "RuntimeError: the runtime failed after one word"),
        ("not-a-response", "probe_models.Faulty.predict_stream (response 2) returned int, not an "
                           "InferenceResponse"),
        ("bad-shape", "probe_models.Faulty.predict_stream (response 2) answered a malformed "
                      "response: outputs[0] 'o': shape [3] holds 3 elements, its data has 1"),
    ]:
        status, events = stream_events(srv, "faulty", mode)
        assert status == 200
        assert events[0][1]["outputs"][0]["data"] == ["first"]
        assert events[1:] == [("error", {"error": message})], (mode, events)

    # gRPC, MLServer's form: the answer, then the call's status
    got = []
    with pytest.raises(grpc.RpcError) as e:
        for a in mlserver_stream(srv)(iter([grpc_text_request("faulty", "raise")]), timeout=30):
            got.append(values(a, 0)[0])
    assert got == [b"first"]
    assert e.value.code() == grpc.StatusCode.INTERNAL
    assert "failed after one word" in e.value.details()
    with pytest.raises(grpc.RpcError) as e:
        stub(srv).ModelInfer(grpc_text_request("faulty", "refuse"), timeout=30)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT

    # the same worker still answers
    assert stream_events(srv, "faulty", "fine")[1][0][1]["outputs"][0]["data"] == ["first"]
    assert worker_pid(srv, "faulty") == pid


def test_client_disconnect_cancels_predict_stream(srv, tmp_path):
    gate = str(tmp_path)
    open(os.path.join(gate, "0"), "w").close()
    body = {"inputs": [text_input("prompt", "one two three")], "parameters": {"gate_dir": gate}}
    r = requests.post(srv.url("/v2/models/gated/infer_stream"), json=body, stream=True,
                      timeout=30)
    ev = next(sse(r))
    assert ev[1]["outputs"][0]["data"] == ["one"]
    r.close()  # the runtime waits for gate 1, which never comes: the call is cancelled
    deadline = time.time() + 20
    while not os.path.exists(os.path.join(gate, "cancelled")):
        assert time.time() < deadline, srv.log()[-2000:]
        time.sleep(0.05)
    # and the runtime serves the next call
    open(os.path.join(gate, "1"), "w").close()
    open(os.path.join(gate, "2"), "w").close()
    status, events = stream_events(srv, "text-model", "still here")
    assert status == 200 and len(events) == 2


# ---------------------------------------------------------------- MLServer's own example

EXAMPLE = os.environ.get("TS_MLSERVER_EXAMPLE")


@pytest.mark.skipif(not EXAMPLE, reason="TS_MLSERVER_EXAMPLE is not set: the directory of "
                                        "MLServer's docs/examples/streaming (text_model.py, "
                                        "model-settings.json), which CI has no network to fetch")
def test_mlserver_example_verbatim(server_factory, tmp_path):
    """MLServer's TextModel example, its files unchanged, with requests in the shape of its REST
    and gRPC clients: the words one by one, 0.5 s apart as the example sleeps."""
    store = str(tmp_path / "store")
    d = os.path.join(store, "text-model")
    os.makedirs(d)
    for f in ("text_model.py", "model-settings.json"):
        shutil.copy(os.path.join(EXAMPLE, f), d)
    srv = server_factory(store=store, models=["text-model"],
                         config={"oip_stream_response": "mlserver"})
    wait_models(srv, ["text-model"])
    body = EXAMPLE_REST_BODY
    if os.path.exists(os.path.join(EXAMPLE, "generate-request.json")):
        with open(os.path.join(EXAMPLE, "generate-request.json")) as f:
            req = json.load(f)
        body = dict(EXAMPLE_REST_BODY, inputs=req["inputs"], outputs=req["outputs"])
        body["inputs"][0]["parameters"]["headers"] = None
    t0 = time.monotonic()
    arrivals = []
    with requests.post(srv.url("/v2/models/text-model/generate_stream"), json=body, stream=True,
                       timeout=60) as r:
        assert r.status_code == 200
        words = []
        for _, ev in sse(r):
            words.append(ev["outputs"][0]["data"][0])
            arrivals.append(time.monotonic() - t0)
    assert words == WORDS
    print("REST arrivals (s):", [round(t, 2) for t in arrivals])
    got = [values(a, 0)[0].decode()
           for a in mlserver_stream(srv)(iter([grpc_text_request("text-model", QUESTION)]),
                                         timeout=60)]
    assert got == WORDS
