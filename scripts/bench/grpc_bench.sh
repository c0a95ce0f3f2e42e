#!/bin/bash
# gRPC benchmark (issue 3): unary Predictions on mlp against a bare gRPC C core server.
#
#   scripts/bench/grpc_bench.sh [BUILD_DIR]        (default build; needs `make all models`)
#
# grpc_load (scripts/bench/grpc_load.c, built here) keeps 32 calls in flight over 4 HTTP/2
# connections for DURATION seconds, each call a PredictionsRequest{model_name: mlp,
# input: {data: <64 floats as JSON>}}, and prints calls/s, p50 and p99. It runs against:
#   1. grpc_bare (scripts/bench/grpc_bare.c, built here): a bare gRPC C core server answering a
#      fixed 132-byte message from its completion-queue thread, the ceiling;
#   2. torchserve-c with mlp, 1 worker: a) batchSize 1; b) batchSize 32, maxBatchDelay 2 ms: one
#      batch holds every call in flight; c) batchSize 16, maxBatchDelay 1 ms: two batches in flight,
#      so the worker computes one while the frontend and the client handle the other's calls;
#      d) batchSize 8, maxBatchDelay 1 ms: four batches in flight
# and reports each one's ratio to the bare server (issue 16's targets: >= 0.5 at batchSize 1,
# >= 0.9 batched). The machine is shared and its
# speed drifts, so the bare server runs right before and after each configuration and the ratio is
# to the mean of those two runs; every server first gets WARMUP seconds of the same load, not
# counted (the first seconds after a start are the noisiest). "steal" is the share of the
# machine's CPU time the host took during a run (/proc/stat): every figure drops when it is high.
# For torchserve-c it also prints the CPU time, the context switches and the time spent runnable
# but waiting for a CPU, per call, of the frontend (all its threads) and of the worker
# (/proc/PID/stat, /proc/PID/task/*/status, /proc/PID/task/*/schedstat).
# Env: DURATION (seconds per run, default 10), WARMUP (default 2), MACHINE_WARMUP (seconds of
# load before anything is measured, default 15). EXTRA_CONFIG: config.properties lines
# (';'-separated) added to torchserve-c's config, e.g. EXTRA_CONFIG=busy_poll_us=200.
# HANDLER_YAML: the same for keys of mlp's handler: section, e.g. HANDLER_YAML="jit_freeze: false".
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
. "$ROOT/scripts/bench/lib.sh"
BUILD=${1:-build}
case $BUILD in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
DURATION=${DURATION:-10}
WARMUP=${WARMUP:-2}
PY=/usr/bin/python3
BODY=$ROOT/scripts/models/mlp/sample.json
METHOD=/org.pytorch.serve.grpc.inference.InferenceAPIsService/Predictions

for f in "$BUILD/bin/torchserve-c" "$BUILD/bin/torchserve-c-worker" "$ROOT/model-store/mlp.mar" \
    "$BODY"; do
    [ -e "$f" ] || { echo "grpc_bench: $f missing: run make all models" >&2; exit 1; }
done

bench_init tsc-grpc

