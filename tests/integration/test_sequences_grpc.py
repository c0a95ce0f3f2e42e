"""Stateful sequences over gRPC: StreamPredictions2 carries one sequence per call, start and end
come from the input keys ts_request_sequence_start / ts_request_sequence_end (TorchServe's
intent, not its ByteString bug), PredictionResponse.sequence_id is always set, and an error is a
PredictionResponse.status inside the stream."""
import os
import queue
import sys
import threading
import time

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from conftest import PYSTUBS  # noqa: E402

sys.path.insert(0, PYSTUBS)
import grpc  # noqa: E402
import inference_pb2 as ipb  # noqa: E402
import inference_pb2_grpc as igrpc  # noqa: E402

PLAIN = {"continuousBatching": False, "maxBatchDelay": 5}



def stub(srv):
    return igrpc.InferenceAPIsServiceStub(grpc.insecure_channel(f"127.0.0.1:{srv.ports['grpc']}"))


def msg(value, sid="", start=False, end=False):
    inp = {"data": str(value).encode()}
    if start:
        inp["ts_request_sequence_start"] = b"true"
    if end:
        inp["ts_request_sequence_end"] = b"true"
    return ipb.PredictionsRequest(model_name="stateful", sequence_id=sid, input=inp)


def wait_ready(st):
    deadline = time.time() + 60
    while True:
        try:
            st.Predictions(msg(0, start=True), timeout=10)
            return
        except grpc.RpcError:
            assert time.time() < deadline
            time.sleep(0.2)


@pytest.fixture
def grpc_srv(server_factory):
    srv = server_factory(models=["stateful"], yaml={"stateful": PLAIN})
    st = stub(srv)
    wait_ready(st)
    return srv, st


@pytest.mark.smoke
def test_stream_predictions2_two_sequences(grpc_srv):
    """Two concurrent StreamPredictions2 calls, each a sequence sending 1, 2, 3 (start on the
    first message, end on the last): both read "1 3 6"."""
    _, st = grpc_srv
    got = {}
    errors = []

    def run(sid):
        try:
            run1(sid)
        except BaseException as e:  # noqa: B036 - reported by the main thread
            errors.append(e)

    def run1(sid):
        reqs = [msg(1, sid, start=True), msg(2, sid), msg(3, sid, end=True)]
        out = list(st.StreamPredictions2(iter(reqs), timeout=30))
        assert all(not o.HasField("status") for o in out), out
        assert all(o.sequence_id == sid for o in out), out
        got[sid] = " ".join(o.prediction.decode() for o in out)

    ts = [threading.Thread(target=run, args=(s,)) for s in ("grpc-a", "grpc-b")]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errors:
        raise errors[0]
    assert got == {"grpc-a": "1 3 6", "grpc-b": "1 3 6"}


def test_stream_predictions2_generated_id_and_errors(grpc_srv):
    """A start without sequence_id gets a ts-seq-<uuid> id in every answer; after the end, a
    request of that sequence is a status message (410 -> FAILED_PRECONDITION or similar) and
    the stream stays open for the next one."""
    _, st = grpc_srv
    q = queue.Queue()

    def reqs():
        while True:
            m = q.get()
            if m is None:
                return
            yield m

    call = st.StreamPredictions2(reqs(), timeout=30)
    q.put(msg(5, start=True))
    first = next(call)
    sid = first.sequence_id
    assert sid.startswith("ts-seq-") and first.prediction == b"5"
    q.put(msg(0, sid, end=True))
    r = next(call)
    assert r.prediction == b"5" and r.sequence_id == sid
    q.put(msg(1, sid))
    r = next(call)
    assert r.HasField("status") and r.status.code != 0 and "ended" in r.status.message
    assert r.sequence_id == sid
    q.put(msg(7, "grpc-c", start=True))
    r = next(call)
    assert r.prediction == b"7" and r.sequence_id == "grpc-c"
    q.put(None)
    assert list(call) == []


def test_unary_predictions_with_sequence_id(grpc_srv):
    _, st = grpc_srv
    r = st.Predictions(msg(4, "grpc-u", start=True), timeout=10)
    assert r.prediction == b"4"
    r = st.Predictions(msg(6, "grpc-u"), timeout=10)
    assert r.prediction == b"10" and r.sequence_id == "grpc-u"
    # an id never seen starts a sequence, as in TorchServe; once ended it is refused
    r = st.Predictions(msg(1, "grpc-never-started"), timeout=10)
    assert r.prediction == b"1" and r.sequence_id == "grpc-never-started"
    r = st.Predictions(msg(2, "grpc-never-started", end=True), timeout=10)
    assert r.prediction == b"3"
    with pytest.raises(grpc.RpcError) as e:
        st.Predictions(msg(1, "grpc-never-started"), timeout=10)
    assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "ended" in e.value.details()


def test_stream_predictions2_client_chosen_ids_without_start(grpc_srv):
    """TorchServe's `torchserve_grpc_client.py infer_stream2 stateful seq_0 ...` sends a
    client-chosen sequence_id and no start flag: two such streams at once each get their running
    sums; after the end, the id is refused (410) and the stream carries on."""
    _, st = grpc_srv
    got = {}
    errors = []

    def run(sid, values):
        try:
            reqs = [msg(v, sid) for v in values[:-1]] + [msg(values[-1], sid, end=True)]
            out = list(st.StreamPredictions2(iter(reqs), timeout=30))
            assert all(not o.HasField("status") for o in out), out
            assert all(o.sequence_id == sid for o in out), out
            got[sid] = [int(o.prediction) for o in out]
        except BaseException as e:  # noqa: B036 - reported by the main thread
            errors.append(e)

    ts = [threading.Thread(target=run, args=("seq_0", [1, 3, 5])),
          threading.Thread(target=run, args=("seq_1", [2, 4, 6]))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errors:
        raise errors[0]
    assert got == {"seq_0": [1, 4, 9], "seq_1": [2, 6, 12]}
    out = list(st.StreamPredictions2(iter([msg(1, "seq_0"), msg(8, "seq_2")]), timeout=30))
    assert out[0].HasField("status") and out[0].status.code != 0, out
    assert "ended" in out[0].status.message and out[0].sequence_id == "seq_0"
    assert out[1].prediction == b"8" and out[1].sequence_id == "seq_2"


def test_sequence_id_in_response_metadata(grpc_srv):
    """Unary and server-streaming answers carry the sequence id as ts_request_sequence_id
    response metadata too (a balancer learns ids from headers: deploy/haproxy), generated ids
    included; a refused request carries none."""
    _, st = grpc_srv
    r, call = st.Predictions.with_call(msg(3), timeout=10)
    sid = r.sequence_id
    assert sid.startswith("ts-seq-")
    assert dict(call.initial_metadata()).get("ts_request_sequence_id") == sid
    r, call = st.Predictions.with_call(msg(5, "grpc-md", start=True), timeout=10)
    assert dict(call.initial_metadata()).get("ts_request_sequence_id") == "grpc-md"
    stream = st.StreamPredictions(msg(2, "grpc-md"), timeout=10)
    assert [m.prediction for m in stream] == [b"7"]
    assert dict(stream.initial_metadata()).get("ts_request_sequence_id") == "grpc-md"
    st.Predictions(msg(0, "grpc-md", end=True), timeout=10)
    with pytest.raises(grpc.RpcError) as e:
        st.Predictions(msg(1, "grpc-md"), timeout=10)
    assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "ts_request_sequence_id" not in dict(e.value.initial_metadata())
