"""Python handlers (issue 11): TorchServe's handler contract run by the embedded interpreter.

mlp_py equals torch (batch 1, and batch 8 under 16 clients); stateful_py follows TorchServe's
stateful continuous-batching example over HTTP and gRPC; a handler streaming with
send_intermediate_predict_response streams over chunked HTTP, SSE and gRPC and learns of a
client disconnect; faults (raise, PredictionException, import error, wrong number of results)
give clear errors and the server keeps serving. Only a worker of a Python model maps libpython.
A Python worker's death is test_python_worker_death.py.
"""
import io
import json
import os
import shutil
import sys
import threading
import time
import zipfile

import pytest
import requests
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from conftest import MODEL_STORE, PYSTUBS, python_model, start_server  # noqa: E402
from test_sequences import run_threads  # noqa: E402
from test_streaming import Stream, sse_events  # noqa: E402

sys.path.insert(0, PYSTUBS)
import grpc  # noqa: E402
import inference_pb2 as ipb  # noqa: E402
import inference_pb2_grpc as igrpc  # noqa: E402

SEQ = "ts_request_sequence_id"
START = "ts_request_sequence_start"
CANCEL = "ts_request_sequence_cancel"
TOL = 1e-5


def mlp_ref():
    """The model.pt inside model-store/mlp_py.mar, loaded by python3-torch."""
    with zipfile.ZipFile(os.path.join(MODEL_STORE, "mlp_py.mar")) as z:
        return torch.jit.load(io.BytesIO(z.read("model.pt"))).eval()


def inputs(n, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 64, generator=g)


def maps_libpython(pid):
    with open(f"/proc/{pid}/maps") as f:
        return "libpython3" in f.read()


def worker_pid(srv, model):
    r = srv.get(f"/models/{model}", api="management")
    assert r.status_code == 200, r.text
    (w,) = r.json()[0]["workers"]
    return w["pid"]


def write_model(store, name, handler_src, yaml="minWorkers: 1\nmaxWorkers: 1\nbatchSize: 1\n",
                handler="handler.py", files=None):
    return python_model(store, name, handler_src, yaml=yaml, handler=handler, files=files)


def wait_model(srv, model, body=b"1", timeout=60, ok=(200,)):
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        try:
            r = srv.post(f"/predictions/{model}", data=body, timeout=30)
            if r.status_code in ok:
                return r
            last = r.text
        except requests.RequestException as e:
            last = e
        time.sleep(0.1)
    raise AssertionError(f"{model} not ready: {last}\n{srv.log()[-3000:]}")


def assert_worker_died(status, text):
    assert status == 500 and "worker died" in json.loads(text)["message"].lower(), text


# ---------------------------------------------------------------- mlp_py


@pytest.mark.smoke
def test_mlp_py_equals_torch_and_only_python_workers_map_libpython(server_factory):
    srv = server_factory(models=["mlp_py", "mlp"])
    x = inputs(20)
    srv.wait_ready("mlp_py", body={"json": x[0].tolist()})
    srv.wait_ready("mlp", body={"json": {"data": x[0].tolist()}})
    with torch.no_grad():
        want = mlp_ref()(x)
    for i in range(len(x)):
        r = srv.post("/predictions/mlp_py", json=x[i].tolist())
        assert r.status_code == 200, r.text
        # a result the handler returns as a list goes out as JSON, labelled so
        assert r.headers["content-type"] == "application/json", r.headers
        got = torch.tensor(r.json())
        assert got.shape == (10,)
        assert torch.allclose(got, want[i], atol=TOL, rtol=0), (got, want[i])
    assert maps_libpython(worker_pid(srv, "mlp_py"))
    assert not maps_libpython(worker_pid(srv, "mlp")), "a C model's worker mapped libpython"
    # bad input: a clear 500 naming the problem, and the worker goes on
    r = srv.post("/predictions/mlp_py", json=[1.0, 2.0])
    assert r.status_code == 500 and "expected 64 numbers" in r.json()["message"], r.text
    r = srv.post("/predictions/mlp_py", json=x[3].tolist())
    assert r.status_code == 200 and torch.allclose(torch.tensor(r.json()), want[3], atol=TOL)
    # describe ?customized=true: BaseHandler's default is {}
    r = srv.get("/models/mlp_py?customized=true", api="management")
    assert r.status_code == 200 and r.json()[0]["customizedMetadata"] == {}, r.text


