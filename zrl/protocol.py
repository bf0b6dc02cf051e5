"""Wire protocol: every message that crosses a zrl socket.

Layer 0: imports only numpy, msgpack and the standard library.  No pickle.

Msgpack messages
----------------
Each message type is a frozen, slotted dataclass declared once below.  Every
field carries a declarative wire spec (``_int()``, ``_float()``, ``_str()`` or
``_array(dtype, shape)``) in its dataclass metadata; a shape is a tuple of
symbols such as ``("M", "T")``.  Per message type a ``dims`` mapping binds some
symbols to int fields (``{"M": "num_envs", "T": "length"}``); unbound symbols
(e.g. ``"A"``) are bound by their first occurrence and must agree everywhere
else.  One generic validator (``_Message.__post_init__``) enforces all of it,
both when a message is built locally and when one is decoded.

Wire form: a msgpack map ``{"v": FORMAT_VERSION, "t": <tag>, <field>: ...}``.
Arrays travel as ``{"dtype": "<f4", "shape": [..], "data": <bin>}`` with raw
little-endian C-order bytes.

``decode`` is strict and raises only :class:`ProtocolError` for bad input.
Decoded arrays are zero-copy, read-only ``np.frombuffer`` views of the bin
payloads returned by msgpack.

Weights
-------
Weights are one binary frame, not msgpack: a 32-byte little-endian header
(magic ``b"ZRLW"``, format version u16, reserved u16 (= 0), version i64,
learner_step i64, count u64) followed by ``count`` float32 values.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import numbers
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import msgpack
import numpy as np

__all__ = [
    "FORMAT_VERSION",
    "MAX_MESSAGE_BYTES",
    "MESSAGE_TYPES",
    "Message",
    "ProtocolError",
    "Unroll",
    "Batch",
    "Episode",
    "WorkerStats",
    "BrokerStats",
    "LearnerStats",
    "WeightsRequest",
    "RoleError",
    "decode",
    "encode_weights",
    "decode_weights",
    "WEIGHTS_MAGIC",
    "WEIGHTS_HEADER_BYTES",
]

FORMAT_VERSION = 1
MAX_MESSAGE_BYTES = 64 * 1024 * 1024  # 64 MiB

# msgpack unpack limits: nothing a hostile header declares can make the
# unpacker allocate more than these.
_MAX_STR_LEN = 64 * 1024
_MAX_ARRAY_LEN = 32  # only shapes are msgpack arrays
_MAX_MAP_LEN = 64  # the largest message has ~25 keys

_INT_MIN = -(2**63)
_INT_MAX = 2**64 - 1  # msgpack's unsigned range


class ProtocolError(ValueError):
    """A message could not be encoded or decoded (malformed, hostile, or a
    type/shape that does not match the declared protocol)."""


# --------------------------------------------------------------------------
# Declarative field specs
# --------------------------------------------------------------------------

_SPEC_KEY = "zrl_wire"


@dataclass(frozen=True)
class _ScalarSpec:
    kind: type  # int, float or str
    minimum: int | None = None


@dataclass(frozen=True)
class _ArraySpec:
    dtype: np.dtype
    shape: tuple[str, ...]
    allow_empty: bool = False  # an all-zero shape means "not sent"

    @functools.cached_property
    def wire_dtype(self) -> str:
        return self.dtype.str

    @functools.cached_property
    def ndim(self) -> int:
        return len(self.shape)


def _int(*, minimum: int | None = None) -> Any:
    return field(metadata={_SPEC_KEY: _ScalarSpec(int, minimum)})


def _float() -> Any:
    return field(metadata={_SPEC_KEY: _ScalarSpec(float)})


def _str() -> Any:
    return field(metadata={_SPEC_KEY: _ScalarSpec(str)})


def _array(dtype: str, shape: tuple[str, ...], *, allow_empty: bool = False) -> Any:
    dt = np.dtype(dtype).newbyteorder("<")
    return field(metadata={_SPEC_KEY: _ArraySpec(dt, tuple(shape), allow_empty)})


# --------------------------------------------------------------------------
# Message base class and registry
# --------------------------------------------------------------------------

_REGISTRY: dict[str, type[_Message]] = {}


class _Message:
    """Shared behaviour for every msgpack message dataclass."""

    __slots__ = ()

    TAG: ClassVar[str]
    _SPECS: ClassVar[tuple[tuple[str, Any], ...]]
    _DIMS: ClassVar[Mapping[str, str]]
    _SCALARS: ClassVar[tuple[tuple[str, Any], ...]]
    _ARRAYS: ClassVar[tuple[tuple[str, Any], ...]]
    _KEYS: ClassVar[frozenset[str]]
    _FAST_SCALARS: ClassVar[tuple]
    _FAST_ARRAYS: ClassVar[tuple]

    # -- validation (runs on construction, hence also on decode) ----------
    def __post_init__(self) -> None:
        cls = type(self)
        tname = cls.__name__
        for name, spec in cls._SCALARS:
            value = getattr(self, name)
            kind = spec.kind
            if type(value) is kind and (  # the fast path, always taken for decoded input
                kind is not int or (_INT_MIN <= value <= _INT_MAX and (spec.minimum is None or value >= spec.minimum))
            ):
                continue
            checked = _check_scalar(tname, name, spec, value)
            if checked is not value:
                object.__setattr__(self, name, checked)

        bound: dict[str, tuple[int, str]] = {}
        for sym, int_field in cls._DIMS.items():
            bound[sym] = (getattr(self, int_field), int_field)

        for name, spec in cls._ARRAYS:
            arr = getattr(self, name)
            if isinstance(arr, np.ndarray) and arr.dtype == spec.dtype and arr.ndim == spec.ndim:  # the fast path
                shape = arr.shape
                if spec.allow_empty and not any(shape):
                    continue  # explicitly "not sent"
                for sym, dim in zip(spec.shape, shape):
                    seen = bound.get(sym)
                    if seen is None:
                        bound[sym] = (dim, name)
                    elif seen[0] != dim:
                        break
                else:
                    continue
            where = f"{tname}.{name}"
            if not isinstance(arr, np.ndarray):
                raise ProtocolError(f"{where}: expected numpy array, got {type(arr).__name__}")
            if arr.dtype != spec.dtype:
                raise ProtocolError(f"{where}: dtype {arr.dtype.str} not allowed, expected {spec.wire_dtype}")
            if arr.ndim != len(spec.shape):
                raise ProtocolError(f"{where}: ndim {arr.ndim} != {len(spec.shape)} {spec.shape}")
            if spec.allow_empty and all(d == 0 for d in arr.shape):
                continue  # explicitly "not sent"
            for axis, (sym, dim) in enumerate(zip(spec.shape, arr.shape)):
                if sym in bound:
                    want, source = bound[sym]
                    if dim != want:
                        raise ProtocolError(f"{where}: dim {axis} ({sym!r}) is {dim}, expected {want} (from {source})")
                else:
                    bound[sym] = (dim, name)

    # -- encoding ----------------------------------------------------------
    def encode(self) -> bytes:
        wire: dict[str, Any] = {"v": FORMAT_VERSION, "t": self.TAG}
        for name, spec in self._SPECS:
            value = getattr(self, name)
            if isinstance(spec, _ArraySpec):
                arr = np.ascontiguousarray(value)
                wire[name] = {
                    "dtype": spec.wire_dtype,
                    "shape": list(arr.shape),
                    "data": memoryview(arr) if arr.size else b"",
                }
            else:
                wire[name] = value
        out = msgpack.packb(wire, use_bin_type=True)
        if len(out) > MAX_MESSAGE_BYTES:
            raise ProtocolError(
                f"{type(self).__name__}: encoded size {len(out)} exceeds MAX_MESSAGE_BYTES={MAX_MESSAGE_BYTES}"
            )
        return out


def _check_scalar(tname: str, name: str, spec: _ScalarSpec, value: Any) -> Any:
    kind = spec.kind
    if type(value) is kind:  # fast path (always taken for decoded input)
        if kind is not int or (_INT_MIN <= value <= _INT_MAX and (spec.minimum is None or value >= spec.minimum)):
            return value
    where = f"{tname}.{name}"
    if kind is int:
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
            raise ProtocolError(f"{where}: expected int, got {type(value).__name__}")
        value = int(value)
        if not _INT_MIN <= value <= _INT_MAX:
            raise ProtocolError(f"{where}: int {value} out of 64-bit range")
        if spec.minimum is not None and value < spec.minimum:
            raise ProtocolError(f"{where}: {value} < minimum {spec.minimum}")
        return value
    if kind is float:
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
            raise ProtocolError(f"{where}: expected float, got {type(value).__name__}")
        if type(value) is not float:
            try:
                value = float(value)
            except OverflowError:
                raise ProtocolError(f"{where}: {value!r} does not fit a float") from None
        return value
    if kind is str:
        if not isinstance(value, str):
            raise ProtocolError(f"{where}: expected str, got {type(value).__name__}")
        return value
    raise AssertionError(f"unknown scalar kind {kind!r}")  # pragma: no cover


def _message(tag: str, *, dims: Mapping[str, str] | None = None):
    """Class decorator: register a message dataclass under ``tag``."""

    def wrap(cls: type[_Message]) -> type[_Message]:
        specs = []
        for f in dataclasses.fields(cls):
            spec = f.metadata.get(_SPEC_KEY)
            if spec is None:
                raise TypeError(f"{cls.__name__}.{f.name}: missing wire spec")
            specs.append((f.name, spec))
        names = {n for n, _ in specs}
        if names & {"v", "t"}:
            raise TypeError(f"{cls.__name__}: field names 'v'/'t' are reserved")
        dim_map = dict(dims or {})
        for sym, int_field in dim_map.items():
            spec = dict(specs).get(int_field)
            if not (isinstance(spec, _ScalarSpec) and spec.kind is int):
                raise TypeError(f"{cls.__name__}: dim {sym!r} bound to non-int {int_field!r}")
        if tag in _REGISTRY:
            raise TypeError(f"duplicate message tag {tag!r}")
        cls.TAG = tag
        cls._SPECS = tuple(specs)
        cls._SCALARS = tuple((n, sp) for n, sp in specs if isinstance(sp, _ScalarSpec))
        cls._ARRAYS = tuple((n, sp) for n, sp in specs if isinstance(sp, _ArraySpec))
        cls._KEYS = frozenset(names | {"v", "t"})
        cls._FAST_SCALARS = tuple((n, sp.kind, sp.minimum) for n, sp in cls._SCALARS)
        cls._FAST_ARRAYS = tuple(
            (n, sp.wire_dtype, sp.dtype, sp.ndim, sp.shape, sp.allow_empty) for n, sp in cls._ARRAYS
        )
        cls._DIMS = dim_map
        _REGISTRY[tag] = cls
        return cls

    return wrap


# --------------------------------------------------------------------------
# Message types
# --------------------------------------------------------------------------


@_message("unroll", dims={"M": "num_envs", "T": "length"})
@dataclass(frozen=True, slots=True, eq=False)
class Unroll(_Message):
    """worker -> broker: M envs' unrolls of length T sharing ring slots.

    The observation at time t (t = 0..T) is ring frame ``first_frame + t``.
    ``features`` may be an empty ``[0, 0, 0]`` array meaning "not sent".
    """

    worker_id: int = _int()
    seq: int = _int()
    policy_version: int = _int()
    first_frame: int = _int()
    num_envs: int = _int(minimum=0)
    length: int = _int(minimum=0)
    env_frames: int = _int()
    actions: np.ndarray = _array("int32", ("M", "T"))
    rewards: np.ndarray = _array("float32", ("M", "T"))
    discounts: np.ndarray = _array("float32", ("M", "T"))
    behaviour_logits: np.ndarray = _array("float32", ("M", "T", "A"))
    behaviour_values: np.ndarray = _array("float32", ("M", "T"))
    features: np.ndarray = _array("float32", ("M", "T", "F"), allow_empty=True)


@_message("batch", dims={"T": "length"})
@dataclass(frozen=True, slots=True, eq=False)
class Batch(_Message):
    """broker -> learner: B units of length T."""

    batch_id: int = _int()
    length: int = _int(minimum=0)
    env_frames: int = _int()  # env frames the workers had produced when the batch was made (the run's, since its start)
    worker_ids: np.ndarray = _array("int32", ("B",))
    env_index: np.ndarray = _array("int32", ("B",))
    first_frame: np.ndarray = _array("int64", ("B",))
    policy_versions: np.ndarray = _array("int64", ("B",))
    actions: np.ndarray = _array("int32", ("B", "T"))
    rewards: np.ndarray = _array("float32", ("B", "T"))
    discounts: np.ndarray = _array("float32", ("B", "T"))
    behaviour_logits: np.ndarray = _array("float32", ("B", "T", "A"))
    behaviour_values: np.ndarray = _array("float32", ("B", "T"))
    replay_index: np.ndarray = _array("int32", ("B",))  # which [[replay]] table each unit came from


@_message("episode")
@dataclass(frozen=True, slots=True)
class Episode(_Message):
    """worker -> launcher: one finished episode."""

    worker_id: int = _int()
    pid: int = _int()  # the sender's, which the launcher checks against the worker it started
    env_index: int = _int()
    raw_return: float = _float()  # the whole episode's raw score (SABER's uncapped score)
    length_frames: int = _int()
    length_env_steps: int = _int()
    env_frames: int = _int()
    wall_time: float = _float()
    score_5min: float = _float()  # the raw score after 5 minutes of play (18,000 frames), SABER-style
    score_30min: float = _float()  # after 30 minutes (108,000 frames); the whole score for shorter episodes


@_message("worker_stats")
@dataclass(frozen=True, slots=True)
class WorkerStats(_Message):
    """worker -> launcher, about once a second; doubles as heartbeat."""

    worker_id: int = _int()
    pid: int = _int()
    time: float = _float()
    env_frames: int = _int()
    env_steps: int = _int()
    unrolls_sent: int = _int()
    policy_version: int = _int()
    weight_updates: int = _int()
    step_time_s: float = _float()
    inference_time_s: float = _float()
    ring_write_time_s: float = _float()
    send_time_s: float = _float()
    weights_wait_time_s: float = _float()


@_message("broker_stats")
@dataclass(frozen=True, slots=True)
class BrokerStats(_Message):
    pid: int = _int()
    time: float = _float()
    unrolls_received: int = _int()
    unrolls_dropped_stale: int = _int()
    unrolls_dropped_full: int = _int()
    seq_gaps: int = _int()
    decode_errors: int = _int()
    batches_sent: int = _int()
    replay_size: int = _int()
    ready_batches: int = _int()
    replay_sizes: np.ndarray = _array("int64", ("R",))  # units held by each [[replay]] table
    prepare_time_s: float = _float()  # cumulative time spent making batches, feature recomputation included
    feature_time_s: float = _float()  # cumulative time in the feature forward passes
    insert_time_s: float = _float()  # cumulative time decoding unroll messages and inserting their units
    elite_lambda: float = _float()  # the first elite/attentive replay's current batch multiplier (0: none)
    elite_distance_pool: float = _float()  # mean distance over its last candidate pool
    elite_distance_chosen: float = _float()  # mean distance of the units it chose from that pool
    elite_distance_min: float = _float()
    elite_distance_max: float = _float()


@_message("learner_stats")
@dataclass(frozen=True, slots=True)
class LearnerStats(_Message):
    pid: int = _int()
    time: float = _float()
    learner_step: int = _int()
    policy_version: int = _int()
    samples: int = _int()
    env_frames_trained: int = _int()
    units_dropped_torn: int = _int()
    total_loss: float = _float()
    pg_loss: float = _float()
    baseline_loss: float = _float()
    entropy_loss: float = _float()
    learning_rate: float = _float()
    grad_norm: float = _float()
    mean_rho: float = _float()
    policy_cloning_loss: float = _float()
    value_cloning_loss: float = _float()
    laser_masked_fraction: float = _float()
    # Mean age in policy versions of the fresh (queue) units of the last batch; Ape-X: its newest transition's.
    policy_lag: float = _float()
    sample_age_mean: float = _float()  # mean age in policy versions of every unit of the last batch
    sample_age_max: float = _float()
    step_time_s: float = _float()
    gather_time_s: float = _float()
    wait_time_s: float = _float()
    publish_time_s: float = _float()  # cumulative time flattening, encoding and sending new weights
    decode_errors: int = _int()  # batches and weights requests that failed the schema or did not fit the run
    checkpoint_path: str = _str()  # "" when no checkpoint was written


@_message("weights_request")
@dataclass(frozen=True, slots=True)
class WeightsRequest(_Message):
    """worker -> learner: please send the latest weights."""

    worker_id: int = _int()


@_message("credit")
@dataclass(frozen=True, slots=True)
class Credit(_Message):
    """learner -> broker: room for this many more batches (credit-based flow control, so that batches
    never wait in socket buffers, where high-water marks do not reach)."""

    batches: int = _int()


@_message("index_request")
@dataclass(frozen=True, slots=True)
class IndexRequest(_Message):
    """learner -> broker (on the credits channel): send me your replay index, for the next checkpoint."""

    learner_step: int = _int()


@_message("replay_index")
@dataclass(frozen=True, slots=True, eq=False)
class ReplayIndex(_Message):
    """broker -> learner (on the batches channel): which units every replay holds, how often each was
    sampled, and the stored behaviour features of the units of elite and attentive replays."""

    replay: np.ndarray = _array("int32", ("N",))  # the [[replay]] table each unit belongs to
    worker_ids: np.ndarray = _array("int32", ("N",))
    env_index: np.ndarray = _array("int32", ("N",))
    first_frame: np.ndarray = _array("int64", ("N",))
    policy_versions: np.ndarray = _array("int64", ("N",))
    counts: np.ndarray = _array("int64", ("N",))
    sample_calls: np.ndarray = _array("int64", ("R",))  # each replay's sample calls so far (elite lambda annealing)
    feature_rows: np.ndarray = _array("int32", ("G",))  # the units (rows of the arrays above) with features
    features: np.ndarray = _array("float32", ("G", "K", "F"), allow_empty=True)  # at the compared steps


@_message("role_error")
@dataclass(frozen=True, slots=True)
class RoleError(_Message):
    """role -> launcher (on the stats channel), as the role dies of an exception: its traceback, which the
    launcher logs, and shows when the failure stops the run."""

    role: str = _str()
    pid: int = _int()
    traceback: str = _str()  # at most the last TRACEBACK_CHARS characters


TRACEBACK_CHARS = 16_000


# Ape-X (algo apex_iqn): n-step transitions as frame numbers, sampled by priority.


@_message("transitions", dims={"N": "count"})
@dataclass(frozen=True, slots=True, eq=False)
class Transitions(_Message):
    """worker -> broker: ``count`` n-step transitions whose frames are in the worker's ring (s_t at ``frame``,
    s_{t+n} at ``next_frame``), with their initial priorities (loss ** omega; negative: not known)."""

    worker_id: int = _int(minimum=0)
    seq: int = _int(minimum=0)
    policy_version: int = _int(minimum=0)
    env_frames: int = _int(minimum=0)
    count: int = _int(minimum=0)
    env_index: np.ndarray = _array("int32", ("N",))
    frame: np.ndarray = _array("int64", ("N",))
    action: np.ndarray = _array("int32", ("N",))
    nstep_return: np.ndarray = _array("float32", ("N",))
    bootstrap_discount: np.ndarray = _array("float32", ("N",))
    next_frame: np.ndarray = _array("int64", ("N",))
    priority: np.ndarray = _array("float32", ("N",))


@_message("transition_batch", dims={"B": "size"})
@dataclass(frozen=True, slots=True, eq=False)
class TransitionBatch(_Message):
    """broker -> learner: ``size`` transitions drawn by priority, with their importance weights, and the
    slots and stamps the learner's new priorities must name."""

    batch_id: int = _int(minimum=0)
    env_frames: int = _int(minimum=0)
    size: int = _int(minimum=0)
    worker_ids: np.ndarray = _array("int32", ("B",))
    env_index: np.ndarray = _array("int32", ("B",))
    frame: np.ndarray = _array("int64", ("B",))
    action: np.ndarray = _array("int32", ("B",))
    nstep_return: np.ndarray = _array("float32", ("B",))
    bootstrap_discount: np.ndarray = _array("float32", ("B",))
    next_frame: np.ndarray = _array("int64", ("B",))
    slots: np.ndarray = _array("int64", ("B",))
    stamps: np.ndarray = _array("int64", ("B",))
    weights: np.ndarray = _array("float32", ("B",))
    policy_version: np.ndarray = _array("int64", ("B",))  # the weights version each transition was played with


