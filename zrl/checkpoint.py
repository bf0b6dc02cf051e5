"""Checkpoints: written atomically and verified when read, so that a crash at any moment, a truncated or
bit-flipped file, or a tampered one never passes for a good checkpoint.

Writing: the SHA-256 goes into ``<name>.sha256`` beside the checkpoint, each file written as a temp file in
the same folder, fsync, rename, fsync the folder. While a name is overwritten (best.pt, or a final checkpoint
at the step of a periodic one) the hash file lists the new hash and the old one, so whichever file the name
holds after a crash still verifies; once the new file is in place the old hash is dropped. Never half a
file under a checkpoint's name, and never a good file that fails its hash.

Reading: the hash is checked before anything is unpickled, and ``torch.load(weights_only=True)`` is the only
unpickler, so a checkpoint can never run code. Every problem is a :class:`CheckpointError` whose message is
one line naming the file and the reason.

torch is imported by the two functions that pickle (save and load) only: zrl-launch keeps the files of a run
folder (best.pt, pruning, the newest checkpoint's name) without importing it.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import os
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

FORMAT = 2
PATTERN = "ckpt_{step:09d}.pt"
BEST = "best.pt"
HASH_SUFFIX = ".sha256"


class CheckpointError(ValueError):
    """A checkpoint that cannot be used; the message names the file and the reason."""


class UnsafeFile(OSError):
    """A run folder's file that zrl will not write: a symlink, or not a regular file. Its message names the file
    and says what to do."""


def refusal(path: str | Path, mode: int) -> str | None:
    """Why ``path``, whose ``lstat`` mode is ``mode``, is no file zrl writes in a run folder; None for a regular
    file or a folder. A link would put the writes wherever whoever made the folder chose; a FIFO would block, a
    device mislead."""
    if stat.S_ISLNK(mode):
        return (
            f"{path} is a symlink; zrl writes nothing in a run folder through a link: copy the file it points to in "
            "place of the link (or remove the link), then try again"
        )
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    kind = "FIFO" if stat.S_ISFIFO(mode) else "socket" if stat.S_ISSOCK(mode) else "device"
    return f"{path} is a {kind}, not a regular file; zrl writes only regular files in a run folder: remove it"


def open_regular(path: str | Path, flags: int, mode: int = 0o644) -> int:
    """``os.open`` for a run folder's file that never follows a symlink at ``path`` and takes a regular file only,
    so that a link or a FIFO made there after any check (a race) is refused too; UnsafeFile says which. Opened
    without blocking (a FIFO no one reads would hang the open), then made blocking."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode)
    except OSError as err:
        if err.errno not in (errno.ELOOP, errno.ENXIO):  # ENXIO: a FIFO with no reader, opened to write
            raise
        try:
            why = refusal(path, os.lstat(path).st_mode)
        except OSError:
            why = None
        raise UnsafeFile(why or f"{path}: {err.strerror}") from None
    mode_found = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode_found):
        os.close(fd)
        raise UnsafeFile(refusal(path, mode_found) or f"{path} is a folder, not a file")
    os.set_blocking(fd, True)
    return fd


