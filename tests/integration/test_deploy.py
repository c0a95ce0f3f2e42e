"""Scale-out (deploy/): real HAProxy in front of real instances, all started by
deploy/run-cluster.sh, and the container and Kubernetes files checked against our config.

- stateless requests are spread over every instance (each instance's metrics count its share);
- many concurrent sequences, with server-made and client-chosen ids, answer every step with
  the right running sum, each on one instance, which really holds it: asked directly, that
  instance continues the sequence and the others do not know it;
- gRPC (h2c) through the balancer: stateless calls spread, sequences sticky through the
  response metadata, StreamPredictions2, the OIP service;
- management and metrics are not reachable through the balancer;
- kill -9 of an instance: stateless requests under load all succeed, its server-made sequences
  get 404 elsewhere (never a silent new sequence), its client-chosen ids start afresh elsewhere
  (as in TorchServe), the other instances' sequences go on;
- SIGTERM to run-cluster.sh leaves no process behind; a start-up failure neither;
- the Kubernetes manifests, the KServe runtime and the Dockerfile agree with our config, and
  HAProxy accepts the in-cluster configuration.

The cluster is shared by the tests of this file; the last two stop it, in file order.
"""
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid

import pytest
import requests
import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from conftest import BUILD, PYSTUBS, ROOT, prepare_store  # noqa: E402
from test_sequences import run_threads  # noqa: E402

sys.path.insert(0, PYSTUBS)
import grpc  # noqa: E402
import inference_pb2 as ipb  # noqa: E402
import inference_pb2_grpc as igrpc  # noqa: E402
import management_pb2 as mpb  # noqa: E402
import management_pb2_grpc as mgrpc  # noqa: E402
import oip_grpc_pb2 as opb  # noqa: E402
import oip_grpc_pb2_grpc as ogrpc  # noqa: E402
from google.protobuf import empty_pb2  # noqa: E402

SEQ = "ts_request_sequence_id"
START = "ts_request_sequence_start"
END = "ts_request_sequence_end"
INSTANCE = "x-ts-instance"
RUN_CLUSTER = os.path.join(ROOT, "deploy", "run-cluster.sh")
K8S = os.path.join(ROOT, "deploy", "kubernetes")
N = 3
# sequences answer plainly (no streamed odd numbers), one worker per model per instance
STATEFUL = {"continuousBatching": False, "maxBatchDelay": 5, "batchSize": 8, "minWorkers": 1,
            "maxWorkers": 1, "maxNumSequence": 64}
MLP_BODY = open(os.path.join(ROOT, "scripts", "models", "mlp", "sample.json"), "rb").read()


class Cluster:
    def __init__(self, proc, workdir, http, grpc_addr, stderr_path):
        self.proc = proc
        self.workdir = workdir
        self.http = http
        self.grpc = grpc_addr
        self.stderr_path = stderr_path
        self.instances = {}
        with open(os.path.join(workdir, "instances")) as f:
            for line in f:
                name, pid, p_http, p_mgmt, p_metrics, p_grpc, p_grpc_mgmt, d = line.split()
                self.instances[name] = dict(pid=int(pid), http=int(p_http), mgmt=int(p_mgmt),
                                            metrics=int(p_metrics), grpc=int(p_grpc),
                                            grpc_mgmt=int(p_grpc_mgmt), dir=d)
        m = re.search(r"haproxy pid (\d+)", open(stderr_path).read())
        self.haproxy_pid = int(m.group(1))

    def post(self, path, session=requests, **kw):
        kw.setdefault("timeout", 30)
        return session.post(self.http + path, **kw)

    def direct(self, name, path, api="http", **kw):
        kw.setdefault("timeout", 30)
        return requests.post(f"http://127.0.0.1:{self.instances[name][api]}{path}", **kw)

    def haproxy(self, command):
        """One command on HAProxy's runtime API socket."""
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(os.path.join(self.workdir, "haproxy.sock"))
            s.sendall(command.encode() + b"\n")
            return s.makefile().read()

    def log(self):
        return open(self.stderr_path).read()


