"""The built-in image_classifier (our ts package) serving the resnet18 example (issue 11).

- HTTP and gRPC, with JPEG and PNG images made here with PIL: the answer is the top-5
  {label: probability}, and equals what torch computes here with torchvision's transforms for the
  same image and the same weights (taken out of model-store/resnet18.mar), within 1e-5;
- 8 concurrent requests run as one batch of 8 (x-ts-worker-batch: 8 on every answer), each with
  its own image's answer;
- a body that is not an image is a 400 naming the problem, and the worker keeps serving; in a
  batch of 7 good images and 1 bad, the bad one alone fails (400) and the 7 are answered from
  the one forward of the batch (issue 34);
- handler.decode: device (torchvision.io.decode_jpeg and tensor transforms, here on the CPU)
  answers the top 5 of the PIL path, and bad values of the vision keys are refused by name;
- archives from our archiver with --handler x.py --model-file model.py --extra-files
  index_to_name.json serve, as .mar, as .tar.gz, and as the tgz torch-model-archiver writes
  (every entry under NAME/); a missing handler file is refused at archive time.
"""
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
import zipfile

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from conftest import BIN, MODEL_STORE, PYSTUBS  # noqa: E402

sys.path.insert(0, PYSTUBS)
import grpc  # noqa: E402
import inference_pb2 as ipb  # noqa: E402
import inference_pb2_grpc as igrpc  # noqa: E402

torch = pytest.importorskip("torch")
Image = pytest.importorskip("PIL.Image")
transforms = pytest.importorskip("torchvision.transforms")

TOL = 1e-5
ARCHIVER = os.path.join(BIN, "torchserve-c-archiver")


# ---------------------------------------------------------------------------------- reference

@pytest.fixture(scope="module")
def ref():
    """The archive's model.py, weights and labels, loaded by torch in this process."""
    d = tempfile.mkdtemp(prefix="tsc-r18-")
    with zipfile.ZipFile(os.path.join(MODEL_STORE, "resnet18.mar")) as z:
        z.extractall(d)
    manifest = json.load(open(os.path.join(d, "MAR-INF", "MANIFEST.json")))
    assert manifest["model"]["handler"] == "image_classifier"
    assert manifest["model"]["modelFile"] == "model.py"
    sys.path.insert(0, d)
    try:
        import model as model_py
    finally:
        sys.path.remove(d)
    sys.modules.pop("model", None)
    net = model_py.ResNet18()
    net.load_state_dict(torch.load(os.path.join(d, manifest["model"]["serializedFile"])))
    net.eval()
    with open(os.path.join(d, "index_to_name.json")) as f:
        labels = {int(k): v[-1] for k, v in json.load(f).items()}
    tf = transforms.Compose([
        transforms.Resize(256),
        transforms.CenterCrop(224),
        transforms.ToTensor(),
        transforms.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225]),
    ])
    yield {"net": net, "labels": labels, "tf": tf, "dir": d}
    shutil.rmtree(d, ignore_errors=True)


def make_image(seed, fmt, size=(320, 240)):
    """A smooth random RGB image (so JPEG keeps it recognisable), as JPEG or PNG bytes."""
    g = torch.Generator().manual_seed(seed)
    small = (torch.rand(3, 8, 8, generator=g) * 255).to(torch.uint8)
    img = Image.fromarray(small.permute(1, 2, 0).numpy(), "RGB").resize(size, Image.BILINEAR)
    buf = io.BytesIO()
    img.save(buf, fmt)
    return buf.getvalue()


def expected(ref, data):
    """All 1000 probabilities torch gives for these image bytes."""
    x = ref["tf"](Image.open(io.BytesIO(data))).unsqueeze(0)
    with torch.no_grad():
        return torch.softmax(ref["net"](x), dim=1)[0]


def assert_top5(ref, got, data, what):
    p = expected(ref, data)
    top = torch.topk(p, 6)
    # the reference itself must separate its top 5 from the 6th, or the check would be luck
    assert top.values[4] - top.values[5] > 10 * TOL, f"{what}: ambiguous image"
    want = [ref["labels"][int(i)] for i in top.indices[:5]]
    assert isinstance(got, dict) and list(got) == want, f"{what}: got {got}, want {want}"
    by_label = {v: k for k, v in ref["labels"].items()}
    for label, prob in got.items():
        diff = abs(prob - float(p[by_label[label]]))
        assert diff <= TOL, f"{what}: {label}: {prob} vs torch {float(p[by_label[label]])}"


