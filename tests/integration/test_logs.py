"""Logs under log_location as TorchServe writes them: access_log.log (HTTP, OIP REST and gRPC,
with status, size and request id), model_log.log (the workers' output, tagged with the worker),
ts_log.log (the server, in the background start), each rotated at log_max_size."""
import json
import os
import re
import subprocess
import sys
import time

import requests

from conftest import BIN, MODEL_STORE, PYSTUBS, free_port

sys.path.insert(0, PYSTUBS)
import grpc  # noqa: E402
import inference_pb2 as ipb  # noqa: E402
import inference_pb2_grpc as igrpc  # noqa: E402

SAMPLE = {"data": [0.25] * 64}
LINE = re.compile(r'^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z) (\S+) "(\S+) (\S+) (\S+)" '
                  r'(\S+) (\d+|-) (\d+\.\d{3})ms (\S+)$')


def read_lines(path, want, timeout=5):
    """The file's lines once `want(lines)` holds (the writer flushes every 100 ms)."""
    deadline = time.monotonic() + timeout
    lines = []
    while time.monotonic() < deadline:
        try:
            with open(path) as f:
                lines = f.read().splitlines()
        except FileNotFoundError:  # not written yet, or between a rotation's rename and reopen
            lines = []
        if want(lines):
            return lines
        time.sleep(0.05)
    raise AssertionError(f"{path}: {lines[-20:]}")


def access(lines):
    out = []
    for ln in lines:
        m = LINE.match(ln)
        assert m, ln
        out.append(m.groups())
    return out


def test_access_log_http_and_grpc(server_factory):
    s = server_factory(models=["mlp"])
    s.wait_ready("mlp", body={"json": SAMPLE})
    path = os.path.join(s.tmp, "logs", "access_log.log")
    r = s.post("/predictions/mlp", json=SAMPLE, headers={"x-request-id": "rid-http-1"})
    assert r.status_code == 200
    ok_len = len(r.content)
    r = s.post("/predictions/nope", json=SAMPLE, headers={"x-request-id": "rid-http-2"})
    assert r.status_code == 404
    assert s.get("/models", api="management").status_code == 200
    assert s.get("/metrics", api="metrics").status_code == 200
    with grpc.insecure_channel(f"127.0.0.1:{s.ports['grpc']}") as ch:
        st = igrpc.InferenceAPIsServiceStub(ch)
        st.Predictions(ipb.PredictionsRequest(model_name="mlp", input={
            "data": json.dumps(SAMPLE).encode()}), timeout=10,
            metadata=[("x-request-id", "rid-grpc-1")])
        try:
            st.Predictions(ipb.PredictionsRequest(model_name="nope", input={"data": b"{}"}),
                           timeout=10, metadata=[("x-request-id", "rid-grpc-2")])
            raise AssertionError("a missing model must fail")
        except grpc.RpcError as e:
            assert e.code() == grpc.StatusCode.NOT_FOUND
    lines = read_lines(path, lambda ls: any("rid-grpc-2" in x for x in ls))
    got = {g[8]: g for g in access(lines)}
    ts, client, method, target, proto, status, size, ms, rid = got["rid-http-1"]
    assert (method, target, proto, status, size) == \
        ("POST", "/predictions/mlp", "HTTP/1.1", "200", str(ok_len))
    assert client.startswith("127.0.0.1:") and 0 <= float(ms) < 10000
    assert got["rid-http-2"][3:6] == ("/predictions/nope", "HTTP/1.1", "404")
    assert any(g[3] == "/models" and g[5] == "200" for g in got.values())
    assert any(g[3] == "/metrics" and g[5] == "200" for g in got.values())
    g = got["rid-grpc-1"]
    assert g[2:6] == ("POST", "/org.pytorch.serve.grpc.inference.InferenceAPIsService/Predictions",
                      "HTTP/2", "OK") and int(g[6]) > 0, g
    assert got["rid-grpc-2"][5] == "NOT_FOUND"


