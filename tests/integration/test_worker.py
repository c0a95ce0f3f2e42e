"""torchserve-c-worker driven directly over its fd-3 socket, as the frontend drives it.

The model directories are built in a temp dir (build.py + MANIFEST.json + model-config.yaml), so
these tests need the worker binary and python3-torch, not the archiver or the frontend.
"""
import json
import os
import select
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import otf  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("TS_BUILD", "build")
WORKER = os.path.join(ROOT, BUILD, "bin", "torchserve-c-worker")
MODELS = os.path.join(ROOT, "scripts", "models")


class Worker:
    """One worker process with our end of its socketpair."""

    def __init__(self, args=(), env=None):
        self.sock, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        cenv = dict(os.environ)
        cenv["OMP_NUM_THREADS"] = "1"
        if env:
            cenv.update(env)
        supp = os.path.join(ROOT, "tests", "lsan.supp")
        if os.path.exists(supp):
            cenv.setdefault("LSAN_OPTIONS", "suppressions=%s:print_suppressions=0" % supp)
        fd = child.fileno()

        def put_on_fd3():
            # dup2 clears close-on-exec on fd 3 (unless fd is 3 already)
            if fd == 3:
                os.set_inheritable(3, True)
            else:
                os.dup2(fd, 3)

        # close_fds=False: pass_fds would close fd 3 after preexec_fn; Python's own fds are
        # non-inheritable anyway
        # stderr to a file, not a pipe: a debug-logging worker would block on a full pipe
        self.errfile = tempfile.TemporaryFile()
        self.proc = subprocess.Popen([WORKER] + list(args), close_fds=False,
                                     preexec_fn=put_on_fd3, env=cenv, stderr=self.errfile)
        child.close()
        self.buf = bytearray()
        self.off = 0

    def send(self, data):
        self.sock.sendall(data)

    def recv(self, timeout=30.0):
        """The next response frame (otf.Response)."""
        deadline = time.monotonic() + timeout
        while True:
            resp, n = otf.decode_response(self.buf, self.off)
            if resp is not None:
                self.off += n
                if self.off > (1 << 20):
                    del self.buf[:self.off]
                    self.off = 0
                return resp
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no frame from the worker within %.1fs" % timeout)
            r, _, _ = select.select([self.sock], [], [], left)
            if r:
                chunk = self.sock.recv(1 << 20)
                if not chunk:
                    raise EOFError("worker closed the socket")
                self.buf += chunk

    def quiet_for(self, seconds):
        """True if no byte arrives for `seconds`."""
        r, _, _ = select.select([self.sock], [], [], seconds)
        return not r and self.off == len(self.buf)

    def load(self, name, path, batch_size=1, handler=""):
        self.send(otf.encode_load(name, path, batch_size, handler))
        return self.recv(timeout=120)

    def close(self):
        try:
            self.sock.close()
        finally:
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.errfile.seek(0)
        err = self.errfile.read().decode(errors="replace")
        self.errfile.close()
        # under `make SANITIZE=...` a sanitizer report is a failure even if the protocol was fine
        for marker in ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:"):
            assert marker not in err, err
        return err


def make_model_dir(tmp, name, handler, serialized=None):
    d = os.path.join(str(tmp), name)
    os.makedirs(os.path.join(d, "MAR-INF"), exist_ok=True)
    build = os.path.join(MODELS, name, "build.py")
    if os.path.exists(build):
        subprocess.run(["/usr/bin/python3", build, d], check=True)
    shutil.copy(os.path.join(MODELS, name, "model-config.yaml"), d)
    model = {"modelName": name, "modelVersion": "1.0", "handler": handler,
             "configFile": "model-config.yaml"}
    if serialized:
        model["serializedFile"] = serialized
    with open(os.path.join(d, "MAR-INF", "MANIFEST.json"), "w") as f:
        json.dump({"runtime": "LSP", "model": model, "archiverVersion": "test"}, f)
    return d


@pytest.fixture(scope="module")
def mlp_dir(tmp_path_factory):
    return make_model_dir(tmp_path_factory.mktemp("models"), "mlp", "torchscript", "model.pt")


@pytest.fixture(scope="module")
def text_dir(tmp_path_factory):
    return make_model_dir(tmp_path_factory.mktemp("models"), "identity_text", "identity_text")