def predict_until_ready(s, model, data, timeout=120):
    import time
    import requests
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        try:
            r = requests.post(s.url(f"/predictions/{model}"), data=data, timeout=60)
            if r.status_code == 200:
                return r
            last = r.text
        except requests.RequestException as e:
            last = e
        time.sleep(0.3)
    raise AssertionError(f"{model} not ready: {last}\n{s.log()[-3000:]}")


# ---------------------------------------------------------------------------------- serving

@pytest.fixture(scope="module")
def srv():
    from conftest import start_server
    tmp = tempfile.mkdtemp(prefix="tsc-test-")
    # maxBatchDelay long enough that 8 concurrent requests always meet in one batch
    s = start_server(tmp, models=["resnet18"], config={"worker_debug_headers": True},
                     yaml={"resnet18": {"batchSize": 8, "maxBatchDelay": 3000}})
    try:
        predict_until_ready(s, "resnet18", make_image(0, "PNG"))
        yield s
    finally:
        s.stop()
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.mark.parametrize("fmt", ["JPEG", "PNG"])
def test_http_top5_equals_torch(srv, ref, fmt):
    for seed in (1, 2):
        data = make_image(seed, fmt)
        ctype = "image/jpeg" if fmt == "JPEG" else "image/png"
        r = srv.post("/predictions/resnet18", data=data, headers={"Content-Type": ctype},
                     timeout=60)
        assert r.status_code == 200, r.text
        assert_top5(ref, r.json(), data, f"HTTP {fmt} seed {seed}")


@pytest.mark.parametrize("fmt", ["JPEG", "PNG"])
def test_grpc_top5_equals_torch(srv, ref, fmt):
    st = igrpc.InferenceAPIsServiceStub(grpc.insecure_channel(f"127.0.0.1:{srv.ports['grpc']}"))
    data = make_image(3, fmt, size=(224, 300))
    r = st.Predictions(ipb.PredictionsRequest(model_name="resnet18", input={"data": data}),
                       timeout=60)
    assert_top5(ref, json.loads(r.prediction), data, f"gRPC {fmt}")


def post_at_once(srv, images):
    """Each image in its own request to resnet18, all released at once: the answers, in order."""
    import requests
    out = [None] * len(images)
    barrier = threading.Barrier(len(images))

    def client(i):
        barrier.wait()
        out[i] = requests.post(srv.url("/predictions/resnet18"), data=images[i], timeout=60)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(len(images))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def test_eight_concurrent_requests_are_one_batch(srv, ref):
    """batchSize 8, maxBatchDelay 3 s: the 8 requests go to the worker together and the handler
    stacks them into one forward; every answer says so and is its own image's answer."""
    images = [make_image(100 + i, "JPEG" if i % 2 else "PNG") for i in range(8)]
    out = post_at_once(srv, images)
    for i, r in enumerate(out):
        assert r is not None and r.status_code == 200, r.text if r is not None else None
        assert r.headers.get("x-ts-worker-batch") == "8", dict(r.headers)
        assert_top5(ref, r.json(), images[i], f"batched request {i}")


def test_not_an_image_is_an_error_and_the_worker_goes_on(srv, ref):
    r = srv.post("/predictions/resnet18", data=b"this is not an image", timeout=60)
    assert r.status_code == 400, r.text
    assert "not an image PIL can read" in r.text, r.text
    data = make_image(7, "PNG")
    r = srv.post("/predictions/resnet18", data=data, timeout=60)
    assert r.status_code == 200, r.text
    assert_top5(ref, r.json(), data, "after the error")


def test_one_bad_image_fails_only_itself(srv, ref):
    """8 concurrent requests, one batch of 8 (maxBatchDelay 3 s): the request whose body is
    not an image gets 400 naming it, the 7 others their own top 5 from one forward of the
    batch (each answer says the call held all 8 requests), and the worker goes on."""
    bad = 5
    images = [make_image(200 + i, "JPEG" if i % 2 else "PNG") for i in range(8)]
    images[bad] = b"\xff\xd8\xff\xe0 a truncated JPEG header and nothing else"
    out = post_at_once(srv, images)
    for i, r in enumerate(out):
        assert r is not None and r.headers.get("x-ts-worker-batch") == "8", \
            (i, r.status_code, dict(r.headers))
        if i == bad:
            assert r.status_code == 400, r.text
            assert "not an image PIL can read" in r.json()["message"], r.text
        else:
            assert r.status_code == 200, (i, r.text)
            assert_top5(ref, r.json(), images[i], f"good request {i} beside a bad one")
    data = make_image(9, "JPEG")
    r = srv.post("/predictions/resnet18", data=data, timeout=60)
    assert r.status_code == 200, r.text
    assert_top5(ref, r.json(), data, "after the batch with a bad image")


