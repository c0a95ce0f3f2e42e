"""The worker side of the handler contract (torchserve-c internal, not a TorchServe module).

backend/python/py_handler.c calls load() once and step() for every handle call of the worker;
everything here talks to the worker through the C module _ts_worker, whose functions refer to
the requests of the current call by index. One step:
  1. batch() gives, per request, (request id, is new, headers, params); the params become
     TorchServe's `data` rows ({name: value}, JSON parsed, text decoded) and the headers the
     RequestProcessors of the Context;
  2. the handler's entry point runs on the whole batch;
  3. each result goes back with its status, content type and headers. With continuousBatching,
     context.stopping_criteria[i](result) decides: None answers the request, True ends its
     stream with this result, False streams the result and keeps the request for the next step.
An exception answers every request of the step with an error; the worker keeps serving.
"""

import importlib
import importlib.util
import json
import logging
import os
import sys
import traceback
import uuid

import _ts_worker

import ts
from ts.context import Context, RequestProcessor
from ts.protocol.otf_message_handler import default_content_type, encode_value
from ts.utils.util import PredictionException, single_class

# TorchServe's built-in handlers (ts.torch_handler.<name>): the list the worker's loader and the
# archiver read too (common/py_builtins.h), handed over by the plugin
BUILTIN_HANDLERS = _ts_worker.BUILTIN_HANDLERS
# third-party modules come from Debian's python3-* packages, or from the model's requirements.txt
# when the server installs it (install_py_dep_per_model=true: the worker then runs in the
# model's virtual environment, whose path the frontend passes in TS_WORKER_VENV)
MISSING_MODULE_HINT = (
    "add it as a Debian python3-* package, or list it in the model's requirements.txt and "
    "start the server with install_py_dep_per_model=true"
)
VENV_MISSING_MODULE_HINT = "the model's requirements.txt did not install it"
TS_MISSING_MODULE_HINT = (
    "torchserve-c's ts package implements TorchServe's handler API but not this module"
)
# handler specs the frontend gives models of other servers' contracts (mgmt/model_kind.c)
RUNTIMES = ("mlserver", "inferless")

logger = logging.getLogger("ts.worker")


class _WorkerLog(logging.Handler):
    """Python logging -> the worker's logger (one line per record; tracebacks included)."""

    def emit(self, record):
        try:
            msg = self.format(record)
        except Exception:  # pylint: disable=broad-except
            msg = record.getMessage()
        _ts_worker.log(record.levelno, msg)


def _setup_logging():
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    h = _WorkerLog()
    h.setFormatter(logging.Formatter("%(name)s: %(message)s"))
    root.addHandler(h)
    root.setLevel(logging.INFO)


def _missing_module_message(what, e):
    name = e.name or ""
    if name == "ts" or name.startswith("ts."):
        hint = TS_MISSING_MODULE_HINT
    elif os.environ.get("TS_WORKER_VENV"):
        hint = VENV_MISSING_MODULE_HINT
    else:
        hint = MISSING_MODULE_HINT
    return f"{what}: No module named '{name}' ({hint})"


