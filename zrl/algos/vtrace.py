"""V-trace off-policy actor-critic targets.

Implements the V-trace target of Espeholt et al. 2018, "IMPALA: Scalable
Distributed Deep-RL with Importance Weighted Actor-Learner Architectures",
eq. (1):

    v_s = V(x_s) + sum_{t=s}^{s+n-1} gamma^{t-s} (prod_{i=s}^{t-1} c_i) delta_t V
    delta_t V = rho_t (r_t + gamma V(x_{t+1}) - V(x_t))
    rho_t = min(rho_bar, pi(a_t|x_t) / mu(a_t|x_t)),  c_i = min(c_bar, pi/mu)

``rho_bar`` (``clip_rho_threshold``) and ``c_bar`` (``clip_c_threshold``) are
separate knobs; both default to 1, the paper's setting.  Per-step discounts
replace gamma so that episode ends inside the unroll (discount 0) cut the sum.
The targets are computed with the equivalent backward recursion

    v_s - V(x_s) = delta_s V + gamma_s c_s (v_{s+1} - V(x_{s+1})).

The policy-gradient advantage (paper section 4.2) is

    rho_pg_s (r_s + gamma_s v_{s+1} - V(x_s)),  rho_pg_s = min(rho_bar_pg, pi/mu).

An optional 0/1 ``mask`` m_t (the LASER trust-region mask, Schmitt et al. 2020,
"Off-Policy Actor-Critic with Shared Experience Replay") drops steps: at a step
with m_t = 0 both rho_t and c_t are 0, so

    delta_t V = 0,   v_t = V(x_t),

and corrections from later steps do not flow back through step t (earlier
steps still bootstrap from V(x_t)).  The pg advantage is multiplied by m_t.

Shapes and dtypes (time-major; T the unroll length, B the batch):
    log_rhos, discounts, rewards, values: [T, B] float32
    mask: [T, B] bool or 0/1 float
    bootstrap_value: [B] float32   (V(x_T), the value after the last step)
    returned vs, pg_advantages: [T, B] float32, detached from the autograd graph.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

__all__ = ["VTraceReturns", "from_importance_weights"]


class VTraceReturns(NamedTuple):
    """V-trace outputs, both [T, B] and detached."""

    vs: torch.Tensor
    pg_advantages: torch.Tensor


def _check_inputs(
    log_rhos: torch.Tensor,
    discounts: torch.Tensor,
    rewards: torch.Tensor,
    values: torch.Tensor,
    bootstrap_value: torch.Tensor,
    clip_rho_threshold: float | None,
    clip_pg_rho_threshold: float | None,
    clip_c_threshold: float | None,
    mask: torch.Tensor | None,
) -> None:
    named = {
        "log_rhos": log_rhos,
        "discounts": discounts,
        "rewards": rewards,
        "values": values,
        "bootstrap_value": bootstrap_value,
    }
    for name, tensor in named.items():
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(tensor).__name__}")
    if log_rhos.dim() != 2:
        raise ValueError(
            f"log_rhos must have rank 2 [T, B], got rank {log_rhos.dim()} with shape {tuple(log_rhos.shape)}"
        )
    expected = tuple(log_rhos.shape)
    for name in ("discounts", "rewards", "values"):
        shape = tuple(named[name].shape)
        if named[name].dim() != 2:
            raise ValueError(f"{name} must have rank 2 [T, B], got rank {len(shape)} with shape {shape}")
        if shape != expected:
            raise ValueError(
                f"{name} has shape {shape} but log_rhos has shape {expected}; all [T, B] inputs must match"
            )
    if bootstrap_value.dim() != 1:
        raise ValueError(
            f"bootstrap_value must have rank 1 [B], got rank {bootstrap_value.dim()} "
            f"with shape {tuple(bootstrap_value.shape)}"
        )
    if bootstrap_value.shape[0] != expected[1]:
        raise ValueError(
            f"bootstrap_value has shape {tuple(bootstrap_value.shape)} but the batch "
            f"size B of log_rhos (shape {expected}) is {expected[1]}"
        )
    if mask is not None:
        if not isinstance(mask, torch.Tensor):
            raise TypeError(f"mask must be a torch.Tensor or None, got {type(mask).__name__}")
        if tuple(mask.shape) != expected:
            raise ValueError(
                f"mask has shape {tuple(mask.shape)} but log_rhos has shape {expected}; mask must be [T, B]"
            )
    for name, threshold in (
        ("clip_rho_threshold", clip_rho_threshold),
        ("clip_pg_rho_threshold", clip_pg_rho_threshold),
        ("clip_c_threshold", clip_c_threshold),
    ):
        if threshold is not None and not threshold > 0:
            raise ValueError(f"{name} must be positive or None, got {threshold!r}")


def from_importance_weights(
    log_rhos: torch.Tensor,
    discounts: torch.Tensor,
    rewards: torch.Tensor,
    values: torch.Tensor,
    bootstrap_value: torch.Tensor,
    clip_rho_threshold: float | None = 1.0,
    clip_pg_rho_threshold: float | None = 1.0,
    clip_c_threshold: float | None = 1.0,
    mask: torch.Tensor | None = None,
) -> VTraceReturns:
    """Compute V-trace targets ``vs`` and policy-gradient advantages.

    Args:
        log_rhos: [T, B] float32 log importance weights log(pi(a_t|x_t) / mu(a_t|x_t)).
        discounts: [T, B] float32 per-step discounts (gamma times not-done).
        rewards: [T, B] float32 rewards r_t.
        values: [T, B] float32 value estimates V(x_t).
        bootstrap_value: [B] float32 value estimate V(x_T).
        clip_rho_threshold: rho_bar for the targets; None disables clipping.
        clip_pg_rho_threshold: rho_bar for the pg advantages; None disables clipping.
        clip_c_threshold: c_bar for the trace coefficients c_i; None disables clipping.
        mask: optional [T, B] bool or 0/1 float tensor; 1 keeps a step, 0 cuts it
            (rho_t = c_t = 0 there and its pg advantage is 0; any non-zero entry
            counts as 1).  None keeps every step.

    Returns:
        VTraceReturns(vs, pg_advantages), both [T, B] float32 and detached.
    """
    _check_inputs(
        log_rhos,
        discounts,
        rewards,
        values,
        bootstrap_value,
        clip_rho_threshold,
        clip_pg_rho_threshold,
        clip_c_threshold,
        mask,
    )
    with torch.no_grad():
        log_rhos = log_rhos.detach()
        discounts = discounts.detach()
        rewards = rewards.detach()
        values = values.detach()
        bootstrap_value = bootstrap_value.detach()

        rhos = torch.exp(log_rhos)
        if clip_rho_threshold is not None:
            clipped_rhos = torch.clamp(rhos, max=float(clip_rho_threshold))
        else:
            clipped_rhos = rhos
        if clip_c_threshold is not None:
            cs = torch.clamp(rhos, max=float(clip_c_threshold))
        else:
            cs = rhos
        if mask is not None:
            # where, not a product: a masked step may carry rho = inf, and inf * 0 is nan.
            keep = mask.detach().to(device=values.device) != 0
            zero = torch.zeros((), dtype=values.dtype, device=values.device)
            clipped_rhos = torch.where(keep, clipped_rhos, zero)
            cs = torch.where(keep, cs, zero)

        values_t_plus_1 = torch.cat([values[1:], bootstrap_value.unsqueeze(0)], dim=0)
        deltas = clipped_rhos * (rewards + discounts * values_t_plus_1 - values)

        # Backward scan: acc_t = delta_t + gamma_t c_t acc_{t+1}, acc_T = 0.
        decay = discounts * cs
        vs_minus_v = torch.empty_like(deltas)
        acc = torch.zeros_like(bootstrap_value)
        for t in range(deltas.shape[0] - 1, -1, -1):
            acc = deltas[t] + decay[t] * acc
            vs_minus_v[t] = acc
        vs = values + vs_minus_v

        vs_t_plus_1 = torch.cat([vs[1:], bootstrap_value.unsqueeze(0)], dim=0)
        if clip_pg_rho_threshold is not None:
            clipped_pg_rhos = torch.clamp(rhos, max=float(clip_pg_rho_threshold))
        else:
            clipped_pg_rhos = rhos
        pg_advantages = clipped_pg_rhos * (rewards + discounts * vs_t_plus_1 - values)
        if mask is not None:
            pg_advantages = torch.where(keep, pg_advantages, zero)

    return VTraceReturns(vs=vs.detach(), pg_advantages=pg_advantages.detach())
