"""Property-based tests (Hypothesis) of every decoder of untrusted input: each wire message type and the weights
frame (zrl.protocol), the checkpoint loader (zrl.checkpoint), the config loader (a run file, ``--set`` items, a
stored config) and the reference platform's replay JSON (zrl.config.reference).

Whatever the input, a decoder returns a value or raises its own error (ProtocolError, CheckpointError,
ConfigError) whose message names the input's source: never another exception, and never a hang. A call past
CASE_LIMIT_S on one input fails its case (a hang in the making, which Hypothesis then shrinks), and
pytest-timeout stops a test that hangs outright (the timeout scales with the number of cases).

``ZRL_PROPERTY_EXAMPLES`` sets the cases each test generates: the default, 50, is CI's (half the 100 it was until
2026-11-29, for CI's time on slow machines); the nightly run gives 10000 (its record:
perf/results/properties/nightly_10k.txt: 111 passed, 67 CPU-minutes, a peak of 4.6 GB, which is Hypothesis keeping
each running test's drawn values, not a decoder). Hypothesis keeps no example database (``database=None``): the
tests write nothing into the repository, and a failure prints its shrunk example and a ``@reproduce_failure``
blob to replay it.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import pickle
import tempfile
import time
import typing
from dataclasses import dataclass, fields
from pathlib import Path

import msgpack
import msgspec
import numpy as np
import pytest
import tomli_w
import torch
from hypothesis import event, example, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from zrl import checkpoint, config, protocol
from zrl.agents import REGISTRY as AGENTS
from zrl.agents import contracts
from zrl.agents import get as get_agent
from zrl.agents.apex_iqn.config import APEX_HEADS
from zrl.agents.vtrace.messages import Unroll
from zrl.checkpoint import CheckpointError
from zrl.config import ConfigError, reference
from zrl.config import checks as config_checks
from zrl.protocol import Array, Length, ProtocolError

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[1]

EXAMPLES = int(os.environ.get("ZRL_PROPERTY_EXAMPLES", "50"))
# One decoder call on one generated input takes well under a millisecond to a few (a torch.load); one that takes
# seconds is a hang in the making, and fails its case (after the call returns: a call that never returns is
# pytest-timeout's, below).
CASE_LIMIT_S = 10.0
# The unit tier's 60 s (tests/conftest.py) at the default size; the nightly size gets 0.1 s a case, more than 10
# times what the slowest test here takes a case on 2 cores (6 ms).
TIMEOUT_S = max(60, int(EXAMPLES * 0.1))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, database=None, print_blob=True)
bounded = pytest.mark.timeout(TIMEOUT_S)


def attempt(call, error: type[Exception]):
    """``call()``'s result, or the ``error`` it raised (returned, for the caller to check its message); any other
    exception propagates and fails the case, as does a call that takes longer than CASE_LIMIT_S."""
    start = time.monotonic()
    deep = None
    try:
        result = call()
    except error as err:
        result = err
    except RecursionError as err:
        deep = str(err)
    took = time.monotonic() - start
    assert took < CASE_LIMIT_S, f"one call took {took:.1f} s on one input (at most {CASE_LIMIT_S:g} s): a hang"
    if deep is not None:
        # A RecursionError is raised in whichever frame the stack runs out, which differs between runs of one
        # input: Hypothesis would take that for a flaky test and print no example. Raised again from here, the
        # failure has one origin, and Hypothesis shrinks it and prints the input.
        raise RecursionError(f"{deep} (the input is nested deeper than the decoder recurses)")
    return result


# ------------------------------------------------------------------------------------------- raw bytes


@st.composite
def mutated(draw, data: bytes) -> bytes:
    """``data`` after 1 to 4 random edits: a bit flipped, a byte set, cut short, extended, bytes inserted or
    deleted."""
    buf = bytearray(data)
    for how in draw(
        st.lists(st.sampled_from(["flip", "set", "cut", "extend", "insert", "delete"]), min_size=1, max_size=4)
    ):
        at = draw(st.integers(0, max(len(buf) - 1, 0)))
        if how == "flip" and buf:
            buf[at] ^= 1 << draw(st.integers(0, 7))
        elif how == "set" and buf:
            buf[at] = draw(st.integers(0, 255))
        elif how == "cut":
            del buf[at:]
        elif how == "extend":
            buf += draw(st.binary(min_size=1, max_size=16))
        elif how == "insert":
            buf[at:at] = draw(st.binary(min_size=1, max_size=16))
        elif how == "delete":
            del buf[at : at + draw(st.integers(1, 16))]
    return bytes(buf)


_INT_LOW, _INT_HIGH = -(2**63), 2**64 - 1  # msgpack's integers
BUFFER_FORMS = st.sampled_from([bytes, bytearray, memoryview])
# Buffers of any numeric format, shape and layout (strided views included): what a receiver could be handed
# instead of plain bytes.
ARRAY_BUFFERS = st.builds(
    lambda arr, step: arr[::step] if arr.ndim == 1 else arr,
    hnp.arrays(
        hnp.integer_dtypes() | hnp.unsigned_integer_dtypes() | hnp.floating_dtypes() | hnp.boolean_dtypes(),
        hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=6),
    ),
    st.integers(1, 3),
)
NOT_BUFFERS = st.none() | st.integers() | st.text(max_size=8) | st.lists(st.integers(0, 255), max_size=8)

MSGPACK_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(_INT_LOW, _INT_HIGH)
    | st.floats()
    | st.text(max_size=16)
    | st.binary(max_size=16)
)
MSGPACK_VALUES = st.recursive(
    MSGPACK_SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.text(max_size=8) | st.integers(_INT_LOW, _INT_HIGH), inner, max_size=4)
    ),
    max_leaves=12,
)


def pack(value) -> bytes:
    """msgpack as another implementation writes it (not zrl's encoder)."""
    return msgpack.packb(value, use_bin_type=True)


# ------------------------------------------------------------------------------------ message declarations


def message_kinds() -> list[type]:
    """Every message type of the wire, the core's and each registered agent's, as the registry finds them rather
    than listed here, so that a new one is covered as soon as it is declared."""
    return sorted(contracts.message_types(), key=lambda kind: kind.TAG)


KINDS = message_kinds()


@dataclass(frozen=True)
class Field:
    """One field of a message, as its annotation declares it: a scalar (int, float, str) with its bounds, or an
    array; ``length``: the array axis the field's count sets."""

    name: str
    kind: type
    low: float | None = None
    high: float | None = None
    max_length: int | None = None
    length: str | None = None
    array: Array | None = None
    required: bool = True


def declared(kind: type) -> list[Field]:
    """The message type's fields, read from its annotations."""
    hints = typing.get_type_hints(kind, include_extras=True)
    required = {f.name: f.required for f in msgspec.structs.fields(kind)}
    out = []
    for name in kind.FIELDS:
        hint = hints[name]
        base, *extras = typing.get_args(hint) if typing.get_origin(hint) is typing.Annotated else (hint,)
        array = next((e for e in extras if isinstance(e, Array)), None)
        if array is not None:
            out.append(Field(name, np.ndarray, array=array, required=required[name]))
            continue
        if typing.get_origin(base) is dict:  # a Figures map: names to floats
            out.append(Field(name, dict, required=required[name]))
            continue
        assert base in (int, float, str), f"{kind.__name__}.{name}: {base!r}, a field kind this test does not know"
        low = high = max_length = None
        for meta in (e for e in extras if isinstance(e, msgspec.Meta)):
            if meta.ge is not None or meta.gt is not None:
                low = meta.ge if meta.ge is not None else meta.gt + (1 if base is int else 0)
            if meta.le is not None or meta.lt is not None:
                high = meta.le if meta.le is not None else meta.lt - (1 if base is int else 0)
            max_length = meta.max_length if meta.max_length is not None else max_length
        length = next((e.symbol for e in extras if isinstance(e, Length)), None)
        out.append(Field(name, base, low, high, max_length, length, required=required[name]))
    return out


FIELDS = {kind: declared(kind) for kind in KINDS}


def scalar_values(field: Field) -> st.SearchStrategy:
    """Every value the field's declaration allows (text up to its longest, as a boundary)."""
    if field.kind is int:
        low = _INT_LOW if field.low is None else max(_INT_LOW, int(field.low))
        high = _INT_HIGH if field.high is None else min(_INT_HIGH, int(field.high))
        return st.integers(low, high)
    if field.kind is float:
        return st.floats(field.low, field.high)
    if field.kind is dict:
        return st.dictionaries(st.text(max_size=8), st.floats(), max_size=4)
    longest = (
        st.builds(lambda c: c * field.max_length, st.characters(codec="utf-8")) if field.max_length else st.nothing()
    )
    return st.text(max_size=24) | longest


@st.composite
def valid_fields(draw, kind: type) -> dict:
    """Field values of a well-formed message of ``kind``: every axis symbol has one length (0 to 3) that its
    count field and every array that names it agree on; an ``empty_ok`` array may be all-zero ("not sent");
    a field with a default is sometimes left out."""
    sizes: dict[str, int] = {}

    def size(symbol: str) -> int:
        if symbol not in sizes:
            sizes[symbol] = draw(st.integers(0, 3), label=f"length of {symbol}")
        return sizes[symbol]

    values = {}
    for field in FIELDS[kind]:
        if not field.required and draw(st.booleans()):
            continue
        if field.array is not None:
            spec = field.array
            empty = spec.empty_ok and draw(st.booleans())
            shape = tuple(0 if empty else size(axis) for axis in spec.axes)
            values[field.name] = draw(hnp.arrays(spec.dtype, shape), label=field.name)
        elif field.length is not None:
            values[field.name] = size(field.length)
        else:
            values[field.name] = draw(scalar_values(field), label=field.name)
    return values


def valid_messages(kind: type) -> st.SearchStrategy:
    return valid_fields(kind).map(lambda values: kind(**values))


def same_value(x, y) -> bool:
    """Equal, bit for bit where it matters: floats by value and sign (NaN equals NaN), arrays by dtype, shape
    and bytes."""
    if isinstance(x, np.ndarray):
        return isinstance(y, np.ndarray) and (x.dtype, x.shape, x.tobytes()) == (y.dtype, y.shape, y.tobytes())
    if type(x) is not type(y):
        return False
    if isinstance(x, float):
        return (math.isnan(x) and math.isnan(y)) or (x == y and math.copysign(1, x) == math.copysign(1, y))
    if isinstance(x, dict):
        return x.keys() == y.keys() and all(same_value(x[k], y[k]) for k in x)
    return x == y


def assert_same_message(a, b) -> None:
    assert type(a) is type(b), (type(a), type(b))
    for name in a.FIELDS:
        assert same_value(getattr(a, name), getattr(b, name)), (name, getattr(a, name), getattr(b, name))


def check_decoded(result) -> None:
    """A decode's outcome: a ProtocolError that names what it is about (a message type or ``<message...>``), or a
    message of a declared type whose arrays have their declared dtypes, that encodes again to a message that
    decodes equal."""
    if isinstance(result, ProtocolError):
        text = str(result)
        assert text.startswith(("<message", *(f"{kind.__name__}" for kind in KINDS))) and ": " in text, text
        event("refused")
        return
    assert isinstance(result, tuple(KINDS)), type(result)
    for field in FIELDS[type(result)]:
        if field.array is not None:
            assert getattr(result, field.name).dtype == field.array.dtype, field.name
    assert_same_message(result, protocol.decode(result.encode()))
    event(f"decoded as {type(result).__name__}")


def decode(data):
    return attempt(lambda: protocol.decode(data), ProtocolError)


# ------------------------------------------------------------------------------------------ message tests


@bounded
@SETTINGS
@given(data=st.binary(max_size=300) | st.binary(max_size=300).map(lambda tail: b"\x8f" + tail), form=BUFFER_FORMS)
def test_any_bytes_decode_to_a_message_or_a_protocol_error(data, form):
    """Arbitrary bytes (some starting as a msgpack map), as bytes, bytearray or memoryview."""
    check_decoded(decode(form(data)))


@bounded
@SETTINGS
@given(value=ARRAY_BUFFERS | NOT_BUFFERS)
def test_any_buffer_or_object_is_decoded_or_refused(value):
    """A buffer of any format and layout decodes as its bytes would; an object that is no buffer is refused."""
    result = decode(value)
    check_decoded(result)
    if isinstance(value, np.ndarray):
        as_bytes = decode(value.tobytes())
        assert type(result) is type(as_bytes) and str(result) == str(as_bytes), (result, as_bytes)
    else:
        assert isinstance(result, ProtocolError) and "bytes-like" in str(result), result


@st.composite
def tagged_garbage(draw, kind: type) -> bytes:
    """A msgpack map whose first key is the type's tag, then either random bytes (perhaps a deeply nested value)
    or random values under the type's own field names (and others)."""
    if draw(st.booleans()):
        nested = st.integers(0, 20_000).map(lambda depth: pack("x") + b"\x91" * depth + b"\xc0")
        tail = draw(st.binary(max_size=200) | nested)
        return bytes([0x80 | draw(st.integers(1, 15))]) + pack("t") + pack(kind.TAG) + tail
    names = ["v", *kind.FIELDS]
    body = draw(st.dictionaries(st.sampled_from(names) | st.text(max_size=6), MSGPACK_VALUES, max_size=len(names) + 1))
    if draw(st.booleans()):
        body["v"] = protocol.FORMAT_VERSION
    return pack({"t": kind.TAG, **body})


@bounded
@SETTINGS
@pytest.mark.parametrize("kind", KINDS, ids=lambda kind: kind.__name__)
@given(data=st.data())
def test_a_map_with_a_types_tag_and_anything_else_is_decoded_or_refused(kind, data):
    """Per message type: its tag, then random bytes or random values for its fields."""
    raw = data.draw(tagged_garbage(kind), label="message")
    check_decoded(decode(raw))


@bounded
@SETTINGS
@pytest.mark.parametrize("kind", KINDS, ids=lambda kind: kind.__name__)
@given(data=st.data())
def test_a_valid_message_round_trips_equal(kind, data):
    """A message built from any values its declaration allows encodes, decodes as its own type with equal
    fields (floats and arrays bit for bit), and encodes again to the same bytes."""
    message = data.draw(valid_messages(kind), label="message")
    encoded = message.encode()
    back = decode(encoded)
    assert not isinstance(back, ProtocolError), back
    assert_same_message(message, back)
    assert back.encode() == encoded


@bounded
@SETTINGS
@pytest.mark.parametrize("kind", KINDS, ids=lambda kind: kind.__name__)
@given(data=st.data())
def test_a_mutated_message_is_decoded_or_refused(kind, data):
    """A valid message's bytes after random flips, cuts, extensions, insertions and deletions decode to a
    message or raise ProtocolError; cut short or with bytes after it, it is always refused."""
    encoded = data.draw(valid_messages(kind), label="message").encode()
    damaged = data.draw(mutated(encoded), label="damaged")
    check_decoded(decode(damaged))
    cut = data.draw(st.integers(0, len(encoded) - 1), label="cut at")
    assert isinstance(decode(encoded[:cut]), ProtocolError)
    extra = data.draw(st.binary(min_size=1, max_size=16), label="trailing")
    assert isinstance(decode(encoded + extra), ProtocolError)


# Values of a type the field cannot take (msgspec takes ints for floats, so those are not wrong for a float).
WRONG_TYPE = {
    int: st.text(max_size=8)
    | st.binary(max_size=8)
    | st.booleans()
    | st.none()
    | st.floats()
    | st.lists(st.integers(0, 9), max_size=3),
    float: st.text(max_size=8) | st.binary(max_size=8) | st.booleans() | st.none() | st.lists(st.floats(), max_size=3),
    str: st.integers(_INT_LOW, _INT_HIGH) | st.floats() | st.binary(max_size=8) | st.booleans() | st.none(),
    dict: st.integers(_INT_LOW, _INT_HIGH)
    | st.text(max_size=8)
    | st.lists(st.floats(), max_size=3)
    | st.dictionaries(st.text(max_size=4), st.text(max_size=4), min_size=1, max_size=2)
    | st.dictionaries(st.integers(0, 9), st.floats(), min_size=1, max_size=2),
    np.ndarray: st.integers(_INT_LOW, _INT_HIGH)
    | st.floats()
    | st.text(max_size=8)
    | st.binary(max_size=8)
    | st.none()
    | st.lists(st.integers(0, 9), max_size=3),
}
WRONG_VERSION = st.integers(_INT_LOW, _INT_HIGH).filter(lambda v: v != protocol.FORMAT_VERSION) | WRONG_TYPE[int]
ARRAY_KEYS = ("dtype", "shape", "data")


def out_of_bounds(field: Field) -> st.SearchStrategy | None:
    """Values of the field's type outside its declared bounds that msgpack can still carry, or None if there are
    none."""
    if field.kind is int:
        below = st.integers(_INT_LOW, int(field.low) - 1) if field.low is not None and field.low > _INT_LOW else None
        above = (
            st.integers(int(field.high) + 1, _INT_HIGH) if field.high is not None and field.high < _INT_HIGH else None
        )
        options = [s for s in (below, above) if s is not None]
        return st.one_of(options) if options else None
    if field.kind is str and field.max_length is not None:
        return st.builds(
            lambda c, n: c * n, st.characters(codec="utf-8"), st.integers(field.max_length + 1, field.max_length + 3)
        )
    return None


@st.composite
def malformed(draw, kind: type) -> tuple[str, str | None, bytes]:
    """A valid message's msgpack map, with its tag, and one thing wrong: a field of the wrong type, a value out
    of its bounds, an unknown key, required keys missing, or an array map that is wrong (its dtype, its data's
    length, its rank, a negative dimension, a key too many or too few). Returns (what is wrong, the field it is
    about or None, the bytes)."""
    wire = msgpack.unpackb(draw(valid_messages(kind), label="message").encode(), raw=False)
    fields_ = FIELDS[kind]
    bounded_fields = [f for f in fields_ if out_of_bounds(f) is not None]
    arrays = [f for f in fields_ if f.array is not None]
    what = draw(
        st.sampled_from(
            ["wrong type", "wrong version", "unknown key", "missing keys"]
            + ["out of bounds"] * bool(bounded_fields)
            + ["bad array"] * bool(arrays)
        ),
        label="what is wrong",
    )
    about = None
    if what == "wrong type":
        field = draw(st.sampled_from(fields_))
        wire[field.name], about = draw(WRONG_TYPE[field.kind]), field.name
    elif what == "wrong version":
        wire["v"], about = draw(WRONG_VERSION), "v"
    elif what == "out of bounds":
        field = draw(st.sampled_from(bounded_fields))
        wire[field.name], about = draw(out_of_bounds(field)), field.name
    elif what == "unknown key":
        known = {"t", "v", *kind.FIELDS}
        key = draw(
            st.text(max_size=10).filter(lambda k: k not in known)
            | st.integers(_INT_LOW, _INT_HIGH)
            | st.binary(max_size=4)
        )
        wire[key] = draw(MSGPACK_VALUES)
    elif what == "missing keys":
        required = ["t", "v", *(f.name for f in fields_ if f.required)]
        for key in draw(st.lists(st.sampled_from(required), min_size=1, unique=True)):
            del wire[key]
    else:
        field = draw(st.sampled_from(arrays))
        spec, about = field.array, field.name
        arr = dict(wire[field.name])
        how = draw(st.sampled_from(["dtype", "data", "rank", "negative", "extra", "missing"]), label="array")
        if how == "dtype":
            arr["dtype"] = draw(st.text(max_size=20).filter(lambda s: s != spec.wire))
        elif how == "data":
            need = math.prod(arr["shape"]) * spec.itemsize
            arr["data"] = draw(st.binary(max_size=need + 16).filter(lambda b: len(b) != need))
        elif how == "rank":
            ndim = draw(st.integers(0, 6).filter(lambda n: n != len(spec.axes)))
            arr["shape"] = draw(st.lists(st.integers(0, 3), min_size=ndim, max_size=ndim))
            arr["data"] = bytes(math.prod(arr["shape"]) * spec.itemsize)
        elif how == "negative":
            shape = list(arr["shape"])
            shape[draw(st.integers(0, len(shape) - 1))] = draw(st.integers(_INT_LOW, -1))
            arr["shape"] = shape
        elif how == "extra":
            arr[draw(st.text(max_size=8).filter(lambda k: k not in ARRAY_KEYS))] = draw(MSGPACK_VALUES)
        else:
            del arr[draw(st.sampled_from(ARRAY_KEYS))]
        wire[field.name] = arr
    return what, about, pack(wire)


@bounded
@SETTINGS
@pytest.mark.parametrize("kind", KINDS, ids=lambda kind: kind.__name__)
@given(data=st.data())
def test_a_map_with_the_right_tag_but_a_wrong_field_is_refused_naming_it(kind, data):
    """The type's own map with one thing wrong is always a ProtocolError that names the type, and the field
    where one field is wrong."""
    what, about, raw = data.draw(malformed(kind), label="malformed")
    result = decode(raw)
    assert isinstance(result, ProtocolError), f"{what}: decoded as {result!r}"
    text = str(result)
    keys = msgpack.unpackb(raw, raw=False, strict_map_key=False)
    if "t" in keys and all(isinstance(key, str) for key in keys):
        assert text.startswith(kind.__name__), text
    elif "t" in keys:  # a key that is not a string: msgspec reads no tag from such a map, for want of a name
        assert text.startswith(("<message>: map key", kind.__name__)), text
    if about is not None:
        assert f"{kind.__name__}.{about}" in text, text
    event(what)


@st.composite
def weights_frames(draw) -> tuple[int, int, np.ndarray]:
    """What encode_weights takes: a version and a learner step (int64), and up to 64 float32 values."""
    return (
        draw(st.integers(-(2**63), 2**63 - 1)),
        draw(st.integers(-(2**63), 2**63 - 1)),
        draw(hnp.arrays(np.dtype("<f4"), st.integers(0, 64))),
    )


def decode_weights(data):
    """A weights frame decoded: a version, a step and a flat float32 array whose size the frame's length
    agrees with, or a ProtocolError about ``weights``."""
    result = attempt(lambda: protocol.decode_weights(data), ProtocolError)
    if isinstance(result, ProtocolError):
        assert str(result).startswith("weights") and ": " in str(result), str(result)
        event("refused")
    else:
        version, step, flat = result
        assert type(version) is int and type(step) is int
        assert flat.dtype == np.dtype("<f4") and flat.ndim == 1
        assert memoryview(data).nbytes == protocol.WEIGHTS_HEADER_BYTES + 4 * flat.size
        event("decoded")
    return result


@bounded
@SETTINGS
@given(frame=weights_frames(), data=st.data())
def test_a_weights_frame_round_trips_and_a_damaged_one_is_decoded_or_refused(frame, data):
    """encode_weights then decode_weights gives back the version, the step and the floats bit for bit; the
    frame's bytes after random edits decode to a frame whose size its header states, or raise ProtocolError."""
    version, step, flat = frame
    encoded = protocol.encode_weights(version, step, flat)
    back = decode_weights(encoded)
    assert not isinstance(back, ProtocolError), back
    assert back[:2] == (version, step) and back[2].tobytes() == flat.tobytes()
    decode_weights(data.draw(mutated(encoded), label="damaged"))


@bounded
@SETTINGS
@given(
    data=st.binary(max_size=200) | st.binary(max_size=200).map(lambda tail: protocol.WEIGHTS_MAGIC + tail),
    form=BUFFER_FORMS,
)
def test_any_bytes_as_a_weights_frame_are_decoded_or_refused(data, form):
    """Arbitrary bytes (some after the frame's magic), as bytes, bytearray or memoryview."""
    decode_weights(form(data))


@bounded
@SETTINGS
@given(value=ARRAY_BUFFERS | NOT_BUFFERS)
def test_any_buffer_or_object_as_a_weights_frame_is_decoded_or_refused(value):
    """A buffer of any format and layout, and objects that are no buffers (refused as such)."""
    if isinstance(value, np.ndarray):
        decode_weights(value)
    else:
        result = attempt(lambda: protocol.decode_weights(value), ProtocolError)
        assert isinstance(result, ProtocolError) and "bytes-like" in str(result), result


# ------------------------------------------------------------------------------------------- checkpoints


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    """One folder for the module's files (Hypothesis runs many cases per test; a function-scoped tmp_path would
    be shared by them anyway)."""
    return tmp_path_factory.mktemp("properties")


def saved_checkpoints() -> dict[str, bytes]:
    """Real checkpoint files to damage: as checkpoint.save writes them (torch's zip format), torch's legacy
    format, and a plain pickle of the same state."""
    state = {
        "model": {"w": torch.arange(6, dtype=torch.float32).reshape(2, 3), "b": torch.zeros(3)},
        "learner_step": 7,
        "config": {"env": {"id": "CartPole-v1"}},
    }
    legacy = io.BytesIO()
    torch.save({"format": checkpoint.FORMAT, **state}, legacy, _use_new_zipfile_serialization=False)
    with tempfile.TemporaryDirectory() as where:
        written = checkpoint.save(Path(where) / "seed.pt", state).read_bytes()
    return {
        "zip": written,
        "legacy": legacy.getvalue(),
        "pickle": pickle.dumps({"format": checkpoint.FORMAT, **state}, protocol=2),
    }


SAVED = saved_checkpoints()
CHECKPOINT_PREFIXES = [b"", b"PK\x03\x04", b"\x80\x02", b"\x80\x04\x95", SAVED["legacy"][:12]]
# Arbitrary bytes (some starting as a zip, a pickle or torch's legacy format), the real checkpoints, and the
# real checkpoints after random edits.
CHECKPOINT_FILES = (
    st.builds(bytes.__add__, st.sampled_from(CHECKPOINT_PREFIXES), st.binary(max_size=400))
    | st.sampled_from(sorted(SAVED.values()))
    | st.sampled_from(sorted(SAVED)).flatmap(lambda name: mutated(SAVED[name]))
)
NAME = checkpoint.PATTERN.format(step=1)
# torch warns of the pickle protocol a file claims when it is not 2: arbitrary bytes claim any.
IGNORE_PROTOCOL_WARNINGS = pytest.mark.filterwarnings("ignore:Detected pickle protocol:UserWarning")


def hash_line(data: bytes) -> str:
    """A checkpoint's line in its .sha256, as checkpoint.save writes it."""
    return f"{hashlib.sha256(data).hexdigest()}  {NAME}\n"


def load_checkpoint(folder: Path, data: bytes, hashes: bytes | None) -> CheckpointError | dict:
    """Write ``data`` as a checkpoint (and ``hashes`` as its .sha256) and load it: a state of this zrl's format,
    or a one-line CheckpointError that starts with the file's path."""
    with tempfile.TemporaryDirectory(dir=folder) as where:
        path = Path(where) / NAME
        path.write_bytes(data)
        if hashes is not None:
            checkpoint.hash_path(path).write_bytes(hashes)
        result = attempt(lambda: checkpoint.load(path), CheckpointError)
    if isinstance(result, CheckpointError):
        text = str(result)
        assert text.startswith(f"{path}: ") and "\n" not in text, text
        event(text[len(str(path)) + 2 :].split(" (")[0][:40])
    else:
        assert isinstance(result, dict) and result["format"] == checkpoint.FORMAT, result
        event("loaded")
    return result


@bounded
@IGNORE_PROTOCOL_WARNINGS
@SETTINGS
@given(
    data=CHECKPOINT_FILES, how=st.sampled_from(["none", "another file's", "garbage"]), garbage=st.binary(max_size=200)
)
def test_a_checkpoint_whose_hash_is_not_recorded_is_always_refused(folder, data, how, garbage):
    """Any file (arbitrary bytes, a real checkpoint, a damaged one) without a .sha256 beside it, with another
    file's hash (a file damaged after it was written), or with garbage there: a CheckpointError that says so
    (an empty file's says that), and torch.load never reads it."""
    hashes = {"none": None, "another file's": hash_line(data + b"\n").encode(), "garbage": garbage}[how]
    result = load_checkpoint(folder, data, hashes)
    assert isinstance(result, CheckpointError), "a file whose hash is not recorded was loaded"
    reason = "the file is empty" if not data else "no SHA-256 recorded" if how == "none" else "SHA-256 mismatch"
    assert reason in str(result), str(result)


@bounded
@IGNORE_PROTOCOL_WARNINGS
@SETTINGS
@example(data=b"\x81" + SAVED["legacy"][1:], replacing=False)
@given(data=CHECKPOINT_FILES, replacing=st.booleans())
def test_a_checkpoint_whose_hash_matches_is_loaded_or_refused(folder, data, replacing):
    """Any file (arbitrary bytes, a real checkpoint, a damaged one) with its own hash recorded beside it (alone,
    or with another file's as while a name is being replaced): what a tampered file, or one damaged before it
    was hashed, looks like; torch.load (weights only) reads it, and gives a state or a CheckpointError."""
    load_checkpoint(folder, data, (hash_line(data) + hash_line(b"old") * replacing).encode())


# ----------------------------------------------------------------------------------------------- configs

for _name in AGENTS:  # each agent's config rules import the agent: once here, not inside a timed case
    get_agent(_name)

TOML_SCALARS = (
    st.booleans() | st.integers() | st.floats() | st.text(max_size=12) | st.dates() | st.times() | st.datetimes()
)
TOML_VALUES = st.recursive(
    TOML_SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)
# Every name a string key of the schema takes (and near misses), so that the generator gets past the choices.
CHOICES = sorted(
    {
        *config.REPLAY_TYPES,
        *config.DISTANCES,
        *config.OPTIMIZERS,
        *config.PRECISIONS,
        *config.MODEL_KINDS,
        *config.TRANSPORT_KINDS,
        *config.WORKER_POLICIES,
        *config.LOOPBACK_HOSTS,
        *APEX_HEADS,
        *config_checks.RESTART_POLICIES,
        *AGENTS,
        *reference.REFERENCE_TYPES,
        *reference.REFERENCE_SAMPLERS,
        "elite_insertion",
        "strategy4",
        "cpu",
        "cuda",
        "cuda:0",
        "cuda:x",
        "0.0.0.0",
        "ALE/Pong-v5",
        "CartPole-v1",
        "",
    }
)


def one_in(draw, n: int, label: str) -> bool:
    """True about one time in ``n``: a middle value of the range, as Hypothesis draws the ends of a range (and
    0) more often than the rest."""
    return draw(st.integers(0, n - 1), label=label) == n // 2


@st.composite
def key_values(draw, cls: type, name: str):
    """A value for one key of a section: of its declared type mostly, often at or next to its bounds; a value of
    any TOML type one time in 16."""
    if one_in(draw, 16, "any TOML value"):
        return draw(TOML_VALUES)
    hint = typing.get_type_hints(cls, include_extras=True)[name]
    base, *extras = typing.get_args(hint) if typing.get_origin(hint) is typing.Annotated else (hint,)
    meta = next((e for e in extras if isinstance(e, msgspec.Meta)), None)
    edges = [b for b in (meta.ge, meta.gt, meta.le, meta.lt) if b is not None] if meta else []
    near = sorted({e + d for e in [0, 1, *edges] for d in (-1, 0, 1)})
    if base is bool:
        return draw(st.booleans())
    if base is int:
        return draw(st.sampled_from([int(v) for v in near]) | st.integers(-(2**63), 2**63 - 1))
    if base is float:
        return draw(st.sampled_from(near) | st.floats() | st.floats(0, 2))
    if base is str:
        return draw(st.sampled_from(CHOICES) | st.text(max_size=12))
    return draw(st.lists(st.integers(-1, 2**63 - 1) | st.sampled_from([0, 1, 64]), max_size=4))  # tuple[int, ...]


SECTION_FIELDS = {name: [f.name for f in fields(cls)] for name, cls in config.sections().items()}
REPLAY_FIELDS = [f.name for f in fields(config.ReplayConfig)]
STRAY_KEYS = st.sampled_from([key.split(".")[1] for key in config.MOVED_KEYS]) | st.text(min_size=1, max_size=8)


@st.composite
def tables(draw, cls: type, names: list[str]) -> dict:
    """One table of up to 3 of the schema's keys ``names`` with values for them; one key in 40 is a stray (a
    key that moved, or any name) with any TOML value."""
    table = {}
    for _ in range(draw(st.integers(0, 3), label="keys")):
        if one_in(draw, 40, "stray key"):
            table[draw(STRAY_KEYS)] = draw(TOML_VALUES)
        else:
            name = draw(st.sampled_from(names))
            table[name] = draw(key_values(cls, name), label=name)
    return table


@st.composite
def replay_tables(draw) -> dict:
    """One [[replay]] table: a type (one of zrl's mostly; one time in 8 any value, one in 8 none) and keys of
    the replay schema, those its type takes but one time in 8."""
    typed = not one_in(draw, 8, "no type")
    kind = draw(TOML_VALUES) if one_in(draw, 8, "type of any value") else draw(st.sampled_from(config.REPLAY_TYPES))
    names = REPLAY_FIELDS
    if isinstance(kind, str) and kind in config.REPLAY_KEYS and not one_in(draw, 8, "keys of other types"):
        names = list(config.REPLAY_KEYS[kind])
    table = draw(tables(config.ReplayConfig, names))
    if typed:
        table["type"] = kind
    return table


@st.composite
def documents(draw) -> dict:
    """A run file's tables: up to 3 sections of the schema with their keys, [[replay]] tables, the top-level
    algo key, and one time in 20 a stray table or a section that is not a table."""
    doc = {}
    for name in draw(st.lists(st.sampled_from(list(config.sections())), max_size=3, unique=True)):
        doc[name] = draw(tables(config.sections()[name], SECTION_FIELDS[name]), label=name)
    if draw(st.booleans()):
        if one_in(draw, 8, "replay of any value"):
            doc["replay"] = draw(TOML_VALUES)
        else:
            doc["replay"] = draw(st.lists(replay_tables(), max_size=3))
    if draw(st.booleans()):
        doc["algo"] = draw(TOML_VALUES) if one_in(draw, 8, "algo of any value") else draw(st.sampled_from(list(AGENTS)))
    if one_in(draw, 20, "stray table"):
        doc[draw(st.sampled_from([*config.sections(), "replay"]) | st.text(min_size=1, max_size=8))] = draw(TOML_VALUES)
    return doc


def check_config(result, source: str) -> config.Config | None:
    """A Config, or a ConfigError whose message starts with the source it names (the file, the --set item,
    the option)."""
    if isinstance(result, ConfigError):
        assert str(result).startswith(f"{source}: "), (source, str(result))
        event("ConfigError")
        return None
    assert isinstance(result, config.Config), result
    event("Config")
    return result


def load_file(folder: Path, data: bytes) -> config.Config | None:
    """Write ``data`` as a run file and load it: a Config that dumps to TOML which loads to an equal Config, or a
    ConfigError naming the file."""
    with tempfile.TemporaryDirectory(dir=folder) as where:
        path = Path(where) / "run.toml"
        path.write_bytes(data)
        cfg = check_config(attempt(lambda: config.load(path), ConfigError), str(path))
        if cfg is not None:
            path.write_text(config.dumps(cfg))
            assert config.load(path) == cfg
    return cfg


@bounded
@SETTINGS
@given(doc=documents())
def test_any_toml_run_file_gives_a_config_or_an_error_naming_the_file(folder, doc):
    """Run files of the schema's sections, keys and [[replay]] tables with values of every TOML type (most of
    the key's own type, around its bounds)."""
    load_file(folder, tomli_w.dumps(doc).encode())


SHIPPED = [(REPO / "config" / name).read_bytes() for name in ("smoke.toml", "apex_iqn_cartpole.toml", "defaults.toml")]


@bounded
@SETTINGS
@given(data=st.text().map(str.encode) | st.binary() | st.sampled_from(SHIPPED).flatmap(mutated))
def test_any_text_as_a_run_file_gives_a_config_or_an_error_naming_the_file(folder, data):
    """Text that is mostly not TOML, bytes that are not UTF-8, and the shipped run files after random edits."""
    load_file(folder, data)


def nested(depth: int, inline_tables: bool) -> str:
    """A TOML value nested ``depth`` deep: arrays, or inline tables."""
    return "{a = " * depth + "1" + "}" * depth if inline_tables else "[" * depth + "]" * depth


@bounded
@SETTINGS
@example(depth=10_000, inline_tables=False)
@given(depth=st.integers(0, 100_000), inline_tables=st.booleans())
def test_a_run_file_nested_deeply_gives_a_config_or_an_error_naming_the_file(folder, depth, inline_tables):
    """A run file whose one value is an array (or an inline table) nested to any depth."""
    load_file(folder, f"v = {nested(depth, inline_tables)}\n".encode())


def inline(value) -> str:
    """A value as TOML writes it after ``key = `` (a table has no such form: written as text then)."""
    text = tomli_w.dumps({"v": value})
    return text[4:].strip() if text.startswith("v = ") else str(value)


SET_KEYS = [(section, name) for section, names in SECTION_FIELDS.items() for name in names]


@st.composite
def set_items(draw) -> str:
    """One ``--set`` item: mostly section.key=value of the schema with a value for that key as TOML writes it;
    replay= with reference JSON or algo= one time in 8 each; any text as the key, or at all, one time in 16;
    any text as the value one time in 8."""
    if one_in(draw, 16, "any item"):
        return draw(st.text(max_size=30))
    if one_in(draw, 16, "any key"):
        dotted, value = draw(st.text(max_size=12)), inline(draw(TOML_VALUES))
    elif one_in(draw, 8, "replay"):
        dotted = "replay"
        value = json.dumps(draw(reference_lists()))
    elif one_in(draw, 8, "algo"):
        dotted, value = "algo", inline(draw(st.sampled_from(list(AGENTS)) | TOML_VALUES))
    else:
        section, name = draw(st.sampled_from(SET_KEYS))
        dotted, value = f"{section}.{name}", inline(draw(key_values(config.sections()[section], name)))
    if one_in(draw, 8, "any value"):
        value = draw(st.text(max_size=16))
    return draw(st.sampled_from([f"{dotted}={value}", f" {dotted} = {value} "]))


@bounded
@SETTINGS
@given(items=st.lists(set_items(), min_size=1, max_size=3))
def test_any_set_item_gives_a_config_or_an_error_naming_the_item(items):
    """``--set`` items of the schema's keys with TOML values or any text, and any text at all: parse_set splits
    each or refuses it naming it, and load gives a Config or a ConfigError naming one of the items."""
    for item in items:
        parsed = attempt(lambda item=item: config.parse_set(item), ConfigError)
        if isinstance(parsed, ConfigError):
            assert str(parsed).startswith(f"--set {item}: "), str(parsed)
        else:
            assert isinstance(parsed, tuple) and len(parsed) == 3 and isinstance(parsed[0], str), parsed
    result = attempt(lambda: config.load(None, items), ConfigError)
    if isinstance(result, ConfigError):
        assert any(str(result).startswith(f"--set {item}") for item in items), (items, str(result))
        event("ConfigError")
    else:
        assert isinstance(result, config.Config)
        event("Config")


@bounded
@SETTINGS
@example(depth=10_000, inline_tables=False)
@given(depth=st.integers(0, 100_000), inline_tables=st.booleans())
def test_a_set_item_nested_deeply_is_split_or_refused_naming_it(depth, inline_tables):
    """A ``--set`` value that is an array (or an inline table) nested to any depth."""
    item = f"model.mlp_hidden={nested(depth, inline_tables)}"
    parsed = attempt(lambda: config.parse_set(item), ConfigError)
    assert isinstance(parsed, tuple) or str(parsed).startswith(f"--set {item}: "), str(parsed)


@bounded
@SETTINGS
@given(doc=documents())
def test_any_stored_config_gives_a_config_or_an_error_naming_its_source(doc):
    """from_dict, which rebuilds the config a checkpoint stores (or a remote worker is sent as TOML), on the same
    documents as a run file: a Config or a ConfigError naming the source it is given."""
    source = "checkpoints/ckpt_000000001.pt"
    check_config(attempt(lambda: config.from_dict(doc, source), ConfigError), source)


# What torch.load(weights_only=True) can give for a checkpoint's state["config"]: any tree of these.
STORED_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8) | st.binary(max_size=4),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.tuples(inner, inner)
        | st.dictionaries(st.text(max_size=8) | st.integers() | st.none(), inner, max_size=3)
    ),
    max_leaves=8,
)


