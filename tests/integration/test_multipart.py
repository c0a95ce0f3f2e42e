"""multipart/form-data request bodies, as TorchServe decodes them (issue 34, point 6): each form
field is a request parameter named by the field, so TorchServe's documented
`curl http://127.0.0.1:8080/predictions/resnet18 -F data=@kitten.jpg` reaches the handler as
the parameter "data" holding the image's bytes. A file field carries its content type (a JSON
file arrives parsed, an image as bytes), a plain field arrives as bytes. Malformed bodies get
400 with the part and the problem named."""
import json
import os
import subprocess
import sys
import tempfile

import pytest
import requests

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from conftest import start_server  # noqa: E402

SAMPLE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "scripts", "models", "mlp", "sample.json")

ECHO = """
import hashlib

def handle(data, context):
    if data is None:
        return None
    out = []
    for row in data:
        d = {}
        for k, v in row.items():
            if isinstance(v, (bytes, bytearray)):
                d[k] = ["bytes", len(v), hashlib.sha256(v).hexdigest()]
            else:
                d[k] = [type(v).__name__, v]
        out.append(d)
    return out
"""


@pytest.fixture(scope="module")
def srv():
    tmp = tempfile.mkdtemp(prefix="tsc-multipart-")
    store = os.path.join(tmp, "store")
    d = os.path.join(store, "echo")
    os.makedirs(os.path.join(d, "MAR-INF"))
    with open(os.path.join(d, "handler.py"), "w") as f:
        f.write(ECHO)
    with open(os.path.join(d, "model-config.yaml"), "w") as f:
        f.write("minWorkers: 1\nmaxWorkers: 1\n")
    with open(os.path.join(d, "MAR-INF", "MANIFEST.json"), "w") as f:
        json.dump({"runtime": "python", "model": {"modelName": "echo", "handler": "handler.py",
                                                  "modelVersion": "1.0",
                                                  "configFile": "model-config.yaml"}}, f)
    import shutil
    shutil.copy(os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))), "model-store", "mlp.mar"), store)
    s = start_server(tmp, store=store, models=["echo", "mlp"])
    try:
        s.wait_healthy()
        yield s
    finally:
        s.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def sha(b):
    import hashlib
    return hashlib.sha256(b).hexdigest()


@pytest.mark.smoke
def test_form_fields_are_named_parameters(srv):
    """Before, the whole multipart body was one parameter "body" of type multipart/form-data:
    the handler got the raw boundary-delimited bytes."""
    jpeg = bytes(range(256)) * 40 + b"\r\n--not-the-boundary\r\n"
    r = requests.post(srv.url("/predictions/echo"), timeout=30,
                      files={"data": ("kitten.jpg", jpeg, "image/jpeg"),
                             "meta": ("meta.json", b'{"k": [1, 2]}', "application/json"),
                             "note": (None, "plain text field")})
    assert r.status_code == 200, r.text
    got = r.json()
    assert got["data"] == ["bytes", len(jpeg), sha(jpeg)]
    assert got["meta"] == ["dict", {"k": [1, 2]}]
    assert got["note"] == ["bytes", 16, sha(b"plain text field")]
    assert "body" not in got


def test_curl_form_upload(srv, tmp_path):
    """TorchServe's documented command, with curl itself: -F data=@file."""
    img = tmp_path / "kitten.jpg"
    img.write_bytes(b"\xff\xd8\xff\xe0" + os.urandom(50000) + b"\xff\xd9")
    out = subprocess.run(["curl", "-sS", "-f", srv.url("/predictions/echo"),
                          "-F", f"data=@{img}", "-F", "threshold=0.5"],
                         capture_output=True, timeout=60)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    data = img.read_bytes()
    assert got["data"] == ["bytes", len(data), sha(data)]
    assert got["threshold"] == ["bytes", 3, sha(b"0.5")]


