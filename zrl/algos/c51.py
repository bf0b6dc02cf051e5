"""The categorical ("C51") distributional head's numerics (Bellemare et al. 2017), Rainbow's alternative to
IQN: returns on a fixed support of atoms, and the projection of n-step targets back onto that support."""

from __future__ import annotations

import torch


def support(atoms: int = 51, v_min: float = -10.0, v_max: float = 10.0) -> torch.Tensor:
    """The atoms ``z_i``, evenly spaced from v_min to v_max: ``[atoms]`` float32."""
    if atoms < 2 or not v_min < v_max:
        raise ValueError(f"need at least 2 atoms and v_min < v_max, got {atoms}, {v_min}, {v_max}")
    return torch.linspace(v_min, v_max, atoms)


def project(
    returns: torch.Tensor, bootstrap_discount: torch.Tensor, next_probs: torch.Tensor, atoms: torch.Tensor
) -> torch.Tensor:
    """The distribution of ``returns [B] + bootstrap_discount [B] * Z`` (``Z`` on ``atoms [atoms]`` with
    ``next_probs [B, atoms]``, all float32) projected onto ``atoms``, each shifted atom shared between its two
    neighbours in proportion to its distance from them and clipped to [v_min, v_max]: ``[B, atoms]`` float32,
    each row summing to 1."""
    v_min, v_max = float(atoms[0]), float(atoms[-1])
    n = atoms.numel()
    delta = (v_max - v_min) / (n - 1)
    tz = (returns.unsqueeze(1) + bootstrap_discount.unsqueeze(1) * atoms.unsqueeze(0)).clamp(v_min, v_max)
    b = (tz - v_min) / delta  # [B, atoms], fractional positions
    lower, upper = b.floor().long(), b.ceil().long()
    same = lower == upper  # the shifted atom lands exactly on an atom: all of it goes there
    out = torch.zeros_like(next_probs)
    out.scatter_add_(1, lower, next_probs * (upper.to(b.dtype) - b + same.to(b.dtype)))
    out.scatter_add_(1, upper, next_probs * (b - lower.to(b.dtype)))
    return out


def cross_entropy(log_probs: torch.Tensor, target_probs: torch.Tensor) -> torch.Tensor:
    """``-sum_i target_i log p_i`` per transition, from ``log_probs`` and ``target_probs`` ``[B, atoms]``
    float32: ``[B]`` (the C51 loss, also its priority)."""
    return -(target_probs.detach() * log_probs).sum(dim=1)


def c51_losses(
    online, target, obs: torch.Tensor, actions: torch.Tensor, nstep, next_obs: torch.Tensor, atoms: torch.Tensor
) -> torch.Tensor:
    """Per-transition C51 losses ``[B]``: the cross-entropy of the online distribution of the taken action
    against the n-step double-Q target distribution, projected onto ``atoms``: the action at the n-th next
    state chosen by the online network's expected return, its distribution the target network's there.
    ``online`` and ``target`` are callables ``obs -> log-probabilities [B, A, atoms]``; ``obs`` and
    ``next_obs`` are stacked observations ``[B, *obs]`` (uint8 frames or float32 vectors), ``actions [B]``
    integers, ``atoms [atoms]`` float32; ``nstep`` has the float32 ``returns [B]`` and
    ``bootstrap_discount [B]`` (an ``zrl.algos.iqn.NStep``). The gradient flows into the online network's
    distribution of the taken action only."""
    b = len(obs)
    rows = torch.arange(b, device=obs.device)
    taken = online(obs)[rows, actions.long()]  # [B, atoms]
    with torch.no_grad():
        chosen = (online(next_obs).exp() * atoms).sum(dim=-1).argmax(dim=1)  # [B]
        next_probs = target(next_obs).exp()[rows, chosen]  # [B, atoms]
        targets = project(nstep.returns, nstep.bootstrap_discount, next_probs, atoms)
    return cross_entropy(taken, targets)
