"""TorchServe parity of configuration and tools (issue 35, points 5, 9 and 13), against the real
binaries:

- enable_envvars_config=true: TorchServe's TS_<KEY> variables override config.properties, and
  the command line too (TorchServe's documented order); they are not read without the switch; a
  bad value refuses the start naming the variable; TS_ALLOWED_URLS only with
  use_env_allowed_urls=true;
- torchserve-c-archiver takes torch-model-archiver's short options (-r, -f, -v, -c) and its
  zip-store format;
- OPTIONS / answers the port's API description on the inference, management and metrics ports.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile

import pytest
import requests

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from conftest import BIN, free_port, start_server  # noqa: E402

ARCHIVER = os.path.join(BIN, "torchserve-c-archiver")
SAMPLE = {"data": [0.25] * 64}


def predict_until_ok(s, headers=None, timeout=60):
    """Posts SAMPLE to mlp until it answers 200 (the worker loads in the background)."""
    deadline = time.time() + timeout
    while True:
        r = s.post("/predictions/mlp", json=SAMPLE, headers=headers or {})
        if r.status_code == 200 or time.time() > deadline:
            return r
        time.sleep(0.2)


def refused_start(tmp, config, env):
    """Starts the server expecting it to refuse; its stderr."""
    with pytest.raises(AssertionError) as e:
        s = start_server(tmp, models=["mlp"], config=config, env=env)
        s.stop()
    return str(e.value)


def test_envvars_override_file_and_command_line(tmp):
    port = free_port()
    env = {"TS_INFERENCE_ADDRESS": f"http://127.0.0.1:{port}",
           "TS_DISABLE_TOKEN_AUTHORIZATION": "false",  # the file and no flag say true
           "TS_JOB_QUEUE_SIZE": "3"}
    s = start_server(tmp, models=["mlp"], config={"enable_envvars_config": "true"}, env=env)
    try:
        file_port = s.ports["inference"]
        s.ports["inference"] = port
        with pytest.raises(requests.ConnectionError):
            requests.get(f"http://127.0.0.1:{file_port}/ping", timeout=5)
        # token authorization is on again: the key file exists and an unkeyed call is refused
        r = s.post("/predictions/mlp", json=SAMPLE)
        assert r.status_code == 401, r.text
        keys = json.load(open(os.path.join(tmp, "key_file.json")))
        hdr = {"Authorization": "Bearer " + keys["inference"]["key"]}
        assert predict_until_ok(s, hdr).status_code == 200
        mk = {"Authorization": "Bearer " + keys["management"]["key"]}
        d = s.get("/models/mlp", api="management", headers=mk).json()
        assert d[0]["jobQueueStatus"]["remainingCapacity"] == 3, d
    finally:
        s.stop()


def test_envvars_win_over_the_command_line(tmp):
    """--disable-token-auth on the command line, TS_DISABLE_TOKEN_AUTHORIZATION=false in the
    environment: the environment wins, as TorchServe documents."""
    s = start_server(tmp, models=["mlp"], extra_args=["--disable-token-auth"],
                     config={"enable_envvars_config": "true",
                             "disable_token_authorization": "false"},
                     env={"TS_DISABLE_TOKEN_AUTHORIZATION": "false"})
    try:
        assert s.post("/predictions/mlp", json=SAMPLE).status_code == 401
    finally:
        s.stop()
    # without the variable the flag turns it off
    tmp2 = tempfile.mkdtemp(prefix="tsc-parity-")
    try:
        s = start_server(tmp2, models=["mlp"], extra_args=["--disable-token-auth"],
                         config={"enable_envvars_config": "true",
                                 "disable_token_authorization": "false"})
        try:
            s.wait_ready("mlp", body={"json": SAMPLE})
        finally:
            s.stop()
    finally:
        shutil.rmtree(tmp2, ignore_errors=True)


def test_envvars_are_not_read_without_the_switch(tmp):
    port = free_port()
    s = start_server(tmp, models=["mlp"], env={"TS_INFERENCE_ADDRESS": f"http://127.0.0.1:{port}",
                                                "TS_JOB_QUEUE_SIZE": "not a number"})
    try:
        s.wait_ready("mlp", body={"json": SAMPLE})  # on the file's port
        with pytest.raises(requests.ConnectionError):
            requests.get(f"http://127.0.0.1:{port}/ping", timeout=5)
    finally:
        s.stop()


def test_envvar_with_a_bad_value_refuses_the_start_by_name(tmp):
    err = refused_start(tmp, {"enable_envvars_config": "true"},
                        {"TS_JOB_QUEUE_SIZE": "many"})
    assert "environment TS_JOB_QUEUE_SIZE: job_queue_size: expected an integer, got 'many'" \
        in err, err


def test_envvar_of_a_refused_key_is_refused_by_name(tmp):
    err = refused_start(tmp, {"enable_envvars_config": "true"},
                        {"TS_KEYSTORE": "/etc/keystore.p12"})
    assert "environment TS_KEYSTORE: keystore is not supported by torchserve-c" in err, err


@pytest.mark.parametrize("use_env", [False, True])
def test_ts_allowed_urls_needs_use_env_allowed_urls(tmp, use_env):
    cfg = {"enable_envvars_config": "true", "enable_model_api": "true"}
    if use_env:
        cfg["use_env_allowed_urls"] = "true"
    s = start_server(tmp, models=["mlp"], config=cfg,
                     env={"TS_ALLOWED_URLS": "https://models.example.com/.*"})
    try:
        url = "file://" + os.path.join(s.store, "mlp.mar")
        r = s.post(f"/models?url={url}&model_name=mlp2", api="management")
        if use_env:
            assert r.status_code == 404 and "does not match any allowed URL" in r.text, r.text
        else:
            assert r.status_code == 200, r.text
    finally:
        s.stop()


# ---- the archiver's short options (torch-model-archiver's --help) ----

def test_archiver_short_options_and_zip_store(tmp):
    with open(os.path.join(tmp, "handler.py"), "w") as f:
        f.write("def handle(data, context):\n    return [1] * len(data)\n")
    with open(os.path.join(tmp, "requirements.txt"), "w") as f:
        f.write("numpy\n")
    with open(os.path.join(tmp, "model-config.yaml"), "w") as f:
        f.write("minWorkers: 1\n")
    args = ["--model-name", "short", "-v", "2.0", "--handler", "handler.py",
            "-r", "requirements.txt", "-c", "model-config.yaml", "--archive-format", "zip-store"]
    r = subprocess.run([ARCHIVER, *args], cwd=tmp, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    with zipfile.ZipFile(os.path.join(tmp, "short.mar")) as z:
        m = json.loads(z.read("MAR-INF/MANIFEST.json"))["model"]
        assert m["modelVersion"] == "2.0" and m["requirementsFile"] == "requirements.txt"
        assert m["configFile"] == "model-config.yaml"
        # zip-store: every entry stored, none deflated
        assert {i.compress_type for i in z.infolist()} == {zipfile.ZIP_STORED}
    # an existing archive needs -f
    r = subprocess.run([ARCHIVER, *args], cwd=tmp, capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "-f/--force" in r.stderr
    r = subprocess.run([ARCHIVER, *args, "-f"], cwd=tmp, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    helptext = subprocess.run([ARCHIVER, "-h"], capture_output=True, text=True).stdout
    for opt in ("-r", "-f", "-v", "-c", "zip-store"):
        assert opt in helptext


# ---- OPTIONS / on every port ----

def test_options_root_on_every_port(tmp):
    s = start_server(tmp, models=["mlp"])
    try:
        docs = {}
        for api in ("inference", "management", "metrics"):
            r = requests.options(s.url("/", api), timeout=10)
            assert r.status_code == 200, (api, r.text)
            docs[api] = r.json()
            assert docs[api]["openapi"].startswith("3.")
            assert s.get("/api-description", api=api).json() == docs[api]
        assert "/metrics" in docs["metrics"]["paths"]
        assert "/predictions/{model_name}" in docs["inference"]["paths"]
        assert "/models" in docs["management"]["paths"]
        # the metrics port still serves the metrics and nothing else
        assert s.get("/metrics", api="metrics").status_code == 200
        assert s.get("/nope", api="metrics").status_code == 404
    finally:
        s.stop()
