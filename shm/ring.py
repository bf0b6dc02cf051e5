"""Single-writer ring buffer of fixed-shape numpy slots in one shared segment.

Layout (every section starts on a 64-byte boundary)::

    header  64 B   int64[8]: magic, version, capacity, head, spec checksum,
                   total nbytes, number of fields, reserved
    stamps         int64[capacity]; stamps[i] = frame number held by slot i, -1 = invalid
    field k        dtype_k[capacity, *shape_k], one section per field in spec order

Frame ``n`` lives in slot ``n % capacity``.  ``head`` is the number of frames
ever written (= the next frame number).

Shapes: ``shape_k`` and ``dtype_k`` are field k's per-slot shape and dtype (its
``RingSpec.fields`` entry); ``N`` is the number of frames one call reads or
restores.  Frame numbers are integers, taken as int64.

Torn-read detection (a seqlock per slot): the writer stores ``stamp = -1``,
then the data, then ``stamp = n``, then ``head = n + 1``.  A reader loads the
stamps, copies the data, and loads the stamps again; a row is valid only if
both loads saw ``n``.  If the writer touched the slot during the copy, its
``-1`` store precedes its data stores, so the second load sees ``-1`` or a
newer frame number.  This relies on stores becoming visible in program order
and loads not being reordered with each other, which x86-64 (TSO) guarantees;
CPython performs each step as a separate opaque C call, so the compiler cannot
reorder them either.  Weakly ordered CPUs (ARM) would need explicit fences.
"""

from __future__ import annotations

import functools
import hashlib
import math
import mmap
from collections.abc import Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import NoReturn

import numpy as np
import numpy.typing as npt

from .segment import Segment

__all__ = ["LAYOUT_VERSION", "MAGIC", "Ring", "RingSpec"]

MAGIC = 0x5A524C52494E4721  # b"!GNIRLRZ" little-endian: "ZRLRING!"
LAYOUT_VERSION = 1
_ALIGN = 64
_HEADER_BYTES = 64
# int64 slots of the header
_H_MAGIC, _H_VERSION, _H_CAPACITY, _H_HEAD, _H_CHECKSUM, _H_NBYTES, _H_NFIELDS = range(7)


def _align(n: int) -> int:
    return (n + _ALIGN - 1) // _ALIGN * _ALIGN


@dataclass(frozen=True)
class RingSpec:
    """Ring geometry: ``capacity`` slots, each holding one row of every field.

    ``fields`` maps name -> (per-slot shape, numpy dtype string), e.g.
    ``{"frame": ((4, 84, 84), "uint8"), "step": ((), "int64")}``.  Field names
    must be Python identifiers (they are keyword arguments of :meth:`Ring.write`).
    """

    capacity: int
    fields: dict[str, tuple[tuple[int, ...], str]]

    def __post_init__(self) -> None:
        if isinstance(self.capacity, bool) or not isinstance(self.capacity, (int, np.integer)):
            raise ValueError(f"capacity must be an int, got {self.capacity!r}")
        if self.capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {self.capacity}")
        object.__setattr__(self, "capacity", int(self.capacity))
        if not isinstance(self.fields, Mapping) or not self.fields:
            raise ValueError("fields must be a non-empty dict name -> (shape, dtype)")
        normalised: dict[str, tuple[tuple[int, ...], str]] = {}
        for name, value in self.fields.items():
            if not isinstance(name, str) or not name.isidentifier():
                raise ValueError(f"field name must be an identifier, got {name!r}")
            try:
                shape, dtype = value
            except (TypeError, ValueError):
                raise ValueError(f"field {name!r}: expected (shape, dtype), got {value!r}") from None
            try:
                shape = tuple(int(d) for d in shape)
            except TypeError:
                raise ValueError(f"field {name!r}: shape must be a tuple of ints, got {shape!r}") from None
            if any(d < 1 for d in shape):
                raise ValueError(f"field {name!r}: dimensions must be >= 1, got {shape}")
            try:
                dt = np.dtype(dtype)
            except TypeError as exc:
                raise ValueError(f"field {name!r}: bad dtype {dtype!r}: {exc}") from None
            if dt.hasobject or dt.itemsize == 0:
                raise ValueError(f"field {name!r}: dtype {dtype!r} cannot live in shared memory")
            normalised[name] = (shape, dtype if isinstance(dtype, str) else dt.str)
        object.__setattr__(self, "fields", normalised)

    def __hash__(self) -> int:
        return hash(self.encode())

    def encode(self) -> str:
        """Canonical text encoding (capacity, field order, shapes, exact dtypes)."""
        parts = [f"v{LAYOUT_VERSION}", f"cap={self.capacity}"]
        for name, (shape, dtype) in self.fields.items():
            dims = "x".join(str(d) for d in shape)
            parts.append(f"{name}:{dims}:{np.dtype(dtype).str}")
        return ";".join(parts)

    @functools.cached_property
    def checksum(self) -> int:
        """64-bit signed digest of :meth:`encode`, stored in the ring header."""
        digest = hashlib.blake2b(self.encode().encode(), digest_size=8).digest()
        return int.from_bytes(digest, "little", signed=True)

    @functools.cached_property
    def offsets(self) -> dict[str, int]:
        """Byte offset of each field section (plus ``"_stamps"``)."""
        out = {"_stamps": _HEADER_BYTES}
        pos = _align(_HEADER_BYTES + 8 * self.capacity)
        for name, (shape, dtype) in self.fields.items():
            out[name] = pos
            pos = _align(pos + self.capacity * math.prod(shape) * np.dtype(dtype).itemsize)
        return out

    @functools.cached_property
    def nbytes(self) -> int:
        """Total segment size in bytes."""
        last = list(self.fields)[-1]
        shape, dtype = self.fields[last]
        end = self.offsets[last] + self.capacity * math.prod(shape) * np.dtype(dtype).itemsize
        return _align(end)


