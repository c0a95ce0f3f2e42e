"""ts.handler_utils.timer.timed: times a handler method into the metric ts_handler_<method> (ms)
when the model's model-config.yaml says handler: {profile: true}, as TorchServe's does."""

import functools
import time


def _profiling(handler):
    ctx = getattr(handler, "context", None)
    cfg = getattr(ctx, "model_yaml_config", None) or {}
    section = cfg.get("handler") if isinstance(cfg, dict) else None
    return bool(isinstance(section, dict) and section.get("profile"))


def timed(func):
    @functools.wraps(func)
    def wrapper(self, *args, **kwargs):
        if not _profiling(self):
            return func(self, *args, **kwargs)
        start = time.perf_counter()
        result = func(self, *args, **kwargs)
        elapsed_ms = (time.perf_counter() - start) * 1000
        self.context.metrics.add_time("ts_handler_" + func.__name__, elapsed_ms)
        return result

    return wrapper
