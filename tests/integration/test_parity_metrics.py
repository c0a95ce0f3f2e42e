"""TorchServe parity of metrics and their logs (issue 35, points 7, 8, 10, 11 and 12), against the
real server, workers and Python handlers:

- metrics_config (TorchServe's metrics.yaml): the model metrics it declares are served with their
  types, units and dimensions; with model_metrics_auto_detect=false (TorchServe's default with a
  metrics.yaml) an undeclared one is not, with true it is; its ts_metrics section picks the
  TorchServe-named frontend families; a bad file refuses the start with file:line;
- a handler in the style of TorchServe's examples/custom_metrics (the metrics cache API:
  add_metric_to_cache, get_metric of a metric only metrics.yaml declares, add_metric, add_counter,
  add_time with a Dimension, add_size, add_percent as a histogram) answers, and /metrics has its
  metrics with TorchServe's labels;
- HandlerTime and PredictionTime carry ModelName and Level; ts_inference_requests_total labels
  a request without a version model_version="default";
- metrics_mode=log: ts_metrics.log and model_metrics.log lines start with log4j's
  "%d{ISO8601} - " and split as TorchServe's benchmark tools split them;
- ts_batch_size's quantiles read 1 when every batch has one request.
"""
import io
import json
import os
import re
import sys
import time

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from conftest import start_server  # noqa: E402

torch = pytest.importorskip("torch")
Image = pytest.importorskip("PIL.Image")

SAMPLE = {"data": [0.25] * 64}
ISO = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d,\d{3} - "


def families(text):
    return {f.name: f for f in text_string_to_metric_families(text)}


def metrics_text(srv):
    return srv.get("/metrics", api="metrics").text


def wait_for(fn, timeout=20):
    deadline = time.time() + timeout
    while True:
        v = fn()
        if v or time.time() > deadline:
            return v
        time.sleep(0.1)


def quantile(q, buckets):
    """Prometheus' histogram_quantile over [(le, cumulative count)] (promql/quantile.go)."""
    buckets = sorted(buckets, key=lambda b: b[0])
    total = buckets[-1][1]
    rank = q * total
    b = next(i for i, (_, c) in enumerate(buckets) if c >= rank)
    if b == len(buckets) - 1:
        return buckets[-2][0]
    if b == 0 and buckets[0][0] <= 0:
        return buckets[0][0]
    start, end, count = 0.0, buckets[b][0], buckets[b][1]
    if b > 0:
        start = buckets[b - 1][0]
        count -= buckets[b - 1][1]
        rank -= buckets[b - 1][1]
    return start + (end - start) * (rank / count)


# ---- 12: the lowest bucket of ts_batch_size ----

def test_batch_size_quantiles_of_single_request_batches(server_factory):
    s = server_factory(models=["mlp"], yaml={"mlp": {"batchSize": 1}})
    s.wait_ready("mlp", body={"json": SAMPLE})
    for _ in range(20):
        assert s.post("/predictions/mlp", json=SAMPLE).status_code == 200
    fam = families(metrics_text(s))["ts_batch_size"]
    buckets = [(float(x.labels["le"]), x.value) for x in fam.samples
               if x.name == "ts_batch_size_bucket" and x.labels["model_name"] == "mlp"]
    for q in (0.5, 0.9, 0.99):
        v = quantile(q, buckets)
        assert 0.999 <= v <= 1.0, (q, v, buckets)


# ---- 11: TorchServe's dimensions and versions ----

def test_handler_time_dimensions_and_the_default_version(server_factory):
    s = server_factory(models=["mlp"])
    s.wait_ready("mlp", body={"json": SAMPLE})
    for _ in range(3):
        assert s.post("/predictions/mlp", json=SAMPLE).status_code == 200
    assert s.post("/predictions/mlp/1.0", json=SAMPLE).status_code == 200
    text = metrics_text(s)
    fams = families(text)
    for name in ("HandlerTime", "PredictionTime"):
        (smp,) = fams[name].samples
        assert smp.labels.keys() == {"ModelName", "Level", "Hostname"}, smp.labels
        assert smp.labels["ModelName"] == "mlp" and smp.labels["Level"] == "Model"
        assert smp.value > 0
    assert re.search(r'^HandlerTime\{ModelName="mlp",Level="Model",Hostname="[^"]+",\} ', text,
                     re.M), text
    reqs = {x.labels["model_version"]: x.value for x in fams["ts_inference_requests"].samples}
    assert reqs == {"default": 4.0, "1.0": 1.0}, reqs  # the warm-up request is unversioned too
    lat = {x.labels["model_version"] for x in fams["ts_inference_latency_microseconds"].samples}
    assert lat == {"default", "1.0"}


