"""Named POSIX shared-memory segments without Python's resource tracker.

``multiprocessing.shared_memory`` registers every segment with the resource
tracker, which on Python 3.11 unlinks segments that were merely *attached* by
a process when that process's tracker shuts down.  This module talks to
``shm_open``/``shm_unlink`` directly so that only the creator (the owner)
ever removes a segment, and stale segments of dead owners are reclaimed with
:func:`sweep`.

Segment names have the form ``{prefix}_{run_id}_{owner_pid}_{label}`` so the
owner pid can be recovered from the name alone (see :func:`parse_segment_name`).
"""

from __future__ import annotations

import _posixshmem
import errno
import mmap
import os
import re
import stat
from types import TracebackType
from typing import NamedTuple

__all__ = [
    "MAX_NAME_LEN",
    "NotOwnerError",
    "Segment",
    "SegmentExistsError",
    "SegmentName",
    "SegmentNotFoundError",
    "owned_segments",
    "parse_segment_name",
    "segment_name",
    "sweep",
]

MAX_NAME_LEN = 200
SHM_DIR = "/dev/shm"
_MODE = 0o600

# prefix and run_id may not contain '_' so the pid is always the third field;
# the label is the remainder and may contain '_'.
_PIECE = r"[A-Za-z0-9][A-Za-z0-9.\-]*"
_LABEL = r"[A-Za-z0-9][A-Za-z0-9.\-_]*"
_PIECE_RE = re.compile(rf"{_PIECE}\Z")
_LABEL_RE = re.compile(rf"{_LABEL}\Z")
_NAME_RE = re.compile(rf"({_PIECE})_({_PIECE})_([1-9][0-9]*)_({_LABEL})\Z")


class SegmentNotFoundError(FileNotFoundError):
    """Attaching to (or opening) a segment that does not exist."""


class SegmentExistsError(FileExistsError):
    """Creating a segment whose name is already taken."""


class NotOwnerError(PermissionError):
    """An owner-only operation (unlink) attempted by a non-owner."""


class SegmentName(NamedTuple):
    """The pieces of a name built by :func:`segment_name`."""

    prefix: str
    run_id: str
    owner_pid: int
    label: str


def segment_name(prefix: str, run_id: str, owner_pid: int, label: str) -> str:
    """Build ``f"{prefix}_{run_id}_{owner_pid}_{label}"`` after validating the pieces.

    ``prefix`` and ``run_id`` must match ``[A-Za-z0-9][A-Za-z0-9.-]*`` (no '_'),
    ``label`` may additionally contain '_', ``owner_pid`` must be a positive int.
    """
    if not isinstance(prefix, str) or not _PIECE_RE.match(prefix):
        raise ValueError(f"invalid segment prefix {prefix!r} (use [A-Za-z0-9.-], no '_')")
    if not isinstance(run_id, str) or not _PIECE_RE.match(run_id):
        raise ValueError(f"invalid run_id {run_id!r} (use [A-Za-z0-9.-], no '_')")
    if isinstance(owner_pid, bool) or not isinstance(owner_pid, int) or owner_pid <= 0:
        raise ValueError(f"owner_pid must be a positive int, got {owner_pid!r}")
    if not isinstance(label, str) or not _LABEL_RE.match(label):
        raise ValueError(f"invalid segment label {label!r} (use [A-Za-z0-9._-])")
    name = f"{prefix}_{run_id}_{owner_pid}_{label}"
    if len(name) > MAX_NAME_LEN:
        raise ValueError(f"segment name too long ({len(name)} > {MAX_NAME_LEN}): {name!r}")
    return name


def parse_segment_name(name: str) -> SegmentName:
    """Split a name built by :func:`segment_name`; ValueError if it is not one."""
    m = _NAME_RE.match(name) if len(name) <= MAX_NAME_LEN else None
    if m is None:
        raise ValueError(f"not a segment name of the form prefix_runid_pid_label: {name!r}")
    return SegmentName(m.group(1), m.group(2), int(m.group(3)), m.group(4))