# ---------------------------------------------------------------------------------- archives

HANDLER_PY = """\
from ts.torch_handler.image_classifier import ImageClassifier


class TopThree(ImageClassifier):
    topk = 3
"""


def archive(work, ref, fmt, name):
    shutil.copy(os.path.join(ref["dir"], "model.py"), work)
    shutil.copy(os.path.join(ref["dir"], "index_to_name.json"), work)
    shutil.copy(os.path.join(ref["dir"], "resnet18.pt"), work)
    with open(os.path.join(work, "top3.py"), "w") as f:
        f.write(HANDLER_PY)
    r = subprocess.run([ARCHIVER, "--model-name", name, "--handler", "top3.py", "--model-file",
                        "model.py", "--serialized-file", "resnet18.pt", "--extra-files",
                        "index_to_name.json", "--archive-format", fmt, "--export-path", "out"],
                       cwd=work, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr


def retar_under_top_dir(src, dst, name):
    """Our flat tgz rewritten as torch-model-archiver --archive-format tgz writes: files only,
    each under NAME/."""
    with tarfile.open(src) as t_in, tarfile.open(dst, "w:gz") as t_out:
        for m in t_in.getmembers():
            if not m.isfile():
                continue
            data = t_in.extractfile(m).read()
            info = tarfile.TarInfo(f"{name}/{m.name.lstrip('./')}")
            info.size = len(data)
            t_out.addfile(info, io.BytesIO(data))


def test_python_handler_archives_serve(server_factory, ref):
    work = tempfile.mkdtemp(prefix="tsc-arch-")
    try:
        os.makedirs(os.path.join(work, "out"))
        archive(work, ref, "default", "r18mar")
        archive(work, ref, "tgz", "r18tgz")
        retar_under_top_dir(os.path.join(work, "out", "r18tgz.tar.gz"),
                            os.path.join(work, "out", "r18top.tar.gz"), "r18top")
        with zipfile.ZipFile(os.path.join(work, "out", "r18mar.mar")) as z:
            man = json.loads(z.read("MAR-INF/MANIFEST.json"))
            assert man["runtime"] == "python" and man["model"]["handler"] == "top3.py"
            assert "top3.py" in z.namelist()
        s = server_factory(config={"enable_model_api": True})
        for f in ("r18mar.mar", "r18tgz.tar.gz", "r18top.tar.gz"):
            shutil.copy(os.path.join(work, "out", f), s.store)
        data = make_image(11, "JPEG")
        p = expected(ref, data)
        top = torch.topk(p, 3)
        want = [ref["labels"][int(i)] for i in top.indices]
        for url, name in (("r18mar.mar", "r18mar"), ("r18tgz.tar.gz", "r18tgz"),
                          ("r18top.tar.gz", "r18top")):
            r = s.post(f"/models?url={url}&model_name={name}&initial_workers=1"
                       "&synchronous=true", api="management", timeout=180)
            assert r.status_code == 200, (url, r.text)
            r = s.post(f"/predictions/{name}", data=data, timeout=60)
            assert r.status_code == 200, (url, r.text)
            got = r.json()
            assert list(got) == want, (url, got, want)
            for label, prob, q in zip(got, got.values(), top.values):
                assert abs(prob - float(q)) <= TOL, (url, label, prob, float(q))
        # a handler file that is not there is refused when archiving, by name
        r = subprocess.run([ARCHIVER, "--model-name", "nohandler", "--handler", "absent.py",
                            "--model-file", "model.py", "--export-path", "out"],
                           cwd=work, capture_output=True, text=True, timeout=60)
        assert r.returncode != 0 and "absent.py" in r.stderr, r.stderr
        assert not os.path.exists(os.path.join(work, "out", "nohandler.mar"))
    finally:
        shutil.rmtree(work, ignore_errors=True)


# ---------------------------------------------------------------------------------- decoding

def expected_from(ref, x):
    """All 1000 probabilities torch gives for the preprocessed image x (3x224x224)."""
    with torch.no_grad():
        return torch.softmax(ref["net"](x.unsqueeze(0)), dim=1)[0]


def separated(p):
    """Whether p's top 5 stand apart from the 6th, so that a comparison is not luck."""
    top = torch.topk(p, 6)
    return bool(top.values[4] - top.values[5] > 10 * TOL)


def assert_top5_of(ref, got, p, what):
    top = torch.topk(p, 6)
    assert top.values[4] - top.values[5] > 10 * TOL, f"{what}: ambiguous image"
    want = [ref["labels"][int(i)] for i in top.indices[:5]]
    assert list(got) == want, f"{what}: got {got}, want {want}"
    by_label = {v: k for k, v in ref["labels"].items()}
    for label, prob in got.items():
        assert abs(prob - float(p[by_label[label]])) <= TOL, f"{what}: {label}"


def textured_jpeg(seed, size):
    """A JPEG with fine texture, so that decoders and resamplers that differ show it."""
    import numpy as np
    g = torch.Generator().manual_seed(seed)
    small = (torch.rand(3, 12, 16, generator=g) * 255).to(torch.uint8)
    img = Image.fromarray(small.permute(1, 2, 0).numpy(), "RGB").resize(size, Image.BICUBIC)
    noise = np.random.RandomState(seed).randint(-24, 25, (size[1], size[0], 3))
    img = Image.fromarray((np.asarray(img).astype(np.int16) + noise).clip(0, 255)
                          .astype("uint8"))
    buf = io.BytesIO()
    img.save(buf, "JPEG", quality=90)
    return buf.getvalue()


NORM = dict(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])


