"""Inferless app.py, unchanged (issue 36, part 2).

A model folder with app.py (class InferlessPythonModel) and input_schema.py (INPUT_SCHEMA,
IS_STREAMING_OUTPUT) is served over OIP: inputs by name, checked against INPUT_SCHEMA (required,
datatype, shape) with a 400 naming the input; each send_streamed_output(dict) is one SSE event
(one gRPC message), finalise_streamed_output() ends the stream, and a stream infer() leaves
unfinalised is ended with a warning. The streaming app is Inferless' own example
(tests/integration/runtimes/inferless_stream/app.py: the same class, thread and streamer loop,
with a stand-in model that produces tokens from a thread). Clients: requests and grpcio.
"""
import os
import shutil
import sys
import tempfile
import time

import pytest
import requests

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from conftest import PYSTUBS, start_server  # noqa: E402
from test_mlserver import sse, wait_models, worker_pid  # noqa: E402
from oip_values import results, values  # noqa: E402

sys.path.insert(0, PYSTUBS)
import grpc  # noqa: E402
import oip_grpc_pb2 as pb  # noqa: E402
import oip_grpc_pb2_grpc as pbg  # noqa: E402

TEMPLATE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "runtimes",
                        "inferless_stream")

NO_FINALISE_APP = '''
class InferlessPythonModel:
    def initialize(self):
        pass

    def infer(self, inputs, stream_output_handler):
        for w in inputs["TEXT"].split():
            stream_output_handler.send_streamed_output({"OUT": w})
'''

DRIFT_APP = '''
class InferlessPythonModel:
    def initialize(self):
        pass

    def infer(self, inputs, stream_output_handler):
        stream_output_handler.send_streamed_output({"OUT": "a"})
        stream_output_handler.send_streamed_output({"OUT": 2})
        stream_output_handler.finalise_streamed_output()
'''

ENDLESS_APP = '''
import os
import time


class InferlessPythonModel:
    def initialize(self):
        pass

    def infer(self, inputs, stream_output_handler):
        i = 0
        try:
            while True:
                stream_output_handler.send_streamed_output({"OUT": str(i)})
                i += 1
                time.sleep(0.01)
        except Exception as e:
            here = os.path.dirname(os.path.abspath(__file__))
            with open(os.path.join(here, "stopped"), "w") as f:
                f.write(type(e).__name__)
            raise
'''

STREAM_SCHEMA = '''
INPUT_SCHEMA = {
    "TEXT": {"datatype": "STRING", "required": True, "shape": [1], "example": ["a b"]},
}
IS_STREAMING_OUTPUT = True
'''

PLAIN_APP = '''
import os


class InferlessPythonModel:
    def initialize(self):
        self.prefix = "seen: "

    def infer(self, inputs):
        if inputs["prompt"] == "boom":
            raise ValueError("the app refuses boom")
        return {"text": self.prefix + inputs["prompt"], "count": inputs.get("count", 0) + 1,
                "half": inputs.get("count", 0) / 2, "flag": not inputs.get("flag", False),
                "tags": inputs.get("tags", [])}

    def finalize(self, args):
        with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "finalized"), "w") as f:
            f.write("done")
'''

PLAIN_SCHEMA = '''
INPUT_SCHEMA = {
    "prompt": {"datatype": "STRING", "required": True, "shape": [1]},
    "count": {"datatype": "INT", "required": False, "shape": [1]},
    "flag": {"datatype": "BOOLEAN", "required": False, "shape": [1]},
    "tags": {"datatype": "STRING", "required": False, "shape": [-1]},
}
'''


def app_folder(store, name, app=None, schema=None):
    d = os.path.join(store, name)
    if app is None:
        shutil.copytree(TEMPLATE, d)
    else:
        os.makedirs(d)
        with open(os.path.join(d, "app.py"), "w") as f:
            f.write(app)
        with open(os.path.join(d, "input_schema.py"), "w") as f:
            f.write(schema)
    return d


@pytest.fixture(scope="module")
def srv():
    tmp = tempfile.mkdtemp(prefix="tsc-inferless-")
    store = os.path.join(tmp, "store")
    os.makedirs(store)
    app_folder(store, "chat")
    os.makedirs(os.path.join(app_folder(store, "chat-gated"), "gate"))
    app_folder(store, "nofinal", NO_FINALISE_APP, STREAM_SCHEMA)
    app_folder(store, "drift", DRIFT_APP, STREAM_SCHEMA)
    app_folder(store, "plain", PLAIN_APP, PLAIN_SCHEMA)
    app_folder(store, "endless", ENDLESS_APP, STREAM_SCHEMA)
    names = ["chat", "chat-gated", "nofinal", "drift", "plain", "endless"]
    s = start_server(tmp, models=names, store=store, extra_args=["--enable-model-api"])
    try:
        wait_models(s, names)
        yield s
    finally:
        s.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def string(name, *texts):
    return {"name": name, "datatype": "BYTES", "shape": [len(texts)], "data": list(texts)}


