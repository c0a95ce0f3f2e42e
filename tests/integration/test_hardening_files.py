"""What a local attacker or a hostile archive can plant, and what goes into the logs (issue 34,
points 9 to 12): pidfiles never written through a planted link, manifest paths inside the
model's directory, control characters escaped in every log, and model-config.yaml / snapshot
values held to the management API's bounds."""
import json
import os
import re
import socket
import subprocess
import sys
import time

import pytest
import requests

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from conftest import BIN, MODEL_STORE, free_port, start_server  # noqa: E402

SAMPLE = {"data": [0.25] * 64}


# ----------------------------------------------------------------------------------- pidfiles

def test_pidfile_never_written_through_a_planted_link(tmp_path):
    """The pidfile's temporary name was predictable (PIDFILE.<pid>.tmp in the shared TMPDIR)
    and opened with fopen: a link planted there made a root server overwrite the link's
    target. Now pidfiles live in TMPDIR/torchserve-c-<uid> (0700), the temporary file is
    mkstemp's, and a directory another user could write is refused by name."""
    shared = tmp_path / "tmp"
    shared.mkdir()
    shared.chmod(0o1777)
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    port = free_port()
    name = f".torchserve-c.127.0.0.1_{port}.pid"
    # every pid the server may get (pids are handed out in order) has its link waiting
    last = int(open("/proc/sys/kernel/ns_last_pid").read())
    for pid in range(last + 1, last + 3000):
        os.symlink(victim, shared / f"{name}.{pid}.tmp")
    os.symlink(victim, shared / name)
    run = tmp_path / "run"
    run.mkdir()
    s = start_server(str(run), config={"inference_address": f"http://127.0.0.1:{port}"},
                     env={"TMPDIR": str(shared)})
    try:
        assert victim.read_text() == "precious\n"
        d = shared / f"torchserve-c-{os.geteuid()}"
        st = os.lstat(d)
        assert (st.st_mode & 0o7777) == 0o700 and st.st_uid == os.geteuid()
        pidfile = d / f"127.0.0.1_{port}.pid"
        assert pidfile.read_text().split()[0] == str(s.pid)
        assert not [p for p in os.listdir(d) if p != pidfile.name], os.listdir(d)
    finally:
        s.stop()
    assert victim.read_text() == "precious\n"
    assert not pidfile.exists()


@pytest.mark.parametrize("plant", ["link", "other_owner", "group_writable"])
def test_pidfile_directory_someone_else_could_write_refused(tmp_path, plant):
    shared = tmp_path / "tmp"
    shared.mkdir()
    shared.chmod(0o1777)
    d = shared / f"torchserve-c-{os.geteuid()}"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    if plant == "link":
        os.symlink(elsewhere, d)
    else:
        d.mkdir(mode=0o700)
        if plant == "other_owner":
            os.chown(d, 65534, 65534)
        else:
            d.chmod(0o770)
    cfg = tmp_path / "config.properties"
    port = free_port()
    cfg.write_text(f"inference_address=http://127.0.0.1:{port}\n"
                   f"management_address=http://127.0.0.1:{free_port()}\n"
                   f"metrics_address=http://127.0.0.1:{free_port()}\n"
                   f"grpc_inference_port={free_port()}\ngrpc_management_port={free_port()}\n"
                   "disable_token_authorization=true\n")
    store = tmp_path / "store"
    store.mkdir()
    p = subprocess.run([os.path.join(BIN, "torchserve-c"), "--start", "--foreground",
                        "--model-store", str(store), "--ts-config", str(cfg)],
                       cwd=tmp_path, env=dict(os.environ, TMPDIR=str(shared)),
                       capture_output=True, text=True, timeout=30)
    assert p.returncode != 0 and "Model server started" not in p.stdout, p.stdout
    assert f"{d} is not a directory that only uid {os.geteuid()} can write" in p.stderr, p.stderr
    assert os.listdir(elsewhere) == []


# ---------------------------------------------------------------------------- manifest paths

