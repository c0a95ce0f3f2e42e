#!/bin/bash
# One-connection latency and where the processes run (issue 16's latency target).
#
#   scripts/bench/latency_placement.sh [BUILD_DIR]   (default build; needs `make all models`, taskset)
#
# seq_client (scripts/bench/seq_client.c) sends N requests one at a time on one keep-alive
# connection, to the bare libevent server (trivial_server.c, a server that does nothing) and to
# torchserve-c serving mlp (1 worker, batchSize 1), each in two placements:
#   spread  the scheduler places the client, the frontend and the worker (on 2 cores, the
#           client and the server usually end up on different cores);
#   one     the client and every server process pinned to CPU 0 (taskset).
# On a VM, waking a process on an idle vCPU costs tens of microseconds (the hypervisor has to
# wake the vCPU). In "one", the process that sends always runs until it sleeps, and the one it
# woke then runs on the same, busy, CPU: no wake-up pays that cost. The difference between the
# placements is what the machine's wake-ups cost; torchserve-c's extra over the bare server in
# "one" is what its two hops (frontend -> worker -> frontend) and its work cost.
# Prints p50/p99 latency, the worker's forward (p50) and the overhead over it, per run; ROUNDS
# rounds alternate the placements. Env: N (requests per run, default 3000), ROUNDS (default 2).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
NAME=latency_placement
. "$ROOT/scripts/bench/lib.sh"
BUILD=${1:-build}
case $BUILD in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
N=${N:-3000}
ROUNDS=${ROUNDS:-2}
command -v taskset > /dev/null || { echo "$NAME: taskset missing (util-linux)" >&2; exit 1; }
[ "$(nproc)" -ge 2 ] || { echo "$NAME: needs 2 CPUs or more" >&2; exit 1; }

bench_init tsc-latp
gcc -O2 -Wall -Wextra -Werror -o "$WORK/seq_client" "$ROOT/scripts/bench/seq_client.c"

# pin PID... : every thread of each process to CPU 0, or back to every CPU ("spread")
all_cpus=0-$(($(nproc) - 1))
pin() {
    local cpus=$1
    shift
    for p in "$@"; do taskset -a -p -c "$cpus" "$p" > /dev/null; done
}

start_trivial
start_mlp "$BUILD" 1 1 0
mapfile -t SERVER_PIDS < <(echo "$SRV_PID"; ps -o pid= --ppid "$SRV_PID" | tr -d ' ')

# run LABEL PLACEMENT PORT PID...
run() {
    local label=$1 place=$2 port=$3 cl=()
    shift 3
    if [ "$place" = one ]; then
        pin 0 "$@"
        cl=(taskset -c 0)
    else
        pin "$all_cpus" "$@"
    fi
    printf "%-14s %-7s %s\n" "$label" "$place" \
        "$("${cl[@]}" "$WORK/seq_client" "$port" /predictions/mlp "$SAMPLE" "$N" 300)"
}

echo "(microseconds; fwd = the worker's forward, ovh = latency - fwd; the bare server has no forward)"
for r in $(seq "$ROUNDS"); do
    order="spread one"
    [ $((r % 2)) = 0 ] && order="one spread"
    for place in $order; do
        run bare "$place" "$TRIV_PORT" "$TRIV_PID"
        run torchserve-c "$place" "$SRV_PORT" "${SERVER_PIDS[@]}"
    done
done
