"""What a role checks of the messages it receives, counting what it refuses: undecodable or misfit messages
(Decoder), worker messages lost in flight (SeqGaps), and frame counts past a worker's ring (frames_past_ring)."""

from __future__ import annotations

from shm.ring import Ring
from zrl import protocol


class SeqGaps:
    """Each worker's next message number, and how many numbers were skipped: messages lost in flight (libzmq can
    drop a dying PUSH's last ones). A restarted worker numbers from 0 again, which is no gap."""

    def __init__(self) -> None:
        self.next: dict[int, int] = {}
        self.count = 0

    def see(self, worker_id: int, seq: int) -> None:
        expected = self.next.get(worker_id, 0)
        if seq > expected:
            self.count += seq - expected
        self.next[worker_id] = seq + 1


class Decoder:
    """``protocol.decode`` for a role's inbound sockets, counting what it refuses (its stats' decode_errors):
    undecodable bytes, a message of another kind than the socket carries, and any the role finds misfit."""

    def __init__(self) -> None:
        self.errors = 0

    def __call__(self, data: bytes | bytearray | memoryview, kind: type | tuple[type, ...]):
        """The message if ``data`` decodes to a ``kind``; else None, counted."""
        try:
            message = protocol.decode(data)
        except protocol.ProtocolError:
            message = None
        if isinstance(message, kind):
            return message
        self.errors += 1
        return None

    def refuse(self) -> None:
        """Count a well-formed message the role cannot use (forged or from another run)."""
        self.errors += 1


def frames_past_ring(worker_id: int, env_frames: int, rings: list[Ring], frames_per_slot: int) -> bool:
    """Whether a worker's message claims more env frames than its ring has slots for in this launch (a forged
    or damaged count, which would otherwise end the run's budget or pacing). A worker writes each env step's
    frames, one slot of ``frames_per_slot`` env frames, before it sends the message that counts them, and it
    counts this launch's frames only. A worker id outside the rings is left to the message's other checks."""
    return 0 <= worker_id < len(rings) and env_frames > rings[worker_id].head * frames_per_slot
