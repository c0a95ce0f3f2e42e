#!/bin/bash
# The README's first command on a machine that lacks a package the build needs, as a new user
# runs it: removes PACKAGE (default libprotobuf-dev, whose .proto files the build generates C
# code from), runs `make run` in this checkout until it prints `Model server started.`, stops
# the server, and checks that the project's own install step (scripts/install-deps.sh, run by
# `make run`) brought the package back.
#
#   .ci/fresh-machine.sh [PACKAGE]        as root, in a checkout whose build/ is still empty
#
# .ci/run calls it before anything is built, so `make run` builds the whole tree after the
# install, as on a fresh machine. The only change to the README's command is TS_CONFIG_FILE: a
# copy of config.properties with free ports, its logs and pidfile in a temporary directory, so
# that it runs beside other servers on the machine. The package is missing only until the
# install step of `make run` puts it back (seconds); if this script stops earlier, its exit trap
# installs it again. Exits 0 when the server started and the package is installed again.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
pkg=${1:-libprotobuf-dev}
timeout_s=${FRESH_MACHINE_TIMEOUT:-1800}

say() { echo "fresh-machine: $*"; }
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }

[ "$(id -u)" = 0 ] || { say "must run as root (it removes and reinstalls $pkg)"; exit 1; }
grep -qw -- "$pkg" scripts/install-deps.sh ||
    { say "$pkg is not a package of scripts/install-deps.sh"; exit 1; }
installed "$pkg" || { say "$pkg is not installed to begin with"; exit 1; }
if [ -e build/bin/torchserve-c ]; then
    say "note: build/ is not empty, so only what is missing is built (a fresh clone builds all)"
fi

tmp=$(mktemp -d -t tsc-fresh.XXXXXX)
pgid=""
# shellcheck disable=SC2317 # called by the EXIT trap
restore() {
    if [ -n "$pgid" ] && kill -0 -- "-$pgid" 2>/dev/null; then
        kill -TERM -- "-$pgid" 2>/dev/null
        for _ in $(seq 300); do kill -0 -- "-$pgid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL -- "-$pgid" 2>/dev/null
    fi
    if ! installed "$pkg"; then
        say "installing $pkg again"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$pkg" \
            >/dev/null
    fi
    rm -rf "$tmp"
}
trap restore EXIT
trap 'exit 1' INT TERM

free_ports() {
    /usr/bin/python3 -c '
import socket
socks = [socket.socket() for _ in range(5)]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))'
}
read -r p_inf p_mgmt p_met p_grpc p_grpc_mgmt <<<"$(free_ports)"
sed -e "s|^inference_address=.*|inference_address=http://127.0.0.1:$p_inf|" \
    -e "s|^management_address=.*|management_address=http://127.0.0.1:$p_mgmt|" \
    -e "s|^metrics_address=.*|metrics_address=http://127.0.0.1:$p_met|" \
    -e "s|^grpc_inference_port=.*|grpc_inference_port=$p_grpc|" \
    -e "s|^grpc_management_port=.*|grpc_management_port=$p_grpc_mgmt|" \
    config.properties >"$tmp/config.properties"
echo "log_location=$tmp/logs" >>"$tmp/config.properties"

say "removing $pkg (dpkg -r --force-depends: the packages that depend on it stay)"
dpkg -r --force-depends "$pkg" >/dev/null 2>&1 || { say "dpkg -r $pkg failed"; exit 1; }
installed "$pkg" && { say "$pkg is still installed"; exit 1; }

say "make run (log: $tmp/make-run.log)"
t0=$SECONDS
TS_CONFIG_FILE=$tmp/config.properties TMPDIR=$tmp setsid make run >"$tmp/make-run.log" 2>&1 &
pgid=$!
started=0
while kill -0 "$pgid" 2>/dev/null && [ $((SECONDS - t0)) -lt "$timeout_s" ]; do
    if grep -q '^Model server started\.' "$tmp/make-run.log"; then
        started=1
        break
    fi
    sleep 1
done
rc=0
if [ "$started" = 1 ]; then
    say "Model server started after $((SECONDS - t0)) s"
    curl -sf -o /dev/null "http://127.0.0.1:$p_inf/ping" || { say "/ping does not answer"; rc=1; }
else
    say "make run did not print 'Model server started.'; the end of its output:"
    tail -n 40 "$tmp/make-run.log"
    rc=1
fi
if grep -q "install-deps: installing.*\<$pkg\>" "$tmp/make-run.log"; then
    say "make run's install step installed $pkg"
else
    say "make run's install step did not install $pkg"
    rc=1
fi
installed "$pkg" || { say "$pkg is not installed after make run"; rc=1; }
exit $rc
