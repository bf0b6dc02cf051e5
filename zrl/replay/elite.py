"""Sampling rules of elite and attentive replay, as pure functions of arrays and a seeded generator.

Elite replay keeps, for every stored unit (one env's unroll of T steps), the feature vectors [T, F] that the
behaviour policy computed while acting. A sample of n units is chosen in four steps:

1. ``next_lambda`` gives the batch multiplier lambda: each sample call first lowers it by
   (lambda0 - 1) / (decay_steps * alfa), then uses it, and it never goes below 1 (the reference's order, so
   the first call already uses the once-lowered value). ``pool_size`` turns it into a pool of
   int(lambda * n) distinct candidates, and ``draw_pool`` draws them uniformly without replacement.
2. Elsewhere (it needs the network) the current policy recomputes the candidates' features on K of the
   stored steps.
3. ``feature_distance`` measures how far each candidate's stored behaviour features are from the current
   ones: a small distance means the unit is close to on-policy, so lower is better.
4. ``select`` turns distances and per-unit sample counts into the n chosen pool positions with one of four
   strategies, over the m candidates sorted by distance: the n closest (1); every w-th candidate, w =
   floor(m / n), i.e. the closest of each of the first n windows of w (2); the least sampled first, closest
   first within a count (3); the least sampled of each of the first n windows of w (4). At lambda 1 the
   pool holds exactly n candidates and every strategy returns all of them, so elite sampling decays to
   uniform sampling.

When the buffer is full, elite insertion draws a group of stored units and ``insertion_victims`` names the
k whose features are farthest from the current policy's, which the new units overwrite.

Attentive replay (Sun et al. 2020, "Attentive Experience Replay") uses the same pool and ``select``, but
the distance is between each candidate's current features [N, K, F] and the current features of the
newest stored state [1, 1, F] (its unit's step T-1, the last one whose features a worker computed), so the
sample favours units that resemble what the agent sees now.

Ties are broken deterministically everywhere: equal keys go to the lower pool position.
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = [
    "DISTANCES",
    "STRATEGIES",
    "annealed_lambda",
    "draw_pool",
    "lambda_after",
    "lambda_decrement",
    "next_lambda",
    "feature_distance",
    "insertion_victims",
    "pool_size",
    "select",
]

DISTANCES = ("ln_norm", "cos_dist", "kl_div")
STRATEGIES = (1, 2, 3, 4)

_COS_EPS = 1e-6  # the reference's torch.nn.CosineSimilarity(eps=1e-6)


def feature_distance(stored: torch.Tensor, current: torch.Tensor, kind: str, p: float = 2.0) -> torch.Tensor:
    """Per-unit distance between feature tensors, broadcastable to [N, K, F]; returns [N] float32.

    ``ln_norm``: (sum over K*F of |stored - current|^p)^(1/p), p >= 1.
    ``cos_dist``: 1 - cos of the two flattened [K*F] vectors (torch's cosine_similarity, eps 1e-6): 0 for
    equal, 2 for opposite. The reference sorts the similarity itself, which puts the least similar first.
    ``kl_div``: sum over K of KL(softmax(current_k) || softmax(stored_k)), the current policy first.
    """
    if kind not in DISTANCES:
        raise ValueError(f"unknown distance kind {kind!r}; valid kinds are {DISTANCES}")
    if kind == "ln_norm" and not p >= 1:
        raise ValueError(f"ln_norm needs p >= 1, got {p}")
    a = torch.as_tensor(stored).to(torch.float32)
    b = torch.as_tensor(current).to(torch.float32)
    a, b = torch.broadcast_tensors(a, b)
    if a.dim() != 3:
        raise ValueError(f"features must broadcast to [N, K, F], got shape {tuple(a.shape)}")
    if kind == "ln_norm":
        return torch.linalg.vector_norm(a - b, ord=p, dim=(1, 2))
    if kind == "cos_dist":
        return 1.0 - torch.nn.functional.cosine_similarity(a.flatten(1), b.flatten(1), dim=1, eps=_COS_EPS)
    log_target = torch.log_softmax(b, dim=-1)
    log_behaviour = torch.log_softmax(a, dim=-1)
    kl_per_step = (log_target.exp() * (log_target - log_behaviour)).sum(dim=-1)
    return kl_per_step.clamp_min(0.0).sum(dim=-1)  # the clamp only removes float rounding below zero


def select(strategy: int, distances: np.ndarray, counts: np.ndarray, n: int) -> np.ndarray:
    """n positions into a candidate pool of m units, from ``distances`` [m] float and sample ``counts`` [m]
    int; returns [n] int64. Lower distance is better.

    The pool is first sorted by distance (ties: lower position first); w = floor(m / n).
    1: the first n of that order.
    2: every w-th of that order, from the first: the closest of each of the first n windows of w.
    3: order by (count, distance, position), take the first n.
    4: the least sampled of each of the first n windows of w (ties: the closer, then the lower position).
    With m >= n, windows 2 and 4 leave out the last m - n*w candidates, as the reference does. With m < n
    (the reference then divides by zero or loops) the strategy's order of the whole pool (1, 2: by
    distance; 3, 4: by count then distance) is repeated cyclically until n are chosen.
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; valid strategies are {STRATEGIES}")
    distances = np.asarray(distances)
    counts = np.asarray(counts)
    if distances.ndim != 1 or counts.ndim != 1 or len(distances) != len(counts):
        raise ValueError(f"distances and counts must be 1-D of equal length, got {distances.shape}, {counts.shape}")
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    if np.isnan(distances).any():
        raise ValueError("distances contain NaN")
    m = len(distances)
    if n == 0:
        return np.empty(0, dtype=np.int64)
    if m == 0:
        raise ValueError(f"cannot select {n} units from an empty pool")
    by_distance = np.argsort(distances, kind="stable")
    if strategy in (1, 3) or m < n:
        if strategy in (1, 2):
            order = by_distance
        else:
            order = np.lexsort((np.arange(m), distances, counts))  # last key is primary
        return np.resize(order, n).astype(np.int64)
    w = m // n
    if strategy == 2:
        return by_distance[np.arange(n) * w].astype(np.int64)
    windows = by_distance[: n * w].reshape(n, w)
    return windows[np.arange(n), np.argmin(counts[windows], axis=1)].astype(np.int64)  # argmin: first of ties