def pids_of_workdir(workdir):
    """Live processes whose command line names the cluster's work directory (instances, their
    workers: --state-dir is under it, HAProxy: -f haproxy.cfg)."""
    found = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                cmd = f.read()
            with open(f"/proc/{d}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if workdir.encode() in cmd and state != "Z":
            found.append((int(d), cmd.replace(b"\0", b" ").decode(errors="replace")))
    return found


def start_cluster(tmp, n=N, models=("stateful", "mlp"), yaml_overrides=None, timeout=90,
                  extra=()):
    store = prepare_store(tmp, list(models), yaml_overrides or {"stateful": STATEFUL})
    workdir = os.path.join(tmp, "cluster")
    stderr_path = os.path.join(tmp, "run-cluster.err")
    env = dict(os.environ, TS_BUILD=os.path.relpath(BUILD, ROOT))
    proc = subprocess.Popen([RUN_CLUSTER, str(n), "--models", *models, "--model-store", store,
                             "--workdir", workdir, *extra], stdout=subprocess.PIPE,
                            stderr=open(stderr_path, "w"), env=env, text=True)
    line = ""
    deadline = time.time() + timeout
    while time.time() < deadline:
        line = proc.stdout.readline()
        if not line or line.startswith("balancer "):
            break
    m = re.fullmatch(r"balancer (http://127\.0\.0\.1:\d+) grpc (127\.0\.0\.1:\d+)\n", line)
    if not m:
        proc.kill()
        proc.wait()
        raise AssertionError(f"no balancer line ({line!r}):\n{open(stderr_path).read()}")
    return Cluster(proc, workdir, m.group(1), m.group(2), stderr_path)


def stop_cluster(c, timeout=40):
    if c.proc.poll() is None:
        c.proc.send_signal(signal.SIGTERM)
        try:
            return c.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            c.proc.kill()
            c.proc.wait()
    for pid, _ in pids_of_workdir(c.workdir):  # only what this cluster started
        os.kill(pid, signal.SIGKILL)
    return c.proc.returncode


@pytest.fixture(scope="module")
def cluster():
    tmp = tempfile.mkdtemp(prefix="tsc-deploy-")
    c = start_cluster(tmp)
    yield c
    stop_cluster(c)
    shutil.rmtree(tmp, ignore_errors=True)


def mlp_count(c, name):
    text = requests.get(f"http://127.0.0.1:{c.instances[name]['metrics']}/metrics",
                        timeout=10).text
    m = re.search(r'^ts_inference_requests_total\{model_name="mlp",[^}]*\} ([0-9.]+)$', text,
                  re.M)
    return float(m.group(1)) if m else 0.0


class Seq:
    """A sequence driven through the balancer: checks every answer against its running sum and
    records which instance answered each step."""

    def __init__(self, c, client_id=None):
        self.c = c
        self.s = requests.Session()
        self.client_id = client_id
        self.id = None
        self.total = 0
        self.instances = set()

    def step(self, value):
        headers = {}
        if self.id is None and self.client_id:
            headers = {SEQ: self.client_id}  # no start flag: an unknown id starts one
        elif self.id is not None:
            headers = {SEQ: self.id}
        r = self.c.post("/predictions/stateful", self.s, data=str(value), headers=headers)
        assert r.status_code == 200, (self.id, r.status_code, r.text)
        self.total += value
        assert int(r.text) == self.total, (self.id, r.text, self.total)
        if self.id is None:
            self.id = r.headers[SEQ]
            if self.client_id:
                assert self.id == self.client_id
            else:
                assert self.id.startswith("ts-seq-")
        assert r.headers[SEQ] == self.id
        self.instances.add(r.headers[INSTANCE])


def test_stateless_requests_spread_over_all_instances(cluster):
    """60 MLP requests from 6 concurrent clients: every answer equals an instance's own answer
    for the same input, and each instance's metrics counted its share."""
    c = cluster
    before = {n: mlp_count(c, n) for n in c.instances}
    expected = c.direct("ts1", "/predictions/mlp", data=MLP_BODY,
                        headers={"Content-Type": "application/json"}).json()
    seen = []

    def client():
        s = requests.Session()
        for _ in range(10):
            r = c.post("/predictions/mlp", s, data=MLP_BODY,
                       headers={"Content-Type": "application/json"})
            assert r.status_code == 200, r.text
            assert r.json() == expected
            seen.append(r.headers[INSTANCE])

    run_threads([client] * 6)
    assert len(seen) == 60 and set(seen) == set(c.instances), seen
    served = {n: mlp_count(c, n) - before[n] for n in c.instances}
    served["ts1"] -= 1  # the direct request for the expected answer
    assert served == {n: seen.count(n) for n in c.instances}
    # least-loaded, not round-robin: a slower instance (a busy 2-core host) takes fewer, but
    # every instance takes some
    assert all(v >= 1 for v in served.values()), served


def test_sticky_sequences_server_and_client_ids(cluster):
    """24 concurrent sequences of 6 random steps, half with server-made ids, half with ids the
    client chose: every step answers the running sum, all steps of a sequence land on one
    instance, and both kinds use several instances. That instance holds the state (a direct
    request continues it); the others do not know the id: a server-made one is 404 there, a
    client-chosen one starts a new sequence from nothing (as TorchServe does)."""
    c = cluster
    rng = random.Random(7)
    seqs = [Seq(c) for _ in range(12)] + [Seq(c, f"client-{uuid.uuid4()}") for _ in range(12)]
    plans = [[rng.randint(1, 1000) for _ in range(6)] for _ in seqs]
    barrier = threading.Barrier(len(seqs))

    def drive(seq, plan):
        barrier.wait()
        for v in plan:
            seq.step(v)

    run_threads([lambda s=s, p=p: drive(s, p) for s, p in zip(seqs, plans)])
    for s in seqs:
        assert len(s.instances) == 1, (s.id, s.instances)
    assert len({next(iter(s.instances)) for s in seqs[:12]}) >= 2
    assert len({next(iter(s.instances)) for s in seqs[12:]}) >= 2
    table = c.haproxy("show table st_http_sequences")
    for s in seqs:
        home = next(iter(s.instances))
        assert f"key={s.id} " in table, s.id
        for name in c.instances:
            r = c.direct(name, "/predictions/stateful", data="0" if name == home else "1",
                         headers={SEQ: s.id})
            if name == home:  # 0 ends the sequence
                assert r.status_code == 200 and int(r.text) == s.total, (s.id, r.text)
                assert r.headers.get(END) == "true"
            elif s.client_id:
                assert r.status_code == 200 and r.text == "1", (s.id, name, r.text)
                r = c.direct(name, "/predictions/stateful", data="0", headers={SEQ: s.id})
                assert r.status_code == 200 and r.text == "1", (s.id, name, r.text)
            else:
                assert r.status_code == 404, (s.id, name, r.status_code, r.text)
                assert "SequenceNotFoundException" in r.text


def grpc_call(fn, req, **kw):
    r, call = fn.with_call(req, timeout=30, **kw)
    return r, dict(call.initial_metadata())


def test_grpc_through_the_balancer(cluster):
    """h2c through HAProxy: Ping; MLP calls spread over the instances with the same answers;
    unary sequences (server-made and client-chosen ids, the id also sent as metadata) stay on
    one instance with correct sums; StreamPredictions2; the OIP service answers."""
    c = cluster
    channel = grpc.insecure_channel(c.grpc)
    st = igrpc.InferenceAPIsServiceStub(channel)
    assert json.loads(st.Ping(empty_pb2.Empty(), timeout=10).health) == {"status": "Healthy"}
    req = ipb.PredictionsRequest(model_name="mlp", input={"data": MLP_BODY})
    answers, where = set(), []
    for _ in range(12):
        r, md = grpc_call(st.Predictions, req)
        answers.add(r.prediction)
        where.append(md[INSTANCE])
    assert len(answers) == 1 and set(where) == set(c.instances), where

    def seq_req(value, sid="", start=False):
        inp = {"data": str(value).encode()}
        if start:
            inp[START] = b"true"
        return ipb.PredictionsRequest(model_name="stateful", sequence_id=sid, input=inp)

    homes = []
    for k in range(6):
        client_id = f"grpc-client-{uuid.uuid4()}" if k % 2 else ""
        r, md = grpc_call(st.Predictions, seq_req(5, client_id, start=bool(client_id)),
                          metadata=[(SEQ, client_id)] if client_id else None)
        sid, total, home = r.sequence_id, 5, md[INSTANCE]
        assert md[SEQ] == sid and (sid == client_id or sid.startswith("ts-seq-"))
        for v in (2, 9, 4):
            r, md = grpc_call(st.Predictions, seq_req(v, sid), metadata=[(SEQ, sid)])
            total += v
            assert int(r.prediction) == total and md[INSTANCE] == home, (sid, r, md)
        homes.append(home)
    assert len(set(homes)) >= 2, homes

    sid = f"grpc-stream-{uuid.uuid4()}"
    msgs = [seq_req(1, sid, start=True), seq_req(2, sid), seq_req(3, sid)]
    out = list(st.StreamPredictions2(iter(msgs), timeout=30))
    assert [o.prediction for o in out] == [b"1", b"3", b"6"]

    oip = ogrpc.GRPCInferenceServiceStub(channel)
    assert oip.ServerLive(opb.ServerLiveRequest(), timeout=10).live
    assert oip.ModelReady(opb.ModelReadyRequest(name="mlp"), timeout=10).ready
    # TorchServe's name of the same service goes through too
    ts_live = channel.unary_unary(
        "/org.pytorch.serve.grpc.openinference.GRPCInferenceService/ServerLive",
        request_serializer=opb.ServerLiveRequest.SerializeToString,
        response_deserializer=opb.ServerLiveResponse.FromString)
    assert ts_live(opb.ServerLiveRequest(), timeout=10).live
    channel.close()


def test_grpc_sequence_id_in_the_body_only(cluster):
    """TorchServe's gRPC clients put sequence_id only in the request body. 12 sequences of 4
    unary steps and a StreamPredictions step each, from 4 threads, without the metadata: the
    balancer reads PredictionsRequest.sequence_id from the body, so each sequence stays on one
    instance (2, 6, 10, 14, 16: never the 2, 4, 4, 6 of steps spread over instances), and the
    sequences use several instances. The first answer's trailer says the sequence started."""
    c = cluster
    channel = grpc.insecure_channel(c.grpc)
    st = igrpc.InferenceAPIsServiceStub(channel)
    homes = {}

    def drive(k):
        sid = f"body-only-{k}-{uuid.uuid4()}"
        where = set()
        for i, (v, want) in enumerate([(2, 2), (4, 6), (4, 10), (4, 14)]):
            req = ipb.PredictionsRequest(model_name="stateful", sequence_id=sid,
                                         input={"data": str(v).encode()})
            r, call = st.Predictions.with_call(req, timeout=30)
            md, tr = dict(call.initial_metadata()), dict(call.trailing_metadata())
            assert int(r.prediction) == want, (sid, i, r.prediction, want)
            assert (tr.get(START) == "true") == (i == 0), (sid, i, tr)
            where.add(md[INSTANCE])
        req = ipb.PredictionsRequest(model_name="stateful", sequence_id=sid,
                                     input={"data": b"2"})
        it = st.StreamPredictions(req, timeout=30)
        assert [m.prediction for m in it] == [b"16"], sid
        where.add(dict(it.initial_metadata())[INSTANCE])
        assert len(where) == 1, (sid, where)
        homes[sid] = where.pop()

    run_threads([lambda k=k: [drive(4 * k + n) for n in range(3)] for k in range(4)])
    assert len(homes) == 12 and len(set(homes.values())) >= 2, homes
    channel.close()


def test_management_and_metrics_not_reachable_through_the_balancer(cluster):
    """The instances' management and metrics APIs work on their own ports, and nothing of them
    goes through the balancer: HTTP paths answer 403, the gRPC management service
    PERMISSION_DENIED, and no HAProxy server points at a management or metrics port."""
    c = cluster
    ts1 = c.instances["ts1"]
    assert requests.get(f"http://127.0.0.1:{ts1['mgmt']}/models", timeout=10).status_code == 200
    assert requests.get(f"http://127.0.0.1:{ts1['metrics']}/metrics",
                        timeout=10).status_code == 200
    for method, path in [("GET", "/models"), ("GET", "/models/mlp"), ("DELETE", "/models/mlp"),
                         ("POST", "/models?url=mlp.mar"), ("PUT", "/models/mlp?min_worker=3"),
                         ("GET", "/metrics"), ("POST", "/token?type=management"),
                         ("GET", "/v1/models")]:
        r = requests.request(method, c.http + path, timeout=10)
        assert r.status_code == 403, (method, path, r.status_code)
        assert r.json()["type"] == "ForbiddenException"
        assert INSTANCE not in r.headers
    channel = grpc.insecure_channel(c.grpc)
    mg = mgrpc.ManagementAPIsServiceStub(channel)
    for call, req in [(mg.ListModels, mpb.ListModelsRequest()),
                      (mg.UnregisterModel, mpb.UnregisterModelRequest(model_name="mlp"))]:
        with pytest.raises(grpc.RpcError) as e:
            call(req, timeout=10)
        assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED
    channel.close()
    cfg = open(os.path.join(c.workdir, "haproxy.cfg")).read()
    used = {int(p) for p in re.findall(r"^\s+server \S+ 127\.0\.0\.1:(\d+)", cfg, re.M)}
    used |= {int(p) for p in re.findall(r"\bport (\d+)", cfg)}
    served = {i[k] for i in c.instances.values() for k in ("http", "grpc")}
    private = {i[k] for i in c.instances.values() for k in ("mgmt", "metrics", "grpc_mgmt")}
    assert used == served and not used & private
    # the instances are all still there: describe through management shows the model
    r = requests.get(f"http://127.0.0.1:{ts1['mgmt']}/models/mlp", timeout=10)
    assert r.status_code == 200 and r.json()[0]["modelName"] == "mlp"


def test_failover_kill_9_one_instance(cluster):
    """Sequences on every instance, stateless load from 4 clients, then kill -9 of the instance
    holding the first sequence: every stateless request (before, during and after) succeeds;
    the dead instance's server-made sequences get 404 "not found" on a live instance, never a
    200 that would be a silent new sequence, while its client-chosen ids start afresh there (as
    TorchServe does); the other sequences continue with the right sums; HAProxy
    marks the instance down and its workers are gone."""
    c = cluster
    seqs = [Seq(c) for _ in range(9)] + [Seq(c, f"fo-{uuid.uuid4()}") for _ in range(9)]
    for s in seqs:
        s.step(10)
    victim = next(iter(seqs[0].instances))
    on_victim = [s for s in seqs if victim in s.instances]
    survivors = [s for s in seqs if victim not in s.instances]
    assert on_victim and survivors
    victim_pid = c.instances[victim]["pid"]
    workers = [p for p, cmd in pids_of_workdir(c.instances[victim]["dir"])
               if "torchserve-c-worker" in cmd]
    assert workers

    stop = threading.Event()
    results = []

    def load():
        s = requests.Session()
        while not stop.is_set():
            try:
                r = c.post("/predictions/mlp", s, data=MLP_BODY,
                           headers={"Content-Type": "application/json"})
                results.append((r.status_code, r.headers.get(INSTANCE), r.text[:200]))
            except requests.RequestException as e:  # a closed connection is a failure too
                results.append((None, None, repr(e)))

    threads = [threading.Thread(target=load) for _ in range(4)]
    for t in threads:
        t.start()
    try:
        time.sleep(0.5)
        os.kill(victim_pid, signal.SIGKILL)
        killed_at = len(results)
        time.sleep(3)  # past HAProxy's detection (2 failed checks, 250 ms apart once failing)
    finally:
        stop.set()
        for t in threads:
            t.join()
    bad = [r for r in results if r[0] != 200]
    assert not bad, bad[:5]
    assert killed_at > 10 and len(results) - killed_at > 20, (killed_at, len(results))
    late = {r[1] for r in results[-20:]}
    assert victim not in late and len(late) == N - 1, late

    for s in on_victim:
        r = c.post("/predictions/stateful", data="5", headers={SEQ: s.id})
        assert r.headers[INSTANCE] != victim
        if s.client_id:
            assert r.status_code == 200 and r.text == "5", (s.id, r.status_code, r.text)
        else:
            assert r.status_code == 404, (s.id, r.status_code, r.text)
            assert f"Sequence {s.id} not found" in r.json()["message"]
    for s in survivors:
        s.step(7)
        s.step(0)
    assert all(len(s.instances) == 1 for s in survivors)

    state = c.haproxy("show servers state be_http")
    row = next(line.split() for line in state.splitlines() if f" {victim} " in line)
    assert row[5] == "0", row  # srv_op_state 0: stopped
    deadline = time.time() + 10
    while any(os.path.exists(f"/proc/{p}") for p in workers) and time.time() < deadline:
        time.sleep(0.1)
    assert not any(os.path.exists(f"/proc/{p}") for p in workers)
    assert f"{victim} (pid {victim_pid}) exited" in c.log()


def test_killed_instance_starts_again_on_its_ports(cluster):
    """The instance killed above, started again with its start.sh: it listens on its old ports
    at once (they lie below the kernel's ephemeral range, so no outgoing connection, such as
    HAProxy's health checks, can hold one meanwhile), HAProxy takes it back, and it answers
    through the balancer. It is stopped again by its pid: run-cluster.sh did not start it."""
    c = cluster
    low = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
    for name, inst in c.instances.items():
        for k in ("http", "mgmt", "metrics", "grpc", "grpc_mgmt"):
            assert inst[k] < low, (name, k, inst[k], low)
    dead = [n for n, i in c.instances.items() if not os.path.exists(f"/proc/{i['pid']}")]
    assert len(dead) == 1, dead
    name = dead[0]
    inst = c.instances[name]
    start = os.path.join(inst["dir"], "start.sh")
    log = os.path.join(inst["dir"], "server.log")
    before = os.path.getsize(log)
    proc = subprocess.Popen([start])
    try:
        deadline = time.time() + 60
        while time.time() < deadline and proc.poll() is None:
            if "Model server started." in open(log).read()[before:]:
                break
            time.sleep(0.1)
        tail = open(log).read()[before:]
        assert "Model server started." in tail and "cannot listen" not in tail, tail[-3000:]
        deadline = time.time() + 30
        seen = set()
        while name not in seen and time.time() < deadline:
            r = c.post("/predictions/mlp", data=MLP_BODY,
                       headers={"Content-Type": "application/json"})
            assert r.status_code == 200, r.text
            seen.add(r.headers[INSTANCE])
        assert name in seen, (name, seen)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=40)


