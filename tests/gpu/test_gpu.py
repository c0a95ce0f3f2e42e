"""Serving on a GPU (issue 32): one server, each model twice, on the GPU and (deviceType: cpu) on
the CPU, and the answers compared with each other and with this Python's torch on the CPU.

    mlp            TorchScript MLP, built-in torchscript handler, JSON and OIP tensors: equal
                   within 1e-5
    mlp_graph      the same with handler.cuda_graph: true: graphs captured per batch size, equal
    resnet18       eager ResNet-18 behind TorchServe's image_classifier (Python, BaseHandler on
                   cuda:{gpu_id}), JPEGs decoded by PIL: the same top-5, probabilities within
                   TOP5_TOL; and decoded on the device (the default on a GPU): within
                   DECODE_TOL, the largest drift printed
    char_lm        the streaming C handler (GRU, continuous batching): the same text, streamed
    pystream       a Python BaseHandler that streams with send_intermediate_predict_response,
                   computing on its device
and describe / /metrics show the device; kill -9 of a GPU worker gives a respawn and the GPU
memory back. On a host without a GPU every model runs on the CPU and each test runs its CPU
half (the GPU-only assertions are skipped with the reason); scripts/gpu/check.sh runs this file
on a GPU host, CI runs it everywhere.
"""
import io
import json
import os
import re
import signal
import sys
import tempfile
import time
import unittest
import zipfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpuserver import STORE, Server, no_gpu_reason, nvidia_smi, unpack  # noqa: E402

NO_GPU = no_gpu_reason()
ON = "gpu" if NO_GPU is None else "cpu"
TOL = 1e-5
# cuDNN runs the convolutions in TF32 on Ampere and later (torch.backends.cudnn.allow_tf32 is
# true by default, in libtorch as in Python): a product keeps 10 bits of mantissa, so the
# logits move by about 1e-3 of their size and the softmax probabilities by up to a few 1e-3.
TOP5_TOL = 1e-2
# the same for char_lm's GRU logits where a greedy decode may take the other of two near-equal
# characters
TIE_TOL = 1e-2
# nvjpeg's IDCT and chroma upsampling and the tensor resize against PIL: up to 1e-2 on the CPU
# already (docs/performance.md, "Decoding otherwise than PIL: drift"), 5.2e-2 measured on an H100
# (torch 2.11+cu130, this random-weight resnet18, whose probabilities are flat and move easily);
# a decode gone wrong (channels, orientation, range) moves them by far more
DECODE_TOL = 1e-1

STREAM_HANDLER = '''
import torch
from ts.protocol.otf_message_handler import send_intermediate_predict_response
from ts.torch_handler.base_handler import BaseHandler


class Stream(BaseHandler):
    """n partial results, each computed on the handler's device (BaseHandler's mapping)."""

    def handle(self, data, context):
        n = int(data[0]["body"])
        x = torch.arange(4, dtype=torch.float32, device=self.device)
        gpu = context.system_properties["gpu_id"]
        for k in range(n):
            with torch.no_grad():
                y = self.model(x * (k + 1))
            msg = f"{self.device} {gpu} {y.sum().item():.4f}\\n"
            if k == n - 1:
                return [msg]
            send_intermediate_predict_response([msg], context.request_ids, "ok", 200, context)
'''


def mar_module(mar, member=None):
    import torch
    with zipfile.ZipFile(os.path.join(STORE, mar)) as z:
        man = json.loads(z.read("MAR-INF/MANIFEST.json"))
        return torch.jit.load(io.BytesIO(z.read(member or man["model"]["serializedFile"]))).eval()