# ---- 10: the log files TorchServe's tools read ----

def test_metrics_mode_log_prefix_and_model_metrics_log(server_factory):
    s = server_factory(models=["mlp"], config={"metrics_mode": "log", "metric_time_interval": 1})
    s.wait_ready("mlp", body={"json": SAMPLE})
    n = 5
    for _ in range(n):
        assert s.post("/predictions/mlp", json=SAMPLE, headers={"x-request-id": "r-x"}).ok
    logs = os.path.join(s.tmp, "logs")
    mm_path, ts_path = os.path.join(logs, "model_metrics.log"), os.path.join(logs, "ts_metrics.log")

    def lines(path, name):
        if not os.path.exists(path):
            return []
        return [ln for ln in open(path).read().splitlines() if f" - {name}." in ln]

    pred = wait_for(lambda: len(lines(mm_path, "PredictionTime")) >= n + 1 and
                    lines(mm_path, "PredictionTime"))
    assert pred, open(mm_path).read() if os.path.exists(mm_path) else "no model_metrics.log"
    pat = re.compile(ISO + r"PredictionTime\.ms:([0-9.]+)\|#ModelName:mlp,Level:Model\|"
                     r"#hostname:[^,]+,requestID:([^,]+),timestamp:\d+$")
    for ln in pred:
        m = pat.match(ln)
        assert m, ln
        # TorchServe's benchmark-ab (benchmarks/utils/reporting.py) takes the value this way
        assert float(ln.split("|")[0].split(":")[3].strip()) == float(m[1])
    assert any(pat.match(ln)[2] == "r-x" for ln in pred)
    assert lines(mm_path, "HandlerTime")
    # the frontend's metrics: ts_metrics.log, the same prefix, and no model metrics there
    reqs = wait_for(lambda: lines(ts_path, "Requests2XX"))
    assert reqs and all(re.match(ISO + r"Requests2XX\.Count:[0-9.]+\|#Level:Host\|#hostname:",
                                 ln) for ln in reqs), reqs
    assert not lines(ts_path, "PredictionTime")
    assert "model_metrics.log" in s.get("/metrics", api="metrics").text


# ---- 7 and 8: metrics.yaml and the metrics cache API ----

MNIST_MODEL = '''
import torch
import torch.nn.functional as F
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, 1)
        self.fc1 = nn.Linear(8 * 13 * 13, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        return F.log_softmax(self.fc1(torch.flatten(x, 1)), dim=1)
'''

# examples/custom_metrics/mnist_handler.py's calls, written against the contract
CUSTOM_METRICS_HANDLER = '''
import time

from torchvision import transforms

from ts.metrics.dimension import Dimension
from ts.metrics.metric_type_enum import MetricTypes
from ts.torch_handler.image_classifier import ImageClassifier


class MNISTDigitClassifier(ImageClassifier):
    image_processing = transforms.Compose(
        [transforms.ToTensor(), transforms.Normalize((0.1307,), (0.3081,))])

    def initialize(self, context):
        super().initialize(context)
        metrics = context.metrics
        self.inf_request_count = metrics.add_metric_to_cache(
            metric_name="InferenceRequestCount", unit="count", dimension_names=[],
            metric_type=MetricTypes.COUNTER)
        metrics.add_metric_to_cache(
            metric_name="PreprocessCallCount", unit="count", dimension_names=["ModelName"],
            metric_type=MetricTypes.COUNTER)
        metrics.add_metric(name="InitializeCallCount", value=1, unit="count",
                           metric_type=MetricTypes.COUNTER)

    def preprocess(self, data):
        start = time.time()
        metrics = self.context.metrics
        self.inf_request_count.add_or_update(value=1, dimension_values=[])
        metrics.get_metric(metric_name="PreprocessCallCount",
                           metric_type=MetricTypes.COUNTER).add_or_update(
            value=1, dimension_values=[self.context.model_name])
        metrics.get_metric(metric_name="RequestBatchSize",
                           metric_type=MetricTypes.GAUGE).add_or_update(
            value=len(data), dimension_values=[self.context.model_name])
        body = data[0].get("body")
        metrics.add_size(name="SizeOfImage", value=len(body) / 1024, idx=None, unit="kB")
        out = ImageClassifier.preprocess(self, data)
        metrics.add_time(name="HandlerMethodTime", value=(time.time() - start) * 1000, idx=None,
                         unit="ms", dimensions=[Dimension(name="MethodName", value="preprocess")],
                         metric_type=MetricTypes.GAUGE)
        return out

    def postprocess(self, data):
        self.context.metrics.add_counter(name="PostprocessCallCount", value=1, idx=None,
                                         dimensions=[])
        self.context.metrics.add_percent(name="ExamplePercentMetric", value=50, idx=None,
                                         dimensions=[], metric_type=MetricTypes.HISTOGRAM)
        return data.argmax(1).flatten().tolist()
'''

