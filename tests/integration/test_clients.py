"""What the documentation's commands ran into (issue 33, point 6), each fixed and checked here:

- scripts/torchserve_c_client.py takes --host/--port/--token/--timeout before the command as
  well as after it (argparse's subparser defaults used to overwrite the first);
- scripts/oip_client.py --body with a missing, non-JSON or non-object file exits 1 with one
  line naming the file, not a traceback;
- GET /models/NAME?customized=true on a model with a C handler (the examples mlp, stateful,
  identity_text) answers 200 with customizedMetadata {} (the worker answers for handlers that
  have no describe entry, as the Python BaseHandler's default describe_handle does), where it
  was a 400 "empty body" from the handler.
"""
import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from conftest import ROOT, start_server  # noqa: E402

CLIENT = os.path.join(ROOT, "scripts", "torchserve_c_client.py")
OIP_CLIENT = os.path.join(ROOT, "scripts", "oip_client.py")


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    tmp = str(tmp_path_factory.mktemp("clients"))
    s = start_server(tmp, models=["mlp", "stateful", "identity_text"])
    yield s
    s.stop()


def run(*args):
    return subprocess.run(["/usr/bin/python3", *args], capture_output=True, text=True,
                          timeout=60, cwd=ROOT)


def test_client_options_before_and_after_the_command(srv):
    port = str(srv.ports["grpc"])
    for args in (["--port", port, "ping"], ["ping", "--port", port],
                 ["--port", "1", "ping", "--port", port],
                 ["--host", "127.0.0.1", "--port", port, "--timeout", "20", "ping"]):
        p = run(CLIENT, *args)
        assert p.returncode == 0 and "Healthy" in p.stdout, (args, p.stdout, p.stderr)
    p = run(CLIENT, "--port", str(srv.ports["grpc_mgmt"]), "describe", "mlp")
    assert p.returncode == 0 and '"modelName": "mlp"' in p.stdout, p.stderr


@pytest.mark.parametrize("content,why", [
    (None, "No such file or directory"),
    ("{", "not JSON"),
    ("[1, 2]", "expected an OIP request object"),
])
def test_oip_client_body_errors_are_one_line(tmp_path, content, why):
    path = tmp_path / "request.json"
    if content is not None:
        path.write_text(content)
    p = run(OIP_CLIENT, "infer", "mlp", "--body", str(path), "--url", "http://127.0.0.1:9")
    assert p.returncode == 1, p
    assert "Traceback" not in p.stderr and why in p.stderr, p.stderr
    assert p.stderr.startswith(f"oip_client.py: --body {path}: "), p.stderr


def test_oip_client_body_file_reaches_the_server(srv, tmp_path):
    path = tmp_path / "request.json"
    path.write_text('{"inputs": [{"name": "input__0", "shape": [1, 64], "datatype": "FP32", '
                    '"data": [' + ", ".join(["0.5"] * 64) + ']}]}')
    p = run(OIP_CLIENT, "infer", "mlp", "--body", str(path), "--url",
            f"http://127.0.0.1:{srv.ports['inference']}")
    assert p.returncode == 0 and '"outputs"' in p.stdout, (p.stdout, p.stderr)


@pytest.mark.parametrize("model", ["mlp", "stateful", "identity_text"])
def test_customized_describe_of_c_handlers(srv, model):
    r = srv.get(f"/models/{model}?customized=true", api="management", timeout=60)
    assert r.status_code == 200, r.text
    (d,) = r.json()
    assert d["modelName"] == model and d["customizedMetadata"] == {}, d
    # the model still serves afterwards
    r = srv.post(f"/predictions/{model}", data=b"2" if model == "stateful" else b"x y",
                 timeout=30) if model != "mlp" else srv.post(
        "/predictions/mlp", json={"data": [0.0] * 64})
    assert r.status_code == 200, r.text