@_message("priority_update", dims={"B": "size"})
@dataclass(frozen=True, slots=True, eq=False)
class PriorityUpdate(_Message):
    """learner -> broker (on its own channel): the new priorities of a batch's transitions."""

    batch_id: int = _int(minimum=0)
    size: int = _int(minimum=0)
    slots: np.ndarray = _array("int64", ("B",))
    stamps: np.ndarray = _array("int64", ("B",))
    priorities: np.ndarray = _array("float32", ("B",))


MESSAGE_TYPES: tuple[type[_Message], ...] = (
    Unroll,
    Batch,
    Episode,
    WorkerStats,
    BrokerStats,
    LearnerStats,
    WeightsRequest,
    Credit,
    IndexRequest,
    ReplayIndex,
    RoleError,
    Transitions,
    TransitionBatch,
    PriorityUpdate,
)
assert set(MESSAGE_TYPES) == set(_REGISTRY.values())

Message = (
    Unroll
    | Batch
    | Episode
    | WorkerStats
    | BrokerStats
    | LearnerStats
    | WeightsRequest
    | Credit
    | IndexRequest
    | ReplayIndex
    | RoleError
    | Transitions
    | TransitionBatch
    | PriorityUpdate
)


# --------------------------------------------------------------------------
# Decoding
# --------------------------------------------------------------------------


