"""mlserver.types: the data plane types MLServer runtimes use (torchserve-c's own code)."""
from .base import BaseModel, ValidationError  # noqa: F401
from .dataplane import (  # noqa: F401
    Datatype,
    InferenceErrorResponse,
    InferenceRequest,
    InferenceResponse,
    MetadataModelResponse,
    MetadataServerResponse,
    MetadataTensor,
    Parameters,
    RequestInput,
    RequestOutput,
    ResponseOutput,
    TensorData,
)
