"""Devices on a host without a GPU (issue 32): what a TorchServe user's GPU settings do here.

number_of_gpu is capped at the GPUs the host shows (none: NVML is not there), as TorchServe caps
it; a model whose model-config.yaml asks for deviceType gpu runs on the CPU, as TorchServe's
Model decides, with a log line that says so; deviceIds naming a GPU the host lacks are dropped
with TorchServe's warning; describe shows what was decided. The start-up log names the Python
and, from the first worker, the libtorch. TorchServe's system metrics are served, and none for
a GPU. handler.cuda_graph on a model on the CPU serves eagerly and says why. (The same on a GPU
host: tests/gpu/.)
"""
import os
import re
import shutil
import sys
import time

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from conftest import mar_module  # noqa: E402

X = [0.5 - i / 64 for i in range(64)]


def expected():
    import torch
    with torch.no_grad():
        return mar_module("mlp")(torch.tensor([X])).tolist()[0]


def assert_close(got, want, tol=1e-5):
    assert len(got) == len(want), (got, want)
    assert all(abs(a - b) <= tol for a, b in zip(got, want)), (got, want)


def describe(srv, model="mlp"):
    r = srv.get(f"/models/{model}", api="management")
    assert r.status_code == 200, r.text
    return r.json()[0]


def test_gpu_settings_on_a_host_without_gpus(server_factory):
    srv = server_factory(models=["mlp"], config={"number_of_gpu": 2},
                         yaml={"mlp": {"deviceType": "gpu", "deviceIds": [0]}})
    r = srv.wait_ready("mlp", body={"json": {"data": X}})
    assert_close(r.json(), expected())
    log = srv.log()
    assert "number_of_gpu=2, but 0 GPU(s) are visible: 0 used" in log, log
    assert re.search(r"Number of GPUs: 0 \(.*\): every model runs on the CPU", log), log
    assert ("model mlp: deviceType: gpu, but this server has no GPU (number_of_gpu=0, or none "
            "visible): its workers run on the CPU, as TorchServe's do; deviceIds: invalid "
            "deviceId 0 (this server has 0 GPU(s)): the list is ignored, as TorchServe ignores "
            "it") in log, log
    d = describe(srv)
    assert d["deviceType"] == "cpu"
    assert "deviceIds" not in d  # dropped, as TorchServe's Gson drops the null list
    (w,) = d["workers"]
    assert w["gpu"] is False and w["gpuUsage"] == "N/A"
    # the worker was sent gpu_id -1 and says so; the frontend logs its libtorch once
    assert re.search(r"W .* libtorch \d+\.\d+\.\d+ \(0 CUDA device\(s\)\); this worker runs on "
                     r"the CPU", log), log
    assert re.search(r"F .* workers: libtorch \d+\.\d+\.\d+, no CUDA \(the models run on the "
                     r"CPU\)", log), log
    assert "Python executable: /usr/bin/python3 (Python 3." in log, log


def test_device_type_cpu_and_number_of_gpu_zero_say_nothing(server_factory):
    srv = server_factory(models=["mlp"], config={"number_of_gpu": 0},
                         yaml={"mlp": {"deviceType": "cpu"}})
    srv.wait_ready("mlp", body={"json": {"data": X}})
    log = srv.log()
    assert "deviceType" not in log and "number_of_gpu=" not in log, log
    assert describe(srv)["deviceType"] == "cpu"


@pytest.mark.parametrize("yaml,msg", [
    ({"deviceType": "tpu"}, "deviceType: expected cpu or gpu, got 'tpu'"),
    ({"deviceIds": "0"}, "deviceIds: expected a list of GPU ids, got '0'"),
])
def test_a_device_setting_of_the_wrong_form_refuses_the_model(server_factory, yaml, msg):
    srv = server_factory(models=["mlp"], yaml={"mlp": yaml}, load=False,
                         config={"enable_model_api": "true"})
    r = srv.post("/models?url=mlp&initial_workers=1&synchronous=true", api="management")
    assert r.status_code == 400, r.text
    assert msg in r.json()["message"], r.text


