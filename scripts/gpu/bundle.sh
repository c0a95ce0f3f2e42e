#!/bin/bash
# Packs what a GPU host needs from this Debian 12 machine to run scripts/gpu/check.sh: a GPU host
# has its own compilers, CUDA torch and Python, but none of our Debian libraries.
#   scripts/gpu/bundle.sh [BUILD]      (BUILD: default build; needs `make all` there)
# Writes BUILD/gpu-carry/torchserve-c-gpu.tar.xz (about 15 MB), holding
#   bin/   torchserve-c and torchserve-c-archiver (Debian-built), wrk (the load generator of
#          the benchmarks) and make (used when the host has none)
#   lib/   the shared libraries those need, from ldd, without glibc's, libstdc++ and libgcc_s:
#          the worker inherits the frontend's LD_LIBRARY_PATH, and the host's libstdc++ is newer
#          than Debian's (check.sh also drops any library the host has itself)
#   dev/   headers and libraries the worker is built with (LMDB, hiredis, libyaml, jansson, libuuid), a
#          prefix for make DEPS_PREFIX=
#   INFO   the commit and the date
# Copy the tarball to the same path in the GPU host's checkout (or carry BUILD/gpu-carry there);
# check.sh unpacks it.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${1:-build}
cd "$ROOT"
for b in torchserve-c torchserve-c-archiver; do
    [ -x "$BUILD/bin/$b" ] || { echo "bundle.sh: $BUILD/bin/$b missing: run make all" >&2; exit 1; }
done
OUTDIR=$BUILD/gpu-carry
STAGE=$(mktemp -d -t tsc-bundle.XXXXXX)
trap 'rm -rf "$STAGE"' EXIT
mkdir -p "$STAGE/bin" "$STAGE/lib" "$STAGE/dev/include/uuid" "$STAGE/dev/lib" "$OUTDIR"

cp "$BUILD/bin/torchserve-c" "$BUILD/bin/torchserve-c-archiver" "$STAGE/bin/"
cp "$(command -v wrk)" "$STAGE/bin/wrk"
cp "$(command -v make)" "$STAGE/bin/make"

# glibc's own libraries, the loader, and the C++ runtime stay the host's
keep() {
    case $1 in
    libc.so.* | libm.so.* | libpthread.so.* | libdl.so.* | librt.so.* | libresolv.so.* | \
        libutil.so.* | ld-linux*.so.* | libstdc++.so.* | libgcc_s.so.* | linux-vdso.so.*) return 1 ;;
    esac
    return 0
}
for b in "$STAGE"/bin/*; do
    ldd "$b" | awk '/=> \// {print $1, $3}' | while read -r name path; do
        if keep "$name"; then cp -L "$path" "$STAGE/lib/$name"; fi
    done
done

# the worker's build dependencies: headers, and each library under its soname and as lib*.so
for h in lmdb.h yaml.h jansson.h jansson_config.h; do
    cp "/usr/include/$h" "$STAGE/dev/include/"
done
cp /usr/include/uuid/uuid.h "$STAGE/dev/include/uuid/"
cp -r /usr/include/hiredis "$STAGE/dev/include/"
MA=$(gcc -print-multiarch)
for l in liblmdb.so libhiredis.so libyaml.so libjansson.so libuuid.so; do
    real=$(readlink -f "/usr/lib/$MA/$l")
    soname=$(objdump -p "$real" | awk '/SONAME/ {print $2}')
    cp "$real" "$STAGE/dev/lib/$soname"
    ln -sf "$soname" "$STAGE/dev/lib/$l"
done

{
    echo "commit $(git rev-parse HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (with local changes)')"
    # shellcheck disable=SC1091
    echo "built $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(. /etc/os-release && echo "$PRETTY_NAME")"
} >"$STAGE/INFO"

tar -C "$STAGE" -cJf "$OUTDIR/torchserve-c-gpu.tar.xz.tmp" .
mv "$OUTDIR/torchserve-c-gpu.tar.xz.tmp" "$OUTDIR/torchserve-c-gpu.tar.xz"
echo "$OUTDIR/torchserve-c-gpu.tar.xz: $(du -h "$OUTDIR/torchserve-c-gpu.tar.xz" | cut -f1)" \
    "($(find "$STAGE/lib" -type f | wc -l) libraries; $(head -1 "$STAGE/INFO"))"
