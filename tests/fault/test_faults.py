"""The fault suite: the real binaries under the faults a deployment meets, each with the outcome
it must have and the check that nothing was lost (every request answered exactly once, with the
right answer or an error that names the fault, and the server serving afterwards).
The table is in tests/fault/README.md; faults covered elsewhere are listed there too."""
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest
import requests

from conftest import PYSTUBS, python_model, start_server

sys.path.insert(0, PYSTUBS)
import grpc  # noqa: E402
import inference_pb2 as ipb  # noqa: E402
import inference_pb2_grpc as igrpc  # noqa: E402

SAMPLE = {"data": [0.25] * 64}


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(f.read().split("VmRSS:")[1].split()[0])


def predict_ok(s, timeout=10):
    r = requests.post(s.url("/predictions/mlp"), json=SAMPLE, timeout=timeout)
    assert r.status_code == 200, r.text
    assert len(r.json()) == 10
    return r


class Load:
    """Client threads posting to mlp until stopped; every request is recorded with its answer."""

    def __init__(self, s, n, body=None):
        self.s, self.stop, self.results = s, threading.Event(), []
        self.body = body or (lambda i, k: SAMPLE)
        self.threads = [threading.Thread(target=self.run, args=(i,)) for i in range(n)]
        for t in self.threads:
            t.start()

    def run(self, i):
        sess, k = requests.Session(), 0
        while not self.stop.is_set():
            k += 1
            try:
                r = sess.post(self.s.url("/predictions/mlp"), json=self.body(i, k), timeout=30)
                self.results.append((r.status_code, r.text))
            except requests.RequestException as e:
                self.results.append((None, repr(e)))
                sess = requests.Session()

    def finish(self):
        self.stop.set()
        for t in self.threads:
            t.join()
        return self.results


# ----------------------------------------------------------------------------- slow and floods

def test_slowloris_does_not_starve_others(server_factory):
    """300 clients trickle a header line every 0.3 s: everyone else is served at full speed."""
    s = server_factory(models=["mlp"])
    s.wait_ready("mlp", body={"json": SAMPLE})
    socks = []
    for _ in range(300):
        c = socket.create_connection(("127.0.0.1", s.ports["inference"]))
        c.sendall(b"POST /predictions/mlp HTTP/1.1\r\nHost: x\r\n")
        socks.append(c)
    # served between two trickles, with 300 requests never complete: a server that waited on
    # a slow client would never answer (predict_ok's timeout fails it); how fast it answers
    # is the machine's business
    for _ in range(8):
        for c in socks:
            c.sendall(b"X-Slow: 1\r\n")
        predict_ok(s, timeout=30)
        time.sleep(0.3)
    for c in socks:
        c.close()
    predict_ok(s)