def _byte_len(data: Any) -> int:
    if isinstance(data, (bytes, bytearray)):
        return len(data)
    try:
        with memoryview(data) as mv:
            return mv.nbytes
    except TypeError:
        raise ProtocolError(f"<message>: expected a bytes-like object, got {type(data).__name__}") from None


_ARRAY_KEYS = frozenset({"dtype", "shape", "data"})


def _array_from_wire(tname: str, name: str, spec: _ArraySpec, value: Any) -> np.ndarray:
    if type(value) is dict and value.keys() == _ARRAY_KEYS:  # the fast path: a well-formed array
        shape, data = value["shape"], value["data"]
        if (
            value["dtype"] == spec.wire_dtype
            and type(shape) is list
            and len(shape) == spec.ndim
            and type(data) is bytes
        ):
            size = spec.dtype.itemsize
            for dim in shape:
                if type(dim) is not int or not 0 <= dim <= MAX_MESSAGE_BYTES:
                    break
                size *= dim
            else:
                if len(data) == size:
                    return np.frombuffer(data, dtype=spec.dtype).reshape(shape)
    _bad_array(tname, name, spec, value)
    raise AssertionError("unreachable")  # pragma: no cover


def _bad_array(tname: str, name: str, spec: _ArraySpec, value: Any) -> None:
    """Raise the ProtocolError that says what is wrong with an array map the fast path refused."""
    where = f"{tname}.{name}"
    if type(value) is not dict:
        raise ProtocolError(f"{where}: expected array map, got {type(value).__name__}")
    if value.keys() != _ARRAY_KEYS:
        keys = sorted(map(repr, value.keys()))
        raise ProtocolError(f"{where}: array map keys {keys} != ['data', 'dtype', 'shape']")
    dtype, shape, data = value["dtype"], value["shape"], value["data"]
    if type(dtype) is not str or dtype != spec.wire_dtype:
        raise ProtocolError(f"{where}: dtype {dtype!r} not allowed, expected {spec.wire_dtype!r}")
    if type(shape) is not list:
        raise ProtocolError(f"{where}: shape must be a list, got {type(shape).__name__}")
    if len(shape) != len(spec.shape):
        raise ProtocolError(f"{where}: ndim {len(shape)} != {len(spec.shape)} {spec.shape}")
    for axis, dim in enumerate(shape):
        if type(dim) is int and 0 <= dim <= MAX_MESSAGE_BYTES:
            continue
        if type(dim) is not int:
            raise ProtocolError(f"{where}: shape[{axis}] must be int, got {type(dim).__name__}")
        if dim < 0:
            raise ProtocolError(f"{where}: shape[{axis}] is negative ({dim})")
        if dim > MAX_MESSAGE_BYTES:
            raise ProtocolError(f"{where}: shape[{axis}]={dim} is implausibly large")
    if type(data) is not bytes:
        raise ProtocolError(f"{where}: data must be bin, got {type(data).__name__}")
    expected = math.prod(shape) * spec.dtype.itemsize
    if len(data) != expected:
        raise ProtocolError(f"{where}: data has {len(data)} bytes, shape {shape} x {dtype} needs {expected}")
    raise ProtocolError(f"{where}: malformed array map")  # pragma: no cover - the checks above cover every case


