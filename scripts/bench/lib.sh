# Shared pieces of the benchmark scripts; source it after setting ROOT (the repository) and NAME
# (the script's name, for messages). Not a script of its own.
#
#   bench_init PREFIX              WORK (a temp dir) and PIDS, removed/killed on exit
#   free_port                      an unused TCP port on 127.0.0.1
#   oip_body OUT                   the mlp sample as an OIP FP32 request ({"inputs": [...]})
#   start_mlp BUILD WORKERS BATCH DELAY
#                                  torchserve-c serving mlp with that model-config.yaml, once
#                                  every worker is up; sets SRV_PID and SRV_PORT. MODEL_PT: a
#                                  TorchScript file served in place of mlp's model.pt (64 inputs
#                                  per row, like the sample; scripts/bench/wide_mlp.py makes one)
#   stop_mlp                       stops it
#   start_trivial                  builds and starts the bare libevent server (trivial_server.c,
#                                  the ceiling and the latency floor); sets TRIV_PORT and TRIV_PID
#   knob_lines TEXT [INDENT]       an env knob's ';'-separated lines (EXTRA_CONFIG, HANDLER_YAML),
#                                  each with its leading spaces replaced by INDENT
#   build_grpc_bare DIR            builds DIR/grpc_bare (grpc_bare.c, the bare gRPC C core
#                                  server: grpc_bench.sh's ceiling)
PY=/usr/bin/python3
SAMPLE=$ROOT/scripts/models/mlp/sample.json

bench_init() {
    WORK=$(mktemp -d -t "$1.XXXXXX")
    PIDS=()
    trap bench_cleanup EXIT
}
bench_cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    rm -rf "$WORK"
}

build_grpc_bare() {
    g++ -O2 -Wall -Wextra -Werror -fno-exceptions -fno-rtti -c -o "$1/grpc_absl.o" \
        "$ROOT/frontend/grpc/grpc_absl.cpp"
    gcc -O2 -Wall -Wextra -Werror -o "$1/grpc_bare" "$ROOT/scripts/bench/grpc_bare.c" \
        "$1/grpc_absl.o" -lgrpc -lgpr -labsl_synchronization
}

knob_lines() { [ -z "$1" ] || tr ';' '\n' <<<"$1" | sed "s/^ */${2:-}/"; }

free_port() { $PY -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

oip_body() {
    $PY - "$SAMPLE" "$1" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
x = d["data"] if isinstance(d, dict) else d
while isinstance(x[0], list):
    x = [v for r in x for v in r]
json.dump({"inputs": [{"name": "input__0", "shape": [1, 64], "datatype": "FP32", "data": x}]},
          open(sys.argv[2], "w"))
EOF
}

start_mlp() {
    local d=$WORK/srv
    rm -rf "$d"
    mkdir -p "$d/store/mlp"
    (cd "$d/store/mlp" && $PY -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall()' \
        "$ROOT/model-store/mlp.mar")
    [ -z "${MODEL_PT:-}" ] || cp "$MODEL_PT" "$d/store/mlp/model.pt"
    # HANDLER_YAML: more keys of the handler: section, ';'-separated (an A/B of a handler key,
    # e.g. HANDLER_YAML="jit_freeze: false")
    local handler=$'responseTimeout: 120\nhandler:\n  input_shape: [64]'
    [ -z "${HANDLER_YAML:-}" ] || handler+=$'\n'$(knob_lines "$HANDLER_YAML" "  ")
    printf 'minWorkers: %s\nmaxWorkers: %s\nbatchSize: %s\nmaxBatchDelay: %s\n%s\n' "$2" "$2" "$3" \
        "$4" "$handler" > "$d/store/mlp/model-config.yaml"
    SRV_PORT=$(free_port)
    {
        echo "inference_address=http://127.0.0.1:$SRV_PORT"
        echo "management_address=http://127.0.0.1:$(free_port)"
        echo "metrics_address=http://127.0.0.1:$(free_port)"
        echo "grpc_inference_port=$(free_port)"
        echo "grpc_management_port=$(free_port)"
        echo "disable_token_authorization=true"
        echo "worker_debug_headers=true" # seq_client reads x-ts-worker-forward-us
        # EXTRA_CONFIG: more config.properties lines, ';'-separated (an A/B of a setting)
        knob_lines "${EXTRA_CONFIG:-}"
    } > "$d/config.properties"
    (cd "$d" && TMPDIR=$d exec "$1/bin/torchserve-c" --start --foreground --model-store store \
        --models mlp --ts-config config.properties > out.log 2> server.log) &
    SRV_PID=$!
    PIDS+=("$SRV_PID")
    local code=000
    for _ in $(seq 600); do
        code=$(curl -s -o /dev/null -w '%{http_code}' -X POST -H 'Content-Type: application/json' \
            --data-binary @"$SAMPLE" "http://127.0.0.1:$SRV_PORT/predictions/mlp" || true)
        # the first answer needs only one worker: wait for all of them
        [ "$code" = 200 ] && [ "$(ps -o pid= --ppid "$SRV_PID" | wc -l)" -ge "$2" ] && break
        sleep 0.05
    done
    [ "$code" = 200 ] || { echo "$NAME: $1 never served:" >&2; tail "$d/server.log" >&2; exit 1; }
    sleep 1
}
stop_mlp() {
    kill "$SRV_PID"
    wait "$SRV_PID" 2>/dev/null || true
}
start_trivial() {
    gcc -O2 -Wall -Wextra -Werror -o "$WORK/trivial_server" "$ROOT/scripts/bench/trivial_server.c" \
        -levent
    TRIV_PORT=$(free_port)
    "$WORK/trivial_server" "$TRIV_PORT" > "$WORK/trivial.out" &
    TRIV_PID=$!
    PIDS+=("$TRIV_PID")
    for _ in $(seq 50); do grep -q listening "$WORK/trivial.out" && break; sleep 0.1; done
}
