"""The message framework: how a message type is declared, checked, encoded and decoded. Imports only numpy,
msgspec and the standard library; no pickle.

Each message type is a frozen ``msgspec.Struct`` declared once, a member of one tagged union
(``tag_field="t"``, tags ``"unroll"``, ``"batch"``, ...) that ``msgspec.msgpack`` encodes and decodes.  A
field's annotation is its whole wire spec:

- ``int``, ``float``, ``Text`` (a str of at most 64 KiB), ``Count`` (an int >= 0);
- ``Annotated[Count, Length("M")]``: a count that is also the length of every array axis named ``"M"``;
- ``Annotated[np.ndarray, Array("float32", "M", "T")]``: a numpy array of that dtype whose axes are named by
  symbols.  A symbol that no ``Length`` binds (e.g. ``"A"``) is bound by the first array that has it and must
  agree everywhere else.  ``Array(..., empty_ok=True)`` also takes an all-zero shape, meaning "not sent".

A stats message's field that is a column of metrics.csv says so once, in its annotation:
``Annotated[float, Stat("what it is, with its unit", column=..., combine="sum")]``; the launcher's tally and the
CSV header are made from these declarations, and the learner fills its ``step=True`` figures from its agent's step.

msgspec checks what it can natively: the tag, the format version, every key (none missing, none unknown),
scalar types and bounds, and each array map's structure.  The rest is written once, in
``Message.__post_init__``, which runs on decoding and on construction alike: an array's dtype, byte count,
rank and axes; and for a message built in this process its scalars too (numpy scalars are taken, and ints for
floats).

Wire form: a msgpack map ``{"t": <tag>, "v": FORMAT_VERSION, <field>: ...}``, fields in declaration order (the
dataclass encoder before msgspec wrote ``v`` before ``t``; both orders decode, so the format is still 1).
Arrays travel as ``{"dtype": "<f4", "shape": [..], "data": <bin>}`` with raw little-endian C-order bytes.

``decode`` is strict and raises only :class:`ProtocolError` for bad input, naming ``Type.field`` and what is
wrong.  Decoded arrays are zero-copy, read-only numpy views of the message's bytes.

A message type is declared by subclassing :class:`Message` with a ``tag``; the core's are in this package
(messages, stats, remote), an agent's in its own package (``zrl/agents/<name>/messages.py``). The decoder's
union is every type declared in the process so far.
"""

import math
import numbers
import re
import typing
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, Union

import msgspec
import numpy as np
from msgspec import Meta

FORMAT_VERSION = 1
MAX_MESSAGE_BYTES = 64 * 1024 * 1024  # 64 MiB
TRACEBACK_CHARS = 16_000
MAX_FIGURES = 64  # names in a stats message's Figures map

# Limits on what a hostile header can declare (the input itself is at most MAX_MESSAGE_BYTES).
_MAX_STR_LEN = 64 * 1024
_MAX_NDIM = 32

_INT_MIN = -(2**63)
_INT_MAX = 2**64 - 1  # msgpack's unsigned range


class ProtocolError(ValueError):
    """A message could not be encoded or decoded (malformed, hostile, or a
    type/shape that does not match the declared protocol)."""


# --------------------------------------------------------------------------
# Field declarations
# --------------------------------------------------------------------------

Count = Annotated[int, Meta(ge=0)]
Text = Annotated[str, Meta(max_length=_MAX_STR_LEN)]


@dataclass(frozen=True)
class Length:
    """``Annotated[Count, Length("M")]``: the count is also the length of every array axis named ``"M"``."""

    symbol: str


if TYPE_CHECKING:  # as a type checker sees it: what the field holds (the metaclass reads the marker below)
    Figures = dict[str, float]
else:

    class Figures:
        """``figures: Figures``: a stats message's map of figure names to floats, for the figures an agent declares
        (``Agent.learner_figures``, ``Agent.broker_figures``) rather than the protocol: each is a column of
        metrics.csv for the runs of that agent. At most MAX_FIGURES names; a message built here may omit the field
        (an empty map)."""


