"""An MLServer runtime served by torchserve-c (torchserve-c internal).

A model folder with model-settings.json names its runtime in `implementation` ("module.Class",
the module a .py file of the folder or an installed package). The runtime, an mlserver.MLModel,
is created with the folder's ModelSettings and loaded (`await load()`) when the worker starts;
then each request is a task on the worker's event loop (host.py):
  - infer / generate / gRPC ModelInfer / a JSON body on /predictions: `await predict(request)`,
    one answer;
  - infer_stream / generate_stream / gRPC ModelStreamInfer: `predict_stream(requests)`, one
    partial result per response it yields. `requests` is an async iterator holding the first
    request and then, for a gRPC stream, every later message of the call until the client
    half-closes (one predict_stream per call, as MLServer does).
The generate shape ({"text_input": ...}) reaches the runtime as a request whose first input is
the model's first declared BYTES input (model-settings.json `inputs`; "prompt" when none), and
each response answers as text: the elements of its first BYTES output, joined.
"""
import importlib
import json
import logging
import os

from mlserver import MLModel
from mlserver.settings import ModelSettings
from mlserver.types import InferenceRequest, InferenceResponse, ValidationError

from . import payload
from .host import RequestError

logger = logging.getLogger("tsc_runtimes.mlserver")

SETTINGS_FILE = "model-settings.json"
# keys of model-settings.json that torchserve-c acts on, and those it reads but does not apply
KNOWN = {"name", "implementation", "versions", "platform", "inputs", "outputs", "parameters"}
NOT_APPLIED = {
    "max_batch_size": "requests are not merged into one predict (MLServer does not merge "
    "streams either); concurrency per worker is batchSize in model-config.yaml",
    "max_batch_time": "see max_batch_size",
    "parallel_workers": "the number of workers is minWorkers/maxWorkers (model-config.yaml) "
    "or the management API's scale",
    "warm_workers": "workers are started by minWorkers",
    "cache_enabled": "the response cache is not implemented",
}
_OWN_ENVIRONMENT = ("MLServer's environments are not read: packages come from Debian python3-* "
                    "packages, or from the folder's requirements.txt, installed into an "
                    "environment of the model's own with install_py_dep_per_model=true")
REFUSED_PARAMETERS = {
    "environment_tarball": _OWN_ENVIRONMENT,
    "environment_path": _OWN_ENVIRONMENT,
}


def read_settings(model_dir, model_name):
    path = os.path.join(model_dir, SETTINGS_FILE)
    try:
        with open(path, "rb") as f:
            raw = json.loads(f.read())
    except ValueError as e:
        raise ValueError(f"{SETTINGS_FILE}: not valid JSON: {e}") from e
    if not isinstance(raw, dict):
        raise ValueError(f"{SETTINGS_FILE}: expected a JSON object")
    for k in raw:
        if k in NOT_APPLIED:
            logger.warning("%s: %s is not applied: %s", SETTINGS_FILE, k, NOT_APPLIED[k])
        elif k not in KNOWN and not k.startswith("_"):
            logger.warning("%s: unknown key %s is ignored", SETTINGS_FILE, k)
    prm = raw.get("parameters") or {}
    for k, why in REFUSED_PARAMETERS.items():
        if isinstance(prm, dict) and prm.get(k):
            raise ValueError(f"{SETTINGS_FILE}: parameters.{k}: {why}")
    if "implementation" not in raw:
        raise ValueError(f'{SETTINGS_FILE}: "implementation" ("module.Class") is required')
    raw.setdefault("name", model_name)
    try:
        settings = ModelSettings.model_validate(raw)
    except ValidationError as e:
        raise ValueError(f"{SETTINGS_FILE}: {e}") from e
    settings._source = path
    return settings


def import_runtime(implementation):
    if not isinstance(implementation, str) or "." not in implementation:
        raise ValueError(
            f'{SETTINGS_FILE}: implementation {implementation!r} is not "module.Class"'
        )
    module_name, _, cls_name = implementation.rpartition(".")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        raise ImportError(
            f"{SETTINGS_FILE}: implementation {implementation}: No module named '{e.name}' (a .py "
            "file of the model folder, or a Debian python3-* package, or the model's "
            "requirements.txt with install_py_dep_per_model=true)"
        ) from e
    cls = getattr(module, cls_name, None)
    if cls is None:
        raise ValueError(f"{SETTINGS_FILE}: implementation {implementation}: {module_name} has no "
                         f"{cls_name}")
    if not (isinstance(cls, type) and issubclass(cls, MLModel)):
        raise ValueError(
            f"{SETTINGS_FILE}: implementation {implementation} is not a subclass of mlserver.MLModel"
        )
    return cls


