"""Implicit quantile networks' numerics (Dabney et al. 2018), with Rainbow's n-step double Q-learning
targets (Hessel et al. 2018), as pure functions of tensors.

Shapes: ``B`` transitions, ``N`` sampled fractions ``taus`` for the online quantiles, ``N'`` for the target
quantiles, ``K`` for acting, ``A`` actions, ``n`` steps of return. Tensors are float32 (fractions, quantiles,
returns, discounts, losses) except actions (integers, ``[B]``) and observations (``[B, *obs]``, a stack of
frames as the network takes it: uint8 frames or float32 vectors).

Per-sample losses are returned unreduced, ``[B]``, so that the learner can weight them by their importance
weights and send them back as new priorities.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch


def cosine_basis(taus: torch.Tensor, embedding_dim: int = 64) -> torch.Tensor:
    """``cos(pi * i * tau)`` for ``i = 0 .. embedding_dim - 1``: ``taus [...]`` to ``[..., embedding_dim]`` of
    their dtype (the IQN paper's embedding before its linear layer and ReLU)."""
    i = torch.arange(embedding_dim, dtype=taus.dtype, device=taus.device)
    return torch.cos(math.pi * i * taus.unsqueeze(-1))


def quantile_huber_loss(
    quantiles: torch.Tensor, taus: torch.Tensor, targets: torch.Tensor, kappa: float = 1.0
) -> torch.Tensor:
    """The quantile Huber loss of ``quantiles [B, N]`` at fractions ``taus [B, N]`` against target samples
    ``targets [B, N']``: ``sum_i mean_j |tau_i - 1{delta_ij < 0}| * L_kappa(delta_ij) / kappa`` with
    ``delta_ij = targets_j - quantiles_i``. Returns ``[B]``. No gradient flows into ``targets``."""
    if quantiles.shape != taus.shape or quantiles.dim() != 2 or targets.dim() != 2 or len(targets) != len(quantiles):
        raise ValueError(
            f"quantiles {tuple(quantiles.shape)}, taus {tuple(taus.shape)}, targets {tuple(targets.shape)}: "
            "want [B, N], [B, N], [B, N']"
        )
    delta = targets.detach().unsqueeze(1) - quantiles.unsqueeze(2)  # [B, N, N']
    abs_delta = delta.abs()
    huber = torch.where(abs_delta <= kappa, 0.5 * delta**2, kappa * (abs_delta - 0.5 * kappa))
    weight = (taus.unsqueeze(2) - (delta.detach() < 0).to(taus.dtype)).abs()
    return (weight * huber / kappa).mean(dim=2).sum(dim=1)


class NStep(NamedTuple):
    returns: torch.Tensor  # [B]: sum_k (prod_{j<k} discounts_j) rewards_k
    bootstrap_discount: torch.Tensor  # [B]: prod_k discounts_k, 0 when the episode ended within the n steps


def nstep_returns(rewards: torch.Tensor, discounts: torch.Tensor) -> NStep:
    """``rewards [B, n]`` and ``discounts [B, n]`` (``gamma``, or 0 at the step that ended the episode) to
    n-step returns and the discount of the bootstrap value. Rewards after an episode's end weigh nothing."""
    if rewards.shape != discounts.shape or rewards.dim() != 2:
        raise ValueError(f"rewards {tuple(rewards.shape)} and discounts {tuple(discounts.shape)}: want [B, n] both")
    ones = torch.ones_like(discounts[:, :1])
    before = torch.cumprod(torch.cat([ones, discounts[:, :-1]], dim=1), dim=1)  # [B, n]: prod_{j<k} d_j
    return NStep((before * rewards).sum(dim=1), before[:, -1] * discounts[:, -1])


def greedy_actions(quantiles: torch.Tensor) -> torch.Tensor:
    """``quantiles [B, K, A]`` to the actions of the largest mean, ``[B]`` int64 (Q = the mean over the K)."""
    return quantiles.mean(dim=1).argmax(dim=1)


def double_q_targets(nstep: NStep, online_next: torch.Tensor, target_next: torch.Tensor) -> torch.Tensor:
    """IQN's n-step double-Q targets ``[B, N']``: the action is chosen by the online network's mean
    quantiles at the n-th next state (``online_next [B, K, A]``) and valued by the target network's
    quantiles there (``target_next [B, N', A]``)."""
    action = greedy_actions(online_next)  # [B]
    chosen = target_next.gather(2, action.view(-1, 1, 1).expand(-1, target_next.shape[1], 1)).squeeze(2)
    return (nstep.returns.unsqueeze(1) + nstep.bootstrap_discount.unsqueeze(1) * chosen).detach()


def iqn_losses(
    online,
    target,
    obs: torch.Tensor,
    actions: torch.Tensor,
    nstep: NStep,
    next_obs: torch.Tensor,
    n: int = 64,
    n_target: int = 64,
    k: int = 32,
    kappa: float = 1.0,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Per-transition IQN losses ``[B]`` for ``obs [B, ...]``, ``actions [B]`` and the n-th next observations
    ``next_obs``: the online quantiles of the taken action at ``n`` fractions against the n-step double-Q
    targets at ``n_target`` (action chosen by the online network's mean of ``k`` quantiles, valued by the
    target network). ``online`` and ``target`` are callables ``(obs, taus [B, N]) -> quantiles [B, N, A]``.
    The gradient flows into the online network's quantiles only: the learner weights these losses by the
    importance weights, and their power omega is a transition's new priority (the worker's first one too:
    ``zrl.algos.apex.first_priorities``)."""
    b = len(obs)
    device = obs.device

    def fractions(count: int) -> torch.Tensor:
        if generator is None:
            return torch.rand(b, count, device=device)
        return torch.rand(b, count, generator=generator, device=generator.device).to(device)

    taus = fractions(n)
    quantiles = online(obs, taus)  # [B, N, A]
    taken = quantiles.gather(2, actions.long().view(b, 1, 1).expand(b, n, 1)).squeeze(2)  # [B, N]
    with torch.no_grad():
        online_next = online(next_obs, fractions(k))  # [B, K, A]
        target_next = target(next_obs, fractions(n_target))  # [B, N', A]
        targets = double_q_targets(nstep, online_next, target_next)
    return quantile_huber_loss(taken, taus, targets, kappa)
