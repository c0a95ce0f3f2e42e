"""Stateful sequence benchmark: lstm_stateful steps/s with 64 concurrent sequences on 2 workers,
batchSize 1 vs 16, p50/p99 latency per step, and the LMDB write-through cost per step with and
without a synced commit (handler.state_sync).

Usage: /usr/bin/python3 scripts/bench/seq_bench.py [--steps N] [--sequences N] [--procs N]
Needs build/bin and model-store/lstm_stateful.mar (make all models). Starts the real server on
free ports for each configuration and stops it again (by pid). Clients are --procs processes
with keep-alive http.client connections, one thread per sequence.
"""
import argparse
import http.client
import json
import multiprocessing as mp
import os
import random
import shutil
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
from conftest import start_server  # noqa: E402


def run_sequence(port, steps, seed, out):
    rng = random.Random(seed)
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    sid = None
    lat = []
    last = None
    for _ in range(steps):
        body = json.dumps([rng.uniform(-1, 1) for _ in range(4)])
        h = {"Content-Type": "application/json"}
        if sid:
            h["ts_request_sequence_id"] = sid
        t0 = time.perf_counter()
        conn.request("POST", "/predictions/lstm_stateful", body, h)
        r = conn.getresponse()
        data = r.read()
        lat.append(time.perf_counter() - t0)
        if r.status != 200:
            raise RuntimeError(f"HTTP {r.status}: {data[:200]!r}")
        sid = r.getheader("ts_request_sequence_id")
        last = (int(r.getheader("x-ts-worker-state_commits", "0")),
                int(r.getheader("x-ts-worker-state_writes", "0")),
                int(r.getheader("x-ts-worker-state_us", "0")),
                int(r.getheader("x-ts-worker-batch", "1")))
    conn.request("POST", "/predictions/lstm_stateful", json.dumps([0, 0, 0, 0]),
                 {"ts_request_sequence_id": sid, "ts_request_sequence_end": "true"})
    conn.getresponse().read()
    out.append((lat, last))


def client_proc(port, steps, seeds, barrier, q):
    out = []
    barrier.wait()
    ts = [threading.Thread(target=run_sequence, args=(port, steps, s, out)) for s in seeds]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    q.put(out)


def bench(batch, sync, args):
    tmp = tempfile.mkdtemp(prefix="seq-bench-")
    yaml = {"lstm_stateful": {"batchSize": batch, "minWorkers": 2, "maxWorkers": 2,
                              "maxBatchDelay": 2, "maxNumSequence": args.sequences,
                              "handler": {"state_sync": "true" if sync else "false"}}}
    srv = start_server(tmp, models=["lstm_stateful"], yaml=yaml,
                       config={"default_workers_per_model": 2})
    try:
        # warm up: both workers loaded and past their first forward
        deadline = time.time() + 60
        while True:
            c = http.client.HTTPConnection("127.0.0.1", srv.ports["inference"], timeout=30)
            try:
                c.request("POST", "/predictions/lstm_stateful", "[0,0,0,0]",
                          {"ts_request_sequence_end": "true"})
                if c.getresponse().status == 200:
                    break
            except OSError:
                pass
            if time.time() > deadline:
                raise RuntimeError(srv.log()[-2000:])
            time.sleep(0.2)
        q = mp.Queue()
        barrier = mp.Barrier(args.procs + 1)
        seeds = list(range(args.sequences))
        procs = [mp.Process(target=client_proc,
                            args=(srv.ports["inference"], args.steps, seeds[i::args.procs],
                                  barrier, q)) for i in range(args.procs)]
        for p in procs:
            p.start()
        barrier.wait()
        t0 = time.perf_counter()
        results = [q.get() for _ in procs]
        wall = time.perf_counter() - t0
        for p in procs:
            p.join()
    finally:
        srv.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    lat = sorted(x for r in results for (ls, _) in r for x in ls)
    lasts = [last for r in results for (_, last) in r]
    commits, writes, us, _ = max(lasts)  # the worker with the most commits so far
    n = len(lat)
    return {
        "batch": batch, "sync": sync, "steps": n, "steps_s": n / wall,
        "p50_ms": lat[n // 2] * 1000, "p99_ms": lat[min(n - 1, int(n * 0.99))] * 1000,
        "lmdb_us_per_step": us / commits if commits else 0.0,
        "lmdb_us_per_write": us / writes if writes else 0.0,
        "writes_per_step": writes / commits if commits else 0.0,
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--sequences", type=int, default=64)
    ap.add_argument("--procs", type=int, default=4)
    args = ap.parse_args()
    rows = []
    for batch, sync in ((1, False), (16, False), (16, True), (1, True)):
        r = bench(batch, sync, args)
        rows.append(r)
        print(f"batchSize {batch:2d} state_sync {str(sync):5s}: {r['steps_s']:7.0f} steps/s  "
              f"p50 {r['p50_ms']:6.2f} ms  p99 {r['p99_ms']:6.2f} ms  "
              f"LMDB {r['lmdb_us_per_step']:7.1f} us/step ({r['writes_per_step']:.1f} writes, "
              f"{r['lmdb_us_per_write']:.1f} us/write)", flush=True)
    b1 = next(r for r in rows if r["batch"] == 1 and not r["sync"])
    b16 = next(r for r in rows if r["batch"] == 16 and not r["sync"])
    print(f"gain batchSize 16 / 1 (no sync): {b16['steps_s'] / b1['steps_s']:.1f}x "
          f"({args.sequences} sequences, 2 workers, {args.steps} steps each)")


if __name__ == "__main__":
    main()
