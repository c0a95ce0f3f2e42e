"""Builds mlp_py's model file: the mlp example's TorchScript MLP (scripts/models/mlp/build.py),
so that mlp_py and mlp serve the same weights. Usage: /usr/bin/python3 build.py OUTDIR"""
import os
import runpy
import sys

if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    runpy.run_path(os.path.join(here, "..", "mlp", "build.py"), run_name="__main__")
