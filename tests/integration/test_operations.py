"""Operations: what `--start` tells the operator, and where it writes its log."""
import os
import shutil
import socket
import subprocess

import pytest

from conftest import BIN, MODEL_STORE, free_port, start_server

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
