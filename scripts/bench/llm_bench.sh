#!/bin/bash
# tiny_gpt under load (issue 36): tokens/s, TTFT and inter-token latency at 1, 8, 32 and 64
# concurrent streams against the same model's batched greedy loop in plain PyTorch.
#   scripts/bench/llm_bench.sh [BUILD_DIR]      (default build; needs `make all models`)
# See llm_bench.py for what is measured. Env: CONC, PROMPT, NEW, SPREAD_MS, REPEAT, PREFILL_CHUNK,
# DECODE_GROUPS, PREFILL_THREAD, SPLIT_DECODE, PREFILL_CORES, XNNPACK, WORKERS, SCHED_BATCH,
# WORKER_THREADS,
# LOOP_THREADS, LOOP_XNNPACK, COUNTERS.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${1:-build}
for f in "$ROOT/$BUILD/bin/torchserve-c" "$ROOT/model-store/tiny_gpt.mar"; do
    [ -e "$f" ] || { echo "llm_bench: $f missing: run make all models" >&2; exit 1; }
done
WORK=$(mktemp -d -t tsc-llmbench-c.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
gcc -O2 -Wall -Wextra -Werror -D_GNU_SOURCE -o "$WORK/llm_load" "$ROOT/scripts/bench/llm_load.c"
LLM_LOAD="$WORK/llm_load" /usr/bin/python3 "$ROOT/scripts/bench/llm_bench.py" "$BUILD"
