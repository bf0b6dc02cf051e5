"""The weights frame: the learner's flat parameters as one binary frame, not msgpack: a 32-byte little-endian
header (magic ``b"ZRLW"``, format version u16, reserved u16 (= 0), version i64,
learner_step i64, count u64) followed by ``count`` float32 values.
"""

import numbers
import struct

import numpy as np

from zrl.protocol.framework import FORMAT_VERSION, ProtocolError

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
    return b"".join((header, flat.data.cast("B") if flat.size else b""))


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
