"""Builds the example MLP (64 -> 256 -> 256 -> 10, ReLU) as TorchScript: OUTDIR/model.pt.

Usage: /usr/bin/python3 build.py OUTDIR
The weights come from torch.manual_seed(0), so every build gives the same model.
"""
import os
import sys

import torch
from torch import nn


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(64, 256)
        self.fc2 = nn.Linear(256, 256)
        self.fc3 = nn.Linear(256, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.fc1(x))
        x = torch.relu(self.fc2(x))
        return self.fc3(x)


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: build.py OUTDIR")
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    model = MLP().eval()
    torch.jit.script(model).save(os.path.join(out, "model.pt"))


if __name__ == "__main__":
    main()
