"""The forward optimized for inference (issue 37.2): handler.optimize, on the C torchscript
handler and on BaseHandler (Python) alike.

- Levels inference (the default), freeze and none, on resnet18 (torchvision's), the MNIST
  example's net, the mlp and a model whose control flow depends on its input: every answer is
  within 1e-4 of the model as written, run eagerly by torch here (optimizing reorders float
  operations; resnet18 moves by about 1e-5). Both branches of the control-flow model are
  taken, which a traced model would not do.
- The load's log line says what was done: on the C path the oneDNN count of resnet18's
  convolutions; on the Python path scripted, frozen, optimized, checked on an example input.
- A Python model that torch.jit.script cannot compile, or that has methods other than forward,
  is served as loaded, with a log line naming the reason, and answers as eager torch does.
- handler.jit_freeze keeps its meaning; values neither key takes, and the two keys
  disagreeing, are refused at load with the key's name, on both paths.
"""
import json
import os
import re
import shutil
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from conftest import MODEL_STORE  # noqa: E402

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

TOL = 1e-4

# -------------------------------------------------------------------------------- the models

MNIST_PY = '''
import torch
import torch.nn.functional as F
from torch import nn


class MnistNet(nn.Module):
    """The layers of TorchServe's MNIST example: two convolutions, max pooling, dropout, two
    linear layers, log-softmax."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, 1)
        self.conv2 = nn.Conv2d(32, 64, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(9216, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv2(F.relu(self.conv1(x)))), 2)
        x = torch.flatten(self.dropout1(x), 1)
        x = self.dropout2(F.relu(self.fc1(x)))
        return F.log_softmax(self.fc2(x), dim=1)
'''

BRANCHY_PY = '''
import torch
from torch import nn


class Branchy(nn.Module):
    """Which layers run depends on the input's values: a trace would keep one branch."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.pos = nn.Linear(64, 6)
        self.neg = nn.Linear(64, 6)

    def forward(self, x):
        h = torch.flatten(torch.relu(self.bn(self.conv(x))), 1)
        if bool(x.sum() > 0):
            y = self.pos(h)
        else:
            y = torch.tanh(self.neg(h)) * 3
        for _ in range(int((x[:, 0] > 0).sum()) % 3):
            y = y * 0.5 + 1
        return y
'''

UNSCRIPTABLE_PY = '''
import torch
from torch import nn


class Unscriptable(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(64, 4)

    def forward(self, x):
        # a round trip through numpy: TorchScript has no Tensor.numpy()
        return self.fc(torch.from_numpy(x.numpy() * 2))
'''

EXTRA_METHOD_PY = '''
import torch
from torch import nn


class WithEmbed(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(64, 4)

    def embed(self, x):
        return self.fc(x)

    def forward(self, x):
        return torch.relu(self.embed(x))
'''

# a BaseHandler that takes raw float32 bodies of handler.input_shape and answers rows
RAW_HANDLER = '''
import torch
from ts.torch_handler.base_handler import BaseHandler


class RawHandler(BaseHandler):
    def preprocess(self, data):
        shape = self.model_yaml_config["handler"]["input_shape"]
        return torch.stack([torch.frombuffer(bytearray(r["body"]), dtype=torch.float32)
                            .view(shape) for r in data])

    def postprocess(self, out):
        return [row.tolist() for row in out]

    def describe_handle(self):
        # what handlers read of self.model: its class, parameters, whether forward was replaced
        return {"model": type(self.model).__name__,
                "parameters": sum(p.numel() for p in self.model.parameters()),
                "forward": "optimized" if "forward" in vars(self.model) else "as loaded"}
'''


