"""Codec base classes and their registry (mlserver.codecs.base).

An input codec turns one request input (response output) into a Python object and back; a
request codec does it for a whole request (response). Each has a content type ("str", "np", ...)
and a type hint; the registry finds a codec by content type, by type hint (decode_args) or by
payload (can_encode).
"""
from ..types import InferenceRequest, InferenceResponse, RequestInput, ResponseOutput


class InputCodec:
    ContentType = None
    TypeHint = None

    @classmethod
    def can_encode(cls, payload):
        return False

    @classmethod
    def encode_output(cls, name, payload, **kwargs):
        raise NotImplementedError(f"{cls.__name__} does not encode outputs")

    @classmethod
    def decode_output(cls, response_output):
        raise NotImplementedError(f"{cls.__name__} does not decode outputs")

    @classmethod
    def encode_input(cls, name, payload, **kwargs):
        out = cls.encode_output(name, payload, **kwargs)
        return RequestInput(
            name=out.name,
            datatype=out.datatype,
            shape=out.shape,
            data=out.data,
            parameters=out.parameters,
        )

    @classmethod
    def decode_input(cls, request_input):
        raise NotImplementedError(f"{cls.__name__} does not decode inputs")

    # older names
    @classmethod
    def encode(cls, name, payload):
        return cls.encode_output(name, payload)

    @classmethod
    def decode(cls, request_input):
        return cls.decode_input(request_input)


class RequestCodec:
    ContentType = None
    TypeHint = None

    @classmethod
    def can_encode(cls, payload):
        return False

    @classmethod
    def encode_response(cls, model_name, payload, model_version=None, **kwargs):
        raise NotImplementedError(f"{cls.__name__} does not encode responses")

    @classmethod
    def decode_response(cls, response):
        raise NotImplementedError(f"{cls.__name__} does not decode responses")

    @classmethod
    def encode_request(cls, payload, **kwargs):
        raise NotImplementedError(f"{cls.__name__} does not encode requests")

    @classmethod
    def decode_request(cls, request):
        raise NotImplementedError(f"{cls.__name__} does not decode requests")

    @classmethod
    def encode(cls, model_name, payload, model_version=None):
        return cls.encode_response(model_name, payload, model_version)

    @classmethod
    def decode(cls, request):
        return cls.decode_request(request)


class _Registry:
    def __init__(self):
        self._codecs = {}  # content type -> codec, in registration order

    def register(self, content_type, codec):
        self._codecs[content_type] = codec

    def find(self, content_type):
        return self._codecs.get(content_type)

    def find_by_type_hint(self, hint):
        for codec in self._codecs.values():
            if codec.TypeHint is not None and codec.TypeHint == hint:
                return codec
        return None

    def find_by_payload(self, payload):
        for codec in self._codecs.values():
            if codec.can_encode(payload):
                return codec
        return None


_input_codecs = _Registry()
_request_codecs = _Registry()


def register_input_codec(codec):
    _input_codecs.register(codec.ContentType, codec)
    return codec


def register_request_codec(codec):
    _request_codecs.register(codec.ContentType, codec)
    return codec


def find_input_codec(content_type=None, payload=None, type_hint=None):
    if content_type:
        return _input_codecs.find(content_type)
    if type_hint is not None:
        return _input_codecs.find_by_type_hint(type_hint)
    if payload is not None:
        return _input_codecs.find_by_payload(payload)
    return None


def find_input_codec_by_payload(payload):
    return _input_codecs.find_by_payload(payload)


def find_request_codec(content_type=None, payload=None, type_hint=None):
    if content_type:
        return _request_codecs.find(content_type)
    if type_hint is not None:
        return _request_codecs.find_by_type_hint(type_hint)
    if payload is not None:
        return _request_codecs.find_by_payload(payload)
    return None


def find_request_codec_by_payload(payload):
    return _request_codecs.find_by_payload(payload)


__all__ = [
    "InputCodec",
    "RequestCodec",
    "register_input_codec",
    "register_request_codec",
    "find_input_codec",
    "find_input_codec_by_payload",
    "find_request_codec",
    "find_request_codec_by_payload",
    "InferenceRequest",
    "InferenceResponse",
    "ResponseOutput",
]
