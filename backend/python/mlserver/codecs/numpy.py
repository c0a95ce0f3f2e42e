"""NumpyCodec and NumpyRequestCodec (mlserver.codecs.numpy): tensors as numpy arrays.

numpy is optional: without it `import mlserver` works and these codecs are not found.
"""
from ..types import Parameters, ResponseOutput
from .base import InputCodec, register_input_codec, register_request_codec
from .errors import CodecError
from .utils import SingleInputRequestCodec, inject_batch_dimension

_TO_NUMPY = {
    "BOOL": "bool",
    "UINT8": "uint8",
    "UINT16": "uint16",
    "UINT32": "uint32",
    "UINT64": "uint64",
    "INT8": "int8",
    "INT16": "int16",
    "INT32": "int32",
    "INT64": "int64",
    "FP16": "float16",
    "FP32": "float32",
    "FP64": "float64",
}
_FROM_NUMPY = {v: k for k, v in _TO_NUMPY.items()}


def _np():
    import numpy

    return numpy


def to_datatype(dtype):
    name = str(dtype)
    if name in _FROM_NUMPY:
        return _FROM_NUMPY[name]
    if dtype.kind in "USO":
        return "BYTES"
    raise CodecError(f"numpy dtype {name} has no Open Inference Protocol datatype")


def to_ndarray(input_or_output):
    np = _np()
    data = getattr(input_or_output.data, "root", input_or_output.data)
    dt = input_or_output.datatype
    if dt == "BYTES":
        arr = np.array(list(data) if not isinstance(data, list) else data)
    else:
        try:
            arr = np.array(data, dtype=_TO_NUMPY[dt])
        except (TypeError, ValueError) as e:
            raise CodecError(f"{input_or_output.name}: data is not {dt}: {e}") from e
    try:
        return arr.reshape(input_or_output.shape)
    except ValueError as e:
        raise CodecError(
            f"{input_or_output.name}: {arr.size} elements do not fit shape "
            f"{list(input_or_output.shape)}"
        ) from e


def _encode_data(arr, datatype):
    flat = arr.flatten().tolist()
    if datatype == "BYTES":
        return [x.encode("utf-8") if isinstance(x, str) else x for x in flat]
    if arr.dtype.kind == "f":
        return [None if x != x else x for x in flat]  # NaN has no JSON form
    return flat


@register_input_codec
class NumpyCodec(InputCodec):
    """A numpy array as a tensor; a 1-dimensional array of N gets shape [N, 1]."""

    ContentType = "np"

    @classmethod
    def can_encode(cls, payload):
        try:
            return isinstance(payload, _np().ndarray)
        except ImportError:
            return False

    @classmethod
    def encode_output(cls, name, payload, **kwargs):
        datatype = to_datatype(payload.dtype)
        return ResponseOutput(
            name=name,
            datatype=datatype,
            shape=inject_batch_dimension(list(payload.shape)),
            data=_encode_data(payload, datatype),
            parameters=Parameters(content_type=cls.ContentType),
        )

    @classmethod
    def decode_output(cls, response_output):
        return to_ndarray(response_output)

    @classmethod
    def decode_input(cls, request_input):
        return to_ndarray(request_input)


@register_request_codec
class NumpyRequestCodec(SingleInputRequestCodec):
    """The request's one input (the response's one output) as a numpy array."""

    InputCodec = NumpyCodec
    ContentType = NumpyCodec.ContentType


try:  # the type hint decode_args matches np.ndarray arguments with
    NumpyCodec.TypeHint = NumpyRequestCodec.TypeHint = _np().ndarray
except ImportError:
    pass
