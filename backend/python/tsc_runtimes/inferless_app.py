"""An Inferless app.py served by torchserve-c (torchserve-c internal).

A model folder with app.py (class InferlessPythonModel: initialize(), infer(inputs) or
infer(inputs, stream_output_handler), finalize(args)) and input_schema.py (INPUT_SCHEMA,
IS_STREAMING_OUTPUT). The worker creates the class and calls initialize() at load, finalize()
when it stops. Each request's OIP inputs are checked against INPUT_SCHEMA (required, datatype,
shape) and given to infer() as {name: value} (shape [1]: the value itself, else a list).
infer() runs in a thread of its own (it blocks, as Inferless apps do: the example iterates a
TextIteratorStreamer fed by a generate thread), so the worker keeps serving meanwhile.
  - IS_STREAMING_OUTPUT = True: each stream_output_handler.send_streamed_output(dict) is one
    partial result (one SSE event, one gRPC message), each with the first one's keys and
    datatypes (it raises RequestCancelled once the client went away); finalise_streamed_output()
    ends the stream. A stream infer() leaves without
    finalising is ended when infer returns, with a warning in the log.
  - otherwise infer(inputs) returns the dict of the one answer.
A dict becomes OIP outputs: str -> BYTES [1], bool -> BOOL [1], int -> INT64 [1], float -> FP64
[1], a list of one of them -> shape [len].
"""
import asyncio
import importlib
import inspect
import logging
import threading

from . import payload
from .host import RequestError

logger = logging.getLogger("tsc_runtimes.inferless")

# input_schema.py datatypes (Inferless' list, plus INT/BOOLEAN of its streaming text) and the
# OIP datatypes a client may send for each
_INTS = ("INT8", "INT16", "INT32", "INT64", "UINT8", "UINT16", "UINT32", "UINT64")
_FLOATS = ("FP16", "FP32", "FP64", "BF16")
SCHEMA_TYPES = {
    "STRING": ("BYTES",),
    "BYTES": ("BYTES",),
    "BOOL": ("BOOL",),
    "BOOLEAN": ("BOOL",),
    "INT": _INTS,
    **{t: _INTS for t in _INTS},
    **{t: _FLOATS for t in _FLOATS},
}
STREAMING_TYPES = ("STRING", "BOOL", "BOOLEAN", "INT") + _INTS


def _load_module(name, model_dir):
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as e:
        if e.name == name:
            raise ImportError(f"{name}.py is missing from the model folder {model_dir}") from e
        raise ImportError(
            f"{name}.py: No module named '{e.name}' (add it as a Debian python3-* package; pip "
            "install is not available)"
        ) from e


def read_schema(module):
    schema = getattr(module, "INPUT_SCHEMA", None)
    if not isinstance(schema, dict) or not schema:
        raise ValueError("input_schema.py: INPUT_SCHEMA must be a dict of inputs")
    streaming = bool(getattr(module, "IS_STREAMING_OUTPUT", False))
    for name, spec in schema.items():
        where = f"input_schema.py: INPUT_SCHEMA[{name!r}]"
        if not isinstance(spec, dict):
            raise ValueError(f"{where}: expected a dict with datatype, required, shape")
        dt = spec.get("datatype")
        if dt not in SCHEMA_TYPES:
            raise ValueError(f"{where}: datatype {dt!r} is not one of {', '.join(SCHEMA_TYPES)}")
        shape = spec.get("shape", [1])
        if not isinstance(shape, list) or not all(isinstance(d, int) for d in shape):
            raise ValueError(f"{where}: shape must be a list of integers")
        if streaming and (dt not in STREAMING_TYPES or shape != [1]):
            raise ValueError(
                f"{where}: with IS_STREAMING_OUTPUT the inputs are STRING, INT or BOOLEAN of "
                f"shape [1] (Inferless' streaming limits), not {dt} {shape}"
            )
    return schema, streaming


def _scalar(dt, v, where):
    if dt == "BYTES":
        try:
            return v.decode("utf-8")
        except UnicodeDecodeError as e:
            raise RequestError(400, f"{where}: not UTF-8 text") from e
    return v


