#!/bin/sh
# Builds one example model into model-store/NAME.mar.
#   scripts/models/build_model.sh NAME BUILD_DIR
# Env: MODEL_PYTHON (default /usr/bin/python3) runs the builder, with its torch; MODEL_STORE
# (default model-store) is where the archive goes (scripts/gpu/check.sh builds with a GPU
# host's Python into its own store).
# 1. $MODEL_PYTHON scripts/models/NAME/build.py BUILD_DIR/models/NAME   (if build.py exists)
# 2. BUILD_DIR/bin/torchserve-c-archiver with handler (a .py is located like the files) /
#    serialized file / extra files from
#    scripts/models/NAME/archive.conf (key=value lines: handler=, serialized_file=, extra_files=
#    a comma-separated list; a file is looked up in the build output first, then next to
#    archive.conf) and scripts/models/NAME/model-config.yaml.
set -eu

if [ $# -ne 2 ]; then
    echo "usage: $0 NAME BUILD_DIR" >&2
    exit 2
fi
name=$1
build=$2
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"

src=scripts/models/$name
out=$build/models/$name
conf=$src/archive.conf
[ -d "$src" ] || { echo "$0: no model $src" >&2; exit 1; }
[ -f "$conf" ] || { echo "$0: missing $conf" >&2; exit 1; }

# key=value lookup; blank lines and # comments ignored
conf_get() {
    sed -n "s/^[[:space:]]*$1[[:space:]]*=[[:space:]]*//p" "$conf" | sed 's/[[:space:]]*$//' | tail -n 1
}

# a file named in archive.conf: the build output wins over the source dir
locate() {
    if [ -e "$out/$1" ]; then echo "$out/$1"
    elif [ -e "$src/$1" ]; then echo "$src/$1"
    else echo "$0: $name: $1 not found in $out or $src" >&2; return 1
    fi
}

store=${MODEL_STORE:-model-store}
mkdir -p "$out" "$store"
if [ -f "$src/build.py" ]; then
    echo "building $name ($src/build.py -> $out)"
    "${MODEL_PYTHON:-/usr/bin/python3}" "$src/build.py" "$out"
fi

handler=$(conf_get handler)
serialized=$(conf_get serialized_file)
extras=$(conf_get extra_files)
[ -n "$handler" ] || { echo "$0: $conf: handler= is required" >&2; exit 1; }

# a Python handler file (x.py or x.py:function) is looked up like the other files
case ${handler%%:*} in
*.py)
    hfile=$(locate "${handler%%:*}")
    case $handler in *:*) handler=$hfile:${handler#*:} ;; *) handler=$hfile ;; esac ;;
esac

set -- --model-name "$name" --version 1.0 --handler "$handler"
if [ -n "$serialized" ]; then
    set -- "$@" --serialized-file "$(locate "$serialized")"
fi
# model_file=: an eager-mode model definition (model.py), located like the other files
model_file=$(conf_get model_file)
if [ -n "$model_file" ]; then
    set -- "$@" --model-file "$(locate "$model_file")"
fi
if [ -n "$extras" ]; then
    list=
    old_ifs=$IFS
    IFS=,
    for f in $extras; do
        p=$(locate "$f")
        list=${list:+$list,}$p
    done
    IFS=$old_ifs
    set -- "$@" --extra-files "$list"
fi
if [ -f "$src/model-config.yaml" ]; then
    set -- "$@" --config-file "$src/model-config.yaml"
fi

"$build/bin/torchserve-c-archiver" "$@" --export-path "$store" -f
echo "$store/$name.mar"
