#!/bin/bash
# A/B of one configuration difference in the same run: two servers from the same build, one
# with config A and one with config B, wrk alternating between them (A B A B ...), so that the
# machine's drift hits both alike. Prints each run and the ratio of the means (B / A), for
# throughput and for the frontend's CPU time per request (utime + stime of the server process
# over the run, divided by the requests wrk completed): on a shared, loaded machine the CPU
# time per request is the steadier of the two.
#
#   scripts/bench/config_ab.sh "A-LINES" "B-LINES" [BUILD_DIR]
#   e.g. scripts/bench/config_ab.sh "enable_access_log=false" "enable_access_log=true"
#
# A-LINES / B-LINES: config.properties lines, separated by ';'. /predictions/mlp, 1 worker,
# batchSize 1. Env: ROUNDS (pairs, default 4), DURATION (wrk seconds, default 5), CONNS (32).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
. "$ROOT/scripts/bench/lib.sh"
A=$1
B=$2
BUILD=${3:-build}
case $BUILD in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
ROUNDS=${ROUNDS:-4}
DURATION=${DURATION:-5}
CONNS=${CONNS:-32}
export BENCH_BODY=$ROOT/scripts/models/mlp/sample.json
command -v wrk >/dev/null || { echo "config_ab: wrk missing (scripts/install-deps.sh)" >&2; exit 1; }

bench_init tsc-ab

start() { # start NAME LINES: sets PORT and PID (not in a subshell: PIDS must see the pid)
    local d=$WORK/$1 p
    mkdir -p "$d"
    cp "$ROOT/model-store/mlp.mar" "$d/"
    p=$(free_port)
    {
        echo "inference_address=http://127.0.0.1:$p"
        echo "management_address=http://127.0.0.1:$(free_port)"
        echo "metrics_address=http://127.0.0.1:$(free_port)"
        echo "grpc_inference_port=$(free_port)"
        echo "grpc_management_port=$(free_port)"
        echo "disable_token_authorization=true"
        echo "default_workers_per_model=1"
        knob_lines "$2"
        echo
    } >"$d/config.properties"
    (cd "$d" && exec "$BUILD/bin/torchserve-c" --start --foreground --ncs --model-store "$d" \
        --ts-config config.properties --models mlp=mlp.mar >/dev/null 2>"$d/err.log") &
    PID=$!
    PIDS+=("$PID")
    PORT=$p
    for _ in $(seq 1 300); do
        if curl -sf -o /dev/null -X POST -H 'Content-Type: application/json' \
            --data-binary @"$BENCH_BODY" "http://127.0.0.1:$p/predictions/mlp"; then
            return
        fi
        sleep 0.2
    done
    echo "config_ab: server $1 did not start: $(tail -5 "$d/err.log")" >&2
    exit 1
}

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

run() { # run PORT PID: prints "requests/s cpu-us-per-request" (fails on any non-2xx answer)
    local out t0 t1 hz
    hz=$(getconf CLK_TCK)
    t0=$(cpu_ticks "$2")
    out=$(cd "$ROOT" && wrk -t2 -c"$CONNS" -d"${DURATION}s" -s scripts/bench/post.lua \
        "http://127.0.0.1:$1/predictions/mlp")
    t1=$(cpu_ticks "$2")
    grep -q '^non200=0$' <<<"$out" || { echo "config_ab: errors: $out" >&2; exit 1; }
    awk -v t="$((t1 - t0))" -v hz="$hz" '/requests in/ {n = $1} /^Requests\/sec:/ {r = $2}
        END {printf "%s %.2f\n", r, t * 1e6 / hz / n}' <<<"$out"
}

start a "$A"
PA=$PORT PIDA=$PID
start b "$B"
PB=$PORT PIDB=$PID
run "$PA" "$PIDA" >/dev/null # warm-up, both
run "$PB" "$PIDB" >/dev/null
SA=0 SB=0 CA=0 CB=0
for i in $(seq 1 "$ROUNDS"); do
    read -r ra ca < <(run "$PA" "$PIDA")
    read -r rb cb < <(run "$PB" "$PIDB")
    echo "round $i: A $ra req/s $ca us CPU/req, B $rb req/s $cb us CPU/req"
    SA=$(awk -v s="$SA" -v r="$ra" 'BEGIN {print s + r}')
    SB=$(awk -v s="$SB" -v r="$rb" 'BEGIN {print s + r}')
    CA=$(awk -v s="$CA" -v r="$ca" 'BEGIN {print s + r}')
    CB=$(awk -v s="$CB" -v r="$cb" 'BEGIN {print s + r}')
done
awk -v a="$SA" -v b="$SB" -v ca="$CA" -v cb="$CB" -v n="$ROUNDS" 'BEGIN {
    printf "mean A %.0f req/s, B %.0f req/s, B/A %.3f\n", a / n, b / n, b / a
    printf "mean A %.2f us CPU/req, B %.2f us CPU/req, B/A %.3f\n", ca / n, cb / n, cb / ca }'
