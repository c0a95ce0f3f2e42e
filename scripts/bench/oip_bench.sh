#!/bin/bash
# OIP benchmark (issue 6): the cost of the Open Inference Protocol path beside /predictions.
#
#   scripts/bench/oip_bench.sh [BUILD_DIR]        (default build; needs `make all models`, wrk)
#
# One server, mlp (1 worker, batchSize 1) and identity_text (handler.delay_ms 0):
# 1. REST: wrk -t2 -c32 -d10s on /predictions/mlp (the 64-float sample.json) and on
#    /v2/models/mlp/infer with MLServer's request shape ({"inputs":[{"name","shape":[1,64],
#    "datatype":"FP32","data":[64 floats]}]}), alternating, twice each; req/s, p50/p99 and the
#    CPU per request of the frontend and of frontend + worker (/proc/<pid>/stat deltas / requests).
# 2. SSE: identity_text, 100 words, delay 0: median time to first event, mean gap between events
#    and whole-stream time over 30 streams, on /v2/models/identity_text/infer_stream (OIP framing) and on
#    /predictions/identity_text with Accept: text/event-stream (our SSE).
# Env: DURATION (wrk seconds, default 10), STREAMS (default 30).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${1:-build}
case $BUILD in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
DURATION=${DURATION:-10}
STREAMS=${STREAMS:-30}
PY=/usr/bin/python3
NAME=oip_bench
# shellcheck source=scripts/bench/lib.sh
. "$ROOT/scripts/bench/lib.sh"

for f in "$BUILD/bin/torchserve-c" "$BUILD/bin/torchserve-c-worker" "$ROOT/model-store/mlp.mar" \
    "$ROOT/model-store/identity_text.mar"; do
    [ -e "$f" ] || { echo "oip_bench: $f missing: run make all models" >&2; exit 1; }
done
command -v wrk >/dev/null || { echo "oip_bench: wrk missing (scripts/install-deps.sh)" >&2; exit 1; }

WORK=$(mktemp -d -t tsc-oip-bench.XXXXXX)
SRV_PID=
cleanup() {
    [ -n "$SRV_PID" ] && kill "$SRV_PID" 2>/dev/null && wait "$SRV_PID" 2>/dev/null
    rm -rf "$WORK"
}
trap cleanup EXIT

free_port() { $PY -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
# CPU ticks of the server and its workers (the workers' own, live ones)
all_ticks() {
    local t
    t=$(ticks "$SRV_PID")
    for w in $(ps -o pid= --ppid "$SRV_PID"); do t=$((t + $(ticks "$w" 2>/dev/null || echo 0))); done
    echo "$t"
}
to_us() {
    awk -v v="$1" 'BEGIN { n = v + 0; if (v ~ /us$/) print n; else if (v ~ /ms$/) print n * 1000;
                           else if (v ~ /s$/) print n * 1000000; else print n }'
}

# ---- server
port=$(free_port)
mkdir -p "$WORK/store"
cp "$ROOT/model-store/mlp.mar" "$WORK/store/"
(cd "$WORK/store" && mkdir identity_text && cd identity_text &&
    $PY -c 'import zipfile,sys; zipfile.ZipFile(sys.argv[1]).extractall(".")' \
        "$ROOT/model-store/identity_text.mar" &&
    sed -i 's/^\( *delay_ms:\).*/\1 0/' model-config.yaml)
cat > "$WORK/config.properties" <<EOF
inference_address=http://127.0.0.1:$port
management_address=http://127.0.0.1:$(free_port)
metrics_address=http://127.0.0.1:$(free_port)
grpc_inference_port=$(free_port)
grpc_management_port=$(free_port)
disable_token_authorization=true
default_workers_per_model=1
EOF
(cd "$WORK" && TMPDIR=$WORK exec "$BUILD/bin/torchserve-c" --start --foreground \
    --model-store "$WORK/store" --ts-config "$WORK/config.properties" \
    --models mlp=mlp.mar identity_text=identity_text > "$WORK/out" 2> "$WORK/log") &
SRV_PID=$!
for _ in $(seq 300); do
    curl -sf -o /dev/null "http://127.0.0.1:$port/v2/models/mlp/infer" \
        -d '{"inputs":[{"name":"input__0","shape":[1,64],"datatype":"FP32","data":['"$(seq -s, 64 | sed 's/[0-9]\+/0.5/g')"']}]}' &&
        curl -sf -o /dev/null "http://127.0.0.1:$port/v2/models/identity_text/ready" && break
    sleep 0.1
done

