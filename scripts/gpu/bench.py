"""The GPU benchmarks of issue 32 (reported, not tests), run by scripts/gpu/check.sh:

1. resnet18 behind TorchServe's image_classifier, a 640x480 JPEG per request, end to end: images/s
   and p50/p99 under wrk (64 connections; 8 with --quick), GPU utilisation while it runs (nvidia-smi), for each
   configuration workers:batchSize:maxBatchDelay:decode in RESNET_CONFIGS (decode: the image
   handlers' handler.decode, auto = nvjpeg on the GPU, or pil); and the limits they are
   measured against: PIL preprocessing (decode, Resize(256), CenterCrop(224), normalise) on one
   core times the cores, the same preprocessing on the device in one process (decode: device,
   the handler's own code), and the GPU forward at the batch size.
2. the mlp at batch 1 over HTTP on one connection: p50/p99 end to end, eager and with
   handler.cuda_graph, and the forward the worker reports (x-ts-worker-forward-us).

The load generator is wrk (C), never Python; this script only starts servers, runs wrk and
reads what it prints. Usage:
    python3 scripts/gpu/bench.py --build DIR --store DIR --wrk PATH [--out FILE] [--quick]
Env: RESNET_CONFIGS ("8:16:5:auto 4:16:5:auto 2:32:5:auto 14:8:5:pil"), CONNS (wrk connections for
resnet18, 64), DURATION (s per run, 15), WRK_LD (LD_LIBRARY_PATH of
wrk only).
"""
import argparse
import io
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "gpu"))


def log(*a):
    print(*a, flush=True)


def wrk(args, url, body, ctype, conns, threads, seconds):
    """wrk's requests/s, latency percentiles (ms) and non-2xx count for POSTs of body."""
    env = dict(os.environ)
    env["BENCH_BODY"] = body
    env["BENCH_CTYPE"] = ctype
    if os.environ.get("WRK_LD"):
        env["LD_LIBRARY_PATH"] = os.environ["WRK_LD"]
    cmd = [args.wrk, f"-t{threads}", f"-c{conns}", f"-d{seconds}s", "--timeout", "30s",
           "--latency", "-s",
           os.path.join(ROOT, "scripts", "bench", "post.lua"), url]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=seconds + 60)
    out = r.stdout
    if r.returncode != 0:
        raise RuntimeError(f"wrk failed: {r.stderr}{out}")

    def ms(v, unit):
        return float(v) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[unit]

    pct = {p: ms(v, u) for p, v, u in re.findall(r"^\s+(50|75|90|99)%\s+([0-9.]+)(us|ms|s)\s*$",
                                                  out, re.M)}
    rps = float(re.search(r"Requests/sec:\s+([0-9.]+)", out).group(1))
    non200 = int(re.search(r"non200=(\d+)", out).group(1))
    errs = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    return {"rps": rps, "p50_ms": pct.get("50"), "p99_ms": pct.get("99"), "non2xx": non200,
            "socket_errors": sum(int(v) for v in errs.groups()) if errs else 0}


class GpuSampler(threading.Thread):
    """nvidia-smi's utilization.gpu every 0.5 s while it runs."""

    def __init__(self):
        super().__init__(daemon=True)
        self.samples, self.stop = [], threading.Event()

    def run(self):
        from gpuserver import nvidia_smi
        while not self.stop.is_set():
            rows = nvidia_smi("--query-gpu=utilization.gpu")
            if rows:
                self.samples.append(float(rows[0][0]))
            self.stop.wait(0.5)

    def mean(self):
        self.stop.set()
        self.join()
        return statistics.mean(self.samples) if self.samples else None