def test_run_cluster_help():
    p = subprocess.run([RUN_CLUSTER, "--help"], capture_output=True, text=True, timeout=10)
    assert p.returncode == 0 and p.stderr == "", p
    for option in ("--models", "--base-port", "--workdir", "start.sh"):
        assert option in p.stdout, option
    p = subprocess.run([RUN_CLUSTER, "--no-such-option"], capture_output=True, text=True,
                       timeout=10)
    assert p.returncode == 2 and "usage" not in p.stdout and "--base-port" in p.stderr, p


def test_sigterm_stops_everything(cluster):
    """SIGTERM to run-cluster.sh: it exits 0 within the grace period and no process it started
    (HAProxy, instances, workers) is left; the balancer's port is closed."""
    c = cluster
    started = pids_of_workdir(c.workdir)
    assert any("haproxy" in cmd for _, cmd in started)
    assert any("torchserve-c-worker" in cmd for _, cmd in started)
    c.proc.send_signal(signal.SIGTERM)
    assert c.proc.wait(timeout=120) == 0, c.log()
    # every process stopped on its SIGTERM: none needed run-cluster.sh's SIGKILL
    assert "did not stop after SIGTERM" not in c.log(), c.log()
    assert pids_of_workdir(c.workdir) == []
    for pid, _ in started:
        assert not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split(
            ")")[-1].split()[0] == "Z"
    port = int(c.http.rsplit(":", 1)[1])
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=2)


