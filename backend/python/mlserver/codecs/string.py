"""StringCodec and StringRequestCodec (mlserver.codecs.string): lists of str as BYTES tensors."""
from typing import List

from ..types import Parameters, ResponseOutput
from .base import InputCodec, register_input_codec, register_request_codec
from .lists import as_list, is_list_of
from .utils import SingleInputRequestCodec

_ENCODING = "utf-8"


def encode_str(elem):
    return elem.encode(_ENCODING)


def decode_str(elem, str_codec=_ENCODING):
    if elem is None:
        return None
    if isinstance(elem, (bytes, bytearray)):
        return bytes(elem).decode(str_codec)
    if isinstance(elem, str):  # JSON requests carry text as str already
        return elem
    return ""


def _decode(input_or_output):
    data = getattr(input_or_output.data, "root", input_or_output.data)
    return [decode_str(x) for x in as_list(data)]


@register_input_codec
class StringCodec(InputCodec):
    """A list of Python strings as a BYTES input (output) of shape [N, 1]."""

    ContentType = "str"
    TypeHint = List[str]

    @classmethod
    def can_encode(cls, payload):
        return is_list_of(payload, str)

    @classmethod
    def encode_output(cls, name, payload, use_bytes=True, **kwargs):
        data = [encode_str(x) for x in payload] if use_bytes else list(payload)
        return ResponseOutput(
            name=name,
            datatype="BYTES",
            shape=[len(payload), 1],
            data=data,
            parameters=Parameters(content_type=cls.ContentType),
        )

    @classmethod
    def decode_output(cls, response_output):
        return _decode(response_output)

    @classmethod
    def decode_input(cls, request_input):
        return _decode(request_input)

    @classmethod
    def encode_input(cls, name, payload, use_bytes=True, **kwargs):
        return super().encode_input(name, payload, use_bytes=use_bytes, **kwargs)


@register_request_codec
class StringRequestCodec(SingleInputRequestCodec):
    """The request's one input (the response's one output) as a list of strings."""

    InputCodec = StringCodec
    ContentType = StringCodec.ContentType
    TypeHint = List[str]