class Ring:
    """A ring of ``spec.capacity`` slots in a shared segment.

    Exactly one process may write (:meth:`begin_write`/:meth:`slot`/
    :meth:`end_write` or :meth:`write`); any number may :meth:`read`.
    ``fields[name]`` is a view ``[capacity, *shape_k]`` of ``dtype_k`` and
    ``stamps`` one ``[capacity]`` int64 (the frame number each slot holds, -1:
    none).
    """

    spec: RingSpec
    capacity: int
    segment: Segment
    fields: dict[str, np.ndarray]
    stamps: npt.NDArray[np.int64]

    def __init__(self, segment: Segment, spec: RingSpec) -> None:
        """Internal; use :meth:`create` or :meth:`attach`."""
        self.spec = spec
        self.capacity = spec.capacity
        self.segment = segment
        buf = segment.buf
        self._header: npt.NDArray[np.int64] | None = np.frombuffer(buf, np.int64, 8, 0)
        self.stamps = np.frombuffer(buf, np.int64, spec.capacity, spec.offsets["_stamps"])
        self.fields = {}
        for name, (shape, dtype) in spec.fields.items():
            count = spec.capacity * math.prod(shape)
            arr = np.frombuffer(buf, np.dtype(dtype), count, spec.offsets[name])
            self.fields[name] = arr.reshape((spec.capacity, *shape))
        self._items = tuple(self.fields.items())

    @classmethod
    def create(cls, name: str, spec: RingSpec) -> Ring:
        """Create the segment (this process owns it), all stamps -1, head 0."""
        return cls._initialised(Segment.create(name, spec.nbytes), spec)

    @classmethod
    def private(cls, spec: RingSpec) -> Ring:
        """A ring in this process's own memory, which no other process can attach: the same slots, stamps and
        reads, for a writer whose frames leave the process some other way (a socket)."""
        return cls._initialised(_PrivateMemory(spec.nbytes), spec)

    @classmethod
    def _initialised(cls, segment, spec: RingSpec) -> Ring:
        """A new ring over ``segment``'s bytes: all stamps -1, head 0 (the segment is closed and unlinked if
        that fails)."""
        try:
            ring = cls(segment, spec)
            header = ring._hdr
            ring.stamps[:] = -1
            header[_H_VERSION] = LAYOUT_VERSION
            header[_H_CAPACITY] = spec.capacity
            header[_H_HEAD] = 0
            header[_H_CHECKSUM] = spec.checksum
            header[_H_NBYTES] = spec.nbytes
            header[_H_NFIELDS] = len(spec.fields)
            header[_H_MAGIC] = MAGIC  # last: marks the ring initialised
        except BaseException:
            segment.close()
            segment.unlink()
            raise
        return ring

    @classmethod
    def attach(cls, name: str, spec: RingSpec) -> Ring:
        """Attach to an existing ring; ValueError if it was created with another spec."""
        segment = Segment.attach(name)
        try:
            _check_header(segment, spec)
            return cls(segment, spec)
        except BaseException:
            segment.close()
            raise

    @property
    def _hdr(self) -> npt.NDArray[np.int64]:
        if self._header is None:
            raise ValueError(f"ring {self.segment.name!r} is closed")
        return self._header

    @property
    def name(self) -> str:
        """Name of the underlying segment."""
        return self.segment.name

    @property
    def head(self) -> int:
        """Number of frames ever written (= the next frame number)."""
        return int(self._hdr[_H_HEAD])

    # ---------------------------------------------------------------- writer

    def begin_write(self) -> int:
        """Invalidate the next slot and return its frame number (== head)."""
        n = int(self._hdr[_H_HEAD])
        self.stamps[n % self.capacity] = -1  # before any data is touched
        return n

    def slot(self, n: int) -> dict[str, np.ndarray]:
        """Writable views (one per field, ``[*shape_k]`` of ``dtype_k``) of the slot holding frame ``n``."""
        i = n % self.capacity
        return {name: arr[i, ...] for name, arr in self._items}

    def end_write(self, n: int) -> None:
        """Publish frame ``n``: stamp after the data, then advance head."""
        header = self._hdr
        if n != header[_H_HEAD]:
            raise ValueError(f"end_write({n}) does not match head {int(header[_H_HEAD])}")
        self.stamps[n % self.capacity] = n
        header[_H_HEAD] = n + 1

    def write(self, /, **arrays: npt.ArrayLike) -> int:
        """Write one frame (every field required: ``arrays[name]`` of the field's ``[*shape_k]``, or anything numpy
        assigns to it, cast to ``dtype_k``); returns its frame number."""
        # The hot path of every worker step: begin_write and end_write inlined (about 5% of the write; keep the
        # three in step: invalidate, data, stamp, head), the field check by count (a wrong name still fails
        # below, before anything is published).
        items, header, stamps = self._items, self._hdr, self.stamps
        if len(arrays) != len(items):
            self._wrong_fields(arrays)
        n = int(header[_H_HEAD])
        i = n % self.capacity
        stamps[i] = -1  # before any data is touched
        try:
            for name, arr in items:
                arr[i] = arrays[name]
        except KeyError:
            self._wrong_fields(arrays)
        stamps[i] = n  # after the data
        header[_H_HEAD] = n + 1
        return n

    def _wrong_fields(self, arrays: Mapping[str, object]) -> NoReturn:
        missing = sorted(self.fields.keys() - arrays.keys())
        extra = sorted(arrays.keys() - self.fields.keys())
        raise KeyError(f"write() needs exactly the ring fields; missing={missing} unknown={extra}")

    def restore(self, frame_numbers: npt.ArrayLike, rows: Mapping[str, np.ndarray], head: int) -> None:
        """Put saved frames back, before any writer runs: ``rows[name][i]`` becomes frame ``frame_numbers[i]``
        (``rows[name]`` ``[N, *shape_k]``, ``frame_numbers`` ``[N]``; stamped after its data, as a write is), and
        ``head`` (at least the largest frame number plus one, and never below the current head) is where the next
        write goes. A frame that would not be in the ring at ``head`` (more than a capacity behind it) is left
        out, so the ones kept have a slot each. It may be called once per batch of frames, with the same
        ``head``."""
        header = self._hdr
        frames = np.asarray(frame_numbers, dtype=np.int64)
        if set(rows) != set(self.fields):
            raise ValueError(f"restore needs every field {sorted(self.fields)}, got {sorted(rows)}")
        if frames.size and (frames.min() < 0 or frames.max() >= head):
            raise ValueError(f"frame numbers must lie in [0, head={head})")
        keep = frames >= head - self.capacity
        frames = frames[keep]
        slots = frames % self.capacity
        self.stamps[slots] = -1
        for name, field in self.fields.items():
            field[slots] = np.asarray(rows[name])[keep]
        self.stamps[slots] = frames
        header[_H_HEAD] = max(int(header[_H_HEAD]), int(head))

    # ---------------------------------------------------------------- reader

    def read(
        self,
        frame_numbers: npt.ArrayLike,
        out: Mapping[str, np.ndarray],
        column: npt.ArrayLike | None = None,
    ) -> npt.NDArray[np.bool_]:
        """Copy frames into preallocated ``out[name][i]``; returns per-frame validity.

        ``frame_numbers`` is ``[N]``; each ``out[name]`` is ``[N, *shape_k]`` of
        exactly ``dtype_k`` (``[N, *shape_k[1:]]`` with ``column``); the result
        ``ok`` is ``[N]`` bool.  ``ok[i]`` is True only if the slot's stamp
        equalled ``frame_numbers[i]`` both before and after the copy (and the
        frame number is in ``[0, head)``).  Rows with ``ok[i] == False`` hold
        garbage.

        With ``column`` (``[N]`` integers), every field's slot is an array whose
        first dimension is indexed by ``column[i]``:
        ``out[name][i] = slot[name][column[i]]``, still one copy (for slots that
        hold one row per producer, e.g. per environment).
        """
        header = self._hdr  # raises if closed
        frames = np.asarray(frame_numbers, dtype=np.int64)
        if frames.ndim != 1:
            raise ValueError(f"frame_numbers must be 1-D, got shape {frames.shape}")
        targets = []
        for name, dst in out.items():
            src = self.fields.get(name)
            if src is None:
                raise KeyError(f"ring {self.name!r} has no field {name!r}")
            if column is not None:
                # slots of [C, *row]: view the field as [capacity * C, *row] rows
                src = src.reshape((-1, *src.shape[2:]))
            if dst.shape != (len(frames), *src.shape[1:]) or dst.dtype != src.dtype:
                raise ValueError(
                    f"out[{name!r}] must have shape {(len(frames), *src.shape[1:])} and dtype "
                    f"{src.dtype}, got {dst.shape} {dst.dtype}"
                )
            targets.append((src, dst))
        idx = frames % self.capacity
        rows = idx
        if column is not None:
            cols = np.asarray(column, dtype=np.int64)
            if cols.shape != frames.shape:
                raise ValueError(f"column must have shape {frames.shape}, got {cols.shape}")
            per_slot = {self.fields[name].shape[1] for name in out}
            if len(per_slot) != 1 or cols.size and (cols.min() < 0 or cols.max() >= min(per_slot)):
                raise ValueError(f"column out of range for slot rows {sorted(per_slot)}")
            rows = idx * per_slot.pop() + cols
        before = self.stamps.take(idx)
        for src, dst in targets:
            np.take(src, rows, axis=0, out=dst, mode="wrap")
        after = self.stamps.take(idx)
        head = int(header[_H_HEAD])
        return (before == frames) & (after == frames) & (frames >= 0) & (frames < head)

    def valid(self, frame_numbers: npt.ArrayLike) -> npt.NDArray[np.bool_]:
        """Stamp-only check (no copy) of ``frame_numbers`` ``[N]``: ``[N]`` bool, True where the frame is still in
        the ring."""
        header = self._hdr  # raises if closed
        frames = np.asarray(frame_numbers, dtype=np.int64)
        stamps = self.stamps.take(frames % self.capacity)
        return (stamps == frames) & (frames >= 0) & (frames < int(header[_H_HEAD]))

    # -------------------------------------------------------------- lifetime

    def close(self) -> None:
        """Drop the numpy views, then close the segment (idempotent; never unlinks)."""
        self._header = None
        self.fields = {}
        self._items = ()
        self.stamps = np.empty(0, np.int64)
        self.segment.close()

    def unlink(self) -> None:
        """Remove the segment name (owner only)."""
        self.segment.unlink()

    def __enter__(self) -> Ring:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Ring({self.segment.name!r}, capacity={self.capacity}, fields={list(self.spec.fields)})"


