"""Wire protocol: every message that crosses a zrl socket.

Layer 0: imports only numpy, msgspec and the standard library.  No pickle.

Msgpack messages
----------------
Each message type is a frozen ``msgspec.Struct`` declared once below, a member of one tagged union
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
``_Message.__post_init__``, which runs on decoding and on construction alike: an array's dtype, byte count,
rank and axes; and for a message built in this process its scalars too (numpy scalars are taken, and ints for
floats).

Wire form: a msgpack map ``{"t": <tag>, "v": FORMAT_VERSION, <field>: ...}``, fields in declaration order (the
dataclass encoder before msgspec wrote ``v`` before ``t``; both orders decode, so the format is still 1).
Arrays travel as ``{"dtype": "<f4", "shape": [..], "data": <bin>}`` with raw little-endian C-order bytes.

``decode`` is strict and raises only :class:`ProtocolError` for bad input, naming ``Type.field`` and what is
wrong.  Decoded arrays are zero-copy, read-only numpy views of the message's bytes.

Weights
-------
Weights are one binary frame, not msgpack: a 32-byte little-endian header
(magic ``b"ZRLW"``, format version u16, reserved u16 (= 0), version i64,
learner_step i64, count u64) followed by ``count`` float32 values.
"""

import math
import numbers
import re
import struct
import typing
from dataclasses import dataclass, replace
from typing import Annotated, Any, ClassVar, Literal

import msgspec
import numpy as np
from msgspec import Meta

__all__ = [
    "FORMAT_VERSION",
    "MAX_MESSAGE_BYTES",
    "MESSAGE_TYPES",
    "TRACEBACK_CHARS",
    "Message",
    "ProtocolError",
    "Unroll",
    "Batch",
    "Episode",
    "WorkerStats",
    "BrokerStats",
    "LearnerStats",
    "WeightsRequest",
    "Credit",
    "IndexRequest",
    "SaveReplay",
    "ReplayIndex",
    "RoleError",
    "Transitions",
    "TransitionBatch",
    "PriorityUpdate",
    "Join",
    "Welcome",
    "Refused",
    "Ack",
    "Leave",
    "RemoteData",
    "Notice",
    "IngestStats",
    "EvalRequest",
    "EvaluatorStats",
    "EvalResult",
    "decode",
    "encode_weights",
    "decode_weights",
    "WEIGHTS_MAGIC",
    "WEIGHTS_HEADER_BYTES",
]

FORMAT_VERSION = 1
MAX_MESSAGE_BYTES = 64 * 1024 * 1024  # 64 MiB
TRACEBACK_CHARS = 16_000

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
        return _WireArray(arr.dtype.str, arr.shape, memoryview(arr) if arr.size else memoryview(b""))
    raise NotImplementedError(f"cannot encode {type(value).__name__}")


# --------------------------------------------------------------------------
# Message base class and registry
# --------------------------------------------------------------------------

_REGISTRY: dict[str, type["_Message"]] = {}


class _MessageMeta(msgspec.StructMeta):
    """Reads each message's declaration once: into the plans ``__post_init__`` follows, and, for an array field,
    the wire map msgspec decodes.  Builds a message with this build's format version (a decoded one must carry
    it)."""

    def __new__(mcls, name: str, bases: tuple, namespace: dict[str, Any], **config: Any):
        tag = config.get("tag")
        if tag is None:
            return super().__new__(mcls, name, bases, namespace, **config)
        if tag in _REGISTRY:
            raise TypeError(f"duplicate message tag {tag!r}")
        hints = namespace.get("__annotations__", {})
        scalars, arrays, lengths, stats = [], [], [], []
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
            elif typing.get_origin(kind) is not ClassVar:
                raise TypeError(f"{name}.{field}: {kind!r} is not a wire type")
        cls = super().__new__(mcls, name, bases, namespace, **config)
        cls.TAG = tag
        cls.FIELDS = cls.__struct_fields__[1:]  # after v
        cls._SCALARS = tuple(scalars)
        cls._ARRAYS = tuple(arrays)
        cls._LENGTHS = tuple(lengths)
        cls.STATS = tuple(stats)
        _REGISTRY[tag] = cls
        return cls

    def __call__(cls, **fields: Any):
        return super().__call__(v=FORMAT_VERSION, **fields)