def _well_formed(cls: type[_Message], obj: dict) -> _Message | None:
    """The message, when every field is exactly as the schema wants it (what a zrl sender always sends), built
    in one pass; None at the first thing that is not, and the general path then says what is wrong. It accepts
    nothing that the general path (``_array_from_wire`` and ``__post_init__``) would refuse."""
    if obj.keys() != cls._KEYS:
        return None
    message = object.__new__(cls)
    put = object.__setattr__
    for name, kind, minimum in cls._FAST_SCALARS:
        value = obj[name]
        if type(value) is not kind:
            return None
        if kind is int and not (_INT_MIN <= value <= _INT_MAX and (minimum is None or value >= minimum)):
            return None
        put(message, name, value)
    bound = {sym: obj[int_field] for sym, int_field in cls._DIMS.items()}
    for name, wire, dtype, ndim, syms, allow_empty in cls._FAST_ARRAYS:
        value = obj[name]
        if type(value) is not dict or len(value) != 3:
            return None
        try:
            shape, data = value["shape"], value["data"]
            if value["dtype"] != wire:
                return None
        except KeyError:
            return None
        if type(shape) is not list or len(shape) != ndim or type(data) is not bytes:
            return None
        size = dtype.itemsize
        for dim in shape:
            if type(dim) is not int or not 0 <= dim <= MAX_MESSAGE_BYTES:
                return None
            size *= dim
        if len(data) != size:
            return None
        if not (allow_empty and not any(shape)):
            for sym, dim in zip(syms, shape):
                if bound.setdefault(sym, dim) != dim:
                    return None
        put(message, name, np.ndarray(shape, dtype, data))
    return message


