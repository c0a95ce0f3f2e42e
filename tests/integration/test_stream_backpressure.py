"""Backpressure inside one handler call (issue 34 point 1).

A Python handler that streams large chunks with send_intermediate_predict_response in one
handle() call, TorchServe's pattern, to a client that does not read. The frontend pauses the
request once it holds stream_buffer_size for it; the worker must then stop sending: a call that
serves that request alone waits in its send until the client reads (or goes away), and in a
batch the paused request's output is held in the worker up to stream_buffer_size, past which
that request alone is cancelled with a 429 that says why, while the others go on. Before, the
pause was applied only at the next step, and the frontend buffered everything (893 MB for 500
MB of output over HTTP chunked, 591 MB over gRPC).

Each case checks the frontend's and the worker's memory while the slow client reads nothing,
the fast client's whole stream in order, and, for the slow one, the whole stream in order
(alone) or what it got followed by the error (in a batch). HTTP chunked, SSE and gRPC."""
import os
import re
import shutil
import socket
import sys
import tempfile
import threading
import time

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from conftest import PYSTUBS, python_model, start_server  # noqa: E402

sys.path.insert(0, PYSTUBS)
import grpc  # noqa: E402
import inference_pb2 as ipb  # noqa: E402
import inference_pb2_grpc as igrpc  # noqa: E402

CHUNK = 512 * 1024
BUF = 2 << 20  # stream_buffer_size
# In a batch the handler sends a chunk to each request every PACE ms (50 MB/s per stream): the
# fast reader must not fall 2 x BUF behind (cut off as too slow) on a loaded machine.
PACE = 10

FLOOD = '''
import time

from ts.protocol.otf_message_handler import send_intermediate_predict_response
from ts.utils.util import RequestCancelled


def chunk(k, size):
    tag = b"%08d;" % k
    return (tag * (size // len(tag) + 1))[:size]


def handle(data, context):
    """Each request's body is "N SIZE [PACE_MS]": N chunks of SIZE bytes, all sent inside this
    call, interleaved across the batch, PACE_MS apart (the batch's largest); a request whose
    client is gone (or reads too slowly) stops."""
    if data is None:
        return None
    want, pace = [], 0
    for row in data:
        body = row.get("body") if row.get("body") is not None else row.get("data")
        if isinstance(body, (bytes, bytearray)):
            body = body.decode()
        n, size, *ms = (int(x) for x in str(body).split())
        want.append((n, size))
        pace = max([pace] + ms)
    live = [True] * len(data)
    for k in range(max(n for n, _ in want)):
        if k and pace:
            time.sleep(pace / 1000)
        for i, (n, size) in enumerate(want):
            if live[i] and k < n:
                try:
                    send_intermediate_predict_response({i: chunk(k, size)},
                                                       {i: context.request_ids[i]}, "ok", 200,
                                                       context)
                except RequestCancelled:
                    live[i] = False
    return ["end"] * len(data)
'''


def chunk(k, size=CHUNK):
    tag = b"%08d;" % k
    return (tag * (size // len(tag) + 1))[:size]


def rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1)) / 1024


def write_model(store, batch):
    python_model(store, "flood", FLOOD,
                 yaml=f"minWorkers: 1\nmaxWorkers: 1\nbatchSize: {batch}\nmaxBatchDelay: 1000\n")


@pytest.fixture(params=[1, 2], ids=["alone", "batch"])
def flood(request):
    tmp = tempfile.mkdtemp(prefix="tsc-flood-")
    store = os.path.join(tmp, "store")
    write_model(store, request.param)
    srv = start_server(tmp, models=["flood"], store=store,
                       config={"stream_buffer_size": BUF, "stream_stall_timeout": 60})
    srv.batch = request.param
    try:
        srv.wait_ready("flood", body={"data": b"1 8"}, timeout=90)
        yield srv
    finally:
        srv.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def raw_request(port, body, headers=b""):
    """A streaming request from a client with a small receive buffer that reads nothing yet."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(("127.0.0.1", port))
    s.sendall(b"POST /predictions/flood HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\n"
              + headers + b"Content-Length: %d\r\n\r\n" % len(body) + body)
    return s


def read_all(s, timeout=120):
    s.settimeout(timeout)
    out = bytearray()
    while True:
        b = s.recv(1 << 20)
        if not b:
            break
        out += b
        if out.endswith(b"\r\n0\r\n\r\n"):
            break
    return bytes(out)


def dechunk(raw):
    head, _, rest = raw.partition(b"\r\n\r\n")
    parts = []
    while rest:
        line, _, rest = rest.partition(b"\r\n")
        n = int(line, 16)
        if n == 0:
            break
        parts.append(rest[:n])
        rest = rest[n + 2:]
    return head, b"".join(parts)


def sse_parse(body):
    """The data of each event of an SSE body (de-chunked), and the error event's, if any."""
    data, error = [], None
    for block in body.split(b"\n\n"):
        fields = {}
        for line in block.split(b"\n"):
            if line and not line.startswith(b":"):
                k, _, v = line.partition(b": ")
                fields.setdefault(k, []).append(v)
        if fields.get(b"event") == [b"error"]:
            error = b"\n".join(fields[b"data"])
        elif b"data" in fields:
            data.append(b"\n".join(fields[b"data"]))
    return data, error


