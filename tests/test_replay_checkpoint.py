"""Replay checkpoints (run.checkpoint_replay), the replays' part: every replay's state round-trips through arrays and
samples on as the original does. The frames' part, in real shared-memory rings, is in
tests/test_replay_checkpoint_integration.py."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import apex_broker, transitions_message

from zrl.agents.apex_iqn.messages import PriorityUpdate
from zrl.replay.queue import QueueReplay
from zrl.replay.sampled import FeatureReplay, UniformReplay
from zrl.replay.snapshot import SnapshotMismatch
from zrl.replay.store import Unit

pytestmark = pytest.mark.unit

T, A, F = 5, 4, 3


def _unit(i: int, worker: int = 0) -> Unit:
    return Unit(
        worker,
        i % 3,
        10 * i,
        i,
        np.arange(T, dtype=np.int32) % A,
        np.full(T, float(i), np.float32),
        np.full(T, 0.99, np.float32),
        np.full((T, A), float(i), np.float32),
        np.full(T, -float(i), np.float32),
    )


def _equal(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for key in a:
        assert a[key].shape == b[key].shape and np.array_equal(a[key], b[key]), key


def _fresh(worker_ids, first_frames):
    return np.ones(len(worker_ids), bool)


def _scorer(worker_ids, env_index, first_frames, at):
    """Features that depend on the unit, so that distances differ."""
    n = len(worker_ids)
    base = torch.as_tensor(first_frames, dtype=torch.float32).view(n, 1, 1)
    return base.expand(n, len(at), F) / 100.0, np.ones(n, bool)


def test_a_uniform_replays_units_counts_and_generator_round_trip_and_it_samples_on_the_same():
    replay = UniformReplay(8, 3, 1, np.random.default_rng(1))
    replay.add([_unit(i) for i in range(11)])  # wraps: the oldest 3 replaced
    for _ in range(4):
        replay.sample(_fresh)
    again = UniformReplay(8, 3, 1, np.random.default_rng(99))
    again.load_state(replay.state())
    _equal(replay.state(), again.state())
    assert again.store.counts.sum() == 12 and len(again) == 8
    first, second = replay.sample(_fresh), again.sample(_fresh)
    assert [u.first_frame for u in first] == [u.first_frame for u in second]
    assert all(np.array_equal(a.behaviour_logits, b.behaviour_logits) for a, b in zip(first, second))


def test_an_elite_replays_stored_features_sample_calls_and_lambda_round_trip():
    def make(seed):
        return FeatureReplay(
            "elite", 12, 2, 1, np.random.default_rng(seed), unroll_length=T, feature_size=F, scorer=_scorer,
            feature_steps=2, decay_steps=100,
        )  # fmt: skip

    replay = make(1)
    for i in range(4):
        units = [_unit(4 * i + j) for j in range(4)]
        replay.add(units, np.random.default_rng(i).random((4, T, F), dtype=np.float32))
    for _ in range(5):
        replay.sample(_fresh)
    again = make(7)
    again.load_state(replay.state())
    _equal(replay.state(), again.state())
    assert again.sample_calls == 5 and again.lam == replay.lam
    assert [u.first_frame for u in replay.sample(_fresh)] == [u.first_frame for u in again.sample(_fresh)]


def test_a_queue_keeps_its_order_and_drop_count():
    queue = QueueReplay(4)
    for i in range(6):
        queue.add(_unit(i))
    again = QueueReplay(4)
    again.load_state(queue.state())
    assert [u.first_frame for u in again.units()] == [20, 30, 40, 50] and again.dropped_full == 2
    small = QueueReplay(3)
    with pytest.raises(SnapshotMismatch):
        small.load_state(queue.state())


def _apex(seed: int = 3, capacity: int = 64):
    return apex_broker(capacity, 4, 5, 2, 2, 3, 3, 0.4, 1000, seed)


def test_an_apex_replays_transitions_priorities_and_beta_round_trip_and_it_samples_on_the_same():

    replay = _apex()
    for w in range(2):
        frames = np.arange(10, 40, dtype=np.int64) + 100 * w
        priority = np.linspace(0.1, 3.0, len(frames)).astype(np.float32)
        msg = transitions_message(frames, worker_id=w, action=np.ones(len(frames), np.int32), priority=priority)
        assert replay.insert(msg) is None
    batch = replay.sample_batch(1, 0, np.zeros(2, np.int64))
    replay.reply(
        PriorityUpdate(
            batch_id=1,
            size=len(batch.slots),
            slots=batch.slots,
            stamps=batch.stamps,
            priorities=np.full(len(batch.slots), 7.0, np.float32),
        )
    )
    again = _apex(seed=11)
    again.load_state(replay.state())
    _equal(replay.state(), again.state())
    assert again.replay.tree.total == pytest.approx(replay.replay.tree.total)
    a, b = replay.sample_batch(2, 0, np.zeros(2, np.int64)), again.sample_batch(2, 0, np.zeros(2, np.int64))
    assert np.array_equal(a.slots, b.slots) and np.array_equal(a.weights, b.weights)
    state = replay.state()
    saved = {key: value.copy() for key, value in state.items()}
    replay.insert(transitions_message(np.arange(50, 70, dtype=np.int64), action=np.ones(20, np.int32)))
    _equal(state, saved)  # a copy: the broker goes on while a thread writes it
    fewer = apex_broker(64, 4, 5, 1, 2, 3, 3, 0.4, 1000, 3)  # resumed with one worker: the other's are never drawn
    fewer.load_state(saved)
    assert (fewer.replay.tree.priorities[replay.replay.columns["worker_id"] == 1] == 0).all()
    with pytest.raises(SnapshotMismatch):
        _apex(capacity=32).load_state(saved)