def test_mlp_py_batch8_under_16_clients(server_factory):
    srv = server_factory(models=["mlp_py"], config={"worker_debug_headers": True},
                         yaml={"mlp_py": {"batchSize": 8, "maxBatchDelay": 300}})
    x = inputs(16 * 4, seed=2)
    srv.wait_ready("mlp_py", body={"json": x[0].tolist()})
    with torch.no_grad():
        want = mlp_ref()(x)
    batches, errors = [], []

    def client(k):
        with requests.Session() as s:
            for j in range(4):
                i = k * 4 + j
                r = s.post(srv.url("/predictions/mlp_py"), json=x[i].tolist(), timeout=30)
                if r.status_code != 200:
                    errors.append(r.text)
                    continue
                batches.append(int(r.headers["x-ts-worker-batch"]))
                if not torch.allclose(torch.tensor(r.json()), want[i], atol=TOL, rtol=0):
                    errors.append(f"request {i}: {r.text} != {want[i].tolist()}")

    run_threads([lambda k=k: client(k) for k in range(16)])
    assert not errors, errors[:3]
    assert len(batches) == 64
    assert max(batches) == 8, batches  # the requests of a batch ran as one forward


# ---------------------------------------------------------------- stateful_py


def post_seq(srv, sid, value, headers=None, **kw):
    h = {SEQ: sid} if sid else {}
    h.update(headers or {})
    return srv.post("/predictions/stateful_py", data=str(value), headers=h, **kw)


def stateful_server(server_factory, **yaml):
    srv = server_factory(models=["stateful_py"], yaml={"stateful_py": yaml} if yaml else None)
    wait_model(srv, "stateful_py", body=b"0")
    return srv


def test_stateful_py_sums_stream_end_and_cancel(server_factory):
    """Generated ids: running sums; an odd number streams its sum stream_steps times; 0 ends
    the sequence (410 after); -1 cancels a running stream of the same sequence."""
    srv = stateful_server(server_factory, handler={"stream_steps": 400, "stream_delay_ms": 50})
    r = post_seq(srv, None, 2)
    assert r.status_code == 200 and r.text == "2", r.text
    sid = r.headers[SEQ]
    assert post_seq(srv, sid, 4).text == "6"
    other = post_seq(srv, None, 10).headers[SEQ]

    chunks, res = [], {}
    first = threading.Event()

    def stream():
        with post_seq(srv, sid, 3, stream=True) as r:
            res["status"] = r.status_code
            for c in r.iter_content(chunk_size=None):
                chunks.append(c.decode())
                first.set()

    def cancel():
        assert first.wait(10)
        time.sleep(0.3)
        res["cancel"] = post_seq(srv, sid, -1)

    run_threads([stream, cancel])
    assert res["status"] == 200
    text = "".join(chunks)
    assert text and set(text) == {"9"}, text  # every chunk carried the sum 9
    assert 2 <= len(text) < 400, text  # cut short (the whole stream: 400 chunks, 20 s)
    c = res["cancel"]
    assert c.status_code == 200 and c.text == "-1" and c.headers.get(CANCEL) == "true", c.text
    r = post_seq(srv, sid, 4)
    assert r.status_code == 410 and "was cancelled" in r.json()["message"], r.text
    # the other sequence: a full stream of 400 answers, then the end
    s = Stream(srv.ports["inference"], "/predictions/stateful_py", "1", {SEQ: other})
    assert s.read_all().decode() == "11" * 400
    assert s.chunked
    s.close()
    r = post_seq(srv, other, 0)
    assert r.status_code == 200 and r.text == "11", r.text
    assert post_seq(srv, other, 1).status_code == 410


