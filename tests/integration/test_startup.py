"""Start-up failures reach the terminal (issue 33, point 4).

`--start`, in the background or with --foreground, returns or prints `Model server started.`
only once the start-up models have loaded or failed. Before that line it prints every unknown
config.properties or model-config.yaml key with the closest known one, and every model that
failed to load with the reason. A model named in --models that failed stops the server: exit
status 1, no `Model server started.`, no process and no pidfile left; --continue-on-model-error
serves the others. A failure among `all` never stops it.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from conftest import BIN, MODEL_STORE, free_port  # noqa: E402

FRONTEND = os.path.join(BIN, "torchserve-c")
TYPO_YAML = b"minWorkers: 1\nmaxWorkers: 1\nbatchSise: 4\n"


def variant(dst, replace):
    """mlp.mar with some entries' bytes replaced, its model named as the file."""
    with zipfile.ZipFile(os.path.join(MODEL_STORE, "mlp.mar")) as zin, \
            zipfile.ZipFile(dst, "w") as zout:
        for n in zin.namelist():
            data = replace.get(n, zin.read(n))
            if n == "MAR-INF/MANIFEST.json":
                manifest = json.loads(data)
                manifest["model"]["modelName"] = os.path.basename(dst)[:-4]
                data = json.dumps(manifest)
            zout.writestr(n, data)


@pytest.fixture
def setup(tmp_path):
    """A store with mlp, mlp with a mistyped yaml key (typo), and mlp with a broken model.pt
    (broken: its worker fails to load); a config with a mistyped key, on free ports."""
    store = tmp_path / "store"
    store.mkdir()
    shutil.copy(os.path.join(MODEL_STORE, "mlp.mar"), store / "mlp.mar")
    variant(store / "typo.mar", {"model-config.yaml": TYPO_YAML})
    variant(store / "broken.mar", {"model.pt": b"not a torchscript file"})
    port = free_port()
    cfg = tmp_path / "config.properties"
    cfg.write_text(f"inference_address=http://127.0.0.1:{port}\n"
                   f"management_address=http://127.0.0.1:{free_port()}\n"
                   f"metrics_address=http://127.0.0.1:{free_port()}\n"
                   f"grpc_inference_port={free_port()}\ngrpc_management_port={free_port()}\n"
                   "disable_token_authorization=true\n"
                   "job_queue_sise=10\n")
    env = dict(os.environ, TMPDIR=str(tmp_path))
    yield tmp_path, str(cfg), env, port
    subprocess.run([FRONTEND, "--stop", "--ts-config", str(cfg)], cwd=tmp_path, env=env,
                   capture_output=True, timeout=60)


def start(tmp_path, cfg, env, *models, foreground=False, extra=()):
    args = [FRONTEND, "--start", "--ncs", "--model-store", "store", "--ts-config", cfg]
    if foreground:
        args.append("--foreground")
    args += ["--models", *models, *extra]
    return subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=180)


def pidfiles(tmp_path):
    return [n for n in os.listdir(tmp_path) if n.startswith(".torchserve-c.")]


def assert_reported(err, *, missing=True, typo=True, broken=False):
    assert re.search(r"WARN .*config\.properties:7: unknown key 'job_queue_sise'.*"
                     r"did you mean 'job_queue_size'", err), err
    if typo:
        assert re.search(r"WARN .*model-config\.yaml:3: unknown key 'batchSise'.*batchSize", err), \
            err
    if missing:
        assert re.search(r"ERROR .*model foo=foo\.mar failed to load: .*foo\.mar", err), err
    if broken:
        assert re.search(r"ERROR .*model broken \(broken(=broken)?\.mar\) failed to load: \S", err), \
            err


@pytest.mark.smoke
def test_background_start_fails_on_a_named_model(setup):
    tmp_path, cfg, env, port = setup
    p = start(tmp_path, cfg, env, "mlp=mlp.mar", "typo=typo.mar", "foo=foo.mar")
    assert p.returncode == 1, (p.stdout, p.stderr)
    assert "Model server started." not in p.stdout
    assert_reported(p.stderr)
    assert "--continue-on-model-error" in p.stderr and "logs/ts_log.log" in p.stderr, p.stderr
    assert pidfiles(tmp_path) == []


def test_background_start_goes_on_when_told(setup):
    tmp_path, cfg, env, port = setup
    p = start(tmp_path, cfg, env, "mlp=mlp.mar", "typo=typo.mar", "foo=foo.mar",
              extra=["--continue-on-model-error"])
    assert p.returncode == 0, (p.stdout, p.stderr)
    assert p.stdout == "Model server started.\n"
    assert_reported(p.stderr)
    # the launcher returned after the models loaded: mlp answers at once
    import requests
    r = requests.post(f"http://127.0.0.1:{port}/predictions/mlp", json={"data": [0.0] * 64},
                      timeout=30)
    assert r.status_code == 200 and len(r.json()) == 10, r.text


def test_foreground_start_reports_a_worker_that_fails_to_load(setup):
    """broken's worker fails to load its model.pt: the reason is printed (stderr is the
    terminal in the foreground) and the server exits 1 without `Model server started.`."""
    tmp_path, cfg, env, port = setup
    p = start(tmp_path, cfg, env, "mlp=mlp.mar", "broken=broken.mar", foreground=True)
    assert p.returncode == 1, (p.stdout, p.stderr[-3000:])
    assert p.stdout == ""
    assert_reported(p.stderr, missing=False, typo=False, broken=True)
    assert "stopping (--continue-on-model-error" in p.stderr
    assert pidfiles(tmp_path) == []


def test_failed_model_among_all_does_not_stop_the_start(setup):
    tmp_path, cfg, env, port = setup
    p = start(tmp_path, cfg, env, "all")
    assert p.returncode == 0, (p.stdout, p.stderr)
    assert p.stdout == "Model server started.\n"
    assert_reported(p.stderr, missing=False, broken=True)


def test_help_names_every_option():
    p = subprocess.run([FRONTEND, "--help"], capture_output=True, text=True, timeout=10)
    assert p.returncode == 0 and p.stderr == ""
    src = open(os.path.join(os.path.dirname(BIN), "..", "frontend", "cli.c")).read()
    options = set(re.findall(r'!strcmp\(a, "(--?[a-z-]+)"\)', src))
    assert len(options) >= 12, options
    for opt in options:
        assert re.search(rf"(^|[\s,\[|]){re.escape(opt)}\b", p.stdout), opt
    assert "Exit status" in p.stdout
    p = subprocess.run([FRONTEND, "--bogus"], capture_output=True, text=True, timeout=10)
    assert p.returncode == 2 and "usage:" in p.stderr
