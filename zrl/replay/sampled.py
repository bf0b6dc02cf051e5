"""Replays that keep units and sample them again: uniform, elite and attentive.

Each holds a :class:`UnitStore` and answers ``sample(is_fresh)`` with the ``share`` units a batch takes from
it (``batch_size x sample_ratio``), or None when it cannot. ``is_fresh(worker_ids [N] int32, first_frames [N]
int64) -> [N] bool`` says which units still have their frames in their rings; units that do not are evicted
and counted.

Elite and attentive replays need the current policy's features of their candidates. They get them from a
``scorer(worker_ids [N] int32, env_index [N] int32, first_frames [N] int64, at [K] int64) -> (features
[N, K, F] float32 tensor, ok [N] bool)`` that recomputes, with the latest weights, the features of
observations ``at`` (indices 0..T within each unit) in one batched forward pass; ``ok`` is False for units
whose frames were overwritten while being read. ``T`` is the unroll length, ``K`` the compared steps and
``F`` the feature size.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from zrl.replay import elite
from zrl.replay.snapshot import prefixed, rng_state, scalar, section, set_rng_state
from zrl.replay.store import Unit, UnitStore

IsFresh = Callable[[np.ndarray, np.ndarray], np.ndarray]
Scorer = Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray], tuple[torch.Tensor, np.ndarray]]
RETRIES = 4  # draws per sample call before giving up when every candidate turns out stale


def compared_steps(unroll_length: int, feature_steps: int) -> np.ndarray:
    """The steps of a unit whose features are compared: ``feature_steps`` evenly spaced (0: all T), ``[K]``
    int64, rising."""
    if feature_steps <= 0 or feature_steps >= unroll_length:
        return np.arange(unroll_length)
    return np.unique(np.round(np.linspace(0, unroll_length - 1, feature_steps)).astype(np.int64))


class UniformReplay:
    """A ring of units sampled uniformly (without replacement while it holds at least ``share``)."""

    def __init__(
        self,
        capacity: int,
        share: int,
        min_fill: int,
        rng: np.random.Generator,
        feature_shape: tuple[int, int] | None = None,
    ) -> None:
        self.store = UnitStore(capacity, feature_shape)
        self.share = share
        self.min_fill = max(1, min_fill)
        self.rng = rng
        self.dropped_stale = 0
        self._filled = False

    def __len__(self) -> int:
        return len(self.store)

    def ready(self) -> bool:
        """Held its fill once (training has started from it) and is not empty."""
        self._filled = self._filled or len(self.store) >= self.min_fill
        return self._filled and len(self.store) > 0

    def add(self, units: list[Unit], features: np.ndarray | None = None) -> None:
        for unit in units:
            self.store.add(unit)

    def put_back(self, units: list[Unit]) -> None:
        """Units stay stored when sampled, so a batch that could not be sent gives nothing back."""

    def state(self) -> dict[str, np.ndarray]:
        """The store, the counts and the generator, as arrays (zrl/replay/snapshot.py)."""
        return {
            **prefixed("store", self.store.state()),
            "dropped_stale": np.array(self.dropped_stale),
            "filled": np.array(self._filled),
            "rng": rng_state(self.rng),
            **self._more_state(),
        }

    def _more_state(self) -> dict[str, np.ndarray]:
        return {}

    def load_state(self, state: dict[str, np.ndarray]) -> None:
        self.store.load_state(section("store", state))
        self.dropped_stale = int(scalar(state, "dropped_stale"))
        self._filled = bool(scalar(state, "filled"))
        set_rng_state(self.rng, state["rng"])

    def _evict_stale(self, slots: np.ndarray, is_fresh: IsFresh) -> np.ndarray:
        ok = is_fresh(self.store.worker_id[slots], self.store.first_frame[slots])
        if not ok.all():
            stale = np.unique(slots[~ok])
            self.store.remove(stale)
            self.dropped_stale += len(stale)
        return slots[ok]

    def sample(self, is_fresh: IsFresh) -> list[Unit] | None:
        for _ in range(RETRIES):
            slots = self.store.slots()
            if not len(slots):
                return None
            pick = self.rng.choice(slots, self.share, replace=len(slots) < self.share)
            if len(self._evict_stale(np.unique(pick), is_fresh)) == len(np.unique(pick)):
                return self.store.take_units(pick)
        return None


class FeatureReplay(UniformReplay):
    """Elite or attentive replay: a uniform store plus the behaviour-time features of every unit at the
    compared steps; samples by feature distance over a candidate pool of about lambda x share units."""

    def __init__(
        self,
        kind: str,
        capacity: int,
        share: int,
        min_fill: int,
        rng: np.random.Generator,
        *,
        unroll_length: int,
        feature_size: int,
        scorer: Scorer,
        dist_function: str = "ln_norm",
        p: float = 2.0,
        strategy: int = 3,
        lambda_batch_multiplier: float = 6.0,
        alfa_annealing_factor: float = 2.0,
        decay_steps: int = 0,
        feature_steps: int = 0,
        elite_insertion: bool = False,
        elite_batch_size: int = 20,
    ) -> None:
        if kind not in ("elite", "attentive"):
            raise ValueError(f"kind must be elite or attentive, got {kind!r}")
        self.steps = compared_steps(unroll_length, feature_steps)
        super().__init__(capacity, share, min_fill, rng, (len(self.steps), feature_size))
        self.kind = kind
        self.unroll_length = unroll_length
        self.scorer = scorer
        self.dist_function, self.p, self.strategy = dist_function, p, strategy
        self.lambda0, self.alfa, self.decay_steps = lambda_batch_multiplier, alfa_annealing_factor, decay_steps
        self.elite_insertion, self.elite_batch_size = elite_insertion, elite_batch_size
        self.sample_calls = 0
        self.lam = float(lambda_batch_multiplier)  # the reference's running variable: lowered by each call
        self._decrement = elite.lambda_decrement(lambda_batch_multiplier, alfa_annealing_factor, decay_steps)
        self.last_distances = np.zeros(0, np.float32)  # the last scored pool's distances
        self.last_chosen = np.zeros(0, np.float32)

    # -- insertion ----------------------------------------------------------------------------
    def add(self, units: list[Unit], features: np.ndarray | None = None) -> None:
        """Store one message's M units with their behaviour features ``[M, T, F]`` float32, of which the
        compared steps are kept."""
        if features is None or features.shape[:2] != (len(units), self.unroll_length):
            raise ValueError(
                f"{self.kind} replay needs each unit's features [T, F]; got {None if features is None else features.shape}"
            )
        kept = features[:, self.steps]
        pending = []
        for unit, feats in zip(units, kept):
            if self.elite_insertion and self.store.full:
                pending.append((unit, feats))
            else:
                self.store.add(unit, feats)
        if pending:
            for (unit, feats), slot in zip(pending, self._victims(len(pending))):
                self.store.add(unit, feats, slot=int(slot))

    def _victims(self, k: int) -> np.ndarray:
        """Elite insertion: the k units farthest from the current policy among elite_batch_size random ones
        (the units of one message share one draw). Units whose frames are gone count as infinitely far."""
        group = elite.draw_pool(self.rng, self.store.slots(), max(self.elite_batch_size, k))
        distances, _ = self._behaviour_distances(group)
        return group[elite.insertion_victims(distances, k)]

    def _behaviour_distances(self, slots: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Elite distances between the stored behaviour features of ``slots`` and the current policy's, and
        which units could be read; a unit whose frames were overwritten while read is infinitely far."""
        st = self.store
        current, ok = self.scorer(st.worker_id[slots], st.env_index[slots], st.first_frame[slots], self.steps)
        distances = np.full(len(slots), np.inf, np.float32)
        if ok.any():
            assert st.features is not None  # a feature replay's store keeps them
            stored = torch.from_numpy(st.features[slots[ok]])
            distances[ok] = elite.feature_distance(
                stored, current[torch.from_numpy(ok)], self.dist_function, self.p
            ).numpy()
        return distances, ok

    def _more_state(self) -> dict[str, np.ndarray]:
        return {"sample_calls": np.array(self.sample_calls)}

    def load_state(self, state: dict[str, np.ndarray]) -> None:
        super().load_state(state)
        self.resume(int(scalar(state, "sample_calls")))

    # -- sampling -----------------------------------------------------------------------------
    def resume(self, sample_calls: int) -> None:
        """Go on from a resumed run's ``sample_calls``: lambda where those calls left it."""
        self.sample_calls = sample_calls
        self.lam = elite.lambda_after(sample_calls, self.lambda0, self.alfa, self.decay_steps)

    def sample(self, is_fresh: IsFresh) -> list[Unit] | None:
        n = self.share
        self.lam = elite.next_lambda(self.lam, self._decrement)
        self.sample_calls += 1
        st = self.store
        for _ in range(RETRIES):
            pool = self._draw_fresh(n, is_fresh)
            if pool is None:
                return None
            if len(pool) == n == elite.pool_size(self.lam, n, len(st)):
                self.last_distances = self.last_chosen = np.zeros(0, np.float32)
                return st.take_units(pool)  # lambda 1: every strategy takes the whole pool, which is uniform
            distances, pool = self._distances(pool)
            if distances is None:
                continue
            chosen = elite.select(self.strategy, distances, st.counts[pool], n)
            self.last_distances, self.last_chosen = distances, distances[chosen]
            return st.take_units(pool[chosen])
        return None

    def _draw_fresh(self, n: int, is_fresh: IsFresh) -> np.ndarray | None:
        """A pool of about lambda x n distinct units whose frames are still in their rings: stale draws are
        evicted and replaced from the rest of the store (None once the store is empty)."""
        pool = np.zeros(0, np.int64)
        for _ in range(RETRIES):
            rest = np.setdiff1d(self.store.slots(), pool, assume_unique=True)
            size = elite.pool_size(self.lam, n, len(self.store)) - len(pool)
            if size <= 0 or not len(rest):
                break
            pool = np.concatenate([pool, self._evict_stale(elite.draw_pool(self.rng, rest, size), is_fresh)])
        return pool if len(pool) else None

    def _distances(self, pool: np.ndarray) -> tuple[np.ndarray | None, np.ndarray]:
        """The pool's distances and the pool itself, less units overwritten while the scorer read them."""
        st = self.store
        if self.kind == "elite":
            distances, ok = self._behaviour_distances(pool)
        else:
            current, ok = self.scorer(st.worker_id[pool], st.env_index[pool], st.first_frame[pool], self.steps)
        if not ok.all():
            st.remove(pool[~ok])
            self.dropped_stale += int((~ok).sum())
            pool = pool[ok]
            if not len(pool):
                return None, pool
        if self.kind == "elite":
            return distances[ok], pool
        # attentive: distance to the current feature of the newest stored state, the newest unit's step T-1 (the
        # last one a worker computed features for); kl_div is KL(candidate || newest), the candidate first
        newest = np.array([st.newest_slot()])
        now, now_ok = self.scorer(
            st.worker_id[newest], st.env_index[newest], st.first_frame[newest], np.array([self.unroll_length - 1])
        )
        if not now_ok[0]:
            return None, pool
        return elite.feature_distance(now, current[torch.from_numpy(ok)], self.dist_function, self.p).numpy(), pool
