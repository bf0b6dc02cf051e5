"""Checkpoints: written atomically and verified when read, so that a crash at any moment, a truncated or
bit-flipped file, or a tampered one never passes for a good checkpoint.

Writing: the SHA-256 goes first into ``<name>.sha256`` beside the checkpoint, then the checkpoint itself:
each as a temp file in the same folder, fsync, rename, fsync the folder. A crash in between leaves a hash
without its file (ignored) or the previous checkpoint; never half a file under a checkpoint's name.

Reading: the hash is checked before anything is unpickled, and ``torch.load(weights_only=True)`` is the only
unpickler, so a checkpoint can never run code. Every problem is a :class:`CheckpointError` whose message is
one line naming the file and the reason.
"""

from __future__ import annotations

import hashlib
import io
import os
import pickle
import zipfile
from pathlib import Path
from typing import Any, Iterator

import torch

FORMAT = 2
PATTERN = "ckpt_{step:09d}.pt"
BEST = "best.pt"
HASH_SUFFIX = ".sha256"


class CheckpointError(ValueError):
    """A checkpoint that cannot be used; the message names the file and the reason."""


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def hash_path(path: str | Path) -> Path:
    path = Path(path)
    return path.with_name(path.name + HASH_SUFFIX)


def save(path: str | Path, state: dict[str, Any]) -> Path:
    """Write ``state`` to ``path`` (and its SHA-256 beside it) so that a crash at any moment leaves either the
    old checkpoint or the new one, whole."""
    path = Path(path)
    buffer = io.BytesIO()
    torch.save({"format": FORMAT, **state}, buffer)
    data = buffer.getvalue()
    _write_atomic(hash_path(path), f"{hashlib.sha256(data).hexdigest()}  {path.name}\n".encode())
    _write_atomic(path, data)
    return path


def copy(source: str | Path, target: str | Path) -> Path:
    """Copy a checkpoint and its hash atomically (e.g. to best.pt)."""
    source, target = Path(source), Path(target)
    data = source.read_bytes()
    _write_atomic(hash_path(target), f"{hashlib.sha256(data).hexdigest()}  {target.name}\n".encode())
    _write_atomic(target, data)
    return target


def load(path: str | Path) -> dict[str, Any]:
    """Read and verify a checkpoint on the CPU; CheckpointError with a one-line reason if it is unusable."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: no such checkpoint file")
    data = path.read_bytes()
    if not data:
        raise CheckpointError(f"{path}: the file is empty")
    recorded = hash_path(path)
    if not recorded.is_file():
        raise CheckpointError(f"{path}: no SHA-256 recorded beside it ({recorded.name}); it cannot be verified")
    expected = recorded.read_text().split()[0] if recorded.read_text().strip() else ""
    if hashlib.sha256(data).hexdigest() != expected:
        raise CheckpointError(f"{path}: SHA-256 mismatch with {recorded.name} (the file is truncated, corrupt or altered)")
    try:
        state = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except (RuntimeError, EOFError, zipfile.BadZipFile, pickle.UnpicklingError, OSError, ValueError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise CheckpointError(f"{path}: refused, not a plain zrl checkpoint ({first[:160]})") from None
    if not isinstance(state, dict) or not isinstance(state.get("format"), int):
        raise CheckpointError(f"{path}: not a zrl checkpoint (no format field)")
    if state["format"] > FORMAT:
        raise CheckpointError(f"{path}: written by a newer zrl (format {state['format']}, this one reads up to {FORMAT})")
    if state["format"] < FORMAT:
        raise CheckpointError(f"{path}: written by an older zrl (format {state['format']}); this one reads {FORMAT}")
    return state


def check_compatible(state: dict[str, Any], path: str | Path, env_id: str, model: torch.nn.Module) -> None:
    """Refuse a checkpoint of another game or another network, naming what differs."""
    theirs = state.get("config", {}).get("env", {}).get("id")
    if theirs != env_id:
        raise CheckpointError(f"{path}: trained on {theirs}, not {env_id} (wrong game)")
    ours = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    stored = {k: tuple(v.shape) for k, v in state.get("model", {}).items()}
    if ours != stored:
        diff = sorted(set(ours.items()) ^ set(stored.items()))
        raise CheckpointError(f"{path}: its network does not fit this one (wrong model; first difference: {diff[0]})")


def periodic(folder: str | Path) -> list[Path]:
    """The periodic checkpoints in ``folder``, oldest first (temp files and best.pt are not among them)."""
    return sorted(p for p in Path(folder).glob("ckpt_*.pt") if not p.name.startswith("."))


def prune(folder: str | Path, keep: int) -> None:
    """Delete all but the newest ``keep`` periodic checkpoints in ``folder``, with their hashes."""
    found = periodic(folder)
    for old in found[:-keep] if keep > 0 else found:
        old.unlink(missing_ok=True)
        hash_path(old).unlink(missing_ok=True)


def latest(folder: str | Path) -> Path | None:
    found = periodic(folder)
    return found[-1] if found else None


def newest_good(folder: str | Path) -> Iterator[tuple[Path, dict[str, Any] | None, CheckpointError | None]]:
    """Periodic checkpoints from the newest back, each with its state or the reason it is unusable."""
    for path in reversed(periodic(folder)):
        try:
            yield path, load(path), None
        except CheckpointError as err:
            yield path, None, err
