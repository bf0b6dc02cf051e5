"""Proportional prioritized replay's numerics (Schaul et al. 2016; Ape-X, Horgan et al. 2018): a sum tree
held in one numpy array and updated in vectorised batches, stratified sampling, importance weights and the
annealing of their exponent beta. Pure functions of arrays and a seeded generator.

The tree stores ``2 * size`` float64 sums, ``size`` the capacity rounded up to a power of two: node ``i``
holds the sum of nodes ``2i`` and ``2i + 1``, the root is node 1, and leaf ``k`` (transition slot ``k``)
is node ``size + k``. An update of ``n`` leaves recomputes only their ancestors, level by level: ``n x
log2(size)`` additions in ``log2(size)`` numpy calls. A descent finds, for ``n`` values at once, the leaf
whose prefix-sum interval holds each value.
"""

from __future__ import annotations

import numpy as np


class SumTree:
    """Priorities of ``capacity`` slots, with their sum, and proportional lookup."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be positive, got {capacity}")
        self.capacity = capacity
        self.size = 1 << max(0, (capacity - 1).bit_length())
        self.depth = self.size.bit_length() - 1  # levels below the root
        self.nodes = np.zeros(2 * self.size, np.float64)

    @property
    def total(self) -> float:
        return float(self.nodes[1])

    @property
    def priorities(self) -> np.ndarray:
        """The leaves, a view ``[capacity]``."""
        return self.nodes[self.size : self.size + self.capacity]

    def max_priority(self) -> float:
        return float(self.priorities.max()) if self.capacity else 0.0

    def update(self, slots: np.ndarray, priorities: np.ndarray) -> None:
        """Set the priorities of ``slots`` (``[n]`` integers; where a slot repeats, its last priority counts) to
        ``priorities`` (``[n]`` finite non-negative floats, kept as float64), and their sums."""
        slots = np.asarray(slots, np.int64).reshape(-1)
        priorities = np.asarray(priorities, np.float64).reshape(-1)
        if slots.shape != priorities.shape:
            raise ValueError(f"{slots.size} slots but {priorities.size} priorities")
        if slots.size == 0:
            return
        if slots.min() < 0 or slots.max() >= self.capacity:
            raise IndexError(f"slots must lie in 0..{self.capacity - 1}")
        if not np.isfinite(priorities).all() or priorities.min() < 0:
            raise ValueError("priorities must be finite and non-negative")
        nodes = self.size + slots
        self.nodes[nodes] = priorities
        nodes = np.unique(nodes >> 1)
        while nodes[0] >= 1:
            self.nodes[nodes] = self.nodes[2 * nodes] + self.nodes[2 * nodes + 1]
            if nodes[0] == 1:
                break
            nodes = np.unique(nodes >> 1)

    def find(self, values: np.ndarray) -> np.ndarray:
        """For each of ``values`` (``[n]`` floats in ``[0, total)``), the slot whose interval of the prefix sums
        holds it: ``[n]`` int64. A slot of priority 0 is never returned while the total is positive."""
        values = np.array(values, np.float64).reshape(-1)
        node = np.ones(values.size, np.int64)
        for _ in range(self.depth):
            left = self.nodes[2 * node]
            right = self.nodes[2 * node + 1]
            go_right = ((values >= left) & (right > 0)) | (left <= 0)
            values = np.where(go_right, values - left, values)
            node = 2 * node + go_right
        return node - self.size

    def sample(self, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """``n`` slots drawn in proportion to their priorities, one from each of ``n`` equal strata of the
        total, and their probabilities ``P = p / total``: ``[n]`` int64 and ``[n]`` float64."""
        total = self.total
        if total <= 0:
            raise ValueError("every priority is 0: nothing to sample")
        values = (np.arange(n) + rng.random(n)) * (total / n)
        values = np.minimum(values, np.nextafter(total, 0))  # rounding must not step past the last leaf
        slots = self.find(values)
        return slots, self.nodes[self.size + slots] / total


def importance_weights(probabilities: np.ndarray, stored: int, beta: float) -> np.ndarray:
    """``(N * P)^-beta`` for ``probabilities`` P ``[n]`` and N = ``stored``, divided by the largest of the batch
    so that weights only ever scale updates down: ``[n]`` float32."""
    if stored < 1:
        raise ValueError(f"stored must be positive, got {stored}")
    w = (stored * np.asarray(probabilities, np.float64)) ** -beta
    return (w / w.max()).astype(np.float32)


def annealed_beta(samples_drawn: int, beta_start: float, anneal_samples: int) -> float:
    """beta, linear from ``beta_start`` at 0 to 1 at ``anneal_samples`` batches drawn, 1 after."""
    if anneal_samples <= 0:
        return 1.0
    return beta_start + (1.0 - beta_start) * min(1.0, samples_drawn / anneal_samples)
