"""The queue replay: a bounded FIFO of fresh unrolls. Capacity in unrolls; when full, one unit is dropped and
counted, so that memory stays bounded: by default the oldest, so that a slow learner trains on the freshest data
(``discard``: keep_latest, keep_oldest or alternating)."""

from __future__ import annotations

from collections import deque

import numpy as np

from zrl.replay.snapshot import SnapshotMismatch, scalar
from zrl.replay.store import Unit, units_from, units_state

DISCARDS = ("keep_latest", "keep_oldest", "alternating")


class QueueReplay:
    """``discard``, what a full queue drops for a new unit: keep_latest, its oldest unit; keep_oldest, the new
    unit; alternating, the oldest and the new unit by turns (the oldest first)."""

    def __init__(self, capacity: int, discard: str = "keep_latest") -> None:
        if capacity <= 0:
            raise ValueError(f"capacity must be > 0, got {capacity}")
        if discard not in DISCARDS:
            raise ValueError(f"discard must be one of {', '.join(DISCARDS)}, got {discard!r}")
        self.capacity, self.discard = capacity, discard
        self._units: deque[Unit] = deque()
        self.dropped_full = 0

    def __len__(self) -> int:
        return len(self._units)

    def add(self, unit: Unit) -> None:
        if len(self._units) == self.capacity:
            self.dropped_full += 1
            turn_of_the_new = self.discard == "alternating" and self.dropped_full % 2 == 0
            if self.discard == "keep_oldest" or turn_of_the_new:
                return
            self._units.popleft()
        self._units.append(unit)

    def units(self) -> list[Unit]:
        """The units held, oldest first (a copy)."""
        return list(self._units)

    def take(self, n: int) -> list[Unit]:
        """The n oldest units, removed; fewer if fewer are held."""
        return [self._units.popleft() for _ in range(min(n, len(self._units)))]

    def state(self) -> dict:
        """The units held, oldest first, and the drop count, as arrays (zrl/replay/snapshot.py)."""
        return {**units_state(list(self._units)), "dropped_full": np.array(self.dropped_full)}

    def load_state(self, state: dict) -> None:
        units = units_from(state)
        if len(units) > self.capacity:
            raise SnapshotMismatch(f"{len(units)} units saved, a queue of {self.capacity}")
        self._units = deque(units)
        self.dropped_full = int(scalar(state, "dropped_full"))

    def put_back(self, units: list[Unit]) -> None:
        """Return units taken but not used to the front, in their original order."""
        self._units.extendleft(reversed(units))
