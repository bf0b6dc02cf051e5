"""Ape-X's per-worker exploration and n-step transitions (Horgan et al. 2018), and the per-transition losses
of the Rainbow head that the config names (IQN or C51), which the learner minimises and whose power omega
is a transition's priority."""

from __future__ import annotations

import numpy as np
import torch

from zrl.algos.c51 import c51_losses
from zrl.algos.iqn import NStep, iqn_losses


def transition_losses(
    online,
    target,
    obs: torch.Tensor,
    actions: torch.Tensor,
    nstep: NStep,
    next_obs: torch.Tensor,
    apex,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Per-transition losses ``[B]`` float32 of ``apex.head`` (an ApexConfig's): IQN's quantile Huber losses
    with its N, N', K and kappa, or C51's cross-entropies on the online network's support. ``online`` and
    ``target`` are the networks (``zrl.models.iqn``'s IQNNet or C51Net); ``obs`` and ``next_obs`` the stacked
    observations ``[B, *obs]`` of s_t and s_{t+n} (uint8 frames or float32 vectors), ``actions`` ``[B]``
    integers, ``nstep`` float32 ``[B]`` columns."""
    if apex.head == "c51":
        return c51_losses(online, target, obs, actions, nstep, next_obs, online.support)
    return iqn_losses(
        online,
        target,
        obs,
        actions,
        nstep,
        next_obs,
        n=apex.quantiles,
        n_target=apex.target_quantiles,
        k=apex.acting_quantiles,
        kappa=apex.kappa,
        generator=generator,
    )


def first_priorities(
    net,
    obs: torch.Tensor,
    actions: torch.Tensor,
    nstep: NStep,
    next_obs: torch.Tensor,
    apex,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """A worker's priorities for its transitions, ``loss ** apex.priority_exponent`` ``[B]`` float32, from the
    arguments of :func:`transition_losses`: its one network copy stands in for both the online and the target
    network (Ape-X's actors hold no target network)."""
    with torch.no_grad():
        losses = transition_losses(net, net, obs, actions, nstep, next_obs, apex, generator)
    return losses.clamp_min(0).pow(apex.priority_exponent)


def worker_epsilons(workers: int, eps: float = 0.4, alpha: float = 7.0) -> np.ndarray:
    """``eps_i = eps ** (1 + alpha * i / (N - 1))`` for worker i of N (a single worker gets ``eps``): ``[N]``
    float64."""
    if workers < 1:
        raise ValueError(f"workers must be positive, got {workers}")
    if workers == 1:
        return np.array([eps])
    return eps ** (1 + alpha * np.arange(workers) / (workers - 1))


class NStepBuilder:
    """A worker's n-step transitions, as frame numbers in its ring, for M envs at once.

    Each env step hands in, per env, the frame number of the observation acted on, the action, the reward and
    the discount that followed (``gamma``, 0 where the step ended the episode) and whether the game is over
    (a reset follows). A transition for step t is complete once s_{t+n} is written, or as soon as the
    episode ends within the n steps (its bootstrap discount is then 0 and ``next_frame`` is unused). A
    window that a truncation cuts (the game is over without a terminal discount) is dropped: its last state
    was never written.
    """

    def __init__(self, num_envs: int, n: int) -> None:
        if n < 1:
            raise ValueError(f"n must be at least 1, got {n}")
        self.num_envs, self.n = num_envs, n
        m = num_envs
        self._frame = np.zeros((n, m), np.int64)
        self._action = np.zeros((n, m), np.int32)
        self._reward = np.zeros((n, m), np.float32)
        self._discount = np.zeros((n, m), np.float32)
        self._count = np.zeros(m, np.int64)  # steps held per env, at most n

    def step(
        self,
        frames: np.ndarray,
        actions: np.ndarray,
        rewards: np.ndarray,
        discounts: np.ndarray,
        game_over: np.ndarray,
        next_frames: np.ndarray,
    ) -> dict[str, np.ndarray]:
        """Add one step of every env (``frames`` the observations acted on, ``next_frames`` the frames
        written after the step: the next observation, or the new episode's first after a reset) and return
        the transitions it completes, as columns of equal length (``env_index``, ``frame``, ``action``,
        ``nstep_return``, ``bootstrap_discount``, ``next_frame``).

        Each argument is ``[M]``, one entry per env: ``frames`` and ``next_frames`` integer ring frame numbers
        (kept as int64), ``actions`` integers (kept as int32), ``rewards`` and ``discounts`` floats (kept as
        float32), ``game_over`` bool. The columns returned are ``[k]`` for the k transitions completed: int32
        ``env_index`` and ``action``, int64 ``frame`` and ``next_frame``, float32 ``nstep_return`` and
        ``bootstrap_discount``."""
        n = self.n
        # Shift in the new step at the end of each env's window.
        for buf, new in (
            (self._frame, frames),
            (self._action, actions),
            (self._reward, rewards),
            (self._discount, discounts),
        ):
            buf[:-1] = buf[1:]
            buf[-1] = new
        self._count = np.minimum(self._count + 1, n)
        out: list[dict[str, np.ndarray]] = []
        ended = np.asarray(discounts) == 0
        truncated = np.asarray(game_over) & ~ended
        full = (self._count == n) & ~truncated
        if full.any():  # the oldest step of a full window now has its n-th successor
            out.append(self._emit(np.flatnonzero(full), 0, np.asarray(next_frames)))
        if ended.any():  # every shorter window of an ended episode is complete too (bootstrap 0)
            envs = np.flatnonzero(ended)
            for start in range(1, n):
                have = envs[self._count[envs] >= n - start]  # windows starting at row ``start`` exist
                if have.size:
                    out.append(self._emit(have, start, np.asarray(next_frames)))
        self._count[ended | np.asarray(game_over)] = 0  # no window spans an episode's (or a life's) end
        if not out:
            return {k: np.zeros(0, d) for k, d in _NSTEP_DTYPES.items()}
        return {k: np.concatenate([o[k] for o in out]) for k in _NSTEP_DTYPES}

    def _emit(self, envs: np.ndarray, start: int, next_frames: np.ndarray) -> dict[str, np.ndarray]:
        """Transitions of ``envs`` for the step at window row ``start`` (rows start..n-1 follow it)."""
        d = self._discount[start:, envs]  # [k, E]
        r = self._reward[start:, envs]
        before = np.cumprod(np.vstack([np.ones((1, len(envs)), np.float32), d[:-1]]), axis=0)
        return {
            "env_index": envs.astype(np.int32),
            "frame": self._frame[start, envs].copy(),
            "action": self._action[start, envs].copy(),
            "nstep_return": (before * r).sum(axis=0).astype(np.float32),
            "bootstrap_discount": (before[-1] * d[-1]).astype(np.float32),
            "next_frame": next_frames[envs].astype(np.int64),
        }


_NSTEP_DTYPES = {
    "env_index": np.int32,
    "frame": np.int64,
    "action": np.int32,
    "nstep_return": np.float32,
    "bootstrap_discount": np.float32,
    "next_frame": np.int64,
}


def epsilon_greedy(q_values: np.ndarray, epsilon: float, rng: np.random.Generator) -> np.ndarray:
    """Actions ``[M]`` int32 for float Q-values ``[M, A]``: uniformly random with probability ``epsilon``,
    greedy (the first of equal maxima) otherwise."""
    q_values = np.asarray(q_values)
    m, a = q_values.shape
    greedy = q_values.argmax(axis=1)
    explore = rng.random(m) < epsilon
    return np.where(explore, rng.integers(0, a, m), greedy).astype(np.int32)
