"""The broker: receives unroll descriptors, keeps the replay index, and sends batches ahead of the
learner under credit-based flow control: the learner grants ``prefetch_batches`` credits and one more
per batch it takes, and the broker sends one batch per credit, made at that moment from the replay. So at most ``prefetch_batches`` batches wait for the learner, wherever they wait (ZeroMQ's
high-water marks count messages, not the bytes in a unix socket's buffer). The broker never touches
frames, only the rings' generation stamps, to drop units whose frames a ring has already overwritten."""

from __future__ import annotations

import os
import time
import numpy as np
import zmq

from shm.ring import Ring

from zrl import protocol, transport
from zrl.config import Config
from zrl.replay.queue import QueueReplay, Unit
from zrl.roles.common import Every, RunWiring, should_stop, start_role


def units_of(msg: protocol.Unroll) -> list[Unit]:
    """Split one worker message into its M per-env units."""
    return [
        Unit(msg.worker_id, i, msg.first_frame, msg.policy_version, msg.actions[i], msg.rewards[i],
             msg.discounts[i], msg.behaviour_logits[i])
        for i in range(msg.num_envs)
    ]  # fmt: skip


def make_batch(batch_id: int, units: list[Unit]) -> protocol.Batch:
    """Units sorted by worker, so that the learner gathers each ring's frames into one contiguous block."""
    units = sorted(units, key=lambda u: u.worker_id)
    return protocol.Batch(
        batch_id=batch_id,
        length=len(units[0].actions),
        worker_ids=np.array([u.worker_id for u in units], np.int32),
        env_index=np.array([u.env_index for u in units], np.int32),
        first_frame=np.array([u.first_frame for u in units], np.int64),
        policy_versions=np.array([u.policy_version for u in units], np.int64),
        actions=np.stack([u.actions for u in units]),
        rewards=np.stack([u.rewards for u in units]),
        discounts=np.stack([u.discounts for u in units]),
        behaviour_logits=np.stack([u.behaviour_logits for u in units]),
    )


class Broker:
    """The broker's state and rules, separate from its sockets so a test can drive it directly."""

    def __init__(self, cfg: Config, rings: list[Ring]) -> None:
        self.batch_size = cfg.learner.batch_size
        self.history = cfg.env.frame_stack - 1
        self.replay = QueueReplay(cfg.replay[0].capacity)
        self.rings = rings
        self.next_seq: dict[int, int] = {}
        self.unrolls_received = 0
        self.dropped_stale = 0
        self.seq_gaps = 0

    def insert(self, msg: protocol.Unroll) -> None:
        expected = self.next_seq.get(msg.worker_id, 0)
        if msg.seq > expected:  # messages lost in flight (libzmq can drop a dying PUSH's last ones)
            self.seq_gaps += msg.seq - expected
        self.next_seq[msg.worker_id] = msg.seq + 1
        self.unrolls_received += msg.num_envs
        for unit in units_of(msg):
            self.replay.add(unit)

    def _fresh(self, unit: Unit) -> bool:
        oldest = np.array([max(unit.first_frame - self.history, 0)], np.int64)
        return bool(self.rings[unit.worker_id].valid(oldest)[0])

    def next_units(self) -> list[Unit] | None:
        """B units whose frames are still in their rings, or None if too few are held.
        Units that cannot be sent go back with ``self.replay.put_back(units)``."""
        if len(self.replay) < self.batch_size:
            return None
        units: list[Unit] = []
        while len(units) < self.batch_size and len(self.replay):
            for unit in self.replay.take(self.batch_size - len(units)):
                if self._fresh(unit):
                    units.append(unit)
                else:
                    self.dropped_stale += 1
        if len(units) < self.batch_size:
            self.replay.put_back(units)
            return None
        return units


def run(cfg: Config, wiring: RunWiring, stop_event) -> None:
    start_role("zrl-broker", wiring.launcher_pid)
    rings = [Ring.attach(name, wiring.ring_spec) for name in wiring.ring_names]
    broker = Broker(cfg, rings)
    poll_ms = cfg.transport.poll_timeout_ms
    prefetch = cfg.broker.prefetch_batches
    ctx = zmq.Context()
    unrolls = transport.socket(ctx, zmq.PULL, hwm=cfg.transport.hwm, bind=wiring.endpoints.unrolls)
    batches = transport.socket(ctx, zmq.PUSH, hwm=prefetch, bind=wiring.endpoints.batches)
    credits_sock = transport.socket(ctx, zmq.PULL, hwm=1000, bind=wiring.endpoints.credits)
    stats = transport.socket(ctx, zmq.PUSH, hwm=1000, connect=wiring.endpoints.stats)
    poller = zmq.Poller()
    poller.register(unrolls, zmq.POLLIN)
    poller.register(credits_sock, zmq.POLLIN)
    decode_errors = batches_sent = credits = credits_granted = 0
    report = Every(1.0)

    def decoded(data: bytes, kind: type):
        nonlocal decode_errors
        try:
            msg = protocol.decode(data)
            if isinstance(msg, kind):
                return msg
        except protocol.ProtocolError:
            pass
        decode_errors += 1
        return None

    try:
        while not should_stop(stop_event, wiring.launcher_pid):
            poller.poll(poll_ms)
            while (data := transport.recv(credits_sock, 0)) is not None:
                if (credit := decoded(data, protocol.Credit)) is not None and credit.batches > 0:
                    credits += credit.batches
                    credits_granted += credit.batches
            for _ in range(1024):
                data = transport.recv(unrolls, 0)
                if data is None:
                    break
                if (msg := decoded(data, protocol.Unroll)) is not None:
                    broker.insert(msg)
            while credits > 0:
                units = broker.next_units()
                if units is None:
                    break
                if not transport.send(batches, make_batch(batches_sent + 1, units).encode(), poll_ms):
                    broker.replay.put_back(units)  # the learner is not connected (yet, or any more)
                    break
                credits -= 1
                batches_sent += 1
            if report.due():
                transport.send_nowait(stats, protocol.BrokerStats(
                    pid=os.getpid(), time=time.time(), unrolls_received=broker.unrolls_received,
                    unrolls_dropped_stale=broker.dropped_stale,
                    unrolls_dropped_full=broker.replay.dropped_full,
                    seq_gaps=broker.seq_gaps, decode_errors=decode_errors, batches_sent=batches_sent,
                    replay_size=len(broker.replay),
                    ready_batches=batches_sent - max(0, credits_granted - prefetch),
                ).encode())  # fmt: skip
    finally:
        for sock in (unrolls, batches, credits_sock, stats):
            sock.close()
        ctx.term()
        for ring in rings:
            ring.close()
