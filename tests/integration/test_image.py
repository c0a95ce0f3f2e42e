"""The container image, without a Docker engine: its files come from deploy/image-layout.sh
(which deploy/Dockerfile runs in its build stage) and its packages from
deploy/runtime-packages.txt (which the Dockerfile's runtime stage installs, and nothing else).

- every library that ldd finds for the three binaries and the Python plugin of the layout comes
  from a package on the list, or from one those depend on (apt installs them too), or from
  libc; every library they link directly comes from a package on the list itself; the list
  holds no compiler and no -dev package;
- the layout serves every example model of model-store/: started from its own paths with its
  config.properties (ports moved to free ones), each answers a request;
- the Dockerfile installs the list, copies the layout, and checks /ping in a HEALTHCHECK.
"""
import json
import os
import re
import subprocess
import sys

import pytest
import requests

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from conftest import BUILD, MODEL_STORE, ROOT, free_port  # noqa: E402

LAYOUT = os.path.join(ROOT, "deploy", "image-layout.sh")
PACKAGES = os.path.join(ROOT, "deploy", "runtime-packages.txt")
DOCKERFILE = os.path.join(ROOT, "deploy", "Dockerfile")
OPT = "opt/torchserve-c"
FILES = [f"{OPT}/bin/torchserve-c", f"{OPT}/bin/torchserve-c-worker",
         f"{OPT}/bin/torchserve-c-archiver", f"{OPT}/lib/libts_python.so"]
LIBC = {"libc6"}  # libc, the dynamic loader, libm, libpthread, libdl


def runtime_packages():
    return [ln.strip() for ln in open(PACKAGES) if ln.strip() and not ln.startswith("#")]


@pytest.fixture(scope="module")
def layout(tmp_path_factory):
    dest = str(tmp_path_factory.mktemp("image"))
    p = subprocess.run([LAYOUT, dest, os.path.relpath(BUILD, ROOT)], capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return dest


def packages_of(paths):
    """{library path: the Debian package that owns it}, asked of dpkg once (dpkg knows /lib
    and /usr/lib apart, so each path is asked in both spellings, and resolved)."""
    spell = {}
    for path in paths:
        real = os.path.realpath(path)
        for cand in (path, real, re.sub(r"^/usr(?=/lib)", "", path),
                     re.sub(r"^/usr(?=/lib)", "", real)):
            spell.setdefault(cand, set()).add(path)
    out = subprocess.run(["dpkg", "-S", *spell], capture_output=True, text=True).stdout
    owner = {}
    for line in out.splitlines():
        pkg, _, f = line.partition(": ")
        for path in spell.get(f.strip(), ()):
            owner.setdefault(path, pkg.split(",")[0].split(":")[0].strip())
    return owner


def depends_closure(pkgs):
    """pkgs and every installed package they depend on (Depends and Pre-Depends; of each
    choice the first installed alternative, or an installed package that provides it)."""
    rows = subprocess.run(["dpkg-query", "-W", "-f=${Package}\t${Status}\t${Provides}\t"
                           "${Depends}, ${Pre-Depends}\n"], capture_output=True,
                          text=True).stdout
    deps, provides = {}, {}
    for row in rows.splitlines():
        name, status, prov, dep = (row.split("\t") + ["", "", ""])[:4]
        if "install ok installed" not in status:
            continue
        deps[name] = dep
        for v in prov.split(","):
            if v.strip():
                provides.setdefault(v.strip().split(" ")[0], []).append(name)
    seen, todo = set(), list(pkgs)
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        for choice in deps.get(p, "").split(","):
            for alt in choice.split("|"):
                name = alt.strip().split(" ")[0].split(":")[0]
                if name in deps:
                    todo.append(name)
                    break
                if name in provides:
                    todo.extend(provides[name])
                    break
    return seen


def test_runtime_packages_cover_every_library(layout):
    pkgs = runtime_packages()
    for p in pkgs:
        assert not p.endswith("-dev") and p not in (
            "gcc", "g++", "clang", "make", "build-essential", "valgrind"), p
    allowed = depends_closure(pkgs) | LIBC
    assert set(pkgs) <= allowed, f"not installed here: {set(pkgs) - allowed}"
    libs = {}
    for f in FILES:
        path = os.path.join(layout, f)
        ldd = subprocess.run(["ldd", path], capture_output=True, text=True, check=True).stdout
        assert "not found" not in ldd, (f, ldd)
        needed = set(re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", subprocess.run(
            ["readelf", "-d", path], capture_output=True, text=True, check=True).stdout))
        assert needed, f
        libs[f] = [(name, lib, name in needed)
                   for name, lib in re.findall(r"^\s*(\S+) => (/\S+)", ldd, re.M)]
    owner = packages_of({lib for v in libs.values() for _, lib, _ in v})
    checked = 0
    for f, entries in libs.items():
        for name, lib, direct in entries:
            pkg = owner.get(lib)
            assert pkg, f"{f}: {lib} belongs to no package"
            assert pkg in allowed, f"{f}: {lib} comes from {pkg}, not from the list"
            if direct:
                assert pkg in set(pkgs) | LIBC, \
                    f"{f} links {name} directly: add {pkg} to deploy/runtime-packages.txt"
            checked += 1
    assert checked > 40, checked


