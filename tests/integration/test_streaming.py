"""Streaming over HTTP: chunked replies and Server-Sent Events, continuous batching inside the
worker, cancellation when the client goes away, worker crashes mid-stream, several workers.

A raw-socket HTTP client reads the replies, so the tests see the exact bytes on the wire and the
time each chunk arrived. The char_lm texts are checked against a greedy decode that this file
runs itself with python3-torch on the model.pt inside model-store/char_lm.mar.

The char_lm handler reports worker counters as response headers: x-ts-worker-tokens (characters
generated), x-ts-worker-steps (batched decode forwards) and x-ts-worker-stepped (rows in them).
A probe request (max_new_tokens 1: one token, no forward) reads them before and after a test.
"""
import json
import os
import re
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
import zipfile

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from conftest import MODEL_STORE, start_server  # noqa: E402

DELAY_MS = 200
TOL_MS = 60

PROMPTS = ["The keeper", "The baker", "A model server", "When the first snow", "The river",
           "At night", "The school had", "On the north side", "The clockmaker", "In the village",
           "The stream of tokens", "The sea was", "Ships far out", "The wind", "Every evening",
           "The miller"]


# ---------------------------------------------------------------- a raw HTTP/1.1 client

class Stream:
    """One request on its own connection; the reply is read chunk by chunk with arrival times
    (seconds since the request was sent)."""

    def __init__(self, port, path, body=b"", headers=None, method="POST"):
        if isinstance(body, str):
            body = body.encode()
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=60)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        h = {"Host": f"127.0.0.1:{port}", "Content-Length": str(len(body))}
        h.update(headers or {})
        req = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in h.items())
        self.buf = b""
        self.t0 = time.monotonic()
        self.sock.sendall(req.encode() + b"\r\n" + body)
        head = self._read_until(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        self.status = int(lines[0].split()[1])
        self.raw_headers = [tuple(x.split(": ", 1)) for x in lines[1:] if x]
        self.headers = {k.lower(): v for k, v in self.raw_headers}
        self.chunked = self.headers.get("transfer-encoding", "").lower() == "chunked"
        self.done = False
        self.times = []
        self.chunks = []

    def _fill(self):
        d = self.sock.recv(65536)
        if not d:
            raise EOFError("connection closed")
        self.buf += d

    def _read_until(self, sep):
        while sep not in self.buf:
            self._fill()
        out, self.buf = self.buf.split(sep, 1)
        return out

    def _read_n(self, n):
        while len(self.buf) < n:
            self._fill()
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def next_chunk(self):
        """The next chunk's bytes, or None at the end of the reply."""
        if self.done:
            return None
        if not self.chunked:
            n = int(self.headers.get("content-length", "0"))
            data = self._read_n(n)
            self.done = True
            self.chunks.append(data)
            self.times.append(time.monotonic() - self.t0)
            return data
        size = int(self._read_until(b"\r\n").split(b";")[0], 16)
        data = self._read_n(size)
        assert self._read_n(2) == b"\r\n"
        if size == 0:
            self.done = True
            return None
        self.chunks.append(data)
        self.times.append(time.monotonic() - self.t0)
        return data

    def read_all(self):
        while self.next_chunk() is not None:
            pass
        return b"".join(self.chunks)

    def close(self):
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


def sse_events(raw):
    """Parses an SSE body into [(field dict)], checking the framing on the way."""
    assert raw.endswith(b"\n\n"), raw[-40:]
    events = []
    for block in raw[:-2].split(b"\n\n"):
        ev = {}
        for line in block.split(b"\n"):
            k, _, v = line.partition(b": ")
            ev.setdefault(k.decode(), []).append(v.decode())
        events.append(ev)
    return events


# ---------------------------------------------------------------- char_lm in python-torch

class Reference:
    def __init__(self):
        import torch
        self.torch = torch
        self.tmp = tempfile.mkdtemp(prefix="tsc-charlm-")
        with zipfile.ZipFile(os.path.join(MODEL_STORE, "char_lm.mar")) as z:
            z.extract("model.pt", self.tmp)
            z.extract("vocab.json", self.tmp)
        self.m = torch.jit.load(os.path.join(self.tmp, "model.pt"))
        meta = json.load(open(os.path.join(self.tmp, "vocab.json")))
        self.vocab, self.layers, self.hidden = meta["vocab"], meta["layers"], meta["hidden"]
        self.cache = {}

    def greedy(self, prompt, n):
        if (prompt, n) in self.cache:
            return self.cache[(prompt, n)]
        torch = self.torch
        unk = self.vocab.index(" ")
        ids = [self.vocab.index(c) if c in self.vocab else unk for c in prompt]
        out = []
        with torch.no_grad():
            h = torch.zeros(1, self.layers, self.hidden)
            logits, h = self.m(torch.tensor([ids]), h)
            for k in range(n):
                t = int(logits[0].argmax())
                out.append(self.vocab[t])
                if k + 1 < n:
                    logits, h = self.m(torch.tensor([[t]]), h)
        self.cache[(prompt, n)] = "".join(out)
        return self.cache[(prompt, n)]


@pytest.fixture(scope="module")
def ref():
    r = Reference()
    yield r
    shutil.rmtree(r.tmp, ignore_errors=True)


# ---------------------------------------------------------------- servers

@pytest.fixture(scope="module")
def server():
    """identity_text (delay 200 ms) and char_lm, one worker each, batchSize 8."""
    tmp = tempfile.mkdtemp(prefix="tsc-stream-")
    # worker_debug_headers: counters() reads the char_lm worker's x-ts-worker-* counters
    srv = start_server(tmp, models=["identity_text", "char_lm"], config={
        "worker_debug_headers": True}, yaml={
        "identity_text": {"batchSize": 8, "handler": {"delay_ms": DELAY_MS}},
        "char_lm": {"batchSize": 8, "minWorkers": 1, "maxWorkers": 1,
                    "handler": {"delay_ms": 0}},
    })
    srv.wait_ready("identity_text", body={"data": "warm", "headers": {"x-delay-ms": "0"}})
    srv.wait_ready("char_lm", body={"json": {"prompt": "a", "max_new_tokens": 2}})
    yield srv
    srv.stop()
    shutil.rmtree(tmp, ignore_errors=True)


def char_lm(srv, prompt, n, sse=False, delay_ms=None):
    h = {"Content-Type": "application/json"}
    if sse:
        h["Accept"] = "text/event-stream"
    if delay_ms is not None:
        h["x-delay-ms"] = str(delay_ms)
    return Stream(srv.ports["inference"], "/predictions/char_lm",
                  json.dumps({"prompt": prompt, "max_new_tokens": n}), h)


def counters(srv):
    """The char_lm worker's counters, read by a one-token request (adds 1 to tokens)."""
    s = char_lm(srv, "a", 1)
    s.read_all()
    s.close()
    assert s.status == 200
    return {k[len("x-ts-worker-"):]: int(v) for k, v in s.headers.items()
            if k.startswith("x-ts-worker-") and k != "x-ts-worker-batch"}


def text_of(s, sse):
    raw = s.read_all()
    if not sse:
        return raw.decode()
    return "".join("\n".join(ev["data"]) for ev in sse_events(raw))


# ---------------------------------------------------------------- identity_text timing

WORDS = "streaming is why people come to this project"


def timing_error(times, n):
    """None if the words were paced and streamed: word k (1-based) arrived no earlier than
    k x DELAY_MS - TOL_MS after the request (the server waits between words; a loaded client
    can only see them later), and the first one before the last one was due (n x DELAY_MS:
    streamed as they come, not sent at the end; a margin of (n - 1) x DELAY_MS that a busy
    machine's stalls do not eat)."""
    for k, t in enumerate(times[:n], 1):
        if t * 1000 < k * DELAY_MS - TOL_MS:
            return f"word {k} at {t * 1000:.0f} ms, before {k * DELAY_MS} - {TOL_MS}: {times}"
    if times and times[0] * 1000 >= n * DELAY_MS:
        return f"the first word at {times[0] * 1000:.0f} ms, when all {n} were due: {times}"
    return None


def on_time(run, n, attempts=2):
    """Runs run() -> arrival times until they are paced (timing_error). The bytes are checked
    strictly on every attempt by run() itself; only the clock gets a second chance."""
    errs = []
    for _ in range(attempts):
        err = timing_error(run(), n)
        if err is None:
            return
        errs.append(err)
    pytest.fail("; ".join(errs))


def test_http_chunks_one_word_each_on_time(server):
    words = WORDS.split()

    def run():
        s = Stream(server.ports["inference"], "/predictions/identity_text", WORDS,
                   {"Content-Type": "text/plain"})
        body = s.read_all()
        s.close()
        assert s.status == 200
        assert s.chunked
        assert s.headers["content-type"] == "text/plain"
        assert s.chunks == [w.encode() if i == 0 else b" " + w.encode()
                            for i, w in enumerate(words)]
        assert body.decode() == WORDS
        return s.times

    on_time(run, len(words))


def test_same_client_request_id_on_two_streams(server):
    """Two clients that send the same x-request-id at once each get their own stream: the id
    the worker matches frames by is the server's, not the client's."""
    import requests
    out = {}

    def go(key, text):
        r = requests.post(server.url("/predictions/identity_text"), data=text, stream=True,
                          timeout=30, headers={"x-request-id": "same-id", "x-delay-ms": "20"})
        assert r.headers["x-request-id"] == "same-id"
        out[key] = b"".join(r.iter_content(None)).decode()

    texts = {"a": "a1 a2 a3 a4 a5", "b": "b1 b2 b3 b4 b5"}
    ts = [threading.Thread(target=go, args=kv) for kv in texts.items()]
    [t.start() for t in ts]
    [t.join() for t in ts]
    assert out == texts


def test_sse_wire_format_and_timing(server):
    words = WORDS.split()
    expect = b"".join(b"id: %d\ndata: %s\n\n" % (i, (w if i == 0 else " " + w).encode())
                      for i, w in enumerate(words))

    def run():
        s = Stream(server.ports["inference"], "/predictions/identity_text", WORDS,
                   {"Content-Type": "text/plain", "Accept": "text/event-stream"})
        raw = s.read_all()
        s.close()
        assert s.status == 200
        assert s.chunked
        assert s.headers["content-type"] == "text/event-stream"
        assert s.headers["cache-control"] == "no-cache"
        assert s.headers["x-accel-buffering"] == "no"
        assert raw == expect
        assert len(s.chunks) == len(words)  # one event per chunk
        assert "".join(ev["data"][0] for ev in sse_events(raw)) == WORDS
        return s.times

    on_time(run, len(words))


@pytest.mark.smoke
def test_keep_alive_connection_after_stream(server):
    """A finished stream leaves the connection usable for the next request."""
    sock = socket.create_connection(("127.0.0.1", server.ports["inference"]), timeout=10)
    for _ in range(2):
        sock.sendall(b"POST /predictions/identity_text HTTP/1.1\r\nHost: x\r\n"
                     b"x-delay-ms: 0\r\nContent-Length: 7\r\n\r\nab cd e")
        data = b""
        while not data.endswith(b"0\r\n\r\n"):
            d = sock.recv(65536)
            assert d, "connection closed after a stream"
            data += d
        assert b"Transfer-Encoding: chunked" in data and b"\r\n3\r\n cd\r\n" in data
    sock.close()


# ---------------------------------------------------------------- char_lm output

@pytest.mark.smoke
def test_char_lm_matches_torch_greedy_decode(server, ref):
    for prompt, sse in (("The keeper", False), ("The baker", True), ("", False)):
        s = char_lm(server, prompt, 80, sse=sse)
        text = text_of(s, sse)
        s.close()
        assert s.status == 200
        # one character per partial result (+ nothing for the empty final frame)
        if not sse:
            assert all(len(c) == 1 for c in s.chunks)
        assert len(text) == 80
        assert text == ref.greedy(prompt if prompt else "\n", 80), prompt


def test_char_lm_bad_request(server):
    r = server.post("/predictions/char_lm", json={"prompt": 3})
    assert r.status_code == 400
    assert "$.prompt" in r.json()["message"]
    r = server.post("/predictions/char_lm", json={"prompt": "x", "max_new_tokens": -1})
    assert r.status_code == 400
    r = server.post("/predictions/char_lm", json={"prompt": "a" * 9000})
    assert r.status_code == 400 and "max_prompt_chars" in r.json()["message"]
    r = server.post("/predictions/char_lm?max_new_tokens=5", data="The keeper",
                    headers={"Content-Type": "text/plain"})
    assert r.status_code == 200 and len(r.text) == 5


@pytest.mark.smoke
@pytest.mark.parametrize("sse", [False, True])
def test_handler_error_mid_stream(server, ref, sse):
    """The handler fails after 5 characters (fail_after): the 200 is gone, so the error comes
    as an SSE `event: error`, or as TorchServe's JSON error as the last plain chunk."""
    h = {"Content-Type": "application/json"}
    if sse:
        h["Accept"] = "text/event-stream"
    s = Stream(server.ports["inference"], "/predictions/char_lm",
               json.dumps({"prompt": "The keeper", "max_new_tokens": 50, "fail_after": 5}), h)
    raw = s.read_all()
    s.close()
    assert s.status == 200
    good = ref.greedy("The keeper", 5)
    if sse:
        events = sse_events(raw)
        assert [ev["data"][0] for ev in events[:5]] == list(good)
        assert events[5]["event"] == ["error"] and "id" not in events[5]
        err = json.loads("\n".join(events[5]["data"]))
        assert len(events) == 6
    else:
        assert [c.decode() for c in s.chunks[:5]] == list(good)
        err = json.loads(b"".join(s.chunks[5:]))
    assert err["code"] == 500 and "fail_after" in err["message"], err


# ---------------------------------------------------------------- continuous batching

def run_concurrent(fn, args):
    out = [None] * len(args)
    errs = []

    def one(i):
        try:
            out[i] = fn(*args[i])
        except Exception as e:  # noqa: BLE001 - reported below
            errs.append(e)

    ts = [threading.Thread(target=one, args=(i,)) for i in range(len(args))]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    assert not errs, errs
    return out


def test_eight_concurrent_streams_share_steps(server, ref):
    prompts = PROMPTS[:8]
    n = 60

    def one(prompt, delay):
        s = char_lm(server, prompt, n, delay_ms=delay)
        t = text_of(s, False)
        s.close()
        assert s.status == 200
        return t

    c0 = counters(server)
    seq = [one(p, 0) for p in prompts]
    c1 = counters(server)
    conc = run_concurrent(one, [(p, 5) for p in prompts])
    c2 = counters(server)

    assert conc == seq
    assert seq == [ref.greedy(p, n) for p in prompts]
    # sequential: every decode forward holds one stream
    assert c1["steps"] - c0["steps"] == 8 * (n - 1)
    assert c1["stepped"] - c0["stepped"] == 8 * (n - 1)
    # concurrent: the same rows in far fewer forwards
    rows = c2["stepped"] - c1["stepped"]
    steps = c2["steps"] - c1["steps"]
    assert rows == 8 * (n - 1)
    assert rows / steps >= 4, f"mean batch {rows / steps:.2f} over {steps} steps"
    assert c2["tokens"] - c1["tokens"] == 8 * n + 1


def test_request_joins_a_running_batch(server, ref):
    c0 = counters(server)
    a = char_lm(server, "The keeper", 100, delay_ms=10)
    for _ in range(20):
        a.next_chunk()
    b = char_lm(server, "The baker", 30, delay_ms=10)
    tb = text_of(b, False)
    ta = text_of(a, False)
    a.close()
    b.close()
    c1 = counters(server)
    assert ta == ref.greedy("The keeper", 100)
    assert tb == ref.greedy("The baker", 30)
    steps = c1["steps"] - c0["steps"]
    rows = c1["stepped"] - c0["stepped"]
    assert rows == 99 + 29
    # each step with both streams adds one row over the step count: b ran inside a's steps
    # (which is also how b got its first character while a was still streaming; no clock)
    assert rows - steps >= 25, f"{rows} rows in {steps} steps"


# ---------------------------------------------------------------- cancellation

@pytest.mark.parametrize("sse", [False, True])
def test_disconnect_stops_generation(server, ref, sse):
    step_ms = 10
    c0 = counters(server)
    s = char_lm(server, "The keeper", 2000, sse=sse, delay_ms=step_ms)
    for _ in range(50):
        assert s.next_chunk() is not None
    s.close()
    time.sleep(0.5)  # a runaway stream would make 50 more tokens meanwhile
    c1 = counters(server)
    generated = c1["tokens"] - c0["tokens"] - 1
    # 50 read, + what was in flight when the client closed (one step), + 50 ms of steps
    assert 50 <= generated <= 50 + 1 + 50 // step_ms + 1, generated
    # and the worker goes on serving: the probe above got its answer; one more full request
    s = char_lm(server, "The keeper", 10)
    assert s.read_all().decode() == ref.greedy("The keeper", 10)
    s.close()
    assert "client closed the connection" in server.log()


def test_queued_request_is_dropped_when_client_goes_away(server):
    n, step_ms = 30, 20
    c0 = counters(server)
    running = [char_lm(server, p, n, delay_ms=step_ms) for p in PROMPTS[:8]]
    for s in running:  # all 8 slots of the worker are taken
        assert s.next_chunk() is not None
    queued = char_lm_nowait(server, "The miller", 1000, step_ms)
    time.sleep(0.2)
    queued.settimeout(0)
    with pytest.raises(BlockingIOError):
        queued.recv(1)  # still waiting in the queue: no reply yet
    queued.close()
    for s in running:
        s.read_all()
        s.close()
    c1 = counters(server)
    # not a single token for the dropped one
    assert c1["tokens"] - c0["tokens"] == 8 * n + 1, server.log()[-6000:]


def char_lm_nowait(srv, prompt, n, delay_ms):
    body = json.dumps({"prompt": prompt, "max_new_tokens": n}).encode()
    sock = socket.create_connection(("127.0.0.1", srv.ports["inference"]), timeout=10)
    sock.sendall(b"POST /predictions/char_lm HTTP/1.1\r\nHost: x\r\nContent-Type: "
                 b"application/json\r\nx-delay-ms: %d\r\nContent-Length: %d\r\n\r\n%s"
                 % (delay_ms, len(body), body))
    return sock


# ---------------------------------------------------------------- worker crash

def char_lm_worker_pid(srv):
    pids = re.findall(r"\(pid (\d+)\) loaded model char_lm", srv.log())
    assert pids, srv.log()[-2000:]
    return int(pids[-1])


def test_worker_killed_mid_stream_gives_sse_error(server, ref):
    s = char_lm(server, "The keeper", 1000, sse=True, delay_ms=10)
    for _ in range(10):
        assert s.next_chunk() is not None
    pid = char_lm_worker_pid(server)
    os.kill(pid, signal.SIGKILL)
    raw = s.read_all()
    s.close()
    events = sse_events(b"".join(s.chunks))
    assert raw.endswith(b"\n\n")
    last = events[-1]
    assert last.get("event") == ["error"], events[-3:]
    err = json.loads("\n".join(last["data"]))
    assert err["code"] == 500 and "Worker died" in err["message"], err
    assert all("id" in ev for ev in events[:-1])
    # a new worker takes over and later requests succeed
    server.wait_ready("char_lm", body={"json": {"prompt": "a", "max_new_tokens": 2}})
    assert char_lm_worker_pid(server) != pid
    s = char_lm(server, "The baker", 40, sse=True)
    assert text_of(s, True) == ref.greedy("The baker", 40)
    s.close()


# ---------------------------------------------------------------- many workers

def test_two_workers_sixteen_clients(ref):
    tmp = tempfile.mkdtemp(prefix="tsc-stream2-")
    srv = start_server(tmp, models=["char_lm", "identity_text"], yaml={
        "char_lm": {"batchSize": 8, "minWorkers": 2, "maxWorkers": 2},
        "identity_text": {"batchSize": 8, "minWorkers": 2, "maxWorkers": 2,
                          "handler": {"delay_ms": 20}},
    })
    try:
        srv.wait_ready("char_lm", body={"json": {"prompt": "a", "max_new_tokens": 2}})
        srv.wait_ready("identity_text", body={"data": "warm", "headers": {"x-delay-ms": "0"}})
        # wait for the second worker of each model too
        deadline = time.time() + 60
        while len(re.findall(r"loaded model (char_lm|identity_text)", srv.log())) < 8 and \
                time.time() < deadline:
            time.sleep(0.1)
        n = 40

        def lm(i):
            s = char_lm(srv, PROMPTS[i], n, sse=i % 2 == 1, delay_ms=10)
            t = text_of(s, i % 2 == 1)
            s.close()
            return s.status, t, s.t0 + s.times[0], s.t0 + s.times[-1]

        res = run_concurrent(lm, [(i,) for i in range(16)])
        for i, (status, text, _, _) in enumerate(res):
            assert status == 200
            assert text == ref.greedy(PROMPTS[i], n), i

        # 16 streams at once on 2 x 8 slots, shown without a clock: 16 streams of 200 s each
        # are opened one after the other, each one's first word read before the next is
        # opened, while the others still run; with fewer slots the 9th or 17th would get
        # nothing until a stream ended, and its socket's 60 s timeout would fail the test
        long = " ".join(["w"] * 10000)
        streams = []
        try:
            for i in range(16):
                st = Stream(srv.ports["inference"], "/predictions/identity_text", long,
                            {"Accept": "text/event-stream"} if i % 2 else {})
                assert st.status == 200 and st.next_chunk(), i
                streams.append(st)
        finally:
            for st in streams:
                st.close()

        def it(i):
            words = " ".join(f"w{i}x{k}" for k in range(12))
            s = Stream(srv.ports["inference"], "/predictions/identity_text", words,
                       {"Accept": "text/event-stream"} if i % 2 else {})
            t = text_of(s, i % 2 == 1)
            s.close()
            return s.status, t, words

        for status, text, words in run_concurrent(it, [(i,) for i in range(16)]):
            assert status == 200 and text == words
    finally:
        srv.stop()
        shutil.rmtree(tmp, ignore_errors=True)


# ---------------------------------------------------------------- backpressure

def _raw_stream_request(port, body, rcvbuf=4096):
    """A streaming request from a client with a small receive buffer that reads nothing yet."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.connect(("127.0.0.1", port))
    s.sendall(b"POST /predictions/identity_text HTTP/1.1\r\nHost: x\r\nx-delay-ms: 0\r\n"
              b"Content-Type: text/plain\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    return s


def _read_all(s, timeout=60):
    s.settimeout(timeout)
    out = bytearray()
    while True:
        try:
            b = s.recv(1 << 20)
        except (ConnectionResetError, socket.timeout):
            break
        if not b:
            break
        out += b
        if out.endswith(b"\r\n0\r\n\r\n"):
            break
    return bytes(out)


def _dechunk(raw):
    head, _, rest = raw.partition(b"\r\n\r\n")
    out = bytearray()
    while rest:
        line, _, rest = rest.partition(b"\r\n")
        n = int(line, 16)
        if n == 0:
            break
        out += rest[:n]
        rest = rest[n + 2:]
    return head, bytes(out)


def test_slow_reader_is_paused_then_resumed_and_others_go_on(tmp_path):
    """A client that stops reading its stream gets its request paused on the worker once
    stream_buffer_size is buffered (other requests on that worker go on); when it reads again
    the request resumes and the whole stream arrives in order; one that never reads is cut off
    after stream_stall_timeout."""
    srv = start_server(str(tmp_path), models=["identity_text"],
                       config={"stream_buffer_size": "65536", "stream_stall_timeout": "3",
                               "disable_token_authorization": "true"},
                       yaml={"identity_text": {"batchSize": 8, "handler": {"delay_ms": 0}}})
    try:
        srv.wait_ready("identity_text", body={"data": "warm", "headers": {"x-delay-ms": "0"}})
        words = [(b"%05d" % i) * 200 for i in range(4000)]  # 4 MB of output, 1000-byte chunks
        body = b" ".join(words)
        slow = _raw_stream_request(srv.ports["inference"], body)
        deadline = time.time() + 20
        while "paused on worker" not in srv.log() and time.time() < deadline:
            time.sleep(0.1)
        assert "paused on worker" in srv.log()
        # the worker serves others meanwhile: answered before the slow stream was cut off by
        # the stall timeout (which the log would say), so not because it was
        r = srv.post("/predictions/identity_text", data="still streaming",
                     headers={"x-delay-ms": "0"})
        assert r.status_code == 200 and r.text.split() == ["still", "streaming"]
        assert "stream_stall_timeout" not in srv.log(), srv.log()[-3000:]
        # the frontend holds about stream_buffer_size, not the whole stream
        rss = int(open(f"/proc/{srv.pid}/status").read().split("VmRSS:")[1].split()[0])
        assert rss < 60 * 1024, f"frontend RSS {rss} kB while a stream is paused"
        # it reads again (before the stall timeout): resumed, everything arrives, in order
        time.sleep(1)
        head, data = _dechunk(_read_all(slow))
        slow.close()
        assert head.startswith(b"HTTP/1.1 200"), head[:100]
        assert data.split() == words
        assert "resumed on worker" in srv.log()

        # a client that never reads again is cut off after stream_stall_timeout
        dead = _raw_stream_request(srv.ports["inference"], body)
        deadline = time.time() + 20
        while "stream_stall_timeout" not in srv.log() and time.time() < deadline:
            time.sleep(0.2)
        assert "stream_stall_timeout" in srv.log()
        dead.close()
        r = srv.post("/predictions/identity_text", data="after", headers={"x-delay-ms": "0"})
        assert r.status_code == 200 and r.text.split() == ["after"]
    finally:
        srv.stop()
