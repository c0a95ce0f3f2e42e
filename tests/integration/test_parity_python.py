"""TorchServe parity of the Python side (issue 35, points 6 and 8), against the real server and
its embedded CPython workers:

- install_py_dep_per_model=true: a model's requirements.txt is installed into a virtual
  environment of its own (--system-site-packages: torch stays importable), offline, from a wheel
  built here, with pip's own configuration (PIP_NO_INDEX, PIP_FIND_LINKS); the handler imports
  it; a failed install fails the registration with pip's message; without the key nothing is
  installed and the import error says how to get the module;
- a handler in the style of TorchServe's examples/micro_batching (ts.handler_utils.
  micro_batching.MicroBatching over ImageClassifier, micro_batch_size and parallelism from its
  model-config.yaml) answers as the plain image_classifier does, for a batch of 8;
- a handler importing a ts.* module our ts package lacks gets a message about the ts package,
  not the advice to install a Debian python3-* package.
"""
import base64
import hashlib
import io
import json
import os
import shutil
import sys
import threading
import time
import zipfile

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from conftest import MODEL_STORE, oip_text, python_model, start_server  # noqa: E402

torch = pytest.importorskip("torch")
Image = pytest.importorskip("PIL.Image")


def write_model(store, name, handler_src, files=None, yaml="minWorkers: 1\nmaxWorkers: 1\n",
                requirements=None):
    return python_model(store, name, handler_src, yaml=yaml, files=files,
                        requirements=requirements)


def predict_until(srv, model, body=b"1", timeout=90, headers=None):
    deadline = time.time() + timeout
    while True:
        r = srv.post(f"/predictions/{model}", data=body, headers=headers or {}, timeout=60)
        if r.status_code == 200 or time.time() > deadline:
            return r
        time.sleep(0.2)