def jpegs(n=3):
    """n 640x480 JPEGs of smooth colour gradients with noise (fixed seed)."""
    import random

    from PIL import Image
    rnd = random.Random(7)
    out = []
    for k in range(n):
        w, h = 640, 480
        img = Image.new("RGB", (w, h))
        a, b, c = (rnd.randint(0, 255) for _ in range(3))
        img.putdata([((a + x // 3 + rnd.randint(0, 30)) % 256, (b + y // 2) % 256,
                      (c + (x + y) // 5 + k * 40) % 256) for y in range(h) for x in range(w)])
        buf = io.BytesIO()
        img.save(buf, format="JPEG", quality=90)
        out.append(buf.getvalue())
    return out


class GpuServing(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        import torch
        cls.tmp = tempfile.mkdtemp(prefix="tsc-gpu-store-")
        store = cls.tmp
        cpu = {"deviceType": "cpu"}
        unpack(store, "mlp", "mlp.mar")
        unpack(store, "mlp_cpu", "mlp.mar", cpu)
        unpack(store, "mlp_graph", "mlp.mar", {"batchSize": 4, "maxBatchDelay": 50,
                                                "handler": {"cuda_graph": True}})
        unpack(store, "char_lm", "char_lm.mar")
        unpack(store, "char_lm_cpu", "char_lm.mar", cpu)
        # PIL's pixels for both, so that what differs is the device's arithmetic; resnet18_auto
        # decodes as a GPU model does by default (nvjpeg on the device, docs/performance.md)
        pil = {"handler": {"decode": "pil"}}
        unpack(store, "resnet18", "resnet18.mar", pil)
        unpack(store, "resnet18_cpu", "resnet18.mar", dict(cpu, **pil))
        unpack(store, "resnet18_auto", "resnet18.mar")
        d = os.path.join(store, "pystream")
        os.makedirs(os.path.join(d, "MAR-INF"))
        torch.manual_seed(0)
        cls.lin = torch.jit.script(torch.nn.Linear(4, 2).eval())
        cls.lin.save(os.path.join(d, "model.pt"))
        with open(os.path.join(d, "stream.py"), "w") as f:
            f.write(STREAM_HANDLER)
        with open(os.path.join(d, "model-config.yaml"), "w") as f:
            f.write("minWorkers: 1\nmaxWorkers: 1\nbatchSize: 1\n")
        with open(os.path.join(d, "MAR-INF", "MANIFEST.json"), "w") as f:
            json.dump({"runtime": "python", "model": {
                "modelName": "pystream", "handler": "stream.py", "serializedFile": "model.pt",
                "modelVersion": "1.0", "configFile": "model-config.yaml"}}, f)
        cls.models = ["mlp", "mlp_cpu", "mlp_graph", "char_lm", "char_lm_cpu", "resnet18",
                      "resnet18_cpu", "resnet18_auto", "pystream"]
        cls.srv = Server(store, cls.models, config={"metric_time_interval": 1})
        try:
            cls.srv.wait_ready(cls.models)
        except AssertionError:
            cls.srv.stop()
            raise

    @classmethod
    def tearDownClass(cls):
        cls.srv.stop()
        import shutil
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def gpu_only(self, what):
        if NO_GPU:
            self.skipTest(f"{what}: {NO_GPU}")

    def mlp_ref(self, rows):
        import torch
        if not hasattr(self, "_mlp"):
            type(self)._mlp = mar_module("mlp.mar")
        with torch.no_grad():
            return self._mlp(torch.tensor(rows)).tolist()

    def assertRowsClose(self, got, want, tol=TOL, what=""):
        self.assertEqual(len(got), len(want), what)
        for g, w in zip(got, want):
            diff = max(abs(a - b) for a, b in zip(g, w))
            self.assertLessEqual(diff, tol, f"{what}: {g} vs {w}")

    # ------------------------------------------------------------------ the mlp

    def test_1_mlp_on_the_gpu_equals_the_cpu(self):
        import torch
        g = torch.Generator().manual_seed(3)
        x = (torch.rand(8, 64, generator=g) * 4 - 2).tolist()
        for n in (1, 3, 8):
            want = self.mlp_ref(x[:n])
            for m in ("mlp", "mlp_cpu"):
                status, got = self.srv.post_json(f"/predictions/{m}", {"data": x[:n]})
                self.assertEqual(status, 200, got)
                self.assertRowsClose(got, want, what=f"{m}, {n} row(s)")
        # the Open Inference Protocol's tensors go through the same shim on the same device
        flat = [v for row in x[:2] for v in row]
        for m in ("mlp", "mlp_cpu"):
            status, o = self.srv.post_json(f"/v2/models/{m}/infer", {"inputs": [
                {"name": "input__0", "shape": [2, 64], "datatype": "FP32", "data": flat}]})
            self.assertEqual(status, 200, o)
            out = o["outputs"][0]
            self.assertEqual(out["shape"], [2, 10])
            got = [out["data"][:10], out["data"][10:]]
            self.assertRowsClose(got, self.mlp_ref(x[:2]), what=f"{m} over OIP")
        d, c = self.srv.describe("mlp"), self.srv.describe("mlp_cpu")
        self.assertEqual(d["deviceType"], ON)
        self.assertEqual(d["workers"][0]["gpu"], ON == "gpu")
        self.assertEqual(c["deviceType"], "cpu")
        self.assertFalse(c["workers"][0]["gpu"])
        log = self.srv.log()
        self.assertRegex(log, r"loaded \S+/mlp/model\.pt onto " + ("cuda:0" if ON == "gpu"
                                                                    else "cpu"))
        self.assertRegex(log, r"loaded \S+/mlp_cpu/model\.pt onto cpu")

    def test_2_cuda_graphs_answer_as_the_eager_forward(self):
        import torch
        g = torch.Generator().manual_seed(4)
        x = (torch.rand(4, 64, generator=g) * 4 - 2).tolist()
        for n in (1, 2, 1, 4, 2):  # each size captured once, then replayed
            status, got = self.srv.post_json("/predictions/mlp_graph", {"data": x[:n]})
            self.assertEqual(status, 200, got)
            self.assertRowsClose(got, self.mlp_ref(x[:n]), what=f"mlp_graph, {n} row(s)")
        log = self.srv.log()
        if NO_GPU:
            self.assertIn("handler.cuda_graph: the model is on the CPU, not on a GPU; forward "
                          "runs eagerly", log)
            self.skipTest(f"graphs captured and replayed: {NO_GPU}")
        for n in (1, 2, 4):
            self.assertRegex(log, rf"CUDA graph captured for inputs Float\[{n}x64\] in ")
        self.assertNotIn("no CUDA graph for inputs", log)

    # ------------------------------------------------------------------ resnet18

    def top5_drift(self, model, tol):
        """The largest difference of model's top-5 probabilities from resnet18_cpu's."""
        drift = 0.0
        for k, jpg in enumerate(jpegs()):
            ans = {}
            for m in (model, "resnet18_cpu"):
                status, body, _ = self.srv.request("POST", f"/predictions/{m}", jpg,
                                                   {"Content-Type": "image/jpeg"})
                self.assertEqual(status, 200, body)
                ans[m] = json.loads(body)
            g, c = ans[model], ans["resnet18_cpu"]
            self.assertEqual(len(g), 5)
            top_g, top_c = next(iter(g)), next(iter(c))
            if top_g != top_c:  # only between two classes as likely as each other
                self.assertLessEqual(abs(c[top_c] - c.get(top_g, 0.0)), tol, (k, g, c))
            for label in set(g) | set(c):
                if label in g and label in c:
                    drift = max(drift, abs(g[label] - c[label]))
                    self.assertLessEqual(abs(g[label] - c[label]), tol, (k, label, g, c))
                else:  # in one top-5 only: it must sit at the other's cut-off
                    p = g.get(label, c.get(label))
                    other = c if label in g else g
                    self.assertLessEqual(p, min(other.values()) + tol, (k, label, g, c))
        print(f"\n{model} top-5 probabilities ({ON}) against resnet18_cpu: largest difference "
              f"{drift:.2e}", file=sys.stderr)
        return drift

    def test_3_resnet18_top5_on_the_gpu_agrees_with_the_cpu(self):
        self.top5_drift("resnet18", TOP5_TOL)
        self.top5_drift("resnet18_auto", DECODE_TOL)

    # ------------------------------------------------------------------ streaming

    def greedy_tie(self, prompt, a, b):
        """Where the greedy texts a (GPU) and b (CPU) first differ, whether the CPU's logits of
        the two characters are within TIE_TOL of each other (cuDNN's GRU may run in TF32 on
        the GPU, so a near tie may go either way); the decode replayed in this Python's torch
        on the CPU, from char_lm's model.pt and vocab.json."""
        import torch
        m = mar_module("char_lm.mar")
        with zipfile.ZipFile(os.path.join(STORE, "char_lm.mar")) as z:
            voc = json.loads(z.read("vocab.json"))
        chars = voc["vocab"]

        def tid(ch):
            return chars.index(ch) if ch in chars else chars.index(" ")

        h = torch.zeros(1, voc["layers"], voc["hidden"])
        with torch.no_grad():
            logits, h = m(torch.tensor([[tid(ch) for ch in (prompt or "\n")]]), h)
            for ca, cb in zip(a, b):
                if ca != cb:
                    gap = abs(logits[0, tid(ca)] - logits[0, tid(cb)]).item()
                    return gap <= TIE_TOL, gap
                logits, h = m(torch.tensor([[tid(ca)]]), h)
        return False, None

    def test_4_streaming_handlers_on_the_gpu(self):
        for prompt in ("The keeper", "The baker", ""):
            texts = {}
            for m in ("char_lm", "char_lm_cpu"):
                status, chunks = self.srv.stream(
                    f"/predictions/{m}", json.dumps({"prompt": prompt, "max_new_tokens": 40}),
                    {"Content-Type": "application/json"})
                self.assertEqual(status, 200)
                self.assertGreater(len(chunks), 1, f"{m} did not stream")
                texts[m] = b"".join(chunks).decode()
            self.assertEqual(len(texts["char_lm"]), 40)
            if texts["char_lm"] != texts["char_lm_cpu"]:
                tie, gap = self.greedy_tie(prompt, texts["char_lm"], texts["char_lm_cpu"])
                self.assertTrue(tie, (prompt, texts, gap))
        import torch
        status, chunks = self.srv.stream("/predictions/pystream", b"3",
                                         {"Content-Type": "text/plain"})
        self.assertEqual(status, 200)
        lines = b"".join(chunks).decode().splitlines()
        self.assertEqual(len(lines), 3, lines)
        self.assertGreater(len(chunks), 1, "pystream did not stream")
        x = torch.arange(4, dtype=torch.float32)
        for k, line in enumerate(lines):
            dev, gpu, val = line.split()
            self.assertEqual(dev, "cuda:0" if ON == "gpu" else "cpu")
            self.assertEqual(gpu, "0" if ON == "gpu" else "None")
            with torch.no_grad():
                want = self.lin(x * (k + 1)).sum().item()
            self.assertAlmostEqual(float(val), want, delta=1e-3)

    # ------------------------------------------------------------------ describe and metrics

    def test_5_describe_and_metrics_show_the_device(self):
        time.sleep(1.2)  # metric_time_interval=1: a sample after the workers loaded
        text = self.srv.metrics()
        self.assertIn("# TYPE CPUUtilization gauge", text)
        w = self.srv.describe("mlp")["workers"][0]
        log = self.srv.log()
        if NO_GPU:
            self.assertEqual((w["gpu"], w["gpuUsage"]), (False, "N/A"))
            self.assertNotIn("GPUUtilization", text)
            self.assertIn("Number of GPUs: 0", log)
            self.skipTest(f"the device in describe and /metrics: {NO_GPU}")
        self.assertTrue(w["gpu"])
        self.assertRegex(w["gpuUsage"], r"^gpuId::0 utilization\.gpu::\d+ % utilization\.memory::"
                                        r"\d+ % memory\.used::[\d,]+ MiB$")
        used = int(re.search(r"memory\.used::([\d,]+) MiB", w["gpuUsage"]).group(1).replace(",",
                                                                                          ""))
        self.assertGreater(used, 0)
        for name, unit in (("GPUMemoryUtilization", "Percent"), ("GPUMemoryUsed", "Megabytes"),
                           ("GPUUtilization", "Percent")):
            self.assertIn(f"# HELP {name} Torchserve prometheus gauge metric with unit: {unit}",
                          text)
            m = re.search(rf'^{name}{{Level="Host",DeviceId="0",Hostname="[^"]+",}} ([0-9.e+]+)$',
                          text, re.M)
            self.assertTrue(m, text)
        mem = float(re.search(r'^GPUMemoryUsed\{[^}]*DeviceId="0"[^}]*\} ([0-9.e+]+)$', text,
                              re.M).group(1))
        self.assertGreater(mem, 0)
        self.assertRegex(log, r"Number of GPUs: [1-9]")
        self.assertRegex(log, r"GPU 0: \S")
        self.assertRegex(log, r"workers: libtorch \S+, CUDA available, [1-9]")
        self.assertEqual(self.srv.describe("mlp_cpu")["workers"][0]["gpuUsage"], "N/A")

    # ------------------------------------------------------------------ a worker's death

    def test_9_kill_9_of_a_gpu_worker_respawns_with_the_memory_back(self):
        """The GPU's memory.used after the respawn is what it was before the kill: the dead
        worker's context and model (half a GB at least) were given back, not leaked next to
        its successor's. nvidia-smi also names the processes holding memory, when it sees the
        workers' pid namespace (not from inside some containers): then the dead pid is gone."""
        pid = self.srv.describe("mlp")["workers"][0]["pid"]
        before = apps = None
        if not NO_GPU:
            before = int(nvidia_smi("--query-gpu=memory.used")[0][0])
            apps = {int(p): int(m) for p, m in nvidia_smi("--query-compute-apps=pid,used_memory")
                    if p.isdigit()}
        os.kill(pid, signal.SIGKILL)
        deadline = time.time() + 180
        new = None
        while time.time() < deadline:
            w = self.srv.describe("mlp")["workers"][0]
            if w["pid"] not in (pid, -1) and w["status"] == "READY":
                new = w["pid"]
                break
            time.sleep(0.2)
        self.assertIsNotNone(new, self.srv.log()[-3000:])
        status, got = self.srv.post_json("/predictions/mlp", {"data": [[0.25] * 64]})
        self.assertEqual(status, 200, got)
        self.assertRowsClose(got, self.mlp_ref([[0.25] * 64]))
        if NO_GPU:
            self.skipTest(f"the GPU memory of the dead worker: {NO_GPU}")
        time.sleep(2)  # the driver frees a dead context's memory as the process is reaped
        after = int(nvidia_smi("--query-gpu=memory.used")[0][0])
        print(f"\nGPU memory.used: {before} MiB before kill -9, {after} MiB after the respawn",
              file=sys.stderr)
        self.assertLessEqual(after, before + 256, (before, after))
        if pid in apps:
            now = {int(p) for p, _ in nvidia_smi("--query-compute-apps=pid,used_memory")
                   if p.isdigit()}
            self.assertNotIn(pid, now, "the dead worker still holds GPU memory")
            self.assertIn(new, now)


if __name__ == "__main__":
    unittest.main(verbosity=2)
