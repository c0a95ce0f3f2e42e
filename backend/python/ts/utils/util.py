"""Helpers that TorchServe handlers import from ts.utils.util."""

import json
import logging
import os

from ts.utils.labels import map_class_to_label  # noqa: F401  (handlers import it from here)

logger = logging.getLogger(__name__)


class PredictionException(Exception):
    """Raised by a handler to answer every request of the batch with error_code and this
    message; returned in a request's place in the handler's list of results, it answers that
    request alone so (torchserve-c)."""

    def __init__(self, message, error_code=500):
        self.message = message
        self.error_code = error_code
        super().__init__(message)

    def __str__(self):
        return f"{self.message} : {self.error_code}"


class RequestCancelled(Exception):
    """send_intermediate_predict_response for a request whose client went away or whose
    sequence was cancelled: stop producing for it."""


def list_classes_from_module(module, parent_class=None):
    """The classes defined in module itself (not imported into it), in definition order,
    optionally only the subclasses of parent_class."""
    import inspect

    classes = [
        cls
        for _, cls in inspect.getmembers(module, inspect.isclass)
        if cls.__module__ == module.__name__
    ]
    if parent_class is not None:
        classes = [c for c in classes if issubclass(c, parent_class)]
    classes.sort(key=lambda c: inspect.getsourcelines(c)[1] if _has_source(c) else 0)
    return classes


def single_class(module, what):
    """The one class module defines; ValueError naming what otherwise."""
    classes = list_classes_from_module(module)
    if len(classes) != 1:
        raise ValueError(
            f"{what}: expected exactly one class, found {[c.__name__ for c in classes]}"
        )
    return classes[0]


def _has_source(cls):
    import inspect

    try:
        inspect.getsourcelines(cls)
        return True
    except (OSError, TypeError):
        return False


def load_label_mapping(mapping_file_path):
    """index_to_name.json as a dict of str -> label, or None when the file does not exist."""
    if not mapping_file_path or not os.path.isfile(mapping_file_path):
        logger.warning(
            "Missing the index_to_name.json file. Inference output will not include class name."
        )
        return None
    with open(mapping_file_path) as f:
        mapping = json.load(f)
    if not isinstance(mapping, dict):
        raise Exception(
            f"{os.path.basename(mapping_file_path)}: expected an object of index -> label"
        )
    out = {}
    for key, value in mapping.items():
        if isinstance(value, list):
            value = value[-1]
        out[str(key)] = value
    return out


def get_yaml_config(yaml_file_path):
    import yaml

    with open(yaml_file_path) as f:
        return yaml.safe_load(f) or {}
