"""Snapshots as TorchServe writes and reads them: models registered through the API survive a
restart (versions, default version, worker counts, batch settings); --ncs neither writes nor
restores; a half-written snapshot is never read; a corrupt one refuses the start."""
import glob
import json
import os
import signal
import subprocess
import time

import pytest
import requests

from conftest import BIN, free_port
from test_management import make_store


def start(tmp, store, *extra, expect_ok=True):
    """torchserve-c in tmp (its working directory), as a user starts it: no --ts-config, so the
    newest snapshot in logs/config is read, if any."""
    log = open(os.path.join(tmp, "server.log"), "a")
    p = subprocess.Popen([os.path.join(BIN, "torchserve-c"), "--start", "--foreground",
                          "--model-store", store, *extra], cwd=tmp, stdout=subprocess.PIPE,
                         stderr=log)
    deadline = time.time() + 30
    line = b""
    while time.time() < deadline:
        line = p.stdout.readline()
        if not line or b"Model server started." in line:
            break
    if expect_ok:
        assert b"Model server started." in line, open(os.path.join(tmp, "server.log")).read()
    return p


def stop(p):
    p.send_signal(signal.SIGTERM)
    p.wait(timeout=30)


def mgmt(port, method, path, **kw):
    return requests.request(method, f"http://127.0.0.1:{port}/{path}", timeout=60, **kw)


