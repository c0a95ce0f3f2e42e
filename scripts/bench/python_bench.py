"""Python handler benchmark (issue 11). Prints figures; asserts nothing.

    /usr/bin/python3 scripts/bench/python_bench.py [BUILD_DIR]    (needs `make all models`, wrk)

mlp_py (the mlp TorchScript file behind a Python BaseHandler subclass) against mlp (the C
torchscript handler, same .pt), both served by one server with 1 worker each, for batchSize 1
and batchSize 8 (maxBatchDelay 5): wrk -t2 -c32 POSTing scripts/models/mlp/sample.json. Per run:
req/s and the worker's CPU per request (utime + stime deltas of /proc/<worker pid>/stat over the
run, divided by the requests wrk completed). The runs alternate C, Python, C, Python, ... for
ROUNDS rounds (the machine is shared and noisy), and the added CPU per request is the Python
run's minus the mean of the C runs around it. Also: the Python worker's RSS idle (after one
warm-up request) and after the runs.

Env: DURATION (seconds per wrk run, default 8), ROUNDS (default 3).
"""
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if len(sys.argv) > 1:
    os.environ["TS_BUILD"] = sys.argv[1]
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
from conftest import MODEL_STORE, start_server  # noqa: E402

DURATION = int(os.environ.get("DURATION", "8"))
ROUNDS = int(os.environ.get("ROUNDS", "3"))
BODY = os.path.join(ROOT, "scripts", "models", "mlp", "sample.json")
LUA = os.path.join(ROOT, "scripts", "bench", "post.lua")
TICK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid):
    with open(f"/proc/{pid}/stat") as f:
        st = f.read().rsplit(")", 1)[1].split()
    return (int(st[11]) + int(st[12])) / TICK


def rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def worker_pid(srv, model):
    (w,) = srv.get(f"/models/{model}", api="management").json()[0]["workers"]
    return w["pid"]


def store_for(tmp, batch):
    store = os.path.join(tmp, "store")
    for m in ("mlp", "mlp_py"):
        d = os.path.join(store, m)
        with zipfile.ZipFile(os.path.join(MODEL_STORE, f"{m}.mar")) as z:
            z.extractall(d)
        with open(os.path.join(d, "model-config.yaml"), "w") as f:
            f.write(f"minWorkers: 1\nmaxWorkers: 1\nbatchSize: {batch}\nmaxBatchDelay: 5\n"
                    "responseTimeout: 120\n")
            if m == "mlp":
                f.write("handler:\n  input_shape: [64]\n")
    return store


def wrk(port, model):
    env = dict(os.environ, BENCH_BODY=BODY)
    out = subprocess.run(["wrk", "-t2", "-c32", f"-d{DURATION}s", "--latency", "-s", LUA,
                          f"http://127.0.0.1:{port}/predictions/{model}"],
                         capture_output=True, text=True, env=env, check=True).stdout
    n = int(re.search(r"(\d+) requests in", out).group(1))
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    bad = int(re.search(r"non200=(\d+)", out).group(1))
    return n, rps, bad


def run(srv, model, pid):
    c0 = cpu_s(pid)
    n, rps, bad = wrk(srv.ports["inference"], model)
    us = (cpu_s(pid) - c0) * 1e6 / max(n, 1)
    return rps, us, bad


def main():
    body = json.load(open(BODY))
    for batch in (1, 8):
        tmp = tempfile.mkdtemp(prefix="tsc-pybench-")
        srv = start_server(tmp, models=["mlp", "mlp_py"], store=store_for(tmp, batch))
        try:
            srv.wait_ready("mlp", body={"json": body})
            srv.wait_ready("mlp_py", body={"json": body})
            cpid, ppid = worker_pid(srv, "mlp"), worker_pid(srv, "mlp_py")
            idle = rss_mb(ppid)
            print(f"== batchSize {batch}: C worker RSS {rss_mb(cpid):.1f} MB, "
                  f"Python worker RSS idle {idle:.1f} MB")
            runs = [run(srv, "mlp", cpid)]
            for r in range(ROUNDS):
                runs.append(run(srv, "mlp_py", ppid))
                runs.append(run(srv, "mlp", cpid))
            added = []
            for k in range(ROUNDS):
                c_before, py, c_after = runs[2 * k], runs[2 * k + 1], runs[2 * k + 2]
                c_us = (c_before[1] + c_after[1]) / 2
                c_rps = (c_before[0] + c_after[0]) / 2
                added.append(py[1] - c_us)
                print(f"round {k + 1}: C {c_rps:8.0f} req/s {c_us:6.1f} us CPU/req | "
                      f"Python {py[0]:8.0f} req/s {py[1]:6.1f} us CPU/req | "
                      f"req/s ratio {py[0] / c_rps:.2f}, added {py[1] - c_us:+.1f} us/req "
                      f"(non-200: C {c_before[2]}+{c_after[2]}, Python {py[2]})")
            print(f"batchSize {batch}: Python adds {statistics.median(added):+.1f} us worker CPU "
                  f"per request (median of {ROUNDS} rounds); Python worker RSS after "
                  f"{rss_mb(ppid):.1f} MB")
        finally:
            srv.stop()
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
