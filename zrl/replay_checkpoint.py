"""Replay checkpoints (``run.checkpoint_replay``): every replay's content saved beside the learner's checkpoints, so
that a resumed or restarted run goes on with the experience it had instead of refilling.

A snapshot is the broker part's state (units, priorities, sample counts, stored features: zrl/replay/snapshot.py)
and the ring frames its units read, in ``<run>/checkpoints/replay/``::

    frames/ring<i>-<stream>-<k>-<end>.zst
                                   frames [k * CHUNK_SLOTS, end) of ring i, zstd level 1: a validity byte per
                                   frame, then each field's rows in the ring's field order. <stream>: the rings
                                   that wrote them (new with every launch's rings, kept through restarts of the
                                   roles), since a resumed run writes other frames under the same numbers
    state-<ms>.npz.zst             the state arrays (numpy's npz, read back with allow_pickle=False)
    replay-<ms>.json               the manifest, written last (a snapshot without one is not there): the learner
                                   step it goes with, the ring layout, each ring's head and chunk files, the
                                   state file. <ms>: when it was written (ms since 1970), so the newest sorts last
                                   even after a restart from an older checkpoint

Frames are written incrementally: within one launch's rings frame numbers only grow, so a chunk whose frames were
all written (``end`` at its boundary) never changes and is written once; each snapshot writes only the newer
chunks and the partial last one (a resumed run writes its restored frames once more, under its own stream). Chunks
that no kept snapshot needs are removed. The broker writes in a thread of its own, from a copy
of the state taken between two batches; the frames are read from the rings as the thread gets to them, with their
stamps checked, so a frame overwritten meanwhile is saved as missing and its units are dropped as stale after a
restore, never used torn.

A run folder may come from elsewhere, so a snapshot is read as data: the manifest's names must be ones the writer
makes (no path, no ``..``) and be regular files, never symlinks; a name that is not is a ManifestError (the launcher
refuses to start with it). Every file is decompressed with a bound, so a small file cannot fill the memory; one past
its bound, or damaged, is a SnapshotMismatch (the replays refill).
"""

from __future__ import annotations

import io
import json
import math
import os
import re
import stat
import threading
import time
import zipfile
from pathlib import Path
from typing import Any, BinaryIO, cast

import numpy as np
import zstandard

from shm.ring import Ring, RingSpec
from zrl.checkpoint import UnsafeFile, open_regular, write_atomic
from zrl.replay.snapshot import SnapshotMismatch

CHUNK_SLOTS = 1024  # ring slots per frame file
KEEP = 2  # snapshots kept (the newest and the one before it, should the newest prove unreadable)
FORMAT = 1
# A manifest names a few files per ring; the state holds the replays' index (no frames) and stored features, and a
# state past this bound is refused as damaged rather than decompressed.
MAX_MANIFEST_BYTES = 64 << 20
MAX_STATE_BYTES = 4 << 30
MAX_HEAD = 1 << 53  # frame numbers a ring's head may reach (int64 with room to go on)
MANIFEST_NAME = re.compile(r"replay-(\d{15})\.json")
STATE_NAME = re.compile(r"state-\d{15}\.npz\.zst")
CHUNK_NAME = re.compile(r"ring(\d{1,9})-([0-9a-f]{8})-(\d{9})-(\d{12})\.zst")
STREAM = re.compile(r"[0-9a-f]{8}")


class ManifestError(ValueError):
    """A manifest that the writer did not write: a key of the wrong type, or a name that is not one of its files
    (a path, a symlink, a device). Not damage to be refilled over: the folder is not what it should be."""


def replay_folder(run_dir: str | Path) -> Path:
    return Path(run_dir) / "checkpoints" / "replay"


def _chunk_name(ring: int, stream: str, k: int, end: int) -> str:
    return f"ring{ring}-{stream}-{k:09d}-{end:012d}.zst"


def new_stream() -> str:
    """A token for one launch's rings: the frames they hold under each number are theirs alone."""
    return os.urandom(4).hex()