@bounded
@SETTINGS
@example(raw=None)
@given(raw=STORED_VALUES | documents())
def test_any_value_stored_as_a_checkpoints_config_gives_a_config_or_an_error_naming_its_source(raw):
    """from_dict on what a checkpoint that verifies (its hash matches) may hold as its config: not only a table
    of strings (as zrl writes it) but any value the weights-only unpickler returns: a list, None, a table whose
    keys are not strings."""
    source = "checkpoints/ckpt_000000001.pt"
    check_config(attempt(lambda: config.from_dict(raw, source), ConfigError), source)


# ---------------------------------------------------------------------------------- reference replay JSON

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64) | st.floats() | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=16,
)
# The keys of a reference entry besides its type and sample_strategy (drawn apart): its own and zrl's.
REFERENCE_KEYS = sorted({"insert_strategy", "elite_sampling_strategy", *REPLAY_FIELDS} - {"type", "sample_strategy"})
REFERENCE_VALUES = (
    st.sampled_from(CHOICES + ["STANDARD", "Custom", "strategy9", "strategy", "Elite_Sampling"])
    | st.integers(-2, 1001)
    | st.floats(-1, 8)
    | st.integers(-(10**300), 10**300)  # JSON bounds no number; these fit a float (numbers beyond: below)
    | st.integers(-(10**300), 10**300).map(str)
    | st.floats(allow_nan=False, allow_infinity=False).map(repr)
    | JSON_VALUES
)


