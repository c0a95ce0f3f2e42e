"""mlserver.errors: exceptions a runtime raises, each with the HTTP status MLServer answers it
with. torchserve-c answers the status and the message (gRPC: the mapped status code)."""


class MLServerError(Exception):
    def __init__(self, msg, status_code=500):
        super().__init__(msg)
        self.status_code = status_code


class InferenceError(MLServerError):
    def __init__(self, msg):
        super().__init__(msg, 400)


class InvalidModelURI(MLServerError):
    def __init__(self, name, model_uri=None):
        super().__init__(f"Invalid URI specified for model {name} ({model_uri})", 422)


class ModelNotFound(MLServerError):
    def __init__(self, name, version=None):
        what = f"Model {name} with version {version}" if version else f"Model {name}"
        super().__init__(f"{what} not found", 404)


class ModelNotReady(MLServerError):
    def __init__(self, name, version=None):
        what = f"Model {name} with version {version}" if version else f"Model {name}"
        super().__init__(f"{what} is not ready yet.", 400)


class ModelParametersMissing(MLServerError):
    def __init__(self, name):
        super().__init__(f"Parameters missing for model {name}", 400)
