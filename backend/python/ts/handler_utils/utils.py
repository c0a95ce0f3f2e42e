"""ts.handler_utils.utils: where newer TorchServe handlers import the streaming call from."""

from ts.protocol.otf_message_handler import send_intermediate_predict_response  # noqa: F401