# Values each key takes (a right value half the time, so that the translation goes past the first key).
REFERENCE_RIGHT = {
    "capacity": st.integers(1, 1000),
    "sample_ratio": st.sampled_from([1, 1.0, 0.5, 0.25, 0.125]),
    "fill_fraction": st.floats(0.01, 1),
    "dist_function": st.sampled_from([*config.DISTANCES, "LN_NORM"]),
    "insert_strategy": st.just("elite_insertion"),
    "elite_sampling_strategy": st.sampled_from(["strategy1", "strategy2", "Strategy3", "4", 4]),
    "strategy": st.integers(1, 4),
    "lambda_batch_multiplier": st.integers(1, 8) | st.floats(1, 8) | st.integers(1, 8).map(str),
    "alfa_annealing_factor": st.integers(1, 4) | st.floats(0.1, 4),
    "p": st.integers(1, 4) | st.floats(1, 4),
    "feature_steps": st.integers(0, 20),
    "elite_insertion": st.booleans(),
    "elite_batch_size": st.integers(1, 50),
}


@st.composite
def reference_lists(draw, values: st.SearchStrategy = REFERENCE_VALUES) -> list:
    """The reference's --replay_parameters: a list of 1 to 3 objects of its keys (and zrl's; a stray name one
    time in 16): one of its types (none, or any value, one time in 16 each), a sample_strategy for a custom
    replay (none one time in 8; one where none belongs one time in 16), and values right and wrong."""
    out = []
    for _ in range(draw(st.integers(1, 3))):
        entry = {}
        if not one_in(draw, 16, "no type"):
            any_type = one_in(draw, 16, "type of any value")
            entry["type"] = draw(values if any_type else st.sampled_from(list(reference.REFERENCE_TYPES)))
        if entry.get("type") == "custom" and not one_in(draw, 8, "no sample_strategy"):
            entry["sample_strategy"] = draw(st.sampled_from(list(reference.REFERENCE_SAMPLERS)))
        elif one_in(draw, 16, "a sample_strategy of any value"):
            entry["sample_strategy"] = draw(values)
        for _ in range(draw(st.integers(0, 4), label="keys")):
            key = draw(st.text(max_size=8)) if one_in(draw, 16, "stray key") else draw(st.sampled_from(REFERENCE_KEYS))
            right = REFERENCE_RIGHT.get(key)
            entry[key] = draw(right if right is not None and one_in(draw, 2, "a right value") else values, label=key)
        out.append(entry)
    return out