def test_body_flood_is_dropped_not_buffered(server_factory):
    """8 clients each send a 64 MiB body over max_request_size at once: each gets 413 (read and
    dropped, not buffered), the frontend stays small, and normal requests go on meanwhile."""
    s = server_factory(models=["mlp"], config={"max_request_size": 1 << 20})
    s.wait_ready("mlp", body={"json": SAMPLE})
    before = rss_kb(s.pid)
    statuses, peak = [], [0]

    def flood():
        n = 64 << 20
        with socket.create_connection(("127.0.0.1", s.ports["inference"]), timeout=30) as c:
            c.sendall(b"POST /predictions/mlp HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % n)
            chunk = b"7" * (1 << 20)
            for _ in range(64):
                c.sendall(chunk)
            got = b""
            while b"\r\n\r\n" not in got:
                d = c.recv(4096)
                if not d:
                    break
                got += d
            statuses.append(int(got.split()[1]) if got else None)

    ts = [threading.Thread(target=flood) for _ in range(8)]
    for t in ts:
        t.start()
    while any(t.is_alive() for t in ts):
        predict_ok(s)
        peak[0] = max(peak[0], rss_kb(s.pid))
    for t in ts:
        t.join()
    assert statuses == [413] * 8, statuses
    assert peak[0] - before < 24 * 1024, f"frontend RSS grew by {peak[0] - before} KiB"


# ----------------------------------------------------------------------------- disconnect storms

STORM_WORDS = " ".join(["w"] * 6000)  # 6000 words at 50 ms: 300 s if a dropped request kept running


@pytest.fixture
def stream_srv(server_factory):
    s = server_factory(models=["identity_text"],
                       yaml={"identity_text": {"batchSize": 8, "handler": {"delay_ms": 50}}})
    s.wait_ready("identity_text", body={"data": "warm", "headers": {"x-delay-ms": "0"}})
    return s


def assert_worker_free(s):
    """8 short streams (the batch's 8 slots) are served: no dropped request still holds a slot
    (each of those would run for STORM_WORDS' 300 s, past the requests' 60 s timeout)."""
    out = []

    def one():
        try:
            r = requests.post(s.url("/predictions/identity_text"), data="a b c", timeout=60)
            out.append((r.status_code, r.text.split()))
        except requests.RequestException as e:
            out.append((None, repr(e)))

    ts = [threading.Thread(target=one) for _ in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert len(out) == 8 and all(st == 200 and words == ["a", "b", "c"] for st, words in out), \
        f"dropped requests still hold slots: {out}"


def test_disconnect_storm_http_and_sse(stream_srv):
    s = stream_srv
    for i in range(150):
        c = socket.create_connection(("127.0.0.1", s.ports["inference"]))
        path = b"/predictions/identity_text" if i % 2 else b"/v2/models/identity_text/generate_stream"
        body = (STORM_WORDS.encode() if i % 2 else
                json.dumps({"text_input": STORM_WORDS}).encode())
        c.sendall(b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % (path, len(body))
                  + body)
        if i % 3 == 0:
            c.recv(100)  # some leave after the first bytes, some before
        c.close()
    time.sleep(0.5)
    assert_worker_free(s)


def test_disconnect_storm_grpc(stream_srv):
    s = stream_srv
    chan = grpc.insecure_channel(f"127.0.0.1:{s.ports['grpc']}")
    stub = igrpc.InferenceAPIsServiceStub(chan)
    req = ipb.PredictionsRequest(model_name="identity_text", input={"data": STORM_WORDS.encode()})
    try:
        for i in range(150):
            call = stub.StreamPredictions(req, timeout=30)
            if i % 3 == 0:
                next(call)
            call.cancel()
    finally:
        chan.close()
    time.sleep(0.5)
    assert_worker_free(s)


# ----------------------------------------------------------------------------- workers die

def test_kill_worker_mid_batch(server_factory):
    """kill -9 of a worker holding batches of 8: the batch it was running, if any, gets 500
    "Worker died"; every other request its right answer; no request is lost or answered twice.
    Stopped first, the worker is most likely between steps, running none: its progress page
    says so, and then nothing fails (test_python_worker_death kills one inside handle())."""
    s = server_factory(models=["mlp"], yaml={"mlp": {"batchSize": 8, "maxBatchDelay": 20}})
    s.wait_ready("mlp", body={"json": SAMPLE})
    load = Load(s, 12)
    time.sleep(0.5)
    (pid,) = s.worker_pids()
    os.kill(pid, signal.SIGSTOP)
    time.sleep(0.3)  # a batch in flight on the frozen worker, the rest queued
    os.kill(pid, signal.SIGKILL)
    time.sleep(2.0)
    results = load.finish()
    statuses = [st for st, _ in results]
    assert None not in statuses, [r for r in results if r[0] is None][:3]
    assert set(statuses) <= {200, 500}, set(statuses)
    died = [json.loads(t) for st, t in results if st == 500]
    assert len(died) <= 8, len(died)
    assert "respawning" in s.log()
    assert all("worker died" in d["message"].lower() for d in died), died[:2]
    assert all(len(json.loads(t)) == 10 for st, t in results if st == 200)
    predict_ok(s)


BIG_ANSWER = '''
import os


def handle(data, context):
    if data is None:
        return None
    body = bytes(data[0]["body"])
    with open(os.path.join(context.system_properties["model_dir"], "ran.log"), "ab") as f:
        f.write(body + b"\\n")
    return [b"x" * (1 << 20) if body == b"big" else b"ok " + body]
'''


def test_answer_over_max_response_size_fails_once_and_is_not_run_again(tmp_path):
    """An answer over max_response_size: the frontend kills the worker (the frame cannot be
    read past its length), and the request, which reached the handler, fails once with a 500
    naming max_response_size. It used to go back to the queue as "not started" and run 4
    times, killing a worker each time. The respawned worker serves at once (it had answered
    before, so no back-off)."""
    store = str(tmp_path / "store")
    d = python_model(store, "big", BIG_ANSWER, "minWorkers: 1\nmaxWorkers: 1\nbatchSize: 1\n")
    s = start_server(str(tmp_path), models=["big"], store=store,
                     config={"max_response_size": 65536})
    try:
        s.wait_ready("big", body={"data": b"warm"})
        r = requests.post(s.url("/predictions/big"), data=b"big", timeout=60)
        assert r.status_code == 500, r.text
        assert "max_response_size" in r.json()["message"], r.text
        t0 = time.time()
        r = requests.post(s.url("/predictions/big"), data=b"after", timeout=60)
        assert r.status_code == 200 and r.text == "ok after", r.text
        assert time.time() - t0 < 10  # respawned without back-off (load included)
        with open(os.path.join(d, "ran.log"), "rb") as f:
            ran = [x for x in f.read().split(b"\n") if x and x != b"warm"]
        assert ran == [b"big", b"after"], (ran, s.log()[-3000:])
        assert s.log().count("respawning") == 1
    finally:
        s.stop()


# ----------------------------------------------------------------------------- frontend dies

def test_sigkill_frontend_leaves_no_orphans_and_restarts(tmp_path):
    """kill -9 of the frontend: its workers exit on their own (no orphans), and the same
    instance starts again on the same ports (its stale pidfile is recognised)."""
    tmp = str(tmp_path)
    s = start_server(tmp, models=["mlp", "identity_text"])
    s.wait_ready("mlp", body={"json": SAMPLE})
    s.wait_ready("identity_text", body={"data": "warm"})
    workers = s.worker_pids()
    assert len(workers) == 2
    os.kill(s.pid, signal.SIGKILL)
    s.proc.wait()
    deadline = time.time() + 5
    while time.time() < deadline and any(os.path.exists(f"/proc/{p}") for p in workers):
        time.sleep(0.1)
    alive = [p for p in workers if os.path.exists(f"/proc/{p}")
             and "Z" not in open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()[0]]
    assert not alive, f"orphaned workers: {alive}"
    cfg = {"inference_address": f"http://127.0.0.1:{s.ports['inference']}",
           "management_address": f"http://127.0.0.1:{s.ports['management']}",
           "metrics_address": f"http://127.0.0.1:{s.ports['metrics']}",
           "grpc_inference_port": s.ports["grpc"], "grpc_management_port": s.ports["grpc_mgmt"]}
    again = start_server(tmp, models=["mlp"], config=cfg, store=s.store)
    again.ports = s.ports  # the same instance: its ports are the first one's
    try:
        again.wait_ready("mlp", body={"json": SAMPLE})
        predict_ok(again)
    finally:
        again.stop()


# ----------------------------------------------------------------------------- scale storm

def test_scale_storm_during_traffic(server_factory):
    """20 scale operations up and down while 4 clients send: every request is answered 200
    (scale-down lets a worker finish what it holds)."""
    s = server_factory(models=["mlp"], config={"enable_model_api": "true"})
    s.wait_ready("mlp", body={"json": SAMPLE})
    load = Load(s, 4)
    try:
        for n in [3, 1, 4, 2, 1, 3, 2, 4, 1, 2] * 2:
            r = requests.put(s.url(f"/models/mlp?min_worker={n}&max_worker={n}&synchronous=true",
                                   "management"), timeout=60)
            assert r.status_code == 200, r.text
    finally:
        results = load.finish()
    bad = [r for r in results if r[0] != 200]
    assert not bad, bad[:3]
    assert len(results) > 100
    assert len(s.worker_pids()) == 2


# ----------------------------------------------------------------------------- full disk

@pytest.fixture
def tiny_state_dir(tmp_path):
    d = tmp_path / "state"
    d.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(d)]).returncode:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    yield str(d)
    subprocess.run(["umount", "-l", str(d)])


