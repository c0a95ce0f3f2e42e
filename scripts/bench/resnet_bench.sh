#!/bin/bash
# resnet18 behind the built-in image_classifier (issue 11): images/s against the limit.
#   scripts/bench/resnet_bench.sh [BUILD_DIR]     (needs `make all models`, wrk)
# See resnet_bench.py for what is measured. Env: DURATION (seconds per run, default 20),
# CONFIGS ("workers:threads:batch ..." to try, default a few that fit 2 cores).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
exec /usr/bin/python3 "$ROOT/scripts/bench/resnet_bench.py" "${1:-build}"
