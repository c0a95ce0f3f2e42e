#!/bin/sh
# Renders deploy/haproxy/haproxy.cfg.in to stdout.
#
#   render.sh [--http-bind ADDR:PORT] [--grpc-bind ADDR:PORT] [--stats-socket PATH]
#             --instance NAME HOST HTTP_PORT GRPC_PORT [--instance ...]
#   render.sh [...] --dns SLOTS FQDN HTTP_PORT GRPC_PORT
#
# --instance: one torchserve-c instance at a fixed address (deploy/run-cluster.sh, or machines
#   you list yourself). NAME is what the x-ts-instance response header and HAProxy's logs show.
# --dns: instances found through DNS, e.g. the pods behind a headless Kubernetes Service: SLOTS
#   server slots per backend (more pods than slots are not used), filled from FQDN's A records
#   by the resolvers of /etc/resolv.conf.
# Defaults: --http-bind :8080 --grpc-bind :7070 --stats-socket /tmp/haproxy.sock
set -eu

here=$(cd "$(dirname "$0")" && pwd)
http_bind=":8080"
grpc_bind=":7070"
stats_socket="/tmp/haproxy.sock"
http_servers=""
grpc_servers=""
resolvers=""
n=0
# gRPC servers speak h2c and are checked with GET /ping over HTTP/1.1 on the instance's HTTP
# port. HAProxy 2.6 does not take check-proto from default-server, so it is on each line.
grpc_opts="proto h2 check-proto h1 port"

usage() {
    sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

is_port() {
    case "$1" in
    '' | *[!0-9]*) return 1 ;;
    esac
    [ "$1" -ge 1 ] && [ "$1" -le 65535 ]
}

while [ $# -gt 0 ]; do
    case "$1" in
    --http-bind) [ $# -ge 2 ] || usage; http_bind=$2; shift 2 ;;
    --grpc-bind) [ $# -ge 2 ] || usage; grpc_bind=$2; shift 2 ;;
    --stats-socket) [ $# -ge 2 ] || usage; stats_socket=$2; shift 2 ;;
    --instance)
        [ $# -ge 5 ] || usage
        if ! is_port "$4" || ! is_port "$5"; then
            echo "render.sh: bad port in --instance $2" >&2
            exit 2
        fi
        n=$((n + 1))
        # the same name and id in both backends of a protocol
        http_servers="$http_servers    server $2 $3:$4 id $n
"
        grpc_servers="$grpc_servers    server $2 $3:$5 id $n $grpc_opts $4
"
        shift 5
        ;;
    --dns)
        [ $# -ge 5 ] || usage
        if ! is_port "$2" || ! is_port "$4" || ! is_port "$5"; then
            echo "render.sh: --dns takes SLOTS FQDN HTTP_PORT GRPC_PORT, numbers >= 1" >&2
            exit 2
        fi
        n=$2
        # a slot without a pod has no address and stays in maintenance, not failing checks
        dns_opts="resolvers cluster init-addr none"
        http_servers="    server-template ts 1-$2 $3:$4 $dns_opts
"
        grpc_servers="    server-template ts 1-$2 $3:$5 $grpc_opts $4 $dns_opts
"
        resolvers="
resolvers cluster
    parse-resolv-conf
    hold valid 5s
    hold obsolete 30s
"
        shift 5
        ;;
    -h | --help) usage ;;
    *) echo "render.sh: unknown argument $1" >&2; usage ;;
    esac
done
[ "$n" != 0 ] || { echo "render.sh: name at least one --instance, or --dns" >&2; exit 2; }

# awk -v would expand backslashes; ENVIRON passes the values untouched
HTTP_BIND=$http_bind GRPC_BIND=$grpc_bind STATS_SOCKET=$stats_socket \
HTTP_SERVERS=$http_servers GRPC_SERVERS=$grpc_servers RESOLVERS=$resolvers \
awk '
    function val(k,  v) { v = ENVIRON[k]; gsub(/&/, "\\\\&", v); return v }
    $1 == "@HTTP_SERVERS@" { printf "%s", ENVIRON["HTTP_SERVERS"]; next }
    $1 == "@GRPC_SERVERS@" { printf "%s", ENVIRON["GRPC_SERVERS"]; next }
    $1 == "@RESOLVERS@"    { printf "%s", ENVIRON["RESOLVERS"]; next }
    {
        gsub(/@HTTP_BIND@/, val("HTTP_BIND"))
        gsub(/@GRPC_BIND@/, val("GRPC_BIND"))
        gsub(/@STATS_SOCKET@/, val("STATS_SOCKET"))
        print
    }
' "$here/haproxy.cfg.in"