def _check_name(name: str) -> str:
    if not isinstance(name, str) or not name or name in (".", ".."):
        raise ValueError(f"invalid segment name {name!r}")
    if "/" in name or "\0" in name:
        raise ValueError(f"segment name may not contain '/' or NUL: {name!r}")
    if len(name) > MAX_NAME_LEN:
        raise ValueError(f"segment name too long ({len(name)} > {MAX_NAME_LEN}): {name!r}")
    return name


class Segment:
    """A mapped named shared-memory segment.

    Use :meth:`create` (the process becomes the owner) or :meth:`attach`.
    Only the owner may :meth:`unlink`.  Callers should drop numpy views of
    :attr:`buf` before :meth:`close`; if views are still alive the mapping is
    left for the garbage collector instead of raising.
    """

    def __init__(self, name: str, mm: mmap.mmap, owner: bool) -> None:
        """Internal; use :meth:`create` or :meth:`attach`."""
        self._name = name
        self._mmap: mmap.mmap | None = mm
        self._buf: memoryview | None = memoryview(mm)
        self._nbytes = len(mm)
        self._owner = owner
        self._unlinked = False

    @classmethod
    def create(cls, name: str, nbytes: int, *, reserve: bool = True) -> Segment:
        """Create a new segment of ``nbytes`` (mode 0o600, zero-filled).

        Raises :class:`SegmentExistsError` if the name is taken.  With
        ``reserve`` the memory is allocated up front (``posix_fallocate``) so a
        full /dev/shm fails here with ENOSPC rather than SIGBUS on first write.
        """
        _check_name(name)
        if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes <= 0:
            raise ValueError(f"nbytes must be a positive int, got {nbytes!r}")
        try:
            fd = _posixshmem.shm_open("/" + name, os.O_CREAT | os.O_EXCL | os.O_RDWR, _MODE)
        except FileExistsError:
            raise SegmentExistsError(errno.EEXIST, f"shared memory segment {name!r} already exists", name) from None
        try:
            os.fchmod(fd, _MODE)  # independent of the umask
            os.ftruncate(fd, nbytes)
            if reserve:
                try:
                    os.posix_fallocate(fd, 0, nbytes)
                except OSError as exc:
                    if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
                        raise
            mm = mmap.mmap(fd, nbytes)
        except BaseException:
            try:
                _posixshmem.shm_unlink("/" + name)
            except OSError:
                pass
            raise
        finally:
            os.close(fd)
        return cls(name, mm, owner=True)

    @classmethod
    def attach(cls, name: str) -> Segment:
        """Map an existing segment read-write (never becomes the owner)."""
        _check_name(name)
        try:
            fd = _posixshmem.shm_open("/" + name, os.O_RDWR, 0)
        except FileNotFoundError:
            raise SegmentNotFoundError(errno.ENOENT, f"shared memory segment {name!r} does not exist", name) from None
        try:
            size = os.fstat(fd).st_size
            if size <= 0:
                raise ValueError(f"shared memory segment {name!r} is empty (not initialised yet?)")
            mm = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        return cls(name, mm, owner=False)

    @property
    def name(self) -> str:
        """Segment name (without the leading '/')."""
        return self._name

    @property
    def nbytes(self) -> int:
        """Mapped size in bytes."""
        return self._nbytes

    @property
    def owner(self) -> bool:
        """True only in the process object that created the segment."""
        return self._owner

    @property
    def closed(self) -> bool:
        """True after :meth:`close`."""
        return self._buf is None

    @property
    def buf(self) -> memoryview:
        """Writable byte view of the whole segment."""
        if self._buf is None:
            raise ValueError(f"segment {self._name!r} is closed")
        return self._buf

    def close(self) -> None:
        """Unmap (idempotent).  Outstanding exported views defer the unmap to GC."""
        buf, mm = self._buf, self._mmap
        self._buf = None
        self._mmap = None
        if buf is not None:
            try:
                buf.release()
            except BufferError:
                pass  # numpy views still alive; freed with them
        if mm is not None:
            try:
                mm.close()
            except BufferError:
                pass  # exported pointers still exist; munmap happens on GC

    def unlink(self) -> None:
        """Remove the name from the system (owner only; idempotent if already gone)."""
        if not self._owner:
            raise NotOwnerError(errno.EPERM, f"only the owner may unlink shared memory segment {self._name!r}")
        if self._unlinked:
            return
        try:
            _posixshmem.shm_unlink("/" + self._name)
        except FileNotFoundError:
            pass
        self._unlinked = True

    def __enter__(self) -> Segment:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"Segment({self._name!r}, nbytes={self._nbytes}, owner={self._owner}, {state})"


