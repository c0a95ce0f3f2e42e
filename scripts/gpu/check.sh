#!/bin/bash
# The GPU check of issue 32, in one run of a few minutes: on a GPU host, build the worker and the
# Python plugin against the host's torch and Python, run the Debian-built frontend, run
# tests/gpu/ and the GPU benchmarks. Anywhere else it runs the same steps in CPU mode (the GPU
# tests skip with their reason or run their CPU half), so that it is known to work before a GPU
# host's time is spent on it.
#   scripts/gpu/bundle.sh                 on Debian 12 first, when the host lacks our libraries
#   scripts/gpu/check.sh                  then on the GPU host (a checkout with the bundle)
# Env:
#   PYTHON     the host's Python with its CUDA torch (default: the python3 on PATH); the worker
#              is built against that torch (TORCH_DIR from it) and the plugin against it
#   GPU_BUILD  the build directory (default build-gpu)
#   OUT        where check.log and bench.json go (default $GPU_BUILD/out)
#   BUNDLE     the bundle (default build/gpu-carry/torchserve-c-gpu.tar.xz); without one, the
#              frontend is built here (a Debian host with our build dependencies)
#   BENCH=0    skips the benchmarks; BENCH_DEADLINE (default 330): seconds after which they are
#              skipped, so that one call of 10 minutes always brings the tests' results back
#   JOBS       parallel jobs of the build (default nproc)
# Exit status: 0 when the build and every test passed (the benchmarks are reported, not judged).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT" || exit 1
GB=${GPU_BUILD:-build-gpu}
mkdir -p "$GB"
GB=$(cd "$GB" && pwd)
OUT=${OUT:-$GB/out}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/check.log") 2>&1
T0=$(date +%s)
step() { echo; echo "=== [$(( $(date +%s) - T0 )) s] $*"; }
die() { echo "check.sh: FAILED: $*"; exit 1; }
PY=${PYTHON:-$(command -v python3)}
# the python3 first on PATH may have no torch (a pyenv shim on a Debian box): Debian's has
if [ -z "${PYTHON:-}" ] && ! "$PY" -c 'import torch' 2>/dev/null &&
    /usr/bin/python3 -c 'import torch' 2>/dev/null; then
    PY=/usr/bin/python3
fi
JOBS=${JOBS:-$(nproc)}
FAILED=""

step "host"
uname -srm
# shellcheck disable=SC1091
(. /etc/os-release && echo "$PRETTY_NAME") || true
nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv 2>&1 ||
    echo "(no nvidia-smi: CPU mode)"
"$PY" - <<'EOF' || die "$PY cannot import torch"
import sys, torch
print("python", sys.version.split()[0], sys.executable)
print("torch", torch.__version__, "cuda", torch.version.cuda, "available",
      torch.cuda.is_available(), "devices", torch.cuda.device_count())
EOF
TORCH_DIR=$("$PY" -c 'import os, torch; print(os.path.dirname(torch.__file__))')
if [ ! -d "$TORCH_DIR/include" ] || [ ! -d "$TORCH_DIR/lib" ]; then
    die "$TORCH_DIR has no include/ or lib/"
fi
echo "commit $(git rev-parse HEAD 2>/dev/null || echo unknown)"

