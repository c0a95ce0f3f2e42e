"""/metrics: TorchServe's names for what it has, real histograms for what it lacks, gRPC answers
counted with HTTP ones, name[] filtering, and a text prometheus_client parses."""
import json
import os
import re
import subprocess
import sys
import time

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from conftest import PYSTUBS

sys.path.insert(0, PYSTUBS)
import grpc  # noqa: E402
import inference_pb2 as ipb  # noqa: E402
import inference_pb2_grpc as igrpc  # noqa: E402

SAMPLE = {"data": [0.25] * 64}


def families(text):
    return {f.name: f for f in text_string_to_metric_families(text)}


def sample(fams, family, suffix, model, **labels):
    for s in fams[family].samples:
        if s.name == family + suffix and s.labels.get("model_name") == model and \
                all(s.labels.get(k) == v for k, v in labels.items()):
            return s.value
    raise AssertionError(f"{family}{suffix} {model} {labels} not found")


@pytest.mark.smoke
def test_counters_histograms_and_filter(server_factory):
    s = server_factory(models=["mlp", "identity_text"],
                       yaml={"identity_text": {"handler": {"delay_ms": 20}}})
    s.wait_ready("mlp", body={"json": SAMPLE})
    s.wait_ready("identity_text", body={"data": "warm", "headers": {"x-delay-ms": "0"}})
    before = families(s.get("/metrics", api="metrics").text)
    n0 = sample(before, "ts_inference_requests", "_total", "mlp")
    c0 = sample(before, "ts_request_latency_ms", "_count", "mlp")
    ok0 = before["Requests2XX"].samples[0].value
    n, lat = 25, []
    sess = requests.Session()
    for _ in range(n):
        t0 = time.monotonic()
        assert sess.post(s.url("/predictions/mlp"), json=SAMPLE, timeout=10).status_code == 200
        lat.append((time.monotonic() - t0) * 1000)
    # one stream of 3 words: a first token and two gaps
    r = requests.post(s.url("/predictions/identity_text"), data="a b c", timeout=10)
    assert r.status_code == 200
    # three gRPC answers count in Requests2XX as HTTP ones do
    with grpc.insecure_channel(f"127.0.0.1:{s.ports['grpc']}") as ch:
        st = igrpc.InferenceAPIsServiceStub(ch)
        for _ in range(3):
            st.Predictions(ipb.PredictionsRequest(model_name="mlp", input={
                "data": json.dumps(SAMPLE).encode()}), timeout=10)
    text = s.get("/metrics", api="metrics").text
    fams = families(text)
    assert sample(fams, "ts_inference_requests", "_total", "mlp") - n0 == n + 3
    count = sample(fams, "ts_request_latency_ms", "_count", "mlp")
    assert count - c0 == n + 3
    # buckets are cumulative and end at _count
    buckets = [(s_.labels["le"], s_.value) for s_ in fams["ts_request_latency_ms"].samples
               if s_.name.endswith("_bucket") and s_.labels["model_name"] == "mlp"]
    values = [v for _, v in buckets]
    assert values == sorted(values) and buckets[-1] == ("+Inf", count)
    # the server's time is within the clients': at most n x the slowest round trip
    total = sample(fams, "ts_request_latency_ms", "_sum", "mlp") - \
        sample(before, "ts_request_latency_ms", "_sum", "mlp")
    assert 0 < total <= (n + 3) * max(lat) + 1000
    assert sample(fams, "ts_inference_latency_microseconds", "_total", "mlp") > 0
    assert sample(fams, "ts_queue_latency_microseconds", "_total", "mlp") >= 0
    assert sample(fams, "ts_time_to_first_token_ms", "_count", "identity_text") >= 2
    assert sample(fams, "ts_inter_token_ms", "_count", "identity_text") >= 2
    assert sample(fams, "ts_batch_size", "_count", "mlp") >= n
    assert fams["Requests2XX"].samples[0].value - ok0 >= n + 1 + 3
    assert sample(fams, "ts_workers_idle", "", "mlp") == 1
    # name[] keeps only the families asked for
    only = s.get("/metrics?name[]=ts_queue_depth&name[]=Requests4XX", api="metrics").text
    assert set(families(only)) == {"ts_queue_depth", "Requests4XX"}, only