def example_requests(tmp):
    """One request per example model, and a check of its answer."""
    sample = open(os.path.join(ROOT, "scripts", "models", "mlp", "sample.json"), "rb").read()
    img = os.path.join(tmp, "kitten.jpg")
    subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "scripts", "make_image.py"), img],
                   check=True)
    js = {"Content-Type": "application/json"}

    def floats(n):
        return lambda r: len(r.json()) == n and all(isinstance(v, float) for v in r.json())

    return {
        "mlp": (sample, js, floats(10)),
        "mlp_py": (sample, js, floats(10)),
        "identity_text": (b"hello streaming world", {"x-delay-ms": "0"},
                          lambda r: r.text.split() == ["hello", "streaming", "world"]),
        "char_lm": (json.dumps({"prompt": "The ", "max_new_tokens": 4}).encode(), js,
                    lambda r: len(r.text) >= 4),
        "tiny_gpt": (json.dumps({"prompt": "The keeper", "max_new_tokens": 4}).encode(), js,
                     lambda r: len(r.text) >= 1),
        "stateful": (b"4", {}, lambda r: r.text == "4"),
        "stateful_py": (b"4", {}, lambda r: r.text == "4"),
        "lstm_stateful": (b"[0.1, 0.2, 0.3, 0.4]", js, lambda r: isinstance(r.json(), list)),
        "resnet18": (open(img, "rb").read(), {"Content-Type": "image/jpeg"},
                     lambda r: len(r.json()) == 5),
    }