class _Message(
    msgspec.Struct, metaclass=_MessageMeta, frozen=True, tag_field="t", forbid_unknown_fields=True, gc=False
):
    """Shared behaviour for every message."""

    TAG: ClassVar[str]
    FIELDS: ClassVar[tuple[str, ...]]  # the message's own fields, in wire order (v is every message's)
    STATS: ClassVar[tuple[tuple[str, Stat], ...]]  # (field, its column of metrics.csv), in declaration order
    _SCALARS: ClassVar[tuple[tuple[str, type, int], ...]]
    _ARRAYS: ClassVar[tuple[tuple[str, Array], ...]]
    _LENGTHS: ClassVar[tuple[tuple[str, str], ...]]

    v: Literal[FORMAT_VERSION]

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


def _scalar(where: str, kind: type, minimum: int, value: Any) -> Any:
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
_force_setattr = msgspec.structs.force_setattr


# --------------------------------------------------------------------------
# Message types
# --------------------------------------------------------------------------


class Unroll(_Message, tag="unroll", eq=False):
    """worker -> broker: M envs' unrolls of length T sharing ring slots.

    The observation at time t (t = 0..T) is ring frame ``first_frame + t``.
    ``features`` may be an empty ``[0, 0, 0]`` array meaning "not sent".
    """

    worker_id: int
    seq: int
    policy_version: int
    first_frame: int
    num_envs: Annotated[Count, Length("M")]
    length: Annotated[Count, Length("T")]
    env_frames: int
    actions: Annotated[np.ndarray, Array("int32", "M", "T")]
    rewards: Annotated[np.ndarray, Array("float32", "M", "T")]
    discounts: Annotated[np.ndarray, Array("float32", "M", "T")]
    behaviour_logits: Annotated[np.ndarray, Array("float32", "M", "T", "A")]
    behaviour_values: Annotated[np.ndarray, Array("float32", "M", "T")]
    features: Annotated[np.ndarray, Array("float32", "M", "T", "F", empty_ok=True)]


class Batch(_Message, tag="batch", eq=False):
    """broker -> learner: B units of length T."""

    batch_id: int
    length: Annotated[Count, Length("T")]
    env_frames: int  # env frames the workers had produced when the batch was made (the run's, since its start)
    worker_ids: Annotated[np.ndarray, Array("int32", "B")]
    env_index: Annotated[np.ndarray, Array("int32", "B")]
    first_frame: Annotated[np.ndarray, Array("int64", "B")]
    policy_versions: Annotated[np.ndarray, Array("int64", "B")]
    actions: Annotated[np.ndarray, Array("int32", "B", "T")]
    rewards: Annotated[np.ndarray, Array("float32", "B", "T")]
    discounts: Annotated[np.ndarray, Array("float32", "B", "T")]
    behaviour_logits: Annotated[np.ndarray, Array("float32", "B", "T", "A")]
    behaviour_values: Annotated[np.ndarray, Array("float32", "B", "T")]
    replay_index: Annotated[np.ndarray, Array("int32", "B")]  # which [[replay]] table each unit came from


class Episode(_Message, tag="episode"):
    """worker -> launcher: one finished episode."""

    worker_id: int
    pid: int  # the sender's, which the launcher checks against the worker it started
    env_index: int
    raw_return: float  # the whole episode's raw score (SABER's uncapped score)
    length_frames: int
    length_env_steps: int
    env_frames: int
    wall_time: float
    score_5min: float  # the raw score after 5 minutes of play (18,000 frames), SABER-style
    score_30min: float  # after 30 minutes (108,000 frames); the whole score for shorter episodes


class WorkerStats(_Message, tag="worker_stats"):
    """worker -> launcher, about once a second; doubles as heartbeat. Its figures are cumulative since the
    worker started; metrics.csv sums or bounds them over the workers (their latest reports)."""

    worker_id: int
    pid: int
    time: float
    env_frames: int
    env_steps: int
    unrolls_sent: int
    policy_version: Annotated[
        int,
        Stat("the oldest weights version a worker acts with", column="worker_policy_version_min", combine="min"),
        Stat("the newest weights version a worker acts with", column="worker_policy_version_max", combine="max"),
    ]
    weight_updates: int
    step_time_s: Annotated[float, Stat("seconds stepping the envs", column="time_env_step_s", combine="sum")]
    inference_time_s: Annotated[float, Stat("seconds of policy inference", column="time_inference_s", combine="sum")]
    ring_write_time_s: Annotated[
        float, Stat("seconds writing frames into the rings", column="time_ring_write_s", combine="sum")
    ]
    send_time_s: Annotated[float, Stat("seconds sending unroll messages", column="time_send_s", combine="sum")]
    weights_wait_time_s: Annotated[
        float,
        Stat("seconds waiting for weights", column="worker_weights_wait_s", combine="sum"),
        Stat("seconds waiting for weights", column="time_weights_wait_s", combine="sum"),
    ]


