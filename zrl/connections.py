"""A cap on the connections a bound tcp socket holds, and room for them in the process's file limit.

libzmq accepts every connection that reaches a bound tcp socket, holds each in a file of its own, and has no option
that caps how many (nor one that pauses accepting: unbinding drops every connection the socket accepted). Idle ones
cost nothing to open, so that a flood of them, from anyone who can reach the port, would use up the process's files:
libzmq then retries the accept in a busy loop, and nothing more gets in. A :class:`ConnectionCap` counts the socket's
connections from its monitor's accepts and disconnects, and past its cap shuts down, under libzmq, the oldest of those
its owner does not protect (for the ingest's gate: a joined worker's). The oldest go first, so that a flood that
connects again at once still leaves each newcomer the time the cap's worth of new connections takes to arrive: enough
for a real worker to handshake and join, after which it is protected.
"""

from __future__ import annotations

import os
import resource
import socket
import stat
import time
from collections.abc import Collection

import zmq
from zmq.utils.monitor import recv_monitor_message

EVENTS_AT_MOST = 10_000  # monitor events read per turn, so that a flood cannot keep its owner's loop to itself


class ConnectionCap:
    """At most ``cap`` connections held by ``sock`` (a bound tcp socket), give or take what arrives between two turns,
    counted from ``sock``'s monitor events; call :meth:`turn` in the owner's loop, :meth:`close` before the socket's."""

    def __init__(self, sock: zmq.Socket, cap: int) -> None:
        self.cap = cap
        self.monitor = sock.get_monitor_socket(zmq.EVENT_ACCEPTED | zmq.EVENT_DISCONNECTED)
        self.monitor.setsockopt(zmq.LINGER, 0)
        self._sock = sock
        # each connection's file, with its inode (so that a file number libzmq has closed and used again for another
        # file is never hung up in its place) and when it was accepted
        self.held: dict[int, tuple[int, float]] = {}
        self.hung_up: set[int] = set()  # files shut down, until libzmq says they are closed
        self.hangups = 0

    def count(self) -> int:
        return len(self.held) - len(self.hung_up)

    def turn(self, protected: Collection[int] = ()) -> int:
        """Take the monitor's news, then hang up the oldest connections past the cap, never one in ``protected``
        (files, as ``zmq.SRCFD`` names them); the number hung up."""
        self._read_events()
        over = self.count() - self.cap
        if over <= 0:
            return 0
        waiting = sorted(
            (at, fd) for fd, (_, at) in self.held.items() if fd not in self.hung_up and fd not in protected
        )
        for _, fd in waiting[:over]:
            self._hang_up(fd)
        done = min(over, len(waiting))
        self.hangups += done
        return done

    def close(self) -> None:
        try:
            self._sock.disable_monitor()
        except zmq.ZMQError:
            pass
        self.monitor.close()

    def _read_events(self) -> None:
        for _ in range(EVENTS_AT_MOST):
            try:
                event = recv_monitor_message(self.monitor, zmq.NOBLOCK)
            except zmq.Again:
                return
            fd = event["value"]
            if event["event"] == zmq.EVENT_ACCEPTED:
                self.held[fd] = (_inode(fd), time.monotonic())
            else:  # disconnected (the peer left, its handshake timed out, or it was hung up)
                self.held.pop(fd, None)
                self.hung_up.discard(fd)

    def _hang_up(self, fd: int) -> None:
        """Shut the connection down under libzmq, which sees it end and closes it (its disconnect comes later)."""
        inode, _ = self.held[fd]
        self.hung_up.add(fd)
        if inode < 0 or _inode(fd) != inode:
            return  # closed already: its disconnect is on its way
        conn = socket.socket(fileno=fd)  # a view of libzmq's file, not a copy: no new file, even at the limit
        try:
            conn.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        finally:
            conn.detach()  # the file stays libzmq's to close


def source_fd(frame: zmq.Frame) -> int:
    """The file of the connection a received frame came on (``zmq.SRCFD``), or -1 where this libzmq cannot say."""
    try:
        return frame.get(zmq.SRCFD)
    except (zmq.ZMQError, AttributeError):
        return -1


def _inode(fd: int) -> int:
    """The socket behind file ``fd``, or -1 when it is closed or no socket."""
    try:
        st = os.fstat(fd)
    except OSError:
        return -1
    return st.st_ino if stat.S_ISSOCK(st.st_mode) else -1


def raise_file_limit() -> int:
    """Lift this process's soft limit of open files to its hard limit, so that a cap's lag, not the soft limit (often
    1024), bounds what a flood of connections takes before it is hung up; the soft limit now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):
            pass
    return soft
