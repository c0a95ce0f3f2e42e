"""REST management API on the management port: TorchServe's postman management scenarios
(test/postman/management_data.json: the same status codes), describe/list bodies, worker
processes seen in /proc, model versions, model API control and the url policy.
"""
import json
import os
import shutil
import tempfile
import time
import zipfile

import pytest

from conftest import MODEL_STORE, start_server

SAMPLE = json.load(open(os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "scripts", "models", "mlp", "sample.json")))

MODEL_API_OFF = {"code": 405, "type": "MethodNotAllowedException",
                 "message": "Requested method is not allowed: the model API (register, "
                            "unregister) is disabled; enable it with enable_model_api=true in "
                            "config.properties or --enable-model-api at start"}


def make_store(tmp, v2=False):
    """mlp.mar and identity_text.mar, plus mlp version 2.0 unpacked as a directory."""
    store = os.path.join(tmp, "store")
    os.makedirs(store)
    for m in ("mlp", "identity_text"):
        shutil.copy(os.path.join(MODEL_STORE, f"{m}.mar"), store)
    # mlp without minWorkers/maxWorkers in its model-config.yaml
    d = os.path.join(store, "mlp_nomin")
    with zipfile.ZipFile(os.path.join(MODEL_STORE, "mlp.mar")) as z:
        z.extractall(d)
    y = os.path.join(d, "model-config.yaml")
    lines = open(y).read().splitlines(True)
    open(y, "w").write("".join(ln for ln in lines if not ln.startswith(("minWorkers",
                                                                           "maxWorkers"))))
    if v2:
        d = os.path.join(store, "mlp_v2")
        with zipfile.ZipFile(os.path.join(MODEL_STORE, "mlp.mar")) as z:
            z.extractall(d)
        mf = os.path.join(d, "MAR-INF", "MANIFEST.json")
        manifest = json.load(open(mf))
        manifest["model"]["modelVersion"] = "2.0"
        json.dump(manifest, open(mf, "w"))
    return store


@pytest.fixture(scope="module")
def srv():
    tmp = tempfile.mkdtemp(prefix="tsc-mgmt-")
    s = start_server(tmp, config={"enable_model_api": "true", "default_workers_per_model": 0},
                     store=make_store(tmp, v2=True))
    yield s
    s.stop()
    shutil.rmtree(tmp, ignore_errors=True)


def call(srv, method, path, **kw):
    kw.setdefault("timeout", 60)
    import requests
    return requests.request(method, srv.url("/" + path, "management"), **kw)


def status(srv, method, path, **kw):
    return call(srv, method, path, **kw).status_code


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def wait_pids(srv, n, timeout=10):
    deadline = time.time() + timeout
    while time.time() < deadline:
        pids = srv.worker_pids()
        if len(pids) == n:
            return pids
        time.sleep(0.05)
    return srv.worker_pids()


