"""Stateful sequences over HTTP: TorchServe's stateful example scenario, no crosstalk between
many concurrent sequences, expiry and limits, a worker crash in the middle of open sequences,
cancel of a running stream, and an LSTM whose hidden state travels through the state API."""
import os
import random
import re
import signal
import subprocess
import threading
import time
import uuid

import pytest
import requests

from conftest import BUILD

SEQ = "ts_request_sequence_id"
START = "ts_request_sequence_start"
END = "ts_request_sequence_end"
CANCEL = "ts_request_sequence_cancel"

# sequence batching without streaming (TorchServe's examples/stateful/sequence_batching)
PLAIN = {"continuousBatching": False, "maxBatchDelay": 5}


def start_seq(srv, value, model="stateful", **kw):
    """A new sequence (no id): returns (id, answer text)."""
    r = srv.post(f"/predictions/{model}", data=str(value), **kw)
    assert r.status_code == 200, r.text
    return r.headers[SEQ], r.text


def step(srv, sid, value, model="stateful", headers=None, **kw):
    h = {SEQ: sid}
    h.update(headers or {})
    return srv.post(f"/predictions/{model}", data=str(value), headers=h, **kw)


def wait_ready(srv, model="stateful"):
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            r = srv.post(f"/predictions/{model}", data="0", timeout=10)
            if r.status_code == 200:
                return
        except requests.RequestException:
            pass
        time.sleep(0.1)
    raise AssertionError(srv.log()[-3000:])


def run_threads(fns):
    errors = []

    def wrap(fn):
        try:
            fn()
        except BaseException as e:  # noqa: B036 - report everything to the main thread
            errors.append(e)

    ts = [threading.Thread(target=wrap, args=(f,)) for f in fns]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errors:
        raise errors[0]


@pytest.mark.smoke
def test_torchserve_http_scenario(server_factory):
    """Two concurrent sequences send 1,3,5,7,9 and 2,4,6,8,10 and get the running sums."""
    srv = server_factory(models=["stateful"], yaml={"stateful": PLAIN})
    wait_ready(srv)
    got = {}

    def seq(values, name):
        sid, first = start_seq(srv, values[0])
        assert sid.startswith("ts-seq-")
        answers = [first]
        for v in values[1:]:
            r = step(srv, sid, v)
            assert r.status_code == 200, r.text
            assert r.headers[SEQ] == sid
            answers.append(r.text)
        got[name] = " ".join(answers)

    run_threads([lambda: seq([1, 3, 5, 7, 9], "odd"), lambda: seq([2, 4, 6, 8, 10], "even")])
    assert got == {"odd": "1 4 9 16 25", "even": "2 6 12 20 30"}


def curl_t(srv, sid, value, tmp_path):
    """TorchServe's stateful example, as its README runs it:
    curl -H "ts_request_sequence_id: seq_0" URL/predictions/stateful -T sample1.txt"""
    f = tmp_path / f"{sid}-{value}.txt"
    f.write_text(str(value))
    r = subprocess.run(["curl", "-s", "-i", "-H", f"{SEQ}: {sid}", "-T", str(f),
                        srv.url("/predictions/stateful")], capture_output=True, text=True,
                       timeout=30)
    rest = r.stdout.replace("\r\n", "\n")
    while True:  # curl -T sends Expect: 100-continue; -i shows the interim answer too
        head, _, rest = rest.partition("\n\n")
        if not head.split()[1].startswith("1"):
            return int(head.split()[1]), head, rest


def test_client_chosen_ids_start_sequences_curl_flow(server_factory, tmp_path):
    """Ids the server has never seen start sequences without any start flag, as TorchServe's
    frontend does (its stateful example's curl flow): two concurrent client-chosen ids get their
    own running sums; once ended (0) or cancelled the id gets 410, and it stays refused."""
    srv = server_factory(models=["stateful"], yaml={"stateful": PLAIN})
    wait_ready(srv)
    got = {}

    def seq(sid, values):
        sums = []
        for v in values:
            status, head, body = curl_t(srv, sid, v, tmp_path)
            assert status == 200, (head, body)
            assert f"{SEQ}: {sid}" in head, head
            sums.append(int(body))
        got[sid] = sums

    run_threads([lambda: seq("seq_0", [1, 3, 5, 7, 9]), lambda: seq("seq_1", [2, 4, 6, 8, 10])])
    assert got == {"seq_0": [1, 4, 9, 16, 25], "seq_1": [2, 6, 12, 20, 30]}
    status, head, body = curl_t(srv, "seq_0", 0, tmp_path)
    assert status == 200 and int(body) == 25 and f"{END}: true" in head, (head, body)
    for _ in range(2):
        status, _, body = curl_t(srv, "seq_0", 1, tmp_path)
        assert status == 410 and "was ended" in body, body
    r = step(srv, "seq_1", 0, headers={CANCEL: "true"})
    assert r.status_code == 200, r.text
    r = step(srv, "seq_1", 1)
    assert r.status_code == 410 and "was cancelled" in r.json()["message"], r.text
    # a cancel of an id never seen does not open one
    r = step(srv, "seq_never", 0, headers={CANCEL: "true"})
    assert r.status_code == 404, r.text
    r = step(srv, "seq_never", 5)
    assert r.status_code == 200 and r.text == "5", r.text
    # an explicit start on a closed id is a deliberate restart, as before
    r = step(srv, "seq_0", 4, headers={START: "true"})
    assert r.status_code == 200 and r.text == "4", r.text


