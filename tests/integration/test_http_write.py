"""How the frontend writes a whole HTTP reply (issue 16, frontend/http/http_flush.c).

- A reply leaves in the loop turn that made it: over a keep-alive connection, answering never
  asks epoll for write readiness (strace counts EPOLLOUT in the frontend's epoll_ctl calls).
  The answers are still torch's numbers (1e-5).
- A reply larger than the socket can take, to a client that reads nothing for a while, goes
  on through libevent (strace sees it wait for EPOLLOUT), arrives whole once the client reads, the next request on that connection is answered, and
  other clients are served meanwhile; a client that leaves without reading loses nobody else
  anything.
"""
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest
import requests

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from conftest import mar_module, oip_text  # noqa: E402

TOL = 1e-5


@pytest.fixture(scope="module")
def mlp_ref():
    return mar_module("mlp")


def traced(pid):
    """True once every thread of pid has a tracer."""
    try:
        for t in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{t}/status") as f:
                if "TracerPid:\t0\n" in f.read():
                    return False
    except OSError:
        return False
    return True


@contextlib.contextmanager
def epoll_ctl_trace(pid, out):
    """strace -e epoll_ctl on every thread of pid while the block runs; yields a function that
    returns the calls seen so far (lines). Skips where this user may not trace."""
    st = subprocess.Popen(["strace", "-f", "-qq", "-e", "trace=epoll_ctl", "-o", str(out),
                           "-p", str(pid)], stderr=subprocess.PIPE)
    try:
        deadline = time.time() + 20
        while not traced(pid):
            if st.poll() is not None:
                err = st.stderr.read().decode(errors="replace")
                if "Operation not permitted" in err:
                    pytest.skip(f"strace may not attach here: {err.strip()}")
                raise AssertionError(f"strace could not attach: {err}")
            assert time.time() < deadline, "strace did not attach in 20 s"
            time.sleep(0.05)
        yield lambda: out.read_text().splitlines()
    finally:
        st.send_signal(signal.SIGINT)
        st.wait(timeout=20)


def test_a_reply_leaves_in_the_turn_that_made_it(server_factory, mlp_ref, tmp_path):
    import torch
    srv = server_factory(models=["mlp"])
    srv.wait_ready("mlp", body={"json": {"data": [0.0] * 64}})
    with epoll_ctl_trace(srv.pid, tmp_path / "strace.out"):
        g = torch.Generator().manual_seed(16)
        x = torch.rand(60, 64, generator=g) * 4 - 2
        sess = requests.Session()
        for i in range(len(x)):
            r = sess.post(srv.url("/predictions/mlp"), json={"data": x[i].tolist()}, timeout=30)
            assert r.status_code == 200, r.text
            with torch.no_grad():
                want = mlp_ref(x[i].unsqueeze(0))[0].tolist()
            got = r.json()
            assert max(abs(a - b) for a, b in zip(got, want)) <= TOL, (i, got, want)
    calls = (tmp_path / "strace.out").read_text().splitlines()
    # the check can fail: strace saw the connection's other epoll_ctl calls
    assert any("EPOLL_CTL_" in c for c in calls), calls[:20]
    asked = [c for c in calls if "EPOLLOUT" in c]
    assert len(asked) <= 3, f"{len(asked)} of 60 replies waited for EPOLLOUT: {asked[:6]}"


def raw_post(s, path, body):
    s.sendall(b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n" % (path.encode(), len(body)) + body)


def read_reply(s, timeout=60):
    """One Content-Length reply from s: (status, body)."""
    s.settimeout(timeout)
    buf = b""
    while b"\r\n\r\n" not in buf:
        b = s.recv(65536)
        assert b, f"connection closed in the head: {buf[:200]!r}"
        buf += b
    head, _, rest = buf.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    status = int(lines[0].split()[1])
    n = next(int(v) for k, _, v in (ln.partition(":") for ln in lines[1:])
             if k.strip().lower() == "content-length")
    while len(rest) < n:
        b = s.recv(1 << 20)
        assert b, f"connection closed after {len(rest)} of {n} body bytes"
        rest += b
    assert len(rest) == n, "bytes after the reply"
    return status, rest


def test_a_large_reply_to_a_slow_reader_arrives_whole(server_factory, tmp_path):
    # the handler gets the text twice ({"text", "prompt"}): room for that
    srv = server_factory(models=["identity_text", "mlp"], config={"max_request_size": 16000000},
                         yaml={"identity_text": {"handler": {"delay_ms": 0}}})
    srv.wait_ready("identity_text")
    srv.wait_ready("mlp", body={"json": {"data": [0.0] * 64}})
    # about 4.4 MB back: more than a loopback socket's send buffer (sized at connect from the
    # 64 KB segment, about 2.6 MB) and the client's window together, so it cannot all leave
    words = " ".join(f"w{i:05d}" + "x" * 94 for i in range(44000))
    body = json.dumps(oip_text(words)).encode()
    path = "/v2/models/identity_text/infer"

    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(("127.0.0.1", srv.ports["inference"]))
    with epoll_ctl_trace(srv.pid, tmp_path / "strace.out") as calls:
        raw_post(s, path, body)
        # the answer is made, and what did not leave waits for EPOLLOUT, as evhttp does it
        deadline = time.time() + 60
        while not any("EPOLLOUT" in c for c in calls()):
            assert time.time() < deadline, "the large reply never waited for EPOLLOUT"
            time.sleep(0.1)
        # others are served meanwhile
        for _ in range(5):
            r = srv.post("/predictions/mlp", json={"data": [0.5] * 64}, timeout=10)
            assert r.status_code == 200 and len(r.json()) == 10, r.text
        status, got = read_reply(s)
    assert status == 200, got[:300]
    assert json.loads(got)["outputs"][0]["data"] == [words]
    # the connection goes on: a second large answer on it, read at once
    raw_post(s, path, body)
    status, got = read_reply(s)
    assert status == 200 and json.loads(got)["outputs"][0]["data"] == [words]
    s.close()

    # clients that leave without reading their large answers
    for _ in range(3):
        q = socket.socket()
        q.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        q.connect(("127.0.0.1", srv.ports["inference"]))
        raw_post(q, path, body)
        time.sleep(1)
        q.close()
    r = requests.post(srv.url(path), json=oip_text("still here"), timeout=30)
    assert r.status_code == 200 and r.json()["outputs"][0]["data"] == ["still here"]
    r = srv.post("/predictions/mlp", json={"data": [0.5] * 64}, timeout=10)
    assert r.status_code == 200 and len(r.json()) == 10, r.text