class Service:
    def __init__(self, spec, model_name, model_dir, batch_size, continuous, gpu_id=None):
        self.continuous = continuous
        manifest = None
        manifest_path = os.path.join(model_dir, "MAR-INF", "MANIFEST.json")
        if os.path.isfile(manifest_path):
            with open(manifest_path) as f:
                manifest = json.load(f)
        # the file the worker read: MANIFEST's configFile, else model-config.yaml if present
        config_file = ((manifest or {}).get("model") or {}).get("configFile")
        config_path = os.path.join(model_dir, config_file or "model-config.yaml")
        yaml_config = {}
        if config_file or os.path.isfile(config_path):
            from ts.utils.util import get_yaml_config

            yaml_config = get_yaml_config(config_path)
        self.context = Context(
            model_name,
            model_dir,
            manifest,
            batch_size,
            gpu_id,
            ts.__version__,
            True,
            None,
            yaml_config,
        )
        self.context._send_intermediate = self._send_intermediate
        self.context._is_cancelled = _ts_worker.is_cancelled
        # as TorchServe's model loader: metrics reported while the handler initialises carry a
        # request id of their own (and the default dimensions of a handle call)
        self.context.metrics.request_ids = str(uuid.uuid4())
        self._index = {}
        self.entry_point = None
        self._resolve(spec)

    # ---- handler resolution (TorchServe's: file[:function], one class, or a built-in name)

    def _import_handler(self, spec):
        module_part, _, function = spec.partition(":")
        base = os.path.basename(module_part)
        name = base[:-3] if base.endswith(".py") else base
        model_dir = self.context.system_properties["model_dir"]
        in_archive = os.path.isfile(os.path.join(model_dir, name + ".py")) or os.path.isdir(
            os.path.join(model_dir, name)
        )
        if in_archive or module_part.endswith(".py"):
            if not in_archive:
                raise ImportError(f"{module_part}: the handler file is not in the model archive")
            try:
                return importlib.import_module(name), function or None
            except ModuleNotFoundError as e:
                raise ImportError(_missing_module_message(name + ".py", e)) from e
        if name in BUILTIN_HANDLERS:
            try:
                return importlib.import_module("ts.torch_handler." + name), function or None
            except ModuleNotFoundError as e:
                if e.name == "ts.torch_handler." + name:
                    raise ImportError(f"built-in handler {name} is not available") from e
                raise ImportError(_missing_module_message(name, e)) from e
        raise ImportError(
            f"unknown handler \"{spec}\": not a .py file in the archive nor a built-in name "
            f"({', '.join(BUILTIN_HANDLERS)})"
        )

    def _resolve(self, spec):
        module, function = self._import_handler(spec)
        fname = function or "handle"
        if hasattr(module, fname):
            self.entry_point = getattr(module, fname)
            if not callable(self.entry_point):
                raise ValueError(f"handler {spec}: {fname} is not a function")
            # TorchServe initialises a function handler by calling it with data None
            self.entry_point(None, self.context)
            return
        if function:
            raise ValueError(f"handler {spec}: the module has no function {function}")
        cls = single_class(module, f"handler {spec} (no handle(data, context) function)")
        service = cls()
        if not hasattr(service, "handle"):
            raise ValueError(f"handler {spec}: class {cls.__name__} has no handle method")
        if hasattr(service, "initialize"):
            service.initialize(self.context)
        self.entry_point = service.handle

    # ---- one step

    @staticmethod
    def _row(params):
        row = {}
        headers = {}
        for name, ctype, value in params:
            # the worker has parsed or decoded what it could (py_json.c); bytes left here for
            # these types take the json module's way, which also says what is wrong
            if type(value) is not bytes:
                pass
            elif ctype == "application/json":
                try:
                    # from str: json.loads(bytes) first guesses the encoding in Python
                    value = json.loads(value.decode("utf-8"))
                except ValueError:
                    logger.warning("parameter %s: not valid JSON, passed as bytes", name)
            elif ctype.startswith("text"):
                try:
                    value = value.decode("utf-8")
                except UnicodeDecodeError:
                    logger.warning("parameter %s: not valid UTF-8, passed as bytes", name)
            row[name] = value
            headers[name] = {"content-type": ctype}
        return row, headers

    def _send_intermediate(self, req_id, body):
        idx = self._index.get(req_id)
        if idx is None:
            raise ValueError(f"request {req_id} is not part of this call")
        st, ph = self.context.get_response_status(idx)
        return _ts_worker.intermediate(
            idx, body, st or 200, ph, self.context.get_response_headers(idx)
        )

    def step(self, n):
        # context.metrics reports each value as it is added (ts/metrics/caching_metric.py)
        self._step(n)

    def _step(self, n):
        reqs = _ts_worker.batch()
        ctx = self.context
        data = []
        procs = []
        ids = {}
        self._index = {}
        for i, (req_id, _is_new, hdrs, params) in enumerate(reqs):
            row, headers = self._row(params)
            headers.update(hdrs)
            # lookups by the lower-case name find a header whatever case the client sent
            for k, v in hdrs:
                if not k.islower():
                    headers.setdefault(k.lower(), v)
            data.append(row)
            procs.append(RequestProcessor(headers))
            ids[i] = req_id
            self._index[req_id] = i
        ctx.request_ids = ids
        ctx.request_processor = procs
        ctx.metrics.request_ids = ids

        try:
            ret = self.entry_point(data, ctx)
        except PredictionException as e:
            logger.error("Prediction error", exc_info=True)
            self._fail_all(n, e.error_code, e.message)
            return
        except MemoryError:
            logger.error("System out of memory", exc_info=True)
            self._fail_all(n, 507, "Out of resources")
            return
        except Exception as e:  # pylint: disable=broad-except
            logger.error("handler raised:\n%s", traceback.format_exc())
            self._fail_all(n, 500, f"{type(e).__name__}: {e}")
            return
        if not isinstance(ret, list):
            self._fail_all(
                n, 500, f"the handler returned {type(ret).__name__}, not a list of {n} results"
            )
            return
        if len(ret) != n:
            self._fail_all(
                n, 500, f"the handler returned {len(ret)} results for a batch of {n} requests"
            )
            return
        crit = ctx.stopping_criteria
        if crit is not None and (not isinstance(crit, (list, tuple)) or len(crit) != n):
            self._fail_all(
                n, 500, f"context.stopping_criteria must be a list of {n} callables"
            )
            return
        for i in range(n):
            try:
                self._answer(i, ret[i], crit[i] if crit is not None else None)
            except Exception as e:  # pylint: disable=broad-except
                logger.error("request %s:\n%s", ids[i], traceback.format_exc())
                _ts_worker.error(i, 500, f"{type(e).__name__}: {e}")

    def _answer(self, i, value, criterion):
        if isinstance(value, PredictionException):
            # torchserve-c: a handler fails one request of the batch by returning the exception
            # in its place (the built-in vision handlers do, for an image they cannot read)
            _ts_worker.error(i, value.error_code, value.message)
            return
        stop = criterion(value) if criterion is not None else None
        rp = self.context.request_processor[i]
        status, phrase = rp.get_response_status_code(), rp.get_response_status_phrase()
        headers = rp.get_response_headers()
        # bytes, str and plain JSON values are encoded by the worker (py_json.c), the same way
        if stop is not False and _ts_worker.respond(i, value, status or 200, phrase, headers):
            return
        if not any(k.lower() == "content-type" for k in headers):
            headers = dict(headers)
            headers["content-type"] = default_content_type(value)
        body = encode_value(value)
        if stop is False:
            if not self.continuous:
                raise RuntimeError(
                    "stopping_criteria returned False but the model does not have "
                    "continuousBatching: true in its model-config.yaml"
                )
            _ts_worker.intermediate(i, body, status or 200, phrase, headers)
            _ts_worker.cont(i)
        else:
            _ts_worker.respond(i, body, status or 200, phrase, headers)

    @staticmethod
    def _fail_all(n, status, message):
        for i in range(n):
            _ts_worker.error(i, status, message)


