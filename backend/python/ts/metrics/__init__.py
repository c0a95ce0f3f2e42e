"""context.metrics: the handler's metric records (add_counter, add_time, add_size, add_percent).

The worker collects the records of each handle call; records() hands them over and clears them,
and the worker reports them on /metrics (ts_metric_add) by name for the model. Dimensions are not
served (a warning names the metric once).
Each record is a tuple (name, value, unit, metric type, {dimension: value}, request id or None).
"""

import logging

from ts.metrics.metric_type_enum import MetricTypes

_TIME_UNITS = ("ms", "s", "us")
_SIZE_UNITS = ("MB", "kB", "GB", "B")


class Metrics:
    def __init__(self):
        self.request_ids = None
        self._records = []
        self._warned = set()

    def _add(self, name, value, unit, idx, dimensions, metric_type):
        if not isinstance(name, str) or not name:
            raise ValueError("metric name must be a non-empty string")
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"metric {name}: value must be a number, got {type(value).__name__}")
        if isinstance(metric_type, str):
            metric_type = MetricTypes(metric_type.lower())
        req_id = None
        if idx is not None and self.request_ids:
            req_id = self.request_ids.get(idx)
        dims = {}
        for d in dimensions or []:
            if hasattr(d, "name") and hasattr(d, "value"):
                dims[str(d.name)] = str(d.value)
            elif isinstance(d, (tuple, list)) and len(d) == 2:
                dims[str(d[0])] = str(d[1])
            else:
                raise ValueError(f"metric {name}: bad dimension {d!r}")
        if dims and name not in self._warned:
            # /metrics labels a family by model and version only
            self._warned.add(name)
            logging.getLogger(__name__).warning(
                "metric %s: dimensions %s are not served; the value is reported per model", name,
                sorted(dims))
        self._records.append((name, value, unit, metric_type.value, dims, req_id))

    def add_counter(self, name, value, idx=None, dimensions=None):
        self._add(name, value, "Count", idx, dimensions, MetricTypes.COUNTER)

    def add_time(self, name, value, idx=None, unit="ms", dimensions=None,
                 metric_type=MetricTypes.GAUGE):
        if unit not in _TIME_UNITS:
            raise ValueError(f"metric {name}: unit {unit!r} is not one of {_TIME_UNITS}")
        self._add(name, value, unit, idx, dimensions, metric_type)

    def add_size(self, name, value, idx=None, unit="MB", dimensions=None,
                 metric_type=MetricTypes.GAUGE):
        if unit not in _SIZE_UNITS:
            raise ValueError(f"metric {name}: unit {unit!r} is not one of {_SIZE_UNITS}")
        self._add(name, value, unit, idx, dimensions, metric_type)

    def add_percent(self, name, value, idx=None, dimensions=None, metric_type=MetricTypes.GAUGE):
        self._add(name, value, "Percent", idx, dimensions, metric_type)

    def records(self):
        out, self._records = self._records, []
        return out
