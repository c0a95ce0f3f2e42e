#!/bin/bash
# `make bench`: runs every scripts/bench/*_bench.sh with the build directory (default build).
set -euo pipefail
dir=$(dirname "$0")
rc=0
for b in "$dir"/*_bench.sh; do
    echo "##### $(basename "$b")"
    bash "$b" "${1:-build}" || rc=1
done
exit $rc