def _decode(data: Any) -> Message:
    n = _byte_len(data)
    if n > MAX_MESSAGE_BYTES:
        raise ProtocolError(f"<message>: {n} bytes exceeds MAX_MESSAGE_BYTES={MAX_MESSAGE_BYTES}")
    try:
        obj = msgpack.unpackb(
            data,
            raw=False,
            strict_map_key=True,
            use_list=True,
            max_bin_len=MAX_MESSAGE_BYTES,
            max_str_len=_MAX_STR_LEN,
            max_array_len=_MAX_ARRAY_LEN,
            max_map_len=_MAX_MAP_LEN,
            max_ext_len=0,
        )
    except Exception as exc:  # msgpack raises a zoo of exception types
        raise ProtocolError(f"<message>: malformed msgpack ({type(exc).__name__}: {exc})") from None

    if type(obj) is not dict:
        raise ProtocolError(f"<message>: top level must be a map, got {type(obj).__name__}")
    tag = obj.get("t")
    cls = _REGISTRY.get(tag) if type(tag) is str else None
    tname = cls.__name__ if cls is not None else f"<message t={tag!r}>"

    version = obj.get("v", None)
    if "v" not in obj:
        raise ProtocolError(f"{tname}.v: missing format version")
    if type(version) is not int or version != FORMAT_VERSION:
        raise ProtocolError(f"{tname}.v: format version {version!r} != {FORMAT_VERSION}")
    if "t" not in obj:
        raise ProtocolError(f"{tname}.t: missing type tag")
    if cls is None:
        raise ProtocolError(f"{tname}.t: unknown type tag {tag!r}")

    fast = _well_formed(cls, obj)
    if fast is not None:
        return fast
    specs = cls._SPECS
    if obj.keys() != cls._KEYS:
        known = {name for name, _ in specs} | {"v", "t"}
        missing = [name for name, _ in specs if name not in obj]
        if missing:
            raise ProtocolError(f"{tname}.{missing[0]}: missing field(s) {missing}")
        extra = sorted(k if type(k) is str else repr(k) for k in obj if k not in known)
        raise ProtocolError(f"{tname}.{extra[0]}: unknown extra field(s) {extra}")

    kwargs: dict[str, Any] = {}
    for name, spec in specs:
        value = obj[name]
        if isinstance(spec, _ArraySpec):
            value = _array_from_wire(tname, name, spec, value)
        elif type(value) not in (int, float, str):
            # bools, bytes, None, lists, maps, ext: never a valid scalar
            raise ProtocolError(f"{tname}.{name}: expected {spec.kind.__name__}, got {type(value).__name__}")
        kwargs[name] = value
    return cls(**kwargs)  # __post_init__ does the remaining type/dim checks