def write_atomic(path: Path, data: bytes) -> None:
    """Write a whole file or nothing: temp file in the same folder, fsync, rename, fsync the folder. The temp
    file's name is unpredictable and made new (never a link someone placed there), and the rename replaces a
    link at ``path`` rather than writing through it."""
    tmp = path.with_name(f".{path.name}.tmp-{secrets.token_hex(8)}")
    try:  # an interrupt anywhere in here (Ctrl-C) leaves no temp file
        with os.fdopen(open_regular(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def make_folder(path: str | Path) -> Path:
    """Make folder ``path`` if it is missing, and refuse one that is a link (UnsafeFile): what is written in it
    must stay in the run folder."""
    path = Path(path)
    with contextlib.suppress(FileExistsError):
        path.mkdir()
    why = refusal(path, os.lstat(path).st_mode)
    if why is None and not path.is_dir():
        why = f"{path} is a file, not a folder"
    if why is not None:
        raise UnsafeFile(why)
    return path


def remove_partials(folder: str | Path) -> None:
    """Remove the temp files of writes cut short in ``folder`` (a learner killed mid-write, a crash): never a
    checkpoint."""
    for partial in Path(folder).glob(".*.tmp-*"):
        partial.unlink(missing_ok=True)


def hash_path(path: str | Path) -> Path:
    path = Path(path)
    return path.with_name(path.name + HASH_SUFFIX)


def _recorded(path: Path) -> list[str]:
    """The hashes recorded for ``path`` (one, or two while it is being replaced); [] if none or unreadable."""
    try:
        text = hash_path(path).read_bytes().decode("ascii")
    except (OSError, UnicodeDecodeError):
        return []
    return [line.split()[0] for line in text.splitlines() if line.split()]


def _held(path: Path) -> list[str]:
    """The SHA-256 of the regular file the name holds now; [] for none, or for a link or a FIFO, which the
    write replaces unread."""
    try:
        fd = open_regular(path, os.O_RDONLY)
    except (FileNotFoundError, UnsafeFile):
        return []
    with os.fdopen(fd, "rb") as fh:
        return [hashlib.sha256(fh.read()).hexdigest()]


def _install(path: Path, data: bytes) -> Path:
    new = hashlib.sha256(data).hexdigest()
    old = _held(path)
    write_atomic(hash_path(path), "".join(f"{h}  {path.name}\n" for h in [new, *old]).encode())
    try:
        write_atomic(path, data)
    except OSError:  # a full disk: the name keeps what it held, and its hash file only that
        with contextlib.suppress(OSError):
            if old:
                write_atomic(hash_path(path), f"{old[0]}  {path.name}\n".encode())
            else:
                hash_path(path).unlink(missing_ok=True)
        raise
    if old:
        write_atomic(hash_path(path), f"{new}  {path.name}\n".encode())
    return path


def save(path: str | Path, state: dict[str, Any]) -> Path:
    """Write ``state`` to ``path`` (and its SHA-256 beside it) so that a crash or a failed write at any moment
    leaves either the old checkpoint or the new one, whole and verifiable."""
    import torch

    buffer = io.BytesIO()
    torch.save({"format": FORMAT, **state}, buffer)
    return _install(Path(path), buffer.getvalue())


def copy(source: str | Path, target: str | Path) -> Path:
    """Copy a checkpoint and its hash atomically (e.g. to best.pt)."""
    return _install(Path(target), Path(source).read_bytes())


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
    if hashlib.sha256(data).hexdigest() not in _recorded(path):
        raise CheckpointError(
            f"{path}: SHA-256 mismatch with {recorded.name} (the file is truncated, corrupt or altered)"
        )
    import torch

    try:
        state = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as err:  # torch.load on bytes it did not write raises many kinds (IndexError, KeyError, ...)
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise CheckpointError(f"{path}: refused, not a plain zrl checkpoint ({first[:160]})") from None
    if not isinstance(state, dict) or not isinstance(state.get("format"), int):
        raise CheckpointError(f"{path}: not a zrl checkpoint (no format field)")
    if state["format"] > FORMAT:
        raise CheckpointError(
            f"{path}: written by a newer zrl (format {state['format']}, this one reads up to {FORMAT})"
        )
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
        trained = state.get("config", {}).get("model", {})
        kind = trained.get("kind")
        if kind in ("auto", "auto_nature"):  # stored before kinds were stored resolved: auto was the Nature net
            kind = "atari" if stored.get("torso.0.weight", (0,))[0] == 32 else "mlp"
        hint = (
            f"; it was trained with model.kind = {kind!r} and model.hidden_size = {trained.get('hidden_size')}: "
            "--set them to match"
            if kind
            else ""
        )
        raise CheckpointError(
            f"{path}: its network does not fit this one (wrong model; first difference: {diff[0]}){hint}"
        )


def periodic(folder: str | Path) -> list[Path]:
    """The periodic checkpoints in ``folder``, oldest first (temp files and best.pt are not among them)."""
    return sorted(p for p in Path(folder).glob("ckpt_*.pt") if not p.name.startswith("."))


def prune(folder: str | Path, keep: int) -> None:
    """Delete all but the newest ``keep`` periodic checkpoints in ``folder``, with their hashes, and hashes
    whose checkpoint was never written (a write that failed)."""
    found = periodic(folder)
    for old in found[:-keep] if keep > 0 else found:
        old.unlink(missing_ok=True)
        hash_path(old).unlink(missing_ok=True)
    for orphan in Path(folder).glob(f"ckpt_*.pt{HASH_SUFFIX}"):
        if not orphan.with_name(orphan.name[: -len(HASH_SUFFIX)]).exists():
            orphan.unlink(missing_ok=True)


CORRUPT = ("SHA-256 mismatch", "the file is empty", "no SHA-256 recorded", "refused, not a plain")


def is_corrupt(err: CheckpointError) -> bool:
    """A damaged file (as opposed to one from another zrl version, game or network)."""
    return any(mark in str(err) for mark in CORRUPT)


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