@pytest.mark.smoke
def test_postman_register_scenarios(srv):
    # no initial_workers (and default_workers_per_model=0): the archive's own minWorkers (1)
    # starts workers, as TorchServe (none only when initialWorkers <= 0 && minWorkers == 0)
    pids0 = set(srv.worker_pids())
    r = call(srv, "POST", "models?url=mlp.mar&model_name=mlp")
    assert r.status_code == 200
    assert r.json() == {"status": 'Model "mlp" Version: 1.0 registered with 1 initial workers'}
    assert len(set(srv.worker_pids()) - pids0) == 1
    assert srv.post("/predictions/mlp", json=SAMPLE).status_code == 200  # not 503
    # an archive without minWorkers gets none
    r = call(srv, "POST", "models?url=mlp_nomin&model_name=nomin")
    assert r.status_code == 200
    assert r.json() == {"status": 'Model "nomin" Version: 1.0 registered with 0 initial workers. '
                                  "Use scale workers API to add workers for the model."}
    assert call(srv, "GET", "models/nomin").json()[0]["workers"] == []
    assert status(srv, "DELETE", "models/nomin") == 200
    # re-registration: same model and version (409), and postman's re-download of an existing
    # archive name (500 "Model file already exists")
    r = call(srv, "POST", "models?url=mlp.mar&model_name=mlp")
    assert r.status_code == 409 and r.json()["type"] == "ConflictStatusException"
    r = call(srv, "POST", "models?url=https://torchserve.pytorch.org/mar_files/mlp.mar&model_name=mlp")
    assert r.status_code == 500 and r.json()["message"] == "Model file already exists mlp.mar"
    r = call(srv, "POST", "models")
    assert r.status_code == 400 and r.json()["message"] == "Parameter url is required."
    assert status(srv, "POST", "models?url=identity_text.mar&runtime=python4") == 400
    assert status(srv, "POST", "models?url=&model_name=resnet-18") == 404
    r = call(srv, "POST", "models?url=https://torchserve.pytorch.org/mar_files/invalid-resnet-18.mar"
                          "&model_name=invalid-resnet18")
    assert r.status_code == 400 and r.json()["type"] == "DownloadArchiveException"
    assert "remote model download is not supported" in r.json()["message"]
    # non-integer numbers take their defaults, as TorchServe's getIntParameter
    assert status(srv, "POST", "models?url=identity_text.mar&batch_size=dd&max_batch_delay=junk") == 200
    d = call(srv, "GET", "models/identity_text").json()[0]
    assert d["batchSize"] >= 1 and d["maxBatchDelay"] >= 0
    # trailing slash and ignored synchronous/timeout on DELETE
    assert status(srv, "DELETE", "models/identity_text/?synchronous=nan&timeout=true") == 200
    # JSON body with the same snake_case keys
    r = call(srv, "POST", "models", json={"url": "identity_text.mar", "model_name": "echo",
                                          "batch_size": 4, "initial_workers": 0})
    assert r.status_code == 200, r.text
    assert call(srv, "GET", "models/echo").json()[0]["batchSize"] == 4
    r = call(srv, "POST", "models", json={"url": "identity_text.mar", "batch_size": [1]})
    assert r.status_code == 400 and "$.batch_size" in r.json()["message"]
    assert status(srv, "DELETE", "models/echo") == 200


def test_postman_scale_and_describe(srv):
    pid0 = set(srv.worker_pids())
    assert len(pid0) == 1  # mlp's, from its minWorkers (test_postman_register_scenarios)
    # invalid handler: the archive's minWorkers starts a worker at registration, which fails:
    # 500, and the model is not left behind
    r = call(srv, "POST", "models?url=identity_text.mar&model_name=broken&handler=invalidHandler")
    assert r.status_code == 500, r.text
    assert r.json()["message"].startswith('Failed to start workers: unknown handler '
                                          '"invalidHandler"'), r.text
    assert status(srv, "GET", "models/broken") == 404
    # with initial_workers=0 and no minWorkers it registers (no worker); a synchronous scale fails
    assert status(srv, "POST", "models?url=mlp_nomin&model_name=broken&handler=invalidHandler") == 200
    r = call(srv, "PUT", "models/broken?min_worker=1&synchronous=true")
    assert r.status_code == 500, r.text
    assert status(srv, "DELETE", "models/broken") == 200

    assert status(srv, "PUT", "models/mlp?min_worker=1") == 202
    r = call(srv, "PUT", "models/mlp?min_worker=1&synchronous=true")
    assert r.status_code == 200, srv.log()[-4000:]
    assert r.json() == {"status": "Workers scaled to 1 for model: mlp"}
    r = call(srv, "PUT", "models/mlp/1.0?min_worker=1&synchronous=true")
    assert r.status_code == 200
    assert r.json() == {"status": "Workers scaled to 1 for model: mlp, version: 1.0"}
    assert status(srv, "PUT", "models/mlp/0.0?min_worker=1&synchronous=true") == 404
    assert status(srv, "PUT", "models/mlp?min_worker=1&number_gpu=1") == 202
    assert status(srv, "PUT", "models/mlp?number_gpu=-1") == 202
    assert status(srv, "PUT", "models/mlp?min_worker=1&synchronous=Nan") == 202
    assert status(srv, "PUT", "models/resnet181?min_worker=1") == 404
    r = call(srv, "PUT", "models/mlp?min_worker=2&max_worker=1")
    assert r.status_code == 400 and r.json()["message"] == "max_worker cannot be less than min_worker."
    assert status(srv, "PUT", "models/mlp?min_worker=-1") == 500
    assert status(srv, "PUT", "models/mlp?max_worker=-1") == 400
    srv.put("/models/mlp?min_worker=1&synchronous=true")

    for path in ("models/mlp", "models/mlp/1.0", "models/mlp/all"):
        r = call(srv, "GET", path)
        assert r.status_code == 200 and isinstance(r.json(), list)
    d = call(srv, "GET", "models/mlp").json()[0]
    for k in ("modelName", "modelVersion", "modelUrl", "runtime", "minWorkers", "maxWorkers",
              "batchSize", "maxBatchDelay", "responseTimeout", "startupTimeout",
              "maxRetryTimeoutInSec", "clientTimeoutInMills", "parallelType", "parallelLevel",
              "deviceType", "continuousBatching", "useJobTicket", "useVenv", "stateful",
              "sequenceMaxIdleMSec", "sequenceTimeoutMSec", "maxNumSequence",
              "maxSequenceJobQueueSize", "loadedAtStartup", "workers", "jobQueueStatus"):
        assert k in d, k
    assert (d["modelName"], d["modelVersion"], d["modelUrl"]) == ("mlp", "1.0", "mlp.mar")
    assert len(d["workers"]) == 1
    w = d["workers"][0]
    assert set(w) == {"id", "startTime", "status", "memoryUsage", "pid", "gpu", "gpuUsage"}
    assert w["status"] == "READY" and w["id"].isdigit()
    assert w["pid"] in srv.worker_pids() and alive(w["pid"])
    with open(f"/proc/{w['pid']}/cmdline", "rb") as f:
        assert b"torchserve-c-worker" in f.read()
    assert w["memoryUsage"] > 1 << 20
    assert d["jobQueueStatus"] == {"remainingCapacity": 100, "pendingRequests": 0}
    # customized: the worker is asked too (header describe: True); the answer is still the array
    assert status(srv, "POST", "models?url=identity_text.mar&model_name=desc&initial_workers=1") == 200
    r = call(srv, "GET", "models/desc?customized=true")
    assert r.status_code == 200 and [d["modelName"] for d in r.json()] == ["desc"]
    assert status(srv, "DELETE", "models/desc") == 200
    assert status(srv, "GET", "models/invalid_squeezenet1_1") == 404
    r = call(srv, "GET", "models/mlp/0.0")
    assert r.status_code == 404 and r.json()["type"] == "ModelVersionNotFoundException"