def decode(data: bytes | bytearray | memoryview) -> Message:
    """Decode one msgpack message; raise ProtocolError for any bad input."""
    try:
        return _decode(data)
    except ProtocolError:
        raise
    except Exception as exc:  # defence in depth: never crash a receiver
        raise ProtocolError(f"<message>: undecodable ({type(exc).__name__}: {exc})") from exc


# --------------------------------------------------------------------------
# Weights frame
# --------------------------------------------------------------------------

WEIGHTS_MAGIC = b"ZRLW"
_WEIGHTS_HEADER = struct.Struct("<4sHHqqQ")  # magic, fmt ver, reserved, version, step, count
WEIGHTS_HEADER_BYTES = _WEIGHTS_HEADER.size  # 32
_F32 = np.dtype("<f4")


def encode_weights(version: int, learner_step: int, flat: np.ndarray) -> bytes:
    """Encode a flat float32 parameter vector as one binary frame."""
    if not isinstance(flat, np.ndarray):
        raise ValueError(f"weights: expected numpy array, got {type(flat).__name__}")
    if flat.ndim != 1 or flat.dtype != _F32 or not flat.flags.c_contiguous:
        raise ValueError(
            f"weights: flat must be 1-D contiguous float32, got "
            f"ndim={flat.ndim} dtype={flat.dtype} contiguous={flat.flags.c_contiguous}"
        )
    for label, v in (("version", version), ("learner_step", learner_step)):
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Integral):
            raise ValueError(f"weights: {label} must be int, got {type(v).__name__}")
        if not -(2**63) <= int(v) < 2**63:
            raise ValueError(f"weights: {label} {v} out of int64 range")
    header = _WEIGHTS_HEADER.pack(WEIGHTS_MAGIC, FORMAT_VERSION, 0, int(version), int(learner_step), flat.size)
    return b"".join((header, memoryview(flat).cast("B") if flat.size else b""))


