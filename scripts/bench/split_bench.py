"""Batches split across idle workers (issue 37 point 1): N workers never slower than one.

Three tables, each from fresh torchserve-c instances and wrk (post.lua) in one run:

1. mlp (the TorchScript example), every batch configuration: workers 1 and 2 x batchSize 1 and
   8 (maxBatchDelay 5) at 8 and 32 connections, req/s, and the ratio of 2 workers to 1 at the
   same batchSize and connections ("N workers never slower than one": >= 1 within noise).
2. mlp 2 workers batchSize 8 at 32 connections against the ceiling, the bare libevent server of
   scripts/bench (trivial_server.c) measured right before and after it (target >= 0.8).
3. resnet18 behind the built-in image_classifier (model-store/resnet18.mar), a 640x480 JPEG:
   2 workers (1 intra-op thread each) at batchSize 1 and at batchSize 8 (maxBatchDelay 5, the
   example's), and 1 worker (2 threads) at batchSize 8, at 8, 16 and 32 connections: img/s,
   p50/p99, and the ratio of batchSize 8 to batchSize 1 on 2 workers (target >= 1 at each).

    /usr/bin/python3 scripts/bench/split_bench.py [BUILD_DIR]     (needs `make all models`, wrk)
Env: DURATION (seconds per wrk run, default 10; resnet runs take 2x), WARMUP (default 3),
SKIP ("mlp", "resnet": leave that part out), CONNS_MLP (default "8 32"),
CONNS_RESNET (default "8 16 32").
"""
import io
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.path.join(ROOT, sys.argv[1] if len(sys.argv) > 1 else "build")
DURATION = int(os.environ.get("DURATION", "10"))
WARMUP = int(os.environ.get("WARMUP", "3"))
SKIP = os.environ.get("SKIP", "").split()
CONNS_MLP = [int(c) for c in os.environ.get("CONNS_MLP", "8 32").split()]
CONNS_RESNET = [int(c) for c in os.environ.get("CONNS_RESNET", "8 16 32").split()]
# the same helpers as the resnet18 benchmark next to this file
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from resnet_bench import free_port, to_ms  # noqa: E402

LUA = os.path.join(ROOT, "scripts", "bench", "post.lua")
SAMPLE = os.path.join(ROOT, "scripts", "models", "mlp", "sample.json")


def ratio(a, b):
    return f"{a / b:.2f}" if b > 0 else "-"


def wrk(url, conns, seconds, body, ctype):
    """req/s, p50 ms, p99 ms, non-200 + timeouts."""
    env = dict(os.environ, BENCH_BODY=body, BENCH_CTYPE=ctype)
    threads = 2 if conns >= 2 else 1
    cmd = ["wrk", f"-t{threads}", f"-c{conns}", f"-d{seconds}s", "--timeout", "120s",
           "--latency", "-s", LUA, url]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
    rps = float(re.search(r"^Requests/sec:\s+([0-9.]+)", out, re.M).group(1))
    p50 = to_ms(re.search(r"^\s+50%\s+(\S+)", out, re.M).group(1))
    p99 = to_ms(re.search(r"^\s+99%\s+(\S+)", out, re.M).group(1))
    bad = int(re.search(r"^non200=(\d+)", out, re.M).group(1))
    m = re.search(r"Socket errors:.*timeout (\d+)", out)
    return rps, p50, p99, bad + (int(m.group(1)) if m else 0)


