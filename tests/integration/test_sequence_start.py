"""What a sequence's first request tells the handler, and what its answer tells the client.

- The handler sees ts_request_sequence_start: true only for an id the server made, or when the
  client sent the flag, as TorchServe's frontend sets it (issue 35, point 2). A client-chosen id
  new to the instance opens a sequence without it; the handler is told so by the frontend's
  ts_request_sequence_new header instead, and may continue state it finds for the id.
- Every answer whose request opened its sequence on this instance says so, with the HTTP
  response header ts_request_sequence_start: true and, over gRPC, a trailer of that name
  (issue 33, point 5): a client-chosen id that started anew here is never a plain 200 like a
  continuation. Continuations carry neither.
"""
import json
import os
import shutil
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from conftest import MODEL_STORE, PYSTUBS, start_server  # noqa: E402
from test_python_handlers import wait_model, write_model  # noqa: E402

sys.path.insert(0, PYSTUBS)
import grpc  # noqa: E402
import inference_pb2 as ipb  # noqa: E402
import inference_pb2_grpc as igrpc  # noqa: E402

SEQ = "ts_request_sequence_id"
START = "ts_request_sequence_start"
NEW = "ts_request_sequence_new"

# answers with the sequence headers the handler saw
ECHO = '''
import json


def handle(data, context):
    if data is None:
        return None
    out = []
    for i in range(len(data)):
        out.append(json.dumps({k: context.get_request_header(i, k) for k in (
            "ts_request_sequence_id", "ts_request_sequence_start", "ts_request_sequence_new")}))
    return out
'''
SEQ_YAML = ("minWorkers: 1\nmaxWorkers: 1\nbatchSize: 1\nsequenceBatching: true\n"
            "maxSequenceJobQueueSize: 4\nmaxNumSequence: 16\n")


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    tmp = str(tmp_path_factory.mktemp("seqstart"))
    store = os.path.join(tmp, "store")
    write_model(store, "echo", ECHO, yaml=SEQ_YAML)
    # the stateful example of model-store/ next to echo
    shutil.copy(os.path.join(MODEL_STORE, "stateful.mar"), store)
    s = start_server(tmp, models=["echo", "stateful"], store=store)
    yield s
    s.stop()


def seen(r):
    assert r.status_code == 200, r.text
    return json.loads(r.text)


@pytest.mark.smoke
def test_handler_sees_start_only_for_server_ids_or_the_flag(srv):
    r = srv.post("/predictions/echo", data=b"1")
    got = seen(r)
    sid = r.headers[SEQ]
    assert got == {SEQ: sid, START: "true", NEW: None}, got
    assert r.headers[START] == "true"

    r = srv.post("/predictions/echo", data=b"2", headers={SEQ: sid})
    assert seen(r) == {SEQ: sid, START: None, NEW: None} and START not in r.headers

    # a client-chosen id, new here, without the flag: no start for the handler (TorchServe)
    r = srv.post("/predictions/echo", data=b"1", headers={SEQ: "client-a"})
    assert seen(r) == {SEQ: "client-a", START: None, NEW: "true"}, r.text
    assert r.headers[SEQ] == "client-a" and r.headers[START] == "true"
    r = srv.post("/predictions/echo", data=b"2", headers={SEQ: "client-a"})
    assert seen(r) == {SEQ: "client-a", START: None, NEW: None} and START not in r.headers

    # with the flag, the handler is told
    r = srv.post("/predictions/echo", data=b"1", headers={SEQ: "client-b", START: "true"})
    assert seen(r) == {SEQ: "client-b", START: "true", NEW: None}, r.text
    assert r.headers[START] == "true"


def test_builtin_stateful_starts_a_new_client_id_from_zero_and_says_so(srv):
    wait_model(srv, "stateful", body=b"0")
    # even numbers: the example streams the sum of an odd one several times
    r = srv.post("/predictions/stateful", data=b"4", headers={SEQ: "sum-a"})
    assert r.status_code == 200 and r.text == "4" and r.headers[START] == "true", r.text
    r = srv.post("/predictions/stateful", data=b"6", headers={SEQ: "sum-a"})
    assert r.status_code == 200 and r.text == "10" and START not in r.headers, r.text


@pytest.mark.smoke
def test_grpc_trailer_says_the_sequence_started(srv):
    ch = grpc.insecure_channel(f"127.0.0.1:{srv.ports['grpc']}")
    st = igrpc.InferenceAPIsServiceStub(ch)

    def call(fn, sid, value, start=False):
        inp = {"data": str(value).encode()}
        if start:
            inp[START] = b"true"
        req = ipb.PredictionsRequest(model_name="stateful", sequence_id=sid, input=inp)
        if fn is st.StreamPredictions:
            it = fn(req, timeout=30)
            out = [m.prediction for m in it]
            return b"".join(out), dict(it.trailing_metadata())
        r, c = fn.with_call(req, timeout=30)
        return r.prediction, dict(c.trailing_metadata())

    out, tr = call(st.Predictions, "grpc-a", 4)
    assert out == b"4" and tr.get(START) == "true", tr
    out, tr = call(st.Predictions, "grpc-a", 2)
    assert out == b"6" and START not in tr, tr
    out, tr = call(st.StreamPredictions, "grpc-b", 2, start=True)
    assert tr.get(START) == "true", tr
    out, tr = call(st.Predictions, "grpc-b", 2)
    assert START not in tr, tr
    ch.close()
