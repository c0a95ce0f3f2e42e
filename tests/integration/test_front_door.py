"""The rules every transport applies, from one place below them (issue 34, "one front door";
issue 33, readiness and the smaller things): readiness, lookup errors, what a handler may put
on the wire, the model API's 405 and key rotation.

- Readiness means ready: while a model's minimum workers are still loading, GET /ping (500),
  /v2/health/ready, /v2/models/M/ready (503), /v1/models/M and gRPC Ping, ServerReady and
  ModelReady all say "not ready"; /v2/health/live says live throughout. Once loaded, all ready.
- A handler cannot break framing: Content-Length, Transfer-Encoding and Connection it sets are
  dropped (with a log line), and a PredictionException status outside 200..599 becomes 500.
- The workers' x-ts-worker-* counters reach no client unless worker_debug_headers is on.
- The same "Model not found" / "Model version ... does not exist" text on every transport.
- Key rotation writes key_file.json first: when it cannot, the old key keeps working.
"""
import json
import os
import socket
import sys
import threading
import time

import pytest
import requests

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from conftest import PYSTUBS, start_server  # noqa: E402

sys.path.insert(0, PYSTUBS)
import grpc  # noqa: E402
import inference_pb2_grpc as igrpc  # noqa: E402
import oip_grpc_pb2 as opb  # noqa: E402
import oip_grpc_pb2_grpc as ogrpc  # noqa: E402
from google.protobuf import empty_pb2  # noqa: E402

SAMPLE = {"data": [0.25] * 64}


def write_py_model(store, name, src, yaml="minWorkers: 1\nmaxWorkers: 1\nbatchSize: 1\n"):
    """An unpacked model directory whose handler is the Python function handler src."""
    d = os.path.join(store, name)
    os.makedirs(os.path.join(d, "MAR-INF"))
    with open(os.path.join(d, "handler.py"), "w") as f:
        f.write(src)
    with open(os.path.join(d, "model-config.yaml"), "w") as f:
        f.write(yaml)
    with open(os.path.join(d, "MAR-INF", "MANIFEST.json"), "w") as f:
        json.dump({"runtime": "python", "model": {"modelName": name, "handler": "handler.py",
                                                  "modelVersion": "1.0",
                                                  "configFile": "model-config.yaml"}}, f)
    return d


# ------------------------------------------------------------------------------- readiness

SLOW_LOAD = """
import os, time

def handle(data, context):
    if data is None:  # the load call: hold until the test lets go
        while not os.path.exists(os.path.join(context.system_properties["model_dir"], "go")):
            time.sleep(0.05)
        return None
    return ["ok" for _ in data]
"""


def readiness(s):
    """What each endpoint says: (ping, health ready, model ready, v1 ready, grpc ping,
    ServerReady, ModelReady, live)."""
    ch = grpc.insecure_channel(f"127.0.0.1:{s.ports['grpc']}")
    ts = igrpc.InferenceAPIsServiceStub(ch)
    oip = ogrpc.GRPCInferenceServiceStub(ch)
    ping = s.get("/ping")
    ready = s.get("/v2/health/ready")
    mready = s.get("/v2/models/slow/ready")
    v1 = s.get("/v1/models/slow", api="management")
    gping = json.loads(ts.Ping(empty_pb2.Empty(), timeout=10).health)["status"]
    sready = oip.ServerReady(opb.ServerReadyRequest(), timeout=10).ready
    mr = oip.ModelReady(opb.ModelReadyRequest(name="slow"), timeout=10).ready
    live = s.get("/v2/health/live")
    ch.close()
    return {"ping": (ping.status_code, ping.json()["status"]),
            "ready": (ready.status_code, ready.json()["ready"]),
            "model_ready": (mready.status_code, mready.json()["ready"]),
            "v1": (v1.status_code, v1.json()["ready"]),
            "grpc_ping": gping, "server_ready": sready, "model_ready_grpc": mr,
            "live": (live.status_code, live.json()["live"])}


@pytest.mark.smoke
def test_not_ready_until_min_workers_loaded(tmp_path):
    """A model whose worker takes its time to load: every readiness answer is "not ready" until
    it has loaded (they all said ready while it loaded), liveness says live throughout."""
    store = str(tmp_path / "store")
    d = write_py_model(store, "slow", SLOW_LOAD)
    # `Model server started.` waits for the start-up models: look at it while it loads
    s = start_server(str(tmp_path), store=store, models=["slow"], wait_started=False)
    try:
        time.sleep(1)  # the worker is up and inside its load call
        assert s.worker_pids(), s.log()[-2000:]
        assert readiness(s) == {
            "ping": (500, "Unhealthy"), "ready": (503, False), "model_ready": (503, False),
            "v1": (200, False), "grpc_ping": "Unhealthy", "server_ready": False,
            "model_ready_grpc": False, "live": (200, True)}
        open(os.path.join(d, "go"), "w").close()
        s.wait_healthy()
        assert readiness(s) == {
            "ping": (200, "Healthy"), "ready": (200, True), "model_ready": (200, True),
            "v1": (200, True), "grpc_ping": "Healthy", "server_ready": True,
            "model_ready_grpc": True, "live": (200, True)}
        assert s.post("/predictions/slow", data=b"x").text == "ok"
    finally:
        s.stop()


