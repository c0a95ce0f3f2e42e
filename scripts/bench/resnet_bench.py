"""resnet18 + image_classifier, 640x480 JPEG, serving throughput against the plain eager loop
(issues 11 and 37).

The limit: TorchServe's work with nothing around it, in a plain Python loop, one image at a
time: PIL decode, image_processing (Resize 256, CenterCrop 224, ToTensor, Normalize) and the
eager forward (the archive's model.py and weights, not optimized) -- what TorchServe itself
reaches about 0.97 of. On both cores, the better of two ways: one loop with 2 intra-op
threads, and two loops of one thread each running at the same time (their sum). Measured
before and after the serving runs (the machine is shared), with OpenMP's default wait policy;
the limit is the mean of the two.

Serving: for each configuration workers:threads:batch[:optimize[:decode]] a fresh
torchserve-c serving a copy of the archive with minWorkers = maxWorkers = workers,
batchSize, maxBatchDelay (MAX_DELAY ms), worker_threads = threads and model-config.yaml's
handler.optimize (default inference) and handler.decode (default auto); then, for each
connection count, wrk POSTing the JPEG (image/jpeg) for DURATION seconds after a warm-up.
Reported per run: images/s and its ratio to the limit, p50 and p99 latency, non-200 answers
and timeouts (must be 0), CPU per image (frontend + workers, from /proc, over the measured
run), and the top-5 drift of the served answer from TorchServe's path computed here (the
largest probability difference over its five classes, and whether the five labels and their
order are the same). The first configuration, 2:1:1:none:pil, is TorchServe's default shape
(two workers of one thread, no batching, eager, PIL): the p99 the others must not exceed.

    /usr/bin/python3 scripts/bench/resnet_bench.py [BUILD_DIR]
Env: DURATION (default 20), WARMUP (default 5), LIMIT_SECONDS (default 15), CONNS
(default "8 32"), MAX_DELAY (default 5), CONFIGS (default
"2:1:1:none:pil 2:1:1 2:1:4 2:1:8 1:2:1 1:2:8").
"""
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
CONNS = [int(c) for c in os.environ.get("CONNS", "8 32").split()]
MAX_DELAY = int(os.environ.get("MAX_DELAY", "5"))
CONFIGS = os.environ.get("CONFIGS", "2:1:1:none:pil 2:1:1 2:1:4 2:1:8 1:2:1 1:2:8").split()

LOOP = """
import io, json, sys, time, torch
from PIL import Image
sys.path[:0] = [sys.argv[2]]
torch.set_num_threads(int(sys.argv[3]))
from model import ResNet18
from ts.torch_handler.image_classifier import ImageClassifier
net = ResNet18()
net.load_state_dict(torch.load(sys.argv[2] + "/resnet18.pt"))
net.eval()
tf = ImageClassifier.image_processing
jpeg = open(sys.argv[1], "rb").read()
def one():
    x = torch.stack([tf(Image.open(io.BytesIO(jpeg)))])
    with torch.no_grad():
        net(x)
for _ in range(5):
    one()
n, t0, c0 = 0, time.perf_counter(), time.process_time()
while time.perf_counter() - t0 < float(sys.argv[4]):
    one()
    n += 1
print(n / (time.perf_counter() - t0), (time.process_time() - c0) / n * 1000)
"""


def loop_rate(model_dir, jpeg_path, threads, procs):
    """img/s of `procs` eager loops of `threads` intra-op threads each, run side by side, and
    their CPU ms per image."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads),
               PYTHONPATH=os.path.join(BUILD, "lib", "python"))
    ps = [subprocess.Popen(["/usr/bin/python3", "-c", LOOP, jpeg_path, model_dir, str(threads),
                            str(LIMIT_SECONDS)], stdout=subprocess.PIPE, text=True, env=env)
          for _ in range(procs)]
    out = [p.communicate()[0].strip().splitlines()[-1].split() for p in ps]
    return sum(float(o[0]) for o in out), sum(float(o[1]) for o in out) / len(out)


def reference(model_dir, jpeg):
    """TorchServe's answer for the image: all 1000 probabilities (eager, PIL)."""
    import io
    import torch
    from PIL import Image
    sys.path[:0] = [os.path.join(BUILD, "lib", "python"), model_dir]
    from model import ResNet18
    from ts.torch_handler.image_classifier import ImageClassifier
    net = ResNet18()
    net.load_state_dict(torch.load(os.path.join(model_dir, "resnet18.pt")))
    net.eval()
    with open(os.path.join(model_dir, "index_to_name.json")) as f:
        labels = {int(k): v[-1] for k, v in json.load(f).items()}
    x = torch.stack([ImageClassifier.image_processing(Image.open(io.BytesIO(jpeg)))])
    with torch.no_grad():
        return torch.softmax(net(x), dim=1)[0], labels


