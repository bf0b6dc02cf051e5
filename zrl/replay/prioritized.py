"""Ape-X's prioritized replay index: n-step transitions as frame numbers in the workers' rings plus what
the learner needs besides frames, in ``capacity`` slots (first in, first out), sampled in proportion to
their priorities through a :class:`SumTree`.

A transition is ``(worker, env, frame of s_t, action a_t, n-step return, discount of the bootstrap, frame of
s_{t+n})``. Frames stay in the rings: the learner rebuilds both stacks at gather time. Priorities arrive
already raised to the power omega (the worker's or the learner's ``loss ** omega``); a negative priority
means "not known yet" and takes the largest priority stored. Known priorities are at least
``MIN_PRIORITY``, so that a transition with a loss of 0 can still be drawn again (a leaf of 0 means
evicted).

Each slot carries a stamp that grows with every write, so that a priority update for a slot that was
overwritten after it was sampled is dropped rather than given to the new transition. :meth:`evict` zeroes
the leaves of transitions whose frames their ring has overwritten, so they are never drawn again.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from zrl.replay.snapshot import SnapshotMismatch, same_shape, scalar
from zrl.replay.sumtree import SumTree, importance_weights

MIN_PRIORITY = 1e-6


class Transitions(NamedTuple):
    """``n`` transitions, one numpy column each."""

    worker_id: np.ndarray  # [n] int32
    env_index: np.ndarray  # [n] int32
    frame: np.ndarray  # [n] int64: the ring frame number of s_t
    action: np.ndarray  # [n] int32
    nstep_return: np.ndarray  # [n] float32
    bootstrap_discount: np.ndarray  # [n] float32: 0 where the episode ended within the n steps
    next_frame: np.ndarray  # [n] int64: the frame number of s_{t+n}
    policy_version: np.ndarray  # [n] int64: the weights version the worker acted with


COLUMNS = {
    "worker_id": np.int32,
    "env_index": np.int32,
    "frame": np.int64,
    "action": np.int32,
    "nstep_return": np.float32,
    "bootstrap_discount": np.float32,
    "next_frame": np.int64,
    "policy_version": np.int64,
}


class Sample(NamedTuple):
    transitions: Transitions
    slots: np.ndarray  # [B] int64
    stamps: np.ndarray  # [B] int64: hand back with the new priorities
    weights: np.ndarray  # [B] float32 importance weights, the largest 1


_COUNTERS = ("next_slot", "size", "_stamp", "evicted", "stale_updates")  # saved with a replay's state


class PrioritizedReplay:
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.tree = SumTree(capacity)
        self.columns = {name: np.zeros(capacity, dtype) for name, dtype in COLUMNS.items()}
        self.stamps = np.zeros(capacity, np.int64)  # 0: never written
        self.next_slot = 0
        self.size = 0
        self._stamp = 0
        self.evicted = 0  # transitions whose frames were overwritten before they left the replay
        self.stale_updates = 0  # priority updates for slots written again since they were sampled

    def __len__(self) -> int:
        return self.size

    def insert(self, transitions: Transitions, priorities: np.ndarray) -> np.ndarray:
        """Store ``transitions`` (n of them) in the next slots (overwriting the oldest when full), with
        ``priorities`` ``[n]`` floats (negative: unknown, the largest stored); their slots, ``[n]`` int64."""
        n = len(transitions.frame)
        if n > self.capacity:
            raise ValueError(f"{n} transitions do not fit a replay of {self.capacity}")
        priorities = np.asarray(priorities, np.float64)
        if priorities.shape != (n,):
            raise ValueError(f"{n} transitions but {priorities.size} priorities")
        unknown = priorities < 0
        priorities = np.maximum(priorities, MIN_PRIORITY)
        if unknown.any():  # the largest known: stored, or arriving with these
            known = priorities[~unknown]
            largest = max(self.tree.max_priority(), float(known.max()) if known.size else 0.0)
            priorities = np.where(unknown, largest if largest > MIN_PRIORITY else 1.0, priorities)
        slots = (self.next_slot + np.arange(n)) % self.capacity
        for name, column in self.columns.items():
            column[slots] = getattr(transitions, name)
        self.stamps[slots] = self._stamp + 1 + np.arange(n)
        self._stamp += n
        self.tree.update(slots, priorities)
        self.next_slot = int((self.next_slot + n) % self.capacity)
        self.size = min(self.size + n, self.capacity)
        return slots

    def sample(self, batch_size: int, beta: float, rng: np.random.Generator) -> Sample | None:
        """``batch_size`` transitions drawn in proportion to their priorities (stratified), with their
        importance weights; None while every priority is 0 (nothing stored, or everything evicted)."""
        if self.size == 0 or self.tree.total <= 0:
            return None
        slots, probabilities = self.tree.sample(batch_size, rng)
        columns = Transitions(**{name: column[slots] for name, column in self.columns.items()})
        return Sample(columns, slots, self.stamps[slots].copy(), importance_weights(probabilities, self.size, beta))

    def update(self, slots: np.ndarray, stamps: np.ndarray, priorities: np.ndarray) -> int:
        """New priorities from the learner, ``slots``, ``stamps`` (``[n]`` int64, as :meth:`sample` gave them)
        and ``priorities`` (``[n]`` floats); those for slots written again since they were sampled (their stamp
        differs) are dropped and counted. Returns how many were applied."""
        slots = np.asarray(slots, np.int64)
        priorities = np.asarray(priorities, np.float64)
        if slots.size == 0:
            return 0
        if not (0 <= slots.min() and slots.max() < self.capacity) or not np.isfinite(priorities).all():
            raise ValueError("priority update: a slot outside the replay or a non-finite priority")
        current = self.stamps[slots] == np.asarray(stamps, np.int64)
        self.stale_updates += int((~current).sum())
        # An evicted transition (leaf 0) stays evicted: its frames are gone.
        live = current & (self.tree.priorities[slots] > 0)
        self.tree.update(slots[live], np.maximum(priorities[live], MIN_PRIORITY))
        return int(live.sum())

    def state(self) -> dict[str, np.ndarray]:
        """Every column, stamp and priority, as arrays (zrl/replay/snapshot.py): ``column.<name>`` ``[capacity]``
        of ``COLUMNS``' dtypes, ``stamps`` ``[capacity]`` int64, ``priorities`` ``[capacity]`` float64, and the
        counters as 0-d ints."""
        return {  # copies: a snapshot is written by a thread while the broker goes on changing these
            **{f"column.{name}": column.copy() for name, column in self.columns.items()},
            "stamps": self.stamps.copy(),
            "priorities": self.tree.priorities.copy(),
            **{name: np.array(getattr(self, name)) for name in _COUNTERS},
        }

    def load_state(self, state: dict[str, np.ndarray]) -> None:
        columns = {name: same_shape(state[f"column.{name}"], c, name) for name, c in self.columns.items()}
        stamps = same_shape(state["stamps"], self.stamps, "stamps")
        priorities = same_shape(state["priorities"], self.tree.priorities, "priorities")
        if not (np.isfinite(priorities).all() and priorities.min(initial=0) >= 0):
            raise SnapshotMismatch("priorities: not finite and non-negative")
        self.columns, self.stamps = columns, stamps
        self.tree = SumTree(self.capacity)
        self.tree.update(np.arange(self.capacity), priorities)
        for name in _COUNTERS:
            setattr(self, name, int(scalar(state, name)))
        if not (0 <= self.next_slot < self.capacity and 0 <= self.size <= self.capacity):
            raise SnapshotMismatch(f"next_slot {self.next_slot} or size {self.size} outside {self.capacity}")

    def evict(self, oldest_frame: np.ndarray) -> int:
        """Zero the leaves of transitions whose first frame is older than ``oldest_frame[worker]`` (``[workers]``
        integers), the oldest frame each ring still holds (minus what a stack reaches back); returns how many."""
        held = np.flatnonzero(self.tree.priorities[: self.capacity] > 0)
        if held.size == 0:
            return 0
        workers = self.columns["worker_id"][held]
        gone = held[self.columns["frame"][held] < np.asarray(oldest_frame, np.int64)[workers]]
        if gone.size:
            self.tree.update(gone, np.zeros(gone.size))
            self.evicted += int(gone.size)
        return int(gone.size)
