"""Stateful sequence benchmark: lstm_stateful steps/s with 64 concurrent sequences on 2 workers,
batchSize 1 vs 16, p50/p99 latency per step, and the LMDB write-through cost per step with and
without a synced commit (handler.state_sync).

Usage: /usr/bin/python3 scripts/bench/seq_bench.py [--duration S] [--sequences N] [--threads N]
Needs build/bin, model-store/lstm_stateful.mar (make all models) and wrk. Starts the real server
on free ports for each configuration and stops it again (by pid), opens the sequences, then wrk
keeps one connection per sequence busy (scripts/bench/seq.lua: each connection posts steps of
its threads' sequences round robin).
"""
import argparse
import http.client
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
from conftest import start_server  # noqa: E402

LUA = os.path.join(ROOT, "scripts", "bench", "seq.lua")


def bench(batch, sync, args):
    tmp = tempfile.mkdtemp(prefix="seq-bench-")
    yaml = {"lstm_stateful": {"batchSize": batch, "minWorkers": 2, "maxWorkers": 2,
                              "maxBatchDelay": 2, "maxNumSequence": args.sequences,
                              "maxSequenceJobQueueSize": args.sequences,
                              "handler": {"state_sync": "true" if sync else "false"}}}
    srv = start_server(tmp, models=["lstm_stateful"], yaml=yaml,
                       config={"default_workers_per_model": 2, "worker_debug_headers": True})
    try:
        # warm up: both workers loaded and past their first forward
        deadline = time.time() + 60
        while True:
            c = http.client.HTTPConnection("127.0.0.1", srv.ports["inference"], timeout=30)
            try:
                c.request("POST", "/predictions/lstm_stateful", "[0,0,0,0]",
                          {"ts_request_sequence_end": "true"})
                r = c.getresponse()
                r.read()
                if r.status == 200:
                    break
            except OSError:
                pass
            if time.time() > deadline:
                raise RuntimeError(srv.log()[-2000:])
            time.sleep(0.2)
        sids = []
        for _ in range(args.sequences):
            c.request("POST", "/predictions/lstm_stateful", "[0,0,0,0]",
                      {"Content-Type": "application/json"})
            r = c.getresponse()
            r.read()
            assert r.status == 200, r.status
            sids.append(r.getheader("ts_request_sequence_id"))
        ids = os.path.join(tmp, "ids")
        with open(ids, "w") as f:
            f.write("\n".join(sids) + "\n")
        env = dict(os.environ, SEQ_IDS_FILE=ids, SEQ_THREADS=str(args.threads))
        out = subprocess.run(["wrk", f"-t{args.threads}", f"-c{args.sequences}",
                              f"-d{args.duration}s", "-s", LUA,
                              srv.url("/predictions/lstm_stateful")],
                             env=env, capture_output=True, text=True, check=True).stdout
        # the LMDB totals of one worker, from a last step of each sequence
        lasts = []
        for sid in sids:
            c.request("POST", "/predictions/lstm_stateful", "[0,0,0,0]",
                      {"ts_request_sequence_id": sid, "ts_request_sequence_end": "true"})
            r = c.getresponse()
            r.read()
            lasts.append(tuple(int(r.getheader(f"x-ts-worker-{k}", "0"))
                               for k in ("state_commits", "state_writes", "state_us")))
    finally:
        srv.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    rps = float(re.search(r"Requests/sec:\s+([0-9.]+)", out).group(1))
    m = re.search(r"non200=(\d+) p50_us=(\d+) p99_us=(\d+)", out)
    if int(m.group(1)):
        raise RuntimeError(f"{m.group(1)} answers were not 200:\n{out}")
    commits, writes, us = max(lasts)  # the worker with the most commits so far
    return {
        "batch": batch, "sync": sync, "steps_s": rps,
        "p50_ms": int(m.group(2)) / 1000, "p99_ms": int(m.group(3)) / 1000,
        "lmdb_us_per_step": us / commits if commits else 0.0,
        "lmdb_us_per_write": us / writes if writes else 0.0,
        "writes_per_step": writes / commits if commits else 0.0,
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--duration", type=int, default=8)
    ap.add_argument("--sequences", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
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
          f"({args.sequences} sequences, 2 workers, wrk {args.duration} s each)")


if __name__ == "__main__":
    main()
