"""Base64Codec (mlserver.codecs.base64): lists of bytes as base64 text in BYTES tensors."""
import base64 as _b64
import binascii
from typing import List

from ..types import Parameters, ResponseOutput
from .base import InputCodec, register_input_codec
from .errors import CodecError
from .lists import as_list, is_list_of


def _decode_b64(elem):
    if isinstance(elem, str):
        elem = elem.encode("ascii")
    try:
        return _b64.b64decode(elem, validate=True)
    except (binascii.Error, ValueError) as e:
        raise CodecError(f"not base64: {e}") from e


@register_input_codec
class Base64Codec(InputCodec):
    ContentType = "base64"
    TypeHint = List[bytes]

    @classmethod
    def can_encode(cls, payload):
        return is_list_of(payload, bytes)

    @classmethod
    def encode_output(cls, name, payload, use_bytes=True, **kwargs):
        enc = [_b64.b64encode(x) for x in payload]
        if not use_bytes:
            enc = [x.decode("ascii") for x in enc]
        return ResponseOutput(
            name=name,
            datatype="BYTES",
            shape=[len(payload), 1],
            data=enc,
            parameters=Parameters(content_type=cls.ContentType),
        )

    @classmethod
    def decode_output(cls, response_output):
        return [_decode_b64(x) for x in as_list(response_output.data.root)]

    @classmethod
    def decode_input(cls, request_input):
        return [_decode_b64(x) for x in as_list(request_input.data.root)]