def check_inputs(schema, tensors):
    """{name: value} of the request's OIP inputs, checked against INPUT_SCHEMA; RequestError 400
    naming the input otherwise."""
    out = {}
    for t in tensors:
        name = t["name"]
        spec = schema.get(name)
        if spec is None:
            raise RequestError(400, f"inputs: {name} is not in INPUT_SCHEMA (its inputs: "
                                    f"{', '.join(schema)})")
        want = spec["datatype"]
        if t["datatype"] not in SCHEMA_TYPES[want]:
            raise RequestError(
                400, f"inputs: {name} has datatype {t['datatype']}; input_schema.py says {want} "
                f"(send {' or '.join(SCHEMA_TYPES[want])})"
            )
        shape = spec.get("shape", [1])
        data = t["data"]
        if shape == [1]:
            if len(data) != 1:
                raise RequestError(400, f"inputs: {name} has {len(data)} elements; "
                                        "input_schema.py says shape [1]")
            out[name] = _scalar(t["datatype"], data[0], f"inputs: {name}")
        else:
            fixed = [d for d in shape if d >= 0]
            numel = 1
            for d in fixed:
                numel *= d
            if len(fixed) == len(shape) and len(data) != numel:
                raise RequestError(400, f"inputs: {name} has {len(data)} elements; "
                                        f"input_schema.py says shape {shape}")
            out[name] = [_scalar(t["datatype"], x, f"inputs: {name}") for x in data]
    missing = [n for n, s in schema.items() if s.get("required") and n not in out]
    if missing:
        raise RequestError(400, f"inputs: {', '.join(missing)} required by input_schema.py "
                                "missing")
    return out


def _kind(v):
    if isinstance(v, bool):
        return "BOOL"
    if isinstance(v, int):
        return "INT64"
    if isinstance(v, float):
        return "FP64"
    if isinstance(v, str):
        return "BYTES"
    return None


def outputs_of(d, where):
    """OIP outputs of an answer dict, and its schema ({key: (datatype, is list)})."""
    if not isinstance(d, dict):
        raise RequestError(500, f"{where}: expected a dict, got {type(d).__name__}")
    outs, schema = [], {}
    for k, v in d.items():
        seq = isinstance(v, (list, tuple))
        kinds = {_kind(x) for x in v} if seq else {_kind(v)}
        if None in kinds or len(kinds) > 1:
            raise RequestError(
                500, f"{where}: {k!r} is not a String, Float, Int, Boolean or a list of one of "
                "them (serialise other objects with json.dumps)"
            )
        dt = kinds.pop() if kinds else "BYTES"
        outs.append({"name": str(k), "datatype": dt, "shape": [len(v) if seq else 1],
                     "data": list(v) if seq else [v]})
        schema[str(k)] = (dt, seq)
    return outs, schema


class RequestCancelled(Exception):
    """Raised in infer's thread by send_streamed_output once the client went away (as
    TorchServe's send_intermediate_predict_response raises its RequestCancelled)."""


class StreamOutputHandler:
    """The stream_output_handler infer() gets: called from infer()'s thread."""

    def __init__(self, app, req, done):
        self._app = app
        self._req = req
        self._done = done  # an asyncio future, set when the stream ends
        self._schema = None
        self._n = 0
        self.finalised = False

    def send_streamed_output(self, output):
        if self.finalised:
            raise RuntimeError("send_streamed_output after finalise_streamed_output")
        self._n += 1
        where = f"send_streamed_output (event {self._n})"
        outs, schema = outputs_of(output, where)
        if self._schema is None:
            self._schema = schema
        elif schema != self._schema:
            raise RequestError(
                500, f"{where}: every event has the first one's schema "
                f"{self._app.describe(self._schema)}; this one has {self._app.describe(schema)}"
            )
        self._app.put(self._req, payload.encode_response(outs), payload.CTYPE)

    def finalise_streamed_output(self):
        if not self.finalised:
            self.finalised = True
            self._app.host.loop.call_soon_threadsafe(_set_result, self._done, None)


def _set_result(fut, value):
    if not fut.done():
        fut.set_result(value)


def _set_exception(fut, e):
    if not fut.done():
        fut.set_exception(e)


