"""Token authorization over REST, as TorchServe's (key_file.json in the server's cwd, mode 0600,
Bearer keys per API, rotation through /token, expiry), except that a refused token answers 401
instead of TorchServe's 400.
"""
import json
import os
import re
import stat
import subprocess
import time

import pytest
import requests

from conftest import BIN

FAIL = {"code": 401, "type": "InvalidKeyException",
        "message": "Token Authorization failed. Token either incorrect, expired, or not provided "
                   "correctly"}


def keys(srv):
    with open(os.path.join(srv.tmp, "key_file.json")) as f:
        return json.load(f)


def bearer(k):
    return {"Authorization": f"Bearer {k}"}


@pytest.fixture
def srv(server_factory):
    s = server_factory(models=["identity_text"],
                       config={"disable_token_authorization": "false",
                               "enable_model_api": "true"})
    s.wait_healthy(headers=bearer(keys(s)["inference"]["key"]))
    return s


@pytest.mark.smoke
def test_key_file_and_api_separation(srv):
    path = os.path.join(srv.tmp, "key_file.json")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    k = keys(srv)
    assert set(k) == {"management", "inference", "API"}
    assert set(k["management"]) == {"key", "expiration time"} and set(k["API"]) == {"key"}
    for v in (k["management"]["key"], k["inference"]["key"], k["API"]["key"]):
        assert re.fullmatch(r"[A-Za-z0-9_-]{8}", v)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", k["inference"]["expiration time"])
    inf, mgmt = k["inference"]["key"], k["management"]["key"]

    # no token, a wrong one, a malformed header: 401 with TorchServe's InvalidKeyException body
    for h in ({}, bearer("AAAAAAAA"), {"Authorization": inf}, {"Authorization": f"Basic {inf}"},
              bearer(inf + "x")):
        r = srv.get("/ping", headers=h)
        assert r.status_code == 401 and r.json() == FAIL, h
        r = srv.get("/models", api="management", headers=h)
        assert r.status_code == 401 and r.json() == FAIL, h
    r = srv.post("/predictions/identity_text", data=b"hi")
    assert r.status_code == 401

    # the inference key works on the inference port only, the management key on management only
    deadline = time.time() + 60
    while True:
        r = srv.post("/predictions/identity_text", data=b"hi", headers=bearer(inf))
        if r.status_code == 200 or time.time() > deadline:
            break
        time.sleep(0.1)
    assert r.status_code == 200, r.text
    assert srv.get("/models", api="management", headers=bearer(inf)).status_code == 401
    assert srv.get("/models", api="management", headers=bearer(mgmt)).status_code == 200
    assert srv.post("/predictions/identity_text", data=b"hi", headers=bearer(mgmt)).status_code == 401
    assert srv.get("/ping", headers={"Authorization": f"Bearer   {inf}"}).status_code == 200

    # no token needed: the API description on both ports, and the metrics port
    assert requests.options(srv.url("/", "management"), timeout=10).status_code == 200
    assert requests.options(srv.url("/"), timeout=10).status_code == 200
    assert srv.get("/metrics", api="metrics").status_code == 200


def test_rotation(srv):
    k = keys(srv)
    inf, mgmt, api = k["inference"]["key"], k["management"]["key"], k["API"]["key"]
    # only the API key may rotate
    assert srv.get("/token?type=inference", api="management", headers=bearer(mgmt)).status_code == 401
    assert srv.get("/token?type=inference", api="management", headers=bearer(inf)).status_code == 401
    r = srv.get("/token?type=foo", api="management", headers=bearer(api))
    assert r.status_code == 400

    r = srv.get("/token?type=inference", api="management", headers=bearer(api))
    assert r.status_code == 200
    k2 = keys(srv)
    assert k2["inference"]["key"] != inf and k2["management"]["key"] == mgmt
    # TorchServe answers a JSON content type with the body "\n"; ours is the new key's entry
    assert r.headers["Content-Type"] == "application/json"
    assert r.json() == {"inference": k2["inference"]}, r.text
    assert k2["API"]["key"] == api
    assert stat.S_IMODE(os.stat(os.path.join(srv.tmp, "key_file.json")).st_mode) == 0o600
    assert srv.get("/ping", headers=bearer(inf)).status_code == 401
    assert srv.get("/ping", headers=bearer(k2["inference"]["key"])).status_code == 200

    r = srv.get("/token?type=management", api="management", headers=bearer(api))
    assert r.status_code == 200
    k3 = keys(srv)
    assert k3["management"]["key"] != mgmt
    assert srv.get("/models", api="management", headers=bearer(mgmt)).status_code == 401
    assert srv.get("/models", api="management", headers=bearer(k3["management"]["key"])).status_code == 200


def test_expiry(server_factory):
    # 0.02 min = 1.2 s
    s = server_factory(config={"disable_token_authorization": "false",
                               "token_expiration_min": "0.02"})
    k = keys(s)
    assert s.get("/ping", headers=bearer(k["inference"]["key"])).status_code == 200
    time.sleep(1.4)
    assert s.get("/ping", headers=bearer(k["inference"]["key"])).status_code == 401
    assert s.get("/models", api="management",
                 headers=bearer(k["management"]["key"])).status_code == 401
    # the API key does not expire; a rotated key is valid again for token_expiration_min
    api = k["API"]["key"]
    assert s.get("/token?type=inference", api="management", headers=bearer(api)).status_code == 200
    assert s.get("/ping", headers=bearer(keys(s)["inference"]["key"])).status_code == 200


@pytest.mark.smoke
def test_disabled(server_factory):
    s = server_factory(extra_args=["--disable-token-auth"],
                       config={"disable_token_authorization": "false"})
    assert s.get("/ping").status_code == 200
    assert s.get("/models", api="management").status_code == 200
    assert s.get("/token?type=inference", api="management").status_code == 404
    assert not os.path.exists(os.path.join(s.tmp, "key_file.json"))


def test_stop_removes_key_file(server_factory):
    s = server_factory(config={"disable_token_authorization": "false"})
    path = os.path.join(s.tmp, "key_file.json")
    assert os.path.exists(path)
    env = dict(os.environ, TMPDIR=s.tmp)
    stop = subprocess.Popen([os.path.join(BIN, "torchserve-c"), "--stop"], cwd=s.tmp, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # the server is our child: reap it so that --stop sees it gone
    s.proc.wait(timeout=30)
    out, err = stop.communicate(timeout=30)
    assert stop.returncode == 0, err
    assert "TorchServe has stopped." in out
    assert not os.path.exists(path)
