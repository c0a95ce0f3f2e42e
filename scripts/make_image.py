#!/usr/bin/python3
"""Writes a test image for the image models (the README's resnet18 example, the tests): a
smooth random RGB picture, so that JPEG keeps it recognisable. Not a photograph: the classes a
model answers for it are arbitrary, but the same for the same seed.

    /usr/bin/python3 scripts/make_image.py kitten.jpg [--seed N] [--size WxH]

The format follows the file's extension (.jpg/.jpeg: JPEG, .png: PNG). Needs python3-pil.
"""
import argparse
import random
import sys

from PIL import Image


def make(path, seed=0, size=(320, 240)):
    rng = random.Random(seed)
    small = Image.new("RGB", (8, 8))
    small.putdata([tuple(rng.randrange(256) for _ in range(3)) for _ in range(64)])
    img = small.resize(size, Image.BILINEAR)
    fmt = "PNG" if path.lower().endswith(".png") else "JPEG"
    img.save(path, fmt)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("path", help="the file to write (.jpg, .jpeg or .png)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--size", default="320x240", help="WIDTHxHEIGHT (default 320x240)")
    a = ap.parse_args()
    try:
        w, h = (int(v) for v in a.size.lower().split("x"))
    except ValueError:
        sys.exit(f"make_image.py: --size takes WIDTHxHEIGHT, not {a.size!r}")
    make(a.path, a.seed, (w, h))


if __name__ == "__main__":
    main()
