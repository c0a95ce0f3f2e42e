"""Shared fixtures for the integration tests: start the real torchserve-c binaries on ephemeral
ports from a config written into a temp dir, and stop only the processes we started, by pid.

    def test_x(server_factory):
        srv = server_factory(models=["mlp"], config={"job_queue_size": 10},
                             yaml={"mlp": {"batchSize": 8}})
        srv.post("/predictions/mlp", json={"data": [...]})

`yaml` overrides keys of a model's model-config.yaml: the fixture unpacks the model's archive
from model-store/ into a private model store, edits the yaml, and serves the directory.
"""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import zipfile

import pytest
import requests

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.path.join(ROOT, os.environ.get("TS_BUILD", "build"))
BIN = os.path.join(BUILD, "bin")
MODEL_STORE = os.path.join(ROOT, "model-store")
PYSTUBS = os.path.join(BUILD, "py")


def cpu_seconds(pid):
    """User + system CPU time of every thread of pid so far (/proc/PID/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def oip_text(text):
    """An OIP REST infer body whose one BYTES input, "prompt", holds text."""
    return {"inputs": [{"name": "prompt", "shape": [1], "datatype": "BYTES", "data": [text],
                        "parameters": {"content_type": "str"}}]}


def mar_module(name="mlp"):
    """The TorchScript module inside model-store/NAME.mar (its manifest's serializedFile),
    loaded by torch in this process, on one thread: what the answers are checked against."""
    import io
    import torch
    torch.set_num_threads(1)
    with zipfile.ZipFile(os.path.join(MODEL_STORE, f"{name}.mar")) as z:
        manifest = json.loads(z.read("MAR-INF/MANIFEST.json"))
        return torch.jit.load(io.BytesIO(z.read(manifest["model"]["serializedFile"]))).eval()


def torchscript_store(tmp_path, name, module, yaml="minWorkers: 1\nmaxWorkers: 1\n"):
    """A model store in tmp_path/store holding one unpacked model, NAME: the scripted module
    saved as model.pt for the built-in torchscript handler, with that model-config.yaml."""
    store = tmp_path / "store"
    d = store / name
    (d / "MAR-INF").mkdir(parents=True)
    module.save(str(d / "model.pt"))
    (d / "MAR-INF" / "MANIFEST.json").write_text(json.dumps({"runtime": "python", "model": {
        "modelName": name, "serializedFile": "model.pt", "handler": "torchscript",
        "modelVersion": "1.0", "configFile": "model-config.yaml"}}))
    (d / "model-config.yaml").write_text(yaml)
    return str(store)


def python_model(store, name, handler_src, yaml="minWorkers: 1\nmaxWorkers: 1\n", files=None,
                 handler="handler.py", requirements=None):
    """A model directory store/NAME as the archiver unpacks one with a Python handler: handler.py
    holding handler_src, model-config.yaml, the given files (name -> text or bytes), and
    MANIFEST.json naming handler (and requirements.txt, when given). Returns its path."""
    d = os.path.join(store, name)
    os.makedirs(os.path.join(d, "MAR-INF"))
    with open(os.path.join(d, "handler.py"), "w") as f:
        f.write(handler_src)
    with open(os.path.join(d, "model-config.yaml"), "w") as f:
        f.write(yaml)
    for fname, data in (files or {}).items():
        with open(os.path.join(d, fname), "wb" if isinstance(data, bytes) else "w") as f:
            f.write(data)
    model = {"modelName": name, "handler": handler, "modelVersion": "1.0",
             "configFile": "model-config.yaml"}
    if requirements is not None:
        with open(os.path.join(d, "requirements.txt"), "w") as f:
            f.write(requirements)
        model["requirementsFile"] = "requirements.txt"
    with open(os.path.join(d, "MAR-INF", "MANIFEST.json"), "w") as f:
        json.dump({"runtime": "python", "model": model}, f)
    return d


def pytest_configure(config):
    config.addinivalue_line("markers", "smoke: quick end-to-end checks (also run under sanitizers)")


_handed_out = set()


def free_port():
    """A free port on 127.0.0.1, never the same twice in a session: the kernel may hand a just
    closed port out again, and a server given the same port for two listeners fails to start."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _handed_out:
            _handed_out.add(port)
            return port


def _yaml_dump(d, indent=0):
    out = []
    for k, v in d.items():
        if isinstance(v, dict):
            out.append(" " * indent + f"{k}:")
            out.append(_yaml_dump(v, indent + 2))
        elif isinstance(v, bool):
            out.append(" " * indent + f"{k}: {'true' if v else 'false'}")
        elif isinstance(v, list):
            out.append(" " * indent + f"{k}: [{', '.join(str(x) for x in v)}]")
        else:
            out.append(" " * indent + f"{k}: {v}")
    return "\n".join(out)


def _load_yaml_simple(path):
    """Reads the flat/nested key: value yaml our example models use (no PyYAML on Debian's
    minimal set is assumed)."""
    root, stack = {}, [(-1, None)]
    stack = [(-1, root)]
    with open(path) as f:
        for raw in f:
            line = raw.split("#", 1)[0].rstrip()
            if not line.strip():
                continue
            ind = len(line) - len(line.lstrip())
            key, _, val = line.strip().partition(":")
            val = val.strip()
            while stack and stack[-1][0] >= ind:
                stack.pop()
            parent = stack[-1][1]
            if val == "":
                parent[key] = {}
                stack.append((ind, parent[key]))
            else:
                parent[key] = val
    return root


def _merge(a, b):
    for k, v in b.items():
        if isinstance(v, dict) and isinstance(a.get(k), dict):
            _merge(a[k], v)
        else:
            a[k] = v
    return a


class Server:
    def __init__(self, tmp, proc, ports, store):
        self.tmp = tmp
        self.proc = proc
        self.ports = ports
        self.store = store
        self.log_path = os.path.join(tmp, "server.log")

    @property
    def pid(self):
        return self.proc.pid

    def url(self, path="", api="inference"):
        return f"http://127.0.0.1:{self.ports[api]}{path}"

    def get(self, path, api="inference", **kw):
        kw.setdefault("timeout", 30)
        return requests.get(self.url(path, api), **kw)

    def post(self, path, api="inference", **kw):
        kw.setdefault("timeout", 30)
        return requests.post(self.url(path, api), **kw)

    def put(self, path, api="management", **kw):
        kw.setdefault("timeout", 30)
        return requests.put(self.url(path, api), **kw)

    def delete(self, path, api="management", **kw):
        kw.setdefault("timeout", 30)
        return requests.delete(self.url(path, api), **kw)

    def log(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def wait_log(self, pattern, timeout=60):
        """The first match of the regular expression pattern in the server's log, once there is
        one; an AssertionError with the log's end after timeout seconds."""
        deadline = time.time() + timeout
        while True:
            m = re.search(pattern, self.log())
            if m or time.time() > deadline:
                break
            time.sleep(0.1)
        assert m, f"no {pattern!r} in the log:\n{self.log()[-3000:]}"
        return m

    def worker_pids(self):
        """Live worker processes whose parent is this server."""
        pids = []
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            try:
                with open(f"/proc/{d}/stat") as f:
                    st = f.read()
                with open(f"/proc/{d}/cmdline", "rb") as f:
                    cmd = f.read()
            except OSError:
                continue
            ppid = int(st.rsplit(")", 1)[1].split()[1])
            state = st.rsplit(")", 1)[1].split()[0]
            if ppid == self.pid and b"torchserve-c-worker" in cmd and state != "Z":
                pids.append(int(d))
        return sorted(pids)

    def wait_ready(self, model, timeout=60, body=None, path=None):
        """Polls until a prediction on model succeeds (workers load in the background); without
        a body, until /ping is 200 (every model has loaded its minWorkers)."""
        deadline = time.time() + timeout
        last = None
        while time.time() < deadline:
            try:
                # a prediction tells that this model is served, whatever the other models do
                r = requests.get(self.url("/ping"), timeout=5) if body is None else None
                if body is not None:
                    r = requests.post(self.url(path or f"/predictions/{model}"), timeout=30, **body)
                    if r.status_code == 200:
                        return r
                    last = r
                elif r.status_code == 200:
                    return r
            except requests.RequestException as e:
                last = e
            time.sleep(0.1)
        raise AssertionError(f"model {model} not ready: {last}\n{self.log()[-3000:]}")

    def wait_healthy(self, headers=None, timeout=60):
        """Polls GET /ping until 200: every model has loaded its minWorkers (workers load in
        the background; before that /ping answers 500 "Unhealthy")."""
        deadline = time.time() + timeout
        r = None
        while time.time() < deadline:
            r = requests.get(self.url("/ping"), headers=headers, timeout=5)
            if r.status_code == 200:
                return r
            time.sleep(0.1)
        raise AssertionError(f"not healthy: {r.status_code if r else None}\n{self.log()[-3000:]}")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def prepare_store(tmp, models, yaml_overrides):
    """A private model store with the named models, unpacked when their yaml is overridden."""
    store = os.path.join(tmp, "store")
    os.makedirs(store)
    for m in models:
        mar = os.path.join(MODEL_STORE, f"{m}.mar")
        if not os.path.exists(mar):
            raise AssertionError(f"{mar} missing: run `make models`")
        if m in yaml_overrides:
            d = os.path.join(store, m)
            with zipfile.ZipFile(mar) as z:
                z.extractall(d)
            manifest = json.load(open(os.path.join(d, "MAR-INF", "MANIFEST.json")))
            cfg = manifest["model"].get("configFile") or "model-config.yaml"
            manifest["model"]["configFile"] = cfg
            json.dump(manifest, open(os.path.join(d, "MAR-INF", "MANIFEST.json"), "w"))
            ypath = os.path.join(d, cfg)
            base = _load_yaml_simple(ypath) if os.path.exists(ypath) else {}
            with open(ypath, "w") as f:
                f.write(_yaml_dump(_merge(base, yaml_overrides[m])) + "\n")
        else:
            shutil.copy(mar, store)
    return store


def start_server(tmp, models=(), config=None, yaml=None, extra_args=(), store=None,
                 load=True, env=None, wait_started=True):
    """wait_started=False: return once the inference port accepts connections, before the
    start-up models have loaded (`Model server started.` comes after them), for a test that
    looks at the server while it loads."""
    yaml = yaml or {}
    ports = {k: free_port() for k in ("inference", "management", "metrics", "grpc", "grpc_mgmt")}
    cfg = {
        "inference_address": f"http://127.0.0.1:{ports['inference']}",
        "management_address": f"http://127.0.0.1:{ports['management']}",
        "metrics_address": f"http://127.0.0.1:{ports['metrics']}",
        "grpc_inference_port": ports["grpc"],
        "grpc_management_port": ports["grpc_mgmt"],
        "disable_token_authorization": "true",
        "default_workers_per_model": 1,
    }
    cfg.update(config or {})
    cfg_path = os.path.join(tmp, "config.properties")
    with open(cfg_path, "w") as f:
        for k, v in cfg.items():
            if isinstance(v, bool):
                v = "true" if v else "false"
            f.write(f"{k}={v}\n")
    if store is None:
        store = prepare_store(tmp, models, yaml)
    args = [os.path.join(BIN, "torchserve-c"), "--start", "--foreground", "--model-store", store,
            "--ts-config", cfg_path]
    if load and models:
        # a bare name is not an archive file: name the model's .mar (or its unpacked directory)
        args += ["--models", *[m if os.path.isdir(os.path.join(store, m)) else f"{m}={m}.mar"
                               for m in models]]
    args += list(extra_args)
    penv = dict(os.environ)
    penv["TMPDIR"] = tmp
    penv.update(env or {})
    log = open(os.path.join(tmp, "server.log"), "w")
    proc = subprocess.Popen(args, cwd=tmp, stdout=subprocess.PIPE, stderr=log, env=penv)
    if not wait_started:
        deadline = time.time() + 30
        while time.time() < deadline and proc.poll() is None:
            try:
                socket.create_connection(("127.0.0.1", ports["inference"]), timeout=1).close()
                return Server(tmp, proc, ports, store)
            except OSError:
                time.sleep(0.05)
        proc.kill()
        proc.wait()
        log.close()
        raise AssertionError("server did not listen:\n" +
                             open(os.path.join(tmp, "server.log")).read())
    deadline = time.time() + 30
    line = b""
    while time.time() < deadline:
        line = proc.stdout.readline()
        if not line or b"Model server started." in line:
            break
    if b"Model server started." not in line:
        proc.kill()
        proc.wait()
        log.close()
        raise AssertionError("server did not start:\n" + open(os.path.join(tmp, "server.log")).read())
    return Server(tmp, proc, ports, store)


@pytest.fixture
def server_factory():
    started = []
    tmps = []

    def make(**kw):
        tmp = tempfile.mkdtemp(prefix="tsc-test-")
        tmps.append(tmp)
        s = start_server(tmp, **kw)
        started.append(s)
        return s

    yield make
    for s in started:
        s.stop()
    for t in tmps:
        shutil.rmtree(t, ignore_errors=True)


@pytest.fixture
def tmp():
    """A private directory (a server's run directory, its model store), removed afterwards."""
    d = tempfile.mkdtemp(prefix="tsc-tmp-")
    yield d
    shutil.rmtree(d, ignore_errors=True)