class BrokerStats(_Message, tag="broker_stats", eq=False):
    """broker -> launcher, about once a second: its counts (cumulative) and its replays' state."""

    pid: int
    time: float
    unrolls_received: Annotated[int, Stat("units (Ape-X: transitions) received from the workers and inserted")]
    unrolls_dropped_stale: Annotated[
        int, Stat("units (Ape-X: transitions) dropped because their ring had overwritten their frames")
    ]
    unrolls_dropped_full: Annotated[int, Stat("fresh units a full queue dropped (replay.discard says which)")]
    seq_gaps: Annotated[int, Stat("worker messages that never arrived (gaps in their numbering)")]
    decode_errors: Annotated[
        int, Stat("messages the broker refused: malformed, of the wrong kind, or not fitting this run")
    ]
    batches_sent: int
    replay_size: Annotated[int, Stat("units held by the fullest replay")]
    ready_batches: Annotated[int, Stat("batches sent that the learner has not taken yet")]
    replay_sizes: Annotated[
        np.ndarray, Array("int64", "R"), Stat("units held by each [[replay]] table, space-separated")
    ]
    prepare_time_s: Annotated[
        float, Stat("seconds making batches, feature passes included", column="time_broker_sample_s")
    ]
    feature_time_s: Annotated[float, Stat("seconds in the feature forward passes", column="time_broker_features_s")]
    insert_time_s: Annotated[
        float, Stat("seconds decoding unroll messages and inserting their units", column="time_broker_insert_s")
    ]
    elite_lambda: Annotated[float, Stat("the first elite/attentive replay's batch multiplier (0: none)")]
    elite_distance_pool: Annotated[float, Stat("mean feature distance over its last candidate pool")]
    elite_distance_chosen: Annotated[float, Stat("mean distance of the units it chose from that pool")]
    elite_distance_min: Annotated[float, Stat("least distance in that pool")]
    elite_distance_max: Annotated[float, Stat("greatest distance in that pool")]
    replay_saves: Annotated[int, Stat("replay checkpoints written (run.checkpoint_replay)")] = 0
    replay_save_s: Annotated[float, Stat("seconds the last replay checkpoint took, in the broker's writer thread")] = (
        0.0
    )
    replay_bytes: Annotated[int, Stat("bytes the kept replay checkpoints take on disk")] = 0