def stream(srv, model, inputs, route="infer_stream"):
    with requests.post(srv.url(f"/v2/models/{model}/{route}"), json={"inputs": inputs},
                       stream=True, timeout=30) as r:
        if not r.headers["content-type"].startswith("text/event-stream"):
            return r.status_code, r.json()
        return r.status_code, list(sse(r))


def test_example_app_streams_over_sse(srv):
    status, events = stream(srv, "chat", [string("TEXT", "how do I make an omelette")])
    assert status == 200
    assert [e for e, _ in events] == ["message"] * 6
    assert [d["outputs"] for _, d in events] == [
        [{"name": "OUT", "datatype": "BYTES", "shape": [1], "data": [w]}]
        for w in ["omelette", " an", " make", " I", " do", " how"]]
    assert all(d["model_name"] == "chat" for _, d in events)
    md = srv.get("/v2/models/chat").json()
    assert md["inputs"] == [{"name": "TEXT", "datatype": "BYTES", "shape": [1]}]
    assert md["platform"] == "inferless"


@pytest.mark.smoke
def test_example_app_alone(server_factory, tmp_path):
    """The example app in a server of its own (the sanitizer run's smoke test): SSE and gRPC."""
    store = str(tmp_path / "store")
    os.makedirs(store)
    app_folder(store, "chat")
    srv = server_factory(store=store, models=["chat"])
    wait_models(srv, ["chat"])
    status, events = stream(srv, "chat", [string("TEXT", "one two")])
    assert status == 200
    assert [d["outputs"][0]["data"][0] for _, d in events] == ["two", " one"]
    ch = grpc.insecure_channel(f"127.0.0.1:{srv.ports['grpc']}")
    q = pb.ModelInferRequest(model_name="chat")
    q.inputs.add(name="TEXT", datatype="BYTES", shape=[1]).contents.bytes_contents.append(b"a b")
    answers = results(list(pbg.GRPCInferenceServiceStub(ch).ModelStreamInfer(iter([q]),
                                                                             timeout=30)))
    assert [values(a.infer_response, 0)[0] for a in answers] == [b"b", b" a"]


def test_each_event_as_produced(srv):
    """Token k+1 is produced only once the client read event k (the stand-in model waits for
    gate files): a server that held events back would never finish."""
    gate = os.path.join(srv.store, "chat-gated", "gate")
    open(os.path.join(gate, "0"), "w").close()
    got = []
    with requests.post(srv.url("/v2/models/chat-gated/infer_stream"),
                       json={"inputs": [string("TEXT", "one two three")]}, stream=True,
                       timeout=30) as r:
        assert r.status_code == 200
        for _, d in sse(r):
            got.append(d["outputs"][0]["data"][0])
            open(os.path.join(gate, str(len(got))), "w").close()
    assert got == ["three", " two", " one"]


def test_grpc_model_stream_infer(srv):
    ch = grpc.insecure_channel(f"127.0.0.1:{srv.ports['grpc']}")
    stub = pbg.GRPCInferenceServiceStub(ch)
    q = pb.ModelInferRequest(model_name="chat", id="g1")
    t = q.inputs.add(name="TEXT", datatype="BYTES", shape=[1])
    t.contents.bytes_contents.append(b"crack two eggs")
    answers = results(list(stub.ModelStreamInfer(iter([q]), timeout=30)))
    assert [a.error_message for a in answers] == [""] * 3
    assert [values(a.infer_response, 0)[0] for a in answers] == [b"eggs", b" two", b" crack"]
    assert {a.infer_response.id for a in answers} == {"g1"}


def test_inputs_checked_against_input_schema(srv):
    cases = [
        ([], "inputs: expected a non-empty array"),
        ([string("count", "x")], "inputs: count has datatype BYTES; input_schema.py says INT "
                                 "(send INT8 or INT16 or INT32 or INT64 or UINT8 or UINT16 or "
                                 "UINT32 or UINT64)"),
        ([{"name": "count", "datatype": "INT64", "shape": [1], "data": [3]}],
         "inputs: prompt required by input_schema.py missing"),
        ([string("prompt", "a"), string("colour", "red")],
         "inputs: colour is not in INPUT_SCHEMA (its inputs: prompt, count, flag, tags)"),
        ([string("prompt", "a", "b")], "inputs: prompt has 2 elements; input_schema.py says "
                                       "shape [1]"),
        ([string("prompt", "a"), {"name": "flag", "datatype": "FP32", "shape": [1], "data": [1]}],
         "inputs: flag has datatype FP32; input_schema.py says BOOLEAN (send BOOL)"),
    ]
    for inputs, message in cases:
        r = srv.post("/v2/models/plain/infer", json={"inputs": inputs})
        assert (r.status_code, r.json()) == (400, {"error": message}), inputs
    # and over infer_stream, before any event: a plain 400
    assert stream(srv, "chat", [{"name": "TEXT", "datatype": "INT64", "shape": [1],
                                 "data": [1]}]) == \
        (400, {"error": "inputs: TEXT has datatype INT64; input_schema.py says STRING "
                        "(send BYTES)"})


