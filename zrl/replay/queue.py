"""The queue replay: a bounded FIFO of fresh unrolls. Capacity in unrolls; when full, one unit is dropped and
counted, so that memory stays bounded: by default the oldest, so that a slow learner trains on the freshest data
(``discard``: keep_latest, keep_oldest or alternating).

With ``uses`` above 1 it is IMPACT's circular buffer (Luo et al. 2020, section 3.2): a unit handed out for a batch
goes to the back of the queue once that batch has gone, until it has been handed out ``uses`` times (on average:
a fractional ``uses`` gives the units its floor and its ceiling in turn). A batch never holds one unit twice.
"""

from __future__ import annotations

import math
from collections import deque

import numpy as np

from zrl.replay.snapshot import SnapshotMismatch, scalar
from zrl.replay.store import Unit, units_from, units_state

DISCARDS = ("keep_latest", "keep_oldest", "alternating")


class QueueReplay:
    """``discard``, what a full queue drops for a new unit: keep_latest, its oldest unit; keep_oldest, the new
    unit; alternating, the oldest and the new unit by turns (the oldest first). ``uses``: times each unit is
    handed out, on average (at least 1)."""

    def __init__(self, capacity: int, discard: str = "keep_latest", uses: float = 1.0) -> None:
        if capacity <= 0:
            raise ValueError(f"capacity must be > 0, got {capacity}")
        if discard not in DISCARDS:
            raise ValueError(f"discard must be one of {', '.join(DISCARDS)}, got {discard!r}")
        if not (math.isfinite(uses) and uses >= 1 - 1e-9):
            raise ValueError(f"uses must be a number of at least 1, got {uses!r}")
        self.capacity, self.discard, self.uses = capacity, discard, uses
        self._units: deque[Unit] = deque()
        self._left: deque[int] = deque()  # times each queued unit may still be handed out
        self._out: list[tuple[Unit, int]] = []  # handed out for the last batch, with the uses they had left
        self._credit = 0.0  # the fraction of a use owed to the next unit
        self.dropped_full = 0

    def __len__(self) -> int:
        """Units that a batch may take now (those of the last batch come back at :meth:`settle`)."""
        return len(self._units)

    def _quota(self) -> int:
        self._credit += self.uses
        quota = max(1, math.floor(self._credit + 1e-9))
        self._credit -= quota
        return quota

    def add(self, unit: Unit) -> None:
        self._join(unit, self._quota())

    def _join(self, unit: Unit, left: int) -> None:
        """A unit at the back (new, or back from its batch), by the discard rule when the queue is full."""
        if len(self._units) >= self.capacity:
            self.dropped_full += 1
            turn_of_the_new = self.discard == "alternating" and self.dropped_full % 2 == 0
            if self.discard == "keep_oldest" or turn_of_the_new:
                return
            self._units.popleft()
            self._left.popleft()
        self._units.append(unit)
        self._left.append(left)

    def units(self) -> list[Unit]:
        """The units held, oldest first, then those of the last batch that will rejoin them (a copy)."""
        return list(self._units) + [u for u, left in self._out if left > 1]

    def take(self, n: int) -> list[Unit]:
        """The n units at the front, removed until :meth:`settle` (or :meth:`put_back`); fewer if fewer are held."""
        taken = []
        for _ in range(min(n, len(self._units))):
            unit, left = self._units.popleft(), self._left.popleft()
            self._out.append((unit, left))
            taken.append(unit)
        return taken

    def drop(self, units: list[Unit]) -> None:
        """Forget units taken that cannot be used (their frames are gone)."""
        gone = {id(u) for u in units}
        self._out = [(u, left) for u, left in self._out if id(u) not in gone]

    def settle(self) -> None:
        """The last batch has gone: each of its units was used once, and one with uses left rejoins at the back."""
        for unit, left in self._out:
            if left > 1:
                self._join(unit, left - 1)
        self._out = []

    def put_back(self, units: list[Unit]) -> None:
        """Return units taken but not used to the front, in their original order, with the uses they had."""
        had = {id(u): left for u, left in self._out}
        back = {id(u) for u in units}
        self._out = [(u, left) for u, left in self._out if id(u) not in back]
        for unit in reversed(units):
            self._units.appendleft(unit)
            self._left.appendleft(had.get(id(unit), 1))

    def retain(self, keep) -> None:
        """Keep only the queued units for which ``keep(unit)`` holds (a restore into fewer rings)."""
        pairs = [(u, left) for u, left in zip(self._units, self._left) if keep(u)]
        self._units, self._left = deque(u for u, _ in pairs), deque(left for _, left in pairs)

    def state(self) -> dict:
        """The units held, oldest first, the uses each has left, and the drop count, as arrays
        (zrl/replay/snapshot.py): the ``units_state`` columns, ``uses_left`` ``[N]`` int64 and ``dropped_full``
        a 0-d int."""
        held = list(zip(self._units, self._left)) + [(u, left - 1) for u, left in self._out if left > 1]
        held = held[max(0, len(held) - self.capacity) :]  # as a full queue would drop its oldest
        return {
            **units_state([u for u, _ in held]),
            "uses_left": np.array([left for _, left in held], np.int64),
            "dropped_full": np.array(self.dropped_full),
        }

    def load_state(self, state: dict) -> None:
        units = units_from(state)
        if len(units) > self.capacity:
            raise SnapshotMismatch(f"{len(units)} units saved, a queue of {self.capacity}")
        left = state.get("uses_left", np.ones(len(units), np.int64))  # saved before reuse: each unit once
        if len(left) != len(units) or (len(left) and left.min() < 1):
            raise SnapshotMismatch(f"uses_left holds {len(left)} counts for {len(units)} units, or one below 1")
        self._units, self._left, self._out = deque(units), deque(int(n) for n in left), []
        self.dropped_full = int(scalar(state, "dropped_full"))
