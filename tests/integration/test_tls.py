"""TLS: https:// listeners and enable_grpc_ssl with TorchServe's certificate_file and
private_key_file, checked with real clients (curl --cacert, requests verify=, grpcio
ssl_channel_credentials) against a throwaway CA made here with openssl."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

import pytest
import requests

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from conftest import PYSTUBS, free_port, start_server  # noqa: E402

sys.path.insert(0, PYSTUBS)
import grpc  # noqa: E402
import inference_pb2 as ipb  # noqa: E402
import inference_pb2_grpc as igrpc  # noqa: E402

SAMPLE = {"data": [0.25] * 64}


def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_ca(d, name):
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", f"/CN={name}",
            "-keyout", f"{name}.key", "-out", f"{name}.pem", cwd=d)


def make_server_cert(d, ca):
    with open(os.path.join(d, "san.ext"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1",
            "-keyout", "server.key", "-out", "server.csr", cwd=d)
    openssl("x509", "-req", "-in", "server.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
            "-CAcreateserial", "-days", "2", "-extfile", "san.ext", "-out", "server.pem", cwd=d)


@pytest.fixture(scope="module")
def pki():
    d = tempfile.mkdtemp(prefix="tsc-pki-")
    make_ca(d, "ca")
    make_ca(d, "otherca")
    make_server_cert(d, "ca")
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def tls_srv(pki):
    tmp = tempfile.mkdtemp(prefix="tsc-tls-")
    ports = {k: free_port() for k in ("inference", "management")}
    cfg = {"inference_address": f"https://127.0.0.1:{ports['inference']}",
           "management_address": f"https://127.0.0.1:{ports['management']}",
           "certificate_file": os.path.join(pki, "server.pem"),
           "private_key_file": os.path.join(pki, "server.key"),
           "enable_grpc_ssl": "true"}
    s = start_server(tmp, models=["mlp"], config=cfg)
    s.ports.update(ports)
    s.https = f"https://127.0.0.1:{ports['inference']}"
    try:
        ca = os.path.join(pki, "ca.pem")
        for _ in range(300):
            try:
                if requests.post(s.https + "/predictions/mlp", json=SAMPLE, verify=ca,
                                 timeout=5).status_code == 200:
                    break
            except requests.RequestException:
                pass
        yield s
    finally:
        s.stop()
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.mark.smoke
def test_https_with_requests_and_curl(tls_srv, pki):
    ca = os.path.join(pki, "ca.pem")
    r = requests.post(tls_srv.https + "/predictions/mlp", json=SAMPLE, verify=ca, timeout=10)
    assert r.status_code == 200 and len(r.json()) == 10
    out = subprocess.run(["curl", "-sS", "--cacert", ca, tls_srv.https + "/ping"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0 and json.loads(out.stdout) == {"status": "Healthy"}, out
    mgmt = f"https://127.0.0.1:{tls_srv.ports['management']}/models"
    assert requests.get(mgmt, verify=ca, timeout=10).json()["models"][0]["modelName"] == "mlp"


def test_wrong_ca_and_plaintext_fail_cleanly(tls_srv, pki):
    with pytest.raises(requests.exceptions.SSLError):
        requests.get(tls_srv.https + "/ping", verify=os.path.join(pki, "otherca.pem"), timeout=10)
    # a plaintext client on the TLS port gets no HTTP answer, and the server is unharmed
    with pytest.raises(requests.exceptions.ConnectionError):
        requests.get(f"http://127.0.0.1:{tls_srv.ports['inference']}/ping", timeout=10)
    r = requests.get(tls_srv.https + "/ping", verify=os.path.join(pki, "ca.pem"), timeout=10)
    assert r.status_code == 200


@pytest.mark.smoke
def test_grpc_tls(tls_srv, pki):
    with open(os.path.join(pki, "ca.pem"), "rb") as f:
        creds = grpc.ssl_channel_credentials(root_certificates=f.read())
    with grpc.secure_channel(f"127.0.0.1:{tls_srv.ports['grpc']}", creds) as ch:
        r = igrpc.InferenceAPIsServiceStub(ch).Predictions(
            ipb.PredictionsRequest(model_name="mlp",
                                   input={"data": json.dumps(SAMPLE).encode()}), timeout=10)
        assert len(json.loads(r.prediction)) == 10
    with open(os.path.join(pki, "otherca.pem"), "rb") as f:
        wrong = grpc.ssl_channel_credentials(root_certificates=f.read())
    with grpc.secure_channel(f"127.0.0.1:{tls_srv.ports['grpc']}", wrong) as ch:
        with pytest.raises(grpc.RpcError) as ei:
            igrpc.InferenceAPIsServiceStub(ch).Ping(__import__("google.protobuf.empty_pb2",
                                                               fromlist=["Empty"]).Empty(),
                                                    timeout=5)
        assert ei.value.code() == grpc.StatusCode.UNAVAILABLE
    with grpc.insecure_channel(f"127.0.0.1:{tls_srv.ports['grpc']}") as ch:
        with pytest.raises(grpc.RpcError) as ei:
            igrpc.InferenceAPIsServiceStub(ch).Predictions(
                ipb.PredictionsRequest(model_name="mlp", input={"data": b"{}"}), timeout=5)
        assert ei.value.code() == grpc.StatusCode.UNAVAILABLE


@pytest.mark.parametrize("what", ["missing", "garbage", "mismatch"])
def test_bad_key_refuses_the_start(pki, tmp_path, what):
    key = os.path.join(pki, "server.key")
    if what == "missing":
        key = str(tmp_path / "nope.key")
    elif what == "garbage":
        key = str(tmp_path / "garbage.key")
        open(key, "w").write("not a key\n")
    elif what == "mismatch":
        key = os.path.join(pki, "otherca.key")
    cfg = {"inference_address": f"https://127.0.0.1:{free_port()}",
           "certificate_file": os.path.join(pki, "server.pem"), "private_key_file": key}
    with pytest.raises(AssertionError) as ei:
        start_server(str(tmp_path), config=cfg)
    msg = str(ei.value)
    assert "private_key_file" in msg, msg
    if what == "missing":
        assert "No such file" in msg
    if what == "mismatch":
        assert "mismatch" in msg or "does not match" in msg


def test_grpc_ssl_without_files_refuses_the_start(tmp_path):
    with pytest.raises(AssertionError) as ei:
        start_server(str(tmp_path), config={"enable_grpc_ssl": "true"})
    assert "enable_grpc_ssl" in str(ei.value) and "certificate_file" in str(ei.value)