def wait_workers(port, name, version, n, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        d = mgmt(port, "GET", f"models/{name}/{version}").json()[0]
        if sum(w["status"] == "READY" for w in d["workers"]) == n:
            return d
        time.sleep(0.2)
    raise AssertionError(f"{name} {version}: not {n} ready workers: {d}")


def test_snapshot_restores_models_and_ncs_does_not(tmp_path):
    tmp = str(tmp_path)
    store = make_store(tmp, v2=True)
    mport = free_port()
    with open(os.path.join(tmp, "config.properties"), "w") as f:
        f.write(f"inference_address=http://127.0.0.1:{free_port()}\n"
                f"management_address=http://127.0.0.1:{mport}\n"
                f"metrics_address=http://127.0.0.1:{free_port()}\n"
                f"grpc_inference_port={free_port()}\ngrpc_management_port={free_port()}\n"
                "disable_token_authorization=true\nenable_model_api=true\n")
    p = start(tmp, store)
    try:
        assert mgmt(mport, "POST", "models?url=mlp.mar&initial_workers=1&synchronous=true"
                    "&batch_size=4&max_batch_delay=7").status_code == 200
        assert mgmt(mport, "POST", "models?url=mlp_v2&initial_workers=1&synchronous=true"
                    ).status_code == 200
        assert mgmt(mport, "POST", "models?url=identity_text.mar&initial_workers=1"
                    "&synchronous=true").status_code == 200
        assert mgmt(mport, "PUT", "models/mlp/1.0?min_worker=2&max_worker=2&synchronous=true"
                    ).status_code == 200
        assert mgmt(mport, "PUT", "models/mlp/2.0/set-default").status_code == 200
        assert mgmt(mport, "DELETE", "models/identity_text").status_code == 200
    finally:
        stop(p)
    snaps = sorted(glob.glob(os.path.join(tmp, "logs/config/*-snapshot.cfg")))
    assert len(snaps) >= 6, snaps
    text = open(snaps[-1]).read()
    line = [ln for ln in text.splitlines() if ln.startswith("model_snapshot=")][0]
    snap = json.loads(line.split("=", 1)[1])
    assert snap["modelCount"] == 1 and set(snap["models"]) == {"mlp"}
    assert snap["models"]["mlp"]["2.0"]["defaultVersion"] is True
    assert snap["models"]["mlp"]["1.0"]["minWorkers"] == 2

    # a restart from the snapshot (config.properties moved away: the snapshot carries it)
    os.rename(os.path.join(tmp, "config.properties"), os.path.join(tmp, "orig.properties"))
    # a snapshot write cut off by kill -9 leaves a temporary file, never read
    open(os.path.join(tmp, "logs/config/.99999999999999999-snapshot.cfg.tmp"), "w").write("x")
    p = start(tmp, store)
    try:
        models = mgmt(mport, "GET", "models").json()["models"]
        assert [m["modelName"] for m in models] == ["mlp"], models
        d1 = wait_workers(mport, "mlp", "1.0", 2)
        assert (d1["minWorkers"], d1["maxWorkers"], d1["batchSize"], d1["maxBatchDelay"]) == \
            (2, 2, 4, 7)
        wait_workers(mport, "mlp", "2.0", 1)
        default = mgmt(mport, "GET", "models/mlp").json()[0]
        assert default["modelVersion"] == "2.0", default
    finally:
        stop(p)

    # --ncs: nothing restored, nothing written
    before = set(glob.glob(os.path.join(tmp, "logs/config/*-snapshot.cfg")))
    p = start(tmp, store, "--ncs", "--ts-config", os.path.join(tmp, "orig.properties"))
    try:
        assert mgmt(mport, "GET", "models").json()["models"] == []
        assert mgmt(mport, "POST", "models?url=mlp.mar&synchronous=true").status_code == 200
    finally:
        stop(p)
    assert set(glob.glob(os.path.join(tmp, "logs/config/*-snapshot.cfg"))) == before


@pytest.mark.parametrize("bad,needle", [
    ('{"models": {"mlp": {"1.0": {"marName": 5}}}}', "marName"),
    ('{"models": {"mlp": {"1.0": {"marName": "mlp.mar", "minWorkers": "two"}}}}', "minWorkers"),
    ('{"models": {"../x": {"1.0": {"marName": "mlp.mar"}}}}', "Invalid model name"),
    ('{"models": {"mlp": {"1/../../x": {"marName": "mlp.mar"}}}}', "Invalid model version"),
    ('{"models": ', "invalid JSON"),
    # the bounds of model-config.yaml and the management API (minWorkers 66 spawned 66
    # workers; 1e9 was accepted for each of these)
    ('{"models": {"mlp": {"1.0": {"marName": "mlp.mar", "minWorkers": 66, "maxWorkers": 66}}}}',
     '"minWorkers" 66 is outside 0..64'),
    ('{"models": {"mlp": {"1.0": {"marName": "mlp.mar", "batchSize": 1000000000}}}}',
     '"batchSize" 1000000000 is outside 1..1024'),
    ('{"models": {"mlp": {"1.0": {"marName": "mlp.mar", "maxBatchDelay": 1000000000}}}}',
     '"maxBatchDelay" 1000000000 is outside 0..600000'),
    ('{"models": {"mlp": {"1.0": {"marName": "mlp.mar", "responseTimeout": 1000000000}}}}',
     '"responseTimeout" 1000000000 is outside 0..604800'),
    ('{"models": {"mlp": {"1.0": {"marName": "mlp.mar", "minWorkers": 3, "maxWorkers": 2}}}}',
     '"maxWorkers" 2 is less than "minWorkers" 3'),
])
def test_corrupt_snapshot_refuses_the_start(tmp_path, bad, needle):
    tmp = str(tmp_path)
    store = make_store(tmp)
    os.makedirs(os.path.join(tmp, "logs/config"))
    path = os.path.join(tmp, "logs/config/20260101000000000-snapshot.cfg")
    with open(path, "w") as f:
        f.write(f"inference_address=http://127.0.0.1:{free_port()}\n"
                f"management_address=http://127.0.0.1:{free_port()}\n"
                f"metrics_address=http://127.0.0.1:{free_port()}\n"
                f"grpc_inference_port={free_port()}\ngrpc_management_port={free_port()}\n"
                f"model_snapshot={bad}\n")
    p = start(tmp, store, expect_ok=False)
    assert p.wait(timeout=30) == 1
    log = open(os.path.join(tmp, "server.log")).read()
    assert "logs/config/20260101000000000-snapshot.cfg:6: model_snapshot:" in log, log
    assert needle in log, log


def test_models_key_is_applied_at_start(tmp_path):
    """TorchServe's models= in config.properties registers those versions at start."""
    tmp = str(tmp_path)
    store = make_store(tmp)
    mport = free_port()
    models = {"mlp": {"1.0": {"defaultVersion": True, "marName": "mlp.mar", "minWorkers": 1,
                              "maxWorkers": 1, "batchSize": 2, "maxBatchDelay": 9}}}
    with open(os.path.join(tmp, "config.properties"), "w") as f:
        f.write(f"inference_address=http://127.0.0.1:{free_port()}\n"
                f"management_address=http://127.0.0.1:{mport}\n"
                f"metrics_address=http://127.0.0.1:{free_port()}\n"
                f"grpc_inference_port={free_port()}\ngrpc_management_port={free_port()}\n"
                f"disable_token_authorization=true\nmodels={json.dumps(models)}\n")
    p = start(tmp, store, "--ncs")
    try:
        d = wait_workers(mport, "mlp", "1.0", 1)
        assert (d["batchSize"], d["maxBatchDelay"]) == (2, 9)
    finally:
        stop(p)


def test_startup_models_are_snapshotted_restorably(tmp_path):
    """A model loaded with --models has no minWorkers of its own: its snapshot entry holds the
    workers it runs, so the next start from that snapshot is not refused."""
    tmp = str(tmp_path)
    store = make_store(tmp)
    mport = free_port()
    cfg = os.path.join(tmp, "start.properties")
    with open(cfg, "w") as f:
        f.write(f"inference_address=http://127.0.0.1:{free_port()}\n"
                f"management_address=http://127.0.0.1:{mport}\n"
                f"metrics_address=http://127.0.0.1:{free_port()}\n"
                f"grpc_inference_port={free_port()}\ngrpc_management_port={free_port()}\n"
                "disable_token_authorization=true\nenable_model_api=true\n"
                "default_workers_per_model=1\n")
    p = start(tmp, store, "--ts-config", cfg, "--models", "mlp=mlp.mar")
    try:
        wait_workers(mport, "mlp", "1.0", 1)
        assert mgmt(mport, "POST", "models?url=identity_text.mar&initial_workers=1"
                    "&synchronous=true").status_code == 200
    finally:
        stop(p)
    p = start(tmp, store)
    try:
        wait_workers(mport, "mlp", "1.0", 1)
        wait_workers(mport, "identity_text", "1.0", 1)
    finally:
        stop(p)
