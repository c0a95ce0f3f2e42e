#!/usr/bin/python3
"""Checks that dependencies point one way through the tree (DESIGN.md, "Layout").

The frontend (torchserve-c):

    frontend/{main,cli,server,instance}.c  wiring                       (top)
    frontend/http/, frontend/grpc/          transports (peers)
    frontend/mgmt/, frontend/oip/           management, the OIP model (peers)
    frontend/core/                          the transport-neutral scheduler, itself layered
                                            (CORE_ORDER below: a module uses only earlier groups)
    common/                                 shared by both binaries       (bottom)

The worker (torchserve-c-worker and its Python plugin):

    backend/main.c                          wiring: arguments, the built-in table   (top)
    backend/handlers/, backend/python/      the built-in C handlers, the Python plugin (peers)
    backend/worker/                         the loop, ctx (the handler ABI), state, the loader,
                                            itself layered (WORKER_ORDER)
    backend/handler.h, backend/torch/       the handler ABI's declarations; the libtorch shim
    common/                                 (bottom)

Neither binary's code uses the other's. The generated protobuf headers are the gRPC transport's
alone. frontend/archiver.c is the archiver's main and may use common/ and mgmt/archive.

Two kinds of edges are checked:
  - every quoted #include, resolved as gcc does with our flags (the including file's directory,
    then -Icommon -Ibackend -Ifrontend -I$BUILD/gen);
  - the link map: each undefined symbol of an object file, resolved to the object that defines
    it (nm), so that a call without an include is seen too.
An edge is allowed from a rank to the same rank in the same place, or to a lower rank. Every
module of a layered place must be ranked in its order: an unranked one is an error.

    scripts/check_layers.py [BUILD]     exit 1 and one line per edge against the direction
    scripts/check_layers.py --summary   the same, and a table of edges per pair of places
    scripts/check_layers.py --self-test the check finds an upward include and an upward call
"""
import collections
import os
import re
import subprocess
import sys
import tempfile

# place -> rank; a file's place is the longest prefix that matches
RANKS = {
    "common": 0,
    "frontend/core": 1,
    "frontend/mgmt": 2,
    "frontend/oip": 2,
    "frontend/http": 3,
    "frontend/grpc": 3,
    "frontend": 4,
    "backend/handler.h": 1,
    "backend/torch": 1,
    "backend/worker": 2,
    "backend/handlers": 3,
    "backend/python": 3,
    "backend": 4,
    "gen": 0,
}
# inside a layered place, lowest first; a module (a file's stem) may use only its own group and
# the ones before it
ORDERS = {
    "frontend/core": [
        ("core", "config", "batcher", "ev_mem", "loop_wait", "metrics", "model_metrics",
         "metrics_config", "proc_info", "worker_progress", "handler_reply", "conn_budget",
         "gpu_assign", "nvml", "pyinfo"),
        ("job", "access_log", "worker_log", "worker_out", "sys_metrics"),
        ("worker_pool", "worker_exec", "worker_answer"),
        ("sequence",),
        ("model",),
    ],
    "backend/worker": [("state_redis",), ("state", "handler_loader"),
                       ("ctx", "ctx_state", "ctx_input", "ctx_park"), ("worker",)],
}
FRONTEND = ("frontend/core", "frontend/mgmt", "frontend/oip", "frontend/http", "frontend/grpc",
            "frontend")
BACKEND = ("backend/handler.h", "backend/torch", "backend/worker", "backend/handlers",
           "backend/python", "backend")
# who may use what beyond the ranks: place -> the places it may never use, whatever their rank
FORBIDDEN = {
    **{p: set(FRONTEND) for p in BACKEND},
    **{p: set(BACKEND) for p in FRONTEND},
    "backend/handlers": set(FRONTEND) | {"backend/python"},
    "backend/python": set(FRONTEND) | {"backend/handlers"},
    "frontend/mgmt": set(BACKEND) | {"frontend/oip"},
    "frontend/oip": set(BACKEND) | {"frontend/mgmt"},
    "frontend/http": set(BACKEND) | {"frontend/grpc"},
    "frontend/grpc": set(BACKEND) | {"frontend/http"},
}
SPECIAL = {"frontend/archiver.c": {"common", "frontend/mgmt/archive.c", "frontend/mgmt/archive.h"}}
ONLY_GRPC = "gen"  # generated protobuf code: the gRPC transport's alone

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def place_of(path):
    if path.startswith("gen/") or "/gen/" in path:
        return "gen"
    if path in RANKS:
        return path
    parts = path.split("/")
    for n in range(len(parts) - 1, 0, -1):
        p = "/".join(parts[:n])
        if p in RANKS:
            return p
    return None


