"""/metrics: TorchServe's names for what it has, real histograms for what it lacks, gRPC answers
counted with HTTP ones, name[] filtering, and a text prometheus_client parses."""
import json
import os
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
