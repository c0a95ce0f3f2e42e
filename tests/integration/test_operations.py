"""Operations: what `--start` tells the operator, and where it writes its log."""
import os
import shutil
import socket
import subprocess
import time

import pytest

from conftest import BIN, MODEL_STORE, cpu_seconds, free_port, mar_module, start_server

SAMPLE = {"data": [0.25] * 64}
SCHED_OTHER, SCHED_BATCH = 0, 3  # sched.h


def write_cfg(d, port, extra=""):
    p = os.path.join(d, "config.properties")
    with open(p, "w") as f:
        f.write(f"inference_address=http://127.0.0.1:{port}\n"
                f"management_address=http://127.0.0.1:{free_port()}\n"
                f"metrics_address=http://127.0.0.1:{free_port()}\n"
                f"grpc_inference_port={free_port()}\ngrpc_management_port={free_port()}\n"
                "disable_token_authorization=true\n" + extra)
    return p


def test_failed_background_start_prints_the_reason(tmp_path):
    """Port in use: the console says which address, why, and which process holds it; the
    log goes to log_location."""
    d = str(tmp_path)
    store = os.path.join(d, "store")
    os.mkdir(store)
    shutil.copy(os.path.join(MODEL_STORE, "mlp.mar"), store)
    port = free_port()
    holder = socket.socket()
    holder.bind(("127.0.0.1", port))
    holder.listen()
    try:
        cfg = write_cfg(d, port, "log_location=var/log/tsc\n")
        r = subprocess.run([os.path.join(BIN, "torchserve-c"), "--start", "--model-store", store,
                            "--ts-config", cfg], cwd=d, capture_output=True, text=True, timeout=60)
    finally:
        holder.close()
    assert r.returncode == 1, r
    assert f"cannot listen on http://127.0.0.1:{port}: Address already in use" in r.stderr, r.stderr
    assert f"held by pid {os.getpid()}" in r.stderr, r.stderr
    assert "see var/log/tsc/ts_log.log" in r.stderr, r.stderr
    assert os.path.getsize(os.path.join(d, "var/log/tsc/ts_log.log")) > 0


def sched_policies(pid):
    """The scheduling policy of each thread of pid (/proc/PID/task/TID/stat, field 41)."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                out[int(tid)] = int(f.read().rsplit(")", 1)[1].split()[38])
        except OSError:
            pass  # the thread ended meanwhile
    return out


@pytest.mark.parametrize("value,policy", [(None, SCHED_BATCH), ("false", SCHED_OTHER)],
                         ids=["default", "off"])
def test_sched_batch_covers_frontend_workers_and_their_threads(tmp_path, value, policy):
    """sched_batch (default true): the frontend, gRPC's and the logs' threads, the workers and
    libtorch's threads all run under SCHED_BATCH; sched_batch=false leaves them as started."""
    config = {} if value is None else {"sched_batch": value}
    srv = start_server(str(tmp_path), models=["mlp"], config=config)
    try:
        srv.wait_ready("mlp", body={"json": SAMPLE})
        pids = [srv.pid] + srv.worker_pids()
        assert len(pids) == 2, pids
        for pid in pids:
            got = sched_policies(pid)
            assert got and set(got.values()) == {policy}, (pid, got)
        want = "SCHED_BATCH for the frontend" if policy == SCHED_BATCH else "as started"
        assert f"CPU scheduling: {want}" in srv.log(), srv.log()
    finally:
        srv.stop()


def voluntary_switches(pid, tid=None):
    """How often a thread slept (voluntary_ctxt_switches); the main thread by default."""
    with open(f"/proc/{pid}/task/{tid or pid}/status") as f:
        for line in f:
            if line.startswith("voluntary_ctxt_switches:"):
                return int(line.split()[1])
    raise AssertionError(f"no voluntary_ctxt_switches for {pid}")


