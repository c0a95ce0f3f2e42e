#!/bin/sh
# Installs the Debian packages torchserve-c needs to build, run and test.
# Idempotent: prints nothing and touches nothing when every package is present.
set -eu

# haproxy: the balancer of deploy/run-cluster.sh (and its tests); python3-yaml: the tests that
# read deploy/kubernetes/ and the Python handlers' model_yaml_config; libpython3-dev: the
# Python handler plugin (build/lib/libts_python.so), for Debian's python3; python3-venv: the
# tests of Python workers in a venv (tests/integration/test_python_env.py); clang and libclang-rt-14-dev: the libFuzzer
# targets (make fuzz)
PKGS="build-essential pkg-config
libevent-dev libgrpc-dev libabsl-dev libprotobuf-c-dev protobuf-c-compiler protobuf-compiler
protobuf-compiler-grpc libprotobuf-dev liblmdb-dev libyaml-dev libjansson-dev libarchive-dev
uuid-dev libtorch-dev libopenblas0-pthread libssl-dev openssl
python3 python3-pytest python3-grpcio python3-protobuf python3-requests python3-torch python3-yaml
python3-prometheus-client python3-venv
libpython3-dev
curl jq wrk nghttp2-client clang-format
haproxy
clang libclang-rt-14-dev zlib1g-dev"
# the built-in Python vision handlers (image_classifier, ...), the resnet18 example and its tests;
# python3-lru-dict: the LRU that TorchServe's stateful handlers import (from lru import LRU)
PKGS="$PKGS python3-torchvision python3-pil python3-lru-dict"
# python3-numpy: the worker's MLServer runtimes and Inferless apps (tsc_runtimes, mlserver.codecs)
PKGS="$PKGS python3-numpy"
# valgrind: scripts/bench/cg_request.sh (callgrind) and the test that a frontend run under a tool
# keeps its scratch directory (tests/integration/test_core.py)
PKGS="$PKGS valgrind"
# python3-pip and python3-venv: install_py_dep_per_model=true (a model's requirements.txt into
# a virtual environment of its own, frontend/mgmt/model_venv.h) and its tests
PKGS="$PKGS python3-pip python3-venv"
# strace: scripts/bench/syscalls.sh and the test that a reply needs no write-readiness wait
# (tests/integration/test_http_write.py)
PKGS="$PKGS strace"
# libhiredis-dev: the worker's shared sequence-state backend (state_store=redis://...,
# backend/worker/state_redis.c); redis-server: the Redis its tests and
# deploy/run-cluster.sh --redis start
PKGS="$PKGS libhiredis-dev redis-server"

# nodejs: the official openai npm client, the OpenAI API's acceptance client (tests/openai/,
# installed with npm ci by `make openai-client`)
PKGS="$PKGS nodejs"

missing=""
# Debian's nodejs comes without npm (its own package); NodeSource's has it built in and conflicts
# with Debian's npm: ask for npm only when there is none
command -v npm >/dev/null 2>&1 || missing=" npm"
for p in $PKGS; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
        missing="$missing $p"
    fi
done
[ -z "$missing" ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
    echo "install-deps: missing packages:$missing (run this script as root)" >&2
    exit 1
fi
echo "install-deps: installing$missing"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# shellcheck disable=SC2086
apt-get install -y -qq --no-install-recommends $missing >/dev/null