def test_postman_list(srv):
    for name in ("aaa", "zzz"):
        assert status(srv, "POST", f"models?url=identity_text.mar&model_name={name}") == 200
    names = [m["modelName"] for m in call(srv, "GET", "models").json()["models"]]
    assert names == sorted(names) and {"aaa", "mlp", "zzz"} <= set(names)
    n = len(names)
    r = call(srv, "GET", "models?limit=1").json()
    assert r == {"nextPageToken": "1", "models": [{"modelName": "aaa", "modelUrl": "identity_text.mar"}]}
    r = call(srv, "GET", "models?limit=1&next_page_token=1").json()
    assert r["nextPageToken"] == "2" and r["models"][0]["modelName"] == names[1]
    assert len(call(srv, "GET", "models?limit=-1").json()["models"]) == n
    assert call(srv, "GET", "models?limit=1&next_page_token=-1").json()["models"][0]["modelName"] == "aaa"
    # a page ending exactly at the last model still carries a token; one running past does not
    assert call(srv, "GET", f"models?limit={n}").json()["nextPageToken"] == str(n)
    assert "nextPageToken" not in call(srv, "GET", f"models?limit={n + 1}").json()
    assert call(srv, "GET", "models?next_page_token=12").json() == {"models": []}
    assert status(srv, "GET", "models?limit=&next_page_token=") == 200
    for name in ("aaa", "zzz"):
        assert status(srv, "DELETE", f"models/{name}") == 200


