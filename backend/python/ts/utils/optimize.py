"""ts.utils.optimize: BaseHandler's model, optimized for inference (torchserve-c, issue 37).

model-config.yaml's `handler.optimize` says how far (the C torchscript handler reads the same
key, backend/handlers/torchscript.c):
  inference (the default; also `true`): script an eager model (never trace: a trace keeps one
      path of the model's control flow), torch.jit.freeze it, then
      torch.jit.optimize_for_inference (conv + batch norm folded, convolutions on oneDNN with
      their weights reordered once, linear weights stored transposed);
  freeze: script and torch.jit.freeze without numeric folding;
  none (also `false`): the model as loaded.
`handler.jit_freeze`, the older key, keeps its meaning (true: freeze, false: none); both keys
may be given only when they agree.

Only forward is replaced: the handler's self.model stays the object it loaded (its class,
attributes, parameters and other methods as they were, which handlers read), with forward
bound to the optimized module's. The weights are then held twice (the loaded ones and the
frozen constants), so by default a model of more than 1 GiB of weights is served as loaded;
naming handler.optimize optimizes it anyway.

A model that cannot be scripted or frozen, or whose class has public methods other than
forward (a handler may call them, and a scripted or frozen module keeps forward alone), is
served as loaded, with a log line that says why. When the handler knows an input the model
takes (example_input()), the optimized forward runs it once at load: that warms oneDNN up, and
an answer more than 1e-4 away from the loaded model's, or of another structure, makes the
handler serve the model as loaded too. Optimizing reorders float operations: answers move by
float rounding (resnet18: about 1e-5), not by the usual 1e-5 bound.
"""

import logging
import time

import torch

logger = logging.getLogger(__name__)

LEVELS = ("none", "freeze", "inference")
DEFAULT = "inference"
TOLERANCE = 1e-4
DEFAULT_MAX_BYTES = 1 << 30  # the default level leaves larger models as loaded


def _scalar(cfg, key):
    v = cfg.get(key)
    if isinstance(v, (list, dict)):
        return "[...]"
    return v


def read_level(model_yaml_config):
    """The optimization level from model-config.yaml's handler section, and whether a key named
    it; ValueError naming the key for a value it does not take."""
    handler = (model_yaml_config or {}).get("handler") or {}
    if not isinstance(handler, dict):
        return DEFAULT, False
    opt, fz = _scalar(handler, "optimize"), _scalar(handler, "jit_freeze")
    level = freeze_level = None
    if opt is not None:
        text = str(opt).lower()
        if opt is True or text == "true":
            level = "inference"
        elif opt is False or text == "false":
            level = "none"
        elif text in LEVELS:
            level = text
        else:
            raise ValueError(
                f'model-config.yaml: handler.optimize: "{opt}" is not inference, freeze, none, '
                "true or false"
            )
    if fz is not None:
        text = str(fz).lower()
        if text not in ("true", "false"):
            raise ValueError(f'model-config.yaml: handler.jit_freeze: "{fz}" is not true or false')
        freeze_level = "freeze" if text == "true" else "none"
    if level is not None and freeze_level is not None and level != freeze_level:
        raise ValueError(
            f"model-config.yaml: handler.optimize: {level} and handler.jit_freeze: "
            f"{str(fz).lower()} disagree (jit_freeze: true is optimize: freeze, false is none)"
        )
    if level or freeze_level:
        return level or freeze_level, True
    return DEFAULT, False


def weight_bytes(model):
    tensors = list(model.parameters()) + list(model.buffers())
    return sum(t.numel() * t.element_size() for t in tensors)


def other_methods(model):
    """Public methods of the model beyond forward that a handler could call."""
    if isinstance(model, torch.jit.ScriptModule):
        return sorted(m for m in model._c._method_names() if m != "forward")
    base = set(dir(torch.nn.Module))
    names = []
    for name in dir(type(model)):
        if name.startswith("_") or name in base or name == "forward":
            continue
        if callable(getattr(type(model), name, None)):
            names.append(name)
    return sorted(names)


def _first_line(e):
    text = str(e).strip()
    for line in text.splitlines():
        if "Error" in line or "error" in line:
            return line.strip()
    return text.splitlines()[0] if text else type(e).__name__


