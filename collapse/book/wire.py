"""Plain data between a student's kernel and the grader's check process.

A check never runs in the kernel the student controls: the grader's check process asks the kernel
for the values a check reads and for what the student's functions return, and the answers cross
as plain data in one format, both ways: JSON objects tagged by type (`{"t": "int", "v": "3"}`),
numpy arrays and torch tensors as dtype, shape and base64 bytes, pandas objects as their labels
and columns, instances of the library's dataclasses as their fields, and a function as a
reference the kernel resolves (a call of it is a request of its own).

`encode` writes a value in this format, or raises `NotPlainDataError` naming the type that is not;
`decode` reads it back and trusts nothing: every node is type-checked, sizes and depth are capped,
and a dataclass is rebuilt only from the library's own classes (`collapse.*`, never by running a
name the reply gives). In the grader a reply is hostile text, so `reply` parses it the same way:
an object whose `__eq__` is always true arrives as `refused` and fails its check.

`serve` is the kernel's side, imported there by the grader's requests
(`collapse.book.wire.serve(nonce, request)`): it prints its reply between the request's nonce.
The student may replace it; that gains nothing, since whatever it prints is read as above.
"""

from __future__ import annotations

import base64
import dataclasses
import importlib
import json
import math
import re
import sys

__all__ = [
    "REPLY_LIMIT",
    "NotPlainDataError",
    "StudentError",
    "clean",
    "encode",
    "decode",
    "reply",
    "serve",
    "answer",
]

REPLY_LIMIT = 64 * 2**20  # characters of one reply: a check's values are far smaller
_DEPTH = 32  # nesting of lists, dicts, dataclasses
_DIMENSIONS = 32
_DTYPES = (
    "bool",
    "uint8",
    "int8",
    "int16",
    "int32",
    "int64",
    "float16",
    "float32",
    "float64",
    "complex64",
    "complex128",
)
_DIGITS = 4000  # of an int (Python refuses to read more than 4300)
_FLOAT = re.compile(r"-?(inf|nan|\d+(\.\d*)?(e[-+]?\d+)?|\.\d+(e[-+]?\d+)?)", re.IGNORECASE)
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,99}")
_MODULE = re.compile(r"collapse(\.[A-Za-z_][A-Za-z0-9_]*){0,3}")
_ESCAPE = re.compile(r"\x1b(\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)?|.)")  # terminal codes
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2066-\u2069]+")
_REGISTRY: list = []  # the kernel's functions handed out as references, by index


class NotPlainDataError(TypeError):
    """A value the wire format does not carry; its message names the type."""


def clean(text, limit: int = 160) -> str:
    """Student text made one short line: terminal codes go, control characters (line breaks,
    bidirectional overrides) become spaces."""
    text = " ".join(_CONTROL.sub(" ", _ESCAPE.sub("", str(text))).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _type_name(value) -> str:
    return clean(type(value).__name__, 60)


# --- encoding -------------------------------------------------------------------------------


def encode(value, function=None, depth: int = 0) -> dict:
    """`value` as plain data. `function(f)` returns the reference of a function (None: a
    function is not plain data).

    Why exact containers become plain ones: a subclass of list or int could carry any
    behaviour, and only its contents cross."""
    if depth > _DEPTH:
        raise NotPlainDataError("data nested too deeply")
    if value is None:
        return {"t": "none"}
    for kind, types, write in _SCALARS:
        if isinstance(value, types):
            return {"t": kind, "v": write(value)}
    if isinstance(value, (list, tuple)):
        return {
            "t": "tuple" if isinstance(value, tuple) else "list",
            "v": [encode(v, function, depth + 1) for v in value],
        }
    if isinstance(value, dict):
        return {
            "t": "dict",
            "v": [
                [encode(k, function, depth + 1), encode(v, function, depth + 1)]
                for k, v in value.items()
            ],
        }
    for write in (_array, _pandas, _dataclass):
        node = write(value, function, depth)
        if node is not None:
            return node
    if callable(value) and function is not None:
        return {"t": "function", "ref": function(value)}
    raise NotPlainDataError(_type_name(value))


_SCALARS = (
    ("bool", bool, bool),
    ("int", int, lambda v: str(int(v))),
    ("float", float, lambda v: float.__repr__(float(v))),
    ("complex", complex, lambda v: [float.__repr__(v.real), float.__repr__(v.imag)]),
    ("str", str, str.__str__),
    ("bytes", (bytes, bytearray), lambda v: base64.b64encode(bytes(v)).decode("ascii")),
)


def _array(value, function, depth):
    """A numpy array or scalar, or a torch tensor: dtype, shape, bytes."""
    numpy, torch = sys.modules.get("numpy"), sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.Tensor):
        tensor = value.detach().cpu().resolve_conj().resolve_neg().contiguous()
        return {"t": "tensor", **_bytes(tensor.numpy(), str(tensor.dtype).removeprefix("torch."))}
    if numpy is None or not isinstance(value, (numpy.ndarray, numpy.generic)):
        return None
    kind = "array" if isinstance(value, numpy.ndarray) else "scalar"
    return {"t": kind, **_bytes(numpy.asarray(value), numpy.asarray(value).dtype.name)}