@pytest.fixture(scope="module")
def ref_model(mlp_dir):
    import torch
    return torch.jit.load(os.path.join(mlp_dir, "model.pt")).eval()


def reference(ref_model, x):
    import torch
    with torch.no_grad():
        return ref_model(torch.tensor(x, dtype=torch.float32)).tolist()


def json_req(rid, data, headers=None):
    h = {"Content-Type": "application/json"}
    h.update(headers or {})
    return (rid, h, [("body", "application/json", json.dumps({"data": data}))])


def assert_close(got, want, tol=1e-5):
    import numpy as np
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape
    assert np.max(np.abs(got - want)) <= tol, (got, want)


# what every load reply ends with: the worker's libtorch and the CUDA devices it sees (this host
# has none), which the frontend logs at start-up
RUNTIME = " torch=%s cuda=0" % __import__("torch").__version__.split("+")[0].split("a")[0]


def rand_rows(n, seed):
    import random
    rnd = random.Random(seed)
    return [[rnd.uniform(-2, 2) for _ in range(64)] for _ in range(n)]


@pytest.mark.smoke
def test_mlp_batch1_matches_torch(mlp_dir, ref_model):
    w = Worker(["--log-level", "debug"])
    try:
        r = w.load("mlp", mlp_dir, batch_size=1)
        assert (r.code, r.msg, r.preds) == (200, "loaded model mlp" + RUNTIME, [])
        for i, row in enumerate(rand_rows(3, 1)):
            w.send(otf.encode_infer([json_req("r%d" % i, row)]))
            resp = w.recv()
            assert resp.code == 200 and resp.msg == "Prediction success"
            (p,) = resp.preds
            assert (p.req_id, p.status, p.ctype) == ("r%d" % i, 200, "application/json")
            assert p.header("ts_stream_next") is None
            assert p.header("x-ts-worker-batch") == "1"
            # the step's HandlerTime and PredictionTime: 16 fixed bytes (common/otf.h)
            handle_us, predict_us = struct.unpack("!qq", p.header("ts_worker_step"))
            assert 0 < handle_us <= predict_us < 60_000_000
            assert handle_us >= int(p.header("x-ts-worker-forward-us"))
            assert p.header("ts_worker_metrics") is None  # the mlp reports nothing of its own
            assert_close(json.loads(p.body), reference(ref_model, row))
        # several samples in one request -> a list of rows
        rows = rand_rows(4, 2)
        w.send(otf.encode_infer([json_req("multi", rows)]))
        (p,) = w.recv().preds
        assert_close(json.loads(p.body), reference(ref_model, rows))
    finally:
        w.close()


@pytest.mark.smoke
def test_mlp_batch8_one_forward(mlp_dir, ref_model):
    w = Worker(["--log-level", "debug"])
    try:
        assert w.load("mlp", mlp_dir, batch_size=8).code == 200
        rows = rand_rows(8, 3)
        w.send(otf.encode_infer([json_req("b%d" % i, rows[i]) for i in range(8)]))
        resp = w.recv()
        assert resp.code == 200
        assert [p.req_id for p in resp.preds] == ["b%d" % i for i in range(8)]
        # one step: its times travel with its first request only
        assert [p.header("ts_worker_step") is not None for p in resp.preds] == [True] + [False] * 7
        for i, p in enumerate(resp.preds):
            assert p.status == 200
            assert p.header("x-ts-worker-batch") == "8"
            assert_close(json.loads(p.body), reference(ref_model, rows[i]))
    finally:
        err = w.close()
    # one forward over the 8 rows, not 8 forwards
    forwards = [ln for ln in err.splitlines() if "forward: " in ln and "row(s)" in ln]
    assert len(forwards) == 1 and "forward: 8 row(s)" in forwards[0], err