# ------------------------------------------------------------------ what a handler may send

FRAMING = """
from ts.utils.util import PredictionException

def handle(data, context):
    if data is None:
        return None
    out = []
    for i, row in enumerate(data):
        body = row.get("body")
        if isinstance(body, (bytes, bytearray)):
            body = body.decode()
        if body.startswith("code:"):
            raise PredictionException("handler said " + body, int(body[5:]))
        context.set_response_header(i, "Content-Length", "5")
        context.set_response_header(i, "Transfer-Encoding", "chunked")
        context.set_response_header(i, "Connection", "keep-alive")
        context.set_response_header(i, "X-Handler", "kept")
        out.append("hello world")
    return out
"""


@pytest.fixture(scope="module")
def framing_srv(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("framing")
    store = str(tmp / "store")
    write_py_model(store, "framing", FRAMING)
    s = start_server(str(tmp), store=store, models=["framing"])
    try:
        s.wait_healthy()
        yield s
    finally:
        s.stop()


def read_response(sock):
    """One HTTP/1.1 response with a Content-Length from sock: (status, headers, body)."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = sock.recv(65536)
        assert chunk, buf
        buf += chunk
    head, _, rest = buf.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for ln in lines[1:]:
        k, _, v = ln.partition(":")
        headers.setdefault(k.strip().lower(), []).append(v.strip())
    n = int(headers["content-length"][0])
    while len(rest) < n:
        rest += sock.recv(65536)
    return int(lines[0].split()[1]), headers, rest[:n], rest[n:]


def test_handler_cannot_set_framing_headers(framing_srv):
    """The handler's Content-Length: 5 used to go out as the answer's length (the client read
    "hello" and " world" was taken for the next response); its Transfer-Encoding and Connection
    went out too. Now the server frames the answer, two requests on one connection both get
    "hello world", the handler's other header is kept, and the log says what was dropped."""
    s = framing_srv
    req = (b"POST /predictions/framing HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\n"
           b"Content-Length: 2\r\n\r\nhi")
    with socket.create_connection(("127.0.0.1", s.ports["inference"]), timeout=30) as c:
        for _ in range(2):
            c.sendall(req)
            status, headers, body, extra = read_response(c)
            assert status == 200 and body == b"hello world" and extra == b"", (headers, body)
            assert headers["content-length"] == ["11"]
            assert "transfer-encoding" not in headers
            assert headers.get("connection", ["keep-alive"]) != ["close"]
            assert headers["x-handler"] == ["kept"]
    deadline = time.time() + 5
    while "framing header(s) dropped" not in s.log() and time.time() < deadline:
        time.sleep(0.1)
    assert "framing header(s) dropped ('Content-Length'" in s.log()


@pytest.mark.parametrize("code,want", [(99999, 500), (101, 500), (-5, 500), (199, 500), (0, 500),
                                       (418, 418), (507, 507)])
def test_prediction_exception_status_bounded(framing_srv, code, want):
    """PredictionException(code=99999), 101 and -5 used to answer "200 OK"; code 0 too (the
    worker took an error's 0 for "no status set")."""
    r = framing_srv.post("/predictions/framing", data=f"code:{code}".encode(),
                         headers={"Content-Type": "text/plain"})
    assert r.status_code == want, (r.status_code, r.text)
    assert f"handler said code:{code}" in r.text


def test_worker_debug_headers_only_when_asked(server_factory):
    """x-ts-worker-batch / -forward-us (the torchscript handler's counters) reached every
    client; now only with worker_debug_headers=true, which tests and benchmarks set."""
    off = server_factory(models=["mlp"])
    on = server_factory(models=["mlp"], config={"worker_debug_headers": True})
    for s in (off, on):
        s.wait_ready("mlp", body={"json": SAMPLE})
    r = off.post("/predictions/mlp", json=SAMPLE)
    assert r.status_code == 200
    assert not [h for h in r.headers if h.lower().startswith("x-ts-")], dict(r.headers)
    r = on.post("/predictions/mlp", json=SAMPLE)
    assert r.status_code == 200 and r.headers["x-ts-worker-batch"] == "1", dict(r.headers)
    assert int(r.headers["x-ts-worker-forward-us"]) >= 0


# --------------------------------------------------------------------- lookups, the model API

def test_lookup_errors_same_on_every_transport(server_factory):
    """One text for an unknown model and an unknown version, whatever the transport (OIP
    REST and gRPC used to say "Model nope not found" / "Model mlp has no version 9"); OIP over
    gRPC says a missing version in Triton's words, from the same place (model_lookup_triton)."""
    s = server_factory(models=["mlp"])
    s.wait_ready("mlp", body={"json": SAMPLE})
    ch = grpc.insecure_channel(f"127.0.0.1:{s.ports['grpc']}")
    oip = ogrpc.GRPCInferenceServiceStub(ch)
    for name, version, want in [
            ("nope", None, "Model not found: nope"),
            ("mlp", "9", "Model version: 9 does not exist for model: mlp")]:
        v = f"/{version}" if version else ""
        r = s.post(f"/predictions/{name}{v}", json=SAMPLE)
        assert r.status_code == 404 and r.json()["message"] == want, r.text
        vv = f"/versions/{version}" if version else ""
        r = s.get(f"/v2/models/{name}{vv}/ready")
        assert r.status_code == 404 and r.json()["error"] == want, r.text
        r = s.post(f"/v2/models/{name}{vv}/infer", json={"inputs": []})
        assert r.status_code == 404 and r.json()["error"] == want, r.text
        with pytest.raises(grpc.RpcError) as e:
            oip.ModelReady(opb.ModelReadyRequest(name=name, version=version or ""), timeout=10)
        # OIP over gRPC says a missing version in Triton's words, which its clients look for
        triton = (f"failed to get model version from specified version string '{version}': "
                  f"model {name} has no such version")
        assert e.value.code() == grpc.StatusCode.NOT_FOUND
        assert e.value.details() == (triton if version else want), e.value.details()
        r = s.get(f"/models/{name}{v}", api="management")
        assert r.status_code == 404 and r.json()["message"] == want, r.text
    ch.close()


# ------------------------------------------------------------------------------ key rotation

def test_key_rotation_is_atomic(server_factory):
    """When key_file.json cannot be written, /token used to answer 500 with the new key already
    live and the old one dead: nobody could call the API any more. Now the old key stays valid
    and the file as it was, and the answer says why."""
    s = server_factory(models=[], config={"disable_token_authorization": "false"})
    keyfile = os.path.join(s.tmp, "key_file.json")
    keys = json.load(open(keyfile))
    api, inf = keys["API"]["key"], keys["inference"]["key"]
    before = open(keyfile).read()
    # the server writes a temporary file next to key_file.json and renames it: a directory
    # in the way of that rename makes the write fail (as a full or read-only disk would)
    os.unlink(keyfile)
    os.mkdir(keyfile)
    r = s.get("/token?type=inference", api="management",
              headers={"Authorization": f"Bearer {api}"})
    assert r.status_code == 500, r.text
    assert s.get("/ping", headers={"Authorization": f"Bearer {inf}"}).status_code == 200
    assert "inference key is unchanged" in r.json()["message"], r.text
    os.rmdir(keyfile)
    with open(keyfile, "w") as f:
        f.write(before)
    r = s.get("/token?type=inference", api="management",
              headers={"Authorization": f"Bearer {api}"})
    assert r.status_code == 200, r.text
    new = json.load(open(keyfile))["inference"]["key"]
    assert new != inf and r.json()["inference"]["key"] == new
    assert s.get("/ping", headers={"Authorization": f"Bearer {inf}"}).status_code == 401
    assert s.get("/ping", headers={"Authorization": f"Bearer {new}"}).status_code == 200


# ----------------------------------------------------------------- one list of built-in names

def test_python_builtin_names_one_list(tmp_path):
    """The built-in Python handler names were written three times (archiver, the worker's
    loader, the ts package), and the archiver's list lacked vision_handler. Each name of the
    one list (common/py_builtins.h) is now archived as a Python model by name."""
    import re
    import subprocess
    import zipfile
    from conftest import BIN, ROOT
    header = open(os.path.join(ROOT, "common", "py_builtins.h")).read()
    names = re.findall(r'"(\w+)"', header[header.index("PY_BUILTIN_HANDLERS[]"):])
    assert "image_classifier" in names and "vision_handler" in names, names
    for name in names:
        r = subprocess.run([os.path.join(BIN, "torchserve-c-archiver"), "--model-name", name,
                            "--handler", name, "--export-path", str(tmp_path)],
                           cwd=tmp_path, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        with zipfile.ZipFile(tmp_path / f"{name}.mar") as z:
            m = json.loads(z.read("MAR-INF/MANIFEST.json"))
        assert m["runtime"] == "python" and m["model"]["handler"] == name, m
