"""Builds tiny_gpt: the byte-level transformer of model.py, trained for a few seconds on
scripts/models/char_lm/corpus.txt (text written for this repository), saved as TorchScript.

Usage: /usr/bin/python3 build.py OUTDIR [STEPS]
Writes OUTDIR/model.pt. Deterministic: fixed seed, one CPU thread, a fixed number of training
steps (STEPS, default below), so every build gives the same weights.

A few seconds of one core is little for a transformer: it learns the corpus's letters, common
words and some of its phrases, enough that greedy output reads as broken English rather than
noise. It is here to show a KV cache under continuous batching, not to write.
"""
import math
import os
import sys
import time

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model import CTX, VOCAB, TinyGPT  # noqa: E402

STEPS = 100
BATCH = 4
SEQ = 48
LR = 6e-3
WARMUP = 5


def init_weights(model):
    # GPT-2's initialisation: small normal weights, zero biases; the residual projections
    # scaled down by depth
    for name, p in model.named_parameters():
        if p.dim() == 2:
            std = 0.02
            if name.endswith("proj.weight") or name.endswith("fc2.weight"):
                std = 0.02 / math.sqrt(2 * len(model.blocks))
            nn.init.normal_(p, std=std)
        elif name.endswith("bias"):
            nn.init.zeros_(p)


def train(model, data, steps):
    opt = torch.optim.AdamW(model.parameters(), lr=LR, betas=(0.9, 0.95), weight_decay=0.0)
    n = data.numel() - SEQ - 1
    t0 = time.time()
    for step in range(steps):
        lr = LR * min(1.0, (step + 1) / WARMUP) * (0.55 + 0.45 * math.cos(math.pi * step / steps))
        for g in opt.param_groups:
            g["lr"] = lr
        starts = torch.randint(0, n, (BATCH,))
        x = torch.stack([data[s:s + SEQ + 1] for s in starts])
        logits = model(x[:, :-1])
        loss = nn.functional.cross_entropy(logits.reshape(-1, VOCAB), x[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 20 == 0 or step == steps - 1:
            print(f"  step {step:4d} loss {loss.item():.3f} ({time.time() - t0:.1f} s)")


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit("usage: build.py OUTDIR [STEPS]")
    out = sys.argv[1]
    steps = int(sys.argv[2]) if len(sys.argv) == 3 else STEPS
    os.makedirs(out, exist_ok=True)
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "..", "char_lm", "corpus.txt"), "rb") as f:
        data = torch.tensor(list(f.read()), dtype=torch.int64)

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = TinyGPT()
    init_weights(model)
    t0 = time.time()
    train(model, data, steps)
    print(f"  trained {steps} steps in {time.time() - t0:.1f} s ({CTX} positions)")
    model.eval()
    torch.jit.script(model).save(os.path.join(out, "model.pt"))


if __name__ == "__main__":
    main()