# examples/custom_metrics/metrics.yaml's model_metrics (HandlerMethodTime and
# ExamplePercentMetric left out, as there, for auto-detection), and two of its ts_metrics
METRICS_YAML = '''dimensions:
  - &model_name "ModelName"
  - &level "Level"
  - &hostname "Hostname"

ts_metrics:
  counter:
    - name: Requests2XX
      unit: Count
      dimensions: [*level, *hostname]
    - name: ts_inference_requests_total
      unit: Count
      dimensions: ["model_name", "model_version", "hostname"]
  gauge:
    - name: CPUUtilization
      unit: Percent
      dimensions: [*level, *hostname]

model_metrics:
  counter:
    - name: InferenceRequestCount
      unit: count
      dimensions: []
    - name: InitializeCallCount
      unit: count
      dimensions: [*model_name, *level]
    - name: PreprocessCallCount
      unit: count
      dimensions: [*model_name]
    - name: PostprocessCallCount
      unit: CallCount
      dimensions: [*model_name, *level]
  gauge:
    - name: HandlerTime
      unit: ms
      dimensions: [*model_name, *level]
    - name: PredictionTime
      unit: ms
      dimensions: [*model_name, *level]
    - name: RequestBatchSize
      unit: count
      dimensions: ["ModelName"]
    - name: SizeOfImage
      unit: kB
      dimensions: [*model_name, *level]
'''