def dir_model(store, name, manifest_model, files=None, links=None):
    """A model directory in the store: MANIFEST.json with these "model" fields, files (name ->
    bytes) and links (name -> target)."""
    d = os.path.join(store, name)
    os.makedirs(os.path.join(d, "MAR-INF"))
    m = {"modelName": name, "modelVersion": "1.0", "handler": "torchscript"}
    m.update(manifest_model)
    with open(os.path.join(d, "MAR-INF", "MANIFEST.json"), "w") as f:
        json.dump({"runtime": "python", "model": m}, f)
    for fname, data in (files or {}).items():
        os.makedirs(os.path.dirname(os.path.join(d, fname)), exist_ok=True)
        with open(os.path.join(d, fname), "wb") as f:
            f.write(data)
    for fname, target in (links or {}).items():
        os.makedirs(os.path.dirname(os.path.join(d, fname)), exist_ok=True)
        os.symlink(target, os.path.join(d, fname))
    return d


@pytest.fixture(scope="module")
def reg_srv(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("reg")
    store = tmp / "store"
    store.mkdir()
    secret = tmp / "secret.yaml"
    secret.write_text("minWorkers: 3\n")
    s = start_server(str(tmp), store=str(store), config={"enable_model_api": True,
                                                         "default_workers_per_model": 0})
    s.secret = str(secret)
    yield s
    s.stop()


@pytest.mark.parametrize("case,manifest,links,needle", [
    ("serialized_up", {"serializedFile": "../secret.pt"}, None, "serializedFile '../secret.pt'"),
    ("serialized_abs", {"serializedFile": "/etc/hostname"}, None, "absolute path"),
    ("config_up", {"configFile": "sub/../../../secret.yaml"}, None, "configFile"),
    ("model_file", {"modelFile": "/usr/lib/python3/dist-packages/x.py"}, None, "modelFile"),
    ("handler_up", {"handler": "../../handler.py:handle"}, None, "handler '../../handler.py'"),
    ("requirements", {"requirementsFile": "../../r.txt"}, None, "requirementsFile"),
    ("config_link", {"configFile": "model-config.yaml"}, {"model-config.yaml": "SECRET"},
     "resolves to"),
    ("extra_link", {}, {"extra/vocab.json": "/etc/hostname"}, "extra/vocab.json is a link"),
])
def test_manifest_paths_stay_inside_the_model(reg_srv, case, manifest, links, needle):
    """MANIFEST.json's serializedFile, configFile (read by the frontend itself), modelFile,
    handler and requirementsFile, and the links of a directory model, could name any file of
    the machine; each is now refused at registration with the field named."""
    links = {k: (reg_srv.secret if v == "SECRET" else v) for k, v in (links or {}).items()}
    dir_model(reg_srv.store, case, manifest, links=links)
    r = requests.post(reg_srv.url("/models", "management"), params={"url": case}, timeout=60)
    assert r.status_code == 400, r.text
    assert r.json()["type"] == "InvalidModelException" and needle in r.json()["message"], r.text
    assert requests.get(reg_srv.url(f"/models/{case}", "management"), timeout=10).status_code == 404


def test_manifest_paths_inside_are_served(reg_srv):
    """A link that stays inside the model, and names in subdirectories, are fine."""
    import torch
    d = dir_model(reg_srv.store, "inside", {"serializedFile": "weights/m.pt",
                                            "configFile": "model-config.yaml"},
                  files={"model-config.yaml": b"minWorkers: 1\nmaxWorkers: 1\n"},
                  links={"current.pt": "weights/m.pt"})
    os.makedirs(os.path.join(d, "weights"), exist_ok=True)
    torch.jit.script(torch.nn.Linear(3, 2)).save(os.path.join(d, "weights", "m.pt"))
    r = requests.post(reg_srv.url("/models", "management"),
                      params={"url": "inside", "synchronous": "true"}, timeout=60)
    assert r.status_code == 200, r.text
    r = requests.post(reg_srv.url("/predictions/inside"), json={"data": [[1, 2, 3]]}, timeout=30)
    assert r.status_code == 200, r.text


# -------------------------------------------------------------------------------------- logs

PRINTER = """
import os

def handle(data, context):
    if data is None:
        return None
    # what a handler (or its input) may print: a fake line, a terminal escape, a bell
    os.write(1, b"before\\r2026-01-01 INFO [x] forged line\\x1b[2J\\x07\\x00 after\\xc2\\x9bC1\\n")
    os.write(2, b"err\\x1b]0;title\\x07 end\\n")
    return ["ok" for _ in data]
"""

CTRL = re.compile(rb"[\x00-\x08\x0b-\x1f\x7f]|\xc2[\x80-\x9f]")


def wait_for(path, needle, timeout=10):
    deadline = time.time() + timeout
    data = b""
    while time.time() < deadline:
        try:
            data = open(path, "rb").read()
        except FileNotFoundError:
            data = b""
        if needle in data:
            return data
        time.sleep(0.1)
    raise AssertionError(f"{path}: {needle!r} not in {data[-2000:]!r}")


def test_logs_not_injectable(tmp_path):
    """CR, LF, ESC, BEL, NUL and C1 controls from a request id, a request target and a
    handler's output reached the logs raw: a handler could forge a line of the server's log or
    send escapes to the terminal of whoever reads it. Now they are escaped (\\r, \\x1b, ...),
    and the workers' lines are tagged with their worker in the server's log too."""
    store = str(tmp_path / "store")
    d = os.path.join(store, "printer")
    os.makedirs(os.path.join(d, "MAR-INF"))
    with open(os.path.join(d, "handler.py"), "w") as f:
        f.write(PRINTER)
    with open(os.path.join(d, "model-config.yaml"), "w") as f:
        f.write("minWorkers: 1\nmaxWorkers: 1\n")
    with open(os.path.join(d, "MAR-INF", "MANIFEST.json"), "w") as f:
        json.dump({"runtime": "python", "model": {"modelName": "printer", "handler": "handler.py",
                                                  "modelVersion": "1.0",
                                                  "configFile": "model-config.yaml"}}, f)
    s = start_server(str(tmp_path), store=store, models=["printer"])
    try:
        s.wait_healthy()
        # a control character in a header is refused (400) now; a C1 control, in UTF-8, is not
        rid = "evil\xc2\x9b31mid"
        r = requests.post(s.url("/predictions/printer"), data=b"x",
                          headers={"x-request-id": rid}, timeout=30)
        assert r.status_code == 200 and r.text == "ok", (r.text, s.log()[-3000:])
        # a refused target with an ESC and a BEL in it (400) is still logged
        with socket.create_connection(("127.0.0.1", s.ports["inference"]), timeout=10) as c:
            c.sendall(b"GET /ping\x1b[2J\x07 HTTP/1.1\r\nHost: x\r\n\r\n")
            assert c.recv(64).startswith(b"HTTP/1.1 400")
        logs = os.path.join(s.tmp, "logs")
        access = wait_for(os.path.join(logs, "access_log.log"), b"ping\\x1b[2J\\x07")
        assert b"evil\\xc2\\x9b31mid" in access
        model = wait_for(os.path.join(logs, "model_log.log"), b"forged line")
        server = wait_for(s.log_path, b"forged line")
        for text in (access, model, server):
            assert not CTRL.search(text), CTRL.search(text)
        forged = [ln for ln in model.splitlines() + server.splitlines() if b"forged" in ln]
        assert forged and all(ln.startswith(b"W-") and
                              b"before\\r2026-01-01 INFO [x] forged line\\x1b[2J\\x07\\x00 after"
                              b"\\xc2\\x9bC1" in ln for ln in forged), forged
        errs = [ln for ln in server.splitlines() if b"err\\x1b]0;title\\x07 end" in ln]
        assert errs and all(ln.startswith(b"W-") for ln in errs), errs
    finally:
        s.stop()


# ------------------------------------------------------------------- model-config.yaml bounds

@pytest.mark.parametrize("key,value,bound", [("minWorkers", 66, 64),
                                             ("batchSize", 1000000000, 1024),
                                             ("maxBatchDelay", 1000000000, 600000),
                                             ("responseTimeout", 1000000000, 604800)])
def test_model_config_values_held_to_the_api_bounds(reg_srv, key, value, bound):
    """model-config.yaml goes through the same bounds as register and scale: refused (400,
    InvalidModelException) with file, line and key named."""
    import torch
    name = f"mc_{key}"
    d = dir_model(reg_srv.store, name, {"serializedFile": "m.pt",
                                        "configFile": "model-config.yaml"},
                  files={"model-config.yaml": f"maxWorkers: 1\n{key}: {value}\n".encode()})
    torch.jit.script(torch.nn.Linear(3, 2)).save(os.path.join(d, "m.pt"))
    r = requests.post(reg_srv.url("/models", "management"), params={"url": name}, timeout=60)
    assert r.status_code == 400, r.text
    msg = r.json()["message"]
    assert "model-config.yaml:2" in msg and key in msg and f"at most {bound}" in msg, msg
