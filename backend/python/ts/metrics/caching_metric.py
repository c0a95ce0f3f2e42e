"""ts.metrics.caching_metric: one metric of the cache (TorchServe's CachingMetric).

add_or_update(value, dimension_values, request_id) reports one value: a line on the worker's
standard output in TorchServe's backend metric format,

    [METRICS]Name.Unit:value|#Dim:value,...|#type:GAUGE|#hostname:host,timestamp[,request ids]

which the frontend takes out of the worker's output (frontend/core/worker_log.c) into /metrics
(metrics_mode=prometheus) or model_metrics.log (metrics_mode=log). A value the metric cannot take
(dimension values that do not match its dimension names, a counter going down) is logged and
dropped, as TorchServe does.
"""

import logging
import os
import re
import socket
import time

from ts.metrics.dimension import Dimension
from ts.metrics.metric_type_enum import MetricTypes

logger = logging.getLogger(__name__)

# the worker measures these for every step itself (HandlerTime, PredictionTime)
WORKER_MEASURED = frozenset(("HandlerTime", "PredictionTime"))
_UNSAFE = re.compile(r"[|,\x00-\x1f\x7f]")
_IDS_UNSAFE = re.compile(r"[|\x00-\x1f\x7f]")
_HOST = socket.gethostname()


def _safe(value):
    """A dimension value as the line can carry it: '|', ',' and control bytes become '_'."""
    return _UNSAFE.sub("_", str(value))


class CachingMetric:
    def __init__(self, metric_name, unit, dimension_names=None, metric_type=MetricTypes.COUNTER):
        self.metric_name = metric_name
        self.unit = unit
        self.dimension_names = list(dimension_names or [])
        self.metric_type = metric_type

    def __repr__(self):
        return (f"CachingMetric({self.metric_name!r}, {self.unit!r}, {self.dimension_names!r}, "
                f"{self.metric_type})")

    def _validate_and_get_dimensions(self, dimension_values):
        if dimension_values is None or len(dimension_values) != len(self.dimension_names):
            raise ValueError(
                f"Dimension values: {dimension_values} should correspond to Dimension names: "
                f"{self.dimension_names}")
        return [Dimension(n, v) for n, v in zip(self.dimension_names, dimension_values)]

    def _validate_metric_value(self, value):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"metric value must be a number, got {type(value).__name__}")
        if self.metric_type == MetricTypes.COUNTER and value < 0:
            raise ValueError("Counter metric update value cannot be negative")

    def emit_metrics(self, request_id, value, dimension_string):
        if self.metric_name in WORKER_MEASURED:
            return
        line = (f"[METRICS]{self.metric_name}.{self.unit}:{value}|#{dimension_string}|"
                f"#type:{self.metric_type.name}|#hostname:{_HOST},{int(time.time())}")
        if request_id:
            line += "," + _IDS_UNSAFE.sub("_", str(request_id))
        # one write: a line under PIPE_BUF reaches the frontend whole, between any other output
        os.write(1, (line + "\n").encode("utf-8", "replace"))

    def add_or_update(self, value, dimension_values=None, request_id=""):
        dimension_str = ""
        try:
            dims = self._validate_and_get_dimensions(
                [] if dimension_values is None and not self.dimension_names else dimension_values)
            dimension_str = ",".join(f"{d.name}:{_safe(d.value)}" for d in dims)
            self._validate_metric_value(value)
        except ValueError as ex:
            logger.error(
                "[METRICS]Failed to update metric with name:%s and dimensions: %s with value: "
                "%s: %s", self.metric_name, dimension_str, value, ex)
        else:
            self.emit_metrics(request_id, value, dimension_str)

    def update(self, value, request_id="", dimensions=None):
        """TorchServe's older form: the dimensions as Dimension objects, which replace the
        metric's dimension names."""
        dimensions = dimensions or []
        logger.warning("Overriding existing dimensions")
        self.dimension_names = [d.name for d in dimensions]
        self.add_or_update(value, [d.value for d in dimensions], request_id)