def order_rank(place, path):
    """The group of path's module in its place's order, or None (place not layered)."""
    if place not in ORDERS:
        return None
    stem = os.path.splitext(os.path.basename(path))[0]
    for i, group in enumerate(ORDERS[place]):
        if stem in group:
            return i
    raise Unranked(path)


class Unranked(Exception):
    pass


def verdict(src, dst):
    """None if src may use dst, else the reason."""
    if src == dst:
        return None
    if src in SPECIAL:
        ok = SPECIAL[src]
        return None if dst in ok or place_of(dst) in ok else "the archiver's main"
    ps, pd = place_of(src), place_of(dst)
    if ps is None or pd is None:
        return None
    if pd == ONLY_GRPC and ps != "frontend/grpc":
        return "generated protobuf code outside frontend/grpc"
    if pd in FORBIDDEN.get(ps, ()):
        return f"{ps} may not use {pd}"
    if ps == pd and ps in ORDERS:
        if order_rank(pd, dst) > order_rank(ps, src):
            return f"upward inside {ps} (" + " < ".join("/".join(g) for g in ORDERS[ps]) + ")"
        return None
    if ps == pd:
        return None
    if RANKS[pd] > RANKS[ps]:
        return f"{ps} (rank {RANKS[ps]}) may not use {pd} (rank {RANKS[pd]})"
    return None


def sources(root):
    for top in ("common", "backend", "frontend"):
        for d, _, files in os.walk(os.path.join(root, top)):
            for f in sorted(files):
                if f.endswith((".c", ".h", ".cpp")):
                    yield os.path.relpath(os.path.join(d, f), root)


def include_edges(root, build):
    dirs = ["common", "backend", "frontend", os.path.join(build, "gen")]
    for src in sources(root):
        text = open(os.path.join(root, src), errors="replace").read()
        for name in INCLUDE.findall(text):
            for base in [os.path.dirname(src)] + dirs:
                cand = os.path.normpath(os.path.join(base, name))
                if os.path.exists(os.path.join(root, cand)):
                    if cand.startswith(build.rstrip("/") + "/gen/"):
                        cand = "gen/" + cand[len(build.rstrip("/")) + 5:]
                    yield src, cand, "include"
                    break


def nm(path):
    out = subprocess.run(["nm", "--defined-only", "-g", path], capture_output=True, text=True)
    defined = {l.split()[-1] for l in out.stdout.splitlines() if len(l.split()) == 3}
    out = subprocess.run(["nm", "-u", path], capture_output=True, text=True)
    undefined = {l.split()[-1] for l in out.stdout.splitlines() if l.strip()}
    return defined, undefined


def link_edges(root, build):
    objdir = os.path.join(root, build, "obj")
    objs = {}
    for d, _, files in os.walk(objdir):
        for f in files:
            if f.endswith(".o"):
                rel = os.path.relpath(os.path.join(d, f), objdir)[:-2]
                src = rel + (".cpp" if os.path.exists(os.path.join(root, rel + ".cpp")) else ".c")
                if rel.startswith("gen/"):
                    src = rel + ".c"
                elif not os.path.exists(os.path.join(root, src)):
                    continue  # left behind by a source that moved or went away
                objs[src] = nm(os.path.join(d, f))
    where = {}
    for src, (defined, _) in objs.items():
        for s in defined:
            where.setdefault(s, src)
    for src, (_, undefined) in objs.items():
        if not src.startswith(("frontend", "common", "backend")):
            continue
        calls = collections.defaultdict(list)
        for s in undefined:
            if s in where:
                calls[where[s]].append(s)
        for dst, syms in calls.items():
            yield src, dst, "calls " + ", ".join(sorted(syms)[:4]) + (
                ", ..." if len(syms) > 4 else "")