def test_client_chosen_ids_count_against_max_num_sequence(server_factory):
    """A client-chosen id takes a sequence slot like any start: with maxNumSequence 2, a third
    new id is refused with 429, and an id over 256 bytes is refused with 400 before taking one."""
    yaml = dict(PLAIN, batchSize=1, minWorkers=1, maxWorkers=1, maxNumSequence=2,
                sequenceMaxIdleMSec=60000)
    srv = server_factory(models=["stateful"], yaml={"stateful": yaml})
    wait_ready(srv)
    r = step(srv, "a" * 257, 1)
    assert r.status_code == 400 and "longer than 256 bytes" in r.json()["message"], r.text
    deadline = time.time() + 10
    while True:  # the readiness probe's sequence may still hold a slot
        r = step(srv, "chosen-1", 1)
        if r.status_code != 429 or time.time() > deadline:
            break
        time.sleep(0.2)
    assert r.status_code == 200, r.text
    assert step(srv, "chosen-2", 2).status_code == 200
    r = step(srv, "chosen-3", 3)
    assert r.status_code == 429 and "maxNumSequence 2" in r.json()["message"], r.text
    assert step(srv, "chosen-1", 0).status_code == 200
    r = step(srv, "chosen-3", 3)
    assert r.status_code == 200 and r.text == "3", r.text


def test_no_crosstalk_64_sequences(server_factory):
    """64 concurrent sequences with their own random integers on 2 workers x batchSize 8:
    every answer is that sequence's running sum, and batches held several sequences."""
    yaml = dict(PLAIN, batchSize=8, minWorkers=2, maxWorkers=2, maxNumSequence=64,
                maxBatchDelay=20)
    srv = server_factory(models=["stateful"], yaml={"stateful": yaml},
                         config={"worker_debug_headers": True})
    wait_ready(srv)
    rng = random.Random(5)
    plans = [[rng.randint(1, 1000) for _ in range(6)] for _ in range(64)]
    max_batch = [0]
    barrier = threading.Barrier(64)

    def seq(values):
        s = requests.Session()
        barrier.wait()
        r = s.post(srv.url("/predictions/stateful"), data=str(values[0]), timeout=30)
        assert r.status_code == 200, r.text
        sid, total = r.headers[SEQ], values[0]
        assert int(r.text) == total
        for v in values[1:]:
            r = s.post(srv.url("/predictions/stateful"), data=str(v), headers={SEQ: sid},
                       timeout=30)
            total += v
            assert r.status_code == 200, r.text
            assert int(r.text) == total, (sid, r.text, total)
            max_batch[0] = max(max_batch[0], int(r.headers.get("x-ts-worker-batch", "1")))
        r = s.post(srv.url("/predictions/stateful"), data="0", headers={SEQ: sid}, timeout=30)
        assert r.status_code == 200 and int(r.text) == total and r.headers.get(END) == "true"

    run_threads([lambda p=p: seq(p) for p in plans])
    # x-ts-worker-batch: the requests of the worker step that answered (the stateful handler is
    # continuous, so the worker also merges frames the frontend sent one by one into one step;
    # ts_max_batch_size counts only the frontend's frames)
    assert max_batch[0] > 1, "no worker step ever held more than one sequence"