def test_stateful_py_torchserve_http_scenario(server_factory):
    """TorchServe's curl scenario: two concurrent sequences with client-chosen ids and no start
    header (an id the server has never seen starts a sequence: issue 11 point 4)."""
    srv = stateful_server(server_factory)
    got = {}

    def seq(sid, values):
        answers = []
        for v in values:
            r = post_seq(srv, sid, v)
            assert r.status_code == 200, r.text
            assert r.headers[SEQ] == sid
            answers.append(r.text)
        got[sid] = answers

    run_threads([lambda: seq("seq_0", [2, 4, 3, 0]), lambda: seq("seq_1", [6, 1, 8, 0])])
    assert got == {"seq_0": ["2", "6", "9" * 5, "9"], "seq_1": ["6", "7" * 5, "15", "15"]}


def test_stateful_py_cancel_joins_a_running_stream_at_batch_size_1(server_factory):
    """TorchServe's test_infer_stateful_cancel (examples/stateful, sequence continuous batching)
    with its configuration: 2 workers, batchSize 1, maxNumSequence 2. A sequence streams an odd
    number; a -1 sent 1 s later joins the running stream at its next step (TorchServe polls
    the sequence's queue after every step), is answered at once and ends the stream early
    (issue 35: it waited for the whole stream). Four times, more than maxNumSequence: each
    cancelled sequence frees its place."""
    steps, delay_ms = 10, 300  # a whole stream: 3 s
    srv = stateful_server(server_factory, minWorkers=2, maxWorkers=2, batchSize=1,
                          maxNumSequence=2, handler={"stream_steps": steps,
                                                     "stream_delay_ms": delay_ms})
    for _ in range(4):
        r = post_seq(srv, None, 2)
        assert r.status_code == 200 and r.text == "2", r.text
        sid = r.headers[SEQ]
        chunks, res = [], {}

        def stream():
            with srv.post("/predictions/stateful_py", json={"input": 3}, headers={SEQ: sid},
                          stream=True) as r:
                res["stream"] = r.status_code
                assert r.headers["Transfer-Encoding"] == "chunked"
                for c in r.iter_content(chunk_size=None):
                    if c:
                        chunks.append(c.decode())

        def cancel():
            time.sleep(1)
            t0 = time.time()
            res["cancel"] = post_seq(srv, sid, -1)
            res["cancel_s"] = time.time() - t0

        t0 = time.time()
        run_threads([stream, cancel])
        elapsed = time.time() - t0
        c = res["cancel"]
        assert c.status_code == 200 and c.text == "-1" and c.headers.get(CANCEL) == "true", c.text
        assert res["stream"] == 200
        text = "".join(chunks)
        assert text and set(text) == {"5"}, text  # 2 + 3 at every step
        assert len(chunks) < steps and len(text) < steps, chunks  # cut short
        # answered within a few steps of its arrival, not after the stream (2 s more)
        assert res["cancel_s"] < 4 * delay_ms / 1000, (res["cancel_s"], elapsed)
        assert post_seq(srv, sid, 4).status_code == 410


def grpc_msg(value, sid="", start=False):
    inp = {"data": str(value).encode()}
    if start:
        inp[START] = b"true"
    return ipb.PredictionsRequest(model_name="stateful_py", sequence_id=sid, input=inp)


def test_stateful_py_grpc_stream_predictions2(server_factory):
    """StreamPredictions2: a sequence with a client-chosen id and a start flag streams its odd
    answer as several messages; 0 ends it."""
    srv = stateful_server(server_factory, handler={"stream_steps": 3, "stream_delay_ms": 10})
    st = igrpc.InferenceAPIsServiceStub(grpc.insecure_channel(f"127.0.0.1:{srv.ports['grpc']}"))
    reqs = [grpc_msg(2, "g-1", start=True), grpc_msg(4, "g-1"), grpc_msg(1, "g-1"),
            grpc_msg(0, "g-1")]
    out = list(st.StreamPredictions2(iter(reqs), timeout=30))
    assert all(not o.HasField("status") for o in out), out
    assert all(o.sequence_id == "g-1" for o in out), out
    assert [o.prediction.decode() for o in out] == ["2", "6", "7", "7", "7", "7"]


