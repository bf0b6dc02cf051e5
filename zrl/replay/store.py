"""The replay index: units (one env's unroll of T steps, as frame numbers plus what the behaviour policy
did) in a fixed number of slots, with numpy columns for what sampling reads in bulk: where each unit's
frames are, how often it was sampled, when it was inserted, and (for elite and attentive replay) its
behaviour-time features at the compared steps. No frames: those stay in the workers' rings.

Shapes: ``N`` units, ``T`` steps of an unroll, ``A`` actions, ``K`` compared steps and ``F`` the feature size
(elite and attentive replay)."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from zrl.replay.snapshot import SnapshotMismatch, fill, scalar


class Unit(NamedTuple):
    """One env's unroll of T steps: where its frames are and what the behaviour policy did."""

    worker_id: int
    env_index: int
    first_frame: int
    policy_version: int
    actions: np.ndarray  # [T] int32
    rewards: np.ndarray  # [T] float32
    discounts: np.ndarray  # [T] float32
    behaviour_logits: np.ndarray  # [T, A] float32
    behaviour_values: np.ndarray  # [T] float32


UNIT_ARRAYS = ("policy_version", "actions", "rewards", "discounts", "behaviour_logits", "behaviour_values")


def units_state(units: list[Unit]) -> dict[str, np.ndarray]:
    """Units as columns: where each one's frames are, and what the behaviour policy did, stacked. ``worker_id``
    and ``env_index`` ``[N]`` int32, ``first_frame`` and ``policy_version`` ``[N]`` int64, ``actions`` ``[N, T]``
    int32, ``rewards``, ``discounts`` and ``behaviour_values`` ``[N, T]`` float32, ``behaviour_logits``
    ``[N, T, A]`` float32 (with no units, the per-step columns are empty float32 arrays)."""
    out: dict[str, np.ndarray] = {
        "worker_id": np.array([u.worker_id for u in units], np.int32),
        "env_index": np.array([u.env_index for u in units], np.int32),
        "first_frame": np.array([u.first_frame for u in units], np.int64),
        "policy_version": np.array([u.policy_version for u in units], np.int64),
    }
    for name in UNIT_ARRAYS[1:]:
        out[name] = np.stack([getattr(u, name) for u in units]) if units else np.zeros(0, np.float32)
    return out


def units_from(state: dict[str, np.ndarray]) -> list[Unit]:
    """The units ``units_state`` made (its columns, of its shapes), each row its own copy."""
    n = len(state["worker_id"])
    for name in ("env_index", "first_frame", *UNIT_ARRAYS):
        if len(state[name]) != n:
            raise SnapshotMismatch(f"{name} holds {len(state[name])} units, worker_id {n}")
    return [
        Unit(
            int(state["worker_id"][i]),
            int(state["env_index"][i]),
            int(state["first_frame"][i]),
            int(state["policy_version"][i]),
            *(np.array(state[name][i]) for name in UNIT_ARRAYS[1:]),
        )
        for i in range(n)
    ]


