"""Ape-X's per-worker exploration (Horgan et al. 2018)."""

from __future__ import annotations

import numpy as np


def worker_epsilons(workers: int, eps: float = 0.4, alpha: float = 7.0) -> np.ndarray:
    """``eps_i = eps ** (1 + alpha * i / (N - 1))`` for worker i of N (a single worker gets ``eps``)."""
    if workers < 1:
        raise ValueError(f"workers must be positive, got {workers}")
    if workers == 1:
        return np.array([eps])
    return eps ** (1 + alpha * np.arange(workers) / (workers - 1))