def worker_sample(fams, family, suffix, model):
    """A worker-reported metric's sample for model (TorchServe's labels: ModelName, Level,
    Hostname)."""
    for s_ in fams[family].samples:
        if s_.name == family + suffix and s_.labels.get("ModelName") == model:
            assert s_.labels.get("Level") == "Model" and s_.labels.get("Hostname"), s_.labels
            return s_.value
    raise AssertionError(f"{family}{suffix} {model} not found")


def test_handler_metrics_and_torchserve_latencies(server_factory):
    s = server_factory(models=["mlp", "identity_text"],
                       yaml={"identity_text": {"handler": {"delay_ms": 1}}})
    s.wait_ready("mlp", body={"json": SAMPLE})
    s.wait_ready("identity_text", body={"data": "warm"})
    before = families(s.get("/metrics", api="metrics").text)
    words0 = worker_sample(before, "StreamedWords", "_total", "identity_text")
    wb0 = worker_sample(before, "WordBytes", "_count", "identity_text")
    wbs0 = worker_sample(before, "WordBytes", "_sum", "identity_text")
    # a custom metric from a handler (identity_text: StreamedWords, WordBytes), never on the wire
    r = requests.post(s.url("/predictions/identity_text"), data="a bb ccc", timeout=10)
    assert r.status_code == 200 and r.text == "a bb ccc"
    assert not any("metric" in k.lower() for k in r.headers), r.headers
    n, lat = 10, []
    sess = requests.Session()
    for _ in range(n):
        t0 = time.monotonic()
        r = sess.post(s.url("/predictions/mlp"), json=SAMPLE, timeout=10)
        assert r.status_code == 200
        assert not any("metric" in k.lower() for k in r.headers), r.headers
        lat.append((time.monotonic() - t0) * 1000)
    text = s.get("/metrics", api="metrics").text
    fams = families(text)
    assert fams["StreamedWords"].type == "counter"
    assert worker_sample(fams, "StreamedWords", "_total", "identity_text") - words0 == 3
    assert fams["WordBytes"].type == "histogram"
    assert worker_sample(fams, "WordBytes", "_count", "identity_text") - wb0 == 3
    assert worker_sample(fams, "WordBytes", "_sum", "identity_text") - wbs0 == 6
    assert "# HELP StreamedWords Torchserve prometheus counter metric with unit: Count" in text
    # TorchServe's latency metrics by name: worker-measured, per model, in ms, below the
    # slowest round trip the client saw
    for name in ("HandlerTime", "PredictionTime"):
        assert fams[name].type == "gauge"
        v = worker_sample(fams, name, "", "mlp")
        assert 0 < v <= max(lat), (name, v, lat)
    assert worker_sample(fams, "HandlerTime", "", "mlp") <= \
        worker_sample(fams, "PredictionTime", "", "mlp")
    for name in ("QueueTime", "WorkerThreadTime"):
        (smp,) = fams[name].samples
        assert smp.labels["Level"] == "Host" and 0 <= smp.value <= max(lat), (name, smp)
    loads = {re.sub(r"^W-\d+-", "", x.labels["WorkerName"]): x.value
             for x in fams["WorkerLoadTime"].samples}
    assert set(loads) == {"mlp_1.0", "identity_text_1.0"}, loads
    assert all(0 < v < 60000 for v in loads.values()), loads
    only = s.get("/metrics?name[]=HandlerTime", api="metrics").text
    assert set(families(only)) == {"HandlerTime"}, only


# A library handler that reports 40 names, one reserved name and a name whose kind changes.
NAMES_HANDLER_C = r"""
#include "handler.h"
static int init(struct ts_ctx *ctx, void **state) { (void)ctx; *state = 0; return 0; }
static void handle(void *state, struct ts_ctx *ctx, size_t n)
{
    (void)state;
    for (size_t i = 0; i < n; i++) {
        char name[16];
        ts_metric_add(ctx, i, "bad name-1", "ms x", TS_METRIC_GAUGE, 2.5);
        for (int k = 0; k < 40; k++) {
            name[0] = 'm'; name[1] = (char)('0' + k / 10); name[2] = (char)('0' + k % 10);
            name[3] = 0;
            ts_metric_add(ctx, i, name, "Count", TS_METRIC_COUNTER, 1);
        }
        ts_metric_add(ctx, i, "ts_inference_requests_total", "Count", TS_METRIC_COUNTER, 1);
        ts_metric_add(ctx, i, "m00", "Count", TS_METRIC_GAUGE, 5);
        ts_set_response(ctx, i, "ok", 2);
    }
}
static const struct ts_handler h = {TS_HANDLER_ABI_VERSION, "names", 0, init, handle, 0, 0};
const struct ts_handler *ts_handler_v1(void) { return &h; }
"""