def test_decode_on_the_device_and_fast_decode(server_factory, ref):
    """handler.decode: device (here the CPU: torchvision.io.decode_jpeg and the transforms on
    the uint8 tensor) answers what torch computes for that path, and handler.fast_decode: true
    what it computes for PIL's draft mode; a PNG under decode: device takes the PIL path. Both
    differ from the PIL path's pixels, which is why they are not the default on the CPU."""
    from torchvision.io import ImageReadMode, decode_jpeg
    yaml = {"resnet18": {"handler": {"decode": "device"}}}
    s = server_factory(models=["resnet18"], yaml=yaml)
    predict_until_ready(s, "resnet18", make_image(0, "PNG"))
    assert "ImageClassifier: JPEG images decoded by torchvision on cpu" in s.log()
    tensor_tf = transforms.Compose([transforms.Resize(256, antialias=True),
                                    transforms.CenterCrop(224),
                                    transforms.ConvertImageDtype(torch.float32),
                                    transforms.Normalize(**NORM)])
    moved = tried = 0
    for seed in range(1, 20):
        data = textured_jpeg(seed, (640, 480))
        x = tensor_tf(decode_jpeg(torch.frombuffer(bytearray(data), dtype=torch.uint8),
                                  mode=ImageReadMode.RGB))
        if not separated(expected_from(ref, x)):
            continue
        tried += 1
        if tried > 2:
            break
        r = s.post("/predictions/resnet18", data=data, timeout=60)
        assert r.status_code == 200, r.text
        assert_top5_of(ref, r.json(), expected_from(ref, x), f"decode: device, seed {seed}")
        moved += int(not torch.equal(x, ref["tf"](Image.open(io.BytesIO(data)))))
    assert moved, "the device path's pixels equal PIL's: this test shows nothing"
    data = make_image(3, "PNG")
    r = s.post("/predictions/resnet18", data=data, timeout=60)
    assert r.status_code == 200, r.text
    assert_top5(ref, r.json(), data, "a PNG under decode: device")
    s.stop()

    s = server_factory(models=["resnet18"], yaml={"resnet18": {"handler": {"fast_decode": True}}})
    predict_until_ready(s, "resnet18", make_image(0, "PNG"))
    assert "JPEG images decoded by PIL at reduced DCT scale (fast_decode)" in s.log()
    for seed in range(4, 20):  # the first image whose top 5 stand apart
        data = textured_jpeg(seed, (1280, 960))
        img = Image.open(io.BytesIO(data))
        img.draft("RGB", (341, 256))  # 1/2 scale: 640x480, the least that covers Resize(256)
        assert img.size == (640, 480), img.size
        x = ref["tf"](img)
        if separated(expected_from(ref, x)):
            break
    assert not torch.equal(x, ref["tf"](Image.open(io.BytesIO(data))))
    r = s.post("/predictions/resnet18", data=data, timeout=60)
    assert r.status_code == 200, r.text
    assert_top5_of(ref, r.json(), expected_from(ref, x), "fast_decode, 1280x960")
    data = make_image(5, "JPEG", size=(640, 480))  # no scale covers 341x256: PIL's pixels
    r = s.post("/predictions/resnet18", data=data, timeout=60)
    assert_top5(ref, r.json(), data, "fast_decode, 640x480")


