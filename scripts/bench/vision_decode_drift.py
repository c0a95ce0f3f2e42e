"""How far image_classifier's top-5 probabilities move when the image is decoded otherwise
than by PIL (issues 32 and 37).

For resnet18 from model-store/resnet18.mar behind our ImageClassifier, and JPEG images of
several sizes (smooth random scenes with noise, quality 90, made here), it compares with
TorchServe's path (PIL decode, PIL Resize 256 / CenterCrop 224, ToTensor, Normalize):
  fast_decode   PIL in draft mode (handler.fast_decode: true);
  device        torchvision.io.decode_jpeg + tensor transforms on --device (handler.decode:
                device; nvjpeg on cuda, libjpeg-turbo on cpu).
Per variant and size: the largest difference of a top-5 probability (the reference's five
classes), the images whose top-5 labels or order differ, the largest pixel difference after
normalisation, and the preprocessing time per image (CPU seconds of this process, or wall
time with a synchronised device for cuda). The model runs unoptimised (handler.optimize:
none) so that only decoding differs.

    /usr/bin/python3 scripts/bench/vision_decode_drift.py [--device cuda:0] [--images 16]
        [--build build]
The handler's ts package comes from BUILD/lib/python (make all); on a GPU host, run it with
the Python that has CUDA torch and torchvision.
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
SIZES = [(640, 480), (480, 640), (1280, 960), (1920, 1080)]


def jpeg(w, h, seed):
    import numpy as np
    import torch
    from PIL import Image

    g = torch.Generator().manual_seed(seed)
    small = (torch.rand(3, 12, 16, generator=g) * 255).to(torch.uint8)
    img = Image.fromarray(small.permute(1, 2, 0).numpy(), "RGB").resize((w, h), Image.BICUBIC)
    noise = np.random.RandomState(seed).randint(-24, 25, (h, w, 3))
    img = Image.fromarray((np.asarray(img).astype(np.int16) + noise).clip(0, 255).astype("uint8"))
    buf = io.BytesIO()
    img.save(buf, "JPEG", quality=90)
    return buf.getvalue()


def handler(model_dir, device, cfg):
    import torch
    from ts.context import Context
    from ts.torch_handler.image_classifier import ImageClassifier

    manifest = json.load(open(os.path.join(model_dir, "MAR-INF", "MANIFEST.json")))
    gpu = None if device.type == "cpu" else (device.index or 0)
    ctx = Context("resnet18", model_dir, manifest, 1, gpu, "bench", True, None,
                  {"handler": dict(cfg, optimize="none")})
    h = ImageClassifier()
    h.initialize(ctx)
    # BaseHandler places the model on the CPU unless the gpu branch maps gpu_id: put it (and
    # the handler's decoding) where --device says
    h.device = device
    h.model.to(device)
    h._configure_decoding()
    return h, torch


def run(h, torch, images, device):
    """Per image: the preprocessed tensor, the softmax, and the preprocessing seconds."""
    out = []
    for data in images:
        if device.type == "cuda":
            torch.cuda.synchronize(device)
            t0 = time.perf_counter()
            x = h.preprocess([{"body": data}])
            torch.cuda.synchronize(device)
            dt = time.perf_counter() - t0
        else:
            t0 = time.process_time()
            x = h.preprocess([{"body": data}])
            dt = time.process_time() - t0
        with torch.inference_mode():
            p = torch.softmax(h.model(x), dim=1)[0].float().cpu()
        out.append((x.cpu(), p, dt))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--images", type=int, default=16, help="images per size")
    ap.add_argument("--build", default="build")
    args = ap.parse_args()
    # one OpenMP (and OpenBLAS) thread, as a worker with worker_threads=1 has: without it
    # OpenMP starts a thread per core at import, and their spinning counts as CPU time here
    os.environ["OMP_NUM_THREADS"] = "1"
    sys.path.insert(0, os.path.join(ROOT, args.build, "lib", "python"))
    work = tempfile.mkdtemp(prefix="tsc-drift-")
    try:
        with zipfile.ZipFile(os.path.join(ROOT, "model-store", "resnet18.mar")) as z:
            z.extractall(work)
        sys.path.insert(0, work)
        import torch

        torch.set_num_threads(1)
        device = torch.device(args.device)
        variants = {"pil": {"decode": "pil"}, "fast_decode": {"decode": "pil", "fast_decode": True},
                    "device": {"decode": "device"}}
        handlers = {k: handler(work, device, v) for k, v in variants.items()}
        print(f"vision_decode_drift: resnet18 image_classifier, {args.images} JPEG images per "
              f"size, device {device}, torch {torch.__version__}")
        print("| size | variant | preprocess ms/img | max top-5 prob diff | top-5 changed |"
              " max input diff |")
        print("|---|---|---|---|---|---|")
        for w, hgt in SIZES:
            images = [jpeg(w, hgt, 1000 * w + s) for s in range(args.images)]
            ref = run(*handlers["pil"], images, device)
            rows = {"pil": ref}
            for name in ("fast_decode", "device"):
                rows[name] = run(*handlers[name], images, device)
            for name, got in rows.items():
                worst = changed = 0
                xdiff = 0.0
                for (x0, p0, _), (x1, p1, _) in zip(ref, got):
                    top0 = torch.topk(p0, 5).indices
                    top1 = torch.topk(p1, 5).indices
                    worst = max(worst, (p1[top0] - p0[top0]).abs().max().item())
                    changed += int(not torch.equal(top0, top1))
                    if x0.shape == x1.shape:
                        xdiff = max(xdiff, (x0 - x1).abs().max().item())
                    else:
                        xdiff = float("nan")
                ms = 1000 * sum(r[2] for r in got) / len(got)
                print(f"| {w}x{hgt} | {name} | {ms:.2f} | {worst:.2e} | {changed}/{len(got)} |"
                      f" {xdiff:.3f} |", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