class Server:
    """A torchserve-c serving one model directory with the given model-config.yaml."""

    def __init__(self, name, model_dir, yaml, threads, probe_body, probe_ctype):
        self.dir = tempfile.mkdtemp(dir=WORK)
        store = os.path.join(self.dir, "store")
        shutil.copytree(model_dir, os.path.join(store, name))
        with open(os.path.join(store, name, "model-config.yaml"), "w") as f:
            f.write(yaml)
        ports = [free_port() for _ in range(5)]
        with open(os.path.join(self.dir, "config.properties"), "w") as f:
            f.write(f"inference_address=http://127.0.0.1:{ports[0]}\n"
                    f"management_address=http://127.0.0.1:{ports[1]}\n"
                    f"metrics_address=http://127.0.0.1:{ports[2]}\n"
                    f"grpc_inference_port={ports[3]}\ngrpc_management_port={ports[4]}\n"
                    f"disable_token_authorization=true\nworker_threads={threads}\n")
        self.log = open(os.path.join(self.dir, "server.log"), "w")
        self.proc = subprocess.Popen(
            [os.path.join(BUILD, "bin", "torchserve-c"), "--start", "--foreground",
             "--model-store", store, "--models", name, "--ts-config", "config.properties"],
            cwd=self.dir, stdout=self.log, stderr=self.log, env=dict(os.environ, TMPDIR=self.dir))
        self.url = f"http://127.0.0.1:{ports[0]}/predictions/{name}"
        workers = int(re.search(r"minWorkers: (\d+)", yaml).group(1))
        deadline = time.time() + 180
        while True:
            r = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-H",
                                f"Content-Type: {probe_ctype}", "--data-binary",
                                f"@{probe_body}", self.url], capture_output=True, text=True)
            kids = subprocess.run(["ps", "-o", "pid=", "--ppid", str(self.proc.pid)],
                                  capture_output=True, text=True).stdout.split()
            if r.stdout == "200" and len(kids) >= workers:
                break
            if time.time() > deadline or self.proc.poll() is not None:
                raise RuntimeError("server not ready:\n" + open(self.log.name).read()[-2000:])
            time.sleep(0.3)
        time.sleep(1)

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def extract(mar):
    d = os.path.join(WORK, os.path.basename(mar)[:-4])
    with zipfile.ZipFile(mar) as z:
        z.extractall(d)
    return d


def mlp_part():
    model = extract(os.path.join(ROOT, "model-store", "mlp.mar"))
    res = {}
    for workers in (1, 2):
        for batch in (1, 8):
            yaml = (f"minWorkers: {workers}\nmaxWorkers: {workers}\nbatchSize: {batch}\n"
                    f"maxBatchDelay: 5\nresponseTimeout: 120\nhandler:\n  input_shape: [64]\n")
            srv = Server("mlp", model, yaml, 1, SAMPLE, "application/json")
            try:
                for c in CONNS_MLP:
                    wrk(srv.url, c, WARMUP, SAMPLE, "application/json")
                    res[workers, batch, c] = wrk(srv.url, c, DURATION, SAMPLE, "application/json")
                    rps, p50, p99, bad = res[workers, batch, c]
                    print(f"== mlp workers {workers} batchSize {batch} c{c}: {rps:.0f} req/s  "
                          f"p50 {p50:.2f} ms  p99 {p99:.2f} ms  non-200 {bad}", flush=True)
            finally:
                srv.stop()
    print("\n| mlp | connections | 1 worker req/s | 2 workers req/s | 2 / 1 |")
    print("|---|---|---|---|---|")
    for batch in (1, 8):
        for c in CONNS_MLP:
            one, two = res[1, batch, c][0], res[2, batch, c][0]
            print(f"| batchSize {batch} | {c} | {one:.0f} | {two:.0f} | {ratio(two, one)} |")

    # the ceiling, right before and after 2 workers batchSize 8 at 32 connections
    exe = os.path.join(WORK, "trivial_server")
    subprocess.run(["gcc", "-O2", "-o", exe, os.path.join(ROOT, "scripts", "bench",
                                                          "trivial_server.c"), "-levent"],
                   check=True)
    port = free_port()
    triv = subprocess.Popen([exe, str(port)], stdout=subprocess.PIPE, text=True)
    triv.stdout.readline()
    turl = f"http://127.0.0.1:{port}/predictions/mlp"
    try:
        wrk(turl, 32, WARMUP, SAMPLE, "application/json")
        before = wrk(turl, 32, DURATION, SAMPLE, "application/json")[0]
        yaml = ("minWorkers: 2\nmaxWorkers: 2\nbatchSize: 8\nmaxBatchDelay: 5\n"
                "responseTimeout: 120\nhandler:\n  input_shape: [64]\n")
        srv = Server("mlp", model, yaml, 1, SAMPLE, "application/json")
        try:
            wrk(srv.url, 32, WARMUP, SAMPLE, "application/json")
            rps = wrk(srv.url, 32, DURATION, SAMPLE, "application/json")[0]
        finally:
            srv.stop()
        after = wrk(turl, 32, DURATION, SAMPLE, "application/json")[0]
    finally:
        triv.terminate()
        triv.wait()
    ceil = (before + after) / 2
    print(f"\nmlp 2 workers batchSize 8, 32 connections: {rps:.0f} req/s; ceiling (trivial "
          f"server) {before:.0f} before, {after:.0f} after: ratio {ratio(rps, ceil)} "
          f"(target >= 0.8)\n", flush=True)


