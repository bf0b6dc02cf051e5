"""What every role process does at start and while it runs: its title, signals, the stop check."""

from __future__ import annotations

import ctypes
import faulthandler
import os
import signal
import sys
import time

from shm import pid_alive
from zrl.forkserver import die_with_parent, let_the_fork_server_go
from zrl.namespace import role_title

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters


# This role's parent, the launcher's fork server (zrl/launch/wiring.py), as start_role found it.
_parent: int | None = None


def start_role(title: str, launcher_pid: int) -> None:
    """Name the process (with its namespace, zrl/namespace.py), leave Ctrl-C to the launcher, and die with the launcher."""
    try:
        import setproctitle

        setproctitle.setproctitle(role_title(title))
    except ImportError:  # pragma: no cover - setproctitle is a requirement; ps shows python then
        pass
    # The terminal sends SIGINT, and SIGHUP when it closes, to the whole process group; only the launcher decides
    # what they mean (an orderly stop, in which it stops the roles).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    # SIGTERM (from a process-group kill, or the parent-death signal) stops the role in order.
    signal.signal(signal.SIGTERM, _on_sigterm)
    # The parent is the launcher's fork server, which exits when the launcher does: the chain that carries a
    # launcher's death to its roles (the signal below, and should_stop's check of the parent).
    global _parent
    _parent = os.getppid()
    let_the_fork_server_go()
    die_with_parent(signal.SIGTERM)
    if os.getppid() != _parent or not pid_alive(launcher_pid):  # either died before prctl took effect
        os._exit(1)
    # kill -USR1 <pid> prints where every thread of a stuck role is, to the launcher's stderr.
    faulthandler.register(signal.SIGUSR1, all_threads=True)


def keep_freed_memory() -> bool:
    """Have glibc keep freed memory in this process's heap for the next allocation, rather than unmapping
    every large block when it is freed (run.keep_freed_memory). A PyTorch training step on CPU allocates
    and frees hundreds of MB of activations; unmapped, each step faults them all in again (perf/README.md,
    "The learner: freed memory kept"). The process keeps its peak memory instead. True when set; False
    where the C library is not glibc."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # musl and others have no mallopt
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, 1 << 30)) and bool(mallopt(_M_TRIM_THRESHOLD, 2**31 - 1))


_terminated = False


def _on_sigterm(_signum, _frame) -> None:
    global _terminated
    _terminated = True


def should_stop(stop_event) -> bool:
    """True once the launcher asked for a stop, the role got SIGTERM, or the launcher is gone (its fork server, this
    role's parent, exits with it; a pid that changes is never reused for the old parent, unlike a pid watched). In
    a process that start_role did not start (a test's own), only the first two."""
    return _terminated or stop_event.is_set() or (_parent is not None and os.getppid() != _parent)


class Every:
    """A cheap timer for 'do this every N seconds' inside a hot loop."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._next = time.monotonic() + seconds

    def due(self) -> bool:
        now = time.monotonic()
        if now >= self._next:
            self._next = now + self.seconds
            return True
        return False
