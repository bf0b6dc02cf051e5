"""Environments that fail on purpose, for the fault tests. A zrl-launch started with ``tests/faults`` on its
PYTHONPATH finds them by the Gymnasium id ``zrl_fault_envs:<Name>``."""

from __future__ import annotations

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
