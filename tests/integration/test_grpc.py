"""gRPC inference (7070) and management (7071) APIs against the real server, through Python
clients built from the build-time stubs in build/py.

- Ping, Predictions equal to what torch computes from the archive's model.pt (1e-5);
- 4 client processes x 16 concurrent calls, all answered correctly;
- StreamPredictions: one message per word at the handler's pace; unary Predictions on the same
  model gives the whole answer; a cancelled stream, or one past its deadline, cancels the job
  on the worker, and so does a unary call's deadline; SIGTERM with calls in flight ends them all;
- StreamPredictions2: each request answered in order, errors as PredictionResponse.status with
  the stream kept open, the half-close ends the call;
- NOT_FOUND for an unknown model/version, RESOURCE_EXHAUSTED above max_request_size;
- management scenarios of TorchServe's postman collection with their gRPC codes (3, 5, 13),
  scaling checked against real worker processes, PERMISSION_DENIED when the model API is off;
- scripts/torchserve_c_client.py run as a user would, its output and exit codes;
- token auth: UNAUTHENTICATED without a key, keys scoped per API, a rotated key stops working.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import zipfile

import pytest
import requests

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from conftest import MODEL_STORE, PYSTUBS, mar_module, start_server  # noqa: E402

sys.path.insert(0, PYSTUBS)
import grpc  # noqa: E402
import inference_pb2 as ipb  # noqa: E402
import inference_pb2_grpc as igrpc  # noqa: E402
import management_pb2 as mpb  # noqa: E402
import management_pb2_grpc as mgrpc  # noqa: E402
from google.protobuf import empty_pb2  # noqa: E402

TOL = 1e-5
C = grpc.StatusCode


def inference_stub(srv):
    return igrpc.InferenceAPIsServiceStub(grpc.insecure_channel(f"127.0.0.1:{srv.ports['grpc']}"))


def management_stub(srv):
    return mgrpc.ManagementAPIsServiceStub(
        grpc.insecure_channel(f"127.0.0.1:{srv.ports['grpc_mgmt']}"))


def rpc_error(fn, *a, **kw):
    with pytest.raises(grpc.RpcError) as ei:
        fn(*a, **kw)
    return ei.value


def mlp_input(i):
    return [((k * 7 + i * 13) % 17) / 8.0 - 1.0 for k in range(64)]


def data_request(model, values, **kw):
    return ipb.PredictionsRequest(model_name=model,
                                  input={"data": json.dumps({"data": values}).encode()}, **kw)


@pytest.fixture(scope="module")
def mlp_ref():
    import torch
    m = mar_module("mlp")

    def run(values):
        with torch.no_grad():
            return m(torch.tensor([values], dtype=torch.float32))[0].tolist()
    return run


@pytest.fixture(scope="module")
def isrv():
    """One server for the inference tests: mlp, and identity_text at 100 ms per word."""
    tmp = tempfile.mkdtemp(prefix="tsc-grpc-")
    s = start_server(tmp, models=["mlp", "identity_text"],
                     config={"max_request_size": 100000},
                     yaml={"identity_text": {"handler": {"delay_ms": 100}}})
    try:
        s.wait_ready("mlp", body={"json": {"data": mlp_input(0)}})
        yield s
        stop_clean(s)
    finally:
        s.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def stop_clean(s):
    """Stops the server; under ASan/UBSan its log must hold no sanitizer report."""
    s.stop()
    log = s.log()
    for bad in ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:"):
        assert bad not in log, log[log.index(bad) - 200:][:3000]


def assert_close(got, want):
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert abs(a - b) <= TOL, (got, want)


# ---------------------------------------------------------------------------- inference API

@pytest.mark.smoke
def test_ping_and_predictions(isrv, mlp_ref):
    st = inference_stub(isrv)
    # the fixture waited for mlp only; Ping is Healthy once identity_text has loaded too
    deadline = time.time() + 60
    while json.loads(st.Ping(empty_pb2.Empty(), timeout=10).health) != {"status": "Healthy"}:
        assert time.time() < deadline, isrv.log()[-3000:]
        time.sleep(0.1)
    for i in range(3):
        r = st.Predictions(data_request("mlp", mlp_input(i)), timeout=30)
        assert_close(json.loads(r.prediction), mlp_ref(mlp_input(i)))
    # explicit version = the default one
    r = st.Predictions(data_request("mlp", mlp_input(5), model_version="1.0"), timeout=30)
    assert_close(json.loads(r.prediction), mlp_ref(mlp_input(5)))


@pytest.mark.smoke
def test_unknown_model_and_version(isrv):
    st = inference_stub(isrv)
    e = rpc_error(st.Predictions, data_request("nope", [1.0]), timeout=10)
    assert e.code() == C.NOT_FOUND and "Model not found: nope" in e.details()
    e = rpc_error(st.Predictions, data_request("mlp", [1.0], model_version="9.9"), timeout=10)
    assert e.code() == C.NOT_FOUND and "9.9" in e.details()
    e = rpc_error(lambda: list(st.StreamPredictions(data_request("nope", [1.0]), timeout=10)))
    assert e.code() == C.NOT_FOUND
    # a bad input is the handler's 400 -> INVALID_ARGUMENT, with its message
    bad = ipb.PredictionsRequest(model_name="mlp", input={"data": b"{not json"})
    e = rpc_error(st.Predictions, bad, timeout=10)
    assert e.code() == C.INVALID_ARGUMENT and e.details()


@pytest.mark.parametrize("others,pad", [(0, 0), (0, 6000), (30, 0), (30, 6000)])
def test_last_entry_of_a_key_wins_and_large_requests_answer(isrv, mlp_ref, others, pad):
    """The input map's last entry of a key counts (proto3's rule), whether the request has a
    few entries (read in place) or more than 16 (sorted), and a request past the 4 KiB the
    frontend unpacks on its stack answers like a small one: the message below is three
    PredictionsRequests back to back, which protobuf reads as one whose "data" entry comes
    twice, with OTHERS other keys between."""
    first = ipb.PredictionsRequest(model_name="mlp",
                                   input={"data": json.dumps({"data": mlp_input(1)}).encode()})
    between = ipb.PredictionsRequest(input={f"k{i}": b"x" for i in range(others)})
    last = ipb.PredictionsRequest(
        input={"data": json.dumps({"data": mlp_input(5)}).encode() + b" " * pad})
    wire = first.SerializeToString() + between.SerializeToString() + last.SerializeToString()
    assert len(wire) > 4096 if pad else len(wire) < 4096
    call = grpc.insecure_channel(f"127.0.0.1:{isrv.ports['grpc']}").unary_unary(
        "/org.pytorch.serve.grpc.inference.InferenceAPIsService/Predictions",
        response_deserializer=ipb.PredictionResponse.FromString)
    got = json.loads(call(wire, timeout=30).prediction)
    want = mlp_ref(mlp_input(5))
    assert max(abs(a - b) for a, b in zip(got, want)) < 1e-5, (got, want)
    assert max(abs(a - b) for a, b in zip(mlp_ref(mlp_input(1)), want)) > 1e-3  # they differ


def test_max_request_size(isrv):
    st = inference_stub(isrv)
    big = ipb.PredictionsRequest(model_name="mlp", input={"data": b"x" * 200000})
    e = rpc_error(st.Predictions, big, timeout=10)
    assert e.code() == C.RESOURCE_EXHAUSTED


CLIENT = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
import grpc, inference_pb2 as ipb, inference_pb2_grpc as igrpc
port, proc = sys.argv[2], int(sys.argv[3])
st = igrpc.InferenceAPIsServiceStub(grpc.insecure_channel("127.0.0.1:" + port))
def inp(i):
    return [((k * 7 + i * 13) % 17) / 8.0 - 1.0 for k in range(64)]
futs = []
for n in range(16):
    i = proc * 16 + n
    req = ipb.PredictionsRequest(model_name="mlp",
                                 input={"data": json.dumps({"data": inp(i)}).encode()})
    futs.append((i, st.Predictions.future(req, timeout=60)))
out = {}
for i, f in futs:
    out[i] = json.loads(f.result().prediction)
print(json.dumps(out))
"""


