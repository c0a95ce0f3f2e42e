"""tiny_gpt under load (issue 36's benchmark). Prints figures; asserts nothing.

    /usr/bin/python3 scripts/bench/llm_bench.py [BUILD_DIR]   (llm_bench.sh builds the client)

For each number of concurrent streams (CONC, default "1 8 32 64"): that many streams of a
PROMPT-token prompt (default 128 bytes of scripts/models/char_lm/corpus.txt, a different place
for each) and NEW new tokens (default 128, greedy), arriving evenly spread over the first
SPREAD_MS (default 1000) ms, each on its own connection to /predictions/tiny_gpt (one chunk per
token), read by the C client llm_load (env LLM_LOAD). Reported:
  - tokens/s: tokens streamed / (last token - first request);
  - TTFT p50/p99: request sent to first token; inter-token p50/p99/max: gaps between a stream's
    consecutive tokens, all streams (max: the longest stall);
  - the limit: the same model's batched greedy loop in plain PyTorch at the same batch size,
    run in this process on LOOP_THREADS threads (default one, like the worker's decode steps:
    OMP_NUM_THREADS=1, which the worker
    gets from worker_threads and which OpenBLAS reads too: torch.set_num_threads alone leaves
    OpenBLAS's GEMMs on every core; all prompts prefilled in one step(),
    then NEW - 1 decode steps of the whole batch in lockstep), just before each server run with
    the server idle: its tokens/s, and the ratio;
  - spread: plain PyTorch serving the server's arrivals (spread_limit): the same prompts arriving
    over SPREAD_MS, each fed whole in the first step() after it arrived with the decode rows of
    the others, in this process on LOOP_THREADS threads, no frontend; its tokens/s, and the
    server's ratio to it. The loop above has every stream at once; streams that arrive over a
    second cannot all finish as early, whoever serves them;
  - the targets: server tokens/s >= 0.85 of the loop's at 32 streams; TTFT p99 <= the prefill
    of one prompt alone + 3 steps (a step: the server's inter-token p50 at that load);
  - where each stream's TTFT went, from the worker's x-ts-worker-wait_us, -prefill_us and
    -collect_us headers on its first response: waiting for its prompt's first step, the prefill
    itself, the first token's wait to leave the handler, and the rest (frontend, sockets,
    client, and the wait in the worker's inbox for the step in progress); and TTFT minus the
    stream's own prefill, against 3 steps: the target read per
    stream ("the prefill of its own prompt plus 3 steps");
  - the worker's mean batch (tokens / steps from its counters) and the CPU seconds of the
    frontend, the worker and the client per 1000 tokens.
REPEAT (default 1) runs per load; the best of the server's and of the loop's are reported. PREFILL_CHUNK sets
handler.prefill_chunk (default: the model-config's, 0 = measured), DECODE_GROUPS
handler.decode_groups (default true; false: one attention product per step), PREFILL_THREAD
handler.prefill_thread (default true: the worker feeds joining prompts on a second thread, so it
computes on up to two cores), SPLIT_DECODE handler.split_decode (default false: true lets that
thread run part of each decode step when it has no prompt), PREFILL_CORES handler.prefill_cores
(default 1: 2 feeds a prompt that arrives while nothing decodes on two BLAS threads), XNNPACK
handler.xnnpack (default: true where it can run; false keeps the linears on the BLAS).
WORKERS sets minWorkers and maxWorkers
(default 1; with more, the counters are one worker's), SCHED_BATCH config.properties'
sched_batch (default true), WORKER_THREADS config.properties'
worker_threads (default 1). COUNTERS=1 prints the worker's counters of each run. LOOP_THREADS
(default 1) gives the loop and the prefill-alone
measurement that many threads: 2 gives the loop both cores too, as the worker has with its
prefill thread. LOOP_XNNPACK=1 puts the linears of the loop, of spread and of the
prefill-alone measurement on XNNPACK as the worker does by default (PyTorch's
optimize_for_mobile, its optional steps off: its prepack passes, and the clamp fusion and
canonical optimisations it always runs; OMP_WAIT_POLICY=PASSIVE with LOOP_THREADS > 1): the
linears on the same kernels on both sides. The server is
started like the integration tests start it (tests/integration/conftest.py): batchSize 64,
worker_threads 1.
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

# before torch is loaded (conftest and the loop import it): OpenBLAS takes its thread count from
# the environment at load time, and the worker runs with OMP_NUM_THREADS=1 (worker_threads)
LOOP_THREADS = int(os.environ.get("LOOP_THREADS", "1"))
os.environ["OMP_NUM_THREADS"] = str(LOOP_THREADS)
LOOP_XNNPACK = os.environ.get("LOOP_XNNPACK") == "1"
if LOOP_XNNPACK and LOOP_THREADS > 1:
    # OpenMP's idle threads would spin on the cores XNNPACK's pool wants (torch_shim.h)
    os.environ["OMP_WAIT_POLICY"] = "PASSIVE"

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if len(sys.argv) > 1:
    os.environ["TS_BUILD"] = sys.argv[1]
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
from conftest import cpu_seconds, mar_module, start_server  # noqa: E402

CONC = [int(x) for x in os.environ.get("CONC", "1 8 32 64").split()]
PROMPT = int(os.environ.get("PROMPT", "128"))
NEW = int(os.environ.get("NEW", "128"))
SPREAD_MS = float(os.environ.get("SPREAD_MS", "1000"))
REPEAT = int(os.environ.get("REPEAT", "1"))
LLM_LOAD = os.environ.get("LLM_LOAD", "llm_load")


def prompts(n):
    text = open(os.path.join(ROOT, "scripts", "models", "char_lm", "corpus.txt")).read()
    return [text[(i * 53) % (len(text) - PROMPT):][:PROMPT] for i in range(n)]


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(p / 100 * (len(v) - 1) + 0.5))] if v else float("nan")


def counters(srv):
    import requests
    r = requests.post(srv.url("/predictions/tiny_gpt"), json={"prompt": "x", "max_new_tokens": 1},
                      timeout=60)
    return {k[12:]: int(v) for k, v in r.headers.items() if k.startswith("x-ts-worker-")
            and k[12:] not in ("wait_us", "prefill_us", "collect_us")}  # the probe's own


def run_load(srv, bodies, n):
    # the loop and spread just ran in this process: OpenBLAS's threads spin for a while after
    # their last product, on the cores the server is about to need
    time.sleep(0.3)
    wpid = srv.worker_pids()[0]
    c0 = counters(srv)
    cpu0 = (cpu_seconds(srv.pid), cpu_seconds(wpid))
    t = time.time()
    out = subprocess.run([LLM_LOAD, str(srv.ports["inference"]), "/predictions/tiny_gpt", bodies,
                          str(n), str(SPREAD_MS)], capture_output=True, text=True, timeout=900)
    wall = time.time() - t
    if out.returncode:
        raise SystemExit(f"llm_load failed: {out.stderr}")
    cpu1 = (cpu_seconds(srv.pid), cpu_seconds(wpid))
    c1 = counters(srv)
    ttft, gaps, chunks, ends = [], [], 0, []
    starts, parts = [], []
    for line in out.stdout.splitlines():
        if not line.startswith("stream "):
            continue
        f = line.split()
        start, first, nch = float(f[3]), float(f[5]), int(f[7])
        w = f.index("worker")
        g = [float(x) for x in f[9].split(",")] if w > 9 else []
        starts.append(start)
        ttft.append((first - start) / 1000)
        wait, pre, coll = (int(x) / 1000 for x in f[w + 1].split(","))
        if min(wait, pre, coll) < 0:
            raise SystemExit(f"llm_bench: no x-ts-worker-*_us headers on a reply: {line[:80]}")
        # the rest: frontend, sockets, client, and the wait in the worker's inbox
        parts.append((wait, pre, coll, ttft[-1] - wait - pre - coll, ttft[-1] - pre))
        gaps += [x / 1000 for x in g]
        chunks += nch
        ends.append(first + sum(g))
    span = (max(ends) - min(starts)) / 1e6
    tokens = c1.get("tokens", 0) - c0.get("tokens", 0) - 1
    steps = c1.get("steps", 0) - c0.get("steps", 0)
    return {"tok_s": chunks / span, "chunks": chunks, "tokens": tokens, "span": span,
            "parts": [(pct(col, 50), pct(col, 99)) for col in zip(*parts)],
            "ttft50": pct(ttft, 50), "ttft99": pct(ttft, 99), "itl50": pct(gaps, 50),
            "itl99": pct(gaps, 99), "itlmax": max(gaps) if gaps else float("nan"),
            "batch": tokens / max(steps, 1), "cpu_f": cpu1[0] - cpu0[0],
            "cpu_w": cpu1[1] - cpu0[1], "cpu_c": out_cpu(wall),
            "counters": {k: v - c0.get(k, 0) for k, v in c1.items() if v != c0.get(k, 0)}}


def out_cpu(_wall):
    """CPU seconds of the children so far (the client) since the last call."""
    t = os.times()
    used = t.children_user + t.children_system
    prev = getattr(out_cpu, "prev", 0.0)
    out_cpu.prev = used
    return used - prev


def loop_limit(m, batch, ps):
    """tokens/s of the batched greedy loop on step(), the prefill time of one prompt alone, and
    the loop's decode step time."""
    import torch
    none = torch.zeros(0, 3, dtype=torch.long)
    nogroup = torch.zeros(0, 4, dtype=torch.long)
    with torch.inference_mode():
        cache = m.new_cache(batch, PROMPT + NEW)
        for s in range(batch):
            m.clear_slot(cache, s)
        toks = torch.tensor([list(p.encode()) for p in ps[:batch]]).reshape(-1)
        slots = torch.arange(batch).repeat_interleave(PROMPT)
        pos = torch.arange(PROMPT).repeat(batch)
        chunks = torch.tensor([[s, s * PROMPT, PROMPT] for s in range(batch)])
        t0 = time.perf_counter()
        lg = m.step(cache, toks, slots, pos, nogroup, chunks)
        nxt = lg.argmax(-1)
        t1 = time.perf_counter()
        for k in range(NEW - 1):
            p = PROMPT + k
            lg = m.step(cache, nxt, torch.arange(batch), torch.full((batch,), p),
                        torch.tensor([[0, batch, p + 1, batch]]), none)
            nxt = lg.argmax(-1)
        t2 = time.perf_counter()
    return batch * NEW / (t2 - t0), (t2 - t1) / max(NEW - 1, 1)