def fast_http(srv, n, sse, out):
    """A client that reads everything, as it comes."""
    h = {"Content-Type": "text/plain"}
    if sse:
        h["Accept"] = "text/event-stream"
    r = srv.post("/predictions/flood", data=f"{n} {CHUNK} {PACE}", headers=h, stream=True,
                 timeout=120)
    out["status"] = r.status_code
    out["raw"] = b"".join(r.iter_content(chunk_size=1 << 20))


def assert_bounded(srv, base_front, base_worker, wpid):
    """While the slow client reads nothing: about stream_buffer_size in the frontend (plus a
    chunk in flight), and no more than that again in the worker."""
    front = rss_mb(srv.pid) - base_front
    worker = rss_mb(wpid) - base_worker
    assert front < 24, f"frontend grew {front:.0f} MB for one paused stream"
    assert worker < 24, f"worker grew {worker:.0f} MB for one paused stream"


@pytest.mark.parametrize("sse", [False, True], ids=["chunked", "sse"])
def test_http_slow_reader_inside_one_handler_call(flood, sse):
    srv = flood
    (wpid,) = srv.worker_pids()
    base_front, base_worker = rss_mb(srv.pid), rss_mb(wpid)
    n = 200 if srv.batch == 1 else 60  # 100 MB alone, 30 MB each in a batch
    whole = b"".join(chunk(k) for k in range(n))
    pace = PACE if srv.batch > 1 else 0
    slow = raw_request(srv.ports["inference"], f"{n} {CHUNK} {pace}".encode(),
                       b"Accept: text/event-stream\r\n" if sse else b"")
    fast = {}
    t = None
    if srv.batch > 1:  # the fast one joins the slow one's batch (maxBatchDelay 1 s)
        t = threading.Thread(target=fast_http, args=(srv, n, sse, fast))
        t.start()
    srv.wait_log("paused on worker")
    if t:
        # the fast reader gets its whole stream, in order, while the slow one reads nothing
        t.join(120)
        assert not t.is_alive() and fast.get("status") == 200, fast.get("status")
        body = fast["raw"]
        if sse:
            data, error = sse_parse(body)
            assert error is None, error
            body = b"".join(data)
        assert body == whole + b"end", (len(body), len(whole))
        srv.wait_log("reads its stream too slowly")
    time.sleep(2)  # the handler would have sent everything by now
    assert_bounded(srv, base_front, base_worker, wpid)
    head, got = dechunk(read_all(slow))
    slow.close()
    assert head.startswith(b"HTTP/1.1 200"), head[:200]
    error = None
    if sse:
        data, error = sse_parse(got)
        got = b"".join(data)
    if srv.batch == 1:  # alone: the call waited for it; everything, in order
        assert got == whole + b"end", (len(got), len(whole))
        assert "too slowly" not in srv.log()
    else:  # in a batch: what it got is a prefix, then the error saying why
        if not sse:
            got, sep, rest = got.partition(b'{"code": 429')
            error = sep + rest if sep else None
        assert whole.startswith(got) and len(got) < len(whole), len(got)
        assert error and b"too slowly" in error, (error or b"")[:300]
    # the worker serves the next request at once
    r = srv.post("/predictions/flood", data="2 16", timeout=30)
    assert r.status_code == 200 and r.content == chunk(0, 16) + chunk(1, 16) + b"end"


def test_grpc_slow_reader_inside_one_handler_call(flood):
    srv = flood
    (wpid,) = srv.worker_pids()
    base_front, base_worker = rss_mb(srv.pid), rss_mb(wpid)
    n = 200 if srv.batch == 1 else 60
    # no BDP probing: a client that does not read stops taking bytes at 64 KiB
    opts = [("grpc.http2.bdp_probe", 0), ("grpc.max_receive_message_length", 1 << 24)]
    chan = grpc.insecure_channel(f"127.0.0.1:{srv.ports['grpc']}", options=opts)
    stub = igrpc.InferenceAPIsServiceStub(chan)
    try:
        body = f"{n} {CHUNK} {PACE if srv.batch > 1 else 0}".encode()
        req = ipb.PredictionsRequest(model_name="flood", input={"data": body})
        slow = stub.StreamPredictions(req, timeout=120)
        fast = {}

        def read_fast():
            got = [m.prediction for m in stub.StreamPredictions(req, timeout=120)]
            fast["got"] = got

        t = None
        if srv.batch > 1:
            t = threading.Thread(target=read_fast)
            t.start()
        first = next(slow)
        srv.wait_log("paused on worker")
        if t:
            t.join(120)
            assert not t.is_alive()
            assert fast["got"] == [chunk(k) for k in range(n)] + [b"end"], len(fast["got"])
        time.sleep(2)
        assert_bounded(srv, base_front, base_worker, wpid)
        if srv.batch == 1:
            got = [first.prediction] + [m.prediction for m in slow]
            assert got == [chunk(k) for k in range(n)] + [b"end"], len(got)
        else:
            srv.wait_log("reads its stream too slowly")
            got = [first.prediction]
            with pytest.raises(grpc.RpcError) as ei:
                for m in slow:
                    got.append(m.prediction)
            assert ei.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, ei.value
            assert "too slowly" in ei.value.details(), ei.value.details()
            assert got == [chunk(k) for k in range(len(got))] and len(got) < n
    finally:
        chan.close()
