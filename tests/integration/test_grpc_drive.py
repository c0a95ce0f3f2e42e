"""How gRPC's completion queue is driven (frontend/grpc/grpc_drive.c): from the loop thread when
gRPC's epoll1 poller can be watched, else by a completion-queue thread with a mailbox into the
loop. The server never refuses to start over it, and the services behave the same on both:
`make test` also runs the gRPC test files with TS_GRPC_DRIVE=thread."""
import os
import sys

import grpc
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from conftest import PYSTUBS, start_server  # noqa: E402

sys.path.insert(0, PYSTUBS)
import inference_pb2 as ipb  # noqa: E402
import inference_pb2_grpc as igrpc  # noqa: E402


@pytest.mark.smoke
@pytest.mark.parametrize("env,drive,why", [
    ({"TS_GRPC_DRIVE": "thread"}, "a completion-queue thread", "TS_GRPC_DRIVE=thread"),
    ({"GRPC_POLL_STRATEGY": "poll"}, "a completion-queue thread",
     "GRPC_POLL_STRATEGY names another poll engine"),
    ({"TS_GRPC_DRIVE": "auto"}, "from the loop thread", "epoll1 poller fd"),
], ids=["forced", "other-poll-engine", "auto"])
def test_drive_is_chosen_and_serves(tmp_path, env, drive, why):
    env = dict(env)
    if "GRPC_POLL_STRATEGY" not in env:
        env["GRPC_POLL_STRATEGY"] = ""  # empty counts as unset
    srv = start_server(str(tmp_path), models=["identity_text"], env=env,
                       yaml={"identity_text": {"handler": {"delay_ms": 0}}})
    try:
        log = srv.log()
        line = [l for l in log.splitlines() if "gRPC is driven" in l]
        assert len(line) == 1 and drive in line[0] and why in line[0], log
        if "loop" in drive:  # gRPC's epoll_wait reaches the frontend's: drains end exactly
            assert "a drain ends when gRPC's epoll_wait finds nothing" in line[0], log
        stub = igrpc.InferenceAPIsServiceStub(
            grpc.insecure_channel(f"127.0.0.1:{srv.ports['grpc']}"))
        assert stub.Ping(ipb.google_dot_protobuf_dot_empty__pb2.Empty(), timeout=30).health
        words = [r.prediction.decode() for r in stub.StreamPredictions(
            ipb.PredictionsRequest(model_name="identity_text",
                                   input={"data": b"one two three"}), timeout=60)]
        assert "".join(words).split() == ["one", "two", "three"]
        r = stub.Predictions(ipb.PredictionsRequest(model_name="identity_text",
                                                    input={"data": b"a b"}), timeout=60)
        assert r.prediction.decode().split() == ["a", "b"]
    finally:
        srv.stop()