def test_stateful_py_grpc_client_chosen_id_without_start(server_factory):
    """torchserve_grpc_client.py infer_stream2 stateful seq_0 ...: no start flag (point 4)."""
    srv = stateful_server(server_factory)
    st = igrpc.InferenceAPIsServiceStub(grpc.insecure_channel(f"127.0.0.1:{srv.ports['grpc']}"))
    out = list(st.StreamPredictions2(iter([grpc_msg(2, "seq_0"), grpc_msg(4, "seq_0")]),
                                     timeout=30))
    assert [o.prediction.decode() for o in out] == ["2", "6"], out


# ---------------------------------------------------------------- streaming handler

STREAMER = '''
import logging
import time

from ts.protocol.otf_message_handler import send_intermediate_predict_response
from ts.utils.util import RequestCancelled

log = logging.getLogger("streamer")


def handle(data, context):
    if data is None:
        return None
    n = int(data[0]["body"])
    sent = 0
    try:
        for k in range(n - 1):
            send_intermediate_predict_response([f"w{k} "], context.request_ids, "ok", 200,
                                               context)
            sent += 1
            time.sleep(0.01)
    except RequestCancelled:
        log.info("stream cancelled after %d sends", sent)
        return ["cancelled"]
    return [f"w{n - 1}"]
'''


@pytest.fixture
def streamer(tmp):
    store = os.path.join(tmp, "store")
    write_model(store, "streamer", STREAMER)
    srv = start_server(tmp, models=["streamer"], store=store)
    wait_model(srv, "streamer", body=b"1")
    srv.stub = igrpc.InferenceAPIsServiceStub(
        grpc.insecure_channel(f"127.0.0.1:{srv.ports['grpc']}"))
    yield srv
    srv.stop()


def test_streaming_chunked_sse_grpc_and_disconnect(streamer):
    srv = streamer
    s = Stream(srv.ports["inference"], "/predictions/streamer", "6")
    assert s.status == 200 and s.chunked
    parts = []
    while (c := s.next_chunk()) is not None:
        parts.append(c.decode())
    s.close()
    assert parts == ["w0 ", "w1 ", "w2 ", "w3 ", "w4 ", "w5"], parts
    s = Stream(srv.ports["inference"], "/predictions/streamer", "4",
               {"Accept": "text/event-stream"})
    evs = sse_events(s.read_all())
    s.close()
    assert ["\n".join(e["data"]) for e in evs if "data" in e] == ["w0 ", "w1 ", "w2 ", "w3"]
    out = [m.prediction.decode() for m in srv.stub.StreamPredictions(
        ipb.PredictionsRequest(model_name="streamer", input={"body": b"3"}), timeout=30)]
    assert out == ["w0 ", "w1 ", "w2"], out
    # a client that goes away: the handler's next send raises RequestCancelled
    s = Stream(srv.ports["inference"], "/predictions/streamer", "3000")
    for _ in range(20):
        assert s.next_chunk() is not None
    s.close()
    deadline = time.time() + 10
    while "stream cancelled after" not in srv.log() and time.time() < deadline:
        time.sleep(0.05)
    line = [x for x in srv.log().splitlines() if "stream cancelled after" in x]
    assert line, srv.log()[-2000:]
    sent = int(line[0].rsplit("after ", 1)[1].split()[0])
    assert 20 <= sent < 100, line  # stopped within a few steps, not after 3000
    r = srv.post("/predictions/streamer", data=b"1")
    assert r.status_code == 200 and r.text == "w0"


# ---------------------------------------------------------------- faults and resolution