def check(root, build, summary=False):
    edges = list(include_edges(root, build))
    if os.path.isdir(os.path.join(root, build, "obj")):
        edges += list(link_edges(root, build))
    else:
        print(f"layers: no {build}/obj: the link map was not checked (run make first)")
        return 2
    unranked = sorted({s for s in sources(root) for p in [place_of(s)] if p in ORDERS
                       and not any(os.path.splitext(os.path.basename(s))[0] in g
                                   for g in ORDERS[p])})
    for s in unranked:
        print(f"{s}: a module of {place_of(s)} that is not ranked in its order "
              "(scripts/check_layers.py, ORDERS)")
    if unranked:
        return 1
    bad = [(s, d, how, why) for s, d, how in edges if (why := verdict(s, d))]
    for s, d, how, why in sorted(set(bad)):
        print(f"{s} -> {d} ({how}): {why}")
    if summary:
        pairs = collections.Counter((place_of(s) or s, place_of(d) or d) for s, d, _ in edges
                                    if place_of(s) != place_of(d))
        print(f"{'from':16} {'to':16} edges")
        for (a, b), n in sorted(pairs.items()):
            print(f"{a:16} {b:16} {n}")
    print(f"layers: {len(edges)} edges checked, {len(bad)} against the direction")
    return 1 if bad else 0


def self_test():
    """A tree with an upward include and upward calls (frontend and worker) must fail with each
    named, and so must a module its place's order does not rank."""
    with tempfile.TemporaryDirectory() as t:
        def w(p, s):
            os.makedirs(os.path.dirname(os.path.join(t, p)), exist_ok=True)
            open(os.path.join(t, p), "w").write(s)
        w("frontend/core/job.c", '#include "model.h"\nvoid job_x(void) {}\n')
        w("frontend/core/model.h", "void model_y(void);\n")
        w("frontend/core/model.c", "void model_y(void) {}\n")
        w("frontend/core/sequence.c", "void mgmt_z(void);\nvoid s(void) { mgmt_z(); }\n")
        w("frontend/mgmt/management.c", "void mgmt_z(void) {}\n")
        w("common/util.c", "int u;\n")
        w("backend/worker/worker.c", "void h_z(void);\nvoid wl(void) { h_z(); }\n")
        w("backend/handlers/x.c", "void h_z(void) {}\n")
        for c in ("frontend/core/job.c", "frontend/core/model.c", "frontend/core/sequence.c",
                  "frontend/mgmt/management.c", "common/util.c", "backend/worker/worker.c",
                  "backend/handlers/x.c"):
            o = os.path.join(t, "build/obj", c[:-2] + ".o")
            os.makedirs(os.path.dirname(o), exist_ok=True)
            subprocess.run(["gcc", "-c", "-o", o, os.path.join(t, c)], check=True,
                           cwd=os.path.dirname(os.path.join(t, c)))
        out = subprocess.run([sys.executable, os.path.abspath(__file__), "--root", t, "build"],
                             capture_output=True, text=True)
        ok = (out.returncode == 1
              and "frontend/core/job.c -> frontend/core/model.h (include)" in out.stdout
              and "frontend/core/sequence.c -> frontend/mgmt/management.c (calls mgmt_z)"
              in out.stdout
              and "backend/worker/worker.c -> backend/handlers/x.c (calls h_z)" in out.stdout)
        # a module of a layered place that its order does not rank fails by itself
        w("frontend/core/newmod.c", "int n;\n")
        out2 = subprocess.run([sys.executable, os.path.abspath(__file__), "--root", t, "build"],
                              capture_output=True, text=True)
        ok = ok and out2.returncode == 1 and "frontend/core/newmod.c: a module" in out2.stdout
        print("layers self-test:", "ok" if ok else "FAILED\n" + out.stdout + out.stderr)
        return 0 if ok else 1


def main(argv):
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    args = list(argv)
    if "--self-test" in args:
        return self_test()
    if "--root" in args:
        i = args.index("--root")
        root = args[i + 1]
        del args[i:i + 2]
    summary = "--summary" in args
    args = [a for a in args if a != "--summary"]
    return check(root, args[0] if args else "build", summary)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
