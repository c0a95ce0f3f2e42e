"""ts.metrics.metric_cache_errors: the errors of TorchServe's metrics cache API."""


class GeneralMetricsCacheError(Exception):
    """Any other failure of the metrics cache."""


class MetricsCacheIOError(IOError):
    """The metrics declarations could not be read."""


class MetricsCacheTypeError(TypeError):
    """An argument of the wrong type (a metric name that is not a str, ...)."""


class MetricsCacheValueError(ValueError):
    """A value the metric cannot take (a time unit other than ms or s, ...)."""


class MetricsCacheKeyError(KeyError):
    """No metric of that name and type in the cache."""
