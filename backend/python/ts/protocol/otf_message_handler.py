"""ts.protocol.otf_message_handler: the part of TorchServe's worker protocol handlers call.

Frames are written by the C worker; send_intermediate_predict_response() hands it one partial
result per request, which the worker writes at once (ts_stream_next: true).
"""

import io
import json

from ts.utils.util import RequestCancelled


def encode_value(val):
    """A handler's result as response bytes, the way TorchServe encodes it.

    The worker encodes bytes, str and plain JSON results itself, byte for byte the same
    (_ts_worker.respond, backend/python/py_json.c; tests/unit/test_py_json.c holds it to
    json.dumps): a change here must be made there too. This is the path for everything else."""
    if isinstance(val, (bytes, bytearray)):
        return bytes(val)
    if isinstance(val, str):
        return val.encode("utf-8")
    import torch

    if isinstance(val, torch.Tensor):
        buf = io.BytesIO()
        torch.save(val, buf)
        return buf.getvalue()
    # TorchServe indents by 2; the same JSON value without indentation is written by json's C
    # encoder, some 25 us less per result (indent= takes the pure-Python encoder)
    return json.dumps(val).encode("utf-8")


def default_content_type(val):
    """The Content-Type of a result whose handler set none (the worker's respond() picks the
    same for the results it encodes): JSON for what encode_value dumps, text for a str, bytes
    as they are. (TorchServe sends no Content-Type then; an HTTP answer
    without one is taken for text/html by libevent and by browsers.)"""
    if isinstance(val, (bytes, bytearray)):
        return "application/octet-stream"
    if isinstance(val, str):
        return "text/plain; charset=utf-8"
    if type(val).__module__.startswith("torch"):
        return "application/octet-stream"  # torch.save bytes
    return "application/json"


def send_intermediate_predict_response(ret, req_id_map, message, code, context=None):
    """Streams ret[idx] to the client of request req_id_map[idx] now, for each idx.

    Raises RequestCancelled for a request whose client went away or whose sequence was
    cancelled (the others of the call are sent first)."""
    if context is None or getattr(context, "_send_intermediate", None) is None:
        raise RuntimeError("send_intermediate_predict_response needs the handler's context")
    cancelled = []
    for idx, req_id in req_id_map.items():
        if code != 200:
            context.set_response_status(code, message, idx)
        if not any(k.lower() == "content-type" for k in context.get_response_headers(idx)):
            context.set_response_content_type(idx, default_content_type(ret[idx]))
        if not context._send_intermediate(req_id, encode_value(ret[idx])):
            cancelled.append(req_id)
    if cancelled:
        raise RequestCancelled(f"request {', '.join(cancelled)} was cancelled")