def _flatten(v, out):
    if isinstance(v, torch.Tensor):
        out.append(v)
    elif isinstance(v, (list, tuple)):
        for e in v:
            _flatten(e, out)
    elif isinstance(v, dict):
        for k in sorted(v, key=str):
            _flatten(v[k], out)
    else:
        out.append(v)
    return out


def compare(want, got):
    """None when got is want within TOLERANCE (same structure, shapes and dtypes), else why."""
    a, b = _flatten(want, []), _flatten(got, [])
    if len(a) != len(b):
        return f"{len(b)} outputs instead of {len(a)}"
    worst = 0.0
    for x, y in zip(a, b):
        if isinstance(x, torch.Tensor) != isinstance(y, torch.Tensor):
            return "an output of another type"
        if not isinstance(x, torch.Tensor):
            if x != y:
                return f"an output {y!r} instead of {x!r}"
            continue
        if x.shape != y.shape or x.dtype != y.dtype:
            return f"an output of shape {tuple(y.shape)} instead of {tuple(x.shape)}"
        if x.numel() and (x.is_floating_point() or x.is_complex()):
            worst = max(worst, (x.to(y.device) - y).abs().max().item())
        elif not torch.equal(x.to(y.device), y):
            return "different integer outputs"
    if not worst <= TOLERANCE:
        return f"outputs {worst:.2e} away from the loaded model's (more than {TOLERANCE:g})"
    return None


def optimize(model, level, example=None, name="the model", explicit=True):
    """model, with its forward replaced by the scripted, frozen, optimized module's; as it was
    at level none, when the default level meets a model over DEFAULT_MAX_BYTES, or when
    anything fails (logged)."""
    if level == "none":
        logger.info("serving %s as loaded (handler.optimize: none)", name)
        return model
    size = weight_bytes(model)
    if not explicit and size > DEFAULT_MAX_BYTES:
        logger.info(
            "serving %s as loaded: its %.1f GiB of weights would be held twice (set "
            "handler.optimize to optimize it anyway)",
            name,
            size / (1 << 30),
        )
        return model
    t0 = time.perf_counter()
    others = other_methods(model)
    if others:
        logger.warning(
            "serving %s as loaded: it has methods other than forward (%s), which a scripted "
            "and frozen module would not keep (handler.optimize: %s)",
            name,
            ", ".join(others),
            level,
        )
        return model
    steps = []
    try:
        if isinstance(model, torch.jit.ScriptModule):
            scripted = model
        else:
            scripted = torch.jit.script(model)
            steps.append("scripted")
    except Exception as e:  # pylint: disable=broad-except
        logger.warning(
            "serving %s as loaded: torch.jit.script cannot compile it (%s); tracing is not "
            "tried, as it would keep one path of the model's control flow",
            name,
            _first_line(e),
        )
        return model
    try:
        if level == "inference":
            optimized = torch.jit.optimize_for_inference(torch.jit.freeze(scripted.eval()))
            steps += ["frozen", "optimized for inference"]
        else:
            optimized = torch.jit.freeze(scripted.eval(), optimize_numerics=False)
            steps.append("frozen")
    except Exception as e:  # pylint: disable=broad-except
        logger.warning(
            "serving %s as loaded: torch cannot freeze it (%s) (handler.optimize: %s)",
            name,
            _first_line(e),
            level,
        )
        return model
    checked = ""
    if example is not None:
        try:
            with torch.inference_mode():
                want = model(example)
                got = optimized(example)
            why = compare(want, got)
        except Exception as e:  # pylint: disable=broad-except
            why = f"it fails where the loaded model does not ({_first_line(e)})"
        if why:
            logger.warning(
                "serving %s as loaded: optimized, %s (handler.optimize: %s)", name, why, level
            )
            return model
        checked = ", checked on an example input"
    logger.info(
        "optimized %s in %.0f ms (handler.optimize: %s): %s%s",
        name,
        (time.perf_counter() - t0) * 1000,
        level,
        ", ".join(steps),
        checked,
    )
    # the instance attribute is what nn.Module.__call__ calls; the module keeps the rest
    model.forward = optimized.forward
    return model
