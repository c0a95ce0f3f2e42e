"""One descriptor budget for HTTP and gRPC connections (issue 34, points 2 and 13).

With an fd limit of 256, 300 plain TCP connections to the gRPC port (no HTTP/2, no token) used
to make gRPC core log "Failed accept4: Too many open files" once and never accept on that port
again; gRPC connections had no cap, and while they were open HTTP was not served either. Now
gRPC holds at most its share of the budget (the rest are closed at once), HTTP is served
meanwhile, and once the connections close both answer. Also: the limits gRPC 1.51 offers are
set, and a message far over max_request_size is not buffered whole."""
import os
import socket
import subprocess
import sys
import time

import pytest
import requests

from conftest import PYSTUBS, start_server

sys.path.insert(0, PYSTUBS)
import grpc  # noqa: E402
import inference_pb2 as ipb  # noqa: E402
import inference_pb2_grpc as igrpc  # noqa: E402

SAMPLE = {"data": [0.25] * 64}


def open_fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def grpc_predict(s, timeout=10):
    with grpc.insecure_channel(f"127.0.0.1:{s.ports['grpc']}") as ch:
        r = igrpc.InferenceAPIsServiceStub(ch).Predictions(
            ipb.PredictionsRequest(model_name="mlp", input={"data": b'{"data": [' +
                                                            b", ".join([b"0.25"] * 64) + b"]}"}),
            timeout=timeout)
    return r.prediction


def http_predict(s, timeout=5):
    return requests.post(s.url("/predictions/mlp"), json=SAMPLE, timeout=timeout)


def closed_by_server(c):
    c.setblocking(False)
    try:
        return c.recv(1, socket.MSG_PEEK) == b""
    except BlockingIOError:
        return False
    except (ConnectionResetError, OSError):
        return True


def within(seconds, fn):
    deadline = time.time() + seconds
    last = None
    while time.time() < deadline:
        try:
            v = fn()
            if v:
                return v
        except Exception as e:  # noqa: BLE001 (the last error is reported below)
            last = e
        time.sleep(0.2)
    raise AssertionError(f"not within {seconds} s: {last}")


@pytest.fixture
def srv(tmp_path):
    s = start_server(str(tmp_path), models=["mlp"])
    try:
        s.wait_ready("mlp", body={"json": SAMPLE})
        want = http_predict(s).json()
        assert grpc_predict(s)
        s.want = want
        yield s
    finally:
        s.stop()


def test_grpc_survives_fd_exhaustion_and_http_is_served_meanwhile(srv):
    s = srv
    subprocess.run(["prlimit", f"--pid={s.pid}", "--nofile=256:256"], check=True)
    socks = []
    for _ in range(300):
        c = socket.socket()
        c.setblocking(False)
        try:
            c.connect(("127.0.0.1", s.ports["grpc"]))
        except BlockingIOError:
            pass
        socks.append(c)
    try:
        time.sleep(2)
        # the server is below its limit, and closed the connections over gRPC's share
        assert open_fds(s.pid) < 256
        refused = sum(closed_by_server(c) for c in socks)
        assert 100 < refused < 300, refused
        # HTTP is served while gRPC holds its share
        r = within(10, lambda: http_predict(s))
        assert r.status_code == 200 and r.json() == s.want
    finally:
        for c in socks:
            c.close()
    # both answer once the connections are gone, and gRPC never gave up its listener
    assert within(20, lambda: grpc_predict(s, timeout=3))
    assert within(10, lambda: http_predict(s)).json() == s.want
    log = s.log()
    assert "Failed accept4" not in log, log[-3000:]
    assert "gRPC listener: over the connection budget: closed" in log


def test_grpc_listener_recovers_after_emfile(srv):
    """The limit is lowered under the server to fewer descriptors than it holds: accept4 itself
    fails with EMFILE (the budget cannot see it coming). gRPC's listener is kept alive (the
    waiting connection is taken with the spare descriptor and closed), and serves once
    descriptors are free again."""
    s = srv
    held = open_fds(s.pid)
    subprocess.run(["prlimit", f"--pid={s.pid}", f"--nofile={held - 4}:"], check=True)
    socks = []
    try:
        for _ in range(20):
            c = socket.create_connection(("127.0.0.1", s.ports["grpc"]), timeout=5)
            socks.append(c)
        time.sleep(1)
        assert sum(closed_by_server(c) for c in socks) == 20
    finally:
        for c in socks:
            c.close()
    subprocess.run(["prlimit", f"--pid={s.pid}", "--nofile=4096:"], check=True)
    assert within(20, lambda: grpc_predict(s, timeout=3))
    assert "Failed accept4" not in s.log()
    assert "gRPC listener: accept4 failed: Too many open files" in s.log()


def test_oversized_grpc_message_not_buffered_whole(tmp_path):
    """A 200 MB message to a server whose max_request_size is 64 KiB used to be buffered whole
    (the frontend's peak RSS grew by 200 MB) before gRPC refused it. The transports' memory
    quota cuts it off: the peak grows by a fraction of it, and the server serves afterwards."""
    s = start_server(str(tmp_path), models=["mlp"], config={"max_request_size": 65536})
    try:
        s.wait_ready("mlp", body={"json": SAMPLE})

        def peak_kb():
            with open(f"/proc/{s.pid}/status") as f:
                return next(int(ln.split()[1]) for ln in f if ln.startswith("VmHWM:"))

        before = peak_kb()
        with grpc.insecure_channel(f"127.0.0.1:{s.ports['grpc']}",
                                   options=[("grpc.max_send_message_length", -1)]) as ch:
            st = igrpc.InferenceAPIsServiceStub(ch)
            with pytest.raises(grpc.RpcError) as e:
                st.Predictions(ipb.PredictionsRequest(model_name="mlp",
                                                      input={"data": b"x" * (200 << 20)}),
                               timeout=60)
        assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, e.value
        growth = peak_kb() - before
        assert growth < 120 * 1024, f"the frontend's peak RSS grew by {growth} KiB"
        assert grpc_predict(s)
    finally:
        s.stop()


def server_settings(port):
    """The HTTP/2 SETTINGS the gRPC server sends a new connection: {identifier: value}."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as c:
        c.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00")
        buf = b""
        while True:
            while len(buf) < 9:
                chunk = c.recv(65536)
                assert chunk, buf
                buf += chunk
            n = int.from_bytes(buf[:3], "big")
            while len(buf) < 9 + n:
                buf += c.recv(65536)
            kind, flags, payload, buf = buf[3], buf[4], buf[9:9 + n], buf[9 + n:]
            if kind == 4 and not flags & 1:
                return {int.from_bytes(payload[i:i + 2], "big"):
                        int.from_bytes(payload[i + 2:i + 6], "big") for i in range(0, n, 6)}


def test_grpc_settings_bound_streams_and_headers(srv):
    """gRPC core's defaults let one connection open 2^31-1 streams at once (no
    SETTINGS_MAX_CONCURRENT_STREAMS): the server now announces 128, and a header list of at
    most 8 KiB (gRPC's default, now set explicitly)."""
    settings = server_settings(srv.ports["grpc"])
    assert settings.get(3) == 128, settings
    assert settings.get(6) == 8192, settings
    log = srv.log()
    assert "gRPC: at most 128 streams per connection" in log
