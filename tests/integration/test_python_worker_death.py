"""A Python model's worker dies (issues 11 and 34): killed mid-batch, dying in the step after
answers it held back, faking its progress page before it dies, or hung past responseTimeout.
Each request fails once, with the death's reason, or runs on the next worker if it never reached
the handler; none runs twice, and the model keeps serving.
"""
import os
import signal
import threading
import time

from conftest import start_server
from test_python_handlers import assert_worker_died, maps_libpython, wait_model, write_model


SLOW = '''
import time


def handle(data, context):
    if data is None:
        return None
    time.sleep(float(data[0]["body"]))
    return [b"done"] * len(data)
'''


def test_kill_9_mid_batch(tmp):
    store = os.path.join(tmp, "store")
    write_model(store, "slow", SLOW,
                yaml="minWorkers: 1\nmaxWorkers: 1\nbatchSize: 4\nmaxBatchDelay: 200\n")
    srv = start_server(tmp, models=["slow"], store=store)
    try:
        wait_model(srv, "slow", body=b"0")
        (pid,) = srv.worker_pids()
        res = []

        def client():
            r = srv.post("/predictions/slow", data=b"5", timeout=30)
            res.append((r.status_code, r.text))

        ts = [threading.Thread(target=client) for _ in range(4)]
        for t in ts:
            t.start()
        time.sleep(1.0)  # the batch of 4 is in the handler
        os.kill(pid, signal.SIGKILL)
        for t in ts:
            t.join()
        assert len(res) == 4
        for st, txt in res:
            assert_worker_died(st, txt)
        r = wait_model(srv, "slow", body=b"0", timeout=30)
        assert r.text == "done"
        (new,) = srv.worker_pids()
        assert new != pid and maps_libpython(new)
    finally:
        srv.stop()


DIES_ON = '''
import os


def handle(data, context):
    if data is None:
        return None
    body = bytes(data[0]["body"])
    # one line per request this handler is handed, in a file the test reads
    with open(os.path.join(context.system_properties["model_dir"], "ran.log"), "ab") as f:
        f.write(body + b"\\n")
    if body == b"die":
        os._exit(3)
    return [b"ok " + body]
'''


def test_death_after_held_answers_runs_no_request_twice(tmp):
    """At batchSize 1 a worker holds a step's answers back while its next step runs (one write
    for up to 8). Here it dies in the step after three it answered: those answers die with it.
    Its progress page tells the frontend which requests reached the handler: they fail once
    with "Worker died" (issue 34: they went back to the queue and ran a second time), and only
    those that never reached it ("d" and "e", sent behind "die") go to the new worker. Without
    the page the frontend would send "die" to the new worker too, which it would kill as
    well."""
    store = os.path.join(tmp, "store")
    d = write_model(store, "dies", DIES_ON,
                    yaml="minWorkers: 1\nmaxWorkers: 1\nbatchSize: 1\nmaxBatchDelay: 0\n")
    srv = start_server(tmp, models=["dies"], store=store)
    try:
        for _ in range(20):  # the frontend learns the step time: it pipelines deeper then
            assert wait_model(srv, "dies", body=b"warm").text == "ok warm"
        (pid,) = srv.worker_pids()
        res = {}

        def client(body):
            r = srv.post("/predictions/dies", data=body, timeout=60)
            res[body] = (r.status_code, r.text)

        os.kill(pid, signal.SIGSTOP)  # everything below reaches its socket before it reads any
        bodies = [b"a", b"b", b"c", b"die", b"d", b"e"]
        ts = []
        for body in bodies:
            ts.append(threading.Thread(target=client, args=(body,)))
            ts[-1].start()
            time.sleep(0.15)  # in this order
        os.kill(pid, signal.SIGCONT)
        for t in ts:
            t.join()
        log = srv.log()
        with open(os.path.join(d, "ran.log"), "rb") as f:
            ran = [line for line in f.read().split(b"\n") if line and line != b"warm"]
        assert sorted(ran) == sorted(bodies), (ran, log[-3000:])  # each handled once
        assert_worker_died(*res[b"die"])
        for body in (b"a", b"b", b"c"):  # answered, or lost with the worker: never run again
            if res[body][0] != 200:
                assert_worker_died(*res[body])
            else:
                assert res[body][1] == "ok " + body.decode()
        for body in (b"d", b"e"):
            assert res[body] == (200, "ok " + body.decode()), (body, res[body], log[-3000:])
        assert log.count("respawning") == 1, log[-3000:]
        assert "go back to the queue" in log
    finally:
        srv.stop()


LIES_AND_DIES = '''
import ctypes
import os
import struct


def handle(data, context):
    if data is None:
        return None
    if bytes(data[0]["body"]) != b"lie":
        return [b"ok"]
    # the progress page (otf_progress: magic, started, finished) is mapped in this process:
    # claim that no request ever reached the handler, then die
    for line in open("/proc/self/maps"):
        if "memfd:torchserve-c-progress" in line:
            addr = int(line.split("-")[0], 16)
            magic = ctypes.string_at(addr, 8)
            ctypes.memmove(addr, magic + struct.pack("=QQ", 0, 0), 24)
            break
    else:
        raise RuntimeError("no progress page")
    os._exit(3)
'''


def test_a_handler_that_fakes_its_progress_cannot_loop_a_request(tmp):
    """A handler's code can write to the progress page. One that claims never to have started
    the request it dies on gets that request put back in the queue, and it kills each new worker
    in turn: after 3 times back, the request fails instead of going round for ever."""
    store = os.path.join(tmp, "store")
    write_model(store, "liar", LIES_AND_DIES)
    srv = start_server(tmp, models=["liar"], store=store)
    try:
        wait_model(srv, "liar", body=b"x")
        r = srv.post("/predictions/liar", data=b"lie", timeout=60)
        assert_worker_died(r.status_code, r.text)
        log = srv.log()
        assert log.count("respawning") == 4, log[-3000:]
        assert log.count("go back to the queue") == 3, log[-3000:]
        assert wait_model(srv, "liar", body=b"x", timeout=30).text == "ok"
    finally:
        srv.stop()


def test_hung_handler_killed_after_response_timeout(tmp):
    """A handler that hangs in handle() (here a sleep of 30 s) is killed once responseTimeout
    passes: its request was running, so it fails with TorchServe's message, and a new worker
    takes over."""
    store = os.path.join(tmp, "store")
    write_model(store, "slow", SLOW, yaml="minWorkers: 1\nmaxWorkers: 1\nresponseTimeout: 1\n")
    srv = start_server(tmp, models=["slow"], store=store)
    try:
        wait_model(srv, "slow", body=b"0")
        (pid,) = srv.worker_pids()
        t0 = time.monotonic()
        # a handler that sleeps 300 s: an answer at all (the 120 s timeout guards against a
        # hang) means it was killed; not before responseTimeout
        r = srv.post("/predictions/slow", data=b"300", timeout=120)
        dt = time.monotonic() - t0
        assert r.status_code == 500, r.text
        assert "did not respond in given time" in r.json()["message"], r.text
        assert dt >= 0.9, f"answered after {dt:.2f} s with responseTimeout 1 s"
        assert "did not respond within responseTimeout" in srv.log()
        assert wait_model(srv, "slow", body=b"0", timeout=30).text == "done"
        assert pid not in srv.worker_pids()
    finally:
        srv.stop()