def test_handler_metric_names_bounded(server_factory, tmp_path):
    store = tmp_path / "store"
    d = store / "names"
    (d / "MAR-INF").mkdir(parents=True)
    (tmp_path / "names.c").write_text(NAMES_HANDLER_C)
    subprocess.run(["gcc", "-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-I",
                    os.path.join(os.path.dirname(__file__), "..", "..", "backend"),
                    "-o", str(d / "libnames.so"), str(tmp_path / "names.c")], check=True)
    (d / "MAR-INF" / "MANIFEST.json").write_text(
        json.dumps({"model": {"modelName": "names", "handler": "libnames.so"}}))
    s = server_factory(models=["names"], store=str(store))
    s.wait_ready("names", body={"data": "x"})
    for _ in range(2):
        assert s.post("/predictions/names", data="x").text == "ok"
    fams = families(s.get("/metrics", api="metrics").text)
    own = sorted(f for f in fams if re.fullmatch(r"m\d\d|bad_name_1", f))
    # 32 names per model besides HandlerTime and PredictionTime: the sanitised first name, then
    # m00..m30
    assert own == ["bad_name_1"] + [f"m{k:02d}" for k in range(31)], own
    assert worker_sample(fams, "bad_name_1", "", "names") == 2.5
    assert "# HELP bad_name_1 Torchserve prometheus gauge metric with unit: ms_x" in \
        s.get("/metrics", api="metrics").text
    assert worker_sample(fams, "m00", "_total", "names") == 3  # the gauge m00 was refused
    assert "HandlerTime" in fams and "PredictionTime" in fams
    # the frontend's own family is not shadowed: names has no such sample
    assert all(x.labels.get("model_name") != "names" or x.value == 3
               for x in fams["ts_inference_requests"].samples)
    log = s.log()
    assert "metric refused" in log and "m31: the model has 32 metric names already" in log, log


def test_metrics_mode_log(server_factory):
    """metrics_mode=log: TorchServe's log format in logs/ts_metrics.log every
    metric_time_interval seconds, and once more at shutdown; /metrics says where they went."""
    s = server_factory(models=["mlp"], config={"metrics_mode": "log", "metric_time_interval": 1})
    s.wait_ready("mlp", body={"json": SAMPLE})
    n = 7
    for _ in range(n):
        assert s.post("/predictions/mlp", json=SAMPLE).status_code == 200
    r = s.get("/metrics", api="metrics")
    assert r.status_code == 200 and "ts_metrics.log every 1 s" in r.text
    assert families(r.text) == {}
    path = os.path.join(s.tmp, "logs", "ts_metrics.log")
    # log4j's "%d{ISO8601} - " first, as TorchServe writes it
    pat = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d,\d{3} - "
                     r"(\w+)\.(\w+):([0-9.e+-]+)\|#([^|]*)\|#hostname:[^,]+,timestamp:(\d+)$")

    def snapshot():
        """The last written value of each (name, dims)."""
        out = {}
        with open(path) as f:
            for ln in f.read().splitlines():
                m = pat.match(ln)
                assert m, ln
                out[(m[1], m[4])] = (m[2], float(m[3]), int(m[5]))
        return out

    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if os.path.exists(path) and snapshot().get(
                ("ts_inference_requests_total", "model_name:mlp,model_version:default"),
                (0, 0, 0))[1] >= n + 1:
            break
        time.sleep(0.2)
    snap = snapshot()
    unit, v, ts = snap[("ts_inference_requests_total", "model_name:mlp,model_version:default")]
    assert unit == "Count" and v == n + 1  # the warm-up request too
    assert abs(ts - time.time()) < 60
    unit, v, _ = snap[("Requests2XX", "Level:Host")]
    assert unit == "Count" and v >= n + 1
    # the model metrics are in model_metrics.log, a line per reported value (test_parity_metrics)
    assert ("HandlerTime", "ModelName:mlp,Level:Model") not in snap
    assert snap[("ts_request_latency_ms_count", "model_name:mlp,model_version:1.0")][:2] == \
        ("Milliseconds", n + 1)
    # at shutdown the last values are written once more
    size = os.path.getsize(path)
    s.stop()
    assert os.path.getsize(path) > size
