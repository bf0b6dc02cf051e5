"""How a role reports to the launcher: its stats socket (StatsOut), its traceback when it dies (crash_report), and a
worker's finished episodes (EpisodeReporter)."""

from __future__ import annotations

import contextlib
import os
import time
import traceback

import numpy as np
import zmq

from zrl import protocol, transport
from zrl.roles.run_wiring import RunWiring


class StatsOut:
    """A role's stats socket: each message goes out behind the run's stats token (a remote worker's, on its gate,
    without one: the ingest passes its reports on behind its own)."""

    def __init__(self, sock: zmq.Socket, token: bytes | None) -> None:
        self.sock, self.token = sock, token

    @classmethod
    def connect(cls, ctx: zmq.Context, wiring: RunWiring, hwm: int) -> StatsOut:
        return cls(transport.socket(ctx, zmq.PUSH, hwm=hwm, connect=wiring.endpoints.stats), wiring.stats_token)

    def _frames(self, data: bytes) -> list:
        return [data] if self.token is None else [self.token, data]

    def send(self, data: bytes) -> bool:
        """Send if the socket has room now: stats are dropped rather than ever block a hot loop."""
        try:
            self.sock.send_multipart(self._frames(data), zmq.NOBLOCK)
            return True
        except zmq.Again:
            return False

    def send_waiting(self, data: bytes, timeout_ms: int) -> bool:
        """Send, waiting up to ``timeout_ms`` for room (a result that must arrive)."""
        return self.send(data) or bool(self.sock.poll(timeout_ms, zmq.POLLOUT)) and self.send(data)

    def linger(self, ms: int) -> None:
        self.sock.setsockopt(zmq.LINGER, ms)

    def close(self) -> None:
        self.sock.close()


@contextlib.contextmanager
def crash_report(role: str, wiring: RunWiring):
    """Run a role's body; if it dies of an exception, send its traceback to the launcher first (best effort,
    on a socket of its own, since the role's sockets are closed by then), then let the exception go on."""
    try:
        yield
    except Exception:
        text = traceback.format_exc()[-protocol.TRACEBACK_CHARS :].encode("utf-8", "replace").decode("utf-8")
        try:
            message = protocol.RoleError(role=role, pid=os.getpid(), traceback=text).encode()
            ctx = zmq.Context()
            sock = StatsOut.connect(ctx, wiring, hwm=10)
            try:
                sock.linger(2000)  # long enough for the message to leave
                sock.send(message)
            finally:
                sock.close()
                ctx.term()
        except Exception:  # the report is best effort; the role's own exception is what goes on
            pass
        raise


class EpisodeReporter:
    """A worker's finished episodes, sent to the launcher with their SABER-style scores (capped at 5 and at 30
    minutes of play, and uncapped)."""

    def __init__(self, stats: StatsOut, worker_id: int, num_envs: int, frames_per_step: int) -> None:
        from zrl.scores import SaberEpisodes

        self.stats, self.worker_id, self.frames_per_step = stats, worker_id, frames_per_step
        self.saber = SaberEpisodes(num_envs)

    def step(self, raw_rewards: np.ndarray, game_over: np.ndarray, env_frames: int, send: bool = True) -> None:
        """Add one step of every env; send the episodes it ends (unless ``send`` is False: a replay of steps
        whose episodes were reported before)."""
        for env, score_5, score_30, score, frames in self.saber.step(raw_rewards, self.frames_per_step, game_over):
            if send:
                self.stats.send(
                    protocol.Episode(
                        worker_id=self.worker_id,
                        pid=os.getpid(),
                        env_index=env,
                        raw_return=score,
                        length_frames=frames,
                        length_env_steps=frames // self.frames_per_step,
                        env_frames=env_frames,
                        wall_time=time.time(),
                        score_5min=score_5,
                        score_30min=score_30,
                    ).encode(),
                )