FAULTY = '''
from ts.utils.util import PredictionException


class Faulty:
    def initialize(self, context):
        self.initialized = True

    def handle(self, data, context):
        body = data[0]["body"]
        if body == b"raise":
            raise ValueError("boom in the handler")
        if body == b"busy":
            raise PredictionException("model is warming up", 503)
        if body == b"short":
            return []
        if body == b"describe":
            return [context.get_all_request_header(0).get("x-probe", "none")]
        context.metrics.add_counter("PyOkCalls", 1)
        context.metrics.add_time("PyStepTime", 2.5, None, "ms")
        return [b"ok:" + body]
'''

FUNC = '''
import torch

calls = {"init": 0}


def handle(data, context):
    if data is None:  # TorchServe initialises a function handler with data None
        calls["init"] += 1
        return None
    body = data[0]["body"]
    return [{"n": len(data), "init": calls["init"], "q": data[0].get("q", b"").decode(),
             "json": body.decode() if isinstance(body, bytes) else body,
             "seq": context.get_request_header(0, "x-probe"), "threads": torch.get_num_threads()}]


def other(data, context):
    return ["other"] * len(data) if data is not None else None
'''

MISSING = '''
import torchserve_c_no_such_module  # noqa: F401


def handle(data, context):
    return data
'''


def test_faults_and_handler_resolution(tmp):
    store = os.path.join(tmp, "store")
    write_model(store, "faulty", FAULTY)
    write_model(store, "func", FUNC)
    write_model(store, "func2", FUNC, handler="handler.py:other")
    write_model(store, "missing", MISSING)
    srv = start_server(tmp, models=["faulty", "func", "func2", "missing"], store=store,
                       config={"enable_model_api": "true"},
                       extra_args=["--continue-on-model-error"])
    try:
        wait_model(srv, "faulty", body=b"x")
        r = srv.post("/predictions/faulty", data=b"raise")
        assert r.status_code == 500, r.text
        assert r.json()["message"] == "ValueError: boom in the handler", r.text
        assert "Traceback" in srv.log() and 'raise ValueError("boom in the handler")' in srv.log()
        r = srv.post("/predictions/faulty", data=b"busy")
        assert r.status_code == 503 and r.json()["message"] == "model is warming up", r.text
        r = srv.post("/predictions/faulty", data=b"short")
        assert r.status_code == 500, r.text
        assert "returned 0 results for a batch of 1" in r.json()["message"], r.text
        r = srv.post("/predictions/faulty", data=b"describe", headers={"X-Probe": "hi"})
        assert r.status_code == 200 and r.text == "hi", r.text
        r = srv.post("/predictions/faulty", data=b"fine")
        assert r.status_code == 200 and r.text == "ok:fine", r.text
        # context.metrics records reach /metrics (wait_model's b"x" and b"fine": 2 calls), with
        # TorchServe's default dimensions
        text = srv.get("/metrics", api="metrics").text
        ok = [x for x in text.splitlines()
              if x.startswith("PyOkCalls{") and 'ModelName="faulty",Level="Model"' in x]
        assert len(ok) == 1 and float(ok[0].rsplit(" ", 1)[1]) == 2, ok
        step = [x for x in text.splitlines()
                if x.startswith("PyStepTime{") and 'ModelName="faulty",Level="Model"' in x]
        assert len(step) == 1 and float(step[0].rsplit(" ", 1)[1]) == 2.5, step

        r = wait_model(srv, "func", body=b"")
        r = srv.post("/predictions/func?q=7", json={"a": [1, 2]}, headers={"x-probe": "p"})
        assert r.status_code == 200, r.text
        # torch in the handler runs on the worker's --threads setting (one libtorch)
        (pid,) = [p for p in srv.worker_pids() if p == worker_pid(srv, "func")]
        argv = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
        threads = int(argv[argv.index(b"--threads") + 1])
        assert r.json() == {"n": 1, "init": 1, "q": "7", "json": {"a": [1, 2]}, "seq": "p",
                            "threads": threads}
        r = wait_model(srv, "func2", body=b"")
        assert r.text == "other"

        # the import error reaches describe, and a register of the same handler
        msg = ("handler.py: No module named 'torchserve_c_no_such_module' (add it as a Debian "
               "python3-* package, or list it in the model's requirements.txt and start the "
               "server with install_py_dep_per_model=true)")
        deadline = time.time() + 30
        while time.time() < deadline:
            d = srv.get("/models/missing", api="management").json()[0]
            if d.get("loadError"):
                break
            time.sleep(0.1)
        assert d.get("loadError") == msg, d
        shutil.copytree(os.path.join(store, "missing"), os.path.join(store, "missing2"))
        r = srv.post("/models?url=missing2&model_name=missing2&initial_workers=1"
                     "&synchronous=true", api="management", timeout=180)
        assert r.status_code == 500, r.text
        assert r.json()["message"] == "Failed to start workers: " + msg, r.text
        # and the server kept serving throughout
        assert srv.post("/predictions/faulty", data=b"again").text == "ok:again"
    finally:
        srv.stop()


