#!/bin/sh
# Lays out the files of the runtime image under DEST, as they are in the image's root:
#
#   deploy/image-layout.sh DEST [BUILD]        BUILD: the build directory (default build)
#
#   DEST/opt/torchserve-c/bin/       torchserve-c, torchserve-c-worker, torchserve-c-archiver
#   DEST/opt/torchserve-c/lib/       libts_python.so and python/ (the ts package): the worker
#                                    finds them at bin/../lib, for Python handlers
#   DEST/etc/torchserve-c/config.properties          deploy/config.properties
#   DEST/home/model-server/model-store/*.mar         the example models (make models)
#
# deploy/Dockerfile runs it in its build stage and copies DEST into the runtime stage, whose
# packages are deploy/runtime-packages.txt; tests/integration/test_image.py runs it too and
# serves every example model from DEST. Run `make all models` first.
set -eu

if [ $# -lt 1 ] || [ $# -gt 2 ]; then
    sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
fi
dest=$1
root=$(cd "$(dirname "$0")/.." && pwd)
build=${2:-build}
case "$build" in /*) ;; *) build=$root/$build ;; esac

for f in bin/torchserve-c bin/torchserve-c-worker bin/torchserve-c-archiver lib/libts_python.so \
    lib/python/ts/__init__.py; do
    [ -e "$build/$f" ] || { echo "image-layout: $build/$f missing: run make all" >&2; exit 1; }
done
set -- "$root"/model-store/*.mar
[ -e "$1" ] || { echo "image-layout: no model-store/*.mar: run make models" >&2; exit 1; }

mkdir -p "$dest/opt/torchserve-c/bin" "$dest/opt/torchserve-c/lib" "$dest/etc/torchserve-c" \
    "$dest/home/model-server/model-store"
cp "$build/bin/torchserve-c" "$build/bin/torchserve-c-worker" "$build/bin/torchserve-c-archiver" \
    "$dest/opt/torchserve-c/bin/"
cp "$build/lib/libts_python.so" "$dest/opt/torchserve-c/lib/"
rm -rf "$dest/opt/torchserve-c/lib/python"
cp -R "$build/lib/python" "$dest/opt/torchserve-c/lib/python"
find "$dest/opt/torchserve-c/lib/python" -name __pycache__ -prune -exec rm -rf {} +
cp "$root/deploy/config.properties" "$dest/etc/torchserve-c/config.properties"
cp "$@" "$dest/home/model-server/model-store/"
