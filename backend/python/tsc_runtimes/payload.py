"""The OIP payload between the frontend and the worker (common/oip_wire.h), in Python.

    "OIP1" | u32 LE header length | JSON header | raw tensors back to back

Request header: {"id"?, "parameters"?, "outputs"?: [names], "inputs": [{"name", "datatype",
"shape", "size", "parameters"?}], "stream"?: true, "generate"?: true} ("stream" and "generate"
are set for runtime models only: the call was infer_stream / generate_stream / ModelStreamInfer,
and the request had the generate shape, its text as the BYTES input "text_input").
Response header: {"parameters"?, "outputs": [{"name", "datatype", "shape", "size",
"parameters"?}]}. Raw data is little-endian, BOOL one byte per element, BYTES a u32 LE length
before each element.
"""
import json
import struct

import numpy as np

CTYPE = "application/x-ts-oip"
META_CTYPE = "application/x-ts-oip-metadata"

_NP = {
    "BOOL": np.dtype("u1"),
    "UINT8": np.dtype("<u1"),
    "UINT16": np.dtype("<u2"),
    "UINT32": np.dtype("<u4"),
    "UINT64": np.dtype("<u8"),
    "INT8": np.dtype("<i1"),
    "INT16": np.dtype("<i2"),
    "INT32": np.dtype("<i4"),
    "INT64": np.dtype("<i8"),
    "FP16": np.dtype("<f2"),
    "FP32": np.dtype("<f4"),
    "FP64": np.dtype("<f8"),
}


class PayloadError(ValueError):
    """A payload or a response that cannot be encoded: the message names the tensor."""


def split(body):
    """(header dict, raw bytes) of a payload."""
    if len(body) < 8 or body[:4] != b"OIP1":
        raise PayloadError("not an OIP payload")
    (n,) = struct.unpack_from("<I", body, 4)
    if 8 + n > len(body):
        raise PayloadError("OIP payload header runs past its end")
    return json.loads(bytes(body[8 : 8 + n])), memoryview(body)[8 + n :]


def _bytes_elems(raw, where):
    out, off = [], 0
    while off < len(raw):
        if off + 4 > len(raw):
            raise PayloadError(f"{where}: truncated BYTES element")
        (n,) = struct.unpack_from("<I", raw, off)
        off += 4
        if off + n > len(raw):
            raise PayloadError(f"{where}: truncated BYTES element")
        out.append(bytes(raw[off : off + n]))
        off += n
    return out


def _decode_data(dt, raw, where):
    if dt == "BYTES":
        return _bytes_elems(raw, where)
    if dt == "BF16":
        u = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
        return u.view(np.float32).astype(np.float64).tolist()
    a = np.frombuffer(raw, dtype=_NP[dt])
    return a.astype(bool).tolist() if dt == "BOOL" else a.tolist()


def tensors(header, raw, key="inputs"):
    """[{name, datatype, shape, parameters, data (flat list)}] of header[key], cut from raw."""
    out, off = [], 0
    for i, t in enumerate(header.get(key) or []):
        size = int(t.get("size", 0))
        where = f"{key}[{i}] {t.get('name')}"
        if off + size > len(raw):
            raise PayloadError(f"{where}: data runs past the payload")
        out.append(
            {
                "name": t["name"],
                "datatype": t["datatype"],
                "shape": list(t.get("shape") or []),
                "parameters": t.get("parameters"),
                "data": _decode_data(t["datatype"], raw[off : off + size], where),
            }
        )
        off += size
    return out


def flatten(data):
    if hasattr(data, "tolist") and not isinstance(data, (bytes, str)):
        data = data.tolist()
    if not isinstance(data, (list, tuple)):
        return [data]
    flat = []
    for x in data:
        if isinstance(x, (list, tuple)) or (hasattr(x, "tolist") and getattr(x, "ndim", 0)):
            flat.extend(flatten(x))
        else:
            flat.append(x)
    return flat


def _encode_data(dt, data, where):
    if dt == "BYTES":
        parts = []
        for x in data:
            if isinstance(x, str):
                x = x.encode("utf-8")
            elif isinstance(x, (bytearray, memoryview)):
                x = bytes(x)
            elif not isinstance(x, bytes):
                raise PayloadError(f"{where}: a BYTES element is {type(x).__name__}, not str or bytes")
            parts.append(struct.pack("<I", len(x)) + x)
        return b"".join(parts)
    if dt not in _NP:
        raise PayloadError(f"{where}: unknown datatype {dt!r}")
    if any(x is None for x in data) and dt in ("FP16", "FP32", "FP64"):
        data = [float("nan") if x is None else x for x in data]
    try:
        a = np.asarray(data, dtype=_NP[dt] if dt != "BOOL" else bool)
    except (TypeError, ValueError, OverflowError) as e:
        raise PayloadError(f"{where}: data is not {dt}: {e}") from e
    return a.astype(_NP[dt]).tobytes()


def encode_response(outputs, parameters=None):
    """A response payload from [{name, datatype, shape, parameters?, data}] (data flat or nested,
    a list or an array). PayloadError when an output's data does not fill its shape."""
    descs, raws = [], []
    for i, o in enumerate(outputs):
        where = f"outputs[{i}] {o['name']!r}"
        shape = [int(d) for d in o["shape"]]
        flat = flatten(o["data"])
        numel = 1
        for d in shape:
            numel *= d
        if any(d < 0 for d in shape) or numel != len(flat):
            raise PayloadError(
                f"{where}: shape {shape} holds {numel} elements, its data has {len(flat)}"
            )
        raw = _encode_data(o["datatype"], flat, where)
        d = {"name": o["name"], "datatype": o["datatype"], "shape": shape, "size": len(raw)}
        if o.get("parameters"):
            d["parameters"] = o["parameters"]
        descs.append(d)
        raws.append(raw)
    header = {"outputs": descs}
    if parameters:
        header["parameters"] = parameters
    h = json.dumps(header, separators=(",", ":"), default=str).encode()
    return b"OIP1" + struct.pack("<I", len(h)) + h + b"".join(raws)
