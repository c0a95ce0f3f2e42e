"""The worker frame protocol ("OTF", common/otf.h) in Python, for tests.

Frontend -> worker frames are built with encode_load / encode_infer / encode_cancel /
encode_seq_event; worker -> frontend frames are parsed with decode_response, which returns None
while the bytes hold only part of a frame (the protocol has no length prefix).
All integers are int32 big-endian, strings are int32 length + bytes, lists end with -1.
"""
import struct


def _i32(v):
    return struct.pack("!i", v)


def _str(s):
    if s is None:
        return _i32(0)
    if isinstance(s, str):
        s = s.encode()
    return _i32(len(s)) + s


def encode_load(name, path, batch_size=1, handler="", gpu_id=-1, envelope="", limit_max_image_pixels=True):
    return (b"L" + _str(name) + _str(path) + _i32(batch_size) + _str(handler) + _i32(gpu_id)
            + _str(envelope) + bytes([1 if limit_max_image_pixels else 0]))


def encode_request(req_id, headers=None, params=None):
    """headers: dict or list of (k, v); params: list of (name, content_type, value)."""
    out = _str(req_id)
    items = headers.items() if isinstance(headers, dict) else (headers or [])
    for k, v in items:
        out += _str(k) + _str(v)
    out += _i32(-1)
    for name, ctype, value in params or []:
        out += _str(name) + _str(ctype) + _str(value)
    return out + _i32(-1)


def encode_infer(requests):
    """requests: list of (req_id, headers, params)."""
    return b"I" + b"".join(encode_request(*r) for r in requests) + _i32(-1)


def encode_cancel(ids):
    return b"C" + b"".join(_str(i) for i in ids) + _i32(-1)


def encode_input(req_id, ctype, body):
    return b"D" + _str(req_id) + _str(ctype) + _str(body)


def encode_input_end(ids):
    return b"E" + b"".join(_str(i) for i in ids) + _i32(-1)


def encode_seq_event(seq_id, event):
    return b"S" + _str(seq_id) + _i32(event) + _i32(-1)


class Prediction:
    def __init__(self, req_id, ctype, status, phrase, headers, body):
        self.req_id = req_id
        self.ctype = ctype
        self.status = status
        self.phrase = phrase
        self.headers = headers  # dict, keys as sent
        self.body = body        # bytes

    def header(self, name):
        for k, v in self.headers.items():
            if k.lower() == name.lower():
                return v
        return None

    def __repr__(self):
        return "Prediction(%r, %d, %r, %r)" % (self.req_id, self.status, self.headers, self.body[:80])


class Response:
    def __init__(self, code, msg, preds):
        self.code = code
        self.msg = msg
        self.preds = preds

    def __repr__(self):
        return "Response(%d, %r, %r)" % (self.code, self.msg, self.preds)


class _Incomplete(Exception):
    pass


class _Reader:
    def __init__(self, data, offset=0):
        self.d = data
        self.o = offset

    def i32(self):
        if len(self.d) - self.o < 4:
            raise _Incomplete()
        (v,) = struct.unpack_from("!i", self.d, self.o)
        self.o += 4
        return v

    def raw(self, n):
        if n < 0:
            raise ValueError("negative length %d" % n)
        if len(self.d) - self.o < n:
            raise _Incomplete()
        b = bytes(self.d[self.o:self.o + n])
        self.o += n
        return b

    def str(self):
        return self.raw(self.i32())


# the worker's metadata headers carry binary values (common/otf.h): kept as bytes
BINARY_HEADERS = frozenset(("ts_worker_metrics", "ts_worker_step"))


def decode_response(data, offset=0):
    """(Response, bytes consumed from offset), or (None, 0) if data[offset:] holds only part of
    a frame."""
    r = _Reader(data, offset)
    try:
        code = r.i32()
        msg = r.str().decode()
        preds = []
        while True:
            n = r.i32()
            if n == -1:
                break
            rid = r.raw(n).decode()
            ctype = r.str().decode()
            status = r.i32()
            phrase = r.str().decode()
            nh = r.i32()
            headers = {}
            for _ in range(nh):
                k = r.str().decode()
                v = r.str()
                headers[k] = v if k in BINARY_HEADERS else v.decode()
            body = r.str()
            preds.append(Prediction(rid, ctype, status, phrase, headers, body))
        return Response(code, msg, preds), r.o - offset
    except _Incomplete:
        return None, 0