def test_mlp_raw_float32(mlp_dir, ref_model):
    import struct
    w = Worker()
    try:
        assert w.load("mlp", mlp_dir, batch_size=4).code == 200
        rows = rand_rows(2, 4)
        raw = b"".join(struct.pack("<64f", *r) for r in rows)
        one = struct.pack("<64f", *rows[0])
        w.send(otf.encode_infer([
            ("raw2", {"X-Shape": "2,64"}, [("body", "application/octet-stream", raw)]),
            ("raw1", {}, [("body", "application/octet-stream", one)]),
        ]))
        preds = {p.req_id: p for p in w.recv().preds}
        assert_close(json.loads(preds["raw2"].body), reference(ref_model, rows))
        assert_close(json.loads(preds["raw1"].body), reference(ref_model, rows[0]))
    finally:
        w.close()


@pytest.mark.smoke
def test_bad_requests_in_a_batch(mlp_dir, ref_model):
    w = Worker()
    try:
        assert w.load("mlp", mlp_dir, batch_size=8).code == 200
        rows = rand_rows(2, 5)
        bad_type = list(rows[0])
        bad_type[2] = "x"
        w.send(otf.encode_infer([
            json_req("good0", rows[0]),
            json_req("shape", [1.0, 2.0, 3.0]),
            json_req("type", bad_type),
            ("syntax", {}, [("body", "application/json", b'{"data": [1, 2,, 3]}')]),
            ("empty", {}, [("body", "application/json", b"")]),
            json_req("good1", rows[1]),
        ]))
        preds = {p.req_id: p for p in w.recv().preds}
        assert len(preds) == 6
        for rid, i in (("good0", 0), ("good1", 1)):
            assert preds[rid].status == 200
            assert_close(json.loads(preds[rid].body), reference(ref_model, rows[i]))
        want = {
            "shape": "input shape [3] does not match the model input [64]",
            "type": "data[2]: expected a number, got string",
            "empty": "empty body",
        }
        for rid, msg in want.items():
            p = preds[rid]
            assert p.status == 400 and p.ctype == "application/json"
            assert json.loads(p.body) == {"code": 400, "type": "BadRequestException",
                                          "message": msg}
        err = json.loads(preds["syntax"].body)
        assert preds["syntax"].status == 400
        assert err["message"].startswith("malformed JSON at line 1 column "), err
    finally:
        w.close()