gcc -O2 -Wall -Wextra -Werror -o "$WORK/grpc_load" "$ROOT/scripts/bench/grpc_load.c" -lgrpc -lgpr
build_grpc_bare "$WORK"

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo 0; }
# context switches of all of a process's threads, voluntary (it slept) and not
switches() { cat /proc/"$1"/task/*/status 2>/dev/null | awk '/ctxt_switches/ {s += $2} END {print s + 0}'; }
# nanoseconds all of a process's threads have spent runnable but waiting for a CPU
# (/proc/PID/task/TID/schedstat, second field): with the machine partly idle, waiting there means
# the scheduler left a process queued behind another while a core had nothing to run
rq_wait_ns() { cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{s += $2} END {printf "%.0f\n", s}'; }
# per_call BEFORE AFTER CALLS DIGITS [DIVISOR]: (AFTER - BEFORE) / DIVISOR per call
per_call() {
    awk -v a="$1" -v b="$2" -v n="$3" -v p="$4" -v d="${5:-1}" \
        'BEGIN { printf "%.*f", p, (n > 0 ? (b - a) / n / d : 0) }'
}

# warm_up PORT [SECONDS]: SECONDS (default WARMUP) of the same load, not counted
warm_up() { "$WORK/grpc_load" "127.0.0.1:$1" "$METHOD" mlp "$BODY" 4 32 "${2:-$WARMUP}" > /dev/null 2>&1 || true; }
# the machine's CPU time, all cores, in ticks: "total steal idle" (steal: taken by the host;
# idle: no process wanted it)
machine_ticks() { awk '/^cpu / {t = 0; for (i = 2; i <= NF; i++) t += $i; print t, $9, $5}' /proc/stat; }
# run_load PORT -> "calls_per_s p50_us p99_us errors calls steal_percent client_cpu_us_per_call
#                   idle_percent"
run_load() {
    local m0 m1
    m0=$(machine_ticks)
    "$WORK/grpc_load" "127.0.0.1:$1" "$METHOD" mlp "$BODY" 4 32 "$DURATION" > "$WORK/load.last" \
        2> "$WORK/load.err" || true
    m1=$(machine_ticks)
    local l; l=$(cat "$WORK/load.last")
    val() { echo "$l" | tr ' ' '\n' | sed -n "s/^$1=//p"; }
    echo "$(val calls_per_s) $(val p50_us) $(val p99_us) $(val errors) $(val calls)" \
        "$(echo "$m0 $m1" | awk '{ printf "%.1f", ($4 > $1 ? 100 * ($5 - $2) / ($4 - $1) : 0) }')" \
        "$(val client_cpu_us_per_call)" \
        "$(echo "$m0 $m1" | awk '{ printf "%.1f", ($4 > $1 ? 100 * ($6 - $3) / ($4 - $1) : 0) }')"
}

# ---- the ceiling: a bare gRPC C core server, kept running; bare_run measures it once and
# appends calls/s to BARE
bport=$(free_port)
: > "$WORK/bare.out"
"$WORK/grpc_bare" "127.0.0.1:$bport" 100000 > "$WORK/bare.out" &
bpid=$!
PIDS+=("$bpid")
for _ in $(seq 50); do grep -q listening "$WORK/bare.out" && break; sleep 0.1; done
BARE=()
BARE_CPU=() # the bare server's CPU per call, then the client's, per run
# This VM runs slow for the first tens of seconds of load after an idle spell: MACHINE_WARMUP
# seconds of load against the bare server first, not counted.
warm_up "$bport" "${MACHINE_WARMUP:-15}"
bare_run() {
    local t0 b_rps b_p50 b_p99 b_err b_n b_cpu b_steal b_client
    warm_up "$bport"
    t0=$(cpu_ticks "$bpid")
    read -r b_rps b_p50 b_p99 b_err b_n b_steal b_client b_idle < <(run_load "$bport")
    b_cpu=$(( ($(cpu_ticks "$bpid") - t0) * 10000 / (b_n > 0 ? b_n : 1) ))
    echo "== bare gRPC C core server: $b_rps calls/s  p50 ${b_p50} us  p99 ${b_p99} us  errors $b_err  server CPU ${b_cpu} us/call  client CPU ${b_client} us/call  idle ${b_idle}%  steal ${b_steal}%"
    BARE+=("$b_rps")
    BARE_CPU+=("$b_cpu $b_client")
}

# ---- torchserve-c: NAME BATCH DELAY
declare -A R B
bench_config() {
    local name=$1 batch=$2 delay=$3 d=$WORK/$1
    mkdir -p "$d/store/mlp"
    (cd "$d/store/mlp" && $PY -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall()' \
        "$ROOT/model-store/mlp.mar")
    cat > "$d/store/mlp/model-config.yaml" <<EOF
minWorkers: 1
maxWorkers: 1
batchSize: $batch
maxBatchDelay: $delay
handler:
  input_shape: [64]
EOF
    knob_lines "${HANDLER_YAML:-}" "  " >> "$d/store/mlp/model-config.yaml"
    local gport; gport=$(free_port)
    cat > "$d/config.properties" <<EOF
inference_address=http://127.0.0.1:$(free_port)
management_address=http://127.0.0.1:$(free_port)
metrics_address=http://127.0.0.1:$(free_port)
grpc_inference_port=$gport
grpc_management_port=$(free_port)
disable_token_authorization=true
EOF
    knob_lines "${EXTRA_CONFIG:-}" >> "$d/config.properties"
    (cd "$d" && TMPDIR=$d exec "$BUILD/bin/torchserve-c" --start --foreground --model-store store \
        --models mlp --ts-config config.properties > out.log 2> server.log) &
    local spid=$!
    PIDS+=("$spid")
    local ok=0
    for _ in $(seq 300); do # until one call succeeds (the worker loads in the background)
        if "$WORK/grpc_load" "127.0.0.1:$gport" "$METHOD" mlp "$BODY" 1 1 0.05 > /dev/null 2>&1; then
            ok=1; break
        fi
        sleep 0.1
    done
    [ $ok = 1 ] || { echo "grpc_bench: $name never served:" >&2; tail "$d/server.log" >&2; exit 1; }
    echo "== torchserve-c mlp $name"
    local wpid; wpid=$(ps -o pid= --ppid "$spid" | tr -d ' ' | head -1)
    warm_up "$gport"
    local f0 w0 fs0 ws0; f0=$(cpu_ticks "$spid"); w0=$(cpu_ticks "$wpid")
    fs0=$(switches "$spid"); ws0=$(switches "$wpid")
    local fq0 wq0; fq0=$(rq_wait_ns "$spid"); wq0=$(rq_wait_ns "$wpid")
    read -r rps p50 p99 err n steal client idle < <(run_load "$gport")
    local fc wc fs ws
    fc=$(( ($(cpu_ticks "$spid") - f0) * 10000 / (n > 0 ? n : 1) ))
    wc=$(( ($(cpu_ticks "$wpid") - w0) * 10000 / (n > 0 ? n : 1) ))
    fs=$(per_call "$fs0" "$(switches "$spid")" "$n" 2)
    ws=$(per_call "$ws0" "$(switches "$wpid")" "$n" 2)
    local fq wq # microseconds
    fq=$(per_call "$fq0" "$(rq_wait_ns "$spid")" "$n" 1 1000)
    wq=$(per_call "$wq0" "$(rq_wait_ns "$wpid")" "$n" 1 1000)
    echo "   $rps calls/s  p50 ${p50} us  p99 ${p99} us  errors $err  CPU/call: frontend ${fc} us, worker ${wc} us, client ${client} us  context switches/call: frontend $fs, worker $ws  waiting for a CPU/call: frontend $fq us, worker $wq us  idle ${idle}%  steal ${steal}%"
    [ -s "$WORK/load.err" ] && head -3 "$WORK/load.err"
    kill "$spid"; wait "$spid" 2>/dev/null || true
    local before=${BARE[-1]}
    bare_run
    local ceil; ceil=$(awk -v a="$before" -v b="${BARE[-1]}" 'BEGIN { printf "%d", (a + b) / 2 }')
    R[$name]="$rps $p50 $p99 $err $ceil $steal"
    # the bound: the ratio this run would reach if the frontend cost no more CPU per call than
    # the bare server (the mean of the two runs around it) while the worker and the client cost
    # what they did; both runs fill the machine's cores (the bare server's one thread and the
    # client take all of it), so calls/s go as 1 / (CPU per call, all processes)
    B[$name]=$(echo "${BARE_CPU[-2]} ${BARE_CPU[-1]} $wc $client" | awk '{ s = ($1 + $3) / 2;
        c = ($2 + $4) / 2; printf "%.2f", (s + c) / (s + $5 + $6) }')
}

echo "== ${DURATION}s per run (after ${WARMUP}s of warm-up), 32 calls in flight over 4 connections"
bare_run
bench_config 1w-bs1 1 0
bench_config 1w-bs32 32 2
bench_config 1w-bs16 16 1
bench_config 1w-bs8 8 1

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }'; }
echo
echo "== summary (machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg); client on the same cores)"
printf "%-26s %10s %9s %9s %10s %7s %7s %6s %6s %s\n" server "calls/s" "p50 us" "p99 us" "bare c/s" \
    ratio target bound errors "steal (host)"
for name in 1w-bs1 1w-bs32 1w-bs16 1w-bs8; do
    read -r rps p50 p99 err ceil steal <<< "${R[$name]}"
    target=0.90; [ "$name" = 1w-bs1 ] && target=0.50
    printf "%-26s %10s %9s %9s %10s %7s %7s %6s %6s %s%%\n" "torchserve-c mlp $name" "$rps" "$p50" \
        "$p99" "$ceil" "$(ratio "$rps" "$ceil")" "$target" "${B[$name]}" "$err" "$steal"
done
echo "bare gRPC C core runs (calls/s): ${BARE[*]}"
echo "  (ratio: to the mean of the bare runs just before and after; bound: the ratio the run would"
echo "   reach if the frontend cost only the bare server's CPU per call, with the worker's and the"
echo "   client's as measured: (S + C0) / (S + W + C), S and C0 the bare server's and its client's;"
echo "   it holds while both runs keep every core busy: see 'idle' in the runs above)"