def test_expiry_ended_and_limits(server_factory):
    yaml = dict(PLAIN, batchSize=1, minWorkers=1, maxWorkers=1, maxNumSequence=3,
                sequenceMaxIdleMSec=400, sequenceTimeoutMSec=900, maxSequenceJobQueueSize=1)
    srv = server_factory(models=["stateful"], yaml={"stateful": yaml})
    wait_ready(srv)
    time.sleep(0.5)  # the readiness probes' sequences idle out

    # idle: no request for longer than sequenceMaxIdleMSec
    idle, _ = start_seq(srv, 2)
    time.sleep(0.7)
    r = step(srv, idle, 2)
    assert r.status_code == 410, r.text
    assert "expired (idle 400 ms)" in r.json()["message"]

    # session timeout: busy all along, but older than sequenceTimeoutMSec
    old, _ = start_seq(srv, 2)
    t0 = time.time()
    while time.time() - t0 < 60:  # a hang guard: the sequence expires after 0.9 s
        r = step(srv, old, 2)
        if r.status_code != 200:
            break
        time.sleep(0.2)
    assert r.status_code == 410, r.text
    assert "expired (session timeout 900 ms)" in r.json()["message"]
    assert time.time() - t0 > 0.8  # not before its timeout

    # ended by 0: later requests learn it, and it never becomes a new sequence silently
    done, _ = start_seq(srv, 5)
    r = step(srv, done, 0)
    assert r.status_code == 200 and r.text == "5" and r.headers.get(END) == "true"
    r = step(srv, done, 1)
    assert r.status_code == 410 and "was ended" in r.json()["message"], r.text

    # too many sequences: maxNumSequence 3
    open_ids = [start_seq(srv, 1)[0] for _ in range(3)]
    r = srv.post("/predictions/stateful", data="1")
    assert r.status_code == 429, r.text
    assert "maxNumSequence 3" in r.json()["message"]
    for sid in open_ids:
        assert step(srv, sid, 0).status_code == 200


def test_sequence_queue_full_429(server_factory):
    """maxSequenceJobQueueSize 1 under continuous batching at batchSize 1: one request streams,
    the next one of the sequence joins it (a worker holds up to 2 x batchSize), a third waits in
    the sequence's queue, and a fourth gets 429 at once."""
    yaml = {"batchSize": 1, "minWorkers": 1, "maxWorkers": 1, "maxSequenceJobQueueSize": 1,
            "handler": {"stream_steps": 10, "stream_delay_ms": 100}}
    srv = server_factory(models=["stateful"], yaml={"stateful": yaml})
    wait_ready(srv)
    sid, _ = start_seq(srv, 2)
    results = {}

    def streaming():
        results["stream"] = step(srv, sid, 3)

    def joining():
        time.sleep(0.3)
        results["joining"] = step(srv, sid, 5)

    def queued():
        time.sleep(0.5)
        results["queued"] = step(srv, sid, 7)

    def rejected():
        time.sleep(0.7)
        t = time.time()
        results["rejected"] = step(srv, sid, 6)
        results["rejected_s"] = time.time() - t

    run_threads([streaming, joining, queued, rejected])
    assert results["stream"].status_code == 200 and results["stream"].text == "5" * 10
    assert results["joining"].status_code == 200 and results["joining"].text == "10" * 10
    assert results["queued"].status_code == 200 and results["queued"].text == "17" * 10
    assert results["rejected"].status_code == 429, results["rejected"].text
    assert "maxSequenceJobQueueSize 1" in results["rejected"].json()["message"]
    assert results["rejected_s"] < 0.5


def test_worker_kill_resumes_every_sequence(server_factory):
    """kill -9 of a worker while 16 sequences are open: after the respawn every sequence
    continues from its last acknowledged sum. A failed request is retried with the same
    x-request-id, so it counts once whether or not it had been committed before the crash."""
    yaml = dict(PLAIN, batchSize=4, minWorkers=2, maxWorkers=2, maxNumSequence=16)
    srv = server_factory(models=["stateful"], yaml={"stateful": yaml})
    wait_ready(srv)
    pids = srv.worker_pids()
    assert len(pids) == 2
    steps = 40
    progress = [0] * 16
    retried = [0]
    kill_at = threading.Event()

    def seq(k):
        s = requests.Session()
        rng = random.Random(k)
        sid, total = None, 0
        for i in range(steps):
            v = rng.randint(1, 100)
            rid = str(uuid.uuid4())
            headers = {"x-request-id": rid}
            if sid:
                headers[SEQ] = sid
            deadline = time.time() + 30
            while True:
                try:
                    r = s.post(srv.url("/predictions/stateful"), data=str(v), headers=headers,
                               timeout=10)
                    if r.status_code == 200:
                        break
                    assert r.status_code >= 500, r.text  # the crash, not a 4xx
                except requests.RequestException:
                    pass
                retried[0] += 1
                assert time.time() < deadline, srv.log()[-3000:]
                time.sleep(0.1)
            sid = r.headers[SEQ]
            total += v
            assert int(r.text) == total, (k, i, r.text, total)
            progress[k] = i + 1
            if i == steps // 2:
                kill_at.set()
            time.sleep(0.005)

    def killer():
        kill_at.wait(30)
        time.sleep(0.01)
        os.kill(pids[0], signal.SIGKILL)

    run_threads([killer] + [lambda k=k: seq(k) for k in range(16)])
    assert progress == [steps] * 16
    deadline = time.time() + 10
    while time.time() < deadline and (len(srv.worker_pids()) != 2 or pids[0] in srv.worker_pids()):
        time.sleep(0.1)
    now = srv.worker_pids()
    assert pids[0] not in now and len(now) == 2, (pids, now)