def test_forward_error_is_500(tmp_path):
    import torch

    class Two(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x @ torch.ones(3, 2)

    d = tmp_path / "m"
    (d / "MAR-INF").mkdir(parents=True)
    torch.jit.script(Two()).save(str(d / "m.pt"))
    (d / "MAR-INF" / "MANIFEST.json").write_text(json.dumps(
        {"model": {"modelName": "m", "serializedFile": "m.pt", "handler": "torchscript"}}))
    w = Worker()
    try:
        assert w.load("m", str(d)).code == 200
        w.send(otf.encode_infer([json_req("ok", [[1, 2, 3]]), json_req("bad", [[1, 2]])]))
        preds = {p.req_id: p for p in w.recv().preds}
        assert preds["ok"].status == 200 and json.loads(preds["ok"].body) == [[6.0, 6.0]]
        # the worker was loaded with batch size 1: "bad" runs in its own step
        if "bad" not in preds:
            preds = {p.req_id: p for p in w.recv().preds}
        body = json.loads(preds["bad"].body)
        assert preds["bad"].status == 500 and body["code"] == 500
        assert "shapes cannot be multiplied" in body["message"], body
        assert "\n" not in body["message"]
    finally:
        w.close()


def collect_stream(w, ids, timeout=30):
    """{id: [predictions...]} until every id got its final (ts_stream_next false or absent)."""
    got = {i: [] for i in ids}
    done = set()
    frames = []
    while done != set(ids):
        resp = w.recv(timeout=timeout)
        assert resp.code == 200
        frames.append(resp)
        seen = set()
        for p in resp.preds:
            assert p.req_id not in seen, "two predictions for one request in a frame"
            seen.add(p.req_id)
            assert p.req_id not in done
            got[p.req_id].append(p)
            if p.header("ts_stream_next") != "true":
                done.add(p.req_id)
    return got, frames


@pytest.mark.smoke
def test_identity_text_streams_words(text_dir):
    w = Worker()
    try:
        r = w.load("identity_text", text_dir, batch_size=8)
        assert (r.code, r.msg) == (200, "loaded model identity_text continuous=1" + RUNTIME)
        text = "the quick brown fox"
        t0 = time.monotonic()
        w.send(otf.encode_infer([("s1", {"x-delay-ms": "50"}, [("body", "text/plain", text)])]))
        got, _ = collect_stream(w, ["s1"])
        elapsed = time.monotonic() - t0
        preds = got["s1"]
        assert [p.header("ts_stream_next") for p in preds] == ["true"] * 4 + ["false"]
        assert b"".join(p.body for p in preds[:-1]).decode() == text
        assert preds[-1].body == b""
        assert all(p.ctype == "text/plain" and p.status == 200 for p in preds)
        assert preds[3].header("x-ts-worker-tokens") == "4"
        assert elapsed >= 4 * 0.05
    finally:
        w.close()


def test_identity_text_default_delay_from_yaml(text_dir):
    w = Worker()
    try:
        assert w.load("identity_text", text_dir, batch_size=8).code == 200
        t0 = time.monotonic()
        w.send(otf.encode_infer([("d", {}, [("body", "text/plain", "a b")])]))
        first = w.recv()
        t_first = time.monotonic() - t0
        assert first.preds[0].body == b"a"
        assert 0.45 <= t_first < 2.0, t_first  # handler.delay_ms: 500
    finally:
        w.close()


def test_identity_text_continuous_batching(text_dir):
    w = Worker()
    try:
        assert w.load("identity_text", text_dir, batch_size=8).code == 200
        # no delay: a is due at every step. Its frames outgrow the socket buffer, so it cannot
        # finish before we read, and b is sent while a streams.
        h = {"x-delay-ms": "0"}
        text = " ".join("w%d" % i for i in range(5000))
        w.send(otf.encode_infer([("a", h, [("body", "text/plain", text)])]))
        first = w.recv()
        assert first.preds[0].req_id == "a" and first.preds[0].body == b"w0"
        w.send(otf.encode_infer([("b", h, [("body", "text/plain", "x y z")])]))
        got, frames = collect_stream(w, ["a", "b"])
        assert b"".join(p.body for p in got["b"]).decode() == "x y z"
        assert (b"w0" + b"".join(p.body for p in got["a"])).decode() == text
        # b joined a's steps: every b frame came from a step of 2
        assert {p.header("x-ts-worker-batch") for p in got["b"]} == {"2"}
    finally:
        w.close()


@pytest.mark.smoke
def test_cancel_stops_a_stream(text_dir):
    w = Worker()
    try:
        assert w.load("identity_text", text_dir, batch_size=8).code == 200
        words = " ".join("w%d" % i for i in range(50))
        w.send(otf.encode_infer([("c", {"x-delay-ms": "30"}, [("body", "text/plain", words)]),
                                 ("k", {"x-delay-ms": "30"}, [("body", "text/plain", "p q r")])]))
        first = w.recv()
        assert {p.req_id for p in first.preds} == {"c", "k"}
        w.send(otf.encode_cancel(["c"]))
        # k finishes; c's frames stop (at most one in flight when the cancel was read)
        got, _ = collect_stream(w, ["k"])
        late = 0
        while not w.quiet_for(0.3):
            resp = w.recv()
            late += sum(1 for p in resp.preds if p.req_id == "c")
        assert late <= 1
        # the worker is still healthy
        w.send(otf.encode_infer([("after", {"x-delay-ms": "0"}, [("body", "text/plain", "ok")])]))
        got, _ = collect_stream(w, ["after"])
        assert got["after"][0].body == b"ok"
    finally:
        w.close()


def test_cancel_pending_request_sends_nothing(text_dir):
    w = Worker()
    try:
        assert w.load("identity_text", text_dir, batch_size=8).code == 200
        # "p" is new and in the same read as its cancel: dropped before its first step
        w.send(otf.encode_infer([("p", {"x-delay-ms": "0"}, [("body", "text/plain", "a b")])])
               + otf.encode_cancel(["p"]))
        assert w.quiet_for(0.5)
    finally:
        w.close()


@pytest.mark.smoke
def test_load_failure_bad_handler(mlp_dir):
    w = Worker()
    r = w.load("mlp", mlp_dir, handler="no_such_handler")
    assert r.code == 500 and "no_such_handler" in r.msg and r.preds == []
    w.close()
    assert w.proc.returncode == 2


def test_load_failure_missing_model_file(tmp_path):
    d = tmp_path / "m"
    (d / "MAR-INF").mkdir(parents=True)
    (d / "MAR-INF" / "MANIFEST.json").write_text(json.dumps(
        {"model": {"modelName": "m", "serializedFile": "missing.pt", "handler": "torchscript"}}))
    w = Worker()
    r = w.load("m", str(d))
    assert r.code == 500 and "missing.pt" in r.msg
    w.close()
    assert w.proc.returncode == 2


def test_eof_exits_zero(mlp_dir):
    w = Worker()
    assert w.load("mlp", mlp_dir).code == 200
    w.close()
    assert w.proc.returncode == 0


# A handler shipped as a shared library: loops inside one handle call, streaming with ts_flush()
# and polling ts_is_cancelled(), as a generation loop that owns its decoding would.
LOOP_HANDLER_C = r"""
#include <stdio.h>
#include <time.h>
#include "handler.h"

static int init(struct ts_ctx *ctx, void **state) { (void)ctx; *state = NULL; return 0; }

static void handle(void *state, struct ts_ctx *ctx, size_t n)
{
    (void)state;
    for (size_t i = 0; i < n; i++) {
        int k;
        for (k = 0; k < 200 && !ts_is_cancelled(ctx, i); k++) {
            char s[16];
            int len = snprintf(s, sizeof s, "%d;", k);
            ts_send_intermediate_response(ctx, i, s, (size_t)len);
            ts_flush(ctx);
            struct timespec ts = {0, 10 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
        ts_counter_add(ctx, "loops", k);
        ts_set_response(ctx, i, "done", 4);
    }
}

static const struct ts_handler h = {ABI, "loop", 0, init, handle, NULL, NULL};
const struct ts_handler *SYMBOL(void) { return &h; }
"""


def build_handler_lib(tmp, abi="TS_HANDLER_ABI_VERSION", symbol="ts_handler_v1"):
    src = os.path.join(str(tmp), "loop.c")
    with open(src, "w") as f:
        f.write(LOOP_HANDLER_C)
    lib = os.path.join(str(tmp), "libloop.so")
    subprocess.run(["gcc", "-shared", "-fPIC", "-O1", "-Wall", "-Werror",
                    "-I", os.path.join(ROOT, "backend"), "-DABI=" + abi, "-DSYMBOL=" + symbol,
                    "-o", lib, src], check=True)
    os.makedirs(os.path.join(str(tmp), "MAR-INF"), exist_ok=True)
    with open(os.path.join(str(tmp), "MAR-INF", "MANIFEST.json"), "w") as f:
        json.dump({"model": {"modelName": "loop", "handler": "libloop.so"}}, f)
    return str(tmp)


def test_library_handler_cancel_during_call(tmp_path):
    d = build_handler_lib(tmp_path, symbol="my_handler")
    w = Worker()
    try:
        r = w.load("loop", d, handler="libloop.so:my_handler")
        assert (r.code, r.msg) == (200, "loaded model loop" + RUNTIME)
        w.send(otf.encode_infer([("L", {}, [("body", "text/plain", "x")])]))
        first = w.recv()
        assert first.preds[0].body == b"0;" and first.preds[0].header("ts_stream_next") == "true"
        w.send(otf.encode_cancel(["L"]))
        # the handler sees the cancel within its loop and stops; the request gets no final frame
        deadline = time.monotonic() + 10
        n = 1
        while not w.quiet_for(0.5):
            assert time.monotonic() < deadline
            n += len(w.recv().preds)
        assert n < 200
        # next request: the counter shows the cancelled loop stopped early
        w.send(otf.encode_infer([("M", {}, [("body", "text/plain", "y")])]))
        got, _ = collect_stream(w, ["M"])
        final = got["M"][-1]
        assert final.body == b"done" and final.header("ts_stream_next") == "false"
        assert len(got["M"]) == 201
        assert int(final.header("x-ts-worker-loops")) < 400
    finally:
        w.close()


def test_library_handler_abi_mismatch(tmp_path):
    d = build_handler_lib(tmp_path, abi="99")
    w = Worker()
    r = w.load("loop", d)  # handler from MANIFEST.json
    assert r.code == 500 and "ABI version 99" in r.msg, r.msg
    w.close()
    assert w.proc.returncode == 2