def spread_limit(m, n, ps, group=4):
    """tokens/s of plain PyTorch serving the server's arrivals: the same n prompts arriving evenly
    over SPREAD_MS, each fed whole in the first step() after it arrived, with the decode rows of
    every stream that has its first token (groups of up to `group` consecutive slots); no
    frontend, no sockets, no stall rule. What a continuous batcher on these cores can reach when
    the streams do not all start at once."""
    import torch
    arrive = [i * SPREAD_MS / 1000 / n for i in range(n)]
    with torch.inference_mode():
        cache = m.new_cache(n, PROMPT + NEW)
        for s in range(n):
            m.clear_slot(cache, s)
        prompt = [torch.tensor(list(p.encode())) for p in ps[:n]]
        got = [0] * n      # tokens each stream has
        last = [0] * n     # each stream's last token
        end = [0.0] * n
        joined = 0
        t0 = time.perf_counter()
        while min(got) < NEW:
            now = time.perf_counter() - t0
            dec = [s for s in range(joined) if 0 < got[s] < NEW]
            new = []
            while joined < n and arrive[joined] <= now:
                new.append(joined)
                joined += 1
            if not dec and not new:
                time.sleep(max(0.0, arrive[joined] - now))
                continue
            toks = [last[s] for s in dec]
            slots = list(dec)
            pos = [PROMPT + got[s] - 1 for s in dec]
            groups = []
            for g in range(0, len(dec), group):
                part = dec[g:g + group]
                groups.append([part[0], part[-1] + 1, max(pos[g:g + group]) + 1, len(part)])
            chunks = []
            for s in new:
                chunks.append([s, len(toks), PROMPT])
                toks += prompt[s].tolist()
                slots += [s] * PROMPT
                pos += list(range(PROMPT))
            lg = m.step(cache, torch.tensor(toks), torch.tensor(slots), torch.tensor(pos),
                        torch.tensor(groups, dtype=torch.long).reshape(-1, 4),
                        torch.tensor(chunks, dtype=torch.long).reshape(-1, 3))
            nxt = lg.argmax(-1).tolist()
            t = time.perf_counter() - t0
            for i, s in enumerate(dec + new):
                last[s] = nxt[i]
                got[s] += 1
                if got[s] == NEW:
                    end[s] = t
    return n * NEW / max(end)