def build_wheel(dirpath, name="tsc_tiny_dep", version="0.1", value=42):
    """A pure-Python wheel written by hand (the wheel format: the package, then METADATA, WHEEL
    and RECORD in its .dist-info), so the test needs no build tool and no network."""
    files = {f"{name}/__init__.py": f"VALUE = {value}\n".encode()}
    info = f"{name}-{version}.dist-info"
    files[f"{info}/METADATA"] = (f"Metadata-Version: 2.1\nName: {name.replace('_', '-')}\n"
                                 f"Version: {version}\n").encode()
    files[f"{info}/WHEEL"] = (b"Wheel-Version: 1.0\nGenerator: torchserve-c-tests\n"
                              b"Root-Is-Purelib: true\nTag: py3-none-any\n")
    record = []
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    record.append(f"{info}/RECORD,,")
    files[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    whl = os.path.join(dirpath, f"{name}-{version}-py3-none-any.whl")
    with zipfile.ZipFile(whl, "w") as z:
        for path, data in files.items():
            z.writestr(path, data)
    return whl


USES_DEP = '''
import sys

import torch
import tsc_tiny_dep


def handle(data, context):
    if data is None:
        return None
    return [{"value": tsc_tiny_dep.VALUE, "prefix": sys.prefix, "module": tsc_tiny_dep.__file__,
             "torch": torch.__version__} for _ in data]
'''


@pytest.fixture
def wheels(tmp_path):
    d = tmp_path / "wheels"
    d.mkdir()
    build_wheel(str(d))
    return str(d)


def test_requirements_into_a_venv_of_the_model(tmp_path, wheels):
    store = tmp_path / "store"
    write_model(str(store), "dep", USES_DEP, requirements="tsc-tiny-dep==0.1\n")
    env = {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": wheels}
    srv = start_server(str(tmp_path), store=str(store), models=["dep"],
                       config={"install_py_dep_per_model": "true", "enable_model_api": "true"},
                       env=env)
    try:
        r = predict_until(srv, "dep")
        assert r.status_code == 200, r.text + srv.log()[-3000:]
        got = r.json()
        assert got["value"] == 42 and got["torch"] == torch.__version__
        # the worker runs as the model's own environment, which holds the package
        assert got["prefix"].endswith("/.venv") and got["prefix"] != sys.prefix, got
        assert got["module"].startswith(got["prefix"] + "/lib/"), got
        assert "requirements.txt installed into" in srv.log()

        # a requirement pip cannot satisfy fails the registration with pip's own message
        bad = write_model(str(store), "baddep", USES_DEP, requirements="tsc-missing-dep==9.9\n")
        assert os.path.isdir(bad)
        r = srv.post("/models?url=baddep&initial_workers=1&synchronous=true", api="management",
                     timeout=300)
        assert r.status_code == 400, r.text
        msg = r.json()["message"]
        assert "Custom pip package installation failed for model baddep" in msg, msg
        assert "pip install failed (exit 1)" in msg and "tsc-missing-dep==9.9" in msg, msg
        assert srv.get("/models/baddep", api="management").status_code == 404
    finally:
        srv.stop()


def test_requirements_not_installed_without_the_key(tmp_path, wheels):
    store = tmp_path / "store"
    write_model(str(store), "dep", USES_DEP, requirements="tsc-tiny-dep==0.1\n")
    # the model fails to load on purpose: the server serves on (--start exits 1 otherwise)
    srv = start_server(str(tmp_path), store=str(store), models=["dep"],
                       env={"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": wheels},
                       extra_args=["--continue-on-model-error"])
    try:
        deadline = time.time() + 60
        while True:
            d = srv.get("/models/dep", api="management").json()[0]
            if d.get("loadError") or time.time() > deadline:
                break
            time.sleep(0.2)
        err = d.get("loadError", "")
        assert "No module named 'tsc_tiny_dep'" in err, d
        assert "list it in the model's requirements.txt and start the server with " \
               "install_py_dep_per_model=true" in err, err
        assert "requirements.txt from the archive is not installed" in srv.log()
    finally:
        srv.stop()


DEP_RUNTIME = '''
import sys

import tsc_tiny_dep
from mlserver import MLModel
from mlserver.codecs import StringCodec
from mlserver.types import InferenceResponse


class DepModel(MLModel):
    async def predict(self, payload):
        text = f"{tsc_tiny_dep.VALUE} {sys.prefix}"
        return InferenceResponse(model_name=self.name,
                                 outputs=[StringCodec.encode_output("output", [text])])
'''


def test_requirements_of_an_mlserver_runtime_folder(tmp_path, wheels):
    """A runtime folder has no MANIFEST.json to name a requirements file: its requirements.txt is
    the one install_py_dep_per_model installs, as the missing-module message tells its user."""
    d = tmp_path / "store" / "deprt"
    d.mkdir(parents=True)
    (d / "model-settings.json").write_text(json.dumps({"name": "deprt",
                                                       "implementation": "dep_model.DepModel"}))
    (d / "dep_model.py").write_text(DEP_RUNTIME)
    (d / "requirements.txt").write_text("tsc-tiny-dep==0.1\n")
    srv = start_server(str(tmp_path), store=str(tmp_path / "store"), models=["deprt"],
                       config={"install_py_dep_per_model": "true"},
                       env={"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": wheels})
    try:
        deadline = time.time() + 90
        while True:
            r = srv.post("/v2/models/deprt/infer", json=oip_text("x"), timeout=60)
            if r.status_code == 200 or time.time() > deadline:
                break
            time.sleep(0.2)
        assert r.status_code == 200, r.text + srv.log()[-3000:]
        value, prefix = r.json()["outputs"][0]["data"][0].split(" ", 1)
        assert value == "42" and prefix.endswith("/.venv") and prefix != sys.prefix, r.json()
        assert "requirements.txt installed into" in srv.log()
    finally:
        srv.stop()


MISSING_TS = '''
from ts.handler_utils.no_such_module import Thing  # noqa: F401


def handle(data, context):
    return data
'''


def test_a_missing_ts_module_is_not_sent_to_debian(tmp_path):
    store = tmp_path / "store"
    write_model(str(store), "mts", MISSING_TS)
    srv = start_server(str(tmp_path), store=str(store), models=["mts"],
                       extra_args=["--continue-on-model-error"])
    try:
        deadline = time.time() + 60
        while True:
            d = srv.get("/models/mts", api="management").json()[0]
            if d.get("loadError") or time.time() > deadline:
                break
            time.sleep(0.2)
        err = d.get("loadError", "")
        assert "No module named 'ts.handler_utils.no_such_module'" in err, d
        assert "torchserve-c's ts package implements TorchServe's handler API" in err, err
        assert "Debian" not in err and "requirements.txt" not in err, err
    finally:
        srv.stop()


# ---- examples/micro_batching, written against the contract ----

MICRO_BATCHING_HANDLER = '''
import logging

from ts.handler_utils.micro_batching import MicroBatching
from ts.torch_handler.image_classifier import ImageClassifier

logger = logging.getLogger(__name__)


class MicroBatchingHandler(ImageClassifier):
    def __init__(self):
        mb_handle = MicroBatching(self)
        self.handle = mb_handle

    def initialize(self, ctx):
        super().initialize(ctx)
        parallelism = ctx.model_yaml_config.get("micro_batching", {}).get("parallelism", None)
        if parallelism:
            logger.info(f"Setting micro batching parallelism  from model_config_yaml: {parallelism}")
            self.handle.parallelism = parallelism
        micro_batch_size = ctx.model_yaml_config.get("micro_batching", {}).get(
            "micro_batch_size", 1)
        logger.info(f"Setting micro batching size: {micro_batch_size}")
        self.handle.micro_batch_size = micro_batch_size

    def postprocess(self, data):
        # which micro-batch ran this, reported beside the answer (one per request)
        out = super().postprocess(data)
        return [{"top5": o, "micro_batch": self.handle.get_micro_batch_idx()} for o in out]
'''

MB_CONFIG = """minWorkers: 1
maxWorkers: 1
batchSize: 8
maxBatchDelay: 500

micro_batching:
  micro_batch_size: 2
  parallelism:
    preprocess: 2
    inference: 1
    postprocess: 2
"""


def make_image(seed):
    g = torch.Generator().manual_seed(seed)
    small = (torch.rand(3, 8, 8, generator=g) * 255).to(torch.uint8)
    img = Image.fromarray(small.permute(1, 2, 0).numpy(), "RGB").resize((256, 256))
    buf = io.BytesIO()
    img.save(buf, "PNG")
    return buf.getvalue()


def test_micro_batching_example_answers_as_the_plain_classifier(tmp_path):
    store = tmp_path / "store"
    d = store / "resnet18_mb"
    with zipfile.ZipFile(os.path.join(MODEL_STORE, "resnet18.mar")) as z:
        z.extractall(d)
    shutil.copy(os.path.join(MODEL_STORE, "resnet18.mar"), store)
    (d / "micro_batching_handler.py").write_text(MICRO_BATCHING_HANDLER)
    (d / "config.yaml").write_text(MB_CONFIG)
    manifest = json.loads((d / "MAR-INF" / "MANIFEST.json").read_text())
    manifest["model"].update({"modelName": "resnet18_mb", "handler": "micro_batching_handler.py",
                              "configFile": "config.yaml"})
    (d / "MAR-INF" / "MANIFEST.json").write_text(json.dumps(manifest))
    # worker_debug_headers: the answers' x-ts-worker-batch says whether the 8 ran as one batch
    srv = start_server(str(tmp_path), store=str(store), models=["resnet18", "resnet18_mb"],
                       config={"worker_debug_headers": True})
    try:
        images = [make_image(i) for i in range(8)]
        for m in ("resnet18", "resnet18_mb"):
            assert predict_until(srv, m, images[0], timeout=120).status_code == 200
        plain = [srv.post("/predictions/resnet18", data=im).json() for im in images]
        got = [None] * 8
        barrier = threading.Barrier(8)

        def client(i):
            barrier.wait()
            got[i] = srv.post("/predictions/resnet18_mb", data=images[i], timeout=120)

        threads = [threading.Thread(target=client, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert all(r.status_code == 200 for r in got), [r.text for r in got]
        answers = [r.json() for r in got]
        for i, a in enumerate(answers):
            assert list(a["top5"]) == list(plain[i]), (i, a, plain[i])
            for k, v in a["top5"].items():
                assert abs(v - plain[i][k]) <= 1e-5, (i, k, v, plain[i][k])
        # one batch of 8 cut into micro-batches of 2
        batches = {r.headers.get("x-ts-worker-batch") for r in got}
        if batches == {"8"}:
            assert sorted({a["micro_batch"] for a in answers}) == [0, 1, 2, 3], answers
        log = srv.log()
        assert "Setting micro batching size: 2" in log
        assert "parallelism  from model_config_yaml: {'preprocess': 2" in log
    finally:
        srv.stop()