def test_full_disk_for_state(server_factory, tiny_state_dir):
    """The state directory fills up (a 64 KiB tmpfs): sequences that cannot store their state
    get 507 saying so, the worker and the other models keep serving, and once sequences end,
    new ones work again."""
    s = server_factory(models=["stateful", "mlp"], config={"state_dir": tiny_state_dir},
                       yaml={"stateful": {"batchSize": 8, "maxBatchDelay": 0, "minWorkers": 1,
                                          "maxWorkers": 1, "maxNumSequence": 100000,
                                          "continuousBatching": False}})
    s.wait_ready("mlp", body={"json": SAMPLE})
    ids, errors, lock = [], [], threading.Lock()

    def opener():
        sess = requests.Session()
        while True:
            with lock:
                if len(errors) >= 3 or len(ids) > 20000:
                    return
            r = sess.post(s.url("/predictions/stateful"), data="1", timeout=30)
            with lock:
                if r.status_code == 200:
                    ids.append(r.headers["ts_request_sequence_id"])
                else:
                    errors.append((r.status_code, r.text))

    ts = [threading.Thread(target=opener) for _ in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert errors, f"the 64 KiB state directory never filled up ({len(ids)} sequences)"
    for st, txt in errors:
        assert st == 507, (st, txt)
        assert "state" in json.loads(txt)["message"], txt
    predict_ok(s)
    for sid in ids:
        requests.post(s.url("/predictions/stateful"), data="0",
                      headers={"ts_request_sequence_id": sid}, timeout=30)
    r = requests.post(s.url("/predictions/stateful"), data="1", timeout=30)
    assert r.status_code == 200, r.text


@pytest.fixture
def small_state_dir(tmp_path):
    d = tmp_path / "state"
    d.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(d)]).returncode:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    yield str(d)
    subprocess.run(["umount", "-l", str(d)])