def jpeg_640x480(path):
    from PIL import Image
    import torch
    g = torch.Generator().manual_seed(0)
    small = (torch.rand(3, 24, 32, generator=g) * 255).to(torch.uint8)
    img = Image.fromarray(small.permute(1, 2, 0).numpy(), "RGB").resize((640, 480),
                                                                          Image.BILINEAR)
    buf = io.BytesIO()
    img.save(buf, "JPEG", quality=90)
    with open(path, "wb") as f:
        f.write(buf.getvalue())


def resnet_part():
    model = extract(os.path.join(ROOT, "model-store", "resnet18.mar"))
    jpeg = os.path.join(WORK, "img.jpg")
    jpeg_640x480(jpeg)
    res = {}
    for workers, threads, batch in ((2, 1, 1), (2, 1, 8), (1, 2, 8)):
        yaml = (f"minWorkers: {workers}\nmaxWorkers: {workers}\nbatchSize: {batch}\n"
                f"maxBatchDelay: 5\nresponseTimeout: 120\n")
        srv = Server("resnet18", model, yaml, threads, jpeg, "image/jpeg")
        try:
            for c in CONNS_RESNET:
                wrk(srv.url, c, WARMUP, jpeg, "image/jpeg")
                res[workers, batch, c] = wrk(srv.url, c, 2 * DURATION, jpeg, "image/jpeg")
                rps, p50, p99, bad = res[workers, batch, c]
                print(f"== resnet18 workers {workers} threads {threads} batchSize {batch} "
                      f"c{c}: {rps:.1f} img/s  p50 {p50:.0f} ms  p99 {p99:.0f} ms  "
                      f"non-200 {bad}", flush=True)
        finally:
            srv.stop()
    print("\n| resnet18 640x480 | connections | 2w bs1 img/s | 2w bs8 img/s | bs8 / bs1 | "
          "1w bs8 img/s | 2w / 1w at bs8 |")
    print("|---|---|---|---|---|---|---|")
    for c in CONNS_RESNET:
        b1, b8, one = res[2, 1, c][0], res[2, 8, c][0], res[1, 8, c][0]
        print(f"| | {c} | {b1:.1f} | {b8:.1f} | {ratio(b8, b1)} | {one:.1f} | {ratio(b8, one)} |")


def main():
    for f in (os.path.join(BUILD, "bin", "torchserve-c"),
              os.path.join(ROOT, "model-store", "mlp.mar"),
              os.path.join(ROOT, "model-store", "resnet18.mar")):
        if not os.path.exists(f):
            sys.exit(f"split_bench: {f} missing: run make all models")
    if not shutil.which("wrk"):
        sys.exit("split_bench: wrk missing (scripts/install-deps.sh)")
    print(f"split_bench: {os.cpu_count()} cores, {DURATION} s per mlp run, "
          f"{2 * DURATION} s per resnet18 run", flush=True)
    if "mlp" not in SKIP:
        mlp_part()
    if "resnet" not in SKIP:
        resnet_part()


if __name__ == "__main__":
    WORK = tempfile.mkdtemp(prefix="tsc-split-bench-")
    try:
        main()
    finally:
        shutil.rmtree(WORK, ignore_errors=True)