class LearnerStats(_Message, tag="learner_stats"):
    """learner -> launcher, every log interval and at the end: its counts (cumulative) and its last step's
    figures (``step=True``: what the agent's learner step reports, 0 where it reports nothing)."""

    pid: int
    time: float
    learner_step: Annotated[int, Stat("optimiser steps taken")]
    policy_version: Annotated[int, Stat("the version of the weights the learner last published")]
    samples: int
    env_frames_trained: int
    # the env frames the workers had played when the broker made the last batch trained on: the count frames
    # trained are set against, from the same message, so the replay ratio does not lag one report behind the other
    env_frames: int
    units_dropped_torn: Annotated[int, Stat("units dropped because their frames were overwritten as they were read")]
    total_loss: Annotated[float, Stat("the last step's loss", step=True)]
    pg_loss: Annotated[float, Stat("its policy-gradient term", step=True)]
    baseline_loss: Annotated[float, Stat("its value term", step=True)]
    entropy_loss: Annotated[float, Stat("its entropy term", step=True)]
    entropy_cost: Annotated[
        float,
        Stat("V-trace family: the entropy weight that step used (learner.entropy_decay_frames moves it)", step=True),
    ]
    learning_rate: Annotated[float, Stat("the optimiser's learning rate")]
    grad_norm: Annotated[float, Stat("the gradient norm before clipping", step=True)]
    mean_rho: Annotated[float, Stat("the mean importance ratio pi/mu (IMPACT: pi_target/mu)", step=True)]
    policy_cloning_loss: Annotated[float, Stat("CLEAR's policy-cloning term", step=True)]
    value_cloning_loss: Annotated[float, Stat("CLEAR's value-cloning term", step=True)]
    laser_masked_fraction: Annotated[float, Stat("the share of steps LASER masked", step=True)]
    clip_fraction: Annotated[
        float, Stat("IMPACT: the share of steps whose ratio to the target network left the surrogate's clip", step=True)
    ]
    target_kl: Annotated[float, Stat("IMPACT: the mean KL from the target network to the policy", step=True)]
    policy_lag: Annotated[
        float,
        Stat(
            "mean age in policy versions of the last batch's fresh (queue) units; Ape-X: its newest transition's",
            step=True,
        ),
    ]
    sample_age_mean: Annotated[float, Stat("mean age in policy versions of every unit of the last batch", step=True)]
    sample_age_max: Annotated[float, Stat("the oldest unit's age in that batch", step=True)]
    step_time_s: Annotated[float, Stat("seconds of forward, backward and optimiser", column="time_learner_step_s")]
    gather_time_s: Annotated[float, Stat("seconds gathering frames", column="time_learner_gather_s")]
    wait_time_s: Annotated[float, Stat("seconds waiting for a batch", column="time_learner_wait_s")]
    publish_time_s: Annotated[
        float, Stat("seconds flattening, encoding and sending new weights", column="time_learner_publish_s")
    ]
    decode_errors: Annotated[
        int,
        Stat(
            "batches and weights requests refused: malformed, or not fitting this run", column="learner_decode_errors"
        ),
    ]
    checkpoint_path: Text  # "" when no checkpoint was written
    nonfinite_steps: Annotated[
        int, Stat("learner steps skipped: their loss or gradient norm was not finite (learner.max_nonfinite_steps)")
    ] = 0


class WeightsRequest(_Message, tag="weights_request"):
    """worker -> learner: please send the latest weights."""

    worker_id: int


class Credit(_Message, tag="credit"):
    """learner -> broker: room for this many more batches (credit-based flow control, so that batches
    never wait in socket buffers, where high-water marks do not reach)."""

    batches: int


class IndexRequest(_Message, tag="index_request"):
    """learner -> broker (on the credits channel): send me your replay index, for the next checkpoint."""

    learner_step: int


class SaveReplay(_Message, tag="save_replay"):
    """learner -> broker (on the credits channel): a checkpoint was written at this step; save the replays beside
    it (run.checkpoint_replay)."""

    learner_step: int


class ReplayIndex(_Message, tag="replay_index", eq=False):
    """broker -> learner (on the batches channel): which units every replay holds, how often each was
    sampled, and the stored behaviour features of the units of elite and attentive replays."""

    replay: Annotated[np.ndarray, Array("int32", "N")]  # the [[replay]] table each unit belongs to
    worker_ids: Annotated[np.ndarray, Array("int32", "N")]
    env_index: Annotated[np.ndarray, Array("int32", "N")]
    first_frame: Annotated[np.ndarray, Array("int64", "N")]
    policy_versions: Annotated[np.ndarray, Array("int64", "N")]
    counts: Annotated[np.ndarray, Array("int64", "N")]
    sample_calls: Annotated[
        np.ndarray, Array("int64", "R")
    ]  # each replay's sample calls so far (elite lambda annealing)
    feature_rows: Annotated[np.ndarray, Array("int32", "G")]  # the units (rows of the arrays above) with features
    features: Annotated[np.ndarray, Array("float32", "G", "K", "F", empty_ok=True)]  # at the compared steps


class RoleError(_Message, tag="role_error"):
    """role -> launcher (on the stats channel), as the role dies of an exception: its traceback, which the
    launcher logs, and shows when the failure stops the run."""

    role: Text
    pid: int
    traceback: Text  # at most the last TRACEBACK_CHARS characters


# Ape-X (algo apex_iqn): n-step transitions as frame numbers, sampled by priority.


class Transitions(_Message, tag="transitions", eq=False):
    """worker -> broker: ``count`` n-step transitions whose frames are in the worker's ring (s_t at ``frame``,
    s_{t+n} at ``next_frame``), with their initial priorities (loss ** omega; negative: not known)."""

    worker_id: Count
    seq: Count
    policy_version: Count
    env_frames: Count
    count: Annotated[Count, Length("N")]
    env_index: Annotated[np.ndarray, Array("int32", "N")]
    frame: Annotated[np.ndarray, Array("int64", "N")]
    action: Annotated[np.ndarray, Array("int32", "N")]
    nstep_return: Annotated[np.ndarray, Array("float32", "N")]
    bootstrap_discount: Annotated[np.ndarray, Array("float32", "N")]
    next_frame: Annotated[np.ndarray, Array("int64", "N")]
    priority: Annotated[np.ndarray, Array("float32", "N")]