def translate(text: str) -> None:
    """The reference JSON translated into [[replay]] tables (dicts, each with one of zrl's replay types), or a
    ConfigError naming its source; and through config.load, a Config or a ConfigError naming the option."""
    source = "option --replay"
    tables = attempt(lambda: config.replays_from_json(text, source), ConfigError)
    if isinstance(tables, ConfigError):
        assert str(tables).startswith(f"{source}: "), str(tables)
    else:
        assert isinstance(tables, list) and tables, tables
        assert all(isinstance(t, dict) and t["type"] in config.REPLAY_TYPES for t in tables), tables
    check_config(attempt(lambda: config.load(None, [], {"replay": text}), ConfigError), source)


@bounded
@SETTINGS
@given(value=JSON_VALUES)
def test_any_json_value_as_reference_replays_is_translated_or_refused(value):
    """Any JSON value (NaN and Infinity included, as json.dumps writes them)."""
    translate(json.dumps(value))


@bounded
@SETTINGS
@given(text=st.text())
def test_any_text_as_reference_replays_is_translated_or_refused(text):
    translate(text)


@bounded
@SETTINGS
@example(depth=10_000, objects=False)
@given(depth=st.integers(0, 100_000), objects=st.booleans())
def test_reference_replays_nested_deeply_are_translated_or_refused(depth, objects):
    """JSON lists (or objects) nested to any depth."""
    translate('{"a": ' * depth + "1" + "}" * depth if objects else "[" * depth + "]" * depth)


