"""context.metrics: TorchServe's metrics cache API.

A cache of metrics keyed by type and name (ts.metrics.caching_metric.CachingMetric). It starts
with the model metrics that metrics.yaml declares (config.properties metrics_config; the frontend
passes them as JSON in TS_WORKER_MODEL_METRICS), so get_metric finds them as in TorchServe.

  add_metric_to_cache(metric_name, unit, dimension_names, metric_type)  register (no value)
  get_metric(metric_name, metric_type)                 the cached metric, else MetricsCacheKeyError
  add_metric(name, value, unit, idx, dimensions, metric_type)            register if new, report
  add_counter / add_time / add_size / add_percent / add_error            the same, typed

The add_* methods add TorchServe's default dimensions after the given ones: ModelName and
Level=Model inside a handle call, Level=Error outside one (initialize). Each value is reported
at once (caching_metric.py); the frontend serves it on /metrics with its dimensions and Hostname,
or writes it to model_metrics.log.
"""

import json
import logging
import os

import ts.metrics.metric_cache_errors as merrors
from ts.metrics.caching_metric import CachingMetric
from ts.metrics.dimension import Dimension
from ts.metrics.metric_type_enum import MetricTypes

logger = logging.getLogger(__name__)

DECLARATIONS_ENV = "TS_WORKER_MODEL_METRICS"


def _declared():
    """metrics.yaml's model_metrics, as the frontend hands them to the worker."""
    raw = os.environ.get(DECLARATIONS_ENV)
    if not raw:
        return []
    try:
        return json.loads(raw)
    except ValueError as e:
        raise merrors.GeneralMetricsCacheError(f"{DECLARATIONS_ENV}: {e}") from e


class Metrics:
    def __init__(self, model_name=None, declarations=None):
        self.cache = {}
        self.request_ids = None
        self.model_name = model_name
        for d in _declared() if declarations is None else declarations:
            self.add_metric_to_cache(d["name"], d.get("unit", ""), d.get("dimensions") or [],
                                     MetricTypes(d.get("type", "counter")))

    # ---- the cache

    @staticmethod
    def _check_type(value, types, message):
        if not isinstance(value, types):
            raise merrors.MetricsCacheTypeError(message)

    def add_metric_to_cache(self, metric_name, unit, dimension_names=None,
                            metric_type=MetricTypes.COUNTER):
        self._check_type(metric_name, str, "`metric_name` must be a str")
        self._check_type(unit, str, "`unit` must be a str")
        self._check_type(metric_type, MetricTypes, "`metric_type` must be a MetricTypes enum")
        if dimension_names:
            self._check_type(dimension_names, list,
                             "`dimension_names` should be a list of dimension name strings")
        per_type = self.cache.setdefault(metric_type, {})
        if metric_name in per_type:
            logger.warning("Overriding existing key %s:%s", metric_type, metric_name)
        metric = CachingMetric(metric_name, unit, dimension_names or [], metric_type)
        per_type[metric_name] = metric
        return metric

    def get_metric(self, metric_name, metric_type=MetricTypes.COUNTER):
        self._check_type(metric_name, str, "`metric_name` must be a str")
        self._check_type(metric_type, MetricTypes, "`metric_type` must be a MetricTypes enum")
        try:
            return self.cache[metric_type][metric_name]
        except KeyError as e:
            raise merrors.MetricsCacheKeyError(
                f"Metric of type {metric_type} and name {metric_name} doesn't exist") from e

    # ---- reporting

    def set_request_ids(self, request_ids):
        self.request_ids = request_ids

    def _get_req(self, idx):
        """The request ids a value belongs to: request idx's, or all of the call's."""
        req_id = self.request_ids
        if isinstance(req_id, dict):
            req_id = ",".join(str(v) for v in self.request_ids.values())
        if idx is not None and isinstance(self.request_ids, dict) and idx in self.request_ids:
            req_id = self.request_ids[idx]
        return req_id

    def _add_default_dims(self, req_id, dimensions):
        dimensions = list(dimensions or [])
        names = [d.name for d in dimensions]
        if req_id is None:
            if "Level" not in names:
                dimensions.append(Dimension("Level", "Error"))
        else:
            if "ModelName" not in names:
                dimensions.append(Dimension("ModelName", self.model_name))
            if "Level" not in names:
                dimensions.append(Dimension("Level", "Model"))
        return dimensions

    def _get_or_add_metric(self, name, unit, dimensions, metric_type):
        try:
            return self.get_metric(name, metric_type)
        except merrors.MetricsCacheKeyError:
            return self.add_metric_to_cache(name, unit, [d.name for d in dimensions], metric_type)

    def _report(self, name, value, unit, idx, dimensions, metric_type):
        if isinstance(metric_type, str):
            metric_type = MetricTypes(metric_type.lower())
        req_id = self._get_req(idx)
        dims = self._add_default_dims(req_id, dimensions)
        metric = self._get_or_add_metric(name, unit, dims, metric_type)
        metric.add_or_update(value, [d.value for d in dims], req_id)

    def add_metric(self, name, value, unit, idx=None, dimensions=None,
                   metric_type=MetricTypes.COUNTER):
        self._report(name, value, unit, idx, dimensions, metric_type)

    def add_counter(self, name, value, idx=None, dimensions=None):
        self._report(name, value, "count", idx, dimensions, MetricTypes.COUNTER)

    def add_time(self, name, value, idx=None, unit="ms", dimensions=None,
                 metric_type=MetricTypes.GAUGE):
        if unit not in ("ms", "s"):
            raise merrors.MetricsCacheValueError(
                "the unit for a timed metric should be one of ['ms', 's']")
        self._report(name, value, unit, idx, dimensions, metric_type)

    def add_size(self, name, value, idx=None, unit="MB", dimensions=None,
                 metric_type=MetricTypes.GAUGE):
        if unit not in ("MB", "kB", "GB", "B"):
            raise ValueError("The unit for size based metric is one of ['MB','kB', 'GB', 'B']")
        self._report(name, value, unit, idx, dimensions, metric_type)

    def add_percent(self, name, value, idx=None, dimensions=None, metric_type=MetricTypes.GAUGE):
        self._report(name, value, "percent", idx, dimensions, metric_type)

    def add_error(self, name, value, dimensions=None):
        dims = self._add_default_dims(None, dimensions)
        metric = self._get_or_add_metric(name, "", dims, MetricTypes.COUNTER)
        metric.add_or_update(value, [d.value for d in dims])
