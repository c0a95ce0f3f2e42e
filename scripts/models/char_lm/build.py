"""Builds char_lm: a small character-level GRU language model, trained for a few seconds on
corpus.txt (next to this script), saved as TorchScript.

Usage: /usr/bin/python3 build.py OUTDIR
Writes OUTDIR/model.pt and OUTDIR/vocab.json. Deterministic: fixed seed, one CPU thread, a fixed
number of training steps, so every build gives the same weights.

The scripted forward is one decoding step, batch dimension first:
    forward(x: int64 [B, T], h: float32 [B, L, H]) -> (logits: float32 [B, V], h2: [B, L, H])
x holds T token ids per row (T = prompt length for the prompt, 1 when decoding), h the GRU state
of each row (zeros for a new sequence); logits are those of the position after the last input.
vocab.json: {"vocab": "<the characters, id = index>", "layers": L, "hidden": H}.
"""
import json
import os
import sys
import time
from typing import Tuple

import torch
from torch import nn

EMBED = 32
HIDDEN = 128
LAYERS = 1
SEQ = 48
BATCH = 32
STEPS = 300
LR = 0.01


class CharLM(nn.Module):
    def __init__(self, vocab_size: int):
        super().__init__()
        self.emb = nn.Embedding(vocab_size, EMBED)
        self.gru = nn.GRU(EMBED, HIDDEN, num_layers=LAYERS, batch_first=True)
        self.head = nn.Linear(HIDDEN, vocab_size)

    def forward(self, x: torch.Tensor, h: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        out, h2 = self.gru(self.emb(x), h.transpose(0, 1).contiguous())
        return self.head(out[:, -1]), h2.transpose(0, 1).contiguous()


def train(model, data):
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    loss_fn = nn.CrossEntropyLoss()
    n = data.numel() - SEQ - 1
    for step in range(STEPS):
        starts = torch.randint(0, n, (BATCH,))
        x = torch.stack([data[s:s + SEQ] for s in starts])
        y = torch.stack([data[s + 1:s + SEQ + 1] for s in starts])
        out, _ = model.gru(model.emb(x))
        loss = loss_fn(model.head(out).reshape(-1, model.head.out_features), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 100 == 0 or step == STEPS - 1:
            print(f"  step {step:4d} loss {loss.item():.3f}")


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: build.py OUTDIR")
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "corpus.txt"), encoding="ascii") as f:
        text = f.read()
    vocab = "".join(sorted(set(text)))
    index = {c: i for i, c in enumerate(vocab)}
    data = torch.tensor([index[c] for c in text], dtype=torch.int64)

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = CharLM(len(vocab))
    t0 = time.time()
    train(model, data)
    print(f"  trained {STEPS} steps in {time.time() - t0:.1f} s")
    model.eval()
    torch.jit.script(model).save(os.path.join(out, "model.pt"))
    with open(os.path.join(out, "vocab.json"), "w") as f:
        json.dump({"vocab": vocab, "layers": LAYERS, "hidden": HIDDEN}, f)


if __name__ == "__main__":
    main()