@bounded
@SETTINGS
@given(entries=reference_lists())
def test_reference_replays_with_wrong_values_are_translated_or_refused(entries):
    """Lists shaped like the reference's replay parameters: its types and strategies (and near misses), numbers
    right and wrong, numeric strings, values of every JSON type."""
    translate(json.dumps(entries))


BEYOND_A_FLOAT = st.integers(10**309, 10**400) | st.integers(-(10**400), -(10**309))


@bounded
@SETTINGS
@example(entries=[{"type": "custom", "sample_strategy": "elite_sampling", "lambda_batch_multiplier": 10**309}])
@given(entries=reference_lists(BEYOND_A_FLOAT | BEYOND_A_FLOAT.map(str) | REFERENCE_VALUES))
def test_reference_replays_with_numbers_beyond_a_float_are_translated_or_refused(entries):
    """The same lists with integers (and numeric strings) too large for a float, which JSON allows."""
    translate(json.dumps(entries))


# Floats a worker may send: ordinary ones, ones just inside and beyond the broker's ranges, and the non-finite
EXPERIENCE_FLOATS = st.floats(width=32, allow_nan=True, allow_infinity=True) | st.sampled_from(
    [0.0, 1.0, 1e4, 1e4 + 1, 1e6, 1.5e6, 1e9, 2e9, 1e30, -1e30, np.inf, np.nan]
)