def test_shared_state_survives_kill_9_of_an_instance(tmp_path):
    """run-cluster.sh --redis: 2 instances sharing sequence state in a redis-server it starts.
    Sequences of both kinds of id over HTTP, and one over gRPC with its id in the body only, on
    both instances; kill -9 of the instance that holds the first one: every sequence goes on
    through the balancer with its running sum, those of the dead instance on the other one,
    whose first answer for each says ts_request_sequence_start: false (a continuation, never
    "true", never a 404); SIGTERM stops Redis too."""
    c = start_cluster(str(tmp_path), n=2, models=("stateful",), extra=["--redis"])
    try:
        assert "redis-server pid" in c.log()
        seqs = [Seq(c) for _ in range(4)] + [Seq(c, f"shared-{uuid.uuid4()}") for _ in range(4)]
        for s in seqs:
            s.step(10)
            s.step(2)
        channel = grpc.insecure_channel(c.grpc)
        st = igrpc.InferenceAPIsServiceStub(channel)
        gid = f"shared-grpc-{uuid.uuid4()}"

        def grpc_step(v):
            r, call = st.Predictions.with_call(ipb.PredictionsRequest(
                model_name="stateful", sequence_id=gid, input={"data": str(v).encode()}),
                timeout=30)
            return int(r.prediction), dict(call.initial_metadata())[INSTANCE], \
                dict(call.trailing_metadata())

        total, ghome, _ = grpc_step(7)
        victim = next(iter(seqs[0].instances))
        assert {next(iter(s.instances)) for s in seqs} == set(c.instances), "one instance only"
        vpid = c.instances[victim]["pid"]
        os.kill(vpid, signal.SIGKILL)
        # gone (run-cluster.sh reaped it): a request racing with the death itself may get a
        # 502, as test_failover_kill_9_one_instance shows; this one is about what comes after
        deadline = time.time() + 30
        while f"(pid {vpid}) exited" not in c.log() and time.time() < deadline:
            time.sleep(0.05)
        assert f"(pid {vpid}) exited" in c.log(), c.log()
        moved = 0
        for s in seqs:
            was = next(iter(s.instances))
            r = c.post("/predictions/stateful", data="4", headers={SEQ: s.id})
            s.total += 4
            assert r.status_code == 200 and int(r.text) == s.total, (s.id, r.status_code, r.text)
            assert r.headers[INSTANCE] != victim
            if was == victim:
                moved += 1
                assert r.headers.get(START) == "false", (s.id, dict(r.headers))
            else:
                assert START not in r.headers, (s.id, dict(r.headers))
            s.step(0)
        assert moved >= 1
        got, where, trailer = grpc_step(5)
        assert got == total + 5 and where != victim, (got, total, where)
        if ghome == victim:
            assert trailer.get(START) == "false", trailer
        channel.close()
    finally:
        assert stop_cluster(c) == 0, c.log()
    assert "redis-server" not in " ".join(cmd for _, cmd in pids_of_workdir(c.workdir))


