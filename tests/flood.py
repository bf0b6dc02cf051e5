"""Floods of loopback connections that hold a server's files, as a user of the host could open them: raw tcp
connections that never finish a request or a handshake (:class:`Slowloris`), and the count a process holds of them
(:func:`established`). tests/security/test_dashboard_flood.py and test_gate_flood.py use them."""

from __future__ import annotations

import select
import socket
import threading
import time

import psutil


class Slowloris:
    """``count`` connections to ``port`` that never finish a request: every ``every_s`` each open one sends ``byte``
    (one more byte of a header line; b"": nothing, an idle connection that never starts its handshake), and one the
    server has closed is opened again. A few handshakes at a time, so that the server's short backlog drops none (a
    dropped one is tried again by the kernel only a second later)."""

    HANDSHAKES = 4

    def __init__(self, port: int, count: int, every_s: float = 2.0, byte: bytes = b"X") -> None:
        self.port, self.count, self.every_s, self.byte = port, count, every_s, byte
        self.held: list[socket.socket] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="slowloris", daemon=True)

    def _open(self) -> socket.socket:
        sock = socket.socket()
        sock.setblocking(False)
        sock.connect_ex(("127.0.0.1", self.port))  # under way: the kernel ends the handshake
        return sock

    def _beat(self) -> None:
        """One byte more on each held connection; one the server closed is let go."""
        kept = []
        for sock in self.held:
            try:
                gone = not sock.recv(4096)  # b"": the server closed it (an answer would be as good as closed)
            except BlockingIOError:
                gone = False
            except OSError:
                gone = True
            if not gone and self.byte:
                try:
                    sock.send(self.byte)
                except BlockingIOError:
                    pass
                except OSError:
                    gone = True
            if gone:
                sock.close()
            else:
                kept.append(sock)
        self.held = kept

    def _run(self) -> None:
        connecting: list[socket.socket] = []
        beat = time.monotonic() + self.every_s
        while not self.stop.is_set():
            while len(self.held) + len(connecting) < self.count and len(connecting) < self.HANDSHAKES:
                connecting.append(self._open())
            _, done, _ = select.select([], connecting, [], 0.05)
            for sock in done:
                connecting.remove(sock)
                if sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR):
                    sock.close()
                else:
                    self.held.append(sock)
            if time.monotonic() >= beat:
                self._beat()
                beat = time.monotonic() + self.every_s
        for sock in connecting:
            sock.close()

    def __enter__(self) -> Slowloris:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join()
        for sock in self.held:
            sock.close()


def established(pid: int, port: int) -> int:
    """Process ``pid``'s own established connections on its local ``port`` (what it holds a file for)."""
    conns = psutil.Process(pid).net_connections("tcp")
    return sum(c.laddr.port == port and c.status == psutil.CONN_ESTABLISHED for c in conns)