def test_scale_changes_processes_and_unregister_leaves_none(srv):
    before = set(srv.worker_pids())
    assert status(srv, "POST", "models?url=mlp.mar&model_name=mlp3&initial_workers=1&synchronous=true") == 200
    r = call(srv, "PUT", "models/mlp3?min_worker=3&max_worker=3&synchronous=true")
    assert r.status_code == 200, r.text
    d = call(srv, "GET", "models/mlp3").json()[0]
    pids3 = {w["pid"] for w in d["workers"]}
    assert len(pids3) == 3 and all(w["status"] == "READY" for w in d["workers"])
    assert pids3 <= set(srv.worker_pids()) and len(set(srv.worker_pids())) == len(before) + 3
    r = call(srv, "PUT", "models/mlp3?min_worker=1&max_worker=1&synchronous=true&number_gpu=2")
    assert r.status_code == 200
    assert "scale mlp3: number_gpu=2 is not used" in srv.log()
    gone = pids3 - {w["pid"] for w in call(srv, "GET", "models/mlp3").json()[0]["workers"]}
    assert len(gone) == 2
    deadline = time.time() + 10
    while time.time() < deadline and any(alive(p) for p in gone):
        time.sleep(0.05)
    assert not any(alive(p) for p in gone)
    left = {w["pid"] for w in call(srv, "GET", "models/mlp3").json()[0]["workers"]}
    r = call(srv, "DELETE", "models/mlp3")
    assert r.status_code == 200 and r.json() == {"status": 'Model "mlp3" unregistered'}
    # unregister answers once the processes are gone
    assert not any(alive(p) for p in left)
    assert set(srv.worker_pids()) == before


def test_versions_and_set_default(srv):
    r = call(srv, "POST", "models?url=mlp_v2&initial_workers=1&synchronous=true")
    assert r.status_code == 200, r.text
    assert r.json() == {"status": 'Model "mlp" Version: 2.0 registered with 1 initial workers'}
    srv.put("/models/mlp?min_worker=1&synchronous=true")
    all_ = call(srv, "GET", "models/mlp/all").json()
    assert sorted(d["modelVersion"] for d in all_) == ["1.0", "2.0"]
    # both versions serve at once; no version = the default (1.0, registered first)
    r1 = srv.post("/predictions/mlp/1.0", json=SAMPLE)
    r2 = srv.post("/predictions/mlp/2.0", json=SAMPLE)
    r0 = srv.post("/predictions/mlp", json=SAMPLE)
    assert r1.status_code == r2.status_code == r0.status_code == 200
    assert r1.json() == r2.json() == r0.json()
    assert srv.post("/predictions/mlp/3.0", json=SAMPLE).status_code == 404
    # the default version cannot go while another exists
    r = call(srv, "DELETE", "models/mlp")
    assert r.status_code == 403
    assert r.json() == {"code": 403, "type": "InvalidModelVersionException",
                        "message": "Cannot remove default version for model mlp"}
    assert status(srv, "DELETE", "models/mlp/1.0") == 403
    r = call(srv, "PUT", "models/mlp/2.0/set-default")
    assert r.status_code == 200
    assert r.json() == {"status": 'Default version successfully updated for model "mlp" to "2.0"'}
    assert status(srv, "PUT", "models/mlp/0.0/set-default") == 404
    assert status(srv, "PUT", "models/squeezenet0_1/1.0/set-default") == 404
    assert call(srv, "GET", "models/mlp").json()[0]["modelVersion"] == "2.0"
    assert status(srv, "DELETE", "models/mlp/0.0") == 404
    assert status(srv, "DELETE", "models/mlp/1.0") == 200
    assert srv.post("/predictions/mlp", json=SAMPLE).json() == r1.json()
    assert status(srv, "DELETE", "models/mlp") == 200
    assert status(srv, "DELETE", "models/invalid_squeezenet1_1") == 404
    assert status(srv, "GET", "models/mlp") == 404


@pytest.mark.smoke
def test_url_policy(srv, tmp_path):
    secret = tmp_path / "outside.mar"
    shutil.copy(os.path.join(MODEL_STORE, "identity_text.mar"), secret)
    os.utime(secret, (1000000000, 1000000000))
    cases = {
        "../../etc/passwd": (404, "Relative path is not allowed in url: ../../etc/passwd"),
        "mlp/../../x.mar": (404, "Relative path is not allowed in url: mlp/../../x.mar"),
        str(secret): (404, f"Model url {secret} is outside the model store"),
        f"file://{secret}": (404, f"Model url file://{secret} is outside the model store"),
        "ftp://example.com/m.mar": (404, "Given URL ftp://example.com/m.mar does not match any "
                                         "allowed URL(s)"),
        "nonexistent.mar": (404, "Model not found at: nonexistent.mar"),
    }
    for url, (code, msg) in cases.items():
        r = call(srv, "POST", "models", params={"url": url})
        assert (r.status_code, r.json()["message"]) == (code, msg), url
    # nothing outside the store was opened: its access time did not move
    assert os.stat(secret).st_atime == 1000000000
    # a symlink in the store pointing outside it is refused after resolution
    link = os.path.join(srv.store, "link.mar")
    os.symlink(secret, link)
    try:
        r = call(srv, "POST", "models?url=link.mar")
        assert r.status_code == 404 and "outside the model store" in r.json()["message"]
    finally:
        os.unlink(link)


