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
    """The server command of `make run`, with $(BUILD) expanded: `run` installs the packages and
    hands over to a second make for `serve`, whose recipe is the command."""
    text = open(os.path.join(ROOT, "Makefile")).read().replace("\\\n", " ")
    m = re.search(r"^run:[^\n]*\n\t@?\$\(MAKE\) [^\n]*\bserve$", text, re.M)
    assert m, "Makefile's run target does not hand over to `serve` in a second make"
    m = re.search(r"^serve:[^\n]*\n\t([^\n]+)", text, re.M)
    assert m, "Makefile has no serve recipe"
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


def readme_block(heading):
    """The first ```sh block after a README heading."""
    text = open(os.path.join(ROOT, "README.md")).read()
    at = text.index(heading)
    m = re.search(r"```sh\n(.*?)```", text[at:], re.S)
    assert m, f"README.md has no sh block after {heading!r}"
    return m.group(1)


def test_readme_python_handler_example():
    """"Serving your own Python handler", run as written in a fresh directory. Changed: the
    ports (a config.properties in that directory, which the server reads as TorchServe does),
    the path of build/bin, and a private TMPDIR."""
    block = readme_block("### Serving your own Python handler")
    assert "my_handler.py" in block and "--stop" in block, block
    tmp = tempfile.mkdtemp(prefix="tsc-readme-py-")
    port = free_port()
    with open(os.path.join(tmp, "config.properties"), "w") as f:
        f.write(f"inference_address=http://127.0.0.1:{port}\n")
        f.write(f"management_address=http://127.0.0.1:{free_port()}\n")
        f.write(f"metrics_address=http://127.0.0.1:{free_port()}\n")
        f.write(f"grpc_inference_port={free_port()}\ngrpc_management_port={free_port()}\n")
        f.write("disable_token_authorization=true\n")  # as the repository's config
    os.mkdir(os.path.join(tmp, "model-store"))
    script = block.replace("build/bin/", os.path.join(BUILD, "bin") + "/")
    script = script.replace("127.0.0.1:8080", f"127.0.0.1:{port}")
    env = dict(os.environ, TMPDIR=tmp)
    try:
        p = subprocess.run(["bash", "-e", "-c", script], cwd=tmp, env=env, capture_output=True,
                           timeout=300)
        log = os.path.join(tmp, "logs", "ts_log.log")
        logtext = open(log).read() if os.path.exists(log) else ""
        assert p.returncode == 0, (p.stdout, p.stderr, logtext)
        # stdout: "Model server started.", the curl answer (no newline of its own), then
        # "TorchServe has stopped."
        answer = [ln for ln in p.stdout.decode().splitlines() if ln.startswith("[")]
        assert len(answer) == 1, (p.stdout, logtext)
        got, _ = json.JSONDecoder().raw_decode(answer[0])
        import torch

        m = torch.jit.load(os.path.join(tmp, "m.pt")).eval()
        with torch.no_grad():
            want = m(torch.tensor([[1.0, 2.0, 3.0]]))[0].tolist()
        assert len(got) == 2 and max(abs(a - b) for a, b in zip(got, want)) <= 1e-5, (got, want)
    finally:
        subprocess.run([os.path.join(BUILD, "bin", "torchserve-c"), "--stop"], cwd=tmp, env=env,
                       capture_output=True, timeout=60)
        shutil.rmtree(tmp, ignore_errors=True)