def test_sequence_closed_while_worker_down_drops_its_state(server_factory):
    """A sequence cancelled while its only worker is dead: the worker that comes up next gets the
    end event, so the sum the state store kept across the crash is dropped rather than left in
    LMDB for good (a restart of the id begins from 0 either way)."""
    yaml = dict(PLAIN, minWorkers=1, maxWorkers=1)
    srv = server_factory(models=["stateful"], yaml={"stateful": yaml})
    wait_ready(srv)
    sid, first = start_seq(srv, 5)
    assert first == "5"
    (pid,) = srv.worker_pids()
    os.kill(pid, signal.SIGKILL)
    deadline = time.time() + 10
    while "died" not in srv.log():  # the frontend saw the death; the new worker is not up yet
        assert time.time() < deadline, srv.log()[-3000:]
        time.sleep(0.005)
    r = step(srv, sid, 0, headers={CANCEL: "true"})
    assert r.status_code == 200 and "cancelled" in r.text, r.text
    loads = re.findall(r"\(pid \d+\) loaded model stateful", srv.log())
    assert len(loads) == 1, "the new worker was up before the cancel"
    wait_ready(srv)
    r = step(srv, sid, 4, headers={START: "true"})
    assert r.status_code == 200 and r.text == "4", (r.text, srv.log()[-3000:])
    assert f"sequence {sid} was closed while no worker was up: worker 9000 drops its state" \
        in srv.log(), srv.log()[-3000:]


def test_cancel_stops_a_running_stream(server_factory):
    """continuousBatching: an odd number streams its sum; a -1 sent meanwhile stops that
    stream, answers -1 with the cancel header, and the sequence is closed and its state gone."""
    yaml = {"handler": {"stream_steps": 400, "stream_delay_ms": 50}}
    srv = server_factory(models=["stateful"], yaml={"stateful": yaml})
    wait_ready(srv)
    sid, first = start_seq(srv, 2)
    other, _ = start_seq(srv, 10)
    assert first == "2"
    chunks = []
    first_chunk = threading.Event()
    res = {}

    def stream():
        with step(srv, sid, 3, stream=True) as r:
            res["stream_status"] = r.status_code
            for c in r.iter_content(chunk_size=None):
                chunks.append(c.decode())
                first_chunk.set()

    def cancel():
        assert first_chunk.wait(10)
        time.sleep(0.2)
        res["cancel"] = step(srv, sid, -1)
        res["cancel_done"] = time.time()

    run_threads([stream, cancel])
    assert res["stream_status"] == 200
    text = "".join(chunks)
    assert text and set(text) == {"5"}, text  # every chunk carried the sum 5
    assert len(text) < 400, text  # stopped early (the whole stream: 400 chunks, 20 s)
    c = res["cancel"]
    assert c.status_code == 200 and c.text == "-1" and c.headers.get(CANCEL) == "true", c.text
    # the sequence is closed for good...
    r = step(srv, sid, 4)
    assert r.status_code == 410 and "was cancelled" in r.json()["message"], r.text
    # ...an explicit restart of the id begins from 0 (the worker dropped the old sum)...
    r = step(srv, sid, 4, headers={START: "true"})
    assert r.status_code == 200 and r.text == "4", r.text
    # ...and the other sequence never noticed
    r = step(srv, other, 2)
    assert r.status_code == 200 and r.text == "12", r.text
    # the frontend's own cancel header closes a sequence as well
    r = step(srv, sid, 0, headers={CANCEL: "true"})
    assert r.status_code == 200 and "cancelled" in r.text, r.text
    assert step(srv, sid, 1).status_code == 410