ECHO = """
import torch


def handle(data, context):
    if data is None:
        return None
    out = []
    for i, row in enumerate(data):
        expr = context.get_request_header(i, "x-value")  # the client sends X-Value
        out.append(repr(row) if expr is None else eval(expr, {"torch": torch}))
    return out
"""

# results the worker encodes itself and ones it leaves to the json module / torch.save
VALUES = [
    "torch.randn(40, generator=torch.Generator().manual_seed(3)).tolist()",
    "[0.1, -0.0, 1e-05, 1.5e-7, 1e16, 123456.0, 5e-324, 2 ** 70, -7, True, None]",
    "[float('nan'), float('inf'), -float('inf')]",
    "{'k': ('t', None, [{}]), 'caf\\u00e9 \"q\"\\n': '\\ud83d\\ude00\\x01\\ud800'}",
    "{1: 2, 2.5: 'x', None: 0}",
    "eval('[' * 70 + '1' + ']' * 70)",  # deeper than the worker's encoder goes
]


def test_data_rows_and_result_encoding_as_torchserve(tmp):
    """The worker parses request bodies and encodes results in C (py_json.c) where it can and
    leaves the rest to the json module: either way the handler sees what json.loads gives and
    the client gets what json.dumps writes, with the same content types and warnings."""
    store = os.path.join(tmp, "store")
    write_model(store, "echo", ECHO)
    srv = start_server(tmp, models=["echo"], store=store)
    try:
        wait_model(srv, "echo", body=b"1")

        def row(body, ctype, query=""):
            r = srv.post(f"/predictions/echo{query}", data=body, headers={"Content-Type": ctype})
            assert r.status_code == 200, r.text
            # the handler's repr(row): a literal but for inf and nan
            return eval(r.text, {"inf": float("inf"), "nan": float("nan")})

        for body in (b'{"a": [1, 2.5, -0.0, 1e400, 0.30000000000000004], "s": "caf\xc3\xa9"}',
                     b' [true, false, null, 123456789012345678, 1.5E-3]\n',
                     b'{"s": "a\\nb\\u00e9", "n": 12345678901234567890123, "a": 1, "a": 2}',
                     b'[-1e-400, 9007199254740993, 2.2250738585072011e-308, NaN]'):
            got = row(body, "application/json", "?q=7")
            want = json.loads(body.decode())
            assert repr(got["body"]) == repr(want), (body, got)
            assert got["q"] == b"7"
        assert row(b"caf\xc3\xa9", "text/plain")["body"] == "caf\u00e9"
        # not JSON / not UTF-8: the bytes, and a warning naming the parameter
        assert row(b'{"a": 1,}', "application/json")["body"] == b'{"a": 1,}'
        assert "parameter body: not valid JSON, passed as bytes" in srv.log()
        assert row(b"\xff\xfe", "text/plain")["body"] == b"\xff\xfe"
        assert "parameter body: not valid UTF-8, passed as bytes" in srv.log()

        g = {"torch": torch}
        for expr in VALUES:
            r = srv.post("/predictions/echo", data=b"1", headers={"X-Value": expr})
            assert r.status_code == 200, (expr, r.text)
            assert r.headers["Content-Type"] == "application/json", expr
            assert r.content == json.dumps(eval(expr, g)).encode(), expr
        r = srv.post("/predictions/echo", data=b"1", headers={"X-Value": "'caf\\u00e9'"})
        assert r.content == "caf\u00e9".encode() and r.headers["Content-Type"].startswith(
            "text/plain"), r.headers
        r = srv.post("/predictions/echo", data=b"1", headers={"X-Value": "b'raw'"})
        assert r.content == b"raw"
        assert r.headers["Content-Type"] == "application/octet-stream"
        r = srv.post("/predictions/echo", data=b"1", headers={"X-Value": "torch.ones(2)"})
        assert r.headers["Content-Type"] == "application/octet-stream"
        assert torch.equal(torch.load(io.BytesIO(r.content)), torch.ones(2))
        r = srv.post("/predictions/echo", data=b"1", headers={"X-Value": "'\\ud800'"})
        assert r.status_code == 500 and "UnicodeEncodeError" in r.json()["message"], r.text
    finally:
        srv.stop()