def test_system_metrics(server_factory):
    """TorchServe's names, units (HELP) and dimensions; values as psutil would give them for
    this host; no GPU families without GPUs."""
    srv = server_factory(models=["mlp"], config={"metric_time_interval": 1})
    srv.wait_ready("mlp", body={"json": {"data": X}})
    time.sleep(1.5)  # a second sample: the CPU figure is the busy share between two
    text = srv.get("/metrics", api="metrics").text
    host = os.uname().nodename
    values = {}
    for name, unit in [("CPUUtilization", "Percent"), ("MemoryUsed", "Megabytes"),
                       ("MemoryAvailable", "Megabytes"), ("MemoryUtilization", "Percent"),
                       ("DiskUsage", "Gigabytes"), ("DiskAvailable", "Gigabytes"),
                       ("DiskUtilization", "Percent")]:
        assert f"# HELP {name} Torchserve prometheus gauge metric with unit: {unit}\n" \
               f"# TYPE {name} gauge\n" in text, text
        m = re.search(rf'^{name}{{Level="Host",Hostname="{re.escape(host)}",}} ([0-9.e+-]+)$',
                      text, re.M)
        assert m, (name, text)
        values[name] = float(m.group(1))
    assert "GPU" not in text
    assert 0 <= values["CPUUtilization"] <= 100
    meminfo = dict(line.split(":", 1) for line in open("/proc/meminfo"))
    avail = int(meminfo["MemAvailable"].split()[0]) / 1024
    assert abs(values["MemoryAvailable"] - avail) < max(0.2 * avail, 256), (values, avail)
    du = shutil.disk_usage("/")
    assert abs(values["DiskAvailable"] - du.free / 2**30) < 1, (values, du)
    assert abs(values["DiskUtilization"] - 100 * du.used / (du.used + du.free)) < 1, values
    # the name[] filter applies to them as to the others
    only = srv.get("/metrics?name[]=DiskUsage", api="metrics").text
    assert "DiskUsage{" in only and "CPUUtilization" not in only


def test_system_metrics_off_and_in_the_metrics_log(server_factory):
    srv = server_factory(models=["mlp"], config={"disable_system_metrics": "true"})
    srv.wait_ready("mlp", body={"json": {"data": X}})
    text = srv.get("/metrics", api="metrics").text
    assert "CPUUtilization" not in text and "DiskUsage" not in text, text
    srv = server_factory(models=["mlp"], config={"metrics_mode": "log",
                                                  "metric_time_interval": 1})
    srv.wait_ready("mlp", body={"json": {"data": X}})
    path = os.path.join(srv.tmp, "logs", "ts_metrics.log")
    deadline = time.time() + 10
    text = ""
    while time.time() < deadline and "DiskAvailable" not in text:
        time.sleep(0.3)
        text = open(path).read() if os.path.exists(path) else ""
    host = os.uname().nodename
    # each line after log4j's "%d{ISO8601} - ", as TorchServe writes them
    assert re.search(rf"^\S+ - CPUUtilization\.Percent:[0-9.]+\|#Level:Host\|#hostname:{host},"
                     r"timestamp:\d+$", text, re.M), text
    assert re.search(r"^\S+ - DiskAvailable\.Gigabytes:[0-9.]+\|#Level:Host\|", text, re.M), text


def test_cuda_graph_on_the_cpu_serves_eagerly_and_says_why(server_factory):
    srv = server_factory(models=["mlp"], yaml={"mlp": {"handler": {"cuda_graph": "true"}}})
    r = srv.wait_ready("mlp", body={"json": {"data": X}})
    assert_close(r.json(), expected())
    log = srv.log()
    assert "handler.cuda_graph: the model is on the CPU, not on a GPU; forward runs eagerly" \
        in log, log


def test_cuda_graph_needs_fixed_shapes(server_factory, tmp_path):
    from conftest import torchscript_store
    store = torchscript_store(tmp_path, "mlp", mar_module("mlp"),
                              "minWorkers: 1\nmaxWorkers: 1\nhandler:\n  cuda_graph: true\n")
    srv = server_factory(models=["mlp"], store=store, load=False,
                         config={"enable_model_api": "true"})
    r = srv.post("/models?url=mlp&initial_workers=1&synchronous=true", api="management")
    assert r.status_code == 500, r.text
    assert ("handler.cuda_graph: true needs handler.input_shape (a graph is captured for fixed "
            "shapes)") in r.json()["message"], r.text
