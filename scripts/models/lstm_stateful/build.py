"""Builds the stateful LSTM example (input 4 -> LSTM hidden 32 -> Linear 2) as TorchScript:
OUTDIR/model.pt.

Usage: /usr/bin/python3 build.py OUTDIR
forward(x [B, 4], h [B, 32], c [B, 32]) -> (y [B, 2], h2 [B, 32], c2 [B, 32]) is ONE time step
for B independent sequences; the server keeps (h, c) per sequence between requests. The
submodules `lstm` and `fc` stay reachable on the scripted module, so a test can run the same
LSTM over a whole sequence. Weights come from torch.manual_seed(0).
"""
import os
import sys
from typing import Tuple

import torch
from torch import nn


class StepLSTM(nn.Module):
    def __init__(self, n_in: int = 4, hidden: int = 32, n_out: int = 2):
        super().__init__()
        self.lstm = nn.LSTM(n_in, hidden, batch_first=True)
        self.fc = nn.Linear(hidden, n_out)

    def forward(self, x: torch.Tensor, h: torch.Tensor,
                c: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        out, (h2, c2) = self.lstm(x.unsqueeze(1), (h.unsqueeze(0), c.unsqueeze(0)))
        return self.fc(out[:, 0]), h2[0], c2[0]


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: build.py OUTDIR")
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    model = StepLSTM().eval()
    torch.jit.script(model).save(os.path.join(out, "model.pt"))


if __name__ == "__main__":
    main()