def decode_weights(data: bytes | bytearray | memoryview) -> tuple[int, int, np.ndarray]:
    """Decode a weights frame -> (version, learner_step, zero-copy float32 view)."""
    try:
        mv = memoryview(data)
    except TypeError:
        raise ProtocolError(f"weights: expected a bytes-like object, got {type(data).__name__}") from None
    n = mv.nbytes
    if n < WEIGHTS_HEADER_BYTES:
        raise ProtocolError(f"weights.header: frame of {n} bytes shorter than header")
    try:
        if mv.ndim != 1 or mv.itemsize != 1:
            mv = mv.cast("B")
        magic, fmt, reserved, version, step, count = _WEIGHTS_HEADER.unpack_from(mv)
    except (TypeError, ValueError, struct.error) as exc:
        raise ProtocolError(f"weights.header: unreadable ({exc})") from None
    if magic != WEIGHTS_MAGIC:
        raise ProtocolError(f"weights.magic: {magic!r} != {WEIGHTS_MAGIC!r}")
    if fmt != FORMAT_VERSION:
        raise ProtocolError(f"weights.format_version: {fmt} != {FORMAT_VERSION}")
    if reserved != 0:
        raise ProtocolError(f"weights.reserved: {reserved} != 0")
    expected = WEIGHTS_HEADER_BYTES + count * _F32.itemsize
    if n != expected:
        raise ProtocolError(f"weights.count: header says {count} floats ({expected} bytes), frame has {n} bytes")
    flat = np.frombuffer(mv, dtype=_F32, count=count, offset=WEIGHTS_HEADER_BYTES)
    return version, step, flat
