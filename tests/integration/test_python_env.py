"""Any Python (issue 32, point 1): the Python plugin built against the Python make's PYTHON names,
its interpreter named by that Python's sys.executable so that a venv's site-packages are found,
and TorchServe's `python` key in config.properties: a venv of the plugin's Python is accepted,
any other interpreter refused by name. Debian 12 has only Python 3.11, so nothing here can run
another version: a source check stands in for that (no file names python3.11).

The venvs are `python3 -m venv --system-site-packages --without-pip` of /usr/bin/python3 (Debian's
python3-venv), with a package written straight into the venv's site-packages that only the venv
has; the handler imports it.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from conftest import BUILD, ROOT, start_server  # noqa: E402
from test_python_handlers import wait_model, write_model  # noqa: E402

HANDLER = """
import onlyvenv


def handle(data, context):
    if data is None:
        return None
    return [{"from": onlyvenv.WHERE, "gpu_id": context.system_properties["gpu_id"]}
            for _ in data]
"""


@pytest.fixture
def tmp():
    d = tempfile.mkdtemp(prefix="tsc-pyenv-")
    yield d
    shutil.rmtree(d, ignore_errors=True)


def make_venv(path):
    """A venv of /usr/bin/python3 that sees Debian's packages and has one of its own."""
    subprocess.run(["/usr/bin/python3", "-m", "venv", "--system-site-packages", "--without-pip",
                    path], check=True)
    py = os.path.join(path, "bin", "python3")
    site = subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                          check=True, capture_output=True, text=True).stdout.strip()
    assert site.startswith(path), site
    os.makedirs(os.path.join(site, "onlyvenv"))
    with open(os.path.join(site, "onlyvenv", "__init__.py"), "w") as f:
        f.write(f"WHERE = {path!r}\n")
    return py


def store_with_handler(tmp):
    store = os.path.join(tmp, "store")
    os.makedirs(store)
    write_model(store, "venvmod", HANDLER)
    return store


def test_python_key_names_a_venv_whose_packages_the_handler_imports(tmp):
    venv = os.path.join(tmp, "venv")
    py = make_venv(venv)
    store = store_with_handler(tmp)
    os.makedirs(os.path.join(tmp, "a"))
    srv = start_server(os.path.join(tmp, "a"), models=["venvmod"], store=store,
                       config={"python": py})
    try:
        r = wait_model(srv, "venvmod", body=b"x")
        assert r.json() == {"from": venv, "gpu_id": None}
        assert f"Python executable: {py} (Python 3." in srv.log()
    finally:
        srv.stop()
    # the same model without the key runs Debian's python3, which does not have the package
    os.makedirs(os.path.join(tmp, "b"))
    srv = start_server(os.path.join(tmp, "b"), models=["venvmod"], store=store,
                       extra_args=["--continue-on-model-error"])
    try:
        r = wait_model(srv, "venvmod", body=b"x", ok=(200, 503, 507, 500))
        assert r.status_code != 200, r.text
        log = srv.log()
        assert "No module named 'onlyvenv'" in log, log[-3000:]
    finally:
        srv.stop()


@pytest.mark.parametrize("kind", ["other", "missing"])
def test_python_key_refuses_another_interpreter_by_name(tmp, kind):
    if kind == "other":
        # not the plugin's interpreter, nor a venv of it: a program of the same name elsewhere
        other = os.path.join(tmp, "bin", "python3")
        os.makedirs(os.path.dirname(other))
        with open(other, "w") as f:
            f.write("#!/bin/sh\nexec /usr/bin/python3 \"$@\"\n")
        os.chmod(other, 0o755)
    else:
        other = os.path.join(tmp, "nope", "python3")
    with pytest.raises(AssertionError) as e:
        start_server(tmp, config={"python": other})
    msg = str(e.value)
    if kind == "other":
        assert (f"python={other}: not the interpreter the Python plugin was built for "
                "(/usr/bin/python3, Python 3.") in msg, msg
        assert f"make PYTHON={other}" in msg, msg
    else:
        assert f"python={other}: no such executable" in msg, msg


def test_python_key_accepts_the_plugins_own_interpreter(server_factory):
    srv = server_factory(models=["mlp_py"], config={"python": "python3"},
                         env={"PATH": "/usr/bin:/bin"})
    srv.wait_ready("mlp_py", body={"json": [0.0] * 64})
    assert "Python executable: /usr/bin/python3 (Python 3." in srv.log()


def test_plugin_built_for_a_venv_finds_its_packages_without_the_key(tmp):
    """make PYTHON=<venv>/bin/python3 plugin: the plugin's interpreter is the venv's python
    (its sys.executable), so its packages are found with no `python` key. The frontend and
    the worker are this build's, copied next to the new plugin (each finds the other, and the
    plugin, from its own path)."""
    venv = os.path.join(tmp, "venv")
    py = make_venv(venv)
    b = os.path.join(tmp, "build")
    r = subprocess.run(["make", "-s", f"BUILD={b}", f"PYTHON={py}", "plugin"], cwd=ROOT,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    with open(os.path.join(b, "lib", "libts_python.info")) as f:
        info = dict(line.strip().split("=", 1) for line in f if "=" in line)
    assert info["executable"] == py, info
    with open(os.path.join(b, "lib", "libts_python.so"), "rb") as f:
        assert py.encode() in f.read()  # the program name the interpreter starts with
    os.makedirs(os.path.join(b, "bin"))
    for exe in ("torchserve-c", "torchserve-c-worker"):
        shutil.copy2(os.path.join(BUILD, "bin", exe), os.path.join(b, "bin", exe))
    store = store_with_handler(tmp)
    run = os.path.join(tmp, "run")
    os.makedirs(run)
    import conftest
    saved = conftest.BIN
    conftest.BIN = os.path.join(b, "bin")
    try:
        srv = start_server(run, models=["venvmod"], store=store)
    finally:
        conftest.BIN = saved
    try:
        r = wait_model(srv, "venvmod", body=b"x")
        assert r.json() == {"from": venv, "gpu_id": None}
        assert f"Python executable: {py} (Python 3." in srv.log()
    finally:
        srv.stop()


# what names a Python version instead of asking the Python that builds or runs
PY311 = re.compile(r"python3\.11|libpython3\.11|3\.11-config|python3\.1[0-9]/")


def test_no_file_names_a_python_version():
    """Every Python name, path and soname comes from PYTHON's sysconfig (scripts/
    python_embed.py) or from the running interpreter: none is written into the build or the
    code. Docs may say what Debian ships; code, Makefile, scripts and tests may not."""
    files = subprocess.run(["git", "ls-files", "Makefile", "backend", "frontend", "common",
                            "scripts", "tests", "deploy"], cwd=ROOT, check=True,
                           capture_output=True, text=True).stdout.split()
    here = os.path.relpath(os.path.abspath(__file__), ROOT)
    bad = []
    for f in files:
        if f == here or not re.search(r"(\.(c|h|cpp|py|sh|mk|yaml|cfg)|Makefile|Dockerfile)$", f):
            continue
        with open(os.path.join(ROOT, f), errors="replace") as fh:
            for n, line in enumerate(fh, 1):
                if PY311.search(line):
                    bad.append(f"{f}:{n}: {line.strip()}")
    assert not bad, "\n".join(bad)
