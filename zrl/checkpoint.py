"""Checkpoints: written atomically (temp file in the same folder, fsync, rename, fsync the folder) and
read with ``weights_only=True`` so a checkpoint can never run code."""

from __future__ import annotations

import os
import pickle
import zipfile
from pathlib import Path
from typing import Any

import torch

FORMAT = 1
PATTERN = "ckpt_{step:09d}.pt"


class CheckpointError(ValueError):
    """A checkpoint that cannot be used; the message names the file and the reason."""


def save(path: str | Path, state: dict[str, Any]) -> Path:
    """Write ``state`` to ``path`` so that a crash at any moment leaves either the old file or the new."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as fh:
            torch.save({"format": FORMAT, **state}, fh)
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
    return path


def load(path: str | Path) -> dict[str, Any]:
    """Read a checkpoint on the CPU; CheckpointError with a one-line reason if it is unusable."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: no such checkpoint file")
    if path.stat().st_size == 0:
        raise CheckpointError(f"{path}: the file is empty")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except (RuntimeError, EOFError, zipfile.BadZipFile, pickle.UnpicklingError, OSError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise CheckpointError(f"{path}: not a readable zrl checkpoint ({first[:200]})") from None
    if not isinstance(state, dict) or "format" not in state:
        raise CheckpointError(f"{path}: not a zrl checkpoint (no format field)")
    if state["format"] > FORMAT:
        raise CheckpointError(f"{path}: written by a newer zrl (format {state['format']}, this one reads {FORMAT})")
    return state


def prune(folder: str | Path, keep: int) -> None:
    """Delete all but the newest ``keep`` periodic checkpoints in ``folder``."""
    found = sorted(Path(folder).glob("ckpt_*.pt"))
    for old in found[:-keep] if keep > 0 else found:
        old.unlink(missing_ok=True)


def latest(folder: str | Path) -> Path | None:
    found = sorted(Path(folder).glob("ckpt_*.pt"))
    return found[-1] if found else None
