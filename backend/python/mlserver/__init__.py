"""Our `mlserver` package: MLServer's runtime contract for torchserve-c's Python worker.

Written for torchserve-c from MLServer's documented contract (it is not MLServer): an
MLServer runtime (`MLModel` subclass, named by model-settings.json's `implementation`) imports
these names unchanged. The server side (loading model-settings.json, requests in, responses out)
is tsc_runtimes/mlserver_app.py.
"""
from . import codecs, types  # noqa: F401
from .model import MLModel  # noqa: F401
from .settings import ModelParameters, ModelSettings, Settings  # noqa: F401
from .version import __version__  # noqa: F401