def test_allowed_urls_rules(server_factory):
    s = server_factory(config={"enable_model_api": "true", "default_workers_per_model": 0,
                               "allowed_urls": "https://models\\.example\\.com/.*"})
    r = s.post("/models?url=http://evil.example.org/m.mar", api="management")
    assert r.status_code == 404
    assert r.json()["message"] == ("Given URL http://evil.example.org/m.mar does not match any "
                                   "allowed URL(s)")
    r = s.post("/models?url=HTTPS://models.example.com/m.mar", api="management")
    assert r.status_code == 400 and "remote model download is not supported" in r.json()["message"]


@pytest.mark.smoke
def test_model_api_disabled_by_default(server_factory):
    s = server_factory(models=["identity_text"], yaml={"identity_text": {"minWorkers": 1}},
                       config={"default_workers_per_model": 1})
    r = s.post("/models?url=mlp.mar", api="management")
    assert r.status_code == 405 and r.json() == MODEL_API_OFF
    r = s.delete("/models/identity_text")
    assert r.status_code == 405 and r.json() == MODEL_API_OFF
    # scale, describe and list still work
    assert s.get("/models", api="management").status_code == 200
    assert s.get("/models/identity_text", api="management").status_code == 200
    assert s.put("/models/identity_text?min_worker=1").status_code == 202
    assert s.get("/api-description", api="management").json()["openapi"].startswith("3.")
    assert s.get("/nope", api="management").status_code == 404