def drift(answer, ref, labels):
    import torch
    top = torch.topk(ref, 5).indices.tolist()
    want = [labels[i] for i in top]
    by_label = {v: k for k, v in labels.items()}
    worst = max(abs(p - float(ref[by_label[k]])) for k, p in answer.items())
    return worst, list(answer) == want


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def cpu_s(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except OSError:
        return 0.0


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


def wrk(url, jpeg_path, conns, seconds, latency):
    env = dict(os.environ, BENCH_BODY=jpeg_path, BENCH_CTYPE="image/jpeg")
    lua = os.path.join(ROOT, "scripts", "bench", "post.lua")
    # --timeout: wrk's default 2 s would drop slow answers from the latency figures and
    # reconnect, which cancels the request in the server
    cmd = ["wrk", "-t1", f"-c{conns}", "--timeout", "120s", "-s", lua, f"-d{seconds}s"]
    if latency:
        cmd.append("--latency")
    return subprocess.run(cmd + [url], env=env, capture_output=True, text=True,
                          check=True).stdout


def serve(model_dir, jpeg_path, cfg, ref, labels):
    parts = cfg.split(":")
    workers, threads, batch = (int(x) for x in parts[:3])
    optimize = parts[3] if len(parts) > 3 else "inference"
    decode = parts[4] if len(parts) > 4 else "auto"
    d = tempfile.mkdtemp(dir=WORK)
    store = os.path.join(d, "store")
    shutil.copytree(model_dir, os.path.join(store, "resnet18"))
    with open(os.path.join(store, "resnet18", "model-config.yaml"), "w") as f:
        f.write(f"minWorkers: {workers}\nmaxWorkers: {workers}\nbatchSize: {batch}\n"
                f"maxBatchDelay: {MAX_DELAY}\nhandler:\n  optimize: {optimize}\n"
                f"  decode: {decode}\n")
    ports = [free_port() for _ in range(5)]
    with open(os.path.join(d, "config.properties"), "w") as f:
        f.write(f"inference_address=http://127.0.0.1:{ports[0]}\n"
                f"management_address=http://127.0.0.1:{ports[1]}\n"
                f"metrics_address=http://127.0.0.1:{ports[2]}\n"
                f"grpc_inference_port={ports[3]}\ngrpc_management_port={ports[4]}\n"
                f"disable_token_authorization=true\nworker_threads={threads}\n"
                f"default_workers_per_model={workers}\njob_queue_size=1000\n")
    log = open(os.path.join(d, "server.log"), "w")
    proc = subprocess.Popen([os.path.join(BUILD, "bin", "torchserve-c"), "--start",
                             "--foreground", "--model-store", store, "--models", "resnet18",
                             "--ts-config", "config.properties"], cwd=d, stdout=log, stderr=log)
    url = f"http://127.0.0.1:{ports[0]}/predictions/resnet18"
    rows = []
    try:
        deadline = time.time() + 180
        while True:
            r = subprocess.run(["curl", "-s", "-w", "\n%{http_code}", "-H",
                                "Content-Type: image/jpeg", "--data-binary", "@" + jpeg_path,
                                url], capture_output=True, text=True)
            body, _, code = r.stdout.rpartition("\n")
            if code == "200":
                break
            if time.time() > deadline or proc.poll() is not None:
                raise RuntimeError("server not ready:\n" + open(log.name).read()[-2000:])
            time.sleep(0.5)
        while len(worker_pids(proc.pid)) < workers and time.time() < deadline:
            time.sleep(0.2)
        worst, same = drift(json.loads(body), ref, labels)
        for conns in CONNS:
            wrk(url, jpeg_path, conns, WARMUP, False)
            pids = [proc.pid] + worker_pids(proc.pid)
            c0 = sum(cpu_s(p) for p in pids)
            out = wrk(url, jpeg_path, conns, DURATION, True)
            c1 = sum(cpu_s(p) for p in pids)
            n = int(re.search(r"(\d+) requests in", out).group(1))
            rps = float(re.search(r"^Requests/sec:\s+([0-9.]+)", out, re.M).group(1))
            p50 = to_ms(re.search(r"^\s+50%\s+(\S+)", out, re.M).group(1))
            p99 = to_ms(re.search(r"^\s+99%\s+(\S+)", out, re.M).group(1))
            bad = int(re.search(r"^non200=(\d+)", out, re.M).group(1))
            m = re.search(r"Socket errors:.*timeout (\d+)", out)
            bad += int(m.group(1)) if m else 0
            rows.append((cfg, conns, rps, p50, p99, bad, (c1 - c0) / max(n, 1) * 1000, worst,
                         same))
            print(f"== {cfg} c{conns}: {rps:.1f} img/s p50 {p50:.1f} ms p99 {p99:.1f} ms "
                  f"non-200 {bad} CPU {(c1 - c0) / max(n, 1) * 1000:.1f} ms/img", flush=True)
        return rows
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
    sys.path.insert(0, os.path.join(ROOT, "scripts", "bench"))
    from vision_decode_drift import jpeg as make_jpeg
    jpeg = make_jpeg(640, 480, 37)
    jpeg_path = os.path.join(WORK, "img.jpg")
    with open(jpeg_path, "wb") as f:
        f.write(jpeg)
    ref, labels = reference(model_dir, jpeg)
    print(f"resnet_bench: 640x480 JPEG of {len(jpeg)} bytes, connections {CONNS}, "
          f"{DURATION} s per run, maxBatchDelay {MAX_DELAY} ms")

    def limits(when):
        (one2, c2), (two1, c1) = (loop_rate(model_dir, jpeg_path, 2, 1),
                                  loop_rate(model_dir, jpeg_path, 1, 2))
        print(f"== eager loop {when}: one loop of 2 threads {one2:.1f} img/s ({c2:.1f} CPU ms/img),"
              f" two loops of 1 thread {two1:.1f} img/s ({c1:.1f} CPU ms/img)", flush=True)
        return max(one2, two1)

    before = limits("before")
    rows = []
    for cfg in CONFIGS:
        rows += serve(model_dir, jpeg_path, cfg, ref, labels)
    limit = (before + limits("after")) / 2
    print(f"== limit (mean of the better eager loops): {limit:.1f} img/s")
    print()
    print("| workers:threads:batch[:optimize:decode] | conns | img/s | ratio to limit | p50 ms |"
          " p99 ms | non-200 | CPU ms/img | top-5 drift | same top 5 |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for cfg, conns, rps, p50, p99, bad, cpu, worst, same in rows:
        print(f"| {cfg} | {conns} | {rps:.1f} | {rps / limit:.3f} | {p50:.1f} | {p99:.1f} | "
              f"{bad} | {cpu:.1f} | {worst:.1e} | {'yes' if same else 'NO'} |")
    for conns in CONNS:
        mine = [r for r in rows if r[1] == conns]
        best = max(mine, key=lambda r: r[2])
        base = mine[0]
        print(f"\nc{conns}: best {best[0]} at {best[2] / limit:.3f} of the limit (target 1.25), "
              f"p99 {best[4]:.1f} ms against {base[4]:.1f} ms for {base[0]}")


if __name__ == "__main__":
    WORK = tempfile.mkdtemp(prefix="tsc-resnet-bench-")
    try:
        main()
    finally:
        shutil.rmtree(WORK, ignore_errors=True)
