"""Sequence state shared through Redis (state_store=redis://...; issue 33, point 5).

Two instances (no balancer here; tests/integration/test_deploy.py runs a cluster) on one Redis
(Debian's redis-server, started by the test on a free port):

- a sequence started on instance A (a server-made id and a client-chosen one) continues on
  instance B, with its sums, after A and its workers are killed with SIGKILL; B's first answer
  for each says ts_request_sequence_start: false (a continuation of stored state), while an id
  nobody has seen starts from zero with ts_request_sequence_start: true;
- the values live in Redis under "<model>@<version>:<sequence id>", expire after
  sequenceMaxIdleMSec, and are deleted when the sequence ends;
- a state_store that is not lmdb or redis://HOST:PORT stops the start with file:line;
- with Redis down, a sequence request fails with 507 naming the state store, and the server
  keeps serving.
"""
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from conftest import BIN, free_port, prepare_store, start_server  # noqa: E402

SEQ = "ts_request_sequence_id"
START = "ts_request_sequence_start"
END = "ts_request_sequence_end"
PLAIN = {"continuousBatching": False, "maxBatchDelay": 5, "minWorkers": 1, "maxWorkers": 1,
         "sequenceMaxIdleMSec": 600000}


def start_redis(tmp):
    """A private redis-server on a free loopback port, nothing saved to disk."""
    port = free_port()
    proc = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                             "--save", "", "--appendonly", "no", "--dir", tmp],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 30
    while time.time() < deadline:
        if redis_cli(port, "PING") == "PONG":
            return proc, port
        time.sleep(0.05)
    proc.kill()
    raise AssertionError("redis-server did not start")


def redis_cli(port, *args):
    p = subprocess.run(["redis-cli", "-p", str(port), *args], capture_output=True, text=True,
                       timeout=10)
    return p.stdout.strip()


@pytest.fixture
def redis(tmp_path):
    proc, port = start_redis(str(tmp_path))
    yield port
    proc.terminate()
    proc.wait(timeout=10)


def instance(tmp, store, port, **config):
    d = tempfile.mkdtemp(dir=tmp)
    return start_server(d, models=["stateful"], store=store,
                        config=dict({"state_store": f"redis://127.0.0.1:{port}"}, **config))


def test_sequences_continue_on_another_instance_after_kill_9(tmp_path, redis):
    tmp = str(tmp_path)
    store = prepare_store(tmp, ["stateful"], {"stateful": PLAIN})
    a = instance(tmp, store, redis)
    b = instance(tmp, store, redis)
    try:
        r = a.post("/predictions/stateful", data="2")
        assert r.status_code == 200 and r.text == "2" and r.headers[START] == "true", r.text
        made = r.headers[SEQ]
        r = a.post("/predictions/stateful", data="4", headers={SEQ: "client-1", START: "true"})
        assert r.status_code == 200 and r.text == "4", r.text
        for sid, v, want in ((made, 4, "6"), ("client-1", 6, "10")):
            r = a.post("/predictions/stateful", data=str(v), headers={SEQ: sid})
            assert r.status_code == 200 and r.text == want and START not in r.headers, r.text
        # the values are in Redis, expiring
        assert redis_cli(redis, "GET", f"stateful@1.0:{made}").startswith("6")
        ttl = int(redis_cli(redis, "PTTL", "stateful@1.0:client-1"))
        assert 0 < ttl <= 600000, ttl

        workers = a.worker_pids()
        os.kill(a.pid, signal.SIGKILL)
        a.proc.wait()
        for p in workers:  # they see their socket close and exit
            deadline = time.time() + 30
            while os.path.exists(f"/proc/{p}") and time.time() < deadline:
                time.sleep(0.05)

        # B never saw them: it continues both from Redis, and says it continued
        for sid, v, want in ((made, 8, "14"), ("client-1", 10, "20")):
            r = b.post("/predictions/stateful", data=str(v), headers={SEQ: sid})
            assert r.status_code == 200 and r.text == want, (sid, r.status_code, r.text)
            assert r.headers[START] == "false", (sid, dict(r.headers))
            r = b.post("/predictions/stateful", data="2", headers={SEQ: sid})
            assert r.status_code == 200 and r.text == str(int(want) + 2) and \
                START not in r.headers, r.text
        # an id nobody has seen starts afresh, and says so
        r = b.post("/predictions/stateful", data="4", headers={SEQ: "client-new"})
        assert r.status_code == 200 and r.text == "4" and r.headers[START] == "true", r.text
        # 0 ends a sequence: its state leaves Redis
        r = b.post("/predictions/stateful", data="0", headers={SEQ: made})
        assert r.status_code == 200 and r.headers.get(END) == "true", r.text
        deadline = time.time() + 10
        while redis_cli(redis, "EXISTS", f"stateful@1.0:{made}") != "0" and \
                time.time() < deadline:
            time.sleep(0.05)
        assert redis_cli(redis, "EXISTS", f"stateful@1.0:{made}") == "0"
        assert "state store redis://127.0.0.1" in b.log()
    finally:
        a.stop()
        b.stop()


def test_bad_state_store_stops_the_start(tmp_path):
    cfg = tmp_path / "config.properties"
    cfg.write_text(f"inference_address=http://127.0.0.1:{free_port()}\n"
                   f"management_address=http://127.0.0.1:{free_port()}\n"
                   f"metrics_address=http://127.0.0.1:{free_port()}\n"
                   f"grpc_inference_port={free_port()}\ngrpc_management_port={free_port()}\n"
                   "state_store=redis:/localhost\n")
    (tmp_path / "store").mkdir()
    p = subprocess.run([os.path.join(BIN, "torchserve-c"), "--start", "--foreground", "--ncs",
                        "--model-store", "store", "--ts-config", str(cfg)], cwd=tmp_path,
                       env=dict(os.environ, TMPDIR=str(tmp_path)), capture_output=True,
                       text=True, timeout=30)
    assert p.returncode == 1 and f"{cfg}:6: state_store" in p.stderr, p.stderr
    assert "redis://[:PASSWORD@]HOST:PORT[/DB]" in p.stderr


def test_redis_down_is_a_507_and_the_server_goes_on(tmp_path):
    tmp = str(tmp_path)
    store = prepare_store(tmp, ["stateful"], {"stateful": PLAIN})
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    srv = instance(tmp, store, dead)
    try:
        for _ in range(2):
            r = srv.post("/predictions/stateful", data="2")
            assert r.status_code == 507, r.text
            assert "could not store the state" in r.json()["message"], r.text
        assert f"cannot connect to Redis at 127.0.0.1:{dead}" in srv.log()
        assert srv.get("/ping").status_code == 200
    finally:
        srv.stop()
        shutil.rmtree(tmp, ignore_errors=True)
