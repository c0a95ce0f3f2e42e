"""Archives as torch-model-archiver makes them (issue 11, point 3), against the real binaries.

- our archiver takes --model-file, --handler FILE.py[:function], --requirements-file, --runtime,
  --extra-files with files and directories; it writes the manifest keys torch-model-archiver
  writes, copies every named file, and refuses a missing one by name with a non-zero exit;
- the server loads a .tar.gz laid out as `torch-model-archiver --archive-format tgz` writes it
  (every entry under NAME/, no directory entries, the manifest last) and a zip without directory
  entries, as Python's zipfile writes it; their predictions equal torch's;
- an archive that carries requirements.txt loads, with one warning that it was not installed.
"""
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from conftest import BIN, MODEL_STORE  # noqa: E402

ARCHIVER = os.path.join(BIN, "torchserve-c-archiver")
TOL = 1e-5


def archiver(*args, cwd):
    return subprocess.run([ARCHIVER, *args], cwd=cwd, capture_output=True, text=True, timeout=60)


@pytest.fixture
def work():
    d = tempfile.mkdtemp(prefix="tsc-arch-")
    with open(os.path.join(d, "handler.py"), "w") as f:
        f.write("def handle(data, context):\n    return [1] * len(data)\n")
    with open(os.path.join(d, "model.py"), "w") as f:
        f.write("import torch\n\nclass M(torch.nn.Module):\n    pass\n")
    with open(os.path.join(d, "requirements.txt"), "w") as f:
        f.write("numpy\n")
    with open(os.path.join(d, "index_to_name.json"), "w") as f:
        json.dump({"0": "zero", "1": "one"}, f)
    os.makedirs(os.path.join(d, "assets", "deep"))
    with open(os.path.join(d, "assets", "vocab.txt"), "w") as f:
        f.write("a\nb\n")
    with open(os.path.join(d, "assets", "deep", "x.bin"), "wb") as f:
        f.write(b"\x00\x01")
    yield d
    shutil.rmtree(d, ignore_errors=True)


def mar_members(path):
    with zipfile.ZipFile(path) as z:
        names = sorted(n for n in z.namelist() if not n.endswith("/"))
        manifest = json.loads(z.read("MAR-INF/MANIFEST.json"))
        return names, manifest, z


def test_archiver_python_flags(work):
    r = archiver("--model-name", "pyx", "--handler", "handler.py:handle", "--model-file",
                 "model.py", "--requirements-file", "requirements.txt", "--extra-files",
                 "index_to_name.json,assets", cwd=work)
    assert r.returncode == 0, r.stderr
    names, manifest, _ = mar_members(os.path.join(work, "pyx.mar"))
    # a directory's contents land in the archive root, recursively, as torch-model-archiver does
    assert names == ["MAR-INF/MANIFEST.json", "deep/x.bin", "handler.py", "index_to_name.json",
                     "model.py", "requirements.txt", "vocab.txt"], names
    assert manifest["runtime"] == "python"
    assert manifest["model"] == {"modelName": "pyx", "handler": "handler.py:handle",
                                 "modelFile": "model.py", "modelVersion": "1.0",
                                 "requirementsFile": "requirements.txt"}, manifest
    with zipfile.ZipFile(os.path.join(work, "pyx.mar")) as z:
        assert z.read("deep/x.bin") == b"\x00\x01"
        assert z.read("handler.py").startswith(b"def handle(")


def test_archiver_handler_module_without_py_suffix(work):
    """torch-model-archiver --handler handler:handle copies handler.py and records the name as
    given."""
    r = archiver("--model-name", "mod", "--handler", "handler:handle", cwd=work)
    assert r.returncode == 0, r.stderr
    names, manifest, _ = mar_members(os.path.join(work, "mod.mar"))
    assert "handler.py" in names
    assert manifest["runtime"] == "python" and manifest["model"]["handler"] == "handler:handle"


@pytest.mark.parametrize("flag,value", [
    ("--handler", "missing_handler.py"),
    ("--handler", "sub/missing_handler.py:fn"),
    ("--model-file", "missing_model.py"),
    ("--requirements-file", "missing_requirements.txt"),
    ("--serialized-file", "missing_weights.pt"),
    ("--extra-files", "index_to_name.json,missing_extra.json"),
    ("--config-file", "missing-config.yaml"),
])
def test_archiver_refuses_a_missing_file(work, flag, value):
    args = ["--model-name", "miss", "--handler", "handler.py", flag, value]
    r = archiver(*args, cwd=work)
    assert r.returncode != 0
    missing = value.split(",")[-1].split(":")[0]
    assert missing in r.stderr, r.stderr
    assert not os.path.exists(os.path.join(work, "miss.mar"))


@pytest.mark.parametrize("handler,runtime,want", [
    ("handler.py", None, "python"),
    ("handler.py", "python3", "python"),
    ("image_classifier", None, "python"),
    ("torchscript", None, "c"),
    ("handler.py", "c", "c"),
])
def test_archiver_runtime(work, handler, runtime, want):
    args = ["--model-name", "rt", "--handler", handler, "--archive-format", "no-archive"]
    if runtime:
        args += ["--runtime", runtime]
    r = archiver(*args, cwd=work)
    assert r.returncode == 0, r.stderr
    with open(os.path.join(work, "rt", "MAR-INF", "MANIFEST.json")) as f:
        assert json.load(f)["runtime"] == want