def _bytes(array, dtype: str) -> dict:
    if dtype not in _DTYPES:
        raise NotPlainDataError(f"array of {clean(dtype, 40)}")
    data = array.astype(array.dtype.newbyteorder("<"), copy=False).tobytes()
    return {"dtype": dtype, "shape": list(array.shape), "data": base64.b64encode(data).decode()}


def _pandas(value, function, depth):
    pandas = sys.modules.get("pandas")
    if pandas is None or not isinstance(value, (pandas.Series, pandas.DataFrame)):
        return None
    index = _index(value.index, function, depth)
    if isinstance(value, pandas.Series):
        return {
            "t": "series",
            "index": index,
            "name": encode(value.name, None, depth + 1),
            "values": _column(value, function, depth),
        }
    return {
        "t": "frame",
        "index": index,
        "columns": _index(value.columns, function, depth),
        "data": [_column(value.iloc[:, i], function, depth) for i in range(value.shape[1])],
    }


def _index(index, function, depth) -> dict:
    return {
        "labels": encode(list(index), None, depth + 1),
        "names": encode(list(index.names), None, depth + 1),
    }


def _column(series, function, depth) -> dict:
    """Numbers as an array; anything else (text, categories) as a list of its values."""
    values = series.to_numpy()
    if values.dtype.kind in "biufc" and values.dtype.name in _DTYPES:
        return {"t": "array", **_bytes(values, values.dtype.name)}
    return encode(series.tolist(), function, depth + 1)


def _dataclass(value, function, depth):
    if not dataclasses.is_dataclass(value) or isinstance(value, type):
        return None
    fields = [
        [f.name, encode(getattr(value, f.name), function, depth + 1)]
        for f in dataclasses.fields(value)
    ]
    kind = type(value)
    return {"t": "dataclass", "class": f"{kind.__module__}.{kind.__qualname__}", "fields": fields}


# --- decoding -------------------------------------------------------------------------------


def decode(node, function=None, depth: int = 0):
    """The value `node` (from `encode`, or from a hostile kernel) stands for; ValueError or
    NotPlainDataError when it is not well formed. `function(ref)` turns a function reference into
    something callable (None: a reference is refused)."""
    if depth > _DEPTH:
        raise ValueError("data nested too deeply")
    kind = _field(node, "t", str)
    read = _READERS.get(kind)
    if read is None or (kind == "function" and function is None):
        raise NotPlainDataError(clean(kind, 40))
    return read(node, function, depth)


def _field(node, key, kind):
    if not isinstance(node, dict) or not isinstance(node.get(key), kind):
        raise ValueError(f"malformed data: no {key!r} of type {kind.__name__}")
    return node[key]


def _int(node, function, depth):
    text = _field(node, "v", str)
    if not re.fullmatch(rf"-?\d{{1,{_DIGITS}}}", text):
        raise ValueError("malformed int")
    return int(text)


def _float(text) -> float:
    if not isinstance(text, str) or not _FLOAT.fullmatch(text):
        raise ValueError("malformed float")
    return float(text)


def _complex(node, function, depth):
    parts = _field(node, "v", list)
    if len(parts) != 2:
        raise ValueError("malformed complex")
    return complex(_float(parts[0]), _float(parts[1]))


def _bytes_of(node, function, depth):
    try:
        return base64.b64decode(_field(node, "v", str), validate=True)
    except ValueError:
        raise ValueError("malformed bytes") from None


def _sequence(node, function, depth):
    items = [decode(v, function, depth + 1) for v in _field(node, "v", list)]
    return tuple(items) if node["t"] == "tuple" else items


