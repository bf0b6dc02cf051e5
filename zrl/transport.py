"""ZeroMQ sockets under zrl's rules.

Every socket sets LINGER=0 and explicit high-water marks; every receive polls with a timeout so that
the caller can check whether it should stop. One context per process, made after spawn. Local
endpoints are unix sockets in the run's private folder (mode 0700) or tcp on 127.0.0.1.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import zmq

from zrl.config import TransportConfig

ENDPOINT_NAMES = ("unrolls", "batches", "credits", "weights", "weights_req", "stats")


@dataclass(frozen=True)
class Endpoints:
    """The addresses of one run's sockets; the launcher picks them, every role connects or binds."""

    unrolls: str  # workers PUSH -> broker PULL (bind)
    batches: str  # broker PUSH (bind) -> learner PULL
    credits: str  # learner PUSH -> broker PULL (bind): room for more batches
    weights: str  # learner PUB (bind) -> workers SUB
    weights_req: str  # workers DEALER -> learner ROUTER (bind): current weights on (re)start
    stats: str  # every role PUSH -> launcher PULL (bind): stats, heartbeats, episodes


def make_private_dir(base: str, name: str) -> str:
    """A folder only this user can enter, for ipc socket files; short enough for unix socket paths."""
    path = os.path.join(base, name)
    os.mkdir(path, 0o700)
    os.chmod(path, 0o700)
    return path


def plan_endpoints(cfg: TransportConfig, private_dir: str) -> Endpoints:
    """ipc files in the private folder, or tcp ports on the bind host chosen by the OS now."""
    if cfg.kind == "ipc":
        return Endpoints(**{n: f"ipc://{os.path.join(private_dir, n)}" for n in ENDPOINT_NAMES})
    # Ports the OS hands out now; they are released at once for the roles to bind. Another program
    # could take one in between: the role that binds then fails, and the run stops with its error.
    ctx = zmq.Context()
    ports = {}
    probes = []
    try:
        for n in ENDPOINT_NAMES:
            sock = ctx.socket(zmq.PULL)
            sock.setsockopt(zmq.LINGER, 0)
            probes.append(sock)
            ports[n] = sock.bind_to_random_port(f"tcp://{cfg.bind_host}")
    finally:
        for sock in probes:
            sock.close()
        ctx.term()
    return Endpoints(**{n: f"tcp://{cfg.bind_host}:{p}" for n, p in ports.items()})


def socket(ctx: zmq.Context, kind: int, *, hwm: int, bind: str | None = None, connect: str | None = None) -> zmq.Socket:
    """A socket with LINGER=0 and both high-water marks set, bound or connected."""
    sock = ctx.socket(kind)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.SNDHWM, hwm)
    sock.setsockopt(zmq.RCVHWM, hwm)
    if kind == zmq.SUB:
        sock.setsockopt(zmq.CONFLATE, 1)  # keep only the newest weights
        sock.setsockopt(zmq.SUBSCRIBE, b"")
    if bind is not None:
        sock.bind(bind)
    if connect is not None:
        sock.connect(connect)
    return sock


def recv(sock: zmq.Socket, timeout_ms: int) -> bytes | None:
    """One message, or None when nothing arrived within the timeout (a waiting message costs no poll)."""
    try:
        return sock.recv(zmq.NOBLOCK)
    except zmq.Again:
        pass
    if timeout_ms != 0 and sock.poll(timeout_ms, zmq.POLLIN):
        try:
            return sock.recv(zmq.NOBLOCK)
        except zmq.Again:
            return None
    return None


def send(sock: zmq.Socket, data: bytes, timeout_ms: int) -> bool:
    """Send unless the peer stays full for the whole timeout; False means not sent (backpressure)."""
    try:
        sock.send(data, zmq.NOBLOCK, copy=False)
        return True
    except zmq.Again:
        pass
    if timeout_ms != 0 and sock.poll(timeout_ms, zmq.POLLOUT):
        try:
            sock.send(data, zmq.NOBLOCK, copy=False)
            return True
        except zmq.Again:
            return False
    return False


def send_nowait(sock: zmq.Socket, data: bytes) -> bool:
    """Send if the socket has room now; stats are dropped rather than ever blocking a hot loop."""
    try:
        sock.send(data, zmq.NOBLOCK)
        return True
    except zmq.Again:
        return False
