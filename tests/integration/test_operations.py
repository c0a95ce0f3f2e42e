"""Operations: what `--start` tells the operator, and where it writes its log."""
import os
import shutil
import socket
import subprocess

from conftest import BIN, MODEL_STORE, free_port


def write_cfg(d, port, extra=""):
    p = os.path.join(d, "config.properties")
    with open(p, "w") as f:
        f.write(f"inference_address=http://127.0.0.1:{port}\n"
                f"management_address=http://127.0.0.1:{free_port()}\n"
                f"metrics_address=http://127.0.0.1:{free_port()}\n"
                f"grpc_inference_port={free_port()}\ngrpc_management_port={free_port()}\n"
                "disable_token_authorization=true\n" + extra)
    return p


def test_failed_background_start_prints_the_reason(tmp_path):
    """Port in use: the console says which address, why, and which process holds it; the
    log goes to log_location."""
    d = str(tmp_path)
    store = os.path.join(d, "store")
    os.mkdir(store)
    shutil.copy(os.path.join(MODEL_STORE, "mlp.mar"), store)
    port = free_port()
    holder = socket.socket()
    holder.bind(("127.0.0.1", port))
    holder.listen()
    try:
        cfg = write_cfg(d, port, "log_location=var/log/tsc\n")
        r = subprocess.run([os.path.join(BIN, "torchserve-c"), "--start", "--model-store", store,
                            "--ts-config", cfg], cwd=d, capture_output=True, text=True, timeout=60)
    finally:
        holder.close()
    assert r.returncode == 1, r
    assert f"cannot listen on http://127.0.0.1:{port}: Address already in use" in r.stderr, r.stderr
    assert f"held by pid {os.getpid()}" in r.stderr, r.stderr
    assert "see var/log/tsc/ts_log.log" in r.stderr, r.stderr
    assert os.path.getsize(os.path.join(d, "var/log/tsc/ts_log.log")) > 0
