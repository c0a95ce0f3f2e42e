"""Builds the resnet18 example: OUTDIR/resnet18.pt (a state dict) and OUTDIR/index_to_name.json.

Usage: /usr/bin/python3 build.py OUTDIR
The weights are torchvision's initialisation under torch.manual_seed(0), then the batch-norm
running statistics are set from random images (train mode, cumulative average), and the last
layer is scaled so that the eval-mode logits have a std of ~5: the softmax is neither flat nor
one-hot, and the top-5 classes of an image stand apart. The 1000 labels are made up
(adjective, colour, noun), stored as TorchServe's ImageNet file stores them:
{"0": ["r0000", "label"], ...}.
"""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model import ResNet18  # noqa: E402

ADJ = ["quiet", "rapid", "gentle", "bold", "tiny", "ancient", "bright", "hollow", "lucky", "brave"]
COLOUR = ["amber", "cobalt", "crimson", "ivory", "jade", "olive", "pearl", "rust", "slate", "teal"]
NOUN = ["anchor", "badger", "comet", "falcon", "harbor", "lantern", "meadow", "otter", "pine",
        "violin"]


def labels():
    return {str(i): [f"r{i:04d}", f"{ADJ[i // 100]} {COLOUR[i // 10 % 10]} {NOUN[i % 10]}"]
            for i in range(1000)}


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: build.py OUTDIR")
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    torch.set_num_threads(2)
    torch.manual_seed(0)
    model = ResNet18()
    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.momentum = None  # cumulative average over the calibration batches
    model.train()
    with torch.no_grad():
        for _ in range(4):
            model(torch.rand(8, 3, 224, 224) * 4 - 2)
    model.eval()
    with torch.no_grad():  # logits of std ~5 rather than ~0.6: top classes stand apart
        model.fc.weight.mul_(8)
        model.fc.bias.mul_(8)
    torch.save(model.state_dict(), os.path.join(out, "resnet18.pt"))
    with open(os.path.join(out, "index_to_name.json"), "w") as f:
        json.dump(labels(), f)
        f.write("\n")


if __name__ == "__main__":
    main()
