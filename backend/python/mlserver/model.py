"""MLModel: the base class of an MLServer runtime (mlserver.model).

torchserve-c creates the runtime with its ModelSettings, awaits load(), and then, per request,
awaits predict(InferenceRequest) (OIP infer / gRPC ModelInfer) or iterates
predict_stream(AsyncIterator[InferenceRequest]) (infer_stream, generate_stream, gRPC
ModelStreamInfer), all on one asyncio event loop per worker, so several requests interleave.
"""
from .codecs.errors import CodecNotFound
from .codecs.utils import (
    decode_inference_request,
    decode_request_input,
    encode_inference_response,
    encode_response_output,
    get_decoded,
    has_decoded,
)
from .types import MetadataModelResponse, Parameters


def _index(tensors):
    return {t.name: t for t in tensors or []}


class MLModel:
    def __init__(self, settings):
        self._settings = settings
        self._inputs_index = _index(settings.inputs)
        self._outputs_index = _index(settings.outputs)
        self.ready = False

    async def load(self):
        """Loads the model; True (or None) when it is ready."""
        return True

    async def predict(self, payload):
        raise NotImplementedError("predict() method not implemented")

    async def predict_stream(self, payloads):
        """The default: one predict of the first request."""
        yield await self.predict(await payloads.__anext__())

    async def unload(self):
        return True

    @property
    def name(self):
        return self._settings.name

    @property
    def version(self):
        return self._settings.version

    @property
    def settings(self):
        return self._settings

    @property
    def inputs(self):
        return self._settings.inputs

    @inputs.setter
    def inputs(self, value):
        self._settings.inputs = value
        self._inputs_index = _index(value)

    @property
    def outputs(self):
        return self._settings.outputs

    @outputs.setter
    def outputs(self, value):
        self._settings.outputs = value
        self._outputs_index = _index(value)

    def decode(self, request_input, default_codec=None):
        """A request input as a Python object: the codec of its content type (or of its
        metadata's), else default_codec, else its raw data."""
        decode_request_input(request_input, self._inputs_index)
        if has_decoded(request_input):
            return get_decoded(request_input)
        if default_codec is not None:
            return default_codec.decode_input(request_input)
        return request_input.data

    def decode_request(self, inference_request, default_codec=None):
        decode_inference_request(inference_request, self._settings, self._inputs_index)
        if has_decoded(inference_request):
            return get_decoded(inference_request)
        if default_codec is not None:
            return default_codec.decode_request(inference_request)
        return inference_request

    def encode_response(self, payload, default_codec=None):
        response = encode_inference_response(payload, self._settings)
        if response is not None:
            return response
        if default_codec is not None:
            return default_codec.encode_response(self.name, payload, self.version)
        raise CodecNotFound(payload_type=str(type(payload)), is_request=True)

    def encode(self, payload, request_output, default_codec=None):
        out = encode_response_output(payload, request_output, self._outputs_index)
        if out is not None:
            return out
        if default_codec is not None:
            return default_codec.encode_output(request_output.name, payload)
        raise CodecNotFound(name=request_output.name)

    async def metadata(self):
        md = MetadataModelResponse(
            name=self.name,
            platform=self._settings.platform,
            versions=self._settings.versions,
            inputs=self._settings.inputs,
            outputs=self._settings.outputs,
        )
        if self._settings.parameters is not None and self._settings.parameters.content_type:
            md.parameters = Parameters(content_type=self._settings.parameters.content_type)
        return md
