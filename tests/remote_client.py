"""A remote worker played by hand: a DEALER on a run's gate that joins and sends RemoteData, so that a test can send
what a real zrl-worker never would (tests/test_remote.py against the ingest alone, tests/security/ against a run)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import zmq
import zstandard
from conftest import unroll_message, wait_until

from zrl import protocol, transport

M, T = 2, 5  # envs per worker, unroll length


class Client:
    def __init__(self, sock: zmq.Socket) -> None:
        self.sock = sock

    def send(self, msg, timeout_ms: int = 3000) -> bool:
        """Whether the message left: a DEALER whose handshake failed (no key, a key not authorized) may hold no
        connection at the moment, and a send then waits for one, so it waits ``timeout_ms`` at most."""
        return transport.send(self.sock, msg if isinstance(msg, bytes) else msg.encode(), timeout_ms)

    def answer(self, timeout_ms: int = 3000):
        if not self.sock.poll(timeout_ms, zmq.POLLIN):
            return None
        return protocol.decode(self.sock.recv())

    def ask(self, msg, timeout_ms: int = 3000):
        if not self.send(msg):
            return None  # nothing went out: nothing is answered
        return self.answer(timeout_ms)

    def join(self, run: str = "run_a", envs_per_worker: int = M):
        return self.ask(protocol.Join(run=run, host="b", pid=1, envs_per_worker=envs_per_worker, zrl_version="0"))


def slots(first: int, count: int) -> dict[str, np.ndarray]:
    """``count`` ring slots of recognisable content: frame n holds n + env / 10 everywhere, episode step n."""
    n = np.arange(first, first + count)
    frame = (n[:, None, None] + np.arange(M)[None, :, None] / 10 + np.zeros(4)).astype(np.float32)
    return {"frame": frame, "episode_step": np.repeat(n[:, None], M, axis=1).astype(np.int32)}


def deflate(fields: dict[str, np.ndarray]) -> np.ndarray:
    stream = zstandard.ZstdCompressor(level=1).compressobj()
    data = b"".join([stream.compress(np.ascontiguousarray(fields[k])) for k in ("frame", "episode_step")])
    return np.frombuffer(data + stream.flush(), np.uint8)


def remote_data(seq: int, first: int, count: int, unroll_first: int, worker_id: int = 1, frames=None, message=None):
    """What a remote worker sends: ``count`` slots from its frame ``first`` and an unroll from ``unroll_first``."""
    if message is None:
        message = unroll_message(num_envs=M, length=T, num_actions=2, worker_id=worker_id, first_frame=unroll_first)
        message = message.encode()
    return protocol.RemoteData(
        seq=seq,
        first_frame=first,
        count=count,
        frames=deflate(slots(first, count)) if frames is None else frames,
        message=np.frombuffer(message, np.uint8),
    )


def keyed_dealer(ctx: zmq.Context, gate: str, keys: str) -> zmq.Socket:
    """A DEALER on a run's gate with the client keys of folder ``keys`` (what zrl-worker --keys takes)."""
    client = transport.load_client_keys(keys)
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.curve_publickey, sock.curve_secretkey = client.client_public, client.client_secret
    sock.curve_serverkey = client.server_public
    sock.connect(gate)
    return sock


def connect_words(cwd: Path) -> dict[str, str]:
    """The run under ``cwd``'s connect.txt, once written, as zrl-worker's options: --connect, --keys, --run, and
    "folder", the run's folder."""
    connect = wait_until(lambda: next((cwd / "results").glob("*/connect.txt"), None), 120, "connect.txt")
    line = wait_until(connect.read_text, 10, "the connect line").split()
    words = {w[2:]: line[i + 1] for i, w in enumerate(line) if w.startswith("--") and i + 1 < len(line)}
    return {**words, "folder": str(connect.parent)}
