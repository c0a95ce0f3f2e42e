"""TorchServe's other built-in handler names, served by our ts package (issue 11): small models
written here, archived with our archiver (--handler NAME --model-file model.py
--serialized-file state dict), registered, and their answers compared with torch.

- object_detector: a torchvision-style detector; detections with score >= 0.5, as
  {label: box, "score": s}, labels from index_to_name.json;
- image_segmenter: {"out": [N, K, H, W]}; per pixel [class, probability];
- text_classifier: an EmbeddingBag model called as model(tokens, offsets), a dict vocabulary
  (no torchtext), TorchServe's text clean-up and bigrams; {label: probability} for every class;
- ts.utils.util.map_class_to_label and ts.handler_utils.timer.timed as user handlers import them.
"""
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from conftest import BIN  # noqa: E402

torch = pytest.importorskip("torch")
Image = pytest.importorskip("PIL.Image")
transforms = pytest.importorskip("torchvision.transforms")

TOL = 1e-5
ARCHIVER = os.path.join(BIN, "torchserve-c-archiver")

DETECTOR_PY = '''
import torch


class Detector(torch.nn.Module):
    """Per image: 4 fixed boxes scaled by the image's mean, scores from a linear layer."""

    def __init__(self):
        super().__init__()
        self.score = torch.nn.Linear(3, 4)

    def forward(self, images):
        out = []
        for img in images:
            m = img.mean(dim=(1, 2))
            scores = torch.sigmoid(self.score(m))
            boxes = torch.tensor([[0, 0, 10, 10], [5, 5, 20, 20], [1, 2, 3, 4], [7, 7, 9, 9]],
                                 dtype=torch.float32) * (1 + m.sum())
            out.append({"boxes": boxes, "labels": torch.tensor([1, 2, 3, 1]), "scores": scores})
        return out
'''

SEGMENTER_PY = '''
import torch


class Segmenter(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.pool = torch.nn.AvgPool2d(28)

    def forward(self, x):
        return {"out": self.conv(self.pool(x))}
'''

TEXT_PY = '''
import torch


class TextNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embedding = torch.nn.EmbeddingBag(64, 8, mode="mean")
        self.fc = torch.nn.Linear(8, 3)

    def forward(self, text, offsets):
        return self.fc(self.embedding(text, offsets))
'''

USER_HANDLER_PY = '''
from ts.handler_utils.timer import timed
from ts.torch_handler.image_classifier import ImageClassifier
from ts.utils.util import map_class_to_label


class Two(ImageClassifier):
    """Top 2 through the helpers user handlers import."""

    @timed
    def postprocess(self, data):
        ps = data.softmax(dim=1)
        probs, classes = ps.topk(2, dim=1)
        return map_class_to_label(probs.tolist(), self.mapping, classes.tolist())
'''

CLASSIFIER_PY = '''
import torch


class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.pool = torch.nn.AdaptiveAvgPool2d(2)
        self.fc = torch.nn.Linear(12, 4)

    def forward(self, x):
        return self.fc(self.pool(x).flatten(1))
'''


def load_module(src, cls):
    ns = {}
    exec(compile(src, "model.py", "exec"), ns)
    return ns[cls]


def build(work, name, handler, model_src, cls, extra=None, seed=0):
    d = os.path.join(work, name)
    os.makedirs(d)
    torch.manual_seed(seed)
    net = load_module(model_src, cls)().eval()
    with open(os.path.join(d, "model.py"), "w") as f:
        f.write(model_src)
    torch.save(net.state_dict(), os.path.join(d, "weights.pt"))
    args = [ARCHIVER, "--model-name", name, "--handler", handler, "--model-file", "model.py",
            "--serialized-file", "weights.pt", "--export-path", work]
    files = []
    for fname, content in (extra or {}).items():
        p = os.path.join(d, fname)
        if isinstance(content, bytes):
            open(p, "wb").write(content)
        elif callable(content):
            content(p)
        else:
            open(p, "w").write(content)
        if not fname.endswith(".py"):
            files.append(fname)
    if files:
        args += ["--extra-files", ",".join(files)]
    r = subprocess.run(args, cwd=d, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return net


def png(seed, size=(64, 48)):
    g = torch.Generator().manual_seed(seed)
    arr = (torch.rand(size[1], size[0], 3, generator=g) * 255).to(torch.uint8).numpy()
    buf = io.BytesIO()
    Image.fromarray(arr, "RGB").save(buf, "PNG")
    return buf.getvalue()


@pytest.fixture(scope="module")
def served():
    from conftest import start_server
    work = tempfile.mkdtemp(prefix="tsc-builtin-")
    labels = {"1": "cat", "2": "dog", "3": ["n000", "bird"]}
    nets = {
        "det": build(work, "det", "object_detector", DETECTOR_PY, "Detector",
                     {"index_to_name.json": json.dumps(labels)}),
        "seg": build(work, "seg", "image_segmenter", SEGMENTER_PY, "Segmenter"),
        "txt": build(work, "txt", "text_classifier", TEXT_PY, "TextNet",
                     {"index_to_name.json": json.dumps({"0": "neg", "1": "neu", "2": "pos"}),
                      "source_vocab.pt": lambda p: torch.save(VOCAB, p)}),
        "two": build(work, "two", "two.py", CLASSIFIER_PY, "Tiny",
                     {"two.py": USER_HANDLER_PY,
                      "index_to_name.json": json.dumps({str(i): f"c{i}" for i in range(4)})}),
    }
    tmp = tempfile.mkdtemp(prefix="tsc-test-")
    store = os.path.join(tmp, "store")
    os.makedirs(store)
    for n in nets:
        shutil.copy(os.path.join(work, f"{n}.mar"), store)
    s = start_server(tmp, models=list(nets), store=store)
    try:
        for n, body in (("det", png(0)), ("seg", png(0)), ("txt", b"hello"), ("two", png(0))):
            s.wait_ready(n, body={"data": body}, timeout=120)
        yield s, nets
    finally:
        s.stop()
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)