def test_access_log_rotates_at_size(server_factory):
    s = server_factory(models=["mlp"], config={"log_max_size": "2KB", "log_max_files": 2})
    s.wait_ready("mlp", body={"json": SAMPLE})
    sess = requests.Session()
    n = 120  # ~100 bytes a line: about six files' worth
    for i in range(n):
        assert sess.post(s.url("/predictions/mlp"), json=SAMPLE, timeout=10,
                         headers={"x-request-id": f"rot-{i}"}).status_code == 200
    logs = os.path.join(s.tmp, "logs")
    read_lines(os.path.join(logs, "access_log.log"), lambda ls: any(f"rot-{n - 1}" in x
                                                                    for x in ls))
    files = sorted(f for f in os.listdir(logs) if f.startswith("access_log.log"))
    assert files == ["access_log.log", "access_log.log.1", "access_log.log.2"], files
    seen = []
    for f in ("access_log.log.2", "access_log.log.1", "access_log.log"):
        p = os.path.join(logs, f)
        assert os.path.getsize(p) <= 2048, (f, os.path.getsize(p))
        with open(p) as fh:
            text = fh.read()
        assert text.endswith("\n")  # whole lines only
        seen += [g[8] for g in access(text.splitlines())]
    # the newest lines, in order, without a gap: the oldest ones were rotated away
    rot = [x for x in seen if x.startswith("rot-")]
    assert rot == [f"rot-{i}" for i in range(n - len(rot), n)] and len(rot) > 25, rot


def test_access_log_off(server_factory):
    s = server_factory(models=["mlp"], config={"enable_access_log": False})
    s.wait_ready("mlp", body={"json": SAMPLE})
    assert s.post("/predictions/mlp", json=SAMPLE).status_code == 200
    time.sleep(0.3)
    assert not os.path.exists(os.path.join(s.tmp, "logs", "access_log.log"))


def test_model_log_has_the_workers_lines(server_factory):
    s = server_factory(models=["mlp"])
    s.wait_ready("mlp", body={"json": SAMPLE})
    path = os.path.join(s.tmp, "logs", "model_log.log")
    lines = read_lines(path, lambda ls: any("loaded model mlp" in x for x in ls))
    tagged = [ln for ln in lines if re.match(r"^W-\d+-mlp_1\.0 \d+:W \S+ (INFO|WARN|ERROR|DEBUG) ",
                                             ln)]
    assert tagged and len(tagged) == len(lines), lines
    assert any("loaded model mlp" in ln for ln in tagged)
    # the frontend's log still shows them, as before
    assert "loaded model mlp" in s.log()


def test_background_ts_log_rotates(tmp_path):
    d = str(tmp_path)
    store = os.path.join(d, "store")
    os.mkdir(store)
    cfg = os.path.join(d, "config.properties")
    port = free_port()
    with open(cfg, "w") as f:
        f.write(f"inference_address=http://127.0.0.1:{port}\n"
                f"management_address=http://127.0.0.1:{free_port()}\n"
                f"metrics_address=http://127.0.0.1:{free_port()}\n"
                f"grpc_inference_port={free_port()}\ngrpc_management_port={free_port()}\n"
                "disable_token_authorization=true\nlog_max_size=1KB\nlog_max_files=3\n")
    env = dict(os.environ, TMPDIR=d)
    exe = os.path.join(BIN, "torchserve-c")
    r = subprocess.run([exe, "--start", "--model-store", store, "--ts-config", cfg], cwd=d,
                       env=env, capture_output=True, text=True, timeout=60)
    try:
        assert r.returncode == 0, r.stderr
        # each bad request logs a line in the server's log: several KB of them
        for i in range(40):
            requests.post(f"http://127.0.0.1:{port}/predictions/none-{i}", data="x", timeout=10)
        logs = os.path.join(d, "logs")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and \
                not os.path.exists(os.path.join(logs, "ts_log.log.1")):
            time.sleep(0.1)
        files = sorted(f for f in os.listdir(logs) if f.startswith("ts_log.log"))
        assert "ts_log.log.1" in files and "ts_log.log.4" not in files, files
        with open(os.path.join(logs, "ts_log.log.1")) as f:
            assert ":F " in f.read()
    finally:
        subprocess.run([exe, "--stop", "--ts-config", cfg], cwd=d, env=env, capture_output=True,
                       timeout=90)
