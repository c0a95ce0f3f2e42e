"""decode_args (mlserver.codecs.decorator): a predict written with typed arguments.

    @decode_args
    async def predict(self, questions: List[str], scores: np.ndarray) -> np.ndarray: ...

Each request input is decoded into the argument of its name with the codec of that argument's
type hint (Optional[X] counts as X); the return value (a tuple for several outputs) is encoded
with the codec of the return type hint (or of the value) into outputs "output-0", "output-1",
... of an InferenceResponse from this model.
"""
import functools
import inspect
import typing

from ..types import InferenceResponse
from .base import find_input_codec, find_input_codec_by_payload
from .errors import CodecNotFound, InputsNotFound, OutputNotFound
from .utils import DefaultOutputPrefix


def _unwrap_optional(hint):
    if typing.get_origin(hint) is typing.Union:
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return hint


def _output_hints(hint):
    if hint is None or hint is inspect.Signature.empty:
        return []
    if typing.get_origin(hint) is tuple:
        return list(typing.get_args(hint))
    return [hint]


class _Signature:
    def __init__(self, predict):
        hints = typing.get_type_hints(predict)
        self.outputs = [_unwrap_optional(h) for h in _output_hints(hints.pop("return", None))]
        self.inputs = {}
        for name, hint in hints.items():
            codec = find_input_codec(type_hint=_unwrap_optional(hint))
            if codec is None:
                raise CodecNotFound(name=name, payload_type=str(hint), is_input=True)
            self.inputs[name] = codec

    def decode(self, request):
        args, unknown = {}, []
        for inp in request.inputs:
            codec = self.inputs.get(inp.name)
            if codec is None:
                unknown.append(inp)
            else:
                args[inp.name] = codec.decode_input(inp)
        if unknown:
            raise InputsNotFound(unknown, self.inputs)
        return args

    def encode(self, model, result):
        values = list(result) if isinstance(result, tuple) else [result]
        outputs = []
        for i, v in enumerate(values):
            codec = None
            if i < len(self.outputs):
                codec = find_input_codec(type_hint=self.outputs[i])
            if codec is None:
                codec = find_input_codec_by_payload(v)
            if codec is None:
                raise OutputNotFound(i, type(v), self.outputs)
            outputs.append(codec.encode_output(name=f"{DefaultOutputPrefix}{i}", payload=v))
        return InferenceResponse(model_name=model.name, model_version=model.version, outputs=outputs)


def decode_args(predict):
    sig = _Signature(predict)

    @functools.wraps(predict)
    async def wrapper(self, request):
        result = await predict(self, **sig.decode(request))
        return sig.encode(self, result)

    return wrapper
