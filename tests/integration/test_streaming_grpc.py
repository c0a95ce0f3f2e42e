"""Streaming over gRPC StreamPredictions: one PredictionResponse per partial result at the
handler's pace, char_lm equal to a torch greedy decode, mid-stream errors as a status, a
non-streaming model as one message and OK, a cancelled call stopping generation on the worker,
and a worker killed mid-stream ending the call with UNAVAILABLE.

Worker token counters are read over HTTP (x-ts-worker-* headers), as in test_streaming.py.
"""
import json
import os
import shutil
import signal
import sys
import tempfile
import time

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from conftest import PYSTUBS, start_server  # noqa: E402
from test_streaming import Reference, char_lm_worker_pid, counters, on_time  # noqa: E402

sys.path.insert(0, PYSTUBS)
import grpc  # noqa: E402
import inference_pb2 as ipb  # noqa: E402
import inference_pb2_grpc as igrpc  # noqa: E402

DELAY_MS = 200  # as in test_streaming.py, whose on_time() checks the arrival times
STEP_MS = 10  # char_lm pace in this server
WORDS = "one message per partial result on every transport"


@pytest.fixture(scope="module")
def ref():
    r = Reference()
    yield r
    shutil.rmtree(r.tmp, ignore_errors=True)


@pytest.fixture(scope="module")
def gsrv():
    tmp = tempfile.mkdtemp(prefix="tsc-gstream-")
    # worker_debug_headers: counters() reads the char_lm worker's x-ts-worker-* counters
    srv = start_server(tmp, models=["identity_text", "char_lm", "mlp"],
                       config={"worker_debug_headers": True}, yaml={
        "identity_text": {"batchSize": 8, "handler": {"delay_ms": DELAY_MS}},
        "char_lm": {"batchSize": 8, "handler": {"delay_ms": STEP_MS}},
        "mlp": {"batchSize": 1},
    })
    srv.wait_ready("char_lm", body={"json": {"prompt": "a", "max_new_tokens": 2}})
    srv.wait_ready("identity_text", body={"data": "warm", "headers": {"x-delay-ms": "0"}})
    srv.wait_ready("mlp", body={"json": {"data": [0.0] * 64}})
    chan = grpc.insecure_channel(f"127.0.0.1:{srv.ports['grpc']}")
    srv.stub = igrpc.InferenceAPIsServiceStub(chan)
    yield srv
    chan.close()
    srv.stop()
    shutil.rmtree(tmp, ignore_errors=True)


def lm_request(prompt, n, **extra):
    body = {"prompt": prompt, "max_new_tokens": n}
    body.update(extra)
    return ipb.PredictionsRequest(model_name="char_lm",
                                  input={"data": json.dumps(body).encode()})


def test_one_message_per_word_on_time(gsrv):
    req = ipb.PredictionsRequest(model_name="identity_text", input={"data": WORDS.encode()})
    words = WORDS.split()

    def run():
        t0 = time.monotonic()
        msgs, times = [], []
        for m in gsrv.stub.StreamPredictions(req, timeout=30):
            times.append(time.monotonic() - t0)
            msgs.append(m.prediction.decode())
        assert msgs == [w if i == 0 else " " + w for i, w in enumerate(words)]
        assert "".join(msgs) == WORDS
        return times

    on_time(run, len(words))


@pytest.mark.smoke
def test_char_lm_matches_torch(gsrv, ref):
    msgs = [m.prediction.decode()
            for m in gsrv.stub.StreamPredictions(lm_request("The keeper", 40), timeout=30)]
    assert len(msgs) == 40 and all(len(m) == 1 for m in msgs)
    assert "".join(msgs) == ref.greedy("The keeper", 40)


@pytest.mark.smoke
def test_mid_stream_error_ends_with_status(gsrv, ref):
    it = gsrv.stub.StreamPredictions(lm_request("The baker", 50, fail_after=5), timeout=30)
    got = []
    with pytest.raises(grpc.RpcError) as ei:
        for m in it:
            got.append(m.prediction.decode())
    assert "".join(got) == ref.greedy("The baker", 5)
    assert ei.value.code() == grpc.StatusCode.INTERNAL
    assert "fail_after" in ei.value.details()


@pytest.mark.smoke
def test_non_streaming_model_gives_one_message_and_ok(gsrv):
    req = ipb.PredictionsRequest(model_name="mlp",
                                 input={"data": json.dumps({"data": [0.5] * 64}).encode()})
    it = gsrv.stub.StreamPredictions(req, timeout=30)
    msgs = list(it)
    assert len(msgs) == 1 and len(json.loads(msgs[0].prediction)) == 10
    assert it.code() == grpc.StatusCode.OK
    # the worker is fine afterwards (TorchServe kills it here)
    assert len(list(gsrv.stub.StreamPredictions(req, timeout=30))) == 1