class MLServerApp:
    def __init__(self, host, model_name, model_dir):
        self.host = host
        self.settings = read_settings(model_dir, model_name)
        cls = import_runtime(self.settings.implementation)
        self.model = cls(self.settings)
        ready = host.run(self.model.load())
        if ready is False:
            raise RuntimeError(f"{self.settings.implementation}: load() returned False")
        self.model.ready = True
        self.prompt_input = next(
            (t.name for t in self.settings.inputs or [] if t.datatype == "BYTES"), "prompt"
        )
        logger.info("MLServer runtime %s loaded (model %s)", self.settings.implementation,
                    self.settings.name)

    # ---- requests

    def _request(self, ctype, value, first=True):
        """(InferenceRequest, header flags) of one message."""
        if ctype == payload.CTYPE:
            try:
                header, raw = payload.split(value)
                inputs = payload.tensors(header, raw)
            except (payload.PayloadError, ValueError) as e:
                raise RequestError(400, f"OIP payload: {e}") from e
            generate = bool(header.get("generate"))
            if generate and inputs and inputs[0]["name"] == "text_input":
                inputs[0]["name"] = self.prompt_input
            d = {"inputs": inputs}
            if header.get("id") is not None:
                d["id"] = header["id"]
            if header.get("parameters") is not None:
                d["parameters"] = header["parameters"]
            if header.get("outputs"):
                d["outputs"] = [{"name": n} for n in header["outputs"]]
            flags = {"stream": bool(header.get("stream")), "generate": generate, "json": False}
        elif first and ctype == "application/json" and isinstance(value, dict):
            d, flags = value, {"stream": False, "generate": False, "json": True}
        else:
            raise RequestError(
                400,
                f"model {self.settings.name} is an MLServer runtime: send an Open Inference "
                f"Protocol request (POST /v2/models/{self.settings.name}/infer, infer_stream, or "
                "gRPC ModelInfer / ModelStreamInfer), or its JSON body to /predictions",
            )
        try:
            return InferenceRequest.model_validate(d), flags
        except ValidationError as e:
            raise RequestError(400, str(e)) from e

    def start(self, req):
        body = next((p for p in req.params if p[0] == "body"), req.params[0] if req.params else None)
        if body is None:
            raise RequestError(400, "the request has no body")
        first, flags = self._request(body[1], body[2])
        if flags["stream"]:
            return self._stream(req, first, flags["generate"])
        return self._unary(req, first, "json" if flags["json"] else flags["generate"])

    async def _requests(self, req, first):
        yield first
        while True:
            m = await req.next_input()
            if m is None:
                return
            r, _ = self._request(m[0], m[1], first=False)
            yield r

    def _encode(self, resp, what, generate):
        """(body, content type) of a response: an OIP payload; text for the generate shape;
        MLServer's JSON for a JSON request on /predictions (generate == "json")."""
        if not isinstance(resp, InferenceResponse):
            raise RequestError(
                500, f"{self.settings.implementation}.{what} returned {type(resp).__name__}, "
                "not an InferenceResponse"
            )
        if generate == "json":
            return resp.model_dump_json().encode(), "application/json"
        if generate:
            text = next((o for o in resp.outputs if o.datatype == "BYTES"), None)
            if text is None:
                raise RequestError(
                    500, f"{self.settings.implementation}.{what}: the response has no BYTES output "
                    "to answer the generate request with"
                )
            parts = [x.decode("utf-8", "replace") if isinstance(x, (bytes, bytearray)) else str(x)
                     for x in payload.flatten(text.data.root)]
            return "".join(parts).encode("utf-8"), "text/plain; charset=utf-8"
        outs = []
        for o in resp.outputs:
            outs.append({
                "name": o.name,
                "datatype": o.datatype,
                "shape": o.shape,
                "parameters": o.parameters.model_dump() if o.parameters is not None else None,
                "data": o.data.root,
            })
        prm = resp.parameters.model_dump() if resp.parameters is not None else None
        try:
            return payload.encode_response(outs, prm), payload.CTYPE
        except payload.PayloadError as e:
            raise RequestError(
                500, f"{self.settings.implementation}.{what} answered a malformed response: {e}"
            ) from e

    async def _unary(self, req, request, generate):
        resp = await self.model.predict(request)
        req.final = self._encode(resp, "predict", generate)

    async def _stream(self, req, first, generate):
        n = 0
        agen = self.model.predict_stream(self._requests(req, first))
        if not hasattr(agen, "__anext__"):
            raise RequestError(
                500, f"{self.settings.implementation}.predict_stream is not an async generator"
            )
        try:
            async for resp in agen:
                n += 1
                body, ctype = self._encode(resp, f"predict_stream (response {n})", generate)
                await req.put_output(body, ctype)
        finally:
            await agen.aclose()

    def destroy(self, host):
        host.run(self.model.unload())