class _PrivateMemory:
    """Anonymous memory with the part of Segment's interface a Ring uses."""

    def __init__(self, nbytes: int) -> None:
        self._mmap: mmap.mmap | None = mmap.mmap(-1, nbytes)
        self.buf = memoryview(self._mmap)
        self.name = "<private>"

    def close(self) -> None:
        if self._mmap is not None:
            try:
                self.buf.release()
                self._mmap.close()
            except BufferError:  # a view outlives the ring: the memory goes with the last one
                pass
            self._mmap = None

    def unlink(self) -> None:
        pass


def _check_header(segment: Segment, spec: RingSpec) -> None:
    """Raise ValueError unless ``segment`` holds an initialised ring matching ``spec``."""
    name = segment.name
    if segment.nbytes < _HEADER_BYTES:
        raise ValueError(f"segment {name!r} is too small ({segment.nbytes} B) to be a ring")
    header = np.frombuffer(segment.buf, np.int64, 8, 0).copy()  # copy: no view outlives this
    if header[_H_MAGIC] != MAGIC:
        raise ValueError(f"segment {name!r} is not an initialised ring (bad magic)")
    if header[_H_VERSION] != LAYOUT_VERSION:
        raise ValueError(f"ring {name!r} has layout version {int(header[_H_VERSION])}, expected {LAYOUT_VERSION}")
    if header[_H_CAPACITY] != spec.capacity:
        raise ValueError(f"ring {name!r} spec mismatch: capacity {int(header[_H_CAPACITY])} != {spec.capacity}")
    if header[_H_CHECKSUM] != spec.checksum or header[_H_NFIELDS] != len(spec.fields):
        raise ValueError(
            f"ring {name!r} spec mismatch: it was created with different fields "
            f"(shape/dtype/name/order); expected {spec.encode()!r}"
        )
    if header[_H_NBYTES] != spec.nbytes or segment.nbytes < spec.nbytes:
        raise ValueError(f"ring {name!r} size mismatch: segment {segment.nbytes} B, spec needs {spec.nbytes} B")
