"""A worker's env, ring and sockets, which the one worker loop (zrl/roles/worker.py) runs on; a remote worker's link
(zrl/roles/remote.py) takes its place there."""

from __future__ import annotations

import contextlib
import os
import time

import zmq

from shm.ring import Ring
from zrl import protocol, transport
from zrl.roles.reporting import StatsOut
from zrl.roles.run_wiring import RunWiring
from zrl.roles.weights_feed import WeightsFeed


def worker_env(cfg, worker_id: int, offset: int):
    """Worker ``worker_id``'s vector env, seeded apart from every other worker's (``offset`` moves a resumed or
    restarted worker onto new games)."""
    from zrl.envs import make_vector_env

    m = cfg.workers.envs_per_worker
    return make_vector_env(cfg.env, m, seed=(cfg.run.seed * 100_003 + worker_id * m + offset) % 2**31)


class WorkerLink:
    """A worker's env, ring and sockets, closed together: its vector env (seeded apart per worker; ``offset``
    moves a resumed or restarted worker onto new games), the ring it writes, a PUSH for its experience
    (``out``), a PUSH for its stats and episodes, and its weights feed."""

    def __init__(self, worker_id: int, cfg, wiring: RunWiring, stop_event, offset: int) -> None:
        self.worker_id, self.frames_per_step = worker_id, wiring.frames_per_step
        with contextlib.ExitStack() as opened:
            self.env = worker_env(cfg, worker_id, offset)
            opened.callback(self.env.close)
            self.ring = Ring.attach(wiring.ring_names[worker_id], wiring.ring_spec)
            opened.callback(self.ring.close)
            self.ctx = transport.context(cfg.transport, binds=False)
            opened.callback(transport.term, self.ctx)
            self.out = transport.socket(self.ctx, zmq.PUSH, hwm=cfg.transport.hwm, connect=wiring.endpoints.unrolls)
            opened.callback(self.out.close)
            self.stats = StatsOut.connect(self.ctx, wiring, hwm=1000)
            opened.callback(self.stats.close)
            self.weights = WeightsFeed(self.ctx, wiring, worker_id, cfg.transport.poll_timeout_ms, stop_event)
            self._close = opened.pop_all().close

    def send(self, message: bytes, timeout_ms: int) -> bool:
        """Send one of the actor's messages to the broker; False if it stayed full for ``timeout_ms``."""
        return transport.send(self.out, message, timeout_ms)

    def send_stats(
        self, env_steps: int, sent: int, policy_version: int, weight_updates: int, timing: dict[str, float]
    ) -> None:
        """The worker's heartbeat: its counts and where its time went (``timing``'s step, inference,
        ring_write, send and weights_wait seconds)."""
        self.stats.send(
            protocol.WorkerStats(
                worker_id=self.worker_id,
                pid=os.getpid(),
                time=time.time(),
                env_frames=env_steps * self.frames_per_step,
                env_steps=env_steps,
                unrolls_sent=sent,
                policy_version=policy_version,
                weight_updates=weight_updates,
                step_time_s=timing["step"],
                inference_time_s=timing["inference"],
                ring_write_time_s=timing["ring_write"],
                send_time_s=timing["send"],
                weights_wait_time_s=timing["weights_wait"],
            ).encode(),
        )

    def close(self) -> None:
        self.weights.close()
        self._close()

    def __enter__(self) -> WorkerLink:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