EAGER_MODEL = '''
import torch
from torch import nn


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        return torch.softmax(self.fc(x), dim=1)
'''

EAGER_HANDLER = '''
import torch

from ts.torch_handler.base_handler import BaseHandler


class Eager(BaseHandler):
    def preprocess(self, data):
        return torch.tensor([row["body"] for row in data], dtype=torch.float32)

    def postprocess(self, out):
        return [{self.mapping[str(int(i))]: float(p[i]) for i in p.argsort(descending=True)[:2]}
                for p in out]

    def describe_handle(self):
        return {"classes": len(self.mapping), "model": type(self.model).__name__}
'''


def test_eager_model_py_state_dict_and_label_mapping(tmp):
    """BaseHandler eager mode: MANIFEST modelFile (one nn.Module class) + serializedFile as its
    state_dict, index_to_name.json as self.mapping; outputs equal torch's for the same weights."""
    store = os.path.join(tmp, "store")
    labels = {"0": "cat", "1": "dog", "2": "owl"}
    d = write_model(store, "eager", EAGER_HANDLER, files={
        "model.py": EAGER_MODEL, "index_to_name.json": json.dumps(labels)},
        yaml="minWorkers: 1\nmaxWorkers: 1\nbatchSize: 4\nmaxBatchDelay: 100\n")
    ns = {}
    exec(EAGER_MODEL, ns)
    torch.manual_seed(3)
    ref = ns["Tiny"]().eval()
    torch.save(ref.state_dict(), os.path.join(d, "tiny.pt"))
    mpath = os.path.join(d, "MAR-INF", "MANIFEST.json")
    manifest = json.load(open(mpath))
    manifest["model"].update({"serializedFile": "tiny.pt", "modelFile": "model.py"})
    json.dump(manifest, open(mpath, "w"))
    srv = start_server(tmp, models=["eager"], store=store)
    try:
        x = [[0.5, -1.0, 2.0, 0.25], [1.0, 1.0, -3.0, 0.0]]
        srv.wait_ready("eager", body={"json": x[0]})
        with torch.no_grad():
            p = ref(torch.tensor(x))
        for k in range(2):
            r = srv.post("/predictions/eager", json=x[k])
            assert r.status_code == 200, r.text
            got = r.json()
            order = p[k].argsort(descending=True)[:2]
            assert list(got) == [labels[str(int(i))] for i in order], got
            for i in order:
                assert abs(got[labels[str(int(i))]] - float(p[k][i])) < TOL
        r = srv.get("/models/eager?customized=true", api="management")
        assert r.json()[0]["customizedMetadata"] == {"classes": 3, "model": "Tiny"}, r.text
    finally:
        srv.stop()