class ReplayWriter:
    """Writes snapshots of the replays into ``folder`` from the broker: ``start`` hands one to a thread of its own
    (False while the last one is still being written), ``save`` writes one here and now. ``error`` holds the last
    failure (a full disk: the snapshot is skipped, the previous ones stay, training goes on)."""

    def __init__(self, folder: str | Path, rings: list[Ring], stream: str) -> None:
        self.folder = Path(folder)
        self.rings = rings
        self.stream = stream
        self.zip = zstandard.ZstdCompressor(level=1)
        self.thread: threading.Thread | None = None
        self.error = ""
        self.saves = 0
        self.last_s = 0.0  # how long the last snapshot took
        self.bytes = 0  # the kept snapshots' size on disk
        found = newest(self.folder)  # names go on after the newest, even should the clock step back
        match = MANIFEST_NAME.fullmatch(found[0].name) if found else None  # newest takes only names that match
        self._stamp = int(match[1]) if match else 0
        for partial in [*self.folder.glob(".*.tmp-*"), *self.folder.glob("frames/.*.tmp-*")]:
            partial.unlink(missing_ok=True)  # a write a killed broker cut short

    def busy(self) -> bool:
        return self.thread is not None and self.thread.is_alive()

    def start(self, step: int, state: dict[str, np.ndarray], oldest: np.ndarray) -> bool:
        """Write a snapshot of ``state`` (the broker part's, copied: the broker goes on) in the background;
        ``oldest[i]``: ring i's oldest frame a unit reads. False if the last one is still being written."""
        if self.busy():
            return False
        heads = [ring.head for ring in self.rings]  # with the state: its units' frames are all below these
        self.thread = threading.Thread(
            target=self._save_reporting, args=(step, state, oldest, heads), name="replay-writer", daemon=True
        )
        self.thread.start()
        return True

    def wait(self) -> None:
        if self.thread is not None:
            self.thread.join()
            self.thread = None

    def _save_reporting(self, step: int, state: dict, oldest: np.ndarray, heads: list[int]) -> None:
        try:
            self.save(step, state, oldest, heads)
        except Exception as err:  # a full disk, or anything else: the run goes on, the previous snapshot stays
            self.error = f"replay checkpoint at learner step {step} failed ({err}); the previous one stays"

    def save(self, step: int, state: dict[str, np.ndarray], oldest: np.ndarray, heads: list[int] | None = None) -> Path:
        """Write one snapshot; its manifest's path."""
        t0 = time.perf_counter()
        heads = heads if heads is not None else [ring.head for ring in self.rings]
        frames = self.folder / "frames"
        frames.mkdir(parents=True, exist_ok=True)
        rings = []
        for i, (ring, head) in enumerate(zip(self.rings, heads)):
            first = int(min(max(oldest[i], head - ring.capacity, 0), head))
            chunks = []
            for k in range(first // CHUNK_SLOTS, math.ceil(head / CHUNK_SLOTS)):
                end = min((k + 1) * CHUNK_SLOTS, head)
                name = _chunk_name(i, self.stream, k, end)
                if not (frames / name).exists():  # these rings' frames under a number never change: written once
                    write_atomic(frames / name, self._chunk(ring, k * CHUNK_SLOTS, end))
                chunks.append(name)
            rings.append({"head": int(head), "first": first, "chunks": chunks})
        buffer = io.BytesIO()
        np.savez(buffer, allow_pickle=False, **state)  # numbers only, as load_state reads them
        stamp = max(time.time_ns() // 1_000_000, self._stamp + 1)  # two in one millisecond stay apart
        self._stamp = stamp
        state_name = f"state-{stamp:015d}.npz.zst"
        write_atomic(self.folder / state_name, self.zip.compress(buffer.getvalue()))
        manifest = {
            "format": FORMAT,
            "learner_step": int(step),
            "saved_at": time.time(),
            "stream": self.stream,
            "ring_spec": self.rings[0].spec.encode() if self.rings else "",
            "observations_per_slot": self.rings[0].spec.fields["frame"][0][0] if self.rings else 0,  # envs per worker
            "rings": rings,
            "state": state_name,
        }
        path = self.folder / f"replay-{stamp:015d}.json"
        write_atomic(path, json.dumps(manifest, indent=1).encode())
        self.bytes = self._prune()
        self.saves += 1
        self.last_s = time.perf_counter() - t0
        return path

    def _chunk(self, ring: Ring, first: int, end: int) -> bytes:
        numbers = np.arange(first, end, dtype=np.int64)
        out = {name: np.empty((len(numbers), *field.shape[1:]), field.dtype) for name, field in ring.fields.items()}
        ok = ring.read(numbers, out)
        return self.zip.compress(ok.astype(np.uint8).tobytes() + b"".join(out[n].tobytes() for n in ring.fields))

    def _prune(self) -> int:
        """Remove snapshots past the KEEP newest and the files none of those needs; the kept ones' bytes."""
        manifests = sorted(p for p in self.folder.glob("replay-*.json") if MANIFEST_NAME.fullmatch(p.name))
        kept, needed = manifests[-KEEP:], set()
        for path in manifests[:-KEEP]:
            path.unlink(missing_ok=True)
        for path in kept:
            try:
                manifest: Any = read_manifest(path)  # any JSON: a wrong shape raises what is caught below
                needed.add(manifest["state"])
                needed.update(f"frames/{c}" for ring in manifest["rings"] for c in ring["chunks"])
            except (OSError, ValueError, KeyError, TypeError):  # a damaged manifest: nothing of it is kept
                path.unlink(missing_ok=True)
        size = sum(p.lstat().st_size for p in kept if p.exists())
        for path in [*self.folder.glob("state-*.npz.zst"), *self.folder.glob("frames/*.zst")]:
            name = path.relative_to(self.folder).as_posix()
            if name not in needed:
                path.unlink(missing_ok=True)
            else:
                size += path.lstat().st_size
        return size


def newest(folder: str | Path) -> tuple[Path, dict] | None:
    """The newest snapshot whose manifest reads (and its manifest, not yet checked: ``check_manifest``), or None.
    Files whose names the writer does not make are passed over."""
    for path in sorted(Path(folder).glob("replay-*.json"), reverse=True):
        if not MANIFEST_NAME.fullmatch(path.name):
            continue
        try:
            manifest = read_manifest(path)
        except (OSError, ValueError):
            continue
        if isinstance(manifest, dict) and manifest.get("format") == FORMAT:
            return path, manifest
    return None


def read_manifest(path: str | Path) -> object:
    """A manifest's JSON: OSError or ValueError if it cannot be read, ManifestError if it is not a regular file."""
    with _open_regular(Path(path), Path(path)) as fh:
        size = os.fstat(fh.fileno()).st_size
        if size > MAX_MANIFEST_BYTES:
            raise ValueError(f"{size} bytes, over {MAX_MANIFEST_BYTES}")
        text = fh.read(size + 1)  # one that grows meanwhile is cut short, and does not decode
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("nested too deep") from None


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _typed(path: Path, manifest: dict, key: str, kind: type, what: str, where: str = "") -> Any:
    value = manifest.get(key)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise ManifestError(f"{path}: {where}{key!r} should be {what}, not {_shown(value)}")
    return value


def check_manifest(path: str | Path, manifest: object) -> None:
    """Raise ManifestError unless ``manifest`` (read from ``path``) is shaped as the writer writes one: its names
    the writer's own, each a regular file in the snapshot's folder (or missing: damage, said when it is read)."""
    path = Path(path)
    if not isinstance(manifest, dict):
        raise ManifestError(f"{path}: not a JSON object")
    _typed(path, manifest, "ring_spec", str, "a ring layout")
    stream = _typed(path, manifest, "stream", str, "8 hex digits")
    if not STREAM.fullmatch(stream):
        raise ManifestError(f"{path}: 'stream' should be 8 hex digits, not {_shown(stream)}")
    state = _typed(path, manifest, "state", str, "a file name")
    if not STATE_NAME.fullmatch(state):
        raise ManifestError(f"{path}: 'state' names {_shown(state)}, not a state-<ms>.npz.zst of this folder")
    _regular(path, path.parent / state)
    for i, ring in enumerate(_typed(path, manifest, "rings", list, "a list")):
        if not isinstance(ring, dict):
            raise ManifestError(f"{path}: rings[{i}] should be an object, not {_shown(ring)}")
        head = _typed(path, ring, "head", int, "a frame number", f"rings[{i}] ")
        first = _typed(path, ring, "first", int, "a frame number", f"rings[{i}] ")
        if not 0 <= first <= head < MAX_HEAD:
            raise ManifestError(f"{path}: rings[{i}] has first {first} and head {head}, not 0 <= first <= head")
        for name in _typed(path, ring, "chunks", list, "a list of file names", f"rings[{i}] "):
            match = CHUNK_NAME.fullmatch(name) if isinstance(name, str) else None
            if match is None or int(match[1]) != i or match[2] != stream:
                raise ManifestError(
                    f"{path}: rings[{i}] names {_shown(name)}, not a frames/ring{i}-{stream}-<k>-<end>.zst"
                )
            k, end = int(match[3]), int(match[4])
            if not k * CHUNK_SLOTS < end <= min((k + 1) * CHUNK_SLOTS, head):
                raise ManifestError(f"{path}: {name} holds no frames of chunk {k} below the head {head}")
            _regular(path, path.parent / "frames" / name)


def _regular(manifest: Path, path: Path) -> None:
    """ManifestError if ``path`` (or the frames folder it is in) is there but is not a plain file (folder)."""
    for at, want, kind in ((path.parent, stat.S_ISDIR, "folder"), (path, stat.S_ISREG, "file")):
        try:
            mode = os.lstat(at).st_mode
        except OSError:  # missing: damage, said when it is read
            return
        if not want(mode):
            what = "a symlink" if stat.S_ISLNK(mode) else f"not a plain {kind}"
            raise ManifestError(f"{manifest}: it names {at}, {what}")


def _open_regular(path: Path, manifest: Path) -> BinaryIO:
    """``path`` opened for reading, never through a symlink, and only if it is a regular file (a FIFO or a device
    would block or never end)."""
    try:
        return os.fdopen(open_regular(path, os.O_RDONLY), "rb")
    except UnsafeFile:
        what = "a symlink" if os.path.islink(path) else "not a plain file"
        raise ManifestError(f"{manifest}: it names {path}, {what}") from None


def _inflate(path: Path, manifest: Path, bound: int) -> bytes:
    """``path``'s zstd content, at most ``bound + 1`` bytes of it (one more than a file may hold: the caller
    refuses it), however much the file would decompress to."""
    with _open_regular(path, manifest) as fh:
        return zstandard.ZstdDecompressor().stream_reader(fh).read(bound + 1)


def _checked_manifest(path: Path, unreadable: str) -> dict:
    """The manifest at ``path``, checked (``check_manifest``); SnapshotMismatch saying ``unreadable`` when it
    cannot be read at all."""
    try:
        manifest = read_manifest(path)
    except ManifestError:
        raise
    except (OSError, ValueError) as err:
        raise SnapshotMismatch(f"{path}: {unreadable} ({err})") from None
    check_manifest(path, manifest)
    return cast(dict, manifest)  # check_manifest refused anything but a dict


def load_state(manifest_path: str | Path, limit: int = MAX_STATE_BYTES) -> dict[str, np.ndarray]:
    """The state arrays of the snapshot ``manifest_path`` names; ManifestError when its manifest is not one the
    writer wrote, SnapshotMismatch when the state cannot be read or holds over ``limit`` bytes."""
    path = Path(manifest_path)
    manifest = _checked_manifest(path, "the replay state cannot be read")
    try:
        data = _inflate(path.parent / manifest["state"], path, limit)
        if len(data) > limit:
            raise ValueError(f"it holds over {limit} bytes")
        # np.savez stores its arrays as they are: a deflated member could inflate past the bound
        with zipfile.ZipFile(io.BytesIO(data)) as npz:
            if any(info.compress_type != zipfile.ZIP_STORED for info in npz.infolist()):
                raise ValueError("it holds compressed arrays, which np.savez never writes")
        with np.load(io.BytesIO(data), allow_pickle=False) as npz:
            return {key: npz[key] for key in npz.files}
    except ManifestError:
        raise
    except (OSError, ValueError, KeyError, TypeError, zipfile.BadZipFile, zstandard.ZstdError) as err:
        raise SnapshotMismatch(f"{path}: the replay state cannot be read ({err})") from None


def restore_frames(manifest_path: str | Path, rings: list[Ring], spec: RingSpec) -> int:
    """Put a snapshot's frames back into new rings (before any worker writes), one file at a time, and their heads
    where they were; how many frames came back. ManifestError when the manifest is not one the writer wrote (checked
    before any frame is put back); SnapshotMismatch when the ring layout differs (envs per worker, ring slots or the
    frame changed) or a file cannot be read (the rings then hold part of it, and no replay may be started from it);
    rings beyond the snapshot's stay empty."""
    path = Path(manifest_path)
    manifest = _checked_manifest(path, "cannot be read")
    layout, saved_rings = manifest["ring_spec"], manifest["rings"]
    if layout != spec.encode():
        raise SnapshotMismatch(f"{path}: saved with ring layout {layout!r}, this run's is {spec.encode()!r}")
    restored = 0
    row_bytes = [
        int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize for shape, dtype in spec.fields.values()
    ]
    for saved, ring in zip(saved_rings, rings):
        for name in saved["chunks"]:
            match = CHUNK_NAME.fullmatch(name)
            assert match is not None  # check_manifest matched every chunk's name
            first, end = int(match[3]) * CHUNK_SLOTS, int(match[4])
            n = end - first
            want = n * (1 + sum(row_bytes))
            chunk = path.parent / "frames" / name
            try:
                data = _inflate(chunk, path, want)
            except (OSError, zstandard.ZstdError) as err:
                raise SnapshotMismatch(f"{chunk}: cannot be read ({err})") from None
            if len(data) != want:  # cut short, or more than its frames (a bomb): read no further
                more = "+" if len(data) > want else ""
                raise SnapshotMismatch(
                    f"{chunk}: cannot be read ({len(data)}{more} bytes, not the {want} of {n} frames in this layout)"
                )
            ok = np.frombuffer(data, np.uint8, n).astype(bool)
            rows, at = {}, n
            for (field, (shape, dtype)), size in zip(spec.fields.items(), row_bytes):
                rows[field] = np.frombuffer(data, dtype, n * size // np.dtype(dtype).itemsize, at).reshape(n, *shape)
                at += n * size
            ring.restore(np.arange(first, end, dtype=np.int64)[ok], {f: r[ok] for f, r in rows.items()}, saved["head"])
            restored += int(ok.sum())
        if not saved["chunks"]:
            ring.restore(
                np.zeros(0, np.int64), {f: np.zeros((0, *s), d) for f, (s, d) in spec.fields.items()}, saved["head"]
            )
    return restored