def test_cancel_stops_generation(gsrv, ref):
    c0 = counters(gsrv)
    it = gsrv.stub.StreamPredictions(lm_request("The keeper", 2000), timeout=60)
    for _ in range(50):
        next(it)
    it.cancel()
    time.sleep(0.5)  # a runaway stream would make 50 more tokens meanwhile
    c1 = counters(gsrv)
    generated = c1["tokens"] - c0["tokens"] - 1
    assert 50 <= generated <= 50 + 1 + 50 // STEP_MS + 1, generated
    msgs = [m.prediction.decode()
            for m in gsrv.stub.StreamPredictions(lm_request("The miller", 20), timeout=30)]
    assert "".join(msgs) == ref.greedy("The miller", 20)


def test_worker_killed_mid_stream_is_unavailable(gsrv, ref):
    it = gsrv.stub.StreamPredictions(lm_request("The keeper", 1000), timeout=60)
    for _ in range(10):
        next(it)
    pid = char_lm_worker_pid(gsrv)
    os.kill(pid, signal.SIGKILL)
    with pytest.raises(grpc.RpcError) as ei:
        for _ in it:
            pass
    assert ei.value.code() == grpc.StatusCode.UNAVAILABLE, ei.value
    assert "Worker died" in ei.value.details()
    gsrv.wait_ready("char_lm", body={"json": {"prompt": "a", "max_new_tokens": 2}})
    msgs = [m.prediction.decode()
            for m in gsrv.stub.StreamPredictions(lm_request("The baker", 20), timeout=30)]
    assert "".join(msgs) == ref.greedy("The baker", 20)


def test_grpc_slow_reader_is_paused_then_resumed_then_cut_off(tmp_path):
    """gRPC streams have the same backpressure as HTTP: a client that stops reading gets its
    request paused on the worker once stream_buffer_size waits in the frontend (others go on),
    resumed when it reads, and cancelled (RESOURCE_EXHAUSTED) after stream_stall_timeout."""
    srv = start_server(str(tmp_path), models=["identity_text"],
                       config={"stream_buffer_size": "65536", "stream_stall_timeout": "3"},
                       yaml={"identity_text": {"batchSize": 8, "handler": {"delay_ms": 0}}})
    # no BDP probing: the client's flow-control window stays at 64 KiB, so a client that does
    # not read soon stops taking bytes
    opts = [("grpc.http2.bdp_probe", 0), ("grpc.max_receive_message_length", 1 << 24)]
    chan = grpc.insecure_channel(f"127.0.0.1:{srv.ports['grpc']}", options=opts)
    stub = igrpc.InferenceAPIsServiceStub(chan)
    try:
        srv.wait_ready("identity_text", body={"data": "warm", "headers": {"x-delay-ms": "0"}})
        words = [(b"%05d" % i) * 200 for i in range(4000)]  # 4 MB of output, 1000-byte words
        req = ipb.PredictionsRequest(model_name="identity_text", input={"data": b" ".join(words)})
        slow = stub.StreamPredictions(req, timeout=60)
        first = next(slow)
        deadline = time.time() + 20
        while "paused on worker" not in srv.log() and time.time() < deadline:
            time.sleep(0.1)
        assert "paused on worker" in srv.log()
        rss = int(open(f"/proc/{srv.pid}/status").read().split("VmRSS:")[1].split()[0])
        assert rss < 60 * 1024, f"frontend RSS {rss} kB while a stream is paused"
        r = stub.Predictions(ipb.PredictionsRequest(model_name="identity_text",
                                                    input={"data": b"still streaming"}), timeout=5)
        assert r.prediction.split() == [b"still", b"streaming"]
        time.sleep(1)
        got = [first.prediction] + [m.prediction for m in slow]
        assert b"".join(got).split() == words
        assert "resumed on worker" in srv.log()

        dead = stub.StreamPredictions(req, timeout=60)
        next(dead)
        deadline = time.time() + 20
        while "took nothing" not in srv.log() and time.time() < deadline:
            time.sleep(0.2)
        assert "took nothing for 3 s" in srv.log()
        with pytest.raises(grpc.RpcError) as ei:
            for _ in dead:
                pass
        assert ei.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, ei.value
        r = stub.Predictions(ipb.PredictionsRequest(model_name="identity_text",
                                                    input={"data": b"after"}), timeout=5)
        assert r.prediction.split() == [b"after"]
    finally:
        chan.close()
        srv.stop()
