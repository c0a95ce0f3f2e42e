#!/bin/bash
# Streaming benchmark (issue 4): per-token overhead over SSE and gRPC, char_lm batching gain.
#   scripts/bench/stream_bench.sh [BUILD_DIR]      (default build; needs `make all models`)
# See stream_bench.py for what is measured. Env: RUNS, TOKENS.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${1:-build}
for f in "$ROOT/$BUILD/bin/torchserve-c" "$ROOT/model-store/identity_text.mar" \
         "$ROOT/model-store/char_lm.mar" "$ROOT/$BUILD/py/inference_pb2_grpc.py"; do
    [ -e "$f" ] || { echo "stream_bench: $f missing: run make all models" >&2; exit 1; }
done
# the C-core client for the gRPC time to first token without grpcio's own costs
WORK=$(mktemp -d -t tsc-sbench-c.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
gcc -O2 -Wall -Wextra -Werror -o "$WORK/grpc_load" "$ROOT/scripts/bench/grpc_load.c" -lgrpc -lgpr
GRPC_LOAD="$WORK/grpc_load" /usr/bin/python3 "$ROOT/scripts/bench/stream_bench.py" "$BUILD"
