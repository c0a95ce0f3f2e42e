"""Where a resnet18 image_classifier request's CPU goes (issue 37): decoding and transforms
against the forward, one thread, CPU seconds of this process (not wall time: on a shared
machine the CPU time of the work itself is the steadier figure).

For a 640x480 JPEG (quality 90, a smooth random scene with noise, made here) and the archive
model-store/resnet18.mar, per image:
  preprocess, TorchServe's way: image_processing(Image.open(...)) per image, torch.stack;
  preprocess, ours: ImageClassifier.preprocess (ToTensor and Normalize in place, into the
      batch), and with handler.fast_decode: true;
  forward: the model as loaded (eager), and optimized (handler.optimize: freeze, inference);
  postprocess: softmax, top 5, labels.
at batch 1 and batch 8, and the outputs' largest difference from the eager forward.

    /usr/bin/python3 scripts/bench/vision_cpu.py [--build build] [--seconds 3]
"""
import argparse
import io
import json
import os
import shutil
import sys
import tempfile
import time
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def cpu_ms(f, seconds):
    for _ in range(3):
        f()
    n, t0 = 0, time.process_time()
    while time.process_time() - t0 < seconds:
        f()
        n += 1
    return (time.process_time() - t0) / n * 1000


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--seconds", type=float, default=3.0)
    args = ap.parse_args()
    # one OpenMP (and OpenBLAS) thread, as a worker with worker_threads=1 has: without it
    # OpenMP starts a thread per core at import, and their spinning counts as CPU time here
    os.environ["OMP_NUM_THREADS"] = "1"
    sys.path.insert(0, os.path.join(ROOT, args.build, "lib", "python"))
    sys.path.insert(0, os.path.join(ROOT, "scripts", "bench"))
    work = tempfile.mkdtemp(prefix="tsc-vcpu-")
    try:
        with zipfile.ZipFile(os.path.join(ROOT, "model-store", "resnet18.mar")) as z:
            z.extractall(work)
        sys.path.insert(0, work)
        import torch
        from PIL import Image
        from ts.context import Context
        from ts.torch_handler.image_classifier import ImageClassifier
        from vision_decode_drift import jpeg

        torch.set_num_threads(1)
        torch._C._jit_set_profiling_executor(False)  # as the worker runs it (tsh_init)
        manifest = json.load(open(os.path.join(work, "MAR-INF", "MANIFEST.json")))

        def handler(**cfg):
            ctx = Context("resnet18", work, manifest, 8, None, "bench", True, None,
                          {"handler": cfg})
            h = ImageClassifier()
            h.initialize(ctx)
            return h

        eager = handler(optimize="none")
        levels = {"freeze": handler(optimize="freeze"), "inference": handler(optimize="inference")}
        fast = handler(optimize="none", fast_decode=True)
        data = jpeg(640, 480, 1)
        tf = ImageClassifier.image_processing
        print(f"vision_cpu: resnet18, 640x480 JPEG of {len(data)} bytes, 1 thread, "
              f"torch {torch.__version__}; CPU ms per image")
        print("| batch | TorchServe preprocess | our preprocess | fast_decode | forward eager |"
              " freeze | inference | postprocess | preprocess share (eager / inference) |")
        print("|---|---|---|---|---|---|---|---|---|")
        for n in (1, 8):
            rows = [{"body": data}] * n
            ts_pre = cpu_ms(lambda: torch.stack([tf(Image.open(io.BytesIO(r["body"])))
                                                 for r in rows]), args.seconds) / n
            ours = cpu_ms(lambda: eager.preprocess(rows), args.seconds) / n
            fd = cpu_ms(lambda: fast.preprocess(rows), args.seconds) / n
            x = eager.preprocess(rows)
            fwd = {}
            with torch.inference_mode():
                want = eager.model(x)
                fwd["eager"] = cpu_ms(lambda: eager.model(x), args.seconds) / n
                diffs = []
                for k, h in levels.items():
                    fwd[k] = cpu_ms(lambda: h.model(x), args.seconds) / n
                    diffs.append(f"{k} {(h.model(x) - want).abs().max().item():.1e}")
            post = cpu_ms(lambda: eager.postprocess(want), args.seconds) / n
            share_e = ts_pre / (ts_pre + fwd["eager"] + post)
            share_i = ours / (ours + fwd["inference"] + post)
            print(f"| {n} | {ts_pre:.2f} | {ours:.2f} | {fd:.2f} | {fwd['eager']:.2f} | "
                  f"{fwd['freeze']:.2f} | {fwd['inference']:.2f} | {post:.3f} | "
                  f"{share_e:.0%} / {share_i:.0%} |", flush=True)
            print(f"  (batch {n}: largest output difference from eager: {', '.join(diffs)})")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
