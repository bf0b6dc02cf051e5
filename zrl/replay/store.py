"""The replay index: units (one env's unroll of T steps, as frame numbers plus what the behaviour policy
did) in a fixed number of slots, with numpy columns for what sampling reads in bulk: where each unit's
frames are, how often it was sampled, when it was inserted, and (for elite and attentive replay) its
behaviour-time features at the compared steps. No frames: those stay in the workers' rings."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np


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


class UnitStore:
    """``capacity`` slots. ``add`` fills a free slot, or replaces the oldest unit (or a given slot) when
    full; ``remove`` frees slots (units whose frames their ring has overwritten)."""

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
        """The occupied slots."""
        return np.flatnonzero(self.occupied)

    def oldest_slot(self) -> int:
        return int(np.argmin(np.where(self.occupied, self.serial, np.iinfo(np.int64).max)))

    def newest_slot(self) -> int:
        return int(np.argmax(np.where(self.occupied, self.serial, -1)))

    def add(self, unit: Unit, features: np.ndarray | None = None, slot: int | None = None) -> int:
        """Store a unit in ``slot``, else in a free slot, else over the oldest unit; returns the slot."""
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
        slots = np.asarray(slots, np.int64)
        held = slots[self.occupied[slots]]
        self.occupied[held] = False
        for s in held:
            self.units[s] = None
        self._size -= len(np.unique(held))

    def take_units(self, slots: np.ndarray) -> list[Unit]:
        """The units in ``slots`` (repeats allowed), counted as sampled."""
        np.add.at(self.counts, slots, 1)
        return [self.units[s] for s in slots]  # type: ignore[misc]
