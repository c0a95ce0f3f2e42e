#!/bin/bash
# Batches split across idle workers (issue 37): N workers never slower than one, mlp against
# the ceiling, resnet18 batchSize 8 against batchSize 1 on 2 workers.
#   scripts/bench/split_bench.sh [BUILD_DIR]      (needs `make all models`, wrk)
# See split_bench.py for what is measured and its environment knobs (DURATION, SKIP, ...).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
exec /usr/bin/python3 "$ROOT/scripts/bench/split_bench.py" "${1:-build}"
