"""resnet18 + image_classifier serving throughput against "the limit" (issue 11).

The limit: the same handler (our ts.torch_handler.image_classifier.ImageClassifier, initialised
from model-store/resnet18.mar) running preprocess + forward on the 224x224 JPEG in a plain
Python loop, one image at a time, with 2 intra-op threads: nothing a server could remove. It is
measured before and after the server runs (the machine is shared and noisy), with OpenMP's
default wait policy and with OMP_WAIT_POLICY=PASSIVE (on a loaded 2-core machine spinning
OpenMP threads can run several times slower); the baseline is the mean of the better of the two,
and each serving figure is given as a ratio to it.

Serving: for each workers:threads:batchSize configuration, a fresh torchserve-c with the
archive's model-config.yaml rewritten (minWorkers = maxWorkers = workers, batchSize,
maxBatchDelay 10 ms) and worker_threads = threads (a "p" suffix: the server and so its
workers run with OMP_WAIT_POLICY=PASSIVE), then wrk with 8 connections POSTing the JPEG
(image/jpeg) for DURATION seconds after a warm-up. Reported: images/s, ratio to the limit, p50
and p99 latency, non-200 answers and timeouts (must be 0), and the RSS of each worker idle
(loaded, before traffic) and after the run.

    /usr/bin/python3 scripts/bench/resnet_bench.py [BUILD_DIR]
Env: DURATION (default 20), WARMUP (default 5), LIMIT_SECONDS (default 15),
CONFIGS (default "1:2:1 1:2:8 2:1:1 2:1:4 1:2:1p 1:2:8p").
"""
import io
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.path.join(ROOT, sys.argv[1] if len(sys.argv) > 1 else "build")
MAR = os.path.join(ROOT, "model-store", "resnet18.mar")
DURATION = int(os.environ.get("DURATION", "20"))
WARMUP = int(os.environ.get("WARMUP", "5"))
LIMIT_SECONDS = float(os.environ.get("LIMIT_SECONDS", "15"))
CONFIGS = os.environ.get("CONFIGS", "1:2:1 1:2:8 2:1:1 2:1:4 1:2:1p 1:2:8p").split()


def jpeg_224():
    from PIL import Image
    import torch
    g = torch.Generator().manual_seed(0)
    small = (torch.rand(3, 16, 16, generator=g) * 255).to(torch.uint8)
    img = Image.fromarray(small.permute(1, 2, 0).numpy(), "RGB").resize((224, 224),
                                                                          Image.BILINEAR)
    buf = io.BytesIO()
    img.save(buf, "JPEG", quality=90)
    return buf.getvalue()


def measure_limit(model_dir, passive):
    """Runs in a child process so that its threads and memory are gone before serving."""
    code = f"""
import json, sys, time, torch
sys.path[:0] = [{os.path.join(BUILD, "lib", "python")!r}, {model_dir!r}]
torch.set_num_threads(2)
from ts.context import Context
from ts.torch_handler.image_classifier import ImageClassifier
manifest = json.load(open({os.path.join(model_dir, "MAR-INF", "MANIFEST.json")!r}))
ctx = Context("resnet18", {model_dir!r}, manifest, 1, None, "bench")
h = ImageClassifier()
h.initialize(ctx)
jpeg = open(sys.argv[1], "rb").read()
def one():
    x = h.preprocess([{{"body": jpeg}}])
    with torch.inference_mode():
        h.model(x)
for _ in range(5):
    one()
n, t0 = 0, time.perf_counter()
while time.perf_counter() - t0 < {LIMIT_SECONDS}:
    one()
    n += 1
print(n / (time.perf_counter() - t0))
"""
    path = os.path.join(WORK, "img.jpg")
    env = dict(os.environ)
    env.pop("OMP_WAIT_POLICY", None)
    if passive:
        env["OMP_WAIT_POLICY"] = "PASSIVE"
    out = subprocess.run(["/usr/bin/python3", "-c", code, path], capture_output=True, text=True,
                         check=True, env=env)
    return float(out.stdout.strip().splitlines()[-1])


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def rss_kb(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            m = re.search(r"^VmRSS:\s+(\d+)", f.read(), re.M)
            return int(m.group(1)) if m else 0
    except OSError:
        return 0


def worker_pids(ppid):
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(ppid)], capture_output=True,
                         text=True).stdout
    return [int(p) for p in out.split()]


def to_ms(v):
    n = float(re.match(r"[0-9.]+", v).group(0))
    if v.endswith("us"):
        return n / 1000
    if v.endswith("ms"):
        return n
    return n * 1000