def pid_max() -> int:
    """The largest pid this kernel hands out (``/proc/sys/kernel/pid_max``; 2**22, Linux's ceiling, elsewhere)."""
    try:
        with open("/proc/sys/kernel/pid_max") as f:
            return int(f.read())
    except (OSError, ValueError):
        return 1 << 22


def pid_alive(pid: int) -> bool:
    """Signal-0 probe; anything other than ESRCH counts as alive (conservative), a pid no process can have
    included: a name that carries one was not made by a launcher, so nothing may judge its owner dead."""
    if pid == os.getpid() or not 0 < pid <= pid_max():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # PermissionError: exists but not ours
        return True
    return True


def _named(prefix: str, shm_dir: str) -> list[tuple[str, SegmentName]]:
    if not _PIECE_RE.match(prefix):
        raise ValueError(f"invalid segment prefix {prefix!r}")
    try:
        entries = os.listdir(shm_dir)
    except FileNotFoundError:
        return []
    found = []
    start = prefix + "_"
    for entry in entries:
        if not entry.startswith(start):
            continue
        try:
            parsed = parse_segment_name(entry)
        except ValueError:
            continue  # not ours / malformed: never touch it
        if parsed.prefix == prefix:
            found.append((entry, parsed))
    found.sort()
    return found


def owned_segments(prefix: str, pid: int, shm_dir: str = SHM_DIR) -> list[str]:
    """Names of existing ``{prefix}_*`` segments whose owner pid is ``pid``."""
    return [name for name, parsed in _named(prefix, shm_dir) if parsed.owner_pid == pid]


def sweep(prefix: str, shm_dir: str = SHM_DIR, skipped: list[str] | None = None) -> list[str]:
    """Unlink ``{prefix}_*`` segments whose owner pid is no longer alive.

    Names that do not parse are ignored.  Liveness is ``os.kill(pid, 0)``:
    pid reuse can keep a stale segment alive a little longer, and owners in
    another pid namespace sharing /dev/shm would look dead.  An entry the
    sweep cannot judge (not a regular file, another user's, a pid beyond
    ``pid_max``, one it may not unlink) is left, and named with the reason in
    ``skipped`` when given: any local user can put a file in /dev/shm, and no
    such file may stop a launch.  Returns the removed names.
    """
    removed, highest, uid = [], pid_max(), os.geteuid()
    notes = [] if skipped is None else skipped
    for name, parsed in _named(prefix, shm_dir):
        path = os.path.join(shm_dir, name)
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            continue  # raced with another sweeper
        if not stat.S_ISREG(st.st_mode):
            notes.append(f"{path}: not a regular file")
            continue
        if st.st_uid != uid:
            notes.append(f"{path}: owned by uid {st.st_uid}, not this user")
            continue
        if not 0 < parsed.owner_pid <= highest:
            notes.append(f"{path}: pid {parsed.owner_pid} is beyond this system's pid_max ({highest})")
            continue
        if pid_alive(parsed.owner_pid):
            continue
        try:
            os.unlink(path)
        except FileNotFoundError:
            continue  # raced with another sweeper
        except OSError as err:
            notes.append(f"{path}: cannot unlink ({err.strerror})")
            continue
        removed.append(name)
    return removed