def test_start_up_failure_leaves_nothing(tmp_path):
    """A model that does not exist: run-cluster.sh names it, exits 1, prints no balancer line
    and stops the instances it had started."""
    workdir = str(tmp_path / "cluster")
    env = dict(os.environ, TS_BUILD=os.path.relpath(BUILD, ROOT))
    p = subprocess.run([RUN_CLUSTER, "2", "--models", "no_such_model", "--workdir", workdir],
                       capture_output=True, text=True, timeout=60, env=env)
    assert p.returncode == 1 and p.stdout == ""
    # the instance stops (a model named in --models failed), and says why
    assert "ts1 exited during start-up" in p.stderr, p.stderr
    assert "model no_such_model=no_such_model.mar failed to load" in p.stderr, p.stderr
    assert pids_of_workdir(workdir) == []
    assert subprocess.run([RUN_CLUSTER, "0"], capture_output=True).returncode == 2


# ---- the files for containers and clusters (no cluster and no Docker daemon here) ----

def properties(text):
    out = {}
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            k, _, v = line.partition("=")
            out[k.strip()] = v.strip()
    return out


def docs(name):
    with open(os.path.join(K8S, name)) as f:
        return {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(f) if d}


def port_of(address):
    return int(address.rsplit(":", 1)[1].rstrip("/"))


