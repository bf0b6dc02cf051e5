"""IMPACT's loss: V-trace targets against a target network and a clipped surrogate.

Luo et al. 2020, "IMPACT: Importance Weighted Asynchronous Architectures with
Clipped Target Networks" (ICLR), section 3.1.  Three policies meet in it:

    mu          the behaviour policy that acted (its logits came with the unroll)
    pi_target   a target network, a copy of the learner's network refreshed
                every few learner steps, so that reusing a batch K times
                measures each step against a fixed anchor
    pi_theta    the network being trained

The value targets and the advantages are V-trace's (``zrl.algos.vtrace``), with
importance weights of the target network against the behaviour:

    rho_t = min(rho_bar, pi_target(a_t|x_t) / mu(a_t|x_t))       (truncated IS)
    A_t   = min(rho_bar_pg, pi_target / mu) (r_t + gamma_t v_{t+1} - V(x_t))

and the policy term is PPO's clipped surrogate of the learner against the
target network, weighted by that truncated importance weight (inside A_t):

    r_t(theta) = pi_theta(a_t|x_t) / pi_target(a_t|x_t)
    J          = sum_{t,b} min(r_t A_t, clip(r_t, 1 - eps, 1 + eps) A_t)

The value term is 0.5 sum (v_t - V_theta(x_t))^2 and the entropy term is the
current policy's, as in ``zrl.algos.losses.vtrace_loss``.  Every term is a sum
over time and batch (IMPALA's convention, which zrl's learning rates assume).
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from zrl.algos import vtrace
from zrl.algos.losses import (
    _check_logits,
    _check_tb,
    action_log_probs,
    baseline_loss,
    entropy_loss,
    kl_divergence,
    normalized_advantages,
)

__all__ = ["ImpactLoss", "clipped_surrogate", "impact_loss"]


class ImpactLoss(NamedTuple):
    """Total loss and its parts, all scalars.

    ``total = pg_cost * pg + baseline_cost * baseline + entropy_cost * entropy``.
    Detached diagnostics: ``mean_rho``, the mean unclipped pi_target / mu;
    ``clip_fraction``, the share of steps whose ratio r_t lies outside
    [1 - eps, 1 + eps]; ``target_kl``, the mean KL(pi_target || pi_theta).
    """

    total: torch.Tensor
    pg: torch.Tensor
    baseline: torch.Tensor
    entropy: torch.Tensor
    mean_rho: torch.Tensor
    clip_fraction: torch.Tensor
    target_kl: torch.Tensor


def clipped_surrogate(log_ratio: torch.Tensor, advantages: torch.Tensor, clip: float) -> torch.Tensor:
    """Per step min(r A, clip(r, 1 - clip, 1 + clip) A) with r = exp(log_ratio); [T, B] float32 -> [T, B].

    The advantages are constants (detached); the gradient flows through r alone."""
    if not 0 < clip < 1:
        raise ValueError(f"clip must lie in (0, 1), got {clip!r}")
    advantages = advantages.detach()
    ratio = torch.exp(log_ratio)
    return torch.minimum(ratio * advantages, torch.clamp(ratio, 1.0 - clip, 1.0 + clip) * advantages)


def impact_loss(
    learner_logits: torch.Tensor,
    target_logits: torch.Tensor,
    behaviour_logits: torch.Tensor,
    actions: torch.Tensor,
    values: torch.Tensor,
    bootstrap_value: torch.Tensor,
    rewards: torch.Tensor,
    discounts: torch.Tensor,
    *,
    clip: float = 0.2,
    pg_cost: float = 1.0,
    baseline_cost: float = 0.5,
    entropy_cost: float = 0.01,
    clip_rho_threshold: float | None = 1.0,
    clip_pg_rho_threshold: float | None = 1.0,
    clip_c_threshold: float | None = 1.0,
    normalize_advantages: bool = False,
) -> ImpactLoss:
    """IMPACT's loss on time-major tensors.

    Args:
        learner_logits: [T, B, A] float32 logits of pi_theta, with grad.
        target_logits: [T, B, A] float32 logits of the target network (constants).
        behaviour_logits: [T, B, A] float32 logits of mu, the policy that acted.
        actions: [T, B] integer actions taken.
        values: [T, B] float32 V_theta(x_t), with grad.
        bootstrap_value: [B] float32 V_theta(x_T), the value after the unroll.
        rewards: [T, B] float32 rewards.
        discounts: [T, B] float32 per-step discounts, gamma * (1 - done).
        clip: the surrogate's epsilon, in (0, 1).
        clip_rho_threshold, clip_c_threshold, clip_pg_rho_threshold: V-trace's
            rho_bar, c_bar and the pg advantage's rho_bar (None: no clipping),
            applied to pi_target / mu.
        normalize_advantages: the surrogate takes ``normalized_advantages`` of
            V-trace's, not the raw ones.

    Returns:
        ImpactLoss of float32 scalars; every term a sum over T and B.
    """
    for name, logits in (
        ("learner_logits", learner_logits),
        ("target_logits", target_logits),
        ("behaviour_logits", behaviour_logits),
    ):
        _check_logits(name, logits)
        if tuple(logits.shape) != tuple(learner_logits.shape):
            raise ValueError(f"{name} has shape {tuple(logits.shape)}, learner_logits {tuple(learner_logits.shape)}")
    tb = tuple(learner_logits.shape[:2])
    for name, tensor in (("actions", actions), ("values", values), ("rewards", rewards), ("discounts", discounts)):
        _check_tb(name, tensor, tb, "learner_logits")
    if bootstrap_value.dim() != 1 or bootstrap_value.shape[0] != tb[1]:
        raise ValueError(f"bootstrap_value must have shape [B] = ({tb[1]},), got {tuple(bootstrap_value.shape)}")
    for name, cost in (("pg_cost", pg_cost), ("baseline_cost", baseline_cost), ("entropy_cost", entropy_cost)):
        if not cost >= 0:
            raise ValueError(f"{name} must be non-negative, got {cost!r}")

    target_logits, behaviour_logits = target_logits.detach(), behaviour_logits.detach()
    log_pi_target = action_log_probs(target_logits, actions)
    with torch.no_grad():
        log_rhos = log_pi_target - action_log_probs(behaviour_logits, actions)
        mean_rho = torch.exp(log_rhos).mean()
    vt = vtrace.from_importance_weights(
        log_rhos=log_rhos,
        discounts=discounts,
        rewards=rewards,
        values=values,
        bootstrap_value=bootstrap_value,
        clip_rho_threshold=clip_rho_threshold,
        clip_pg_rho_threshold=clip_pg_rho_threshold,
        clip_c_threshold=clip_c_threshold,
    )
    log_ratio = action_log_probs(learner_logits, actions) - log_pi_target
    advantages = normalized_advantages(vt.pg_advantages) if normalize_advantages else vt.pg_advantages
    pg = -clipped_surrogate(log_ratio, advantages, clip).sum()
    baseline = baseline_loss(vt.vs, values)
    entropy = entropy_loss(learner_logits)
    total = pg_cost * pg + baseline_cost * baseline + entropy_cost * entropy
    with torch.no_grad():
        clip_fraction = ((log_ratio.exp() - 1.0).abs() > clip).to(values.dtype).mean()
        target_kl = kl_divergence(target_logits, learner_logits.detach()).mean()
    return ImpactLoss(
        total=total,
        pg=pg,
        baseline=baseline,
        entropy=entropy,
        mean_rho=mean_rho,
        clip_fraction=clip_fraction,
        target_kl=target_kl,
    )
