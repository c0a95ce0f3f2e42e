"""Codec helpers (mlserver.codecs.utils): request codecs built on one input codec, content types
from parameters or metadata, and the decoded payload a request keeps in its parameters."""
from ..types import InferenceRequest, InferenceResponse, Parameters, RequestInput, ResponseOutput
from .base import (
    RequestCodec,
    find_input_codec,
    find_input_codec_by_payload,
    find_request_codec,
    find_request_codec_by_payload,
)
from .errors import CodecError

DefaultOutputPrefix = "output-"
DefaultInputPrefix = "input-"
DecodedParameterName = "_decoded_payload"

InputOrOutput = (RequestInput, ResponseOutput)


def inject_batch_dimension(shape):
    """A 1-dimensional shape [N] becomes [N, 1]; others stay."""
    return list(shape) if len(shape) > 1 else list(shape) + [1]


def get_content_type(obj, metadata=None):
    """The content type of a request, input or output: its own parameter, else its metadata's."""
    prm = getattr(obj, "parameters", None)
    if prm is not None and prm.content_type:
        return prm.content_type
    mprm = getattr(metadata, "parameters", None) if metadata is not None else None
    if mprm is not None and mprm.content_type:
        return mprm.content_type
    return None


def _save_decoded(obj, decoded):
    if obj.parameters is None:
        obj.parameters = Parameters()
    obj.parameters.__dict__[DecodedParameterName] = decoded


def has_decoded(obj):
    return obj.parameters is not None and DecodedParameterName in obj.parameters.__dict__


def get_decoded(obj):
    return obj.parameters.__dict__[DecodedParameterName] if has_decoded(obj) else None


def get_decoded_or_raw(obj):
    if has_decoded(obj):
        return get_decoded(obj)
    if isinstance(obj, RequestInput):
        return obj.data
    return obj


def decode_request_input(request_input, metadata_inputs=None):
    meta = (metadata_inputs or {}).get(request_input.name)
    ct = get_content_type(request_input, meta)
    codec = find_input_codec(ct) if ct else None
    if codec is None:
        return None
    decoded = codec.decode_input(request_input)
    _save_decoded(request_input, decoded)
    return decoded


def decode_inference_request(request, model_settings=None, metadata_inputs=None):
    for request_input in request.inputs:
        decode_request_input(request_input, metadata_inputs)
    ct = get_content_type(request, model_settings)
    codec = find_request_codec(ct) if ct else None
    if codec is None:
        return None
    decoded = codec.decode_request(request)
    _save_decoded(request, decoded)
    return decoded


def encode_response_output(payload, request_output, metadata_outputs=None):
    meta = (metadata_outputs or {}).get(request_output.name)
    ct = get_content_type(request_output, meta)
    codec = find_input_codec(ct) if ct else find_input_codec_by_payload(payload)
    if codec is None:
        return None
    return codec.encode_output(name=request_output.name, payload=payload)


def encode_inference_response(payload, model_settings):
    codec = find_request_codec_by_payload(payload)
    if codec is None:
        return None
    version = model_settings.parameters.version if model_settings.parameters else None
    return codec.encode_response(model_settings.name, payload, version)


class SingleInputRequestCodec(RequestCodec):
    """A request codec that reads (writes) the request's one input (the response's one output)
    with InputCodec."""

    InputCodec = None

    @classmethod
    def can_encode(cls, payload):
        return cls.InputCodec is not None and cls.InputCodec.can_encode(payload)

    @classmethod
    def encode_response(cls, model_name, payload, model_version=None, **kwargs):
        out = cls.InputCodec.encode_output(f"{DefaultOutputPrefix}1", payload, **kwargs)
        return InferenceResponse(
            model_name=model_name,
            model_version=model_version,
            parameters=Parameters(content_type=cls.ContentType),
            outputs=[out],
        )

    @classmethod
    def decode_response(cls, response):
        if len(response.outputs) != 1:
            raise CodecError(
                f"{cls.__name__} decodes one output; the response has {len(response.outputs)}"
            )
        return cls.InputCodec.decode_output(response.outputs[0])

    @classmethod
    def encode_request(cls, payload, **kwargs):
        inp = cls.InputCodec.encode_input(f"{DefaultInputPrefix}1", payload, **kwargs)
        return InferenceRequest(
            parameters=Parameters(content_type=cls.ContentType), inputs=[inp]
        )

    @classmethod
    def decode_request(cls, request):
        if len(request.inputs) != 1:
            raise CodecError(
                f"{cls.__name__} decodes one input; the request has {len(request.inputs)}"
            )
        return cls.InputCodec.decode_input(request.inputs[0])
