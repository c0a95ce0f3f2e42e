"""The data-model base of our mlserver package (torchserve-c's own code).

MLServer's types are pydantic models; Debian's Python has no pydantic 2, so this is a small
stand-in with the part of that surface runtimes use: keyword construction with conversion and
checks of each field, attribute access, `model_dump()` / `dict()`, `model_dump_json()` / `json()`,
`model_validate()` / `parse_obj()`, `model_validate_json()` / `parse_raw()`, `parse_file()`,
`model_copy()` / `copy()`, equality. As in MLServer, `model_dump()` leaves out fields that were
never set and fields that are None; `dict()` keeps them (pydantic's own default).
"""
import copy as _copy
import json
from enum import Enum

_MISSING = object()


class ValidationError(ValueError):
    """A field that is missing or of the wrong type (pydantic raises its ValidationError)."""


class Field:
    """One field: conv(value, where) converts or raises ValidationError; default (or a factory)
    when absent; _MISSING makes it required."""

    def __init__(self, conv, default=_MISSING):
        self.conv = conv
        self.default = default


def any_value(v, where):
    return v


def string(v, where):
    if isinstance(v, Enum):
        v = v.value
    if not isinstance(v, str):
        raise ValidationError(f"{where}: expected a string, got {type(v).__name__}")
    return v


def integer(v, where):
    if isinstance(v, bool) or not isinstance(v, int):
        try:
            import numpy as np

            if isinstance(v, np.integer):
                return int(v)
        except ImportError:
            pass
        raise ValidationError(f"{where}: expected an integer, got {type(v).__name__}")
    return v


def dictionary(v, where):
    if not isinstance(v, dict):
        raise ValidationError(f"{where}: expected an object, got {type(v).__name__}")
    return v


def list_of(conv):
    def convert(v, where):
        if not isinstance(v, (list, tuple)):
            raise ValidationError(f"{where}: expected a list, got {type(v).__name__}")
        return [conv(x, f"{where}[{i}]") for i, x in enumerate(v)]

    return convert


def model_of(cls):
    def convert(v, where):
        if isinstance(v, cls):
            return v
        if isinstance(v, BaseModel):  # a model of another class with the same fields
            v = v.model_dump()
        if not isinstance(v, dict):
            raise ValidationError(f"{where}: expected {cls.__name__}, got {type(v).__name__}")
        return cls._from(v, where)

    return convert


def _plain(v, exclude_unset, exclude_none):
    if isinstance(v, BaseModel):
        return v._dump(exclude_unset, exclude_none)
    if isinstance(v, (list, tuple)):
        return [_plain(x, exclude_unset, exclude_none) for x in v]
    if isinstance(v, dict):
        return {
            k: _plain(x, exclude_unset, exclude_none)
            for k, x in v.items()
            if not (exclude_none and x is None)
        }
    if isinstance(v, Enum):
        return v.value
    return v


def _json_default(v):
    if isinstance(v, (bytes, bytearray)):
        return v.decode("utf-8", errors="replace")
    if hasattr(v, "tolist"):  # numpy arrays and scalars
        return v.tolist()
    raise TypeError(f"{type(v).__name__} is not JSON serializable")


class BaseModel:
    """Subclasses list their fields in `_fields` ({name: Field}); `_extra` allows other keys
    (kept as attributes, as pydantic's extra="allow")."""

    _fields = {}
    _extra = False

    def __init__(self, **kw):
        self.__dict__["_set"] = set()
        self._fill(kw, type(self).__name__)

    @classmethod
    def _from(cls, d, where):
        obj = cls.__new__(cls)
        obj.__dict__["_set"] = set()
        obj._fill(dict(d), where)
        return obj

    def _fill(self, kw, where):
        for name, f in self._fields.items():
            if name in kw:
                v = kw.pop(name)
                if v is not None:
                    v = f.conv(v, f"{where}.{name}")
                self._set.add(name)
            elif f.default is _MISSING:
                raise ValidationError(f"{where}.{name}: field required")
            else:
                v = f.default() if callable(f.default) else _copy.copy(f.default)
            self.__dict__[name] = v
        if self._extra:
            for k, v in kw.items():
                self.__dict__[k] = v
                self._set.add(k)
        # pydantic ignores unknown fields by default; so do we

    def __setattr__(self, name, value):
        f = self._fields.get(name)
        if f is not None and value is not None:
            value = f.conv(value, f"{type(self).__name__}.{name}")
        elif f is None and not self._extra and not name.startswith("_"):
            raise ValueError(f'"{type(self).__name__}" object has no field "{name}"')
        self.__dict__[name] = value
        if not name.startswith("_"):
            self._set.add(name)

    def _keys(self):
        keys = list(self._fields)
        if self._extra:
            keys += [k for k in self.__dict__ if k not in self._fields and not k.startswith("_")]
        return keys

    def _dump(self, exclude_unset, exclude_none):
        out = {}
        for k in self._keys():
            v = self.__dict__.get(k)
            if exclude_unset and k not in self._set:
                continue
            if exclude_none and v is None:
                continue
            out[k] = _plain(v, exclude_unset, exclude_none)
        return out

    # ---- pydantic 2 names (with MLServer's defaults) and pydantic 1 names

    def model_dump(self, exclude_unset=True, exclude_none=True, **_kw):
        return self._dump(exclude_unset, exclude_none)

    def dict(self, exclude_unset=False, exclude_none=False, **_kw):
        return self._dump(exclude_unset, exclude_none)

    def model_dump_json(self, exclude_unset=True, exclude_none=True, **_kw):
        return json.dumps(self._dump(exclude_unset, exclude_none), default=_json_default)

    def json(self, exclude_unset=False, exclude_none=False, **_kw):
        return json.dumps(self._dump(exclude_unset, exclude_none), default=_json_default)

    @classmethod
    def model_validate(cls, obj):
        if isinstance(obj, cls):
            return obj
        return model_of(cls)(obj, cls.__name__)

    parse_obj = model_validate

    @classmethod
    def model_validate_json(cls, data):
        try:
            obj = json.loads(data)
        except ValueError as e:
            raise ValidationError(f"{cls.__name__}: invalid JSON: {e}") from e
        return cls.model_validate(obj)

    parse_raw = model_validate_json

    @classmethod
    def parse_file(cls, path):
        with open(path, "rb") as f:
            return cls.model_validate_json(f.read())

    def model_copy(self, update=None, deep=False):
        new = _copy.deepcopy(self) if deep else _copy.copy(self)
        new.__dict__["_set"] = set(self._set)
        for k, v in (update or {}).items():
            setattr(new, k, v)
        return new

    def copy(self, update=None, deep=False):
        return self.model_copy(update=update, deep=deep)

    def __copy__(self):
        new = type(self).__new__(type(self))
        new.__dict__.update(self.__dict__)
        new.__dict__["_set"] = set(self._set)
        return new

    def __eq__(self, other):
        if type(other) is not type(self):
            return NotImplemented
        return self._dump(False, False) == other._dump(False, False)

    def __repr__(self):
        body = ", ".join(f"{k}={self.__dict__.get(k)!r}" for k in self._keys())
        return f"{type(self).__name__}({body})"

    def __iter__(self):
        # pydantic models iterate as (name, value) pairs
        for k in self._keys():
            yield k, self.__dict__.get(k)