def serve(model_dir, jpeg_path, workers, threads, batch, passive):
    d = tempfile.mkdtemp(dir=WORK)
    store = os.path.join(d, "store")
    shutil.copytree(model_dir, os.path.join(store, "resnet18"))
    with open(os.path.join(store, "resnet18", "model-config.yaml"), "w") as f:
        f.write(f"minWorkers: {workers}\nmaxWorkers: {workers}\nbatchSize: {batch}\n"
                "maxBatchDelay: 10\n")
    ports = [free_port() for _ in range(5)]
    with open(os.path.join(d, "config.properties"), "w") as f:
        f.write(f"inference_address=http://127.0.0.1:{ports[0]}\n"
                f"management_address=http://127.0.0.1:{ports[1]}\n"
                f"metrics_address=http://127.0.0.1:{ports[2]}\n"
                f"grpc_inference_port={ports[3]}\ngrpc_management_port={ports[4]}\n"
                f"disable_token_authorization=true\nworker_threads={threads}\n"
                f"default_workers_per_model={workers}\n")
    log = open(os.path.join(d, "server.log"), "w")
    senv = dict(os.environ)
    senv.pop("OMP_WAIT_POLICY", None)
    if passive:
        senv["OMP_WAIT_POLICY"] = "PASSIVE"
    proc = subprocess.Popen([os.path.join(BUILD, "bin", "torchserve-c"), "--start",
                             "--foreground", "--model-store", store, "--models", "resnet18",
                             "--ts-config", "config.properties"], cwd=d, stdout=log, stderr=log,
                            env=senv)
    url = f"http://127.0.0.1:{ports[0]}/predictions/resnet18"
    try:
        deadline = time.time() + 120
        while True:
            r = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-T",
                                jpeg_path, url], capture_output=True, text=True)
            if r.stdout == "200":
                break
            if time.time() > deadline or proc.poll() is not None:
                raise RuntimeError("server not ready:\n" + open(log.name).read()[-2000:])
            time.sleep(0.5)
        # every worker loaded: as many distinct pids as workers
        while len(worker_pids(proc.pid)) < workers and time.time() < deadline:
            time.sleep(0.2)
        time.sleep(1)
        idle = [rss_kb(p) for p in worker_pids(proc.pid)]
        env = dict(os.environ, BENCH_BODY=jpeg_path, BENCH_CTYPE="image/jpeg")
        lua = os.path.join(ROOT, "scripts", "bench", "post.lua")
        # --timeout: wrk's default 2 s would drop slow answers from the latency figures and
        # reconnect, which cancels the request in the server
        wrk = ["wrk", "-t1", "-c8", "--timeout", "120s", "-s", lua]
        subprocess.run(wrk + [f"-d{WARMUP}s", url], env=env, capture_output=True, check=True)
        out = subprocess.run(wrk + [f"-d{DURATION}s", "--latency", url], env=env,
                             capture_output=True, text=True, check=True).stdout
        after = [rss_kb(p) for p in worker_pids(proc.pid)]
        rps = float(re.search(r"^Requests/sec:\s+([0-9.]+)", out, re.M).group(1))
        p50 = to_ms(re.search(r"^\s+50%\s+(\S+)", out, re.M).group(1))
        p99 = to_ms(re.search(r"^\s+99%\s+(\S+)", out, re.M).group(1))
        bad = int(re.search(r"^non200=(\d+)", out, re.M).group(1))
        m = re.search(r"Socket errors:.*timeout (\d+)", out)
        bad += int(m.group(1)) if m else 0
        return rps, p50, p99, bad, idle, after
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def main():
    for f in (MAR, os.path.join(BUILD, "bin", "torchserve-c"),
              os.path.join(BUILD, "lib", "libts_python.so")):
        if not os.path.exists(f):
            sys.exit(f"resnet_bench: {f} missing: run make all models")
    if not shutil.which("wrk"):
        sys.exit("resnet_bench: wrk missing (scripts/install-deps.sh)")
    model_dir = os.path.join(WORK, "resnet18")
    with zipfile.ZipFile(MAR) as z:
        z.extractall(model_dir)
    jpeg = jpeg_224()
    jpeg_path = os.path.join(WORK, "img.jpg")
    with open(jpeg_path, "wb") as f:
        f.write(jpeg)
    print(f"resnet_bench: 224x224 JPEG of {len(jpeg)} bytes, 8 connections, {DURATION} s per run")
    def limits(when):
        spin, passive = measure_limit(model_dir, False), measure_limit(model_dir, True)
        print(f"== limit {when} (handler preprocess + forward, Python loop, 2 threads): "
              f"{spin:.1f} img/s, with OMP_WAIT_POLICY=PASSIVE {passive:.1f} img/s", flush=True)
        return max(spin, passive)

    before = limits("before")
    rows = []
    for cfg in CONFIGS:
        passive = cfg.endswith("p")
        w, t, b = (int(x) for x in cfg.rstrip("p").split(":"))
        rps, p50, p99, bad, idle, after = serve(model_dir, jpeg_path, w, t, b, passive)
        rows.append((cfg, rps, p50, p99, bad, idle, after))
        print(f"== workers {w} threads {t} batchSize {b}{' passive' if passive else ''}: "
              f"{rps:.1f} img/s  p50 {p50:.1f} ms  "
              f"p99 {p99:.1f} ms  non-200 {bad}  worker RSS idle {idle} kB, after {after} kB",
              flush=True)
    after_limit = limits("after")
    limit = (before + after_limit) / 2
    print(f"== baseline (mean of the better limits): {limit:.1f} img/s")
    print()
    print("| workers:threads:batch | img/s | ratio to limit | p50 ms | p99 ms | non-200 |"
          " worker RSS idle -> after (MB) |")
    print("|---|---|---|---|---|---|---|")
    for cfg, rps, p50, p99, bad, idle, after in rows:
        mem = ", ".join(f"{i / 1024:.0f} -> {a / 1024:.0f}" for i, a in zip(idle, after))
        print(f"| {cfg} | {rps:.1f} | {rps / limit:.3f} | {p50:.1f} | {p99:.1f} | {bad} | {mem} |")
    best = max(rows, key=lambda r: r[1])
    print(f"\nbest: {best[0]} at {best[1] / limit:.3f} of the limit ({json.dumps(CONFIGS)} tried)")


if __name__ == "__main__":
    WORK = tempfile.mkdtemp(prefix="tsc-resnet-bench-")
    try:
        main()
    finally:
        shutil.rmtree(WORK, ignore_errors=True)