_service = None


def _check_one_libtorch():
    """The worker links libtorch, and a handler's `import torch` must find that same library:
    a torch from another installation would be a second libtorch in the process, which fails
    in ways far from the cause. Says which two it found, and how to build the worker."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return
    torch_dir = list(spec.submodule_search_locations)[0]
    theirs = os.path.realpath(os.path.join(torch_dir, "lib", "libtorch_cpu.so"))
    mapped = set()
    with open("/proc/self/maps") as f:
        for line in f:
            fields = line.split(None, 5)
            if len(fields) == 6 and os.path.basename(fields[5].strip()).startswith(
                "libtorch_cpu.so"
            ):
                mapped.add(os.path.realpath(fields[5].strip()))
    if mapped and os.path.exists(theirs) and theirs not in mapped:
        raise RuntimeError(
            f"this worker links {sorted(mapped)[0]}, but the handler's Python imports torch "
            f"from {torch_dir}: two libtorch builds cannot share a process (build the worker "
            f"against this one: make TORCH_DIR={torch_dir})"
        )


def load(spec, model_name, model_dir, batch_size, continuous, gpu_id=-1):
    """Loads the handler; raises with a one-line message on failure (traceback to the log).
    gpu_id: the GPU the frontend assigned, -1 for none (system_properties["gpu_id"] None)."""
    global _service
    _setup_logging()
    if model_dir not in sys.path:
        sys.path.insert(1, model_dir)
    try:
        _check_one_libtorch()
        if spec in RUNTIMES:
            # another server's model contract (an MLServer runtime, an Inferless app.py)
            from tsc_runtimes import load_runtime

            _service = load_runtime(spec, model_name, model_dir, batch_size)
        else:
            _service = Service(
                spec,
                model_name,
                model_dir,
                batch_size,
                bool(continuous),
                gpu_id if gpu_id is not None and gpu_id >= 0 else None,
            )
    except Exception:
        logger.error("loading handler %s failed:\n%s", spec, traceback.format_exc())
        raise
    global step
    step = _service.step


def step(n):
    """One handle call of the worker; load() rebinds it to the service's own step (py_handler.c
    looks it up after load), one Python call less per step."""
    _service.step(n)


def destroy():
    """The worker is exiting: a runtime's own unload (py_handler.c calls this)."""
    if _service is not None and hasattr(_service, "destroy"):
        _service.destroy()
