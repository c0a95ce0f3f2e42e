"""A wider MLP than the example's, for benchmarks of the worker's forward: OUT (TorchScript).

Usage: /usr/bin/python3 scripts/bench/wide_mlp.py OUT [HIDDEN [FF]]

64 -> HIDDEN -> FF -> HIDDEN -> 10 with ReLU (default 768 and 3072: the feed-forward block of a
BERT-base layer between a 64-float input, like the mlp sample's, and 10 outputs), random weights
from torch.manual_seed(0). Serve it in place of mlp's model.pt with MODEL_PT=OUT (lib.sh).
"""
import sys

import torch
from torch import nn


def main():
    if len(sys.argv) not in (2, 3, 4):
        sys.exit(__doc__.strip().splitlines()[2])
    hidden = int(sys.argv[2]) if len(sys.argv) > 2 else 768
    ff = int(sys.argv[3]) if len(sys.argv) > 3 else 3072
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, ff), nn.ReLU(),
                      nn.Linear(ff, hidden), nn.ReLU(), nn.Linear(hidden, 10)).eval()
    torch.jit.script(m).save(sys.argv[1])


if __name__ == "__main__":
    main()