class InferlessApp:
    def __init__(self, host, model_name, model_dir):
        self.host = host
        self.name = model_name
        schema_mod = _load_module("input_schema", model_dir)
        self.schema, self.streaming = read_schema(schema_mod)
        app_mod = _load_module("app", model_dir)
        cls = getattr(app_mod, "InferlessPythonModel", None)
        if not isinstance(cls, type):
            raise ValueError("app.py: no class InferlessPythonModel")
        self.model = cls()
        infer = getattr(self.model, "infer", None)
        if not callable(infer):
            raise ValueError("app.py: InferlessPythonModel has no infer method")
        nargs = len(inspect.signature(infer).parameters)
        if self.streaming and nargs < 2:
            raise ValueError("app.py: IS_STREAMING_OUTPUT is True but infer(inputs) takes no "
                             "stream_output_handler")
        self.pass_handler = nargs >= 2
        if hasattr(self.model, "initialize"):
            self.model.initialize()
        self.prompt_input = next(
            (n for n, s in self.schema.items() if s["datatype"] == "STRING"), None
        )
        logger.info("Inferless app loaded (%s output)", "streaming" if self.streaming else "one")

    def metadata(self):
        """OIP metadata: the inputs of INPUT_SCHEMA (outputs are whatever infer returns)."""
        oip = {"STRING": "BYTES", "BOOLEAN": "BOOL", "INT": "INT64"}
        return {
            "inputs": [
                {"name": n, "datatype": oip.get(s["datatype"], s["datatype"]),
                 "shape": s.get("shape", [1])}
                for n, s in self.schema.items()
            ],
            "outputs": [],
        }

    @staticmethod
    def describe(schema):
        return "{" + ", ".join(f"{k}: {dt}{'[]' if seq else ''}" for k, (dt, seq) in
                               schema.items()) + "}"

    def start(self, req):
        body = next((p for p in req.params if p[0] == "body"), None)
        if body is None or body[1] != payload.CTYPE:
            raise RequestError(
                400, f"model {self.name} is an Inferless app: send an Open Inference Protocol "
                f"request (POST /v2/models/{self.name}/infer_stream, infer, or gRPC)"
            )
        try:
            header, raw = payload.split(body[2])
            tensors = payload.tensors(header, raw)
        except (payload.PayloadError, ValueError) as e:
            raise RequestError(400, f"OIP payload: {e}") from e
        generate = bool(header.get("generate"))
        if generate:
            if self.prompt_input is None:
                raise RequestError(400, f"model {self.name}: text_input needs a STRING input in "
                                        "INPUT_SCHEMA")
            tensors[0]["name"] = self.prompt_input
        inputs = check_inputs(self.schema, tensors)
        stream = bool(header.get("stream"))
        if self.streaming and not stream:
            raise RequestError(
                400, f"model {self.name} streams its output (IS_STREAMING_OUTPUT = True): call "
                f"/v2/models/{self.name}/infer_stream or generate_stream, or gRPC ModelStreamInfer"
            )
        return self._run(req, inputs, generate)

    def _text(self, outs):
        s = next((o for o in outs if o["datatype"] == "BYTES"), None)
        if s is None:
            raise RequestError(500, "the answer has no string to answer a generate request with")
        return "".join(s["data"]).encode("utf-8"), "text/plain; charset=utf-8"

    async def _run(self, req, inputs, generate):
        loop = self.host.loop
        done = loop.create_future()
        handler = StreamOutputHandler(self, req, done) if self.streaming else None
        if generate and handler is not None:
            handler.send_streamed_output = self._as_text(handler, req)

        def work():
            try:
                if self.pass_handler:
                    result = self.model.infer(inputs, handler)
                else:
                    result = self.model.infer(inputs)
                loop.call_soon_threadsafe(_set_result, done, result)
            except BaseException as e:  # pylint: disable=broad-except
                loop.call_soon_threadsafe(_set_exception, done, e)

        threading.Thread(target=work, name=f"infer-{req.id[:8]}", daemon=True).start()
        result = await done
        if handler is None:
            outs, _ = outputs_of(result, "infer")
            req.final = self._text(outs) if generate else (payload.encode_response(outs),
                                                           payload.CTYPE)
        elif not handler.finalised:
            logger.warning("request %s: infer returned without finalise_streamed_output(); "
                           "the stream is ended", req.id)

    def put(self, req, body, ctype):
        """One event from infer's thread: queued on the loop, waiting while the request holds
        MAX_QUEUED unsent ones. RequestCancelled once its client went away, so that the app's
        streamer loop ends instead of generating for nobody."""
        if req.gone:
            raise RequestCancelled(f"request {req.id}: the client went away")
        fut = asyncio.run_coroutine_threadsafe(req.put_output(body, ctype), self.host.loop)
        fut.result()
        if req.gone:
            raise RequestCancelled(f"request {req.id}: the client went away")

    def _as_text(self, handler, req):
        """send_streamed_output for a generate request: each event's string as text."""

        def send(output):
            outs, _ = outputs_of(output, "send_streamed_output")
            self.put(req, *self._text(outs))

        return send

    def destroy(self, host):
        if hasattr(self.model, "finalize"):
            self.model.finalize(None)
