"""The README's quick start, followed literally: the command `make run` runs (taken from the
Makefile's run recipe), from the repository root, then the README's curl example for mlp.

Only what a second instance on a shared machine needs is changed: the config is a copy of the
repository's config.properties with free ports, and TMPDIR (pidfile, scratch) is private.
"""
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import zipfile

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from conftest import BUILD, ROOT, free_port  # noqa: E402


def make_run_command():
    """The recipe of the Makefile's `run` target, with $(BUILD) expanded."""
    text = open(os.path.join(ROOT, "Makefile")).read().replace("\\\n", " ")
    m = re.search(r"^run:[^\n]*\n\t([^\n]+)", text, re.M)
    assert m, "Makefile has no run recipe"
    cmd = m.group(1).replace("$(BUILD)", os.path.relpath(BUILD, ROOT))
    return shlex.split(cmd)


def readme_curl():
    """The README's first curl example for mlp, as one shell command."""
    text = open(os.path.join(ROOT, "README.md")).read().replace("\\\n", " ")
    for line in text.splitlines():
        if line.lstrip().startswith("curl") and "/predictions/mlp" in line:
            return line.strip()
    raise AssertionError("README.md has no curl example for /predictions/mlp")


def local_config(tmp, ports):
    """The repository's config.properties with the listeners moved to free ports."""
    out = []
    for line in open(os.path.join(ROOT, "config.properties")):
        key = line.split("=", 1)[0].strip()
        if key in ports:
            line = f"{key}={ports.pop(key)}\n"
        out.append(line)
    out += [f"{k}={v}\n" for k, v in ports.items() if k == "log_location"]
    path = os.path.join(tmp, "config.properties")
    with open(path, "w") as f:
        f.writelines(out)
    return path


@pytest.mark.smoke
def test_readme_quick_start():
    cmd = make_run_command()
    assert cmd[0].endswith("bin/torchserve-c") and "--ts-config" in cmd, cmd
    curl = readme_curl()
    assert "127.0.0.1:8080" in curl and "sample.json" in curl, curl

    tmp = tempfile.mkdtemp(prefix="tsc-readme-")
    port = free_port()
    ports = {
        "inference_address": f"http://127.0.0.1:{port}",
        "management_address": f"http://127.0.0.1:{free_port()}",
        "metrics_address": f"http://127.0.0.1:{free_port()}",
        "grpc_inference_port": str(free_port()),
        "grpc_management_port": str(free_port()),
        # the logs (logs/ in the working directory, as TorchServe) go to the test's directory
        "log_location": os.path.join(tmp, "logs"),
    }
    i = cmd.index("--ts-config")
    cmd[i + 1] = local_config(tmp, ports)
    env = dict(os.environ, TMPDIR=tmp)
    log = open(os.path.join(tmp, "server.log"), "w")
    before = set(os.listdir(ROOT))
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=log)
    try:
        line = proc.stdout.readline()
        assert b"Model server started." in line, open(log.name).read()
        curl = curl.replace("127.0.0.1:8080", f"127.0.0.1:{port}")
        deadline = time.time() + 60
        while True:  # the workers load in the background; the first requests may queue or 503
            p = subprocess.run(["bash", "-c", curl], cwd=ROOT, capture_output=True, timeout=60)
            try:
                out = json.loads(p.stdout)
            except ValueError:
                out = None
            if isinstance(out, list) or time.time() > deadline:
                break
            time.sleep(0.2)
        assert p.returncode == 0 and isinstance(out, list), (p.stdout, open(log.name).read())
        assert len(out) == 10 and all(isinstance(v, float) for v in out), out

        # the prediction is the example MLP's for the sample's 64 inputs
        import torch
        data = json.load(open(os.path.join(ROOT, "scripts/models/mlp/sample.json")))["data"]
        assert len(data) == 64
        with zipfile.ZipFile(os.path.join(ROOT, "model-store", "mlp.mar")) as z:
            z.extract("model.pt", tmp)
        m = torch.jit.load(os.path.join(tmp, "model.pt")).eval()
        with torch.no_grad():
            want = m(torch.tensor([data], dtype=torch.float32))[0].tolist()
        assert max(abs(a - b) for a, b in zip(out, want)) <= 1e-5, (out, want)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        shutil.rmtree(tmp, ignore_errors=True)
    assert proc.returncode == 0
    left = set(os.listdir(ROOT)) - before
    assert not left, f"the server left files in the repository root: {left}"
