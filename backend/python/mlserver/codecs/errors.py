"""Codec errors (mlserver.codecs.errors): each is an MLServerError with status 400."""
from ..errors import MLServerError


class CodecError(MLServerError):
    def __init__(self, msg):
        super().__init__(msg, 400)


class CodecNotFound(CodecError):
    def __init__(self, name=None, payload_type=None, is_input=False, is_request=False):
        what = "request" if is_request else "input" if is_input else "output"
        where = f" for {name}" if name else ""
        of = f" of type {payload_type}" if payload_type else ""
        super().__init__(f"no {what} codec found{where}{of}")


class InputsNotFound(CodecError):
    def __init__(self, inputs, input_hints):
        names = ", ".join(getattr(i, "name", str(i)) for i in inputs)
        super().__init__(
            f"inputs {names} match no argument of predict ({', '.join(input_hints)})"
        )


class OutputNotFound(CodecError):
    def __init__(self, output_idx, output_type, output_hints):
        super().__init__(
            f"output {output_idx} of type {output_type} matches none of the return type "
            f"hints {output_hints}"
        )