WORDS = ["<unk>", "the", "movie", "was", "not", "good", "great", "i", "would", "do", "it",
         "is", "bad", "the movie", "movie was", "was not", "not good", "i would", "would not"]
VOCAB = {w: i for i, w in enumerate(WORDS)}


def to_tensor_image(data):
    return transforms.ToTensor()(Image.open(io.BytesIO(data)))


def test_object_detector(served):
    s, nets = served
    labels = {1: "cat", 2: "dog", 3: "bird"}
    for seed in range(3):
        data = png(seed)
        r = s.post("/predictions/det", data=data, timeout=60)
        assert r.status_code == 200, r.text
        with torch.no_grad():
            out = nets["det"]([to_tensor_image(data)])[0]
        want = [(labels[int(lab)], box.tolist(), float(sc))
                for lab, box, sc in zip(out["labels"], out["boxes"], out["scores"]) if sc >= 0.5]
        got = r.json()
        assert isinstance(got, list) and len(got) == len(want), (got, want)
        for g, (lab, box, sc) in zip(got, want):
            assert set(g) == {lab, "score"}, g
            assert max(abs(a - b) for a, b in zip(g[lab], box)) <= TOL * 100, (g, box)
            assert abs(g["score"] - sc) <= TOL, (g, sc)


def test_image_segmenter(served):
    s, nets = served
    data = png(5, size=(300, 260))
    r = s.post("/predictions/seg", data=data, timeout=60)
    assert r.status_code == 200, r.text
    tf = transforms.Compose([transforms.Resize(256), transforms.CenterCrop(224),
                             transforms.ToTensor(),
                             transforms.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
    with torch.no_grad():
        out = nets["seg"](tf(Image.open(io.BytesIO(data))).unsqueeze(0))["out"]
    best = torch.softmax(out, dim=1).max(dim=1)
    got = torch.tensor(r.json())
    assert got.shape == (8, 8, 2), got.shape
    assert torch.equal(got[..., 0], best.indices[0].float())
    assert (got[..., 1] - best.values[0]).abs().max() <= TOL


def expected_text(net, text):
    # TorchServe's clean-up of this text: lower case, "wasn't" -> "was not", punctuation out
    tokens = ["the", "movie", "was", "not", "good", "i", "would", "not", "do", "it"]
    grams = tokens + [f"{a} {b}" for a, b in zip(tokens, tokens[1:])]
    ids = torch.tensor([VOCAB.get(t, 0) for t in grams])
    with torch.no_grad():
        return torch.softmax(net(ids, torch.tensor([0])), dim=1)[0].tolist()


def test_text_classifier(served):
    s, nets = served
    text = "<b>The MOVIE</b> wasn't good; I wouldn't do it!"
    r = s.post("/predictions/txt", data=text.encode(), timeout=60)
    assert r.status_code == 200, r.text
    got = r.json()
    want = expected_text(nets["txt"], text)
    assert list(got) == ["neg", "neu", "pos"], got
    for (label, prob), w in zip(got.items(), want):
        assert abs(prob - w) <= TOL, (label, prob, w)


def test_user_handler_with_util_helpers(served):
    s, nets = served
    data = png(9)
    r = s.post("/predictions/two", data=data, timeout=60)
    assert r.status_code == 200, r.text
    tf = transforms.Compose([transforms.Resize(256), transforms.CenterCrop(224),
                             transforms.ToTensor(),
                             transforms.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
    with torch.no_grad():
        p = torch.softmax(nets["two"](tf(Image.open(io.BytesIO(data))).unsqueeze(0)), dim=1)[0]
    top = p.topk(2)
    got = r.json()
    assert list(got) == [f"c{int(i)}" for i in top.indices], got
    for prob, w in zip(got.values(), top.values):
        assert abs(prob - float(w)) <= TOL


def test_explanations_are_refused_by_name(served):
    s, _ = served
    r = s.post("/explanations/two", data=png(1), timeout=60)
    assert r.status_code == 500, r.text
    assert "explanations need Captum" in r.json()["message"], r.text