def test_container_config_is_served_without_warnings(tmp_path):
    """deploy/config.properties, with its ports moved to free ones, starts a real server with no
    warning: every key is one the server knows."""
    from conftest import free_port
    text = open(os.path.join(ROOT, "deploy", "config.properties")).read()
    cfg = properties(text)
    for key in ("inference_address", "management_address", "metrics_address"):
        text = text.replace(cfg[key], f"http://127.0.0.1:{free_port()}")
    for key in ("grpc_inference_port", "grpc_management_port"):
        text = text.replace(f"{key}={cfg[key]}", f"{key}={free_port()}")
    text = text.replace("=0.0.0.0\n", "=127.0.0.1\n")
    (tmp_path / "c.properties").write_text(text)
    env = dict(os.environ, TMPDIR=str(tmp_path))
    p = subprocess.Popen([os.path.join(BUILD, "bin", "torchserve-c"), "--start", "--foreground",
                          "--model-store", str(tmp_path), "--ts-config",
                          str(tmp_path / "c.properties")], cwd=tmp_path, env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = p.stdout.readline()
        assert "Model server started." in line
    finally:
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=30)
    assert " WARN " not in err and " ERROR " not in err, err


def test_kubernetes_manifests_match_our_config():
    """torchserve-c.yaml: the ConfigMap holds deploy/config.properties' keys; container ports,
    Service ports and probes (readiness /ping, liveness /v2/health/live) use its ports; the
    management API is bound to loopback and exposed nowhere; args name the mounted config and
    model store; the image is the Dockerfile's."""
    d = docs("torchserve-c.yaml")
    cm = d[("ConfigMap", "torchserve-c-config")]["data"]["config.properties"]
    cfg = properties(cm)
    assert cfg == properties(open(os.path.join(ROOT, "deploy", "config.properties")).read())
    http, metrics = port_of(cfg["inference_address"]), port_of(cfg["metrics_address"])
    grpc_port = int(cfg["grpc_inference_port"])
    assert cfg["management_address"].startswith("http://127.0.0.1:")
    assert cfg["grpc_management_address"] == "127.0.0.1"

    dep = d[("Deployment", "torchserve-c")]
    pod = dep["spec"]["template"]["spec"]
    assert dep["spec"]["selector"]["matchLabels"].items() <= \
        dep["spec"]["template"]["metadata"]["labels"].items()
    (ctr,) = pod["containers"]
    assert ctr["image"] == "torchserve-c:latest"
    ports = {p["name"]: p["containerPort"] for p in ctr["ports"]}
    assert ports == {"http": http, "grpc": grpc_port, "metrics": metrics}
    assert ctr["readinessProbe"]["httpGet"] == {"path": "/ping", "port": "http"}
    assert ctr["livenessProbe"]["httpGet"] == {"path": "/v2/health/live", "port": "http"}
    args = ctr["args"]
    assert args[:2] == ["--start", "--foreground"]
    mounts = {m["name"]: m["mountPath"] for m in ctr["volumeMounts"]}
    assert args[args.index("--ts-config") + 1] == mounts["config"] + "/config.properties"
    assert args[args.index("--model-store") + 1] == mounts["model-store"]
    vols = {v["name"]: v for v in pod["volumes"]}
    assert vols["config"]["configMap"]["name"] == "torchserve-c-config"
    claim = vols["model-store"]["persistentVolumeClaim"]["claimName"]
    assert ("PersistentVolumeClaim", claim) in d
    assert pod["securityContext"]["runAsNonRoot"] is True

    svc = d[("Service", "torchserve-c")]["spec"]
    assert svc["clusterIP"] == "None"
    assert svc["selector"] == dep["spec"]["selector"]["matchLabels"]
    assert {(p["name"], p["port"], p["targetPort"]) for p in svc["ports"]} == \
        {("http", http, "http"), ("grpc", grpc_port, "grpc"), ("metrics", metrics, "metrics")}
    for doc in d.values():
        assert "8081" not in json.dumps(doc.get("spec", {})) and "7071" not in json.dumps(
            doc.get("spec", {}))

    # the Dockerfile builds that image with the same paths and ports
    dockerfile = open(os.path.join(ROOT, "deploy", "Dockerfile")).read()
    assert re.findall(r"^FROM (\S+)", dockerfile, re.M) == ["debian:12", "debian:12"]
    user = re.search(r"^USER (\S+)", dockerfile, re.M).group(1)
    assert user not in ("root", "0")
    assert f"VOLUME {mounts['model-store']}" in dockerfile
    # the image's config is deploy/config.properties, put there by the layout script (the
    # rest of the Dockerfile: tests/integration/test_image.py)
    layout = open(os.path.join(ROOT, "deploy", "image-layout.sh")).read()
    assert f'"$root/deploy/config.properties" "$dest{mounts["config"]}/config.properties"' in \
        layout
    assert "COPY --from=build /image/etc/ /etc/" in dockerfile
    assert set(re.search(r"^EXPOSE (.*)$", dockerfile, re.M).group(1).split()) == \
        {str(http), str(grpc_port), str(metrics)}
    assert "docker build -f deploy/Dockerfile -t torchserve-c:latest ." in dockerfile
    for src in re.findall(r"^COPY (?!--from)(\S+)", dockerfile, re.M):
        assert src == "." or os.path.exists(os.path.join(ROOT, src)), src