def mnist_store(tmp_path):
    import importlib.util
    d = tmp_path / "store" / "mnist"
    (d / "MAR-INF").mkdir(parents=True)
    (d / "mnist.py").write_text(MNIST_MODEL)
    (d / "mnist_handler.py").write_text(CUSTOM_METRICS_HANDLER)
    spec = importlib.util.spec_from_file_location("mnist_model_def", d / "mnist.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    torch.manual_seed(0)
    net = mod.Net()
    torch.save(net.state_dict(), d / "mnist_cnn.pt")
    (d / "MAR-INF" / "MANIFEST.json").write_text(json.dumps({"runtime": "python", "model": {
        "modelName": "mnist", "serializedFile": "mnist_cnn.pt", "modelFile": "mnist.py",
        "handler": "mnist_handler.py", "modelVersion": "1.0"}}))
    return str(tmp_path / "store"), net.eval()


def digit_png(seed):
    g = torch.Generator().manual_seed(seed)
    img = (torch.rand(28, 28, generator=g) * 255).to(torch.uint8)
    buf = io.BytesIO()
    Image.fromarray(img.numpy(), "L").save(buf, "PNG")
    return buf.getvalue()


@pytest.mark.parametrize("auto_detect", [True, False])
def test_custom_metrics_example_with_metrics_yaml(tmp_path, auto_detect):
    store, net = mnist_store(tmp_path)
    (tmp_path / "metrics.yaml").write_text(METRICS_YAML)
    srv = start_server(str(tmp_path), store=store, models=["mnist"], config={
        "metrics_config": str(tmp_path / "metrics.yaml"),
        "model_metrics_auto_detect": "true" if auto_detect else "false"})
    try:
        png = digit_png(1)
        deadline = time.time() + 60
        while True:
            r = srv.post("/predictions/mnist", data=png)
            if r.status_code == 200 or time.time() > deadline:
                break
            time.sleep(0.2)
        assert r.status_code == 200, r.text
        from torchvision import transforms
        x = transforms.Compose([transforms.ToTensor(), transforms.Normalize((0.1307,), (0.3081,))])(
            Image.open(io.BytesIO(png)))
        assert r.json() == int(net(x.unsqueeze(0)).argmax(1)[0])
        assert srv.post("/predictions/mnist", data=png).status_code == 200

        def ready():
            t = metrics_text(srv)
            return t if "PostprocessCallCount{" in t and "SizeOfImage{" in t else None
        text = wait_for(ready)
        assert text, metrics_text(srv)
        fams = families(text)
        host = r'Hostname="[^"]+",'
        # declared: the types, units and dimensions of metrics.yaml
        expect = {
            "InferenceRequestCount": ("counter", "count", r"InferenceRequestCount_total\{" + host +
                                      r"\} 2\.0"),
            "InitializeCallCount": ("counter", "count", r'InitializeCallCount_total\{ModelName='
                                    r'"mnist",Level="Model",' + host + r"\} 1\.0"),
            "PreprocessCallCount": ("counter", "count", r'PreprocessCallCount_total\{ModelName='
                                    r'"mnist",' + host + r"\} 2\.0"),
            "PostprocessCallCount": ("counter", "CallCount", r'PostprocessCallCount_total\{'
                                     r'ModelName="mnist",Level="Model",' + host + r"\} 2\.0"),
            "RequestBatchSize": ("gauge", "count", r'RequestBatchSize\{ModelName="mnist",' + host +
                                 r"\} 1\.0"),
            "SizeOfImage": ("gauge", "kB", r'SizeOfImage\{ModelName="mnist",Level="Model",' + host +
                            r"\} [0-9.]+"),
        }
        for name, (kind, unit, line) in expect.items():
            assert fams[name].type == kind, (name, fams[name].type)
            assert f"# HELP {name} Torchserve prometheus {kind} metric with unit: {unit}" in text
            assert re.search("^" + line.replace("_total", "") + "$", text, re.M) or \
                re.search("^" + line + "$", text, re.M), (name, text)
        assert float(fams["SizeOfImage"].samples[0].value) == pytest.approx(len(png) / 1024)
        # undeclared: registered when first reported only with auto-detection
        if auto_detect:
            assert re.search(r'^HandlerMethodTime\{MethodName="preprocess",ModelName="mnist",'
                             r'Level="Model",' + host + r"\} [0-9.]+$", text, re.M), text
            assert fams["ExamplePercentMetric"].type == "histogram"
            assert re.search(r'^ExamplePercentMetric_sum\{ModelName="mnist",Level="Model",' + host
                             + r"\} 100\.0", text, re.M), text
        else:
            assert "HandlerMethodTime" not in fams and "ExamplePercentMetric" not in fams
            assert "is not declared in metrics_config" in srv.log()
        # ts_metrics: the TorchServe-named frontend families it lists, and only those
        assert "Requests2XX" in fams and "ts_inference_requests" in fams
        assert "Requests4XX" not in fams and "QueueTime" not in fams
        assert "ts_queue_latency_microseconds" not in fams
        # system metrics are sampled (sys_metrics.c): CPUUtilization is served, and said so
        assert "CPUUtilization" in fams and "not collected" not in srv.log()
    finally:
        srv.stop()


@pytest.mark.parametrize("yaml_text,want", [
    ("model_metrics:\n  counter:\n    - name: A\n      unit: count\n  meter:\n    - name: B\n",
     ":5: model_metrics: metric type must be counter, gauge or histogram"),
    ("model_metrics:\n  gauge:\n    - unit: ms\n", ":3: metric: missing name"),
    ("model_metrics:\n  gauge:\n    - name: bad-name\n      unit: ms\n",
     ":3: metric name 'bad-name'"),
    ("model_metrics: [\n", ":2: "),
])
def test_bad_metrics_yaml_refuses_the_start(tmp_path, yaml_text, want):
    p = tmp_path / "metrics.yaml"
    p.write_text(yaml_text)
    with pytest.raises(AssertionError) as e:
        s = start_server(str(tmp_path), models=["mlp"], config={"metrics_config": str(p)})
        s.stop()
    assert f"metrics_config: {p}{want}" in str(e.value), str(e.value)


def test_metrics_yaml_controls_c_handler_metrics(server_factory, tmp_path):
    """identity_text's own metrics (ts_metric_add) and the step times follow metrics.yaml too:
    declared ones with their declared unit, undeclared ones dropped without auto-detection."""
    p = tmp_path / "metrics.yaml"
    p.write_text("model_metrics:\n  counter:\n    - name: StreamedWords\n      unit: Words\n"
                 "      dimensions: [ModelName, Level]\n  gauge:\n    - name: HandlerTime\n"
                 "      unit: ms\n      dimensions: [ModelName, Level]\n")
    s = server_factory(models=["identity_text"], config={"metrics_config": str(p)},
                       yaml={"identity_text": {"handler": {"delay_ms": 1}}})
    s.wait_ready("identity_text", body={"data": "a b c"})
    text = wait_for(lambda: (lambda t: t if "StreamedWords" in t else None)(metrics_text(s)))
    fams = families(text)
    assert "# HELP StreamedWords Torchserve prometheus counter metric with unit: Words" in text
    assert fams["StreamedWords"].samples[0].value == 3
    assert "HandlerTime" in fams
    assert "WordBytes" not in fams and "PredictionTime" not in fams