def _mapping(node, function, depth):
    out = {}
    for pair in _field(node, "v", list):
        if not isinstance(pair, list) or len(pair) != 2:
            raise ValueError("malformed dict")
        key = decode(pair[0], None, depth + 1)
        try:
            out[key] = decode(pair[1], function, depth + 1)
        except TypeError as err:
            if isinstance(err, NotPlainDataError):
                raise
            raise ValueError("a dict key that cannot be a key") from None
    return out


def _numpy_array(node):
    import numpy

    dtype, shape = _field(node, "dtype", str), _field(node, "shape", list)
    if dtype not in _DTYPES:
        raise NotPlainDataError(f"array of {clean(dtype, 40)}")
    if len(shape) > _DIMENSIONS or not all(type(n) is int and n >= 0 for n in shape):
        raise ValueError("malformed array shape")
    data = _bytes_of({"v": _field(node, "data", str)}, None, 0)
    kind = numpy.dtype(dtype).newbyteorder("<")
    if math.prod(shape) * kind.itemsize != len(data):
        raise ValueError("array data does not match its shape")
    return numpy.frombuffer(data, dtype=kind).astype(dtype).reshape(shape)


def _ndarray(node, function, depth):
    return _numpy_array(node)


def _scalar(node, function, depth):
    array = _numpy_array(node)
    if array.shape != ():
        raise ValueError("a numpy scalar with a shape")
    return array[()]


def _tensor(node, function, depth):
    import torch

    return torch.from_numpy(_numpy_array(node).copy())


def _labels(node, depth):
    import pandas

    labels = _field(node, "labels", dict)
    names = decode(_field(node, "names", dict), None, depth + 1)
    labels = decode(labels, None, depth + 1)
    if not isinstance(labels, list) or not isinstance(names, list) or not names:
        raise ValueError("malformed pandas index")
    if len(names) > 1:
        return pandas.MultiIndex.from_tuples(labels, names=names)
    return pandas.Index(labels, name=names[0], tupleize_cols=False)


def _values(node, function, depth):
    values = decode(node, function, depth + 1)
    if type(values).__name__ != "ndarray" and not isinstance(values, list):
        raise ValueError("malformed pandas column")
    return values


def _series(node, function, depth):
    import pandas

    index = _labels(_field(node, "index", dict), depth)
    values = _values(_field(node, "values", dict), function, depth)
    name = decode(_field(node, "name", dict), None, depth + 1)
    if len(values) != len(index):
        raise ValueError("a pandas Series whose values do not match its index")
    return pandas.Series(values, index=index, name=name)


def _frame(node, function, depth):
    import pandas

    index, columns = (_labels(_field(node, key, dict), depth) for key in ("index", "columns"))
    data = [_values(c, function, depth) for c in _field(node, "data", list)]
    if len(data) != len(columns) or any(len(c) != len(index) for c in data):
        raise ValueError("a pandas DataFrame whose columns do not match its labels")
    frame = pandas.DataFrame(dict(enumerate(data)), index=index)
    frame.columns = columns
    return frame


def _instance(node, function, depth):
    """A dataclass of the library, rebuilt from its fields: the class is looked up by name among
    `collapse`'s own modules (not the grader's tooling), never taken from the reply."""
    path = _field(node, "class", str)
    module, _, name = path.rpartition(".")
    if (
        not _MODULE.fullmatch(module)
        or module.startswith("collapse.book")
        or (not _NAME.fullmatch(name))
    ):
        raise NotPlainDataError(clean(path, 80))
    try:
        kind = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        raise NotPlainDataError(clean(path, 80)) from None
    if not (
        isinstance(kind, type) and dataclasses.is_dataclass(kind) and kind.__module__ == module
    ):
        raise NotPlainDataError(clean(path, 80))
    pairs = _field(node, "fields", list)
    if not all(isinstance(p, list) and len(p) == 2 and isinstance(p[0], str) for p in pairs):
        raise ValueError("malformed dataclass fields")
    values = {key: decode(value, function, depth + 1) for key, value in pairs}
    fields = dataclasses.fields(kind)
    if set(values) != {f.name for f in fields} or len(values) != len(pairs):
        raise ValueError(f"the fields of {name} do not match the library's")
    made = kind(**{f.name: values[f.name] for f in fields if f.init})
    for f in fields:
        if not f.init:
            object.__setattr__(made, f.name, values[f.name])
    return made