class TransitionBatch(_Message, tag="transition_batch", eq=False):
    """broker -> learner: ``size`` transitions drawn by priority, with their importance weights, and the
    slots and stamps the learner's new priorities must name."""

    batch_id: Count
    env_frames: Count
    size: Annotated[Count, Length("B")]
    worker_ids: Annotated[np.ndarray, Array("int32", "B")]
    env_index: Annotated[np.ndarray, Array("int32", "B")]
    frame: Annotated[np.ndarray, Array("int64", "B")]
    action: Annotated[np.ndarray, Array("int32", "B")]
    nstep_return: Annotated[np.ndarray, Array("float32", "B")]
    bootstrap_discount: Annotated[np.ndarray, Array("float32", "B")]
    next_frame: Annotated[np.ndarray, Array("int64", "B")]
    slots: Annotated[np.ndarray, Array("int64", "B")]
    stamps: Annotated[np.ndarray, Array("int64", "B")]
    weights: Annotated[np.ndarray, Array("float32", "B")]
    policy_version: Annotated[np.ndarray, Array("int64", "B")]  # the weights version each transition was played with


class PriorityUpdate(_Message, tag="priority_update", eq=False):
    """learner -> broker (on its own channel): the new priorities of a batch's transitions."""

    batch_id: Count
    size: Annotated[Count, Length("B")]
    slots: Annotated[np.ndarray, Array("int64", "B")]
    stamps: Annotated[np.ndarray, Array("int64", "B")]
    priorities: Annotated[np.ndarray, Array("float32", "B")]


# Remote workers (zrl-worker on another host) and the ingest role (zrl/roles/ingest.py), on the ingest's gate: a
# ROUTER on tcp, with CurveZMQ beyond loopback. A remote worker's messages name no ring and no slot: the ingest
# knows which slot a connection holds.


class Join(_Message, tag="join"):
    """remote worker -> ingest: admit me. ``run``: the run (its folder's name) the worker was started for, ""
    for whichever listens; ``envs_per_worker``: what it was told to step, 0 for the run's; ``host``: where it runs,
    for the run's log."""

    run: Text
    host: Text
    pid: Count
    envs_per_worker: Count
    zrl_version: Text


class Welcome(_Message, tag="welcome"):
    """ingest -> remote worker: you are worker ``worker_id`` (its ``generation``-th worker, which had played
    ``env_frames`` in this launch) of run ``run``; ``config``: the run's resolved config (TOML), the one source of
    the worker's settings; ``env_spec``: what its envs must give (checked on the worker's host); weights are
    broadcast on ``weights_port`` of the gate's host."""

    run: Text
    worker_id: Count
    generation: Count
    env_frames: Count
    env_frames_start: Count
    weights_port: Count
    env_spec: Text
    config: Text


class Refused(_Message, tag="refused"):
    """ingest -> remote worker: a message was refused, and why; ``final`` 1: do not join again (another run, a
    worker that cannot fit it), 0: join again (a slot may free up, the run may have restarted)."""

    reason: Text
    final: Annotated[int, Meta(ge=0, le=1)]


class Ack(_Message, tag="ack"):
    """ingest -> remote worker, for each of its heartbeats: the session is alive, and ``live_workers`` share
    the learner's appetite now."""

    live_workers: Count


class Leave(_Message, tag="leave"):
    """remote worker -> ingest: I am stopping; free my slot now rather than when my heartbeats stop."""

    reason: Text


class RemoteData(_Message, tag="remote_data", eq=False):
    """remote worker -> ingest: the ``count`` ring slots the worker wrote since its last RemoteData (its own
    frame numbers from ``first_frame``), compressed with zstd (each slot's fields, field by field as the ring
    lays them out), then one ``message`` (an encoded Unroll or Transitions) that may name only frames sent in
    this session. ``seq`` numbers the session's RemoteData from 0."""

    seq: Count
    first_frame: Count
    count: Count
    frames: Annotated[np.ndarray, Array("uint8", "Z")]
    message: Annotated[np.ndarray, Array("uint8", "K")]