def load_class(src, name):
    """Class name of the model file src, imported from a file (torch.jit.script reads the
    source of what it compiles)."""
    import importlib.util
    import tempfile
    d = tempfile.mkdtemp(prefix="tsc-opt-src-")
    path = os.path.join(d, f"{name.lower()}.py")
    with open(path, "w") as f:
        f.write(src)
    spec = importlib.util.spec_from_file_location(f"tsc_opt_{name.lower()}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, name)


def resnet18_files():
    """model.py and the state dict of model-store/resnet18.mar."""
    import zipfile
    with zipfile.ZipFile(os.path.join(MODEL_STORE, "resnet18.mar")) as z:
        return z.read("model.py").decode(), z.read("resnet18.pt")


def build_models():
    """name -> (model.py source, class name, eager module, per-sample input shape)."""
    import io
    torch.manual_seed(0)
    r18_src, r18_weights = resnet18_files()
    r18 = load_class(r18_src, "ResNet18")()
    r18.load_state_dict(torch.load(io.BytesIO(r18_weights)))
    mnist = load_class(MNIST_PY, "MnistNet")()
    branchy = load_class(BRANCHY_PY, "Branchy")()
    with torch.no_grad():  # batch-norm statistics that are not the identity
        branchy.bn.running_mean.uniform_(-0.5, 0.5)
        branchy.bn.running_var.uniform_(0.5, 2)
    models = {
        "resnet18": (r18_src, "ResNet18", r18, [3, 224, 224]),
        "mnist": (MNIST_PY, "MnistNet", mnist, [1, 28, 28]),
        "branchy": (BRANCHY_PY, "Branchy", branchy, [2, 4, 4]),
    }
    for m in models.values():
        m[2].eval()
    return models


def mlp_module():
    from conftest import mar_module
    return mar_module("mlp")


def inputs(shape, n, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.rand([n] + shape, generator=g) * 4 - 2


def branchy_inputs():
    """Four inputs of one sample each: positive and negative sums, 0-2 turns of the loop."""
    xs = []
    for seed, sign in ((1, 1), (2, -1), (3, 1), (4, -1)):
        x = inputs([2, 4, 4], 1, seed).abs() * sign
        x[:, 0, :, : seed % 3] *= -1
        xs.append(x)
    return xs


def eager(m, x):
    with torch.no_grad():
        return m(x)


def assert_close(got, want, what):
    got = torch.tensor(got, dtype=torch.float32)
    assert got.shape == want.shape, f"{what}: shape {tuple(got.shape)}, not {tuple(want.shape)}"
    diff = (got - want).abs().max().item()
    assert diff <= TOL, f"{what}: max abs diff {diff}"
    return diff


def post_raw(s, name, x, torchscript):
    """x (one or more samples) as raw float32: the C handler takes its shape from X-Shape."""
    headers = {"Content-Type": "application/octet-stream"}
    if torchscript:
        headers["X-Shape"] = ",".join(str(d) for d in x.shape)
    r = s.post(f"/predictions/{name}", data=x.contiguous().numpy().tobytes(), headers=headers,
               timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


# ------------------------------------------------------------------------- the C torchscript path

def ts_store(tmp_path, models, level_yaml):
    store = tmp_path / "store"
    for name, (module, shape) in models.items():
        d = store / name
        (d / "MAR-INF").mkdir(parents=True)
        module.save(str(d / "model.pt"))
        (d / "MAR-INF" / "MANIFEST.json").write_text(json.dumps({"runtime": "python", "model": {
            "modelName": name, "serializedFile": "model.pt", "handler": "torchscript",
            "modelVersion": "1.0"}}))
        shape_yaml = "[" + ", ".join(str(n) for n in shape) + "]"
        (d / "model-config.yaml").write_text(
            f"minWorkers: 1\nmaxWorkers: 1\nhandler:\n  input_shape: {shape_yaml}\n{level_yaml}")
    return str(store)


@pytest.fixture(scope="module")
def models():
    return build_models()


@pytest.mark.parametrize("level", ["inference", "freeze", "default"])
def test_torchscript_handler_levels_answer_within_1e_4(server_factory, tmp_path, models, level):
    scripted = {name: (torch.jit.script(m[2]), m[3]) for name, m in models.items()}
    scripted["mlp"] = (mlp_module(), [64])
    yaml = "" if level == "default" else f"  optimize: {level}\n"
    s = server_factory(models=list(scripted), store=ts_store(tmp_path, scripted, yaml))
    shown = "inference" if level == "default" else level
    for name in scripted:
        s.wait_ready(name)
    froze = r"froze forward in [0-9.]+ ms \(handler\.optimize: " + shown + r"\): "
    # one line per model (they load side by side)
    s.wait_log("(?s)" + "(.*".join([froze] * 4) + ")" * 3, timeout=120)
    # resnet18's 20 convolutions on oneDNN at the inference level, none when only frozen
    lines = [ln for ln in s.log().splitlines() if "froze forward" in ln]
    assert len(lines) == 4, lines
    onednn = [int(re.search(r"(\d+) on oneDNN", ln).group(1)) for ln in lines]
    if shown == "inference":
        assert max(onednn) >= 20, lines
    else:
        assert max(onednn) == 0, lines
    for name, (module, shape) in scripted.items():
        ref = models[name][2] if name in models else module
        if name == "branchy":
            xs = branchy_inputs()
        else:
            xs = [inputs(shape, 1, 5), inputs(shape, 3, 6)]
        for x in xs:
            assert_close(post_raw(s, name, x, True), eager(ref, x),
                         f"{name} ({shown}), {x.shape[0]} sample(s)")


def test_torchscript_handler_keys(server_factory, tmp_path, models):
    mlp = {"mlp": (mlp_module(), [64])}
    cases = [("  optimize: none\n", "serving forward as loaded (handler.optimize: none)"),
             ("  optimize: false\n", "serving forward as loaded (handler.optimize: none)"),
             ("  optimize: true\n", "(handler.optimize: inference): 3 linear"),
             ("  jit_freeze: true\n", "(handler.optimize: freeze): 3 linear"),
             ("  jit_freeze: false\n  optimize: none\n",
              "serving forward as loaded (handler.optimize: none)")]
    for i, (yaml, want) in enumerate(cases):
        d = tmp_path / str(i)
        d.mkdir()
        s = server_factory(models=["mlp"], store=ts_store(d, mlp, yaml))
        s.wait_ready("mlp")
        s.wait_log(re.escape(want))
        x = inputs([64], 2, 7)
        assert_close(post_raw(s, "mlp", x, True), eager(mlp["mlp"][0], x), yaml)
        s.stop()
    refused = [("  optimize: fast\n",
                'handler.optimize: "fast" is not inference, freeze, none, true or false'),
               ("  optimize: inference\n  jit_freeze: true\n",
                "handler.optimize: inference and handler.jit_freeze: true disagree")]
    for i, (yaml, msg) in enumerate(refused):
        d = tmp_path / f"r{i}"
        d.mkdir()
        s = server_factory(store=ts_store(d, mlp, yaml), load=False,
                           config={"enable_model_api": "true"})
        r = s.post("/models?url=mlp&initial_workers=1&synchronous=true", api="management",
                   timeout=120)
        assert r.status_code == 500 and msg in r.json()["message"], r.text
        s.stop()


# --------------------------------------------------------------------------- the Python path

def py_model_dir(store, name, model_src, state_dict, shape, yaml="", handler=RAW_HANDLER):
    d = store / name
    (d / "MAR-INF").mkdir(parents=True)
    (d / "model.py").write_text(model_src)
    torch.save(state_dict, str(d / "weights.pt"))
    (d / "handler.py").write_text(handler)
    (d / "MAR-INF" / "MANIFEST.json").write_text(json.dumps({"runtime": "python", "model": {
        "modelName": name, "serializedFile": "weights.pt", "modelFile": "model.py",
        "handler": "handler.py", "modelVersion": "1.0"}}))
    shape_yaml = "[" + ", ".join(str(n) for n in shape) + "]"
    (d / "model-config.yaml").write_text(
        f"minWorkers: 1\nmaxWorkers: 1\nhandler:\n  input_shape: {shape_yaml}\n{yaml}")


def py_ts_dir(store, name, module, shape, yaml=""):
    """A TorchScript file behind the same BaseHandler (as mlp_py serves the mlp)."""
    d = store / name
    (d / "MAR-INF").mkdir(parents=True)
    module.save(str(d / "model.pt"))
    (d / "handler.py").write_text(RAW_HANDLER)
    (d / "MAR-INF" / "MANIFEST.json").write_text(json.dumps({"runtime": "python", "model": {
        "modelName": name, "serializedFile": "model.pt", "handler": "handler.py",
        "modelVersion": "1.0"}}))
    shape_yaml = "[" + ", ".join(str(n) for n in shape) + "]"
    (d / "model-config.yaml").write_text(
        f"minWorkers: 1\nmaxWorkers: 1\nhandler:\n  input_shape: {shape_yaml}\n{yaml}")


def test_base_handler_optimizes_eager_and_torchscript_models(server_factory, tmp_path, models):
    store = tmp_path / "store"
    for name, (src, _cls, module, shape) in models.items():
        py_model_dir(store, name, src, module.state_dict(), shape)
    mlp = mlp_module()
    py_ts_dir(store, "mlp", mlp, [64])
    # the same eager resnet18 with the optimization off: the baseline's answers
    src, _cls, r18, shape = models["resnet18"]
    py_model_dir(store, "r18plain", src, r18.state_dict(), shape, "  optimize: none\n")
    names = list(models) + ["mlp", "r18plain"]
    s = server_factory(models=names, store=str(store))
    for name in names:
        s.wait_ready(name, timeout=180)
    done = (r"optimized {} in [0-9]+ ms \(handler\.optimize: inference\): {}frozen, optimized "
            r"for inference, checked on an example input")
    for name in models:
        s.wait_log(done.format(r"model\.py", "scripted, "))
    s.wait_log(done.format(r"model\.pt", ""))  # already TorchScript: not scripted again
    s.wait_log(r"serving model\.py as loaded \(handler\.optimize: none\)")
    # the handler's self.model is still the model it loaded, with forward replaced
    for name, want in (("resnet18", {"model": "ResNet18", "parameters": 11689512,
                                     "forward": "optimized"}),
                       ("r18plain", {"model": "ResNet18", "parameters": 11689512,
                                     "forward": "as loaded"})):
        r = s.get(f"/models/{name}?customized=true", api="management")
        assert r.json()[0]["customizedMetadata"] == want, r.text
    for name in names:
        module = mlp if name == "mlp" else models["resnet18" if name == "r18plain" else name][2]
        shape = [64] if name == "mlp" else models["resnet18" if name == "r18plain" else name][3]
        xs = branchy_inputs() if name == "branchy" else [inputs(shape, 1, 11), inputs(shape, 2, 12)]
        for x in xs:
            rows = [post_raw(s, name, x[i:i + 1], False) for i in range(x.shape[0])]
            diff = assert_close(rows, eager(module, x), f"{name} over BaseHandler")
            if name == "r18plain":  # the model as loaded: torch's own answer
                assert diff <= 1e-5, diff


def test_base_handler_serves_as_loaded_what_it_cannot_optimize(server_factory, tmp_path):
    store = tmp_path / "store"
    torch.manual_seed(3)
    unscriptable = load_class(UNSCRIPTABLE_PY, "Unscriptable")().eval()
    with_embed = load_class(EXTRA_METHOD_PY, "WithEmbed")().eval()
    py_model_dir(store, "unscriptable", UNSCRIPTABLE_PY, unscriptable.state_dict(), [64])
    py_model_dir(store, "embed", EXTRA_METHOD_PY, with_embed.state_dict(), [64])
    s = server_factory(models=["unscriptable", "embed"], store=str(store))
    for name in ("unscriptable", "embed"):
        s.wait_ready(name, timeout=120)
    s.wait_log(r"serving model\.py as loaded: torch\.jit\.script cannot compile it \(.*numpy")
    s.wait_log(r"serving model\.py as loaded: it has methods other than forward \(embed\)")
    for name, module in (("unscriptable", unscriptable), ("embed", with_embed)):
        x = inputs([64], 1, 13)
        got = post_raw(s, name, x, False)
        assert torch.equal(torch.tensor([got]), eager(module, x)), name


def test_base_handler_keys_are_checked(server_factory, tmp_path):
    torch.manual_seed(4)
    m = load_class(EXTRA_METHOD_PY, "WithEmbed")().eval()
    cases = [("bad", "  optimize: fast\n",
              'handler.optimize: "fast" is not inference, freeze, none, true or false'),
             ("both", "  optimize: none\n  jit_freeze: true\n",
              "handler.optimize: none and handler.jit_freeze: true disagree"),
             ("fz", "  jit_freeze: maybe\n", 'handler.jit_freeze: "maybe" is not true or false')]
    store = tmp_path / "store"
    for name, yaml, _ in cases:
        py_model_dir(store, name, EXTRA_METHOD_PY, m.state_dict(), [64], yaml)
    s = server_factory(store=str(store), load=False, config={"enable_model_api": "true"})
    for name, _, msg in cases:
        r = s.post(f"/models?url={name}&initial_workers=1&synchronous=true", api="management",
                   timeout=120)
        assert r.status_code == 500 and msg in r.json()["message"], r.text
    # jit_freeze: false is none, as on the C path
    shutil.rmtree(store / "bad")
    py_model_dir(store, "off", EXTRA_METHOD_PY, m.state_dict(), [64], "  jit_freeze: false\n")
    r = s.post("/models?url=off&initial_workers=1&synchronous=true", api="management",
               timeout=120)
    assert r.status_code == 200, r.text
    s.wait_log(r"serving model\.py as loaded \(handler\.optimize: none\)")
