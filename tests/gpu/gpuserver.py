"""The harness of tests/gpu: start the real torchserve-c on ephemeral ports and talk to it, with
the standard library only (a GPU host's Python has torch, PIL and yaml, but neither pytest nor
requests). The tests are unittest TestCases, so both `python3 -m unittest discover -s tests/gpu`
(scripts/gpu/check.sh, on a GPU host) and pytest (CI) run them.

Environment:
    TS_BUILD        the build directory (default build): bin/torchserve-c and the worker
    TS_MODEL_STORE  the archives (default model-store/)
    TS_FRONTEND_LD  LD_LIBRARY_PATH for the frontend only (the Debian libraries it was built
                    with, on a host without them; scripts/gpu/check.sh); clients run without
"""
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.path.join(ROOT, os.environ.get("TS_BUILD", "build"))
STORE = os.environ.get("TS_MODEL_STORE") or os.path.join(ROOT, "model-store")
FRONT_LD = os.environ.get("TS_FRONTEND_LD", "")


def nvidia_smi(*args):
    """nvidia-smi's CSV answer (no header, no units) as rows of fields, or None without it."""
    if not shutil.which("nvidia-smi"):
        return None
    r = subprocess.run(["nvidia-smi", *args, "--format=csv,noheader,nounits"],
                       capture_output=True, text=True, timeout=30)
    if r.returncode != 0:
        return None
    return [[f.strip() for f in line.split(",")] for line in r.stdout.splitlines() if line.strip()]


def no_gpu_reason():
    """None when this host has a GPU the tests can use, else why not (the skip reason)."""
    gpus = nvidia_smi("--query-gpu=index,name")
    if not gpus:
        return "no GPU on this host (nvidia-smi is missing or lists none)"
    try:
        import torch
    except ImportError:
        return "this Python has no torch to check the GPU's answers against"
    if not torch.cuda.is_available():
        return f"this Python's torch {torch.__version__} has no CUDA"
    return None


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def unpack(store, name, mar, yaml_over=None, files=None):
    """mar unpacked into store/name, its model-config.yaml updated with yaml_over (nested dicts
    merge), extra files written next to it."""
    import yaml
    d = os.path.join(store, name)
    with zipfile.ZipFile(os.path.join(STORE, mar)) as z:
        z.extractall(d)
    mpath = os.path.join(d, "MAR-INF", "MANIFEST.json")
    with open(mpath) as f:
        manifest = json.load(f)
    cfg = manifest["model"].get("configFile") or "model-config.yaml"
    manifest["model"]["configFile"] = cfg
    with open(mpath, "w") as f:
        json.dump(manifest, f)
    ypath = os.path.join(d, cfg)
    base = {}
    if os.path.exists(ypath):
        with open(ypath) as f:
            base = yaml.safe_load(f) or {}

    def merge(a, b):
        for k, v in b.items():
            if isinstance(v, dict) and isinstance(a.get(k), dict):
                merge(a[k], v)
            else:
                a[k] = v
        return a

    with open(ypath, "w") as f:
        yaml.safe_dump(merge(base, yaml_over or {}), f)
    for fname, text in (files or {}).items():
        with open(os.path.join(d, fname), "w") as f:
            f.write(text)
    return d


class Server:
    """torchserve-c serving the model directories of store (name=dir), in the foreground."""

    def __init__(self, store, models, config=None, env=None):
        self.tmp = tempfile.mkdtemp(prefix="tsc-gpu-")
        self.ports = {k: free_port() for k in ("inference", "management", "metrics", "g1", "g2")}
        cfg = {
            "inference_address": f"http://127.0.0.1:{self.ports['inference']}",
            "management_address": f"http://127.0.0.1:{self.ports['management']}",
            "metrics_address": f"http://127.0.0.1:{self.ports['metrics']}",
            "grpc_inference_port": self.ports["g1"],
            "grpc_management_port": self.ports["g2"],
            "disable_token_authorization": "true",
            "default_workers_per_model": 1,
        }
        cfg.update(config or {})
        path = os.path.join(self.tmp, "config.properties")
        with open(path, "w") as f:
            f.writelines(f"{k}={v}\n" for k, v in cfg.items())
        penv = dict(os.environ)
        penv["TMPDIR"] = self.tmp
        if FRONT_LD:
            penv["LD_LIBRARY_PATH"] = FRONT_LD
        penv.update(env or {})
        self.log_path = os.path.join(self.tmp, "server.log")
        self._log = open(self.log_path, "w")
        args = [os.path.join(BUILD, "bin", "torchserve-c"), "--start", "--foreground",
                "--model-store", store, "--ts-config", path, "--models",
                *[f"{m}={m}" for m in models]]
        self.proc = subprocess.Popen(args, cwd=self.tmp, stdout=subprocess.PIPE,
                                     stderr=self._log, env=penv)
        deadline = time.time() + 60
        while time.time() < deadline:
            line = self.proc.stdout.readline()
            if not line or b"Model server started." in line:
                break
        if self.proc.poll() is not None:
            raise AssertionError("server did not start:\n" + self.log())

    def log(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def url(self, path, api="inference"):
        return f"http://127.0.0.1:{self.ports[api]}{path}"

    def request(self, method, path, body=None, headers=None, api="inference", timeout=60):
        """(status, body bytes, headers) of one request; an HTTP error is an answer too."""
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
            headers = {"Content-Type": "application/json", **(headers or {})}
        req = urllib.request.Request(self.url(path, api), data=body, method=method,
                                     headers=headers or {})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, r.read(), r.headers
        except urllib.error.HTTPError as e:
            return e.code, e.read(), e.headers

    def post_json(self, path, body, **kw):
        status, data, _ = self.request("POST", path, body, **kw)
        return status, json.loads(data) if data else None

    def describe(self, model):
        status, data, _ = self.request("GET", f"/models/{model}", api="management")
        assert status == 200, data
        return json.loads(data)[0]

    def metrics(self):
        return self.request("GET", "/metrics", api="metrics")[1].decode()

    def wait_ready(self, models, timeout=180):
        """Until every model's workers are READY (a GPU worker's first load takes seconds)."""
        deadline = time.time() + timeout
        pending = list(models)
        while pending and time.time() < deadline:
            m = pending[0]
            ws = self.describe(m)["workers"]
            if ws and all(w["status"] == "READY" for w in ws):
                pending.pop(0)
            else:
                time.sleep(0.2)
        if pending:
            raise AssertionError(f"not ready: {pending}\n{self.log()[-4000:]}")

    def stream(self, path, body, headers=None, timeout=60):
        """The chunks of a chunked answer, as they were read (status, [bytes, ...])."""
        c = http.client.HTTPConnection("127.0.0.1", self.ports["inference"], timeout=timeout)
        c.request("POST", path, body=body, headers=headers or {})
        r = c.getresponse()
        chunks = []
        while True:
            b = r.read1(65536)
            if not b:
                break
            chunks.append(b)
        c.close()
        return r.status, chunks

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        if os.environ.get("TS_KEEP_LOGS"):
            shutil.copy(self.log_path, os.environ["TS_KEEP_LOGS"])
        shutil.rmtree(self.tmp, ignore_errors=True)