def test_vision_keys_are_checked(server_factory):
    s = server_factory(models=[], load=False, config={"enable_model_api": "true"})
    for yaml, msg in (({"decode": "gpu"}, 'handler.decode: "gpu" is not auto, pil or device'),
                      ({"fast_decode": "often"},
                       'handler.fast_decode: "often" is not true or false')):
        d = os.path.join(s.store, "r18bad")
        shutil.rmtree(d, ignore_errors=True)
        with zipfile.ZipFile(os.path.join(MODEL_STORE, "resnet18.mar")) as z:
            z.extractall(d)
        with open(os.path.join(d, "model-config.yaml"), "a") as f:
            f.write("handler:\n" + "".join(f"  {k}: {v}\n" for k, v in yaml.items()))
        r = s.post("/models?url=r18bad&initial_workers=1&synchronous=true", api="management",
                   timeout=180)
        assert r.status_code == 500 and msg in r.json()["message"], r.text


def classifier(ref, handler=None):
    """An ImageClassifier on the CPU with ref's transform, as initialize() leaves it, built from
    the build's ts package (handler: model-config.yaml's handler section)."""
    from conftest import BUILD
    sys.path.insert(0, os.path.join(BUILD, "lib", "python"))
    try:
        from ts.context import Context
        from ts.torch_handler.image_classifier import ImageClassifier
    finally:
        sys.path.pop(0)
    h = ImageClassifier()
    h.image_processing = ref["tf"]
    h.device = torch.device("cpu")
    h.model_yaml_config = {"handler": handler} if handler else {}
    h.context = Context("r", ref["dir"], None, 4, None, "t")
    h._configure_decoding()
    h._failed, h._pool = {}, None
    return h


def test_preprocess_is_torchvisions_bit_for_bit(ref):
    """ImageClassifier.preprocess (ToTensor and Normalize in place into the batch, images
    prepared on a thread pool when torch has several threads) makes exactly the tensor of
    torchvision's transforms and torch.stack, for JPEG and PNG, large and small images."""
    h = classifier(ref)
    images = [make_image(300, "JPEG", (640, 480)), make_image(301, "PNG", (480, 640)),
              make_image(302, "JPEG", (200, 150)), textured_jpeg(303, (1280, 960))]
    want = torch.stack([ref["tf"](Image.open(io.BytesIO(d))) for d in images])
    threads = torch.get_num_threads()
    try:
        for n in (1, 2):
            torch.set_num_threads(n)
            got = h.preprocess([{"body": d} for d in images])
            assert torch.equal(got, want), f"{n} thread(s): max diff {(got - want).abs().max()}"
    finally:
        torch.set_num_threads(threads)


def test_device_preprocess_is_the_per_image_tensor_path_bit_for_bit(ref):
    """handler.decode: device prepares a batch's JPEGs together (one decode call where
    torchvision takes a list, one Resize and CenterCrop per image size, one division and
    Normalize for the batch): the tensor equals each image decoded and transformed on its own,
    bit for bit, for images of three sizes in any order; a PNG among them takes the PIL path,
    and a broken JPEG and a text that is not base64 fail alone, with their request named."""
    from torchvision.io import ImageReadMode, decode_jpeg
    h = classifier(ref, {"decode": "device"})
    assert h.decode_device == torch.device("cpu")
    tensor_tf = transforms.Compose([transforms.Resize(256, antialias=True),
                                    transforms.CenterCrop(224),
                                    transforms.ConvertImageDtype(torch.float32),
                                    transforms.Normalize(**NORM)])

    def alone(data):
        if data[:3] != b"\xff\xd8\xff":
            return ref["tf"](Image.open(io.BytesIO(data)))
        return tensor_tf(decode_jpeg(torch.frombuffer(bytearray(data), dtype=torch.uint8),
                                     mode=ImageReadMode.RGB))

    jpegs = [textured_jpeg(310, (640, 480)), make_image(311, "JPEG", (480, 640)),
             textured_jpeg(312, (640, 480)), make_image(313, "JPEG", (200, 150)),
             make_image(314, "JPEG", (480, 640))]
    png = make_image(315, "PNG", (320, 240))
    broken = jpegs[0][: len(jpegs[0]) // 3]
    rows = [jpegs[0], jpegs[1], png, jpegs[2], broken, jpegs[3], "not base64!", jpegs[4]]
    got = h.preprocess([{"body": d} for d in rows])
    assert sorted(h._failed) == [4, 6], h._failed
    assert h._failed[4].startswith("request 4: not a JPEG torchvision can decode"), h._failed
    assert "request 6: text input is not base64" in h._failed[6], h._failed
    want = torch.stack([alone(d) for i, d in enumerate(rows) if i not in (4, 6)])
    assert torch.equal(got, want), f"max diff {(got - want).abs().max()}"
    one = h.preprocess([{"body": jpegs[3]}])
    assert not h._failed and torch.equal(one[0], alone(jpegs[3]))