def test_scale_down_lets_in_flight_requests_finish(server_factory):
    """A worker that is scaled down answers what it holds first (TorchServe fails it with 503
    "Worker was stopped"); the one left keeps serving."""
    import threading
    srv = server_factory(models=["identity_text"], config={"disable_token_authorization": "true"},
                         yaml={"identity_text": {"minWorkers": 2, "maxWorkers": 2, "batchSize": 1,
                                                 "maxBatchDelay": 0}})
    srv.wait_ready("identity_text", body={"data": "warm", "headers": {"x-delay-ms": "0"}})
    deadline = time.time() + 60
    while len(srv.worker_pids()) < 2 and time.time() < deadline:
        time.sleep(0.1)
    assert len(srv.worker_pids()) == 2
    text = "one two three four five"
    results = [None, None]

    def call(i):
        results[i] = srv.post("/predictions/identity_text", data=text,
                              headers={"x-delay-ms": "250"}, timeout=60)

    threads = [threading.Thread(target=call, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    time.sleep(0.5)  # both streams are on their workers, a word or two in
    r = srv.put("/models/identity_text?min_worker=1&max_worker=1&synchronous=false")
    assert r.status_code == 202, r.text
    for t in threads:
        t.join(60)
    for r in results:
        assert r is not None and r.status_code == 200, r and r.text
        assert r.text.split() == text.split(), r.text
    deadline = time.time() + 30
    while len(srv.worker_pids()) != 1 and time.time() < deadline:
        time.sleep(0.1)
    assert len(srv.worker_pids()) == 1
    r = srv.post("/predictions/identity_text", data="still here", headers={"x-delay-ms": "0"})
    assert r.status_code == 200 and r.text.split() == ["still", "here"], r.text


def test_extracted_archives_have_a_total_cap(server_factory, tmp_path):
    """max_extracted_bytes caps all extracted archives together (each is also capped on its
    own): a registration past it is refused with 400 naming the key, and unregistering frees
    its share."""
    size = sum(i.file_size for i in zipfile.ZipFile(os.path.join(MODEL_STORE, "mlp.mar")).infolist())
    s = server_factory(config={"enable_model_api": "true", "default_workers_per_model": 0,
                               "max_extracted_bytes": str(size + size // 2)},
                       store=make_store(str(tmp_path)))
    r = s.post("/models?url=mlp.mar&model_name=first", api="management")
    assert r.status_code == 200, r.text
    r = s.post("/models?url=mlp.mar&model_name=second", api="management")
    assert r.status_code == 400, r.text
    assert r.json()["type"] == "InvalidModelException"
    assert "max_extracted_bytes" in r.json()["message"], r.text
    assert s.delete("/models/first", api="management").status_code == 200
    r = s.post("/models?url=mlp.mar&model_name=second", api="management")
    assert r.status_code == 200, r.text


@pytest.mark.smoke
@pytest.mark.parametrize("param,value,limit", [("batch_size", 10000000, 1024),
                                               ("max_batch_delay", 2000000000, 600000),
                                               ("initial_workers", 1000, 64),
                                               ("response_timeout", 999999999, 604800)])
def test_register_numbers_bounded(srv, param, value, limit):
    """Registering a sequence model with batch_size=10000000 and sending one prediction used to
    overflow the loop thread's stack and take every model down: client-given numbers are bounded,
    with 400 naming the limit, and nothing is registered."""
    r = call(srv, "POST", f"models?url=stateful.mar&model_name=big&{param}={value}")
    assert r.status_code == 400, r.text
    assert param in r.json()["message"] and str(limit) in r.json()["message"]
    assert status(srv, "GET", "models/big") == 404
    r = call(srv, "PUT", "models/mlp?min_worker=1&max_worker=100")
    assert r.status_code in (400, 404), r.text


def test_model_config_yaml_numbers_bounded(server_factory):
    """The same bounds hold for model-config.yaml: a batchSize over the limit fails the load with
    the file's line."""
    srv = server_factory(models=["mlp"], yaml={"mlp": {"batchSize": 5000}}, load=False,
                         config={"enable_model_api": "true"})
    r = call(srv, "POST", "models?url=mlp&initial_workers=1&synchronous=true")
    assert r.status_code == 400, r.text
    assert "batchSize" in r.json()["message"] and "1024" in r.json()["message"]


def test_scale_to_zero_fails_what_is_queued(server_factory):
    """Requests queued for a model scaled to 0 workers get 503 naming the scale at once; they
    used to wait for a worker for ever. New requests are refused as before, and a scale back up
    serves again."""
    import threading
    srv = server_factory(models=["mlp"], config={"disable_token_authorization": "true"},
                         yaml={"mlp": {"minWorkers": 1, "maxWorkers": 1, "batchSize": 4,
                                       "maxBatchDelay": 60000}})
    deadline = time.time() + 60
    while not srv.worker_pids() and time.time() < deadline:
        time.sleep(0.1)

    def batch(n):
        """n concurrent predictions; their responses"""
        out = [None] * n

        def post(i):
            out[i] = srv.post("/predictions/mlp", json=SAMPLE, timeout=90)
        threads = [threading.Thread(target=post, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        return out, threads

    out, threads = batch(4)  # a full batch goes at once: the worker is loaded
    for t in threads:
        t.join(90)
    assert all(r is not None and r.status_code == 200 for r in out), [r and r.text for r in out]
    out, threads = batch(2)
    time.sleep(0.5)  # two requests of a batch of 4: queued until maxBatchDelay (60 s)
    r = srv.put("/models/mlp?min_worker=0&max_worker=0&synchronous=true", api="management")
    assert r.status_code == 200, r.text
    for t in threads:  # answered at once: waiting for maxBatchDelay (60 s), out would be None
        t.join(30)
    for r in out:
        assert r is not None and r.status_code == 503, r and r.text
        msg = r.json()["message"]
        assert 'Model "mlp" has no worker' in msg and "scaled to 0 workers" in msg, msg
    r = srv.post("/predictions/mlp", json=SAMPLE)
    assert r.status_code == 503, r.text
    r = srv.put("/models/mlp?min_worker=1&max_worker=1&synchronous=true", api="management")
    assert r.status_code == 200, r.text
    out, threads = batch(4)
    for t in threads:
        t.join(90)
    assert all(r is not None and r.status_code == 200 for r in out), [r and r.text for r in out]