def test_disk_full_when_the_state_store_opens(server_factory, small_state_dir):
    """The disk is full when the worker first opens its state store: LMDB's lock file is
    written through a shared map, and a page without a block was a SIGBUS that killed the
    worker at every respawn. Now the sequences whose state cannot be stored get 507, the worker
    lives (no respawn), and once the disk has room again the store opens and new sequences
    work on the same worker."""
    s = server_factory(models=["stateful"], config={"state_dir": small_state_dir},
                       yaml={"stateful": {"minWorkers": 1, "maxWorkers": 1,
                                          "maxNumSequence": 1000,
                                          "continuousBatching": False}})
    s.wait_ready("stateful")
    pids = s.worker_pids()
    assert len(pids) == 1
    filler = os.path.join(small_state_dir, "filler")
    subprocess.run(["dd", "if=/dev/zero", f"of={filler}", "bs=4k"], capture_output=True)
    sess = requests.Session()
    for i in range(5):
        r = sess.post(s.url("/predictions/stateful"), data=str(i),
                      headers={"ts_request_sequence_id": f"full-{i}"}, timeout=30)
        assert r.status_code == 507, r.text
        assert "state" in r.json()["message"], r.text
    assert s.worker_pids() == pids, "the worker died:\n" + s.log()[-3000:]
    assert "signal 7" not in s.log(), s.log()[-3000:]
    assert "No space left on device" in s.log(), s.log()[-3000:]
    os.unlink(filler)
    deadline = time.time() + 10
    while True:  # the store is tried again at most once a second
        r = sess.post(s.url("/predictions/stateful"), data="5",
                      headers={"ts_request_sequence_id": f"after-{time.time()}"}, timeout=30)
        if r.status_code == 200 or time.time() > deadline:
            break
        assert r.status_code == 507, r.text
        time.sleep(0.2)
    assert r.status_code == 200, r.text
    assert s.worker_pids() == pids