def test_plain_app_one_answer_typed_outputs(srv):
    inputs = [string("prompt", "hi"), {"name": "count", "datatype": "INT32", "shape": [1],
                                       "data": [41]},
              {"name": "flag", "datatype": "BOOL", "shape": [1], "data": [True]},
              string("tags", "x", "y", "z")]
    r = srv.post("/v2/models/plain/infer", json={"id": "p1", "inputs": inputs})
    assert r.status_code == 200, r.text
    assert r.json()["id"] == "p1"
    assert r.json()["outputs"] == [
        {"name": "text", "datatype": "BYTES", "shape": [1], "data": ["seen: hi"]},
        {"name": "count", "datatype": "INT64", "shape": [1], "data": [42]},
        {"name": "half", "datatype": "FP64", "shape": [1], "data": [20.5]},
        {"name": "flag", "datatype": "BOOL", "shape": [1], "data": [False]},
        {"name": "tags", "datatype": "BYTES", "shape": [3], "data": ["x", "y", "z"]},
    ]
    # over infer_stream: one event
    status, events = stream(srv, "plain", [string("prompt", "s")])
    assert status == 200 and len(events) == 1
    assert events[0][1]["outputs"][0]["data"] == ["seen: s"]


def test_failures_are_answered_and_the_worker_keeps_serving(srv):
    pid = worker_pid(srv, "plain")
    r = srv.post("/v2/models/plain/infer", json={"inputs": [string("prompt", "boom")]})
    assert (r.status_code, r.json()) == (500, {"error": "ValueError: the app refuses boom"})
    # an event whose keys or datatypes differ from the first one's
    status, events = stream(srv, "drift", [string("TEXT", "x")])
    assert status == 200
    assert events[0][1]["outputs"][0]["data"] == ["a"]
    assert events[1:] == [("error", {"error": "send_streamed_output (event 2): every event has "
                                              "the first one's schema {OUT: BYTES}; this one has "
                                              "{OUT: INT64}"})]
    # a unary call on a streaming app
    r = srv.post("/v2/models/chat/infer", json={"inputs": [string("TEXT", "a")]})
    assert r.status_code == 400 and "IS_STREAMING_OUTPUT" in r.json()["error"]
    r = srv.post("/v2/models/plain/infer", json={"inputs": [string("prompt", "ok")]})
    assert r.status_code == 200 and worker_pid(srv, "plain") == pid


def test_unfinalised_stream_ends_with_a_warning(srv):
    status, events = stream(srv, "nofinal", [string("TEXT", "a b")])
    assert status == 200
    assert [d["outputs"][0]["data"][0] for _, d in events] == ["a", "b"]
    deadline = time.time() + 10
    while "infer returned without finalise_streamed_output()" not in srv.log():
        assert time.time() < deadline, srv.log()[-2000:]
        time.sleep(0.05)


def test_client_disconnect_stops_the_stream(srv):
    """send_streamed_output raises RequestCancelled in infer's thread once the client went
    away, so an app's streamer loop ends."""
    r = requests.post(srv.url("/v2/models/endless/infer_stream"),
                      json={"inputs": [string("TEXT", "x")]}, stream=True, timeout=30)
    events = sse(r)
    assert [next(events)[1]["outputs"][0]["data"][0] for _ in range(3)] == ["0", "1", "2"]
    r.close()
    flag = os.path.join(srv.store, "endless", "stopped")
    deadline = time.time() + 20
    while not os.path.exists(flag):
        assert time.time() < deadline, "\n".join(
            x for x in srv.log().splitlines() if "loaded" not in x and "spawned" not in x)[-6000:]
        time.sleep(0.05)
    with open(flag) as f:
        assert f.read() == "RequestCancelled"


def test_generate_stream_text_input(srv):
    """The OIP generate shape: text_input goes to the app's first STRING input, each event's
    string comes back as text_output."""
    with requests.post(srv.url("/v2/models/chat/generate_stream"),
                       json={"text_input": "salt and pepper"}, stream=True, timeout=30) as r:
        assert r.status_code == 200
        assert [d["text_output"] for _, d in sse(r)] == ["pepper", " and", " salt"]


def test_finalize_when_unloaded(srv):
    flag = os.path.join(srv.store, "plain", "finalized")
    assert not os.path.exists(flag)
    assert srv.delete("/models/plain").status_code == 200
    deadline = time.time() + 20
    while not os.path.exists(flag):
        assert time.time() < deadline, srv.log()[-2000:]
        time.sleep(0.05)