def jpeg():
    from PIL import Image
    import random
    rnd = random.Random(1)
    img = Image.new("RGB", (640, 480))
    img.putdata([((x // 3 + rnd.randint(0, 40)) % 256, (y // 2) % 256, (x + y) // 5 % 256)
                 for y in range(480) for x in range(640)])
    buf = io.BytesIO()
    img.save(buf, format="JPEG", quality=90)
    return buf.getvalue()


def pil_rate(data, seconds=2.0):
    """image_classifier's preprocessing on one core, images/s."""
    import torch
    from PIL import Image
    from torchvision import transforms
    torch.set_num_threads(1)
    t = transforms.Compose([transforms.Resize(256), transforms.CenterCrop(224),
                            transforms.ToTensor(),
                            transforms.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        t(Image.open(io.BytesIO(data)).convert("RGB"))
        n += 1
    return n / (time.perf_counter() - t0)


def device_rate(build, data, batch, seconds=2.0):
    """image_classifier's preprocessing on the device (decode: device) of batches of batch
    images in this process, images/s, and whether torchvision decodes them in one call."""
    import torch
    sys.path.insert(0, os.path.join(build, "lib", "python"))
    try:
        from ts.handler_utils import vision
        from torchvision import transforms
    finally:
        sys.path.pop(0)
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    p = vision.Pipeline(transforms.Compose([
        transforms.Resize(256), transforms.CenterCrop(224), transforms.ToTensor(),
        transforms.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])]))
    jpegs = [(i, data) for i in range(batch)]

    def one():
        rows = p.device_stage(jpegs, dev)
        out = torch.empty((batch, 3, 224, 224), device=dev)
        for j, (_, image) in enumerate(rows):
            p.write(image, out[j])
        p.scale(out)
        return out

    for _ in range(3):
        one()
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        one()
        n += batch
    if dev.type == "cuda":
        torch.cuda.synchronize()
    return n / (time.perf_counter() - t0), vision.BATCHED_DECODE


def forward_rate(store, batch, seconds=2.0):
    """resnet18's forward alone in this Python's torch on cuda (or the CPU), images/s."""
    import torch
    sys.path.insert(0, os.path.join(ROOT, "scripts", "models", "resnet18"))
    from model import ResNet18
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    m = ResNet18().eval().to(dev)
    x = torch.rand(batch, 3, 224, 224, device=dev)
    with torch.inference_mode():
        for _ in range(3):
            m(x)
        if dev == "cuda":
            torch.cuda.synchronize()
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            m(x)
            n += batch
        if dev == "cuda":
            torch.cuda.synchronize()
    return n / (time.perf_counter() - t0)


def resnet(args, results):
    from gpuserver import Server, unpack
    data = jpeg()
    body = os.path.join(args.tmp, "img.jpg")
    with open(body, "wb") as f:
        f.write(data)
    rate = pil_rate(data)
    cores = os.cpu_count()
    results["pil_per_core_img_s"] = round(rate, 1)
    results["pil_limit_img_s"] = round(rate * cores, 1)
    log(f"PIL preprocessing: {rate:.0f} img/s on one core, {rate * cores:.0f} on {cores}")
    configs = os.environ.get("RESNET_CONFIGS",
                             "2:8:5:auto" if args.quick else
                             "8:16:5:auto 4:16:5:auto 2:32:5:auto 14:8:5:pil")
    runs = []
    for cfg in configs.split():
        f = cfg.split(":")
        w, b, d = (int(v) for v in f[:3])
        decode = f[3] if len(f) > 3 else "auto"
        fwd = forward_rate(args.store, b, 1.0 if args.quick else 2.0)
        if decode != "pil":
            dec, batched = device_rate(args.build, data, b, 1.0 if args.quick else 2.0)
            log(f"preprocessing on the device, batches of {b}: {dec:.0f} img/s in one process "
                f"({'one decode call per batch' if batched else 'one decode call per image'})")
        store = tempfile.mkdtemp(dir=args.tmp)
        unpack(store, "resnet18", "resnet18.mar",
               {"minWorkers": w, "maxWorkers": w, "batchSize": b, "maxBatchDelay": d,
                "handler": {"decode": decode}})
        srv = Server(store, ["resnet18"], config={"job_queue_size": 1000})
        try:
            t0 = time.time()
            srv.wait_ready(["resnet18"], timeout=300)
            load_s = time.time() - t0
            url = srv.url("/predictions/resnet18")
            conns = int(os.environ.get("CONNS", 8 if args.quick else 64))
            wrk(args, url, body, "image/jpeg", conns, 4, 3)  # warm-up: first batches, allocator
            sampler = GpuSampler()
            sampler.start()
            r = wrk(args, url, body, "image/jpeg", conns, 4, args.duration)
            r["connections"] = conns
            r["gpu_util_pct"] = sampler.mean()
        finally:
            srv.stop()
        r.update({"workers": w, "batch": b, "delay_ms": d, "decode": decode,
                  "load_s": round(load_s, 1),
                  "forward_limit_img_s": round(fwd, 1),
                  "device_preprocess_img_s": round(dec, 1) if decode != "pil" else None,
                  "of_pil_limit": round(r["rps"] / (rate * cores), 3)})
        runs.append(r)
        log(f"resnet18 {w} workers, batch {b}, delay {d} ms, decode {decode}: "
            f"{r['rps']:.0f} img/s, p50 "
            f"{r['p50_ms']} ms, p99 {r['p99_ms']} ms, non-2xx {r['non2xx']}, GPU "
            f"{r['gpu_util_pct']} %, {r['of_pil_limit']:.2f} of the PIL limit; forward alone "
            f"{fwd:.0f} img/s")
    results["resnet18"] = runs


def mlp(args, results):
    from gpuserver import Server, unpack
    store = tempfile.mkdtemp(dir=args.tmp)
    unpack(store, "mlp", "mlp.mar")
    unpack(store, "mlp_graph", "mlp.mar", {"handler": {"cuda_graph": True}})
    # the worker's forward time comes back as x-ts-worker-forward-us only when asked
    srv = Server(store, ["mlp", "mlp_graph"], config={"worker_debug_headers": "true"})
    sample = os.path.join(ROOT, "scripts", "models", "mlp", "sample.json")
    try:
        srv.wait_ready(["mlp", "mlp_graph"])
        for m in ("mlp", "mlp_graph"):
            with open(sample, "rb") as f:
                one = f.read()
            fwd = []
            for _ in range(200):
                status, _, h = srv.request("POST", f"/predictions/{m}", one,
                                           {"Content-Type": "application/json"})
                assert status == 200, status
                fwd.append(int(h["x-ts-worker-forward-us"]))
            url = srv.url(f"/predictions/{m}")
            wrk(args, url, sample, "application/json", 1, 1, 2)
            r = wrk(args, url, sample, "application/json", 1, 1, args.duration)
            r["forward_us_p50"] = statistics.median(fwd[50:])
            results[m + "_b1"] = r
            log(f"{m} batch 1, one connection: p50 {r['p50_ms'] * 1000:.0f} us, p99 "
                f"{r['p99_ms'] * 1000:.0f} us, {r['rps']:.0f} req/s; forward "
                f"{r['forward_us_p50']:.0f} us (worker)")
        graphs = re.findall(r"CUDA graph captured for inputs [^ ]+", srv.log())
        results["mlp_graph_captures"] = graphs
    finally:
        srv.stop()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--build", required=True)
    p.add_argument("--store", required=True)
    p.add_argument("--wrk", required=True)
    p.add_argument("--out")
    p.add_argument("--quick", action="store_true", help="short runs (CPU mode)")
    args = p.parse_args()
    os.environ["TS_BUILD"] = os.path.abspath(args.build)
    os.environ["TS_MODEL_STORE"] = os.path.abspath(args.store)
    import gpuserver
    gpuserver.BUILD, gpuserver.STORE = os.environ["TS_BUILD"], os.environ["TS_MODEL_STORE"]
    args.duration = int(os.environ.get("DURATION", "5" if args.quick else "15"))
    args.tmp = tempfile.mkdtemp(prefix="tsc-gpu-bench-")
    results = {"host": os.uname().nodename, "cores": os.cpu_count(),
               "gpu": gpuserver.nvidia_smi("--query-gpu=name")}
    try:
        for part in (mlp, resnet):
            try:
                part(args, results)
            except Exception as e:  # one part failing still reports the other
                results[part.__name__ + "_error"] = repr(e)
                log(f"{part.__name__}: FAILED: {e!r}")
    finally:
        shutil.rmtree(args.tmp, ignore_errors=True)
    text = json.dumps(results, indent=1)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    log(text)
    return 1 if any(k.endswith("_error") for k in results) else 0


if __name__ == "__main__":
    sys.exit(main())
