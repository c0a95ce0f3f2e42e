"""An OIP gRPC answer's output values as MLServer's and Triton's clients read them: from
raw_output_contents when the answer is raw (inference.GRPCInferenceService always answers raw,
docs/oip.md), else from the typed contents. MLServer's ModelInferResponseConverter.to_types
unpacks raw outputs the same way (BYTES elements are a 4-byte little-endian length, then the
bytes)."""
import struct

_FMT = {"BOOL": "?", "UINT8": "B", "UINT16": "H", "UINT32": "I", "UINT64": "Q", "INT8": "b",
        "INT16": "h", "INT32": "i", "INT64": "q", "FP16": "e", "FP32": "f", "FP64": "d"}


def values(resp, i):
    """Output i of a ModelInferResponse as a flat list (bytes for BYTES)."""
    out = resp.outputs[i]
    if len(resp.raw_output_contents) > i:
        raw = resp.raw_output_contents[i]
        if out.datatype == "BYTES":
            got, k = [], 0
            while k < len(raw):
                n = struct.unpack_from("<I", raw, k)[0]
                got.append(raw[k + 4:k + 4 + n])
                k += 4 + n
            return got
        fmt = _FMT[out.datatype]
        return list(struct.unpack("<%d%s" % (len(raw) // struct.calcsize(fmt), fmt), raw))
    c = out.contents
    return (list(c.bytes_contents) or list(c.fp32_contents) or list(c.fp64_contents) or
            list(c.int_contents) or list(c.int64_contents) or list(c.uint_contents) or
            list(c.uint64_contents) or list(c.bool_contents))


def results(answers):
    """The answers of a Triton-form ModelStreamInfer call without the empty final response that
    marks the end of a request whose last frame was empty (triton_final_response: true)."""
    out = [a for a in answers if a.error_message or a.infer_response.outputs]
    for a in answers:
        if not a.error_message and not a.infer_response.outputs:
            assert a.infer_response.parameters["triton_final_response"].bool_param, a
    return out
