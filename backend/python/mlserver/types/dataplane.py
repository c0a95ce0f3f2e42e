"""The Open Inference Protocol's data plane as MLServer's runtimes see it (mlserver.types).

Field names, optionality and defaults follow MLServer's documented types; the classes are ours
(types/base.py). A `datatype` is kept as its name ("BYTES"), as MLServer keeps enum values; a
Datatype member is accepted wherever a name is.
"""
from enum import Enum

from .base import (
    BaseModel,
    Field,
    ValidationError,
    any_value,
    dictionary,
    integer,
    list_of,
    model_of,
    string,
)


class Datatype(Enum):
    BOOL = "BOOL"
    UINT8 = "UINT8"
    UINT16 = "UINT16"
    UINT32 = "UINT32"
    UINT64 = "UINT64"
    INT8 = "INT8"
    INT16 = "INT16"
    INT32 = "INT32"
    INT64 = "INT64"
    FP16 = "FP16"
    FP32 = "FP32"
    FP64 = "FP64"
    BYTES = "BYTES"


def datatype(v, where):
    if isinstance(v, Datatype):
        return v.value
    if isinstance(v, str) and v in Datatype.__members__:
        return v
    raise ValidationError(
        f"{where}: {v!r} is not a datatype ({', '.join(Datatype.__members__)})"
    )


class Parameters(BaseModel):
    """Free-form parameters: content_type and headers, and any other key."""

    _fields = {
        "content_type": Field(string, None),
        "headers": Field(dictionary, None),
    }
    _extra = True


class TensorData(BaseModel):
    """A tensor's data: the list as given (flat or nested), in `root`. Iterates, indexes and
    measures as that list."""

    _fields = {"root": Field(any_value)}

    def __init__(self, root):
        super().__init__(root=root)

    @classmethod
    def _from(cls, d, where):
        return cls(root=d)

    def _dump(self, exclude_unset, exclude_none):
        return self.root

    def __iter__(self):
        return iter(self.root)

    def __getitem__(self, idx):
        return self.root[idx]

    def __len__(self):
        return len(self.root)


def tensor_data(v, where):
    if isinstance(v, TensorData):
        return v
    if hasattr(v, "tolist") and not isinstance(v, (list, tuple)):
        v = v.tolist()  # a numpy array given as data
    return TensorData(root=v)


_params = model_of(Parameters)
_shape = list_of(integer)


class MetadataTensor(BaseModel):
    _fields = {
        "name": Field(string),
        "datatype": Field(datatype),
        "shape": Field(_shape),
        "parameters": Field(_params, None),
    }


class RequestInput(BaseModel):
    _fields = {
        "name": Field(string),
        "shape": Field(_shape),
        "datatype": Field(datatype),
        "parameters": Field(_params, None),
        "data": Field(tensor_data),
    }


class RequestOutput(BaseModel):
    _fields = {
        "name": Field(string),
        "parameters": Field(_params, None),
    }


class ResponseOutput(BaseModel):
    _fields = {
        "name": Field(string),
        "shape": Field(_shape),
        "datatype": Field(datatype),
        "parameters": Field(_params, None),
        "data": Field(tensor_data),
    }


class InferenceRequest(BaseModel):
    _fields = {
        "id": Field(string, None),
        "parameters": Field(_params, None),
        "inputs": Field(list_of(model_of(RequestInput))),
        "outputs": Field(list_of(model_of(RequestOutput)), None),
    }


class InferenceResponse(BaseModel):
    _fields = {
        "model_name": Field(string),
        "model_version": Field(string, None),
        "id": Field(string, None),
        "parameters": Field(_params, None),
        "outputs": Field(list_of(model_of(ResponseOutput))),
    }


class InferenceErrorResponse(BaseModel):
    _fields = {"error": Field(string, None)}


class MetadataServerResponse(BaseModel):
    _fields = {
        "name": Field(string),
        "version": Field(string),
        "extensions": Field(list_of(string)),
    }


class MetadataModelResponse(BaseModel):
    _fields = {
        "name": Field(string),
        "versions": Field(list_of(string), None),
        "platform": Field(string),
        "inputs": Field(list_of(model_of(MetadataTensor)), None),
        "outputs": Field(list_of(model_of(MetadataTensor)), None),
        "parameters": Field(_params, None),
    }
