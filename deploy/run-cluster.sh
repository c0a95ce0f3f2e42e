#!/usr/bin/env bash
# Runs N torchserve-c instances on loopback and HAProxy in front of them, with one model store.
#
#   deploy/run-cluster.sh N [--models NAME[=FILE] ... | all] [--model-store DIR]
#                           [--ts-config FILE] [--http-port PORT] [--grpc-port PORT]
#                           [--base-port PORT] [--redis] [--workdir DIR]
#                           [--startup-timeout SECONDS]
#   deploy/run-cluster.sh --help
#
# Once every instance answers /ping and the balancer answers too, prints one line on stdout:
#     balancer http://127.0.0.1:PORT grpc 127.0.0.1:PORT
# and runs until SIGINT or SIGTERM, which stop HAProxy and the instances it started (by pid;
# each instance stops its own workers). An instance that dies is reported on stderr and left to
# HAProxy's health checks; if HAProxy dies, everything is stopped and the exit status is 1.
#
# --models       names in the model store (NAME loads NAME.mar or the directory NAME), NAME=FILE,
#                or all (the default)
# --model-store  default: the repository's model-store/
# --ts-config    a config.properties whose keys every instance gets, except the ones each
#                instance must have for itself: addresses, ports, state_dir, log_location,
#                model_store. Token authorization is turned off: each instance would make its
#                own keys (docs/deploy.md)
# --http-port, --grpc-port   the balancer's ports on 127.0.0.1; default: free ports
# --base-port    instance i (1..N) listens on BASE+5(i-1) .. BASE+5(i-1)+4: inference,
#                management, metrics, gRPC inference, gRPC management. Default: a free block
#                below the kernel's ephemeral range (net.ipv4.ip_local_port_range), so that a
#                killed instance can be started again on its ports at once: a port of the
#                ephemeral range may meanwhile be the local end of some outgoing connection (a
#                health check), which blocks it for as long as that connection lingers
# --redis        start a redis-server (on a free loopback port, nothing saved to disk) and give
#                every instance state_store=redis://127.0.0.1:PORT: a sequence then continues
#                with its state on another instance when its own dies (docs/deploy.md). To use a
#                Redis of your own, put state_store=redis://HOST:PORT in --ts-config instead
# --workdir      where instances, logs and the HAProxy config live (kept); default: a temporary
#                directory, removed at the end
#
# Files in the work directory: haproxy.cfg, haproxy.log, haproxy.sock (HAProxy's runtime API),
# redis.log (with --redis),
# instances (one line per instance: name pid http mgmt metrics grpc grpc_mgmt dir), and per
# instance NAME/config.properties, NAME/server.log and NAME/start.sh (the instance's command:
# run it to start a killed instance again on its ports). The binaries come from build/bin/ (or
# $TS_BUILD/bin, or $TSC_BIN).
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=${TS_BUILD:-build}
[ "${build#/}" != "$build" ] || build=$root/$build
bin=${TSC_BIN:-$build/bin}
python=/usr/bin/python3
store=$root/model-store
models=()
base_config=""
http_port=""
grpc_port=""
base_port=""
workdir=""
own_workdir=0
startup_timeout=120
host=127.0.0.1

stop=0
haproxy_pid=""
redis=0
redis_pid=""
names=()
pids=()