def test_lstm_matches_torch_over_whole_sequence(server_factory):
    """20 steps through lstm_stateful (state carried by the server, several sequences sharing
    each forward) equal the same LSTM run over the whole sequence in torch within 1e-5."""
    torch = pytest.importorskip("torch")
    srv = server_factory(models=["lstm_stateful"], config={"worker_debug_headers": True},
                         yaml={"lstm_stateful": {"minWorkers": 1, "maxWorkers": 1,
                                                 "batchSize": 4, "maxBatchDelay": 20}})
    # the reference: the scripted module's weights in plain nn.LSTM / nn.Linear modules
    sd = torch.jit.load(os.path.join(BUILD, "models", "lstm_stateful", "model.pt")).state_dict()
    hidden, n_in = sd["lstm.weight_ih_l0"].shape[0] // 4, sd["lstm.weight_ih_l0"].shape[1]
    lstm = torch.nn.LSTM(n_in, hidden, batch_first=True)
    fc = torch.nn.Linear(hidden, sd["fc.weight"].shape[0])
    lstm.load_state_dict({k[5:]: v for k, v in sd.items() if k.startswith("lstm.")})
    fc.load_state_dict({k[3:]: v for k, v in sd.items() if k.startswith("fc.")})
    g = torch.Generator().manual_seed(11)
    xs = [torch.randn(20, 4, generator=g) for _ in range(4)]
    outs = [[] for _ in range(4)]
    deadline = time.time() + 60
    while True:
        r = srv.post("/predictions/lstm_stateful", json=[0, 0, 0, 0])
        if r.status_code == 200 or time.time() > deadline:
            break
        time.sleep(0.2)
    assert r.status_code == 200, r.text
    batches = []

    def seq(k):
        sid = None
        s = requests.Session()
        for t in range(20):
            h = {SEQ: sid} if sid else {}
            r = s.post(srv.url("/predictions/lstm_stateful"), json=xs[k][t].tolist(),
                       headers=h, timeout=30)
            assert r.status_code == 200, r.text
            sid = r.headers[SEQ]
            batches.append(int(r.headers.get("x-ts-worker-batch", "1")))
            outs[k].append(r.json())

    run_threads([lambda k=k: seq(k) for k in range(4)])
    with torch.no_grad():
        for k in range(4):
            full, _ = lstm(xs[k].unsqueeze(0))
            want = fc(full[0])
            got = torch.tensor(outs[k])
            assert got.shape == want.shape
            assert torch.allclose(got, want, atol=1e-5, rtol=0), (got - want).abs().max()
    assert max(batches) > 1


def test_describe_shows_sequence_keys(server_factory):
    srv = server_factory(models=["stateful"])
    d = srv.get("/models/stateful", api="management").json()[0]
    for k in ("sequenceBatching", "sequenceMaxIdleMSec", "sequenceTimeoutMSec", "maxSequenceJobQueueSize",
              "maxNumSequence", "continuousBatching"):
        assert k in d, (k, d)
    assert d["sequenceMaxIdleMSec"] == 30000 and d["maxSequenceJobQueueSize"] == 10
    assert d["continuousBatching"] is True
    assert d["sequenceBatching"] is True
    assert d["maxNumSequence"] == 8  # batchSize 4 x maxWorkers 2
    assert d["cacheCapacity"] > 0


@pytest.mark.smoke
def test_bad_sequence_ids_400_and_no_slot_leaked(server_factory):
    """A client-given id over 256 bytes (LMDB keys stop at 511) or with control characters is
    refused with 400 before it takes a sequence slot: with maxNumSequence 2, two good sequences
    still open after a hundred refusals."""
    yaml = dict(PLAIN, batchSize=1, minWorkers=1, maxWorkers=1, maxNumSequence=2)
    srv = server_factory(models=["stateful"], yaml={"stateful": yaml})
    wait_ready(srv)
    for i in range(50):
        r = step(srv, "x" * (512 + i), 1, headers={START: "true"})
        assert r.status_code == 400, r.text
        assert "longer than 256 bytes" in r.json()["message"]
        r = step(srv, f"bad id {i}", 1, headers={START: "true"})
        assert r.status_code == 400 and "printable" in r.json()["message"], r.text
    time.sleep(0.2)
    ids = []
    for _ in range(2):
        r = srv.post("/predictions/stateful", data="1", timeout=30)
        if r.status_code == 429:  # the readiness probe's sequence has not idled out yet
            time.sleep(1)
            r = srv.post("/predictions/stateful", data="1", timeout=30)
        assert r.status_code == 200, r.text
        ids.append(r.headers[SEQ])
    good = "y" * 256
    for sid in ids:
        assert step(srv, sid, 0).status_code == 200
    r = step(srv, good, 3, headers={START: "true"})
    assert r.status_code == 200 and r.headers[SEQ] == good, r.text
    assert step(srv, good, 0).status_code == 200
