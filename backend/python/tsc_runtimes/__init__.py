"""Other servers' model contracts in torchserve-c's Python worker (torchserve-c internal).

ts._service.load() hands a model here when the frontend found one of them in the model's folder
(frontend/mgmt/model_kind.c): "mlserver" (model-settings.json: an MLServer runtime,
mlserver_app.py) or "inferless" (app.py + input_schema.py, inferless_app.py). Both run their
requests concurrently on one event loop per worker (host.py).
"""
from .host import Host


def load_runtime(spec, model_name, model_dir, batch_size):
    """The service (step(n), destroy()) of the model; raises with a one-line message."""
    host = Host(None)
    if spec == "mlserver":
        from .mlserver_app import MLServerApp

        host.app = MLServerApp(host, model_name, model_dir)
    elif spec == "inferless":
        from .inferless_app import InferlessApp

        host.app = InferlessApp(host, model_name, model_dir)
    else:
        raise ValueError(f"unknown runtime {spec}")
    return host