@dataclass(frozen=True)
class Stat:
    """``Annotated[float, Stat("what it is, with its unit")]`` on a stats message's field: the field is a column
    of metrics.csv.  ``column``: its name there (the field's name unless given; a field may feed two columns);
    ``combine``: how the launcher makes one figure of the latest report of every sender (``"sum"``, ``"min"``
    or ``"max"`` over the workers; ``"value"`` for the broker's and the learner's, of which there is one);
    ``step``: a LearnerStats figure that the agent's learner step reports (0 where it reports none)."""

    doc: str
    column: str = ""
    combine: Literal["value", "sum", "min", "max"] = "value"
    step: bool = False


class _WireArray(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    """An array as it travels."""

    dtype: Annotated[str, Meta(max_length=16)]
    shape: Annotated[tuple[Annotated[int, Meta(ge=0, le=MAX_MESSAGE_BYTES)], ...], Meta(max_length=_MAX_NDIM)]
    data: memoryview  # zero-copy: a view of the message's bytes


class Array:
    """``Annotated[np.ndarray, Array("float32", "M", "T")]``: an array field of that dtype (little-endian on the
    wire) whose axes are named by symbols; ``empty_ok``: an all-zero shape is also taken, meaning "not sent"."""

    __slots__ = ("dtype", "wire", "itemsize", "axes", "empty_ok")

    def __init__(self, dtype: str, *axes: str, empty_ok: bool = False) -> None:
        self.dtype = np.dtype(dtype).newbyteorder("<")
        self.wire = self.dtype.str  # as the wire spells it, "<f4" (np.dtype computes .str anew each time)
        self.itemsize = self.dtype.itemsize
        self.axes = axes
        self.empty_ok = empty_ok


def _encode_array(value: Any) -> _WireArray:
    """msgspec's hook for the one type it does not know: an array field's numpy array, checked on construction."""
    if isinstance(value, np.ndarray):
        arr = np.ascontiguousarray(value)
        return _WireArray(arr.dtype.str, arr.shape, arr.data if arr.size else memoryview(b""))
    raise NotImplementedError(f"cannot encode {type(value).__name__}")


# --------------------------------------------------------------------------
# Message base class and registry
# --------------------------------------------------------------------------

_REGISTRY: dict[str, type["Message"]] = {}  # tag -> message type, as each is declared


class _MessageMeta(msgspec.StructMeta):
    """Reads each message's declaration once: into the plans ``__post_init__`` follows, and, for an array field,
    the wire map msgspec decodes.  Builds a message with this build's format version (a decoded one must carry
    it)."""

    def __new__(mcls, name: str, bases: tuple[type, ...], namespace: dict[str, Any], **config: Any) -> "_MessageMeta":
        tag = config.get("tag")
        if tag is None:
            return super().__new__(mcls, name, bases, namespace, **config)
        if tag in _REGISTRY:
            raise TypeError(f"duplicate message tag {tag!r}")
        hints = namespace.get("__annotations__", {})
        scalars, arrays, lengths, stats, figures = [], [], [], [], []
        for field, hint in hints.items():
            kind, *extras = typing.get_args(hint) if typing.get_origin(hint) is Annotated else (hint,)
            stats += [(field, replace(e, column=e.column or field)) for e in extras if isinstance(e, Stat)]
            if kind is np.ndarray:
                arrays.append((field, next(e for e in extras if isinstance(e, Array))))
                hints[field] = Annotated[_WireArray, *extras]  # how it travels; __post_init__ makes the array
            elif kind in (int, float, str):
                minimum = max([_INT_MIN] + [e.ge for e in extras if isinstance(e, Meta) and e.ge is not None])
                scalars.append((field, kind, minimum))
                lengths += [(e.symbol, field) for e in extras if isinstance(e, Length)]
            elif kind is Figures:
                figures.append(field)
                hints[field] = Annotated[dict[Text, float], Meta(max_length=MAX_FIGURES), *extras]
            elif typing.get_origin(kind) is not ClassVar:
                raise TypeError(f"{name}.{field}: {kind!r} is not a wire type")
        cls = super().__new__(mcls, name, bases, namespace, **config)
        # a class with a tag is a message: Message (and so _Checks, which declares these) is among its bases
        message = typing.cast(type["Message"], cls)
        message.TAG = tag
        message.FIELDS = cls.__struct_fields__[1:]  # after v
        message._SCALARS = tuple(scalars)
        message._ARRAYS = tuple(arrays)
        message._LENGTHS = tuple(lengths)
        message._FIGURES = tuple(figures)
        message.STATS = tuple(stats)
        _REGISTRY[tag] = message
        return cls

    def __call__(cls, **fields: Any) -> Any:
        return super().__call__(v=FORMAT_VERSION, **fields)


class _Checks:
    """What every message does beyond msgspec: the checks of its declaration, and its encoding."""

    __slots__ = ()  # a msgspec Struct with gc=False takes no base with a __dict__

    TAG: ClassVar[str]
    FIELDS: ClassVar[tuple[str, ...]]  # the message's own fields, in wire order (v is every message's)
    STATS: ClassVar[tuple[tuple[str, Stat], ...]]  # (field, its column of metrics.csv), in declaration order
    _SCALARS: ClassVar[tuple[tuple[str, type[Any], float], ...]]  # (field, its kind, its least value)
    _ARRAYS: ClassVar[tuple[tuple[str, Array], ...]]
    _LENGTHS: ClassVar[tuple[tuple[str, str], ...]]
    _FIGURES: ClassVar[tuple[str, ...]]

    def __post_init__(self) -> None:
        """Every check of the declaration that msgspec does not make: all of them for a message built here, the
        arrays' for a decoded one (whose arrays arrive as their wire maps)."""
        cls = type(self)
        arrays = cls._ARRAYS
        if not (arrays and type(getattr(self, arrays[0][0])) is _WireArray):  # built here
            for name, kind, minimum in cls._SCALARS:
                value = getattr(self, name)
                if type(value) is not kind or (kind is int and not minimum <= value <= _INT_MAX):
                    _force_setattr(self, name, _scalar(f"{cls.__name__}.{name}", kind, minimum, value))
            for name in cls._FIGURES:
                _force_setattr(self, name, _figures(f"{cls.__name__}.{name}", getattr(self, name)))
        bound = {symbol: getattr(self, field) for symbol, field in cls._LENGTHS}
        for name, spec in arrays:
            arr = getattr(self, name)
            if type(arr) is _WireArray:  # decoded: msgspec has checked its map's structure
                if arr.dtype != spec.wire:
                    raise ProtocolError(
                        f"{cls.__name__}.{name}: dtype {arr.dtype!r} not allowed, expected {spec.wire!r}"
                    )
                need = math.prod(arr.shape) * spec.itemsize
                if len(arr.data) != need:
                    raise ProtocolError(
                        f"{cls.__name__}.{name}: data has {len(arr.data)} bytes, shape {list(arr.shape)} x "
                        f"{arr.dtype} needs {need}"
                    )
                arr = np.ndarray(arr.shape, spec.dtype, arr.data)  # read-only, as the message's bytes are
                _force_setattr(self, name, arr)
            elif not isinstance(arr, np.ndarray):
                raise ProtocolError(f"{cls.__name__}.{name}: expected numpy array, got {type(arr).__name__}")
            elif arr.dtype != spec.dtype:
                raise ProtocolError(f"{cls.__name__}.{name}: dtype {arr.dtype.str} not allowed, expected {spec.wire}")
            shape = arr.shape
            if len(shape) != len(spec.axes):
                raise ProtocolError(f"{cls.__name__}.{name}: ndim {len(shape)} != {len(spec.axes)} {spec.axes}")
            if spec.empty_ok and not any(shape):
                continue  # "not sent"
            for symbol, dim in zip(spec.axes, shape):
                if bound.setdefault(symbol, dim) != dim:
                    raise ProtocolError(
                        f"{cls.__name__}.{name}: dim {spec.axes.index(symbol)} ({symbol!r}) is {dim}, expected "
                        f"{bound[symbol]} (from {self._bound_by(symbol)})"
                    )

    def _bound_by(self, symbol: str) -> str:
        """The field that set ``symbol``'s length: its ``Length``, or else the first array (checked so far) that
        has the axis."""
        cls = type(self)
        for s, field in cls._LENGTHS:
            if s == symbol:
                return field
        for name, spec in cls._ARRAYS:
            if symbol in spec.axes and not (spec.empty_ok and not any(getattr(self, name).shape)):
                return name
        raise AssertionError(f"no field binds {symbol!r}")  # pragma: no cover - one did, or nothing disagreed

    def encode(self) -> bytes:
        out = _ENCODER.encode(self)
        if len(out) > MAX_MESSAGE_BYTES:
            raise ProtocolError(
                f"{type(self).__name__}: encoded size {len(out)} exceeds MAX_MESSAGE_BYTES={MAX_MESSAGE_BYTES}"
            )
        return out


if TYPE_CHECKING:  # as a type checker sees it: the metaclass's __call__ gives a message built here its ``v``

    class Message(_Checks, msgspec.Struct, kw_only=True, tag_field="t"):
        v: Literal[1] = 1

else:

    class Message(
        _Checks,
        msgspec.Struct,
        metaclass=_MessageMeta,
        frozen=True,
        tag_field="t",
        forbid_unknown_fields=True,
        gc=False,
    ):
        """The base of every message type: a subclass with a ``tag`` is a member of the wire's tagged union (its
        tag unique among every message declared in this process), checked as the module docstring says."""

        v: Literal[FORMAT_VERSION]


def _figures(where: str, value: Any) -> dict[str, float]:
    """A ``Figures`` field's mapping as it travels (at most MAX_FIGURES names, each a str, each value a float), or
    the ProtocolError that says why not."""
    if not isinstance(value, dict):
        raise ProtocolError(f"{where}: expected a map of names to figures, got {type(value).__name__}")
    if len(value) > MAX_FIGURES:
        raise ProtocolError(f"{where}: {len(value)} figures, at most {MAX_FIGURES}")
    out = {}
    for key, figure in value.items():
        if type(key) is not str or len(key) > _MAX_STR_LEN:
            raise ProtocolError(f"{where}: a figure's name must be a str of at most {_MAX_STR_LEN} characters")
        out[key] = _scalar(f"{where}[{key!r}]", float, _INT_MIN, figure)
    return out


def _scalar(where: str, kind: type, minimum: float, value: Any) -> Any:
    """``value`` as the ``kind`` its field declares (numpy scalars and ints for floats are taken), or the
    ProtocolError that says why not."""
    if kind is int:
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
            raise ProtocolError(f"{where}: expected int, got {type(value).__name__}")
        value = int(value)
        if not _INT_MIN <= value <= _INT_MAX:
            raise ProtocolError(f"{where}: int {value} out of 64-bit range")
        if value < minimum:
            raise ProtocolError(f"{where}: {value} < minimum {minimum}")
        return value
    if kind is float:
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
            raise ProtocolError(f"{where}: expected float, got {type(value).__name__}")
        try:
            return float(value)
        except OverflowError:
            raise ProtocolError(f"{where}: {value!r} does not fit a float") from None
    raise ProtocolError(f"{where}: expected str, got {type(value).__name__}")


_ENCODER = msgspec.msgpack.Encoder(enc_hook=_encode_array)
# typed for the _Checks mixin, whose instances are always msgspec Structs (Message is one)
_force_setattr: typing.Callable[[Any, str, Any], None] = msgspec.structs.force_setattr


# --------------------------------------------------------------------------
# Decoding
# --------------------------------------------------------------------------

_DECODERS: dict[int, msgspec.msgpack.Decoder[Message]] = {}


def _decoder() -> msgspec.msgpack.Decoder[Message]:
    """A decoder of the union of every message type declared so far: the core's, and those of the agents whose
    messages this process has imported (a message type is declared once, at import; the union grows with it)."""
    n = len(_REGISTRY)
    if n not in _DECODERS:
        _DECODERS.clear()
        _DECODERS[n] = msgspec.msgpack.Decoder(Union[tuple(_REGISTRY.values())])  # noqa: UP007 - built at runtime
    return _DECODERS[n]


def message_types() -> tuple[type[Message], ...]:
    """Every message type declared in this process, in declaration order."""
    return tuple(_REGISTRY.values())


class _Envelope(msgspec.Struct):
    """The tag of a message that failed, to name its type in the error."""

    t: str | int | float | bool | None = None


_AT = re.compile(r"(.*) - at `\$(.*)`$", re.S)
_KEY = re.compile(r"(.*) - at `key` in `\$(.*)`$", re.S)
_NAMED = re.compile(r"Object (?:(missing) required|contains (unknown)) field `(.*)`$", re.S)


def _explain(data: bytes, exc: msgspec.ValidationError) -> ProtocolError:
    """msgspec's account of what is wrong, as ``Type.field: what``."""
    try:
        tag = msgspec.msgpack.decode(data, type=_Envelope).t
    except msgspec.DecodeError:  # not a map, or a tag that is not even a scalar
        where = "<message>"
    else:
        cls = _REGISTRY.get(tag) if type(tag) is str else None
        where = cls.__name__ if cls is not None else f"<message t={tag!r}>"
    text, path = str(exc), ""
    if m := _KEY.match(text):
        text, path = f"map key: {m[1][0].lower()}{m[1][1:]}", m[2]
    elif m := _AT.match(text):
        text, path = m[1], m[2]
    if m := _NAMED.match(text):
        text, path = f"{m[1] or m[2]} field", f"{path}.{m[3]}"
    text = (text[0].lower() + text[1:]).replace("`object`", "`map`")
    if path == ".t":
        text = "missing type tag" if text == "missing field" else f"unknown type tag ({text})"
    elif path == ".v":
        text = f"format version: {text} (this build speaks {FORMAT_VERSION})"
    return ProtocolError(f"{where}{path}: {text}")


def _too_big(n: int) -> ProtocolError:
    return ProtocolError(f"<message>: {n} bytes exceeds MAX_MESSAGE_BYTES={MAX_MESSAGE_BYTES}")


def _own_bytes(data: Any) -> bytes:
    """A bytes-like object's bytes, copied: decoded arrays are views, never of a buffer its owner may change."""
    try:
        mv = memoryview(data)
    except TypeError:
        raise ProtocolError(f"<message>: expected a bytes-like object, got {type(data).__name__}") from None
    with mv:
        if mv.nbytes > MAX_MESSAGE_BYTES:
            raise _too_big(mv.nbytes)
        return mv.tobytes()


def _decode(data: Any) -> Message:
    if type(data) is not bytes:
        data = _own_bytes(data)
    elif len(data) > MAX_MESSAGE_BYTES:
        raise _too_big(len(data))
    try:
        return _decoder().decode(data)
    except msgspec.ValidationError as exc:
        if isinstance(exc.__cause__, ProtocolError):  # raised by __post_init__
            raise exc.__cause__ from None
        raise _explain(data, exc) from None
    except msgspec.DecodeError as exc:
        raise ProtocolError(f"<message>: malformed msgpack ({exc})") from None


def decode(data: bytes | bytearray | memoryview) -> Message:
    """Decode one msgpack message; raise ProtocolError for any bad input."""
    try:
        return _decode(data)
    except ProtocolError:
        raise
    except Exception as exc:  # defence in depth: never crash a receiver
        raise ProtocolError(f"<message>: undecodable ({type(exc).__name__}: {exc})") from exc
