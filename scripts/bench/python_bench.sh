#!/bin/bash
# Python handler benchmark (issue 11): the cost of the Python path.
#   scripts/bench/python_bench.sh [BUILD_DIR]      (default build; needs `make all models`, wrk)
# See python_bench.py for what is measured. Env: DURATION, ROUNDS.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${1:-build}
for f in "$ROOT/$BUILD/bin/torchserve-c" "$ROOT/$BUILD/lib/libts_python.so" \
         "$ROOT/model-store/mlp.mar" "$ROOT/model-store/mlp_py.mar"; do
    [ -e "$f" ] || { echo "python_bench: $f missing: run make all models" >&2; exit 1; }
done
command -v wrk >/dev/null || { echo "python_bench: wrk missing (scripts/install-deps.sh)" >&2; exit 1; }
/usr/bin/python3 "$ROOT/scripts/bench/python_bench.py" "$BUILD"