def test_layout_serves_every_example(layout, tmp_path):
    store = os.path.join(layout, "home", "model-server", "model-store")
    models = sorted(n[:-4] for n in os.listdir(store) if n.endswith(".mar"))
    assert models == sorted(n[:-4] for n in os.listdir(MODEL_STORE) if n.endswith(".mar"))
    reqs = example_requests(str(tmp_path))
    assert set(models) <= set(reqs), f"no request here for {set(models) - set(reqs)}"

    # the image's config.properties, on free loopback ports
    text = open(os.path.join(layout, "etc", "torchserve-c", "config.properties")).read()
    port = free_port()
    moved = {"inference_address": f"http://127.0.0.1:{port}",
             "management_address": f"http://127.0.0.1:{free_port()}",
             "metrics_address": f"http://127.0.0.1:{free_port()}",
             "grpc_inference_address": "127.0.0.1", "grpc_inference_port": str(free_port()),
             "grpc_management_port": str(free_port())}
    for k, v in moved.items():
        text, n = re.subn(rf"^{k}=.*$", f"{k}={v}", text, flags=re.M)
        assert n == 1, k
    cfg = tmp_path / "config.properties"
    cfg.write_text(text)
    home = tmp_path / "home"
    home.mkdir()
    env = dict(os.environ, TMPDIR=str(tmp_path))
    args = [os.path.join(layout, OPT, "bin", "torchserve-c"), "--start", "--foreground",
            "--model-store", store, "--ts-config", str(cfg), "--models", "all"]
    proc = subprocess.Popen(args, cwd=home, env=env, stdout=subprocess.PIPE,
                            stderr=open(tmp_path / "server.log", "w"))
    try:
        line = proc.stdout.readline()
        log = (tmp_path / "server.log").read_text()
        assert line == b"Model server started.\n", log[-3000:]
        assert " ERROR " not in log, log[-3000:]
        # the workers run from the layout, with its plugin
        assert f"{layout}/{OPT}/bin/torchserve-c-worker" in log or os.path.exists(
            f"{layout}/{OPT}/bin/torchserve-c-worker")
        for name in models:
            body, headers, ok = reqs[name]
            r = requests.post(f"http://127.0.0.1:{port}/predictions/{name}", data=body,
                              headers=headers, timeout=120)
            assert r.status_code == 200 and ok(r), (name, r.status_code, r.text[:300])
        assert requests.get(f"http://127.0.0.1:{port}/ping", timeout=10).status_code == 200
        exes = set()
        for d in os.listdir("/proc"):
            if d.isdigit():
                try:
                    exes.add(os.readlink(f"/proc/{d}/exe"))
                except OSError:
                    pass
        assert f"{layout}/{OPT}/bin/torchserve-c-worker" in exes
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def test_dockerfile_installs_the_list_and_copies_the_layout():
    text = open(DOCKERFILE).read()
    stages = re.split(r"^FROM ", text, flags=re.M)[1:]
    assert [s.split()[0] for s in stages] == ["debian:12", "debian:12"]
    build, runtime = stages
    assert "scripts/install-deps.sh" in build and "deploy/image-layout.sh /image build" in build
    # the runtime stage: the list and nothing else from apt; the layout's directories
    assert "install-deps" not in runtime and "make" not in runtime.split()
    assert "COPY deploy/runtime-packages.txt /tmp/runtime-packages.txt" in runtime
    assert "grep -v '^#' /tmp/runtime-packages.txt | xargs apt-get install" in runtime
    copied = re.findall(r"^COPY --from=build (?:--chown=\S+ )?/image/(\S+) (\S+)$", runtime, re.M)
    assert {src.rstrip("/") for src, _ in copied} == {"opt", "etc", "home/model-server"}
    assert all(dst == "/" + src for src, dst in copied), copied
    hc = re.search(r"^HEALTHCHECK .*\n(?:.*\\\n)*.*CMD (.*)$", runtime, re.M)
    assert hc, "no HEALTHCHECK"
    inference = re.search(r"^inference_address=http://[^:]+:(\d+)$",
                          open(os.path.join(ROOT, "deploy", "config.properties")).read(), re.M)
    assert f"http://127.0.0.1:{inference.group(1)}/ping" in hc.group(1)
    assert hc.group(1).split()[0] in runtime_packages()  # curl
    entry = json.loads(re.search(r"^ENTRYPOINT (.*)$", runtime, re.M).group(1))
    assert entry == [f"/{OPT}/bin/torchserve-c"]
    cmd = json.loads(re.search(r"^CMD (\[.*?\])$", runtime.replace("\\\n", ""), re.M).group(1))
    assert cmd[cmd.index("--ts-config") + 1] == "/etc/torchserve-c/config.properties"
    assert cmd[cmd.index("--model-store") + 1] == "/home/model-server/model-store"
    # what the layout script writes is what those lines name
    layout = open(LAYOUT).read()
    for path in ("opt/torchserve-c/bin", "opt/torchserve-c/lib", "etc/torchserve-c",
                 "home/model-server/model-store"):
        assert f'"$dest/{path}' in layout, path