def prefill_alone(m, ps):
    import torch
    with torch.inference_mode():
        cache = m.new_cache(1, PROMPT + NEW)
        m.clear_slot(cache, 0)
        x = torch.tensor(list(ps[0].encode()))
        best = float("inf")
        for _ in range(5):
            t = time.perf_counter()
            m.step(cache, x, torch.zeros(PROMPT, dtype=torch.long), torch.arange(PROMPT),
                   torch.zeros(0, 4, dtype=torch.long), torch.tensor([[0, 0, PROMPT]]))
            best = min(best, time.perf_counter() - t)
    return best


def main():
    import torch
    torch.set_num_threads(LOOP_THREADS)
    ps = prompts(max(CONC))
    tmp = tempfile.mkdtemp(prefix="tsc-llmbench-")
    bodies = os.path.join(tmp, "bodies.jsonl")
    with open(bodies, "w") as f:
        for p in ps:
            f.write(json.dumps({"prompt": p, "max_new_tokens": NEW}) + "\n")
    handler = {k: os.environ[e] for k, e in (("prefill_chunk", "PREFILL_CHUNK"),
                                            ("decode_groups", "DECODE_GROUPS"),
                                            ("prefill_thread", "PREFILL_THREAD"),
                                            ("split_decode", "SPLIT_DECODE"),
                                            ("prefill_cores", "PREFILL_CORES"),
                                            ("xnnpack", "XNNPACK"))
               if e in os.environ}
    # the worker's token and step counters come back as x-ts-worker-* headers (opt-in)
    config = {"worker_debug_headers": True}
    workers = ({"minWorkers": int(os.environ["WORKERS"]), "maxWorkers": int(os.environ["WORKERS"])}
               if "WORKERS" in os.environ else {})
    if "WORKER_THREADS" in os.environ:
        config["worker_threads"] = int(os.environ["WORKER_THREADS"])
    if "SCHED_BATCH" in os.environ:
        config["sched_batch"] = os.environ["SCHED_BATCH"]
    srv = start_server(tmp, models=["tiny_gpt"], config=config,
                       yaml={"tiny_gpt": {"batchSize": 64, "handler": handler, **workers}})
    m = mar_module("tiny_gpt")  # OpenMP on one thread; OpenBLAS on LOOP_THREADS (above)
    if LOOP_XNNPACK:  # the worker's rewrite (handler.xnnpack), done by PyTorch's own optimizer
        torch.set_num_threads(LOOP_THREADS)  # XNNPACK's pool too
        from torch.utils.mobile_optimizer import MobileOptimizerType as T, optimize_for_mobile
        m = optimize_for_mobile(m, {T.CONV_BN_FUSION, T.REMOVE_DROPOUT, T.FUSE_ADD_RELU,
                                    T.HOIST_CONV_PACKED_PARAMS},
                                ["step", "new_cache", "clear_slot", "context_length"])
    server, limit, spread = {}, {}, {}
    try:
        srv.wait_ready("tiny_gpt", body={"json": {"prompt": "x", "max_new_tokens": 1}})
        run_load(srv, bodies, min(8, max(CONC)))  # warm-up: slots, allocator
        pre = prefill_alone(m, ps) * 1000
        # the loop and the server by turns (the server idle while the loop runs), so that both
        # meet the same machine
        for n in CONC:
            runs, loops, spreads = [], [], []
            for _ in range(REPEAT):
                loops.append(loop_limit(m, n, ps))
                spreads.append(spread_limit(m, n, ps))
                runs.append(run_load(srv, bodies, n))
            server[n] = max(runs, key=lambda r: r["tok_s"])
            limit[n] = max(loops)
            spread[n] = max(spreads)
        calib = [line.split("INFO [-] ", 1)[-1] for line in srv.log().splitlines()
                 if "textgen: " in line]
    finally:
        srv.stop()
    print("worker:", *calib)
    print(f"tiny_gpt: {PROMPT}-token prompts, {NEW} new tokens, arrivals over {SPREAD_MS:.0f} ms;"
          f" prefill of one prompt alone {pre:.1f} ms (plain PyTorch, {LOOP_THREADS} "
          f"thread{'s' if LOOP_THREADS > 1 else ''}, like the loop"
          f"{'; loop, spread and prefill with the linears on XNNPACK' if LOOP_XNNPACK else ''})")
    print(f"{'streams':>7} {'tok/s':>7} {'loop':>7} {'ratio':>5} {'spread':>7} {'ratio':>5} {'ttft50':>7} {'ttft99':>7} "
          f"{'target':>7} {'itl50':>6} {'itl99':>6} {'itlmax':>7} {'loopstep':>8} {'batch':>5} "
          f"{'cpu/1k tok: frontend worker client':>34}")
    for n in CONC:
        s = server[n]
        lim, step = limit[n]
        target = pre + 3 * s["itl50"]
        k = s["chunks"] / 1000
        print(f"{n:7d} {s['tok_s']:7.0f} {lim:7.0f} {s['tok_s'] / lim:5.2f} {spread[n]:7.0f} "
              f"{s['tok_s'] / spread[n]:5.2f} {s['ttft50']:7.1f} "
              f"{s['ttft99']:7.1f} {target:7.1f} {s['itl50']:6.1f} {s['itl99']:6.1f} "
              f"{s['itlmax']:7.1f} {step * 1000:8.1f} {s['batch']:5.1f} "
              f"{s['cpu_f'] / k:22.2f} {s['cpu_w'] / k:6.2f} {s['cpu_c'] / k:6.2f}")
    print("where the first token's time went (ms, p50/p99, from the worker's headers): wait "
          "(came to the handler -> its prompt's first step), prefill (-> its last prompt step's "
          "end), collect (-> its first token out of the handler), rest (TTFT minus those: "
          "frontend, sockets, client, and the request's wait in the worker's inbox for the step "
          "in progress); TTFT minus its own prefill, against 3 steps (3 x itl50)")
    for n in CONC:
        s = server[n]
        cols = " ".join(f"{a:6.1f}/{b:<6.1f}" for a, b in s["parts"])
        print(f"{n:7d} {cols} {3 * s['itl50']:6.1f}")
    if os.environ.get("COUNTERS"):
        for n in CONC:
            print(f"{n:7d} worker counters:", server[n]["counters"])
    print("(times in ms; target: TTFT p99 <= prefill alone + 3 x itl50; loopstep: the loop's "
          "decode step at that batch; spread: plain PyTorch serving the same arrivals, "
          "spread_limit)")


if __name__ == "__main__":
    main()
