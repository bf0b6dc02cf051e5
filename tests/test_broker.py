"""The broker's rules, driven directly with real rings: sequence gaps, stale units dropped, batches
sorted by worker, the queue bounded."""

from __future__ import annotations

import os

import numpy as np
import pytest

from shm import segment_name
from shm.ring import Ring, RingSpec
from zrl import protocol
from zrl.config import Config, LearnerConfig, ReplayConfig
from zrl.roles.broker import Broker, make_batch

M, T, A = 2, 4, 3


@pytest.fixture
def rings():
    spec = RingSpec(32, {"frame": ((M, 2), "uint8"), "episode_step": ((M,), "int32")})
    made = [Ring.create(segment_name("zrltest", "broker", os.getpid(), f"r{i}"), spec) for i in range(2)]
    yield made
    for ring in made:
        ring.close()
        ring.unlink()


def _write(ring: Ring, count: int) -> None:
    for _ in range(count):
        ring.write(frame=np.zeros((M, 2), np.uint8), episode_step=np.zeros(M, np.int32))


def _unroll(worker: int, seq: int, first: int) -> protocol.Unroll:
    return protocol.Unroll(
        worker_id=worker, seq=seq, policy_version=seq, first_frame=first, num_envs=M, length=T, env_frames=0,
        actions=np.full((M, T), seq, np.int32), rewards=np.zeros((M, T), np.float32),
        discounts=np.ones((M, T), np.float32), behaviour_logits=np.zeros((M, T, A), np.float32),
        features=np.zeros((0, 0, 0), np.float32),
    )


def _next_batch(broker: Broker) -> protocol.Batch | None:
    units = broker.next_units()
    return None if units is None else make_batch(1, units)


def _broker(rings, batch=4, capacity=8) -> Broker:
    cfg = Config(learner=LearnerConfig(batch_size=batch, unroll_length=T),
                 replay=(ReplayConfig(capacity=capacity),))
    return Broker(cfg, rings)


def test_batches_are_sorted_by_worker_and_take_the_oldest_first(rings):
    for ring in rings:
        _write(ring, 20)
    broker = _broker(rings)
    broker.insert(_unroll(1, 0, 4))
    broker.insert(_unroll(0, 0, 4))
    broker.insert(_unroll(0, 1, 8))
    batch = _next_batch(broker)
    assert batch.worker_ids.tolist() == [0, 0, 1, 1]
    assert sorted(zip(batch.worker_ids.tolist(), batch.env_index.tolist())) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert len(broker.replay) == 2 and _next_batch(broker) is None


def test_sequence_gaps_are_counted(rings):
    _write(rings[0], 20)
    broker = _broker(rings)
    for seq in (0, 1, 4, 5):
        broker.insert(_unroll(0, seq, 4))
    assert broker.seq_gaps == 2 and broker.unrolls_received == 4 * M


def test_units_whose_frames_were_overwritten_are_dropped_and_counted(rings):
    _write(rings[0], 60)  # a 32-slot ring: frames before 28 are gone
    broker = _broker(rings, batch=2)
    broker.insert(_unroll(0, 0, 4))  # stale: its oldest stacked frame is 1
    broker.insert(_unroll(0, 1, 40))
    batch = _next_batch(broker)
    assert broker.dropped_stale == 2
    assert batch.first_frame.tolist() == [40, 40]


def test_too_few_fresh_units_are_kept_for_the_next_batch(rings):
    _write(rings[0], 60)
    broker = _broker(rings, batch=4)
    broker.insert(_unroll(0, 0, 40))
    broker.insert(_unroll(0, 1, 4))
    assert _next_batch(broker) is None
    assert broker.dropped_stale == 2 and len(broker.replay) == 2


def test_the_queue_is_bounded_and_drops_the_oldest(rings):
    _write(rings[0], 20)
    broker = _broker(rings, batch=2, capacity=4)
    for seq in range(4):
        broker.insert(_unroll(0, seq, 4 + seq))
    assert len(broker.replay) == 4 and broker.replay.dropped_full == 4
    assert _next_batch(broker).policy_versions.tolist() == [2, 2]


def test_a_batch_that_could_not_be_sent_goes_back_first(rings):
    _write(rings[0], 20)
    broker = _broker(rings, batch=2)
    for seq in range(3):
        broker.insert(_unroll(0, seq, 4 + seq))
    units = broker.next_units()
    batch = make_batch(1, units)
    broker.replay.put_back(units)  # as the broker does when the learner cannot take the batch
    again = _next_batch(broker)
    assert again.first_frame.tolist() == batch.first_frame.tolist()
    assert np.array_equal(again.actions, batch.actions) and len(broker.replay) == 4


def test_workers_send_enough_per_version_for_a_batch():
    from zrl.config import WorkersConfig
    from zrl.roles.worker import unrolls_per_version

    for count, envs, batch, publish in [(2, 4, 32, 1), (8, 4, 32, 1), (3, 5, 16, 2), (1, 1, 8, 1)]:
        cfg = Config(workers=WorkersConfig(count=count, envs_per_worker=envs),
                     learner=LearnerConfig(batch_size=batch, publish_every=publish),
                     replay=(ReplayConfig(capacity=128),))
        k = unrolls_per_version(cfg)
        assert k * count * envs >= 1.25 * batch * publish  # never fewer than the learner needs
        assert (k - 1) * count * envs < 1.25 * batch * publish  # and not a whole unroll more than asked
    free = Config(workers=WorkersConfig(produce_ratio=0.0))
    assert unrolls_per_version(free) == 0
