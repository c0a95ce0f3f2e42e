"""mlserver.codecs: how MLServer runtimes turn tensors into Python objects and back (torchserve-c's
own code, after MLServer's documented codecs): StringCodec ("str"), NumpyCodec ("np"),
Base64Codec ("base64"), the request codecs StringRequestCodec and NumpyRequestCodec, the
registry, and decode_args."""
from .base import (  # noqa: F401
    InputCodec,
    RequestCodec,
    find_input_codec,
    find_input_codec_by_payload,
    find_request_codec,
    find_request_codec_by_payload,
    register_input_codec,
    register_request_codec,
)
from .base64 import Base64Codec  # noqa: F401
from .decorator import decode_args  # noqa: F401
from .errors import CodecError, CodecNotFound  # noqa: F401
from .numpy import NumpyCodec, NumpyRequestCodec  # noqa: F401
from .string import StringCodec, StringRequestCodec  # noqa: F401
from .utils import (  # noqa: F401
    DecodedParameterName,
    SingleInputRequestCodec,
    decode_inference_request,
    decode_request_input,
    encode_inference_response,
    encode_response_output,
    get_decoded,
    get_decoded_or_raw,
    has_decoded,
)
