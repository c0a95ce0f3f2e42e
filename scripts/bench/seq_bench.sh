#!/bin/bash
# Stateful sequence benchmark (issue 5): lstm_stateful steps/s with 64 concurrent sequences on 2
# workers at batchSize 1 and 16, p50/p99 latency per step, LMDB write-through cost per step with
# and without synced commits.
#
#   scripts/bench/seq_bench.sh [BUILD_DIR]        (default build; needs `make all models`)
# Env: SEQ_DURATION (wrk seconds per configuration, default 8). Needs wrk.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${1:-build}
for f in "$ROOT/$BUILD/bin/torchserve-c" "$ROOT/$BUILD/bin/torchserve-c-worker" \
         "$ROOT/model-store/lstm_stateful.mar"; do
    [ -e "$f" ] || { echo "seq_bench: $f missing: run make all models" >&2; exit 1; }
done
TS_BUILD=$BUILD exec /usr/bin/python3 "$ROOT/scripts/bench/seq_bench.py" \
    --duration "${SEQ_DURATION:-8}"
