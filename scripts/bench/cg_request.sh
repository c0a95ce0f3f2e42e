#!/bin/bash
# Instructions the frontend spends per /predictions/mlp request, under callgrind: the stable
# figure on a noisy machine (wall-clock ratios drift with the host's load).
#
#   scripts/bench/cg_request.sh [BUILD_DIR] [N]      (default build, 2000; needs valgrind)
#
# Runs the frontend under valgrind --tool=callgrind twice, serving N/2 and then 3N/2 sequential
# keep-alive requests (python3-requests, the 64-float sample), and prints the difference of the
# two instruction totals divided by N: start-up, model loading and shutdown cancel out.
# Env: EXTRA_CONFIG: config.properties lines (';'-separated) added to the server's config, for
# an A/B of a setting, e.g. EXTRA_CONFIG="enable_access_log=false".
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${1:-build}
case $BUILD in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
N=${2:-2000}
BODY=$ROOT/scripts/models/mlp/sample.json

port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

run() { # run REQUESTS: prints the frontend's total instructions
    local n=$1 d p
    d=$(mktemp -d)
    p=$(port)
    cp "$ROOT/model-store/mlp.mar" "$d/"
    cat > "$d/config.properties" <<C
inference_address=http://127.0.0.1:$p
management_address=http://127.0.0.1:$(port)
metrics_address=http://127.0.0.1:$(port)
grpc_inference_port=$(port)
grpc_management_port=$(port)
disable_token_authorization=true
default_workers_per_model=1
C
    tr ';' '\n' <<<"${EXTRA_CONFIG:-}" >>"$d/config.properties"
    (cd "$d" && exec valgrind --tool=callgrind --callgrind-out-file="$d/cg.out" \
        "$BUILD/bin/torchserve-c" --start --foreground --ncs --model-store "$d" \
        --ts-config config.properties --models mlp=mlp.mar >/dev/null 2>"$d/err.log") &
    local vp=$!
    /usr/bin/python3 - "$p" "$n" "$BODY" <<'PY'
import sys, time, requests
port, n, body = int(sys.argv[1]), int(sys.argv[2]), open(sys.argv[3], "rb").read()
url = f"http://127.0.0.1:{port}/predictions/mlp"
s = requests.Session()
deadline = time.time() + 120
while True:
    try:
        if s.post(url, data=body, headers={"Content-Type": "application/json"}).status_code == 200:
            break
    except requests.RequestException:
        pass
    if time.time() > deadline:
        sys.exit("the server did not start")
    time.sleep(0.5)
for _ in range(n):
    assert s.post(url, data=body, headers={"Content-Type": "application/json"}).status_code == 200
PY
    kill -TERM $vp
    wait $vp || true
    awk '/^totals:/ {print $2}' "$d/cg.out"
    rm -rf "$d"
}

a=$(run $((N / 2)))
b=$(run $((N * 3 / 2)))
echo "frontend instructions per request: $(( (b - a) / N )) ($BUILD, N=$N)"
