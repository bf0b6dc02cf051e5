"""What the launcher hands every role: where its peers are (RunWiring: endpoints, the rings and their layout), where
the role starts from (WorkerStart, StartFrom), and the stop flag they share (StopFlag)."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

import numpy as np

from shm.ring import RingSpec
from zrl.config import Config
from zrl.transport import Endpoints


def ring_slots(cfg: Config) -> int:
    """Ring slots per worker: workers.ring_slots, or (0, auto) as many as the agent's replay may still need."""
    return cfg.workers.ring_slots or _agent(cfg.algo).ring_slots(cfg)


def make_ring_spec(cfg: Config, spec) -> RingSpec:
    """A worker's ring: per slot one frame of each of its envs and each env's step within its episode."""
    m = cfg.workers.envs_per_worker  # spec: the env's (zrl.envs.EnvSpec)
    return RingSpec(
        ring_slots(cfg), {"frame": ((m, *spec.frame_shape), spec.frame_dtype), "episode_step": ((m,), "int32")}
    )


def _agent(name: str):
    from zrl import agents

    return agents.get(name)


@dataclass(frozen=True)
class RunWiring:
    """Everything a role needs to find its peers: endpoints, ring names and their layout."""

    endpoints: Endpoints
    ring_names: tuple[str, ...]
    ring_spec: RingSpec
    frame_shape: tuple[int, ...]
    frame_dtype: str
    num_actions: int
    frames_per_step: int
    launcher_pid: int
    env_frames_start: int = 0  # env frames of the run before this launch (resume)
    sample_calls: tuple[int, ...] = ()  # each replay's sample calls before this launch (elite lambda annealing)
    replay_from: str = ""  # deterministic resume: the checkpoint whose trained actions the worker plays again first
    replay_dir: str = ""  # run.checkpoint_replay: where the broker writes replay checkpoints ("": it does not)
    replay_state: str = ""  # a replay checkpoint's manifest whose replays the broker starts with ("": empty ones)
    replay_stream: str = ""  # the token of this launch's rings in replay checkpoint file names
    # the first frame of every stats message a role sends: only the launcher's own children know it (it is never on
    # disk, nor on the wire but to the launcher), so a message without it is not from one of its roles, whatever pid
    # it names (StatsOut, Wiring.take_stats)
    stats_token: bytes = b""


def env_spec_text(wiring: RunWiring) -> str:
    """What a remote worker's envs must give, as the Welcome says it and the worker compares it."""
    shape = "x".join(str(n) for n in wiring.frame_shape)
    return f"frames {shape} {np.dtype(wiring.frame_dtype).name}, {wiring.num_actions} actions, {wiring.frames_per_step} frames per step"


def silence_limit(cfg) -> float:
    """How long either side of a remote worker's session waits for the other before it gives the session up (the
    ingest frees the slot; the worker joins again): run.heartbeat_timeout_s, at least 5 s."""
    return max(cfg.run.heartbeat_timeout_s, 5.0)


class StopFlag:
    """The launcher's stop request, shared with the roles: one byte of shared memory, read and written without a
    lock, so that a role killed at any instant cannot leave it held (as a killed reader can an mp.Event's lock,
    which would then block the launcher's own stop). Beside it, how many workers are live (the local ones and
    the remote ones that have joined), which the workers' pacing shares the learner's appetite among."""

    def __init__(self, ctx) -> None:
        self._flag = ctx.RawValue(ctypes.c_bool, False)
        self._live = ctx.RawValue(ctypes.c_int, 0)

    @property
    def live_workers(self) -> int:
        """Workers live now; 0 until the launcher says."""
        return int(self._live.value)

    @live_workers.setter
    def live_workers(self, n: int) -> None:
        self._live.value = n

    def set(self) -> None:
        self._flag.value = True

    def is_set(self) -> bool:
        return bool(self._flag.value)


@dataclass(frozen=True)
class WorkerStart:
    """A worker's place in the run: ``generation`` counts its restarts (its envs are seeded anew each time)
    and ``env_frames`` is what it had played before, so that its counts go on."""

    generation: int = 0
    env_frames: int = 0


@dataclass(frozen=True)
class StartFrom:
    """A checkpoint the learner starts from: ``resume`` continues its counters, optimiser, schedule and RNG
    (the same run); otherwise only its weights are taken, and its optimiser state if ``optimizer``."""

    path: str
    resume: bool = True
    optimizer: bool = True