say() { echo "run-cluster: $*" >&2; }
die() {
    say "$*"
    cleanup
    exit 1
}
# --help: the whole header on stdout, exit 0; a bad command line: the synopsis on stderr, exit 2
help() {
    sed -n '2,/^set -uo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
    exit 0
}
usage() {
    sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

# true while pid is a live process (a zombie child is not)
alive() {
    local line
    read -r line 2>/dev/null <"/proc/$1/stat" || return 1
    line=${line##*) }
    [ "${line%% *}" != Z ]
}

# N consecutive free TCP ports on 127.0.0.1 below the ephemeral range (tried from a random
# start, all bound at once so that none is taken twice), or starting at $2 if given (then they
# must all be free); prints them on one line
free_ports() {
    "$python" -c '
import random, socket, sys
n, base = int(sys.argv[1]), int(sys.argv[2])
try:
    low = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
except (OSError, ValueError, IndexError):
    low = 32768
def take(first):
    socks = []
    try:
        for p in range(first, first + n):
            s = socket.socket()
            socks.append(s)
            s.bind(("127.0.0.1", p))
        return True
    except OSError:
        return False
    finally:
        for s in socks:
            s.close()
if base:
    if base + n - 1 > 65535 or not take(base):
        sys.exit("ports %d-%d are not all free" % (base, base + n - 1))
    print(" ".join(str(p) for p in range(base, base + n)))
    sys.exit(0)
for _ in range(200):
    first = random.randrange(10000, max(10001, low - n))
    if take(first):
        print(" ".join(str(p) for p in range(first, first + n)))
        sys.exit(0)
sys.exit("no %d free consecutive ports below %d" % (n, low))' "$1" "${2:-0}"
}

cleanup() {
    trap '' INT TERM
    local pid all=() deadline
    [ -n "$haproxy_pid" ] && all+=("$haproxy_pid")
    all+=("${pids[@]}")
    # Redis last: the instances' workers may still write to it while they stop
    local pid_r=$redis_pid
    for pid in "${all[@]}"; do
        alive "$pid" && kill -TERM "$pid" 2>/dev/null
    done
    # instances stop their workers first; give them time, then make sure
    deadline=$((SECONDS + 30))
    for pid in "${all[@]}"; do
        while alive "$pid" && [ $SECONDS -lt $deadline ]; do
            sleep 0.1
        done
        if alive "$pid"; then
            say "pid $pid did not stop after SIGTERM; sending SIGKILL"
            kill -KILL "$pid" 2>/dev/null
        fi
        wait "$pid" 2>/dev/null
    done
    if [ -n "$pid_r" ] && alive "$pid_r"; then
        kill -TERM "$pid_r" 2>/dev/null
        wait "$pid_r" 2>/dev/null
    fi
    if [ "$own_workdir" = 1 ]; then
        rm -rf "$workdir"
    fi
}

trap 'stop=1' INT TERM

# ---- arguments ----
[ $# -ge 1 ] || usage
case "$1" in
-h | --help) help ;;
'' | *[!0-9]*) usage ;;
esac
n=$1
shift
if [ "$n" -lt 1 ] || [ "$n" -gt 64 ]; then
    say "N must be 1..64"
    exit 2
fi
while [ $# -gt 0 ]; do
    case "$1" in
    --models)
        shift
        while [ $# -gt 0 ] && [ "${1#--}" = "$1" ]; do
            IFS=, read -r -a more <<<"$1"
            models+=("${more[@]}")
            shift
        done
        ;;
    --model-store) [ $# -ge 2 ] || usage; store=$2; shift 2 ;;
    --ts-config) [ $# -ge 2 ] || usage; base_config=$2; shift 2 ;;
    --http-port) [ $# -ge 2 ] || usage; http_port=$2; shift 2 ;;
    --grpc-port) [ $# -ge 2 ] || usage; grpc_port=$2; shift 2 ;;
    --base-port) [ $# -ge 2 ] || usage; base_port=$2; shift 2 ;;
    --redis) redis=1; shift ;;
    --workdir) [ $# -ge 2 ] || usage; workdir=$2; shift 2 ;;
    --startup-timeout) [ $# -ge 2 ] || usage; startup_timeout=$2; shift 2 ;;
    -h | --help) help ;;
    *) say "unknown argument $1"; usage ;;
    esac
