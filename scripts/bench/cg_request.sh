#!/bin/bash
# Instructions the frontend or the worker spends per /predictions/MODEL request, under callgrind:
# the stable figure on a noisy machine (wall-clock ratios drift with the host's load).
#
#   scripts/bench/cg_request.sh [BUILD_DIR] [N] [frontend|worker|bare] [http|grpc]
#                                    (default build, 2000, frontend, http; needs valgrind)
#
# Runs the frontend (or its one worker, through a wrapper that execs it under valgrind) under
# valgrind --tool=callgrind twice, serving N/2 and then 3N/2 sequential keep-alive requests
# (python3-requests, the 64-float sample), and prints the difference of the two instruction
# totals divided by N: start-up, model loading and shutdown cancel out. The worker runs with
# instrumentation off until its first answer (loading libtorch under callgrind takes longer
# than any startup timeout), then on.
# Env: MODEL: the model-store archive to serve (default mlp; mlp_py takes the same sample).
# BODY: the request body (default the mlp's sample, 64 numbers of four decimals).
# EXTRA_CONFIG: config.properties lines (';'-separated) added to the server's config, for
# an A/B of a setting, e.g. EXTRA_CONFIG="enable_access_log=false". CG_KEEP=DIR keeps both
# runs' callgrind files as DIR/cg.out.N/2 and DIR/cg.out.3N/2 for callgrind_annotate.
# With grpc the requests are unary gRPC Predictions calls on one channel (python3-grpcio, the
# stubs make builds in BUILD_DIR/py) instead of HTTP POSTs. `bare grpc` measures grpc_bench.sh's
# ceiling the same way: grpc_bare (scripts/bench/grpc_bare.c, built here), the bare gRPC C core
# server that answers every call with a fixed message, so that the frontend's instructions per
# call can be set against those of gRPC core alone.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${1:-build}
case $BUILD in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
N=${2:-2000}
WHO=${3:-frontend}
MODEL=${MODEL:-mlp}
[ -e "$ROOT/model-store/$MODEL.mar" ] || { echo "cg_request: model-store/$MODEL.mar missing: make models" >&2; exit 2; }
case $WHO in frontend | worker | bare) ;; *) echo "cg_request: frontend, worker or bare, not $WHO" >&2; exit 2 ;; esac
PROTO=${4:-http}
case $PROTO in http | grpc) ;; *) echo "cg_request: http or grpc, not $PROTO" >&2; exit 2 ;; esac
[ "$WHO:$PROTO" != bare:http ] || { echo "cg_request: bare is a gRPC server: bare grpc" >&2; exit 2; }
BODY=${BODY:-$ROOT/scripts/models/mlp/sample.json}

port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

client() { # PORT GRPC_PORT N BODY WAIT_S: N sequential requests, once the server answers
    /usr/bin/python3 - "$PROTO" "$BUILD/py" "$@" "$MODEL" <<'PY'
import sys, time
proto, stubs = sys.argv[1], sys.argv[2]
port, gport, n, wait = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[7])
body = open(sys.argv[6], "rb").read()
model = sys.argv[8]
if proto == "grpc":
    sys.path.insert(0, stubs)
    import grpc, inference_pb2 as pb
    req = pb.PredictionsRequest(model_name=model, input={"data": body}).SerializeToString()
    method = "/org.pytorch.serve.grpc.inference.InferenceAPIsService/Predictions"
    call = None
    def one():  # the answer's bytes, undecoded: grpc_bare's fixed message is not a real one
        global call
        if call is None:  # a channel refused while the server starts backs off: start afresh
            call = grpc.insecure_channel(f"127.0.0.1:{gport}").unary_unary(method)
        try:
            return len(call(req, timeout=60)) > 0
        except grpc.RpcError:
            call = None
            return False
else:
    import requests
    url = f"http://127.0.0.1:{port}/predictions/{model}"
    s = requests.Session()
    def one():
        try:
            return s.post(url, data=body, headers={"Content-Type": "application/json"}).status_code == 200
        except requests.RequestException:
            return False
deadline = time.time() + wait
while not one():
    if time.time() > deadline:
        sys.exit("the server did not start")
    time.sleep(0.5)
