#!/bin/bash
# resnet18 behind the built-in image_classifier (issues 11, 37): images/s of a 640x480 JPEG at 8
# and 32 connections against the plain eager loop on both cores, with CPU per image and top-5
# drift.   scripts/bench/resnet_bench.sh [BUILD_DIR]     (needs `make all models`, wrk)
# See resnet_bench.py for what is measured. Env: DURATION (seconds per run, default 20),
# CONNS (default "8 32"), CONFIGS ("workers:threads:batch[:optimize[:decode]] ...").
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
exec /usr/bin/python3 "$ROOT/scripts/bench/resnet_bench.py" "${1:-build}"