class Notice(_Message, tag="notice"):
    """role -> launcher (on the stats channel): something the run's log and live line should say (a remote
    worker joined or left, a key was refused)."""

    role: Text
    pid: int
    text: Text


class IngestStats(_Message, tag="ingest_stats"):
    """ingest -> launcher, about once a second: the remote workers' traffic (cumulative)."""

    pid: int
    time: float
    remote_workers: Annotated[Count, Stat("remote workers joined and heard from in the last seconds")]
    remote_joins: Annotated[Count, Stat("times a remote worker joined (rejoins included)")]
    remote_frames: Annotated[Count, Stat("env observation frames received from remote workers")]
    remote_bytes: Annotated[Count, Stat("bytes received from remote workers, compressed frames and messages")]
    remote_raw_bytes: Annotated[Count, Stat("those frames' bytes after decompression")]
    remote_refused: Annotated[
        Count, Stat("remote messages refused: malformed, forged, out of order, from no session or another run")
    ]
    remote_auth_refused: Annotated[Count, Stat("connections refused by CurveZMQ: a key not (or no longer) authorized")]
    ingest_busy_s: Annotated[float, Stat("seconds the ingest spent checking, decompressing, writing and forwarding")]


# Evaluation during training (eval.interval_frames): the launcher asks, the evaluator (zrl/roles/evaluator.py)
# plays and reports on the stats channel.


class EvalRequest(_Message, tag="eval_request"):
    """launcher -> evaluator: evaluate the learner's latest weights; evaluation ``index`` of the run (the multiple
    of eval.interval_frames passed), asked at ``env_frames`` frames played. With ``checkpoint``: the final
    evaluation (eval.final), of that checkpoint's weights, given to a fresh evaluator when the run's roles have
    stopped."""

    index: Count
    env_frames: Count
    checkpoint: Text = ""


class EvaluatorStats(_Message, tag="evaluator_stats"):
    """evaluator -> launcher, about once a second, also while it plays: its heartbeat and counts (cumulative, in
    this evaluator's life: the launcher's tally carries them over its restarts)."""

    pid: int
    time: float
    evaluations: Annotated[Count, Stat("evaluations the evaluator finished (eval.interval_frames)")]
    episodes: Annotated[Count, Stat("episodes it played for them", column="eval_episodes")]
    skipped: Annotated[
        Count, Stat("evaluations asked for and passed over for a newer one while one played", column="eval_skipped")
    ]


class EvalResult(_Message, tag="eval_result"):
    """evaluator -> launcher: evaluation ``index`` (asked at ``env_frames``) of the weights of ``policy_version``
        (learner step ``learner_step``), taken from the learner (or written to the final checkpoint) at ``weights_time``
    (unix seconds): ``episodes`` under ``protocol``, their mean raw score with
        a 95% bootstrap interval, and what else is known; NaN where a figure does not apply (no reference scores for
        the game; no Q-values for a policy agent). ``best`` 1: best.pt now holds these weights (run.best_by = eval)."""

    pid: int
    index: Count
    env_frames: Count
    weights_time: float
    learner_step: Count
    policy_version: Count
    protocol: Text
    episodes: Count
    mean: float
    ci95_low: float
    ci95_high: float
    median: float
    min: float
    max: float
    human_normalised: float
    mean_max_q: float
    frames_played: Count
    seconds: float
    best: Annotated[int, Meta(ge=0, le=1)]
    final: Annotated[int, Meta(ge=0, le=1)] = 0  # 1: the final evaluation, of the learner's final checkpoint


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
    SaveReplay,
    ReplayIndex,
    RoleError,
    Transitions,
    TransitionBatch,
    PriorityUpdate,
    Join,
    Welcome,
    Refused,
    Ack,
    Leave,
    RemoteData,
    Notice,
    IngestStats,
    EvalRequest,
    EvaluatorStats,
    EvalResult,
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
    | SaveReplay
    | ReplayIndex
    | RoleError
    | Transitions
    | TransitionBatch
    | PriorityUpdate
    | Join
    | Welcome
    | Refused
    | Ack
    | Leave
    | RemoteData
    | Notice
    | IngestStats
    | EvalRequest
    | EvaluatorStats
    | EvalResult
)


# --------------------------------------------------------------------------
# Decoding
# --------------------------------------------------------------------------

_DECODER = msgspec.msgpack.Decoder(Message)


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
        return _DECODER.decode(data)
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
