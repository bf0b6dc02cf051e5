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
"""

from __future__ import annotations

import io
import json
import math
import os
import threading
import time
from pathlib import Path

import numpy as np
import zstandard

from shm.ring import Ring, RingSpec
from zrl.checkpoint import write_atomic
from zrl.replay.snapshot import SnapshotMismatch

CHUNK_SLOTS = 1024  # ring slots per frame file
KEEP = 2  # snapshots kept (the newest and the one before it, should the newest prove unreadable)
FORMAT = 1


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
        self._stamp = int(found[0].stem.split("-")[1]) if found else 0
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
        np.savez(buffer, **state)
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
        manifests = sorted(self.folder.glob("replay-*.json"))
        kept, needed = manifests[-KEEP:], set()
        for path in manifests[:-KEEP]:
            path.unlink(missing_ok=True)
        for path in kept:
            try:
                manifest = json.loads(path.read_text())
                needed.add(manifest["state"])
                needed.update(f"frames/{c}" for ring in manifest["rings"] for c in ring["chunks"])
            except (OSError, ValueError, KeyError, TypeError):  # a damaged manifest: nothing of it is kept
                path.unlink(missing_ok=True)
        size = sum(p.stat().st_size for p in kept if p.exists())
        for path in [*self.folder.glob("state-*.npz.zst"), *self.folder.glob("frames/*.zst")]:
            name = path.relative_to(self.folder).as_posix()
            if name not in needed:
                path.unlink(missing_ok=True)
            else:
                size += path.stat().st_size
        return size


def newest(folder: str | Path) -> tuple[Path, dict] | None:
    """The newest snapshot whose manifest reads (and its manifest), or None."""
    for path in sorted(Path(folder).glob("replay-*.json"), reverse=True):
        try:
            manifest = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(manifest, dict) and manifest.get("format") == FORMAT:
            return path, manifest
    return None


def load_state(manifest_path: str | Path) -> dict[str, np.ndarray]:
    """The state arrays of the snapshot ``manifest_path`` names; SnapshotMismatch when it cannot be read."""
    path = Path(manifest_path)
    try:
        manifest = json.loads(path.read_text())
        data = zstandard.ZstdDecompressor().decompress((path.parent / manifest["state"]).read_bytes())
        with np.load(io.BytesIO(data), allow_pickle=False) as npz:
            return {key: npz[key] for key in npz.files}
    except (OSError, ValueError, KeyError, TypeError, zstandard.ZstdError) as err:
        raise SnapshotMismatch(f"{path}: the replay state cannot be read ({err})") from None


def restore_frames(manifest_path: str | Path, rings: list[Ring], spec: RingSpec) -> int:
    """Put a snapshot's frames back into new rings (before any worker writes), one file at a time, and their heads
    where they were; how many frames came back. SnapshotMismatch when the ring layout differs (envs per worker,
    ring slots or the frame changed) or a file cannot be read (the rings then hold part of it, and no replay may
    be started from it); rings beyond the snapshot's stay empty."""
    path = Path(manifest_path)
    try:
        manifest = json.loads(path.read_text())
        layout, saved_rings = manifest["ring_spec"], manifest["rings"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise SnapshotMismatch(f"{path}: cannot be read ({err})") from None
    if layout != spec.encode():
        raise SnapshotMismatch(f"{path}: saved with ring layout {layout!r}, this run's is {spec.encode()!r}")
    unzip, restored = zstandard.ZstdDecompressor(), 0
    row_bytes = [
        int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize for shape, dtype in spec.fields.values()
    ]
    for saved, ring in zip(saved_rings, rings):
        for name in saved["chunks"]:
            first, end = (int(x) for x in Path(name).stem.split("-")[-2:])
            first *= CHUNK_SLOTS
            n = end - first
            try:
                data = unzip.decompress((path.parent / "frames" / name).read_bytes())
            except (OSError, zstandard.ZstdError) as err:
                raise SnapshotMismatch(f"{path.parent / 'frames' / name}: cannot be read ({err})") from None
            if n <= 0 or len(data) != n * (1 + sum(row_bytes)):
                raise SnapshotMismatch(f"{name}: {len(data)} bytes, not {n} frames of this ring's layout")
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