def test_four_processes_64_concurrent_calls(isrv, mlp_ref):
    procs = [subprocess.Popen([sys.executable, "-c", CLIENT, PYSTUBS, str(isrv.ports["grpc"]),
                               str(p)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for p in range(4)]
    results = {}
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err.decode()
        results.update({int(k): v for k, v in json.loads(out).items()})
    assert sorted(results) == list(range(64))
    for i, got in results.items():
        assert_close(got, mlp_ref(mlp_input(i)))


def test_stream_predictions_one_message_per_word(isrv):
    st = inference_stub(isrv)
    req = ipb.PredictionsRequest(model_name="identity_text",
                                 input={"body": b"hello streaming gRPC world"})
    t0 = time.time()
    msgs, times = [], []
    for m in st.StreamPredictions(req, timeout=30):
        msgs.append(m.prediction)
        times.append(time.time() - t0)
    assert msgs == [b"hello", b" streaming", b" gRPC", b" world"]
    # the words arrive at the handler's pace (100 ms), not all at the end
    assert times[-1] - times[0] >= 0.2, times
    # the unary rpc on a streaming model gives the whole answer at once
    r = st.Predictions(req, timeout=30)
    assert r.prediction == b"hello streaming gRPC world"
    # a non-streaming model through StreamPredictions: one message, then OK
    msgs = list(st.StreamPredictions(data_request("mlp", mlp_input(1)), timeout=30))
    assert len(msgs) == 1 and len(json.loads(msgs[0].prediction)) == 10


def test_stream_cancel_reaches_worker(isrv):
    st = inference_stub(isrv)
    req = ipb.PredictionsRequest(model_name="identity_text",
                                 input={"body": b" ".join([b"w"] * 50)})
    it = st.StreamPredictions(req, timeout=30)
    assert next(it).prediction == b"w"
    it.cancel()
    deadline = time.time() + 5
    while time.time() < deadline and "client went away; cancelled on worker" not in isrv.log():
        time.sleep(0.05)
    assert "client went away; cancelled on worker" in isrv.log()
    # the slot is free again: the next stream completes at once
    msgs = [m.prediction for m in st.StreamPredictions(ipb.PredictionsRequest(
        model_name="identity_text", input={"body": b"again"}), timeout=10)]
    assert msgs == [b"again"]


def test_stream_deadline_reaches_worker(isrv):
    """The client's deadline ends the call on the server too: the job is cancelled on the
    worker soon after, and the next call is served."""
    st = inference_stub(isrv)
    req = ipb.PredictionsRequest(model_name="identity_text",
                                 input={"body": b" ".join([b"d"] * 600)})  # 60 s of words
    n0 = isrv.log().count("client went away; cancelled on worker")
    t0 = time.time()
    got = []
    e = rpc_error(lambda: [got.append(m) for m in st.StreamPredictions(req, timeout=0.35)])
    assert e.code() == C.DEADLINE_EXCEEDED and len(got) < 600, (e, len(got))
    # cancelled on the worker, so long before the stream's natural end (no clock needed: a
    # job that ended by itself is not cancelled)
    while time.time() < t0 + 60 and \
            isrv.log().count("client went away; cancelled on worker") == n0:
        time.sleep(0.02)
    assert isrv.log().count("client went away; cancelled on worker") == n0 + 1
    msgs = [m.prediction for m in st.StreamPredictions(ipb.PredictionsRequest(
        model_name="identity_text", input={"body": b"next"}), timeout=10)]
    assert msgs == [b"next"]


def test_unary_deadline_reaches_worker(isrv):
    """A unary call's deadline reaches the worker too. The server arms its watch on a call's end
    (RECV_CLOSE_ON_SERVER) only once the call is 5 ms old, or with its status: the job is still
    cancelled soon after the deadline, and the next call is served."""
    st = inference_stub(isrv)
    req = ipb.PredictionsRequest(model_name="identity_text",
                                 input={"body": b" ".join([b"u"] * 600)})  # 60 s of words
    n0 = isrv.log().count("client went away; cancelled on worker")
    t0 = time.time()
    e = rpc_error(st.Predictions, req, timeout=0.3)
    assert e.code() == C.DEADLINE_EXCEEDED, e
    while time.time() < t0 + 60 and \
            isrv.log().count("client went away; cancelled on worker") == n0:
        time.sleep(0.02)
    assert isrv.log().count("client went away; cancelled on worker") == n0 + 1
    got = st.Predictions(ipb.PredictionsRequest(model_name="identity_text",
                                                input={"body": b"next"}), timeout=10)
    assert got.prediction == b"next"


def test_stop_with_calls_in_flight():
    """SIGTERM while unary calls wait on a slow model, some of them a few milliseconds old (their
    end is not watched yet) and some arriving as the servers stop: every call ends (CANCELLED or
    UNAVAILABLE) and the server exits at once, with no sanitizer report."""
    tmp = tempfile.mkdtemp(prefix="tsc-grpc-stop-")
    s = start_server(tmp, models=["identity_text"],
                     yaml={"identity_text": {"handler": {"delay_ms": 100}}})
    try:
        s.wait_ready("identity_text", body={"data": b"x"})
        st = inference_stub(s)
        req = ipb.PredictionsRequest(model_name="identity_text",
                                     input={"body": b" ".join([b"w"] * 600)})  # 60 s each
        futs = [st.Predictions.future(req, timeout=120) for _ in range(8)]
        time.sleep(0.3)
        futs += [st.Predictions.future(req, timeout=120) for _ in range(8)]
        s.proc.send_signal(signal.SIGTERM)
        futs += [st.Predictions.future(req, timeout=120) for _ in range(8)]
        # at once: long before a single call could have finished (the wait is a hang guard)
        s.proc.wait(timeout=50)
        for f in futs:
            assert f.exception(timeout=10) is not None
        stop_clean(s)
    finally:
        s.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def test_stream_predictions2_requests_and_errors(isrv, mlp_ref):
    st = inference_stub(isrv)

    def reqs():
        yield ipb.PredictionsRequest(model_name="identity_text", input={"body": b"a b"},
                                     sequence_id="s1")
        yield ipb.PredictionsRequest(model_name="nope", input={"body": b"x"})
        yield data_request("mlp", mlp_input(3))
        yield ipb.PredictionsRequest(model_name="identity_text", input={"body": b"c"})

    out = list(st.StreamPredictions2(reqs(), timeout=30))
    assert [m.prediction for m in out[:2]] == [b"a", b" b"]
    assert out[0].sequence_id == "s1"
    assert out[2].HasField("status") and out[2].status.code == C.NOT_FOUND.value[0]
    assert "Model not found: nope" in out[2].status.message
    assert_close(json.loads(out[3].prediction), mlp_ref(mlp_input(3)))
    assert out[4].prediction == b"c" and len(out) == 5


# --------------------------------------------------------------------------- management API

def make_v2_store(store):
    """An mlp archive whose manifest says version 2.0, unpacked as store/mlp_v2/."""
    d = os.path.join(store, "mlp_v2")
    with zipfile.ZipFile(os.path.join(MODEL_STORE, "mlp.mar")) as z:
        z.extractall(d)
    mf = os.path.join(d, "MAR-INF", "MANIFEST.json")
    manifest = json.load(open(mf))
    manifest["model"]["modelVersion"] = "2.0"
    json.dump(manifest, open(mf, "w"))


@pytest.fixture(scope="module")
def msrv():
    """A server with the model API on and an empty registry (archives in the store)."""
    tmp = tempfile.mkdtemp(prefix="tsc-grpcm-")
    store = os.path.join(tmp, "store")
    os.makedirs(store)
    for m in ("mlp", "identity_text"):
        shutil.copy(os.path.join(MODEL_STORE, f"{m}.mar"), store)
    make_v2_store(store)
    s = start_server(tmp, store=store, extra_args=["--enable-model-api"],
                     config={"default_workers_per_model": 0})
    try:
        yield s
        stop_clean(s)
    finally:
        s.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def wait_workers(srv, n, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if len(srv.worker_pids()) == n:
            return srv.worker_pids()
        time.sleep(0.1)
    raise AssertionError(f"expected {n} workers, have {srv.worker_pids()}")


def test_management_scenarios(msrv):
    mg = management_stub(msrv)
    T = 60

    # register without initial_workers: the archive's minWorkers (1) starts a worker, as
    # TorchServe; synchronous is false in the request, so the answer does not wait for it
    r = mg.RegisterModel(mpb.RegisterModelRequest(url="mlp.mar", model_name="mlp"), timeout=T)
    assert r.msg == "Processing worker updates...", r.msg
    wait_workers(msrv, 1)
    # re-register the same model/version
    e = rpc_error(mg.RegisterModel, mpb.RegisterModelRequest(url="mlp.mar", model_name="mlp"),
                  timeout=T)
    # TorchServe's ConflictStatusException (409) -> ABORTED by the HTTP->gRPC table; its postman
    # row says 500/13 because it re-registers a URL whose download then finds the file present
    assert e.code() == C.ABORTED and "already registered" in e.details(), e.details()
    # missing url
    e = rpc_error(mg.RegisterModel, mpb.RegisterModelRequest(model_name="x"), timeout=T)
    assert e.code() == C.INVALID_ARGUMENT and "url" in e.details()
    # a url that is no archive in the store / relative paths / not allowed
    for url, code in (("nosuch.mar", C.NOT_FOUND), ("../../etc/passwd", C.NOT_FOUND),
                      ("/etc/passwd", C.NOT_FOUND),
                      ("https://example.invalid/m.mar", C.NOT_FOUND)):
        e = rpc_error(mg.RegisterModel, mpb.RegisterModelRequest(url=url), timeout=T)
        assert e.code() in (code, C.INVALID_ARGUMENT), (url, e.code(), e.details())
        assert e.details()

    # scale: async, then sync; real processes
    r = mg.ScaleWorker(mpb.ScaleWorkerRequest(model_name="mlp", min_worker=1), timeout=T)
    assert "Processing worker updates" in r.msg
    wait_workers(msrv, 1)
    r = mg.ScaleWorker(mpb.ScaleWorkerRequest(model_name="mlp", min_worker=2, max_worker=2,
                                              synchronous=True), timeout=T)
    assert "Workers scaled to 2" in r.msg
    pids = wait_workers(msrv, 2)
    desc = json.loads(mg.DescribeModel(mpb.DescribeModelRequest(model_name="mlp"),
                                       timeout=T).msg)
    assert isinstance(desc, list) and desc[0]["modelName"] == "mlp"
    assert sorted(w["pid"] for w in desc[0]["workers"]) == pids
    assert all(os.path.exists(f"/proc/{p}") for p in pids)
    r = mg.ScaleWorker(mpb.ScaleWorkerRequest(model_name="mlp", min_worker=1, max_worker=1,
                                              synchronous=True, number_gpu=3, timeout=7),
                       timeout=T)
    wait_workers(msrv, 1)
    # TorchServe's keys it does not act on either: the log says so, never silence
    assert "scale mlp: number_gpu=3 is not used" in msrv.log()
    assert "scale mlp: timeout=7 is not used" in msrv.log()
    # bad version, min > max
    e = rpc_error(mg.ScaleWorker, mpb.ScaleWorkerRequest(model_name="mlp", model_version="9.9",
                                                         min_worker=1), timeout=T)
    assert e.code() == C.NOT_FOUND
    e = rpc_error(mg.ScaleWorker, mpb.ScaleWorkerRequest(model_name="mlp", min_worker=3,
                                                         max_worker=2), timeout=T)
    assert e.code() == C.INVALID_ARGUMENT
    e = rpc_error(mg.ScaleWorker, mpb.ScaleWorkerRequest(model_name="nope", min_worker=1),
                  timeout=T)
    assert e.code() == C.NOT_FOUND
    e = rpc_error(mg.DescribeModel, mpb.DescribeModelRequest(model_name="nope"), timeout=T)
    assert e.code() == C.NOT_FOUND

    # a second version, set-default, list with pagination
    r = mg.RegisterModel(mpb.RegisterModelRequest(url="mlp_v2", model_name="mlp",
                                                  synchronous=True), timeout=T)
    assert r.msg == 'Model "mlp" Version: 2.0 registered with 1 initial workers', r.msg
    r = mg.RegisterModel(mpb.RegisterModelRequest(url="identity_text.mar", synchronous=True),
                         timeout=T)
    page = json.loads(mg.ListModels(mpb.ListModelsRequest(limit=1), timeout=T).msg)
    assert [m["modelName"] for m in page["models"]] == ["identity_text"]
    assert page["nextPageToken"] == "1"
    page = json.loads(mg.ListModels(mpb.ListModelsRequest(limit=1, next_page_token=1),
                                    timeout=T).msg)
    assert [m["modelName"] for m in page["models"]] == ["mlp"]
    desc = json.loads(mg.DescribeModel(mpb.DescribeModelRequest(model_name="mlp",
                                                                model_version="all"),
                                       timeout=T).msg)
    assert sorted(d["modelVersion"] for d in desc) == ["1.0", "2.0"]
    r = mg.SetDefault(mpb.SetDefaultRequest(model_name="mlp", model_version="2.0"), timeout=T)
    assert "2.0" in r.msg
    desc = json.loads(mg.DescribeModel(mpb.DescribeModelRequest(model_name="mlp"),
                                       timeout=T).msg)
    assert desc[0]["modelVersion"] == "2.0"
    e = rpc_error(mg.SetDefault, mpb.SetDefaultRequest(model_name="mlp", model_version="9.9"),
                  timeout=T)
    assert e.code() == C.NOT_FOUND

    # unregister: the default version is refused while 1.0 exists; 1.0 then 2.0 go
    e = rpc_error(mg.UnregisterModel, mpb.UnregisterModelRequest(model_name="mlp"), timeout=T)
    assert e.code() in (C.PERMISSION_DENIED, C.FAILED_PRECONDITION, C.INVALID_ARGUMENT), e.code()
    r = mg.UnregisterModel(mpb.UnregisterModelRequest(model_name="mlp", model_version="1.0"),
                           timeout=T)
    assert "unregistered" in r.msg
    wait_workers(msrv, 2)  # mlp 2.0's and identity_text's, started by their minWorkers
    mg.UnregisterModel(mpb.UnregisterModelRequest(model_name="mlp"), timeout=T)
    e = rpc_error(mg.UnregisterModel, mpb.UnregisterModelRequest(model_name="mlp"), timeout=T)
    assert e.code() == C.NOT_FOUND
    mg.UnregisterModel(mpb.UnregisterModelRequest(model_name="identity_text"), timeout=T)
    wait_workers(msrv, 0)


# --------------------------------------------------------------------- API control and auth

CLIENT_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts",
                             "torchserve_c_client.py")


def client(srv, *args, port="grpc_mgmt"):
    """Runs scripts/torchserve_c_client.py as a user would: (exit code, stdout, stderr)."""
    p = subprocess.run([sys.executable, CLIENT_SCRIPT, *args, "--port", str(srv.ports[port]),
                        "--timeout", "60"], capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout, p.stderr


def test_command_line_client(msrv, mlp_ref, tmp_path):
    """scripts/torchserve_c_client.py end to end: register, list, infer (= torch), infer_stream,
    scale (real processes), describe, unregister, and its errors (unknown model, unreadable
    input file) as a message and an exit code, never a traceback."""
    vec = tmp_path / "vec.json"
    vec.write_text(json.dumps({"data": mlp_input(3)}))
    words = tmp_path / "words.txt"
    words.write_text("hello streaming world")
    rc, out, err = client(msrv, "register", "climlp", "climlp=mlp.mar")
    assert rc == 0 and "Model \"climlp\" Version: 1.0 registered with 1 initial workers" in out, \
        (out, err)
    rc, out, err = client(msrv, "register", "clitext", "clitext=identity_text.mar")
    assert rc == 0, err
    rc, out, err = client(msrv, "list")
    assert rc == 0 and {"climlp", "clitext"} <= {m["modelName"] for m in json.loads(out)["models"]}
    rc, out, err = client(msrv, "infer", "climlp", str(vec), port="grpc")
    assert rc == 0, err
    assert_close(json.loads(out), mlp_ref(mlp_input(3)))
    rc, out, err = client(msrv, "infer_stream", "clitext", str(words), port="grpc")
    assert rc == 0 and out.split() == ["hello", "streaming", "world"], (out, err)
    rc, out, err = client(msrv, "scale", "climlp", "--min-worker", "2", "--sync")
    assert rc == 0 and "Workers scaled to 2 for model: climlp" in out, (out, err)
    (d,) = json.loads(client(msrv, "describe", "climlp")[1])
    pids = [w["pid"] for w in d["workers"]]
    assert len(pids) == 2 and all(os.path.exists(f"/proc/{p}") for p in pids), d
    rc, out, err = client(msrv, "infer", "nope", str(vec), port="grpc")
    assert rc == 1 and err.strip() == "NOT_FOUND: Model not found: nope", err
    rc, out, err = client(msrv, "infer", "climlp", str(tmp_path / "missing.json"), port="grpc")
    assert rc == 2 and "cannot read" in err and "missing.json" in err and "Traceback" not in err
    for m in ("climlp", "clitext"):
        rc, out, err = client(msrv, "unregister", m)
        assert rc == 0 and f"Model \"{m}\" unregistered" in out, (out, err)
    assert not any(os.path.exists(f"/proc/{p}") for p in pids)


def test_model_api_disabled_and_token_auth():
    tmp = tempfile.mkdtemp(prefix="tsc-grpca-")
    try:
        s = start_server(tmp, models=["mlp"], config={"disable_token_authorization": "false"})
        try:
            keys = json.load(open(os.path.join(tmp, "key_file.json")))
            inf_key, mgmt_key = keys["inference"]["key"], keys["management"]["key"]
            api_key = keys["API"]["key"]
            st, mg = inference_stub(s), management_stub(s)

            def md(k):
                return (("authorization", f"Bearer {k}"),)

            e = rpc_error(st.Ping, empty_pb2.Empty(), timeout=10)
            assert e.code() == C.UNAUTHENTICATED
            e = rpc_error(st.Ping, empty_pb2.Empty(), metadata=md("wrongkey"), timeout=10)
            assert e.code() == C.UNAUTHENTICATED
            e = rpc_error(mg.ListModels, mpb.ListModelsRequest(limit=10), timeout=10)
            assert e.code() == C.UNAUTHENTICATED
            # each key opens its own API only
            st.Ping(empty_pb2.Empty(), metadata=md(inf_key), timeout=10)
            e = rpc_error(mg.ListModels, mpb.ListModelsRequest(limit=10), metadata=md(inf_key),
                          timeout=10)
            assert e.code() == C.UNAUTHENTICATED
            e = rpc_error(st.Ping, empty_pb2.Empty(), metadata=md(mgmt_key), timeout=10)
            assert e.code() == C.UNAUTHENTICATED
            models = json.loads(mg.ListModels(mpb.ListModelsRequest(limit=10),
                                              metadata=md(mgmt_key), timeout=10).msg)
            assert [m["modelName"] for m in models["models"]] == ["mlp"]
            # the model API is off by default
            e = rpc_error(mg.RegisterModel, mpb.RegisterModelRequest(url="mlp.mar"),
                          metadata=md(mgmt_key), timeout=10)
            assert e.code() == C.PERMISSION_DENIED and e.details() == (
                "Model API disabled; enable it with enable_model_api=true in config.properties "
                "or --enable-model-api at start")
            e = rpc_error(mg.UnregisterModel, mpb.UnregisterModelRequest(model_name="mlp"),
                          metadata=md(mgmt_key), timeout=10)
            assert e.code() == C.PERMISSION_DENIED
            # rotating the inference key retires the old one
            r = requests.get(s.url("/token?type=inference", "management"),
                             headers={"Authorization": f"Bearer {api_key}"}, timeout=10)
            assert r.status_code == 200, r.text
            new_key = json.load(open(os.path.join(tmp, "key_file.json")))["inference"]["key"]
            assert new_key != inf_key
            e = rpc_error(st.Ping, empty_pb2.Empty(), metadata=md(inf_key), timeout=10)
            assert e.code() == C.UNAUTHENTICATED
            st.Ping(empty_pb2.Empty(), metadata=md(new_key), timeout=10)
            stop_clean(s)
        finally:
            s.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def test_grpc_port_in_use_fails_start():
    """gRPC binds with SO_REUSEPORT unless told not to: a taken port must stop the start-up,
    not be shared with whoever holds it."""
    import socket
    holder = socket.socket()
    holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    tmp = tempfile.mkdtemp(prefix="tsc-grpcp-")
    try:
        with pytest.raises(AssertionError, match="cannot bind"):
            start_server(tmp, config={"grpc_inference_port": holder.getsockname()[1]})
    finally:
        holder.close()
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.mark.smoke
def test_shutdown_during_synchronous_register():
    """A synchronous RegisterModel still waiting for its worker when the server stops: the call
    ends with UNAVAILABLE and the shutdown is clean (no use of the dropped operation)."""
    tmp = tempfile.mkdtemp(prefix="tsc-grpcs-")
    try:
        store = os.path.join(tmp, "store")
        os.makedirs(store)
        shutil.copy(os.path.join(MODEL_STORE, "mlp.mar"), store)
        s = start_server(tmp, store=store, extra_args=["--enable-model-api"])
        try:
            mg = management_stub(s)
            fut = mg.RegisterModel.future(mpb.RegisterModelRequest(
                url="mlp.mar", initial_workers=1, synchronous=True), timeout=60)
            deadline = time.time() + 20
            while time.time() < deadline and "spawned worker" not in s.log():
                time.sleep(0.01)
            assert "spawned worker" in s.log()
            s.proc.terminate()
            with pytest.raises(grpc.RpcError) as ei:
                fut.result()
            assert ei.value.code() in (C.UNAVAILABLE, C.INTERNAL), ei.value
            s.proc.wait(timeout=30)
            stop_clean(s)
        finally:
            s.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.mark.smoke
def test_nul_in_names_invalid_argument(isrv):
    """protobuf-c hands strings over as C strings: "mlp\\0x" would serve mlp, and
    UnregisterModel("mlp\\0junk") would unregister mlp. A string field with a NUL is refused."""
    st = inference_stub(isrv)
    e = rpc_error(st.Predictions, data_request("mlp\0x", mlp_input(0)), timeout=10)
    assert e.code() == C.INVALID_ARGUMENT and "model_name" in e.details(), e
    e = rpc_error(lambda: list(st.StreamPredictions2(iter([data_request("mlp\0x", mlp_input(0))]),
                                                     timeout=10)))
    assert e.code() == C.INVALID_ARGUMENT, e
    ms = management_stub(isrv)
    e = rpc_error(ms.UnregisterModel, mpb.UnregisterModelRequest(model_name="mlp\0junk"),
                  timeout=10)
    assert e.code() == C.INVALID_ARGUMENT and "model_name" in e.details(), e
    e = rpc_error(ms.DescribeModel, mpb.DescribeModelRequest(model_name="mlp", model_version="1\0"),
                  timeout=10)
    assert e.code() == C.INVALID_ARGUMENT and "model_version" in e.details(), e
    # nested strings too: a map key (a backend parameter name) holding a NUL
    q = ipb.PredictionsRequest(model_name="mlp", input={"data\0x": b"1", "data": b"2"})
    e = rpc_error(st.Predictions, q, timeout=10)
    assert e.code() == C.INVALID_ARGUMENT and "'input.key'" in e.details(), e
    r = st.Predictions(data_request("mlp", mlp_input(0)), timeout=10)
    assert len(json.loads(r.prediction)) == 10