for _ in range(n - 1):
    assert one()
PY
}

run() { # run REQUESTS: prints the frontend's total instructions
    local n=$1 d p g
    d=$(mktemp -d)
    p=$(port)
    g=$(port)
    cp "$ROOT/model-store/$MODEL.mar" "$d/"
    cat > "$d/config.properties" <<C
inference_address=http://127.0.0.1:$p
management_address=http://127.0.0.1:$(port)
metrics_address=http://127.0.0.1:$(port)
grpc_inference_port=$g
grpc_management_port=$(port)
disable_token_authorization=true
default_workers_per_model=1
C
    tr ';' '\n' <<<"${EXTRA_CONFIG:-}" >>"$d/config.properties"
    local bin=$BUILD/bin
    if [ "$WHO" = bare ]; then
        (exec valgrind --tool=callgrind --callgrind-out-file="$d/cg.out" "$BARE" "127.0.0.1:$g" \
            100000 >/dev/null 2>"$d/err.log") &
    elif [ "$WHO" = worker ]; then
        # the frontend spawns the worker found beside its own binary
        bin=$d/bin
        mkdir -p "$bin"
        cp "$BUILD/bin/torchserve-c" "$bin/"
        printf '#!/bin/sh\nexec valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file=%s %s "$@"\n' \
            "$d/cg.out" "$BUILD/bin/torchserve-c-worker" > "$bin/torchserve-c-worker"
        chmod +x "$bin/torchserve-c-worker"
        printf 'default_response_timeout=900\ndefault_startup_timeout=900\n' >> "$d/config.properties"
        (cd "$d" && exec "$bin/torchserve-c" --start --foreground --ncs --model-store "$d" \
            --ts-config config.properties --models $MODEL=$MODEL.mar >/dev/null 2>"$d/err.log") &
    else
        (cd "$d" && exec valgrind --tool=callgrind --callgrind-out-file="$d/cg.out" \
            "$bin/torchserve-c" --start --foreground --ncs --model-store "$d" \
            --ts-config config.properties --models $MODEL=$MODEL.mar >/dev/null 2>"$d/err.log") &
    fi
    local vp=$!
    client "$p" "$g" 1 "$BODY" 900
    # the valgrind process the wrapper exec'd is the frontend's child
    local wp=
    if [ "$WHO" = worker ]; then
        wp=$(ps -o pid= --ppid $vp | tr -d ' ')
        callgrind_control -i on "$wp" >/dev/null
    fi
    client "$p" "$g" "$n" "$BODY" 60
    local out=$d/cg.out
    if [ -n "$wp" ]; then
        # dumped now: at shutdown a slow valgrind would be killed before writing its file
        callgrind_control --dump "$wp" >/dev/null
        for _ in $(seq 300); do
            out=$(grep -l '^totals:' "$d"/cg.out.* 2>/dev/null | head -1 || true)
            [ -n "$out" ] && break
            sleep 0.2
        done
    fi
    kill -TERM $vp
    wait $vp || true
    for _ in $(seq 100); do grep -q '^totals:' "$out" 2>/dev/null && break; sleep 0.2; done
    grep -q '^totals:' "$out" || { echo "cg_request: no callgrind totals for $WHO" >&2; exit 1; }
    awk '/^totals:/ {print $2}' "$out"
    [ -n "${CG_KEEP:-}" ] && cp "$out" "$CG_KEEP/cg.out.$n"
    [ -n "${CG_DEBUG:-}" ] && echo "kept $d" >&2 || rm -rf "$d"
}

if [ "$WHO" = bare ]; then
    . "$ROOT/scripts/bench/lib.sh"
    BARE_DIR=$(mktemp -d)
    trap 'rm -rf "$BARE_DIR"' EXIT
    build_grpc_bare "$BARE_DIR"
    BARE=$BARE_DIR/grpc_bare
fi
a=$(run $((N / 2)))
b=$(run $((N * 3 / 2)))
[ -n "$a" ] && [ -n "$b" ] || exit 1
echo "$WHO instructions per $PROTO request: $(( (b - a) / N )) ($BUILD, $MODEL, N=$N)"
