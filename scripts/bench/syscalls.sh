#!/bin/bash
# System calls per /predictions/mlp request, in the frontend and in its workers (issue 16).
#
#   scripts/bench/syscalls.sh [BUILD_DIR] [WORKERS] [BATCH] [N] [CLIENTS]
#                                       (default build, 1, 1, 20000, 32; needs strace, h2load)
#
# Starts the server with mlp (WORKERS workers, batchSize BATCH, maxBatchDelay 5), attaches
# strace -c -f to the frontend and, separately, to its workers, sends N requests over CLIENTS
# HTTP/1.1 keep-alive connections (h2load --h1, the 64-float sample) and prints each side's
# calls per request, by system call. strace slows both processes down, so the absolute rate is
# meaningless; the count per request is what compares two builds.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${1:-build}
case $BUILD in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
WORKERS=${2:-1}
BATCH=${3:-1}
N=${4:-20000}
CLIENTS=${5:-32}
NAME=syscalls
# shellcheck source=scripts/bench/lib.sh
. "$ROOT/scripts/bench/lib.sh"

bench_init tsc-sys
start_mlp "$BUILD" "$WORKERS" "$BATCH" 5
port=$SRV_PORT
SRV=$SRV_PID
# warm up (first forwards, buffers grown), not counted
h2load --h1 -n 2000 -c "$CLIENTS" -t 2 -d "$SAMPLE" -H 'Content-Type: application/json' \
    "http://127.0.0.1:$port/predictions/mlp" > /dev/null

wargs=()
for w in $(ps -o pid= --ppid "$SRV"); do wargs+=(-p "$w"); done
strace -c -f -o "$WORK/front.txt" -p "$SRV" 2> /dev/null &
PIDS+=($!)
sf=$!
strace -c -f -o "$WORK/workers.txt" "${wargs[@]}" 2> /dev/null &
PIDS+=($!)
sw=$!
sleep 1
h2load --h1 -n "$N" -c "$CLIENTS" -t 2 -d "$SAMPLE" -H 'Content-Type: application/json' \
    "http://127.0.0.1:$port/predictions/mlp" > "$WORK/h2load.txt"
kill -INT "$sf" "$sw"
wait "$sf" "$sw" 2> /dev/null || true
ok=$(awk '/^status codes:/ {print $3}' "$WORK/h2load.txt")
[ "$ok" = "$N" ] || { echo "syscalls: only $ok of $N requests got 2xx" >&2; cat "$WORK/h2load.txt" >&2; exit 1; }

per_request() { # FILE TITLE
    echo "== $2: system calls per request ($N requests, $CLIENTS connections; $BUILD)"
    awk -v n="$N" '$1 ~ /^[0-9.]+$/ && NF >= 5 && $NF != "total" {
        calls = $4; name = $NF
        printf "   %-18s %8.3f\n", name, calls / n; total += calls }
        END { printf "   %-18s %8.3f\n", "total", total / n }' "$1"
}
echo "mlp: $WORKERS worker(s), batchSize $BATCH"
per_request "$WORK/front.txt" frontend
per_request "$WORK/workers.txt" workers