def test_archiver_refuses_unknown_runtime_and_empty_function(work):
    r = archiver("--model-name", "rt", "--handler", "handler.py", "--runtime", "java", cwd=work)
    assert r.returncode != 0 and "unsupported --runtime 'java'" in r.stderr, r.stderr
    r = archiver("--model-name", "rt", "--handler", "handler.py:", cwd=work)
    assert r.returncode != 0 and "no function name" in r.stderr, r.stderr


# ------------------------------------------------------------------- loading TorchServe layouts

def mlp_files():
    """model.pt and a manifest for the C torchscript handler, from model-store/mlp.mar."""
    with zipfile.ZipFile(os.path.join(MODEL_STORE, "mlp.mar")) as z:
        pt = z.read("model.pt")
    manifest = {"runtime": "c", "model": {"modelName": "mlp", "serializedFile": "model.pt",
                                          "handler": "torchscript", "modelVersion": "1.0"},
                "archiverVersion": "0.12.0"}
    return pt, manifest


def write_tgz_like_torch_model_archiver(path, name, files, manifest):
    """Files only (os.walk + tar.add of each file), each under NAME/, then the manifest through
    a bare TarInfo: the layout of `torch-model-archiver --archive-format tgz`."""
    with tarfile.open(path, "w:gz") as t:
        for rel, data in files.items():
            info = tarfile.TarInfo(os.path.join(name, rel))
            info.size = len(data)
            info.mode = 0o644
            t.addfile(info, io.BytesIO(data))
        text = json.dumps(manifest, indent=2).encode()
        info = tarfile.TarInfo(os.path.join(name, "MAR-INF", "MANIFEST.json"))
        info.size = len(text)
        t.addfile(info, io.BytesIO(text))


def write_zip_without_dir_entries(path, files, manifest):
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for rel, data in files.items():
            z.writestr(rel, data)
        z.writestr("MAR-INF/MANIFEST.json", json.dumps(manifest, indent=2))


def mlp_reference(pt):
    import torch
    d = tempfile.mkdtemp(prefix="tsc-ref-")
    try:
        p = os.path.join(d, "model.pt")
        with open(p, "wb") as f:
            f.write(pt)
        return torch.jit.load(p).eval()
    finally:
        shutil.rmtree(d, ignore_errors=True)


def register_and_check(s, archive_name, model_name, ref):
    import torch
    r = s.post(f"/models?url={archive_name}&model_name={model_name}&initial_workers=1"
               "&synchronous=true", api="management", timeout=120)
    assert r.status_code == 200, r.text
    x = torch.linspace(-2, 2, 64)
    r = s.post(f"/predictions/{model_name}", json={"data": x.tolist()})
    assert r.status_code == 200, r.text
    with torch.no_grad():
        want = ref(x.unsqueeze(0))[0].tolist()
    got = r.json()
    assert len(got) == len(want)
    assert max(abs(a - b) for a, b in zip(got, want)) <= TOL, (got, want)


def test_server_loads_torchserve_tgz_and_zip_layouts(server_factory):
    pt, manifest = mlp_files()
    ref = mlp_reference(pt)
    s = server_factory(config={"enable_model_api": True})
    files = {"model.pt": pt, "extra/notes.txt": b"kept\n"}
    write_tgz_like_torch_model_archiver(os.path.join(s.store, "mlp_tgz.tar.gz"), "mlp_tgz",
                                        files, manifest)
    with tarfile.open(os.path.join(s.store, "mlp_tgz.tar.gz")) as t:
        assert all(n.startswith("mlp_tgz/") for n in t.getnames())
        assert not any(m.isdir() for m in t.getmembers())
    write_zip_without_dir_entries(os.path.join(s.store, "mlp_zip.mar"), files, manifest)
    register_and_check(s, "mlp_tgz.tar.gz", "mlp_tgz", ref)
    register_and_check(s, "mlp_zip.mar", "mlp_zip", ref)
    r = s.get("/models/mlp_tgz", api="management")
    assert r.status_code == 200 and r.json()[0]["modelVersion"] == "1.0", r.text


def test_requirements_file_is_not_installed_and_says_so(server_factory):
    pt, manifest = mlp_files()
    ref = mlp_reference(pt)
    manifest["model"]["requirementsFile"] = "requirements.txt"
    s = server_factory(config={"enable_model_api": True})
    write_zip_without_dir_entries(os.path.join(s.store, "mlp_req.mar"),
                                  {"model.pt": pt, "requirements.txt": b"numpy==1.0\n"}, manifest)
    register_and_check(s, "mlp_req.mar", "mlp_req", ref)
    warnings = [ln for ln in s.log().splitlines() if "requirements.txt" in ln]
    assert len(warnings) == 1, warnings
    assert "WARN" in warnings[0] and "not installed" in warnings[0], warnings
    # a model without one says nothing of the kind
    write_zip_without_dir_entries(os.path.join(s.store, "mlp_plain.mar"), {"model.pt": pt},
                                  mlp_files()[1])
    register_and_check(s, "mlp_plain.mar", "mlp_plain", ref)
    assert len([ln for ln in s.log().splitlines() if "not installed" in ln]) == 1
