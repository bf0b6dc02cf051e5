"""The categorical ("C51") distributional head's numerics (Bellemare et al. 2017), Rainbow's alternative to
IQN: returns on a fixed support of atoms, and the projection of n-step targets back onto that support."""

from __future__ import annotations

import torch


def support(atoms: int = 51, v_min: float = -10.0, v_max: float = 10.0) -> torch.Tensor:
    """The atoms ``z_i``, evenly spaced from v_min to v_max: ``[atoms]``."""
    if atoms < 2 or not v_min < v_max:
        raise ValueError(f"need at least 2 atoms and v_min < v_max, got {atoms}, {v_min}, {v_max}")
    return torch.linspace(v_min, v_max, atoms)


def project(returns: torch.Tensor, bootstrap_discount: torch.Tensor, next_probs: torch.Tensor,
            atoms: torch.Tensor) -> torch.Tensor:  # fmt: skip
    """The distribution of ``returns + bootstrap_discount * Z`` (``Z`` on ``atoms`` with ``next_probs [B,
    atoms]``) projected onto ``atoms``, each shifted atom shared between its two neighbours in proportion
    to its distance from them and clipped to [v_min, v_max]: ``[B, atoms]``, each row summing to 1."""
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
    """``-sum_i target_i log p_i`` per transition: ``[B]`` (the C51 loss, also its priority)."""
    return -(target_probs.detach() * log_probs).sum(dim=1)