# ---- REST
oip_body "$WORK/oip.json"
run_wrk() { # PATH BODY -> "rps p50_us p99_us non200 frontend_cpu_us/req server_cpu_us/req"
    local t0 t1 a0 a1 rps p50 p99 bad
    t0=$(ticks "$SRV_PID")
    a0=$(all_ticks)
    BENCH_BODY=$2 wrk -t2 -c32 -d"${DURATION}s" --latency -s "$ROOT/scripts/bench/post.lua" \
        "http://127.0.0.1:$port$1" > "$WORK/wrk.last" 2>&1
    t1=$(ticks "$SRV_PID")
    a1=$(all_ticks)
    rps=$(awk '/^Requests\/sec/ {print $2}' "$WORK/wrk.last")
    p50=$(to_us "$(awk '$1 == "50%" {print $2}' "$WORK/wrk.last")")
    p99=$(to_us "$(awk '$1 == "99%" {print $2}' "$WORK/wrk.last")")
    bad=$(awk -F= '/^non200=/ {print $2}' "$WORK/wrk.last")
    local hz
    hz=$(getconf CLK_TCK)
    echo "$rps $p50 $p99 ${bad:-?} $(awk -v d=$((t1 - t0)) -v a=$((a1 - a0)) -v r="$rps" \
        -v s="$DURATION" -v hz="$hz" \
        'BEGIN { printf "%.1f %.1f", d * 1e6 / hz / (r * s), a * 1e6 / hz / (r * s) }')"
}
echo "== REST: wrk -t2 -c32 -d${DURATION}s, mlp 1 worker batchSize 1"
printf "   %-22s %9s %8s %8s %6s %13s %13s\n" path req/s p50_us p99_us non200 frontend_us/req \
    server_us/req
declare -A RPS CPU
for round in 1 2; do
    for path in /predictions/mlp /v2/models/mlp/infer; do
        body=$ROOT/scripts/models/mlp/sample.json
        [ "$path" = /v2/models/mlp/infer ] && body=$WORK/oip.json
        read -r rps p50 p99 bad fcpu cpu < <(run_wrk "$path" "$body")
        printf "   %-22s %9s %8s %8s %6s %13s %13s\n" "$path" "$rps" "$p50" "$p99" "$bad" "$fcpu" \
            "$cpu"
        RPS[$path]="${RPS[$path]:-} $rps"
        CPU[$path]="${CPU[$path]:-} $cpu"
    done
done
awk -v p="${RPS[/predictions/mlp]}" -v o="${RPS[/v2/models/mlp/infer]}" \
    -v pc="${CPU[/predictions/mlp]}" -v oc="${CPU[/v2/models/mlp/infer]}" 'BEGIN {
    np = split(p, a); split(o, b); split(pc, c); split(oc, d)
    for (i = 1; i <= np; i++) { sp += a[i]; so += b[i]; scp += c[i]; sco += d[i] }
    printf "   OIP vs /predictions: throughput %.1f%%, server CPU (frontend + worker) per request %+.1f%% (mean of %d rounds)\n",
        100 * so / sp, 100 * (sco - scp) / scp, np }'

# ---- SSE
echo "== SSE: identity_text, 100 words, delay 0, $STREAMS streams each"
$PY - "$port" "$STREAMS" <<'EOF'
import http.client, json, statistics, sys, time
port, n = int(sys.argv[1]), int(sys.argv[2])
text = " ".join(f"w{i}" for i in range(100))

def one(path, body, headers):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    t0 = time.perf_counter()
    c.request("POST", path, body=body, headers=headers)
    r = c.getresponse()
    times = []
    while True:
        line = r.fp.readline()
        if not line or line == b"0\r\n":  # the last chunk of the chunked body
            break
        if line.startswith(b"data:"):
            times.append(time.perf_counter())
    c.close()
    # events that arrive together are read from one buffer: the mean gap over the stream
    # ((last - first) / (n - 1)) says more than per-read gaps
    return times[0] - t0, (times[-1] - times[0]) / max(1, len(times) - 1), len(times), \
        times[-1] - t0

oip = json.dumps({"inputs": [{"name": "prompt", "shape": [1], "datatype": "BYTES",
                              "data": [text]}]})
cases = [("/v2/models/identity_text/infer_stream", oip, {"Content-Type": "application/json"}),
         ("/predictions/identity_text", text, {"Accept": "text/event-stream"})]
print(f"   {'path':42} {'events':>6} {'first_ms':>9} {'gap_us':>8} {'total_ms':>9}  (medians)")
for path, body, hdr in cases:
    firsts, gaps, counts, totals = [], [], [], []
    for _ in range(n):
        f, g, k, t = one(path, body, hdr)
        firsts.append(f)
        gaps.append(g)
        counts.append(k)
        totals.append(t)
    print(f"   {path:42} {statistics.median(counts):6.0f} {statistics.median(firsts)*1e3:9.2f} "
          f"{statistics.median(gaps)*1e6:8.1f} {statistics.median(totals)*1e3:9.2f}")
EOF