def test_torchscript_handler_reads_the_data_field(srv):
    """The built-in torchscript handler reads "body", else "data": a JSON file sent as the
    data field answers what the same JSON body answers."""
    sample = open(SAMPLE, "rb").read()
    want = requests.post(srv.url("/predictions/mlp"), data=sample, timeout=30,
                         headers={"Content-Type": "application/json"})
    assert want.status_code == 200
    r = requests.post(srv.url("/predictions/mlp"), timeout=30,
                      files={"data": ("sample.json", sample, "application/json")})
    assert r.status_code == 200, r.text
    assert r.json() == want.json()


def raw_form(srv, ctype, body):
    return requests.post(srv.url("/predictions/echo"), data=body, timeout=30,
                         headers={"Content-Type": ctype})


@pytest.mark.parametrize("ctype,body,needle", [
    ("multipart/form-data", b"--x\r\n\r\nhi\r\n--x--\r\n", "no boundary"),
    ("multipart/form-data; boundary=" + "b" * 71, b"", "longer than 70"),
    ("multipart/form-data; boundary=x", b"no delimiter at all", "no boundary line"),
    ("multipart/form-data; boundary=x",
     b"--x\r\nContent-Type: text/plain\r\n\r\nhi\r\n--x--\r\n", "part 1: no Content-Disposition"),
    ("multipart/form-data; boundary=x",
     b"--x\r\nContent-Disposition: form-data; filename=\"a\"\r\n\r\nhi\r\n--x--\r\n",
     "part 1: Content-Disposition has no name"),
    ("multipart/form-data; boundary=x",
     b"--x\r\nContent-Disposition: attachment; name=\"a\"\r\n\r\nhi\r\n--x--\r\n",
     "must be form-data"),
    ("multipart/form-data; boundary=x",
     b"--x\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\nhi\r\n", "closing boundary"),
    ("multipart/form-data; boundary=x",
     b"--x\r\nContent-Disposition: form-data; name=\"a\"\r\nhi", "head does not end"),
    ("multipart/form-data; boundary=x",
     b"".join(b"--x\r\nContent-Disposition: form-data; name=\"f%d\"\r\n\r\nv\r\n" % i
              for i in range(65)) + b"--x--\r\n", "more than 64 parts"),
    ("multipart/form-data; boundary=x",
     b"--x\r\nContent-Disposition: form-data; name=\"" + b"n" * 300 + b"\"\r\n\r\nv\r\n--x--\r\n",
     "longer than 256 bytes"),
    ("multipart/form-data; boundary=x",
     b"--x\r\nContent-Disposition: form-data; name=\"a\"\r\nX-Pad: " + b"p" * 9000
     + b"\r\n\r\nv\r\n--x--\r\n", "head is longer than 8192 bytes"),
])
def test_malformed_form_400(srv, ctype, body, needle):
    r = raw_form(srv, ctype, body)
    assert r.status_code == 400, r.text
    doc = r.json()
    assert doc["type"] == "BadRequestException" and "multipart/form-data" in doc["message"]
    assert needle in doc["message"], doc["message"]
    assert requests.post(srv.url("/predictions/echo"), timeout=30,
                         files={"a": (None, "b")}).status_code == 200


def test_form_edges(srv):
    """A preamble and an epilogue are ignored, a quoted boundary and a bare LF are read, an
    empty part is an empty parameter, the same name twice keeps the last (a dict)."""
    body = (b"preamble\r\n--\"q b\"\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\n"
            b"\r\n--\"q b\"\nContent-Disposition: form-data; name=\"b\"\n\nsecond\n"
            b"--\"q b\"\r\nContent-Disposition: form-data; name=\"b\"\r\n\r\nthird\r\n"
            b"--\"q b\"--\r\nepilogue")
    r = raw_form(srv, 'multipart/form-data; boundary="q b"', body.replace(b'"q b"', b"q b"))
    assert r.status_code == 200, r.text
    got = r.json()
    assert got["a"] == ["bytes", 0, sha(b"")]
    assert got["b"] == ["bytes", 5, sha(b"third")]
