"""Metric types of TorchServe's metrics API."""

import enum


class MetricTypes(enum.Enum):
    COUNTER = "counter"
    GAUGE = "gauge"
    HISTOGRAM = "histogram"