step "the frontend"
BUNDLE=${BUNDLE:-build/gpu-carry/torchserve-c-gpu.tar.xz}
MAKE=$(command -v make || true)
FRONT_LD=""
DEPS=""
WRK=$(command -v wrk || true)
mkdir -p "$GB/bin"
if [ -f "$BUNDLE" ]; then
    rm -rf "$GB/carry"
    mkdir -p "$GB/carry"
    tar -C "$GB/carry" -xJf "$BUNDLE" || die "cannot unpack $BUNDLE"
    cat "$GB/carry/INFO"
    # a library the host has stays the host's: it is at least as new, and the host's own programs
    # (and the worker, which inherits LD_LIBRARY_PATH) must not get Debian's
    have=$({ ldconfig -p || /sbin/ldconfig -p; } 2>/dev/null | awk '{print $1}' | sort -u)
    kept=0
    for f in "$GB"/carry/lib/*; do
        if grep -qxF "$(basename "$f")" <<<"$have"; then rm -f "$f"; else kept=$((kept + 1)); fi
    done
    echo "$kept Debian libraries the host lacks:" "$GB"/carry/lib/*
    cp "$GB/carry/bin/torchserve-c" "$GB/carry/bin/torchserve-c-archiver" "$GB/bin/"
    FRONT_LD=$GB/carry/lib
    DEPS=$GB/carry/dev
    WRK=$GB/carry/bin/wrk
    [ -n "$MAKE" ] || MAKE=$GB/carry/bin/make
else
    echo "no $BUNDLE: building the frontend here"
    "$MAKE" -j"$JOBS" BUILD="$GB" "$GB/bin/torchserve-c" "$GB/bin/torchserve-c-archiver" >"$OUT/build-frontend.log" 2>&1 ||
        die "the frontend's build (see $OUT/build-frontend.log)"
fi
missing=$(LD_LIBRARY_PATH=$FRONT_LD ldd "$GB/bin/torchserve-c" | grep "not found" || true)
[ -z "$missing" ] || die "the frontend cannot run here: $missing"

step "the worker and the Python plugin, against $TORCH_DIR and $PY"
build() {
    "$MAKE" -j"$JOBS" BUILD="$GB" TORCH_DIR="$TORCH_DIR" PYTHON="$PY" ${DEPS:+DEPS_PREFIX="$DEPS"} \
        "$@" worker plugin >>"$OUT/build.log" 2>&1
}
: >"$OUT/build.log"
if ! build; then
    # another compiler may warn where Debian's does not: report it, and go on without -Werror
    FAILED="$FAILED
    the worker's build with -Werror (see build.log)"
    echo "the strict build failed; retrying with -Wno-error"
    grep -E "error|warning" "$OUT/build.log" | head -20
    if ! build EXTRA_CFLAGS=-Wno-error EXTRA_CXXFLAGS=-Wno-error; then
        FAILED="$FAILED
    backend/torch/torch_graph.cpp did not compile: CUDA graphs are off (see build.log)"
        echo "retrying without CUDA graphs"
        build EXTRA_CFLAGS=-Wno-error EXTRA_CXXFLAGS=-Wno-error CUDA_GRAPHS=0 ||
            { tail -40 "$OUT/build.log"; die "the worker's build"; }
    fi
fi
grep -E "torch_graph|^g\+\+ .*torch_shim" "$OUT/build.log" | tail -2 | cut -c1-300
ldd "$GB/bin/torchserve-c-worker" | grep -E "libtorch|libc10|libcuda|libcudart|libnvrtc" | head
ldd "$GB/lib/libts_python.so" | grep -i python
cat "$GB/lib/libts_python.info"

step "models, built by $PY's torch"
MS=$GB/model-store
rm -rf "$MS"
for m in mlp char_lm identity_text resnet18; do
    LD_LIBRARY_PATH=$FRONT_LD MODEL_PYTHON=$PY MODEL_STORE=$MS \
        scripts/models/build_model.sh "$m" "$GB" >>"$OUT/models.log" 2>&1 ||
        { tail -20 "$OUT/models.log"; die "building model $m"; }
done
ls -la "$MS"

step "tests/gpu"
TS_BUILD=$GB TS_MODEL_STORE=$MS TS_FRONTEND_LD=$FRONT_LD \
    "$PY" -m unittest discover -s tests/gpu -p 'test_*.py' -v 2>&1 | tee "$OUT/tests.log"
rc=${PIPESTATUS[0]}
[ "$rc" -eq 0 ] || FAILED="$FAILED
    tests/gpu (see tests.log)"

# the benchmarks only in the time a host's call leaves (10 minutes): the tests come first
if [ "${BENCH:-1}" != 0 ] && [ $(($(date +%s) - T0)) -gt "${BENCH_DEADLINE:-330}" ]; then
    FAILED="$FAILED
    the benchmarks were skipped: $(($(date +%s) - T0)) s had passed (BENCH_DEADLINE)"
elif [ "${BENCH:-1}" != 0 ]; then
    step "benchmarks"
    quick=""
    nvidia-smi -L >/dev/null 2>&1 || quick=--quick
    WRK_LD=$FRONT_LD TS_FRONTEND_LD=$FRONT_LD "$PY" scripts/gpu/bench.py --build "$GB" --store "$MS" --wrk "$WRK" \
        --out "$OUT/bench.json" $quick || FAILED="$FAILED
    a benchmark (see check.log)"
fi

step "done"
if [ -n "$FAILED" ]; then
    echo "check.sh: FAILED:$FAILED"
    exit 1
fi
# a copied tree's .git may lag behind the files (a device's copy): the bundle names the commit
# it was made from too
from=""
[ -f "$GB/carry/INFO" ] && from="; bundle made at $(sed -n 's/^commit //p' "$GB/carry/INFO" | head -1)"
echo "check.sh: passed on commit $(git rev-parse HEAD 2>/dev/null || echo unknown)$from"