def test_balancer_manifest_is_the_rendered_template():
    """balancer.yaml: the ConfigMap is exactly what deploy/haproxy/render.sh makes for the
    headless Service, HAProxy 2.6 accepts it without a warning, the sticky rules use our
    sequence header, and the balancer's ports are the instances' inference ports."""
    d = docs("balancer.yaml")
    cfg = d[("ConfigMap", "torchserve-c-haproxy")]["data"]["haproxy.cfg"]
    rendered = subprocess.run(
        [os.path.join(ROOT, "deploy", "haproxy", "render.sh"), "--dns", "8",
         "torchserve-c.default.svc.cluster.local", "8080", "7070"],
        capture_output=True, text=True, check=True).stdout
    assert cfg == rendered, "re-render balancer.yaml's ConfigMap (command in its header)"
    with tempfile.NamedTemporaryFile("w", suffix=".cfg") as f:
        f.write(cfg)
        f.flush()
        p = subprocess.run(["haproxy", "-c", "-f", f.name], capture_output=True, text=True)
    assert p.returncode == 0 and "WARNING" not in p.stderr + p.stdout, p.stderr
    config_c = open(os.path.join(ROOT, "frontend", "core", "config.c")).read()
    header = re.search(r'ts_header_key_sequence_id = xstrdup\("([^"]+)"\)', config_c).group(1)
    assert header == SEQ
    # HTTP sticks on the header; gRPC on the metadata, else the body's sequence_id (field 4)
    assert cfg.count(f"stick match req.hdr({header})") == 1
    assert cfg.count("stick match var(txn.seq)") == 1
    assert f"set-var(txn.seq) req.hdr({header})" in cfg and "req.body,ungrpc(4)" in cfg
    assert cfg.count(f"stick store-response res.hdr({header})") == 4
    assert cfg.count(f"balance hdr({header})") == 1 and cfg.count("balance hash var(txn.seq)") == 1
    assert cfg.count("balance leastconn") == 2
    assert cfg.count("hash-type consistent") == 2
    assert "torchserve-c.default.svc.cluster.local:8080" in cfg
    assert "torchserve-c.default.svc.cluster.local:7070 proto h2" in cfg

    dep = d[("Deployment", "torchserve-c-balancer")]
    assert dep["spec"]["replicas"] == 1
    (ctr,) = dep["spec"]["template"]["spec"]["containers"]
    assert ctr["image"].startswith("haproxy:2.6")
    assert ctr["command"][-1] == "/usr/local/etc/haproxy/haproxy.cfg"
    assert ctr["volumeMounts"][0]["mountPath"] == "/usr/local/etc/haproxy"
    assert {p["containerPort"] for p in ctr["ports"]} == {8080, 7070}
    assert re.search(r"^\s+bind :8080$", cfg, re.M) and re.search(r"^\s+bind :7070 proto h2$",
                                                                  cfg, re.M)
    svc = d[("Service", "torchserve-c-balancer")]["spec"]
    assert {p["port"] for p in svc["ports"]} == {8080, 7070}
    k8s = docs("torchserve-c.yaml")
    inst_ports = {p["name"]: p["port"] for p in k8s[("Service", "torchserve-c")]["spec"]["ports"]}
    assert (inst_ports["http"], inst_ports["grpc"]) == (8080, 7070)