def lambda_decrement(lambda0: float, alfa: float, decay_steps: int) -> float:
    """What each sample call takes off lambda: (lambda0 - 1) / (decay_steps * alfa), 0 when that is not positive."""
    if lambda0 < 1:
        raise ValueError(f"lambda0 must be >= 1, got {lambda0}")
    horizon = decay_steps * alfa
    return (lambda0 - 1.0) / horizon if horizon > 0 else 0.0


def next_lambda(lam: float, decrement: float) -> float:
    """One sample call's lambda from the previous one's: lowered by ``decrement``, and 1 once it falls below 1."""
    lam = lam - decrement
    return 1.0 if lam < 1 else lam


def lambda_after(decrements: int, lambda0: float, alfa: float, decay_steps: int) -> float:
    """lambda0 lowered by ``next_lambda`` ``decrements`` times, one subtraction at a time, so that it is the very
    float the reference's running variable holds after that many sample calls (a closed form rounds differently,
    and moves int(lambda x n) on some calls). Replays keep lambda running; this rebuilds it for a resumed run."""
    if decrements < 0:
        raise ValueError(f"decrements must be >= 0, got {decrements}")
    decrement = lambda_decrement(lambda0, alfa, decay_steps)
    lam = float(lambda0)
    for _ in range(decrements if decrement else 0):
        lam = next_lambda(lam, decrement)
        if lam == 1.0:
            break
    return lam


def annealed_lambda(sample_calls: int, lambda0: float, alfa: float, decay_steps: int) -> float:
    """The batch multiplier of the sample call that follows ``sample_calls`` earlier ones (each call lowers it
    first, then uses it)."""
    if sample_calls < 0:
        raise ValueError(f"sample_calls must be >= 0, got {sample_calls}")
    return lambda_after(sample_calls + 1, lambda0, alfa, decay_steps)


def pool_size(lam: float, n: int, available: int) -> int:
    """Number of distinct candidates to draw: min(available, max(n, int(lam * n))); n at lambda 1."""
    if n < 0 or available < 0:
        raise ValueError(f"n and available must be >= 0, got n={n}, available={available}")
    return int(min(available, max(n, int(lam * n))))


def draw_pool(rng: np.random.Generator, population: np.ndarray, size: int) -> np.ndarray:
    """size elements of the 1-D ``population`` [m] drawn uniformly without replacement, [min(size, m)] of its
    dtype."""
    population = np.asarray(population)
    if population.ndim != 1:
        raise ValueError(f"population must be 1-D, got shape {population.shape}")
    if size < 0:
        raise ValueError(f"size must be >= 0, got {size}")
    return rng.choice(population, size=min(size, len(population)), replace=False)


def insertion_victims(distances: np.ndarray, k: int) -> np.ndarray:
    """Positions of the k largest ``distances`` ([g] float) in the drawn group, largest first, ties to the lower
    position: [k] int64."""
    distances = np.asarray(distances)
    if distances.ndim != 1:
        raise ValueError(f"distances must be 1-D, got shape {distances.shape}")
    if not 0 <= k <= len(distances):
        raise ValueError(f"k must be in [0, {len(distances)}], got {k}")
    if np.isnan(distances).any():
        raise ValueError("distances contain NaN")
    return np.argsort(-distances, kind="stable")[:k].astype(np.int64)
