#!/bin/bash
# A/B throughput of two builds on the same machine, in the same run, alternated (issue 16).
# (Not named *_bench.sh: make bench runs those with a single build.)
#
#   scripts/bench/ab_compare.sh BUILD_A BUILD_B [CONFIG...]
#
# CONFIG is WORKERS:BATCH:DELAY:API with API http (/predictions/mlp, the 64-float sample) or oip
# (/v2/models/mlp/infer, the same floats as an FP32 tensor); default: 1:1:0:http 2:1:0:http
# 2:8:5:http 1:1:0:oip. For each configuration, ROUNDS times (default 2): the ceiling
# (trivial_server, the bare libevent HTTP server), A, B, the ceiling, B, A, ... so that a drift
# of the shared machine's speed hits both builds alike. Each run is wrk -t2 -c32 -dDURATION
# after WARMUP seconds of the same load (not counted), and reports req/s, the server's CPU per
# request (frontend + its workers, /proc/<pid>/stat ticks) and non-200 answers; then seq_client
# sends SEQ_N sequential requests on one connection and reports the p50 overhead over the
# worker's own forward (ovh_p50, microseconds); against the ceiling it reports the bare server's
# whole p50 latency, the floor under any server's on this machine. The summary gives each build's
# mean req/s, its ratio to the mean ceiling of that configuration, B/A, CPU per request, ovh_p50
# and the ceiling's latency.
# Env: DURATION (default 10), WARMUP (default 2), ROUNDS (default 2), SEQ_N (default 2000).
# A_CONFIG, B_CONFIG: config.properties lines (';'-separated) added to A's or B's server only,
# for an A/B of a setting with one build, e.g.
#     B_CONFIG=busy_poll_us=200 scripts/bench/ab_compare.sh build build
# A_HANDLER, B_HANDLER: the same for keys of mlp's model-config.yaml handler: section, e.g.
#     A_HANDLER="jit_freeze: false" scripts/bench/ab_compare.sh build build
# MODEL_PT: a TorchScript file served as mlp instead of mlp's own (64 inputs per row), e.g.
#     /usr/bin/python3 scripts/bench/wide_mlp.py /tmp/wide.pt
#     MODEL_PT=/tmp/wide.pt scripts/bench/ab_compare.sh A B 1:1:0:http
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
abs() { case $1 in /*) echo "$1" ;; *) echo "$ROOT/$1" ;; esac; }
[ $# -ge 2 ] || { sed -n 3,14p "$0" >&2; exit 2; }
A=$(abs "$1")
B=$(abs "$2")
shift 2
CONFIGS=("$@")
[ ${#CONFIGS[@]} -gt 0 ] || CONFIGS=(1:1:0:http 2:1:0:http 2:8:5:http 1:1:0:oip)
DURATION=${DURATION:-10}
WARMUP=${WARMUP:-2}
ROUNDS=${ROUNDS:-2}
SEQ_N=${SEQ_N:-2000}
NAME=ab_compare
# shellcheck source=scripts/bench/lib.sh
. "$ROOT/scripts/bench/lib.sh"

for b in "$A" "$B"; do
    for f in "$b/bin/torchserve-c" "$b/bin/torchserve-c-worker"; do
        [ -x "$f" ] || { echo "ab_compare: $f missing: run make all" >&2; exit 1; }
    done
done
[ -e "$ROOT/model-store/mlp.mar" ] || { echo "ab_compare: run make models" >&2; exit 1; }

bench_init tsc-ab

gcc -O2 -Wall -Wextra -Werror -o "$WORK/seq_client" "$ROOT/scripts/bench/seq_client.c"
oip_body "$WORK/oip.json"

ticks() { awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo 0; }
tree_ticks() { # PID: its CPU ticks and its children's (the workers)
    local t w
    t=$(ticks "$1")
    for w in $(ps -o pid= --ppid "$1"); do t=$((t + $(ticks "$w"))); done
    echo "$t"
}
HZ=$(getconf CLK_TCK)

# wrk PORT PATH BODY PID -> "rps cpu_us_per_request non200" (cpu 0 when PID is empty)
run_wrk() {
    BENCH_BODY=$3 wrk -t2 -c32 -d"${WARMUP}s" -s "$ROOT/scripts/bench/post.lua" \
        "http://127.0.0.1:$1$2" > /dev/null 2>&1 || true
    local t0=0 t1=0
    [ -n "$4" ] && t0=$(tree_ticks "$4")
    BENCH_BODY=$3 wrk -t2 -c32 -d"${DURATION}s" -s "$ROOT/scripts/bench/post.lua" \
        "http://127.0.0.1:$1$2" > "$WORK/wrk.last" 2>&1
    [ -n "$4" ] && t1=$(tree_ticks "$4")
    local rps bad
    rps=$(awk '/^Requests\/sec/ {print $2}' "$WORK/wrk.last")
    bad=$(awk -F= '/^non200=/ {print $2}' "$WORK/wrk.last")
    awk -v r="$rps" -v d=$((t1 - t0)) -v s="$DURATION" -v hz="$HZ" -v bad="${bad:-?}" \
        'BEGIN { printf "%s %.1f %s\n", r, d * 1e6 / hz / (r * s), bad }'
}


start_trivial
tport=$TRIV_PORT
# the VM runs slow for the first seconds of load after an idle spell
wrk -t2 -c32 -d"${MACHINE_WARMUP:-10}s" -s "$ROOT/scripts/bench/post.lua" \
    "http://127.0.0.1:$tport/predictions/mlp" > /dev/null 2>&1 || true

declare -A SUM N CPU OVH
echo "(ovh_p50: A and B, the p50 overhead over the forward; C, the bare server's whole p50 latency)"
printf "%-14s %-6s %10s %10s %6s %8s\n" config run "req/s" "cpu_us/req" non200 ovh_p50
for cfg in "${CONFIGS[@]}"; do
    IFS=: read -r w bs delay api <<< "$cfg"
    path=/predictions/mlp body=$SAMPLE
    [ "$api" = oip ] && path=/v2/models/mlp/infer body=$WORK/oip.json
    for r in $(seq "$ROUNDS"); do
        order="A B"
        [ $((r % 2)) = 0 ] && order="B A"
        for x in C $order C; do
            ovh=-
            if [ "$x" = C ]; then
                read -r rps cpu bad < <(run_wrk "$tport" "$path" "$body" "")
                # the floor of any server's latency on this machine: the bare server's own
                ovh=$("$WORK/seq_client" "$tport" "$path" "$body" "$SEQ_N" 200 |
                    sed -n 's/.*lat_p50=\([0-9.]*\).*/\1/p')
                ovh=${ovh:-0}
                OVH[$cfg$x]=$(awk -v a="${OVH[$cfg$x]:-0}" -v b="$ovh" 'BEGIN { print a + b }')
            else
                build=$A extra=${A_CONFIG:-} hy=${A_HANDLER:-}
                [ "$x" = B ] && build=$B extra=${B_CONFIG:-} hy=${B_HANDLER:-}
                EXTRA_CONFIG=$extra HANDLER_YAML=$hy start_mlp "$build" "$w" "$bs" "$delay"
                read -r rps cpu bad < <(run_wrk "$SRV_PORT" "$path" "$body" "$SRV_PID")
                ovh=$("$WORK/seq_client" "$SRV_PORT" "$path" "$body" "$SEQ_N" 200 |
                    sed -n 's/.*ovh_p50=\([0-9.]*\).*/\1/p')
                ovh=${ovh:-0}
                stop_mlp
                OVH[$cfg$x]=$(awk -v a="${OVH[$cfg$x]:-0}" -v b="$ovh" 'BEGIN { print a + b }')
                CPU[$cfg$x]=$(awk -v a="${CPU[$cfg$x]:-0}" -v b="$cpu" 'BEGIN { print a + b }')
            fi
            printf "%-14s %-6s %10s %10s %6s %8s\n" "$cfg" "$x" "$rps" "$cpu" "$bad" "$ovh"
            SUM[$cfg$x]=$(awk -v a="${SUM[$cfg$x]:-0}" -v b="$rps" 'BEGIN { print a + b }')
            N[$cfg$x]=$(( ${N[$cfg$x]:-0} + 1 ))
        done
    done
done

echo
echo "== summary: wrk -t2 -c32 -d${DURATION}s, $ROUNDS rounds; A=$A B=$B; $(nproc) cores"
printf "%-14s %10s %10s %10s %7s %7s %7s %9s %9s %7s %7s %7s\n" config ceiling "A req/s" "B req/s" \
    "A/ceil" "B/ceil" "B/A" "A cpu_us" "B cpu_us" "A ovh" "B ovh" "C lat"
for cfg in "${CONFIGS[@]}"; do
    awk -v c="${SUM[${cfg}C]}" -v nc="${N[${cfg}C]}" -v a="${SUM[${cfg}A]}" -v b="${SUM[${cfg}B]}" \
        -v n="$ROUNDS" -v ca="${CPU[${cfg}A]}" -v cb="${CPU[${cfg}B]}" -v cfg="$cfg" \
        -v oa="${OVH[${cfg}A]}" -v ob="${OVH[${cfg}B]}" -v oc="${OVH[${cfg}C]}" 'BEGIN {
        c /= nc; a /= n; b /= n
        printf "%-14s %10.0f %10.0f %10.0f %7.2f %7.2f %7.2f %9.1f %9.1f %7.0f %7.0f %7.0f\n", cfg,
            c, a, b, a / c, b / c, b / a, ca / n, cb / n, oa / n, ob / n, oc / nc }'
done
echo "(config WORKERS:BATCH:DELAY:API; cpu_us = frontend + workers CPU per request;"
echo " ovh = seq_client p50 latency minus the worker's forward, one connection, us;"
echo " C lat = the bare libevent server's own p50 latency, same client: no server can go below it)"