@pytest.mark.parametrize("value", [None, "10000"], ids=["default-off", "on"])
def test_busy_poll_spares_the_sleeps_and_sleeps_when_idle(tmp_path, value):
    """busy_poll_us: under a steady stream of requests the frontend's loop and the worker look
    for their next event instead of sleeping, so neither sleeps once per request any more;
    the answers are unchanged; an idle server still sleeps. Off (the default), both sleep for
    every request."""
    import requests
    import torch
    config = {} if value is None else {"busy_poll_us": value}
    srv = start_server(str(tmp_path), models=["mlp"], config=config)
    try:
        srv.wait_ready("mlp", body={"json": SAMPLE})
        (wpid,) = srv.worker_pids()
        model = mar_module("mlp")
        x = torch.rand(1, 64, generator=torch.Generator().manual_seed(5)) * 4 - 2
        with torch.no_grad():
            want = model(x)[0].tolist()
        sess = requests.Session()
        url = srv.url("/predictions/mlp")
        for _ in range(20):  # the connection and both processes warm
            sess.post(url, json={"data": x[0].tolist()}, timeout=30)
        n = 300
        f0, w0 = voluntary_switches(srv.pid), voluntary_switches(wpid)
        for _ in range(n):
            r = sess.post(url, json={"data": x[0].tolist()}, timeout=30)
            assert r.status_code == 200, r.text
            got = r.json()
            assert max(abs(a - b) for a, b in zip(got, want)) <= 1e-5, (got, want)
        f1, w1 = voluntary_switches(srv.pid), voluntary_switches(wpid)
        per_req = ((f1 - f0) / n, (w1 - w0) / n)
        if value is None:
            assert per_req[0] >= 0.9 and per_req[1] >= 0.9, per_req
            assert "busy polling" not in srv.log()
        else:
            # off: 2 and 1; the client's own turn-around (requests, json) is well inside 10 ms
            assert per_req[0] <= 0.5 and per_req[1] <= 0.5, per_req
            assert "look for events for 10000 us before they sleep (busy_poll_us)" in srv.log()
        # idle: the first wait may look for 10 ms, the ones after sleep at once
        time.sleep(0.5)
        c0 = (cpu_seconds(srv.pid), cpu_seconds(wpid))
        time.sleep(2)
        c1 = (cpu_seconds(srv.pid), cpu_seconds(wpid))
        assert c1[0] - c0[0] <= 0.1 and c1[1] - c0[1] <= 0.1, (c0, c1)
    finally:
        srv.stop()


def test_busy_poll_sleeps_between_timed_steps(tmp_path):
    """A worker holding a stream whose steps come every 5 ms (shorter than busy_poll_us) waits
    for each step on its timer: such a wait ends with no event, so the next one sleeps instead
    of looking for the whole life of the stream."""
    import requests
    srv = start_server(str(tmp_path), models=["identity_text"], config={"busy_poll_us": 10000},
                       yaml={"identity_text": {"handler": {"delay_ms": 5}}})
    try:
        srv.wait_ready("identity_text")
        (wpid,) = srv.worker_pids()
        words = " ".join(f"w{i}" for i in range(400))  # about 2 s of steps
        r = requests.post(srv.url("/predictions/identity_text"), data=words, stream=True,
                          headers={"Content-Type": "text/plain"}, timeout=60)
        assert r.status_code == 200, r.text
        it = r.iter_content(chunk_size=None)
        got = [next(it)]
        c0, t0 = cpu_seconds(wpid), time.time()
        for chunk in it:
            got.append(chunk)
            if time.time() - t0 >= 1.5:
                break
        c1, t1 = cpu_seconds(wpid), time.time()
        for chunk in it:
            got.append(chunk)
        assert b"".join(got).decode() == words
        assert c1 - c0 <= 0.4 * (t1 - t0), f"the worker used {c1 - c0:.2f} s in {t1 - t0:.2f} s"
    finally:
        srv.stop()