done
[ ${#models[@]} -gt 0 ] || models=(all)
[ -x "$bin/torchserve-c" ] || { say "$bin/torchserve-c not found: run make"; exit 1; }
if ! command -v haproxy >/dev/null; then
    say "haproxy not found: scripts/install-deps.sh installs it"
    exit 1
fi
[ -d "$store" ] || { say "model store $store not found"; exit 1; }
store=$(cd "$store" && pwd)
[ -z "$base_config" ] || [ -r "$base_config" ] || { say "cannot read $base_config"; exit 1; }

# NAME loads NAME.mar, or the unpacked directory NAME if there is one
model_args=()
for m in "${models[@]}"; do
    if [ "$m" = all ] || [ "${m#*=}" != "$m" ] || [ -d "$store/$m" ]; then
        model_args+=("$m")
    else
        model_args+=("$m=$m.mar")
    fi
done

if [ -z "$workdir" ]; then
    workdir=$(mktemp -d "${TMPDIR:-/tmp}/tsc-cluster.XXXXXX") || exit 1
    own_workdir=1
fi
mkdir -p "$workdir" && workdir=$(cd "$workdir" && pwd) || exit 1

case "$base_port" in
'') ;;
*[!0-9]*) say "--base-port takes a number"; exit 2 ;;
esac
read -r -a ports <<<"$(free_ports $((5 * n)) "$base_port")"
[ ${#ports[@]} -eq $((5 * n)) ] || die "could not find $((5 * n)) free ports"
next_port() { port=${ports[0]}; ports=("${ports[@]:1}"); }
if [ -z "$http_port" ] || [ -z "$grpc_port" ]; then
    read -r -a bports <<<"$(free_ports 2)"
    [ ${#bports[@]} -eq 2 ] || die "could not find 2 free ports for the balancer"
    [ -n "$http_port" ] || http_port=${bports[0]}
    [ -n "$grpc_port" ] || grpc_port=${bports[1]}
fi

# ---- the shared state store ----
redis_url=""
if [ "$redis" = 1 ]; then
    command -v redis-server >/dev/null ||
        die "redis-server not found: scripts/install-deps.sh installs it"
    read -r p_redis <<<"$(free_ports 1)"
    [ -n "$p_redis" ] || die "could not find a free port for Redis"
    redis-server --port "$p_redis" --bind 127.0.0.1 --save "" --appendonly no \
        --dir "$workdir" </dev/null >"$workdir/redis.log" 2>&1 &
    redis_pid=$!
    until [ "$(redis-cli -p "$p_redis" PING 2>/dev/null)" = PONG ]; do
        alive "$redis_pid" || die "redis-server exited: $(tail -n 5 "$workdir/redis.log")"
        sleep 0.05
    done
    redis_url=redis://127.0.0.1:$p_redis
    say "redis-server pid $redis_pid on 127.0.0.1:$p_redis, log $workdir/redis.log"
fi

# ---- instances ----
own_keys='inference_address|management_address|metrics_address'
own_keys+='|grpc_inference_address|grpc_inference_port|grpc_management_address|grpc_management_port'
own_keys+='|disable_token_authorization|model_store|state_dir|log_location'
[ -z "$redis_url" ] || own_keys+='|state_store'
: >"$workdir/instances"
render_args=()
for i in $(seq 1 "$n"); do
    name=ts$i
    dir=$workdir/$name
    mkdir -p "$dir"
    next_port; p_http=$port
    next_port; p_mgmt=$port
    next_port; p_metrics=$port
    next_port; p_grpc=$port
    next_port; p_grpc_mgmt=$port
    {
        if [ -n "$base_config" ]; then
            grep -Ev "^[[:space:]]*($own_keys)[[:space:]]*[=:]" "$base_config"
            echo
        fi
        echo "# written by deploy/run-cluster.sh for instance $name"
        echo "inference_address=http://$host:$p_http"
        echo "management_address=http://$host:$p_mgmt"
        echo "metrics_address=http://$host:$p_metrics"
        echo "grpc_inference_address=$host"
        echo "grpc_inference_port=$p_grpc"
        echo "grpc_management_address=$host"
        echo "grpc_management_port=$p_grpc_mgmt"
        echo "disable_token_authorization=true"
        [ -z "$redis_url" ] || echo "state_store=$redis_url"
    } >"$dir/config.properties"
    # TMPDIR: the instance's pidfile and scratch directories stay in its own directory.
    # start.sh is the instance's command, also for starting it again by hand.
    {
        echo "#!/bin/sh"
        echo "# instance $name of $workdir, written by deploy/run-cluster.sh"
        printf 'cd %q && TMPDIR=%q exec %q --start --foreground --ncs --model-store %q' \
            "$dir" "$dir" "$bin/torchserve-c" "$store"
        printf ' --ts-config %q --models' "$dir/config.properties"
        printf ' %q' "${model_args[@]}"
        printf ' </dev/null >>%q 2>&1\n' "$dir/server.log"
    } >"$dir/start.sh"
    chmod +x "$dir/start.sh"
    "$dir/start.sh" &
    pid=$!
    names+=("$name")
    pids+=("$pid")
    echo "$name $pid $p_http $p_mgmt $p_metrics $p_grpc $p_grpc_mgmt $dir" >>"$workdir/instances"
    render_args+=(--instance "$name" "$host" "$p_http" "$p_grpc")
    say "$name pid $pid: http $host:$p_http grpc $host:$p_grpc" \
        "(management $host:$p_mgmt, metrics $host:$p_metrics), log $dir/server.log"
done

# every instance up: /ping is 200 once each model has its minimum of live workers; and every
# model named is registered (an instance whose start-up model failed serves without it)
deadline=$((SECONDS + startup_timeout))
for i in "${!pids[@]}"; do
    name=${names[$i]}
    read -r p_http p_mgmt <<<"$(awk -v n="$name" '$1 == n { print $3, $4 }' "$workdir/instances")"
    until curl -sf -o /dev/null --max-time 2 "http://$host:$p_http/ping"; do
        [ "$stop" = 0 ] || { cleanup; exit 0; }
        log=$workdir/$name/server.log
        alive "${pids[$i]}" ||
            die "$name exited during start-up:" \
                "$(grep -m 5 ' ERROR ' "$log" || tail -n 5 "$log") (log: $log)"
        [ $SECONDS -lt $deadline ] || die "$name not ready after ${startup_timeout}s (log: $log)"
        sleep 0.2
    done
    listed=$(curl -sf --max-time 5 "http://$host:$p_mgmt/models?limit=1000") ||
        die "$name: GET /models failed on its management port"
    for m in "${models[@]}"; do
        [ "$m" = all ] && continue
        grep -q "\"modelName\": *\"${m%%=*}\"" <<<"$listed" ||
            die "$name did not register model ${m%%=*}:" \
                "$(grep -m 3 ERROR "$workdir/$name/server.log")"
    done
done

# ---- the balancer ----
"$root/deploy/haproxy/render.sh" --http-bind "$host:$http_port" --grpc-bind "$host:$grpc_port" \
    --stats-socket "$workdir/haproxy.sock" "${render_args[@]}" >"$workdir/haproxy.cfg" ||
    die "could not render the HAProxy configuration"
haproxy -c -q -f "$workdir/haproxy.cfg" >"$workdir/haproxy.log" 2>&1 ||
    die "HAProxy refuses $workdir/haproxy.cfg: $(cat "$workdir/haproxy.log")"
haproxy -db -f "$workdir/haproxy.cfg" </dev/null >>"$workdir/haproxy.log" 2>&1 &
haproxy_pid=$!
until curl -sf -o /dev/null --max-time 2 "http://$host:$http_port/ping"; do
    [ "$stop" = 0 ] || { cleanup; exit 0; }
    alive "$haproxy_pid" || die "haproxy exited: $(tail -n 5 "$workdir/haproxy.log")"
    [ $SECONDS -lt $deadline ] ||
        die "the balancer does not answer /ping (log: $workdir/haproxy.log)"
    sleep 0.1
done
say "haproxy pid $haproxy_pid, config $workdir/haproxy.cfg, log $workdir/haproxy.log"
echo "balancer http://$host:$http_port grpc $host:$grpc_port"

# ---- run until told to stop ----
status=0
while [ "$stop" = 0 ]; do
    done_pid=""
    wait -n -p done_pid
    rc=$?
    [ "$stop" = 0 ] || break
    [ -n "$done_pid" ] || continue
    if [ "$done_pid" = "$haproxy_pid" ]; then
        say "haproxy exited with status $rc; stopping the instances"
        haproxy_pid=""
        status=1
        break
    fi
    if [ "$done_pid" = "$redis_pid" ]; then
        say "redis-server exited with status $rc: sequences can no longer keep their state;" \
            "stopping the instances"
        redis_pid=""
        status=1
        break
    fi
    for i in "${!pids[@]}"; do
        [ "${pids[$i]}" = "$done_pid" ] &&
            say "${names[$i]} (pid $done_pid) exited with status $rc;" \
                "HAProxy's health checks take it out"
    done
done
cleanup
exit $status