@bounded
@SETTINGS
@given(data=st.data())
def test_the_brokers_range_checks_take_exactly_the_experience_within_range(data):
    """Any rewards, logits, values and discounts: the V-trace broker's misfit never raises, and refuses a unit
    exactly when a number is not finite, beyond its broker.max_abs_* key, or a discount outside [0, 1]."""
    from zrl.agents.vtrace.broker import misfit
    from zrl.config import BrokerConfig

    m, t, a = 2, 3, 2
    cfg = config.load(None, ["workers.count=1", "workers.envs_per_worker=2", "learner.unroll_length=3"])
    arrays = {
        name: data.draw(hnp.arrays(np.float32, shape, elements=EXPERIENCE_FLOATS), label=name)
        for name, shape in (
            ("rewards", (m, t)),
            ("behaviour_logits", (m, t, a)),
            ("behaviour_values", (m, t)),
            ("discounts", (m, t)),
        )
    }
    msg = Unroll(
        worker_id=0, seq=0, policy_version=0, first_frame=0, num_envs=m, length=t, env_frames=0,
        actions=np.zeros((m, t), np.int32), features=np.zeros((0, 0, 0), np.float32), **arrays,
    )  # fmt: skip
    limits = {"rewards": BrokerConfig.max_abs_reward, "behaviour_logits": BrokerConfig.max_abs_logit}
    limits["behaviour_values"] = BrokerConfig.max_abs_value
    within = all(np.isfinite(arrays[k]).all() and np.abs(arrays[k]).max() <= v for k, v in limits.items())
    d = arrays["discounts"]
    within = within and bool(np.isfinite(d).all() and d.min() >= 0 and d.max() <= 1)
    event("taken" if within else "refused")
    assert (misfit(msg, cfg, a) is None) == within
