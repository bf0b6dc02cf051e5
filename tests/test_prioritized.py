"""The prioritized replay index: first in first out, priorities from workers and the learner, stale
updates dropped, transitions whose frames are gone never drawn again."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import apex_broker, transitions_message

from zrl.agents.apex_iqn.messages import PriorityUpdate, TransitionBatch
from zrl.replay.prioritized import PrioritizedReplay, Transitions

pytestmark = pytest.mark.unit


def _transitions(frames, worker=0) -> Transitions:
    frames = np.asarray(frames, np.int64)
    n = len(frames)
    return Transitions(
        np.full(n, worker, np.int32),
        np.zeros(n, np.int32),
        frames,
        np.ones(n, np.int32),
        frames.astype(np.float32),
        np.full(n, 0.99**3, np.float32),
        frames + 3,
        np.zeros(n, np.int64),
    )


def test_insert_wraps_around_and_sampling_follows_the_priorities():
    replay = PrioritizedReplay(4)
    replay.insert(_transitions([10, 11, 12]), [1.0, 0.0, 3.0])
    replay.insert(_transitions([13, 14]), [4.0, 2.0])  # the 5th goes into slot 0, over frame 10
    assert len(replay) == 4 and replay.next_slot == 1
    np.testing.assert_array_equal(replay.columns["frame"], [14, 11, 12, 13])
    rng = np.random.default_rng(0)
    counts = np.zeros(4)
    for _ in range(500):
        sample = replay.sample(8, beta=1.0, rng=rng)
        np.add.at(counts, sample.slots, 1)
        np.testing.assert_array_equal(sample.transitions.next_frame, sample.transitions.frame + 3)
    assert counts[1] == 0  # priority 0
    np.testing.assert_allclose(counts / counts.sum(), [2 / 9, 0, 3 / 9, 4 / 9], atol=0.01)


def test_unknown_priorities_take_the_largest_stored():
    replay = PrioritizedReplay(8)
    replay.insert(_transitions([0]), [-1.0])
    assert replay.tree.priorities[0] == 1.0  # nothing stored yet: 1
    replay.insert(_transitions([1, 2]), [5.0, -1.0])
    np.testing.assert_array_equal(replay.tree.priorities[:3], [1.0, 5.0, 5.0])


def test_importance_weights_come_with_the_sample():
    replay = PrioritizedReplay(2)
    replay.insert(_transitions([0, 1]), [1.0, 3.0])
    sample = replay.sample(2, beta=1.0, rng=np.random.default_rng(1))
    # P = 1/4 and 3/4, N = 2: (N P)^-1 = 2 and 2/3, divided by the largest of the batch.
    raw = np.array([{0: 2.0, 1: 2 / 3}[s] for s in sample.slots])
    np.testing.assert_allclose(sample.weights, raw / raw.max(), rtol=1e-6)


def test_learner_updates_change_the_tree_unless_the_slot_was_written_again():
    replay = PrioritizedReplay(2)
    replay.insert(_transitions([0, 1]), [1.0, 1.0])
    sample = replay.sample(2, beta=0.4, rng=np.random.default_rng(0))
    replay.insert(_transitions([2]), [1.0])  # slot 0 now holds a new transition
    applied = replay.update(sample.slots, sample.stamps, np.full(2, 7.0))
    stale = int((sample.slots == 0).sum())
    assert applied == 2 - stale and replay.stale_updates == stale
    assert replay.tree.priorities[0] == 1.0  # the new transition keeps its own priority
    if (sample.slots == 1).any():
        assert replay.tree.priorities[1] == 7.0


def test_transitions_whose_frames_are_overwritten_are_never_drawn_again():
    replay = PrioritizedReplay(10)
    replay.insert(_transitions([0, 5, 10, 15]), np.ones(4))
    replay.insert(_transitions([3, 30], worker=1), np.ones(2))
    assert replay.evict(np.array([10, 0])) == 2  # worker 0's ring no longer holds frames below 10
    rng = np.random.default_rng(0)
    for _ in range(50):
        sample = replay.sample(4, beta=1.0, rng=rng)
        assert not ((sample.transitions.worker_id == 0) & (sample.transitions.frame < 10)).any()
    stamps = replay.stamps[[0]]
    assert replay.update(np.array([0]), stamps, np.array([9.0])) == 0  # evicted stays evicted
    assert replay.evicted == 2


def test_an_empty_or_fully_evicted_replay_has_nothing_to_sample():
    replay = PrioritizedReplay(4)
    assert replay.sample(2, 1.0, np.random.default_rng(0)) is None
    replay.insert(_transitions([0]), [1.0])
    replay.evict(np.array([5]))
    assert replay.sample(2, 1.0, np.random.default_rng(0)) is None


def test_bad_input_is_refused():
    replay = PrioritizedReplay(2)
    with pytest.raises(ValueError, match="do not fit"):
        replay.insert(_transitions([0, 1, 2]), np.ones(3))
    with pytest.raises(ValueError, match="priorities"):
        replay.insert(_transitions([0]), np.ones(2))
    replay.insert(_transitions([0]), [1.0])
    with pytest.raises(ValueError, match="non-finite"):
        replay.update(np.array([0]), replay.stamps[[0]], np.array([np.nan]))


def test_a_loss_of_zero_keeps_a_transition_in_the_replay():
    replay = PrioritizedReplay(2)
    replay.insert(_transitions([0, 1]), [0.0, 1.0])
    assert replay.tree.priorities[0] > 0  # the floor: drawable, not evicted
    replay.update(np.array([1]), replay.stamps[[1]], np.array([0.0]))
    assert replay.update(np.array([1]), replay.stamps[[1]], np.array([2.0])) == 1  # still updatable
    assert replay.tree.priorities[1] == 2.0


def _message(worker=0, frames=(10, 11, 12), priority=(1.0, 2.0, -1.0), **change):
    n = len(frames)
    fields = {
        "worker_id": worker,
        "action": np.ones(n, np.int32),
        "nstep_return": np.ones(n, np.float32),
        "bootstrap_discount": np.full(n, 0.97, np.float32),
        "priority": np.asarray(priority, np.float32),
    }
    return transitions_message(frames, **{**fields, **change})


def test_the_apex_broker_takes_transitions_serves_batches_and_applies_updates():
    from zrl import protocol

    apex = apex_broker(100, 4, 5, 2, 2, 3, 3, 0.4, 10, 0)
    assert apex.insert(_message()) is None
    assert apex.sample_batch(1, 0, np.zeros(2, np.int64)) is None  # 3 < learn_start
    assert apex.insert(_message(worker=1, frames=(50, 51, 52), policy_version=7)) is None
    batch = apex.sample_batch(2, 123, np.zeros(2, np.int64))
    assert isinstance(batch, TransitionBatch) and batch.size == 4 and batch.env_frames == 123
    np.testing.assert_array_equal(batch.next_frame, batch.frame + 3)
    # each transition keeps the weights version its worker played it with (the learner's sample ages)
    np.testing.assert_array_equal(batch.policy_version, np.where(batch.worker_ids == 1, 7, 0))
    assert protocol.decode(batch.encode()).batch_id == 2  # it crosses the wire as any message
    update = PriorityUpdate(
        batch_id=2, size=4, slots=batch.slots, stamps=batch.stamps, priorities=np.full(4, 9.0, np.float32)
    )
    assert apex.reply(update) is None
    assert set(apex.replay.tree.priorities[np.unique(batch.slots)]) == {9.0}
    assert (np.diff(batch.worker_ids) >= 0).all()  # sorted by worker, one block per ring
    # worker 0's ring no longer holds frames below 20: its transitions are never drawn again
    apex.batches = 0  # the next batch scans for eviction
    for i in range(20):
        b = apex.sample_batch(3 + i, 0, np.array([20, 0]))
        assert (b.worker_ids == 1).all()
    for bad in (
        PriorityUpdate(
            batch_id=1, size=1, slots=np.array([100]), stamps=np.ones(1, np.int64), priorities=np.ones(1, np.float32)
        ),
        PriorityUpdate(
            batch_id=1,
            size=1,
            slots=np.array([0]),
            stamps=np.ones(1, np.int64),
            priorities=np.array([np.nan], np.float32),
        ),
        PriorityUpdate(
            batch_id=1,
            size=1,
            slots=np.array([0]),
            stamps=np.ones(1, np.int64),
            priorities=np.array([-1.0], np.float32),
        ),
    ):
        assert apex.reply(bad) is not None


def test_the_apex_broker_refuses_transitions_that_cannot_be_from_this_run():
    apex = apex_broker(100, 4, 1, 2, 2, 3, 3, 0.4, 10, 0)
    bad = [
        _message(worker=2),
        _message(env_index=np.array([0, 2, 0], np.int32)),
        _message(action=np.array([0, 3, 0], np.int32)),
        _message(frame=np.array([-1, 2, 3], np.int64)),
        _message(next_frame=np.array([9, 14, 15], np.int64)),  # s_{t+n} before s_t
        _message(nstep_return=np.array([np.nan, 0, 0], np.float32)),
        _message(bootstrap_discount=np.array([1.5, 0, 0], np.float32)),
        _message(next_frame=np.array([14, 14, 15], np.int64)),  # s_{t+n} 4 frames on, with n = 3
        _message(priority=np.array([np.inf, 1, 1], np.float32)),
        _message(frames=np.arange(101), priority=np.ones(101)),  # more than the replay holds
    ]
    assert all(apex.insert(m) is not None for m in bad)
    assert len(apex.replay) == 0