def _reference(node, function, depth):
    ref = _field(node, "ref", int)
    if isinstance(ref, bool) or not 0 <= ref < 10**9:
        raise ValueError("malformed function reference")
    return function(ref)


_READERS = {
    "none": lambda node, function, depth: None,
    "bool": lambda node, function, depth: _field(node, "v", bool),
    "int": _int,
    "float": lambda node, function, depth: _float(_field(node, "v", str)),
    "complex": _complex,
    "str": lambda node, function, depth: _field(node, "v", str),
    "bytes": _bytes_of,
    "list": _sequence,
    "tuple": _sequence,
    "dict": _mapping,
    "array": _ndarray,
    "scalar": _scalar,
    "tensor": _tensor,
    "series": _series,
    "frame": _frame,
    "dataclass": _instance,
    "function": _reference,
}


def reply(text: str, name: str, verb: str = "returned", function=None):
    """The value a kernel's reply `text` carries about `name` (e.g. "window_radius").

    Raises NotPlainDataError ("window_radius returned a Foo, not plain data"), `StudentError` when
    the student's code raised, or ValueError for a malformed reply."""
    if len(text) > REPLY_LIMIT:
        raise ValueError(f"{name}: a reply over {REPLY_LIMIT} characters")
    try:
        message = json.loads(text, parse_constant=_no_constant)
    except (ValueError, RecursionError):
        raise ValueError(f"{name}: a malformed reply from the kernel") from None
    if not isinstance(message, dict) or len(message) != 1:
        raise ValueError(f"{name}: a malformed reply from the kernel")
    ((key, body),) = message.items()
    if key == "raised" and isinstance(body, dict):
        kind, text = clean(body.get("type", "?"), 60), clean(body.get("message", ""), 160)
        raise StudentError(kind, f"{name} raised {kind}" + (f": {text}" if text else ""))
    if key == "refused" and isinstance(body, str):
        raise NotPlainDataError(f"{name} {verb} a {clean(body, 60)}, not plain data")
    if key != "value":
        raise ValueError(f"{name}: a malformed reply from the kernel")
    try:
        return decode(body, function)
    except NotPlainDataError as err:
        raise NotPlainDataError(f"{name} {verb} a {err}, not plain data") from None
    except (ValueError, RecursionError) as err:
        raise ValueError(f"{name}: {clean(err, 100)}") from None


def _no_constant(name):
    raise ValueError(f"{name} is not JSON")


class StudentError(Exception):
    """The student's code raised (`kind`: its exception's type name) while a check waited."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


# --- the kernel's side ----------------------------------------------------------------------


def serve(nonce: str, request: str) -> None:
    """Answer one request of the grader in the kernel: print the reply between `nonce`s."""
    from IPython import get_ipython

    sys.stdout.write(f"\n{nonce}{answer(json.loads(request), get_ipython().user_ns)}{nonce}\n")
    sys.stdout.flush()


def answer(request: dict, namespace: dict, functions: list = _REGISTRY) -> str:
    """The reply (JSON text) to one request about the notebook's `namespace`.

    A request is `{"get": name, "keys": [...] or null}` (a variable, or only those items of
    it) or `{"call": ref, "args": [...], "kwargs": {...}}` (a function handed out before, by
    its index in `functions`). The student's code raising is a reply, not an error."""

    def register(value) -> int:
        functions.append(value)
        return len(functions) - 1

    try:
        if "get" in request:
            if request["get"] not in namespace:
                raise NameError(f"name {request['get']!r} is not defined")
            value = namespace[request["get"]]
            if request.get("keys") is not None:
                value = {key: value[key] for key in (decode(k) for k in request["keys"])}
        else:
            args = [decode(a, functions.__getitem__) for a in request["args"]]
            kwargs = {k: decode(v, functions.__getitem__) for k, v in request["kwargs"].items()}
            value = functions[request["call"]](*args, **kwargs)
        text = json.dumps({"value": encode(value, register)})
    except NotPlainDataError as err:
        text = json.dumps({"refused": str(err)})
    except Exception as err:  # noqa: BLE001 (the student's code raised: reported, not fatal)
        text = json.dumps({"raised": {"type": type(err).__name__, "message": clean(err, 500)}})
    if len(text) > REPLY_LIMIT:
        text = json.dumps({"raised": {"type": "ValueError", "message": "a reply too large"}})
    return text