def test_kserve_runtime_serves_mar_over_oip():
    """kserve-runtime.yaml: a ClusterServingRuntime with protocolVersions [v2, grpc-v2], the
    same image and config as the Deployment, the .mar store under /mnt/models, probes on the
    OIP health endpoints; the InferenceService examples name it and the h2c port is ours."""
    (rt,) = docs("kserve-runtime.yaml").values()
    assert rt["apiVersion"] == "serving.kserve.io/v1alpha1"
    assert rt["kind"] == "ClusterServingRuntime"
    spec = rt["spec"]
    assert spec["protocolVersions"] == ["v2", "grpc-v2"]
    (ctr,) = spec["containers"]
    dep = docs("torchserve-c.yaml")[("Deployment", "torchserve-c")]
    dctr = dep["spec"]["template"]["spec"]["containers"][0]
    assert ctr["name"] == "kserve-container" and ctr["image"] == dctr["image"]
    args = ctr["args"]
    assert args[args.index("--model-store") + 1] == "/mnt/models/model-store"
    assert args[args.index("--ts-config") + 1] == "/etc/torchserve-c/config.properties"
    cfg = properties(open(os.path.join(ROOT, "deploy", "config.properties")).read())
    assert ctr["ports"] == [{"name": "http1", "containerPort": port_of(cfg["inference_address"]),
                             "protocol": "TCP"}]
    assert ctr["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
    assert ctr["livenessProbe"]["httpGet"]["path"] == "/v2/health/live"
    assert spec["annotations"]["prometheus.kserve.io/port"] == str(port_of(cfg["metrics_address"]))
    assert ctr["securityContext"]["runAsNonRoot"] is True
    isvcs = docs("kserve-inferenceservice.yaml")
    protocols = set()
    for isvc in isvcs.values():
        model = isvc["spec"]["predictor"]["model"]
        assert model["runtime"] == rt["metadata"]["name"]
        assert model["modelFormat"]["name"] in {f["name"] for f in spec["supportedModelFormats"]}
        protocols.add(model["protocolVersion"])
        if model["protocolVersion"] == "grpc-v2":
            assert model["ports"][0]["name"] == "h2c"
            assert model["ports"][0]["containerPort"] == int(cfg["grpc_inference_port"])
    assert protocols == {"v2", "grpc-v2"}


def test_install_deps_lists_haproxy_and_yaml():
    """scripts/install-deps.sh installs haproxy and python3-yaml, and is quiet and changes
    nothing when everything is there (make test ran it first)."""
    script = os.path.join(ROOT, "scripts", "install-deps.sh")
    pkgs = re.search(r'PKGS="([^"]*)"', open(script).read()).group(1).split()
    assert "haproxy" in pkgs and "python3-yaml" in pkgs
    p = subprocess.run([script], capture_output=True, text=True, timeout=120)
    assert (p.returncode, p.stdout, p.stderr) == (0, "", "")
