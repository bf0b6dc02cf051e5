"""Actor-critic losses for IMPALA-style V-trace learning.

All inputs are time-major: ``[T, B]`` per-step tensors and ``[T, B, A]``
logits over ``A`` discrete actions.

Reduction convention: every loss is a *sum* over time and batch, never a mean;
nothing is divided by T or B (the convention of the IMPALA reference
implementation, Espeholt et al. 2018).  The learning rate therefore scales with
T * B; divide by it at the call site if a mean is wanted.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import torch
import torch.nn.functional as F

from zrl.algos import vtrace

__all__ = [
    "VTraceLoss",
    "action_log_probs",
    "policy_gradient_loss",
    "baseline_loss",
    "entropy_loss",
    "vtrace_loss",
]


def _check_logits(name: str, logits: torch.Tensor) -> None:
    if logits.dim() != 3:
        raise ValueError(
            f"{name} must have rank 3 [T, B, A], got rank {logits.dim()} "
            f"with shape {tuple(logits.shape)}"
        )


def _check_tb(name: str, tensor: torch.Tensor, expected: tuple, against: str) -> None:
    if tensor.dim() != 2:
        raise ValueError(
            f"{name} must have rank 2 [T, B], got rank {tensor.dim()} "
            f"with shape {tuple(tensor.shape)}"
        )
    if tuple(tensor.shape) != tuple(expected):
        raise ValueError(
            f"{name} has shape {tuple(tensor.shape)} but {against} implies "
            f"[T, B] = {tuple(expected)}"
        )


def action_log_probs(logits: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    """log pi(a_t|x_t) for the taken actions: [T, B, A] logits, [T, B] actions -> [T, B]."""
    _check_logits("logits", logits)
    _check_tb("actions", actions, tuple(logits.shape[:2]), "logits")
    if actions.dtype not in (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8):
        raise ValueError(f"actions must be an integer tensor, got dtype {actions.dtype}")
    log_probs = F.log_softmax(logits, dim=-1)
    return log_probs.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)


def policy_gradient_loss(
    logits: torch.Tensor, actions: torch.Tensor, advantages: torch.Tensor
) -> torch.Tensor:
    """sum_{t,b} -log pi(a_t|x_t) * advantage_t; advantages are detached."""
    _check_logits("logits", logits)
    _check_tb("advantages", advantages, tuple(logits.shape[:2]), "logits")
    log_pi = action_log_probs(logits, actions)
    return -(log_pi * advantages.detach()).sum()


def baseline_loss(vs: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """0.5 * sum_{t,b} (vs - values)^2.

    ``vs`` is normally a detached V-trace target; it is not detached here so
    the function stays a plain squared error.
    """
    if values.dim() != 2:
        raise ValueError(
            f"values must have rank 2 [T, B], got rank {values.dim()} "
            f"with shape {tuple(values.shape)}"
        )
    _check_tb("vs", vs, tuple(values.shape), "values")
    return 0.5 * ((vs - values) ** 2).sum()


def entropy_loss(logits: torch.Tensor) -> torch.Tensor:
    """sum_{t,b} sum_a pi log pi, i.e. minus the summed entropy.

    Minimising this loss raises the policy entropy.
    """
    _check_logits("logits", logits)
    log_probs = F.log_softmax(logits, dim=-1)
    return (log_probs.exp() * log_probs).sum()


class VTraceLoss(NamedTuple):
    """Total loss and its parts (all scalars).

    ``total = pg + baseline_cost * baseline + entropy_cost * entropy``;
    ``mean_rho`` is the mean unclipped importance weight (a diagnostic, detached).
    """

    total: torch.Tensor
    pg: torch.Tensor
    baseline: torch.Tensor
    entropy: torch.Tensor
    mean_rho: torch.Tensor


def vtrace_loss(
    learner_logits: torch.Tensor,
    behaviour_logits: torch.Tensor,
    actions: torch.Tensor,
    values: torch.Tensor,
    bootstrap_value: torch.Tensor,
    rewards: torch.Tensor,
    discounts: torch.Tensor,
    baseline_cost: float = 0.5,
    entropy_cost: float = 0.01,
    clip_rho_threshold: Optional[float] = 1.0,
    clip_pg_rho_threshold: Optional[float] = 1.0,
) -> VTraceLoss:
    """IMPALA actor-critic loss with V-trace off-policy correction.

    Args:
        learner_logits: [T, B, A] logits of the current (target) policy pi, with grad.
        behaviour_logits: [T, B, A] logits of the actors' policy mu.
        actions: [T, B] integer actions taken by the actors.
        values: [T, B] learner value estimates V(x_t), with grad.
        bootstrap_value: [B] learner value estimate of the state after the unroll.
        rewards: [T, B] rewards.
        discounts: [T, B] per-step discounts, already gamma * (1 - done).
        baseline_cost: weight of the baseline (value) loss.
        entropy_cost: weight of the entropy loss.
        clip_rho_threshold: V-trace rho_bar for the targets (None: no clipping).
        clip_pg_rho_threshold: rho_bar for the pg advantages (None: no clipping).

    Returns:
        VTraceLoss(total, pg, baseline, entropy, mean_rho).  Every term is
        summed over T and B (no division by batch size).
    """
    _check_logits("learner_logits", learner_logits)
    _check_logits("behaviour_logits", behaviour_logits)
    if tuple(behaviour_logits.shape) != tuple(learner_logits.shape):
        raise ValueError(
            f"behaviour_logits has shape {tuple(behaviour_logits.shape)} but "
            f"learner_logits has shape {tuple(learner_logits.shape)}"
        )
    tb = tuple(learner_logits.shape[:2])
    _check_tb("actions", actions, tb, "learner_logits")
    _check_tb("values", values, tb, "learner_logits")
    _check_tb("rewards", rewards, tb, "learner_logits")
    _check_tb("discounts", discounts, tb, "learner_logits")
    if bootstrap_value.dim() != 1 or bootstrap_value.shape[0] != tb[1]:
        raise ValueError(
            f"bootstrap_value must have shape [B] = ({tb[1]},), got {tuple(bootstrap_value.shape)}"
        )

    with torch.no_grad():
        log_rhos = action_log_probs(learner_logits, actions) - action_log_probs(
            behaviour_logits, actions
        )
        mean_rho = torch.exp(log_rhos).mean()

    vt = vtrace.from_importance_weights(
        log_rhos=log_rhos,
        discounts=discounts,
        rewards=rewards,
        values=values,
        bootstrap_value=bootstrap_value,
        clip_rho_threshold=clip_rho_threshold,
        clip_pg_rho_threshold=clip_pg_rho_threshold,
    )

    pg = policy_gradient_loss(learner_logits, actions, vt.pg_advantages)
    baseline = baseline_loss(vt.vs, values)
    entropy = entropy_loss(learner_logits)
    total = pg + baseline_cost * baseline + entropy_cost * entropy
    return VTraceLoss(total=total, pg=pg, baseline=baseline, entropy=entropy, mean_rho=mean_rho)
