#!/bin/bash
# What handler.jit_freeze does to libtorch's forward on this machine (issue 16).
#
#   scripts/bench/jit_freeze_bench.sh [BUILD_DIR]     (the build is not used: this is torch alone)
#
# For three MLPs (mlp's 64-256-256-10, 512-1024-1024-512 and 768-3072-3072-768, random weights)
# and batch sizes 1 to 64, on one thread, the best of 5 timings of N forwards: the module as
# torch.jit.script made it, and the same module frozen the way the torchscript handler freezes
# it (torch.jit.freeze without numeric folding, then the frozen-linear transpose pass, constant
# pooling and dead code elimination, as tsh_freeze does through libtorch's C++ API), both with
# the profiling executor off, as in the worker. Prints microseconds per forward, their ratio,
# and the largest difference between the two modules' answers.
# Env: ROUNDS (timings per case, best taken; default 5).
set -euo pipefail
# one thread, as a worker runs with the default worker_threads: OpenBLAS reads OMP_NUM_THREADS
export OMP_NUM_THREADS=1
exec /usr/bin/python3 - <<'EOF'
import os
import time

import torch
from torch import nn

torch.set_num_threads(1)
# the worker runs TorchScript with the profiling executor off (tsh_init)
torch._C._jit_set_profiling_executor(False)
torch._C._jit_set_profiling_mode(False)
ROUNDS = int(os.environ.get("ROUNDS", "5"))


def frozen(m):
    f = torch.jit.freeze(m, optimize_numerics=False)
    torch._C._jit_pass_transpose_frozen_linear(f.graph)
    torch._C._jit_pass_constant_pooling(f.graph)
    torch._C._jit_pass_dce(f.graph)
    return f


def best_us(mod, x, n):
    with torch.inference_mode():
        for _ in range(max(n // 10, 20)):
            mod(x)
        best = float("inf")
        for _ in range(ROUNDS):
            t = time.perf_counter()
            for _ in range(n):
                mod(x)
            best = min(best, (time.perf_counter() - t) / n)
    return best * 1e6


print(f"{'layers':<16} {'batch':>5} {'as loaded us':>13} {'frozen us':>10} {'ratio':>6} {'max diff':>9}")
torch.manual_seed(0)
for i, h, o, n in ((64, 256, 10, 3000), (512, 1024, 512, 300), (768, 3072, 768, 30)):
    m = torch.jit.script(nn.Sequential(nn.Linear(i, h), nn.ReLU(), nn.Linear(h, h), nn.ReLU(),
                                       nn.Linear(h, o)).eval())
    f = frozen(m)
    for bs in (1, 4, 8, 16, 64):
        x = torch.rand(bs, i) * 4 - 2
        a, b = best_us(m, x, n), best_us(f, x, n)
        with torch.inference_mode():
            diff = (m(x) - f(x)).abs().max().item()
        print(f"{i}-{h}-{h}-{o:<5} {bs:>5} {a:>13.1f} {b:>10.1f} {b / a:>6.2f} {diff:>9.1e}")
EOF
