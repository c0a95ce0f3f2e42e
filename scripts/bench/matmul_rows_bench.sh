#!/bin/bash
# Why tsh_freeze sends products by large weights with few rows to a matrix-vector call (issue 16).
#
#   scripts/bench/matmul_rows_bench.sh [BUILD_DIR]    (the build is not used: this is libtorch alone)
#
# Compiles a small libtorch program and prints, on one thread, the best of 5 timings (µs per
# product) of at::matmul(x, W^T) against one at::mv per row, for weights from 64x256 to 3072x768
# and 1, 2, 4 and 8 rows of x: what backend/torch_shim.cpp (FEW_ROWS_MIN_NUMEL, FEW_ROWS_MAX) chose its thresholds by.
set -euo pipefail
export OMP_NUM_THREADS=1
WORK=$(mktemp -d -t tsc-mmrows.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
cat > "$WORK/mm.cpp" <<'CPP'
#include <torch/torch.h>
#include <chrono>
#include <cstdio>
int main()
{
    at::set_num_threads(1);
    c10::InferenceMode guard;
    const int sizes[][2] = {{64, 256},  {256, 256},   {256, 512},  {512, 512},  {512, 1024},
                            {1024, 512}, {768, 768},  {1024, 1024}, {768, 3072}, {3072, 768}};
    std::printf("%-10s %5s %12s %12s %6s\n", "weight", "rows", "matmul us", "mv/row us", "ratio");
    for (const auto &s : sizes) {
        at::Tensor wt = torch::randn({s[0], s[1]}), w = wt.t();
        for (int rows : {1, 2, 4, 8}) {
            at::Tensor x = torch::randn({rows, s[0]});
            double best[2] = {1e18, 1e18};
            for (int v = 0; v < 2; v++)
                for (int rep = 0; rep < 5; rep++) {
                    auto t0 = std::chrono::steady_clock::now();
                    for (int i = 0; i < 300; i++) {
                        if (v == 0)
                            at::Tensor y = at::matmul(x, wt);
                        else
                            for (int r = 0; r < rows; r++)
                                at::Tensor y = at::mv(w, x.select(0, r));
                    }
                    std::chrono::duration<double, std::micro> d =
                        std::chrono::steady_clock::now() - t0;
                    best[v] = std::min(best[v], d.count() / 300);
                }
            char name[32];
            std::snprintf(name, sizeof(name), "%dx%d", s[0], s[1]);
            std::printf("%-10s %5d %12.1f %12.1f %6.2f\n", name, rows, best[0], best[1],
                        best[0] / best[1]);
        }
    }
}
CPP
g++ -O2 -std=gnu++17 -o "$WORK/mm" "$WORK/mm.cpp" -I/usr/include/torch/csrc/api/include \
    -ltorch -ltorch_cpu -lc10
"$WORK/mm"
