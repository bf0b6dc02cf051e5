"""Environments that fail on purpose, for the fault tests. A zrl-launch started with ``tests/faults`` on its
PYTHONPATH finds them by the Gymnasium id ``zrl_fault_envs:<Name>``."""

from __future__ import annotations

import os

import gymnasium
import numpy as np
from gymnasium.envs.registration import register


class CrashAtStep(gymnasium.Env):
    """A vector-observation env that raises at a given step of every episode (a bug in a user's env)."""

    observation_space = gymnasium.spaces.Box(-1.0, 1.0, (4,), np.float32)
    action_space = gymnasium.spaces.Discrete(2)

    def __init__(self, crash_step: int = 5) -> None:
        self.crash_step = crash_step
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(4, np.float32), {}

    def step(self, action):
        self.t += 1
        if self.t >= self.crash_step:
            raise RuntimeError(f"injected fault at step {self.t}")
        return np.full(4, self.t / 100, np.float32), 0.0, False, False, {}


register(id="ZrlCrashAtStep5-v0", entry_point=CrashAtStep, kwargs={"crash_step": 5})


class CrashInWorker(CrashAtStep):
    """Builds in the launcher (which probes the env) but raises when a worker builds it: a failure before the
    worker has made any socket of its own."""

    def __init__(self) -> None:
        import multiprocessing

        if multiprocessing.current_process().name.startswith("zrl-worker"):
            raise RuntimeError("injected fault while a worker builds its env")
        super().__init__(crash_step=10**9)


register(id="ZrlCrashInWorker-v0", entry_point=CrashInWorker)


class Identity(gymnasium.Env):
    """A vector-observation env whose every observation says where it came from: ``[instance_hi,
    instance_lo, counter, last_action]``. The instance is a random 24-bit number drawn when the env is made
    (a restarted worker makes new ones), the counter counts this instance's steps, so that the observations
    a worker writes count up by one, and last_action is the action that led to this observation (-1 after a
    reset). All exact in float32."""

    observation_space = gymnasium.spaces.Box(-1.0, float(2**24), (4,), np.float32)
    action_space = gymnasium.spaces.Discrete(3)

    def __init__(self, episode_steps: int = 37) -> None:
        self.instance = int.from_bytes(os.urandom(3), "little")
        self.episode_steps = episode_steps
        self.counter = self.t = 0

    def _obs(self, last_action: int) -> np.ndarray:
        return np.array([self.instance >> 12, self.instance & 0xFFF, self.counter, last_action], np.float32)

    def reset(self, *, seed=None, options=None):
        # The counter does not move: the reset observation takes the place of the final one, which the
        # worker never writes (it writes the next episode's first observation instead).
        super().reset(seed=seed)
        self.t = 0
        return self._obs(-1), {}

    def step(self, action):
        self.t += 1
        self.counter += 1
        return self._obs(int(action)), float(action == 1), self.t >= self.episode_steps, False, {}


register(id="ZrlIdentity-v0", entry_point=Identity)


def _stuck_in_env_step() -> None:
    """An infinite loop in a user's env (it sleeps, so that it does not also starve a 2-core machine)."""
    import time

    while True:
        time.sleep(0.05)


class HangOnce(CrashAtStep):
    """Hangs for ever in step 51 of an episode of the first worker env of a run to get there in its second
    episode or later, after 3 s of play (so its worker has reported in, an episode at least, and is past its
    start-up grace), and never again: the flag file named by ``ZRL_HANG_FLAG`` records that one has hung, so
    that the worker restarted in its place plays on."""

    def __init__(self) -> None:
        import multiprocessing
        import time

        super().__init__(crash_step=10**9)
        self.in_worker = multiprocessing.current_process().name.startswith("zrl-worker")
        self.born = time.monotonic()
        self.episodes = 0

    def reset(self, *, seed=None, options=None):
        self.episodes += 1
        return super().reset(seed=seed, options=options)

    def step(self, action):
        import time

        if self.in_worker and self.episodes >= 2 and self.t == 50 and time.monotonic() - self.born > 3.0:
            try:
                fd = os.open(os.environ["ZRL_HANG_FLAG"], os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                pass
            else:
                os.close(fd)
                _stuck_in_env_step()
        obs, reward, terminated, truncated, info = super().step(action)
        return obs, reward, self.t >= 100, truncated, info


register(id="ZrlHangOnce-v0", entry_point=HangOnce)