class UnitStore:
    """``capacity`` slots. ``add`` fills a free slot, or replaces the oldest unit (or a given slot) when
    full; ``remove`` frees slots (units whose frames their ring has overwritten).

    Columns ``[capacity]``: ``occupied`` bool, ``worker_id`` and ``env_index`` int32, ``first_frame``,
    ``counts`` and ``serial`` int64; ``features`` ``[capacity, K, F]`` float32 with a ``feature_shape`` of
    ``(K, F)``, else None. Slots are int64 indices into them."""

    def __init__(self, capacity: int, feature_shape: tuple[int, int] | None = None) -> None:
        if capacity <= 0:
            raise ValueError(f"capacity must be > 0, got {capacity}")
        self.capacity = capacity
        self.units: list[Unit | None] = [None] * capacity
        self.occupied = np.zeros(capacity, bool)
        self.worker_id = np.zeros(capacity, np.int32)
        self.env_index = np.zeros(capacity, np.int32)
        self.first_frame = np.zeros(capacity, np.int64)
        self.counts = np.zeros(capacity, np.int64)  # times sampled
        self.serial = np.zeros(capacity, np.int64)  # insertion order
        self.features = np.zeros((capacity, *feature_shape), np.float32) if feature_shape else None
        self._next_serial = 1
        self._size = 0

    def __len__(self) -> int:
        return self._size

    @property
    def full(self) -> bool:
        return self._size == self.capacity

    def slots(self) -> np.ndarray:
        """The occupied slots, ``[N]`` int64, rising."""
        return np.flatnonzero(self.occupied)

    def oldest_slot(self) -> int:
        return int(np.argmin(np.where(self.occupied, self.serial, np.iinfo(np.int64).max)))

    def newest_slot(self) -> int:
        return int(np.argmax(np.where(self.occupied, self.serial, -1)))

    def add(self, unit: Unit, features: np.ndarray | None = None, slot: int | None = None) -> int:
        """Store a unit (and its ``features`` ``[K, F]`` float32, with a feature shape) in ``slot``, else in a free
        slot, else over the oldest unit; returns the slot."""
        if slot is None:
            slot = int(np.argmin(self.occupied)) if not self.full else self.oldest_slot()
        if not self.occupied[slot]:
            self._size += 1
        self.units[slot] = unit
        self.occupied[slot] = True
        self.worker_id[slot] = unit.worker_id
        self.env_index[slot] = unit.env_index
        self.first_frame[slot] = unit.first_frame
        self.counts[slot] = 0
        self.serial[slot] = self._next_serial
        self._next_serial += 1
        if self.features is not None:
            self.features[slot] = features
        return slot

    def remove(self, slots: np.ndarray) -> None:
        """Free ``slots`` (``[n]`` integers; repeats and free slots allowed)."""
        slots = np.asarray(slots, np.int64)
        held = slots[self.occupied[slots]]
        self.occupied[held] = False
        for s in held:
            self.units[s] = None
        self._size -= len(np.unique(held))

    def state(self) -> dict[str, np.ndarray]:
        """The occupied slots, their units and columns, as arrays (zrl/replay/snapshot.py): ``slots``, ``counts``
        and ``serial`` ``[N]`` int64, ``next_serial`` a 0-d int64, the ``units_state`` columns, and ``features``
        ``[N, K, F]`` float32 with a feature shape."""
        slots = self.slots()
        out = {
            "slots": slots,
            "counts": self.counts[slots],
            "serial": self.serial[slots],
            "next_serial": np.array(self._next_serial),
            **units_state([self.units[s] for s in slots]),
        }
        if self.features is not None:
            out["features"] = self.features[slots]
        return out

    def load_state(self, state: dict[str, np.ndarray]) -> None:
        """Hold what ``state`` saved, in the same slots, and nothing else."""
        slots = state["slots"].astype(np.int64)
        units = units_from(state)
        if (self.features is None) != ("features" not in state):
            raise SnapshotMismatch("stored features: saved with and loaded without, or the other way")
        UnitStore.__init__(self, self.capacity, None if self.features is None else self.features.shape[1:])
        for name in ("counts", "serial"):
            fill(getattr(self, name), slots, state[name], name)
        if self.features is not None:
            fill(self.features, slots, state["features"], "features")
        for slot, unit in zip(slots, units):
            self.units[slot] = unit
            self.worker_id[slot], self.env_index[slot], self.first_frame[slot] = unit[:3]
        self.occupied[slots] = True
        self._size = int(self.occupied.sum())
        self._next_serial = int(scalar(state, "next_serial"))

    def take_units(self, slots: np.ndarray) -> list[Unit]:
        """The units in ``slots`` (``[n]`` integers, repeats allowed), counted as sampled."""
        np.add.at(self.counts, slots, 1)
        return [self.units[s] for s in slots]
