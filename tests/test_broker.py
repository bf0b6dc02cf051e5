"""The broker's rules, driven directly with real rings: sequence gaps, stale units dropped, batches
sorted by worker, the queue bounded, replays mixed by ratio, elite features recomputed from the rings."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from conftest import make_config, unroll_message

from shm.ring import Ring
from zrl.agents.vtrace.broker import VtraceBroker, make_batch
from zrl.agents.vtrace.messages import Batch, Unroll
from zrl.config import (
    Config,
    LearnerConfig,
    ReplayConfig,
    WorkersConfig,
    queue_uses,
    replay_ratio,
    unrolls_banked,
    unrolls_per_version,
)

pytestmark = pytest.mark.integration

M, T, A = 2, 4, 3
WIRING = SimpleNamespace(num_actions=A, frames_per_step=1, sample_calls=())  # what the broker reads of a run's


@pytest.fixture
def rings(make_rings):
    return make_rings(2, 32, (2,), envs=M)


def _write(ring: Ring, count: int) -> None:
    for _ in range(count):
        ring.write(frame=np.zeros((M, 2), np.uint8), episode_step=np.zeros(M, np.int32))


def _unroll(worker: int, seq: int, first: int) -> Unroll:
    return unroll_message(
        num_envs=M,
        length=T,
        num_actions=A,
        worker_id=worker,
        seq=seq,
        policy_version=seq,
        first_frame=first,
        actions=np.full((M, T), seq, np.int32),
    )


def _next_batch(broker: VtraceBroker) -> Batch | None:
    taken = broker.next_units()
    return None if taken is None else make_batch(1, *taken)


def _broker(rings, batch=4, capacity=8) -> VtraceBroker:
    cfg = make_config(
        learner={"batch_size": batch, "unroll_length": T, "replay_ratio": 0.0},
        workers={"produce_ratio": 0.0},
        replay=[{"capacity": capacity}],
    )
    return VtraceBroker(cfg, WIRING, rings)


def test_batches_are_sorted_by_worker_and_take_the_oldest_first(rings):
    for ring in rings:
        _write(ring, 20)
    broker = _broker(rings)
    broker.store(_unroll(1, 0, 4))
    broker.store(_unroll(0, 0, 4))
    broker.store(_unroll(0, 1, 8))
    batch = _next_batch(broker)
    assert batch.worker_ids.tolist() == [0, 0, 1, 1]
    assert sorted(zip(batch.worker_ids.tolist(), batch.env_index.tolist())) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert len(broker.replays[0]) == 2 and _next_batch(broker) is None


def test_units_whose_frames_were_overwritten_are_dropped_and_counted(rings):
    _write(rings[0], 60)  # a 32-slot ring: frames before 28 are gone
    broker = _broker(rings, batch=2)
    broker.store(_unroll(0, 0, 4))  # stale: its oldest stacked frame is 1
    broker.store(_unroll(0, 1, 40))
    batch = _next_batch(broker)
    assert broker.dropped_stale == 2
    assert batch.first_frame.tolist() == [40, 40]


def test_too_few_fresh_units_are_kept_for_the_next_batch(rings):
    _write(rings[0], 60)
    broker = _broker(rings, batch=4)
    broker.store(_unroll(0, 0, 40))
    broker.store(_unroll(0, 1, 4))
    assert _next_batch(broker) is None
    assert broker.dropped_stale == 2 and len(broker.replays[0]) == 2


def test_the_queue_is_bounded_and_drops_the_oldest(rings):
    _write(rings[0], 20)
    broker = _broker(rings, batch=2, capacity=4)
    for seq in range(4):
        broker.store(_unroll(0, seq, 4 + seq))
    assert len(broker.replays[0]) == 4 and broker.dropped_full == 4
    assert _next_batch(broker).policy_versions.tolist() == [2, 2]


def test_a_batch_that_could_not_be_sent_goes_back_first(rings):
    _write(rings[0], 20)
    broker = _broker(rings, batch=2)
    for seq in range(3):
        broker.store(_unroll(0, seq, 4 + seq))
    taken = broker.next_units()
    batch = make_batch(1, *taken)
    broker.put_back(taken)  # as the broker does when the learner cannot take the batch
    again = _next_batch(broker)
    assert again.first_frame.tolist() == batch.first_frame.tolist()
    assert np.array_equal(again.actions, batch.actions) and len(broker.replays[0]) == 4


def test_workers_send_enough_per_version_for_a_batch():
    for count, envs, batch, publish in [(2, 4, 32, 1), (8, 4, 32, 1), (3, 5, 16, 2), (1, 1, 8, 1)]:
        cfg = Config(
            workers=WorkersConfig(count=count, envs_per_worker=envs, produce_ratio=1.25),
            learner=LearnerConfig(batch_size=batch, publish_every=publish, replay_ratio=0.0),
            replay=(ReplayConfig(capacity=128),),
        )
        k = unrolls_per_version(cfg)
        assert k * count * envs == pytest.approx(1.25 * batch * publish)  # on average, what was asked
    free = Config(workers=WorkersConfig(produce_ratio=0.0))
    assert unrolls_per_version(free) == 0
    # with half of each batch replayed, the workers send for the fresh half only
    mixed = Config(
        workers=WorkersConfig(count=2, envs_per_worker=4, produce_ratio=1.25),
        learner=LearnerConfig(batch_size=32, replay_ratio=0.0),
        replay=(
            ReplayConfig(capacity=1, sample_ratio=0.5),
            ReplayConfig(type="uniform", capacity=100, sample_ratio=0.5),
        ),
    )
    assert unrolls_per_version(mixed) * 8 == pytest.approx(1.25 * 16)
    # many workers for a small batch: each sends one unroll every few versions, not four batches' worth a version
    many = Config(
        workers=WorkersConfig(count=8, envs_per_worker=4, produce_ratio=1.25),
        learner=LearnerConfig(batch_size=8, replay_ratio=0.0),
        replay=(ReplayConfig(capacity=64),),
    )
    assert unrolls_per_version(many) == pytest.approx(10 / 32)


def test_workers_send_the_fresh_samples_a_replay_ratio_asks_for_and_bank_their_share_of_the_queue():
    """learner.replay_ratio R: a version trains on batch_size units, each fresh unit R times, so the workers send
    batch_size / R units per version (times produce_ratio); a worker banks up to its share of the queue."""
    for ratio, queue_share in [(4.0, 1.0), (6.0, 0.5), (2.0, 0.5)]:
        replays = (ReplayConfig(capacity=64, sample_ratio=queue_share),)
        if queue_share < 1:
            replays += (ReplayConfig(type="uniform", capacity=200, sample_ratio=1 - queue_share),)
        cfg = Config(
            workers=WorkersConfig(count=2, envs_per_worker=4, produce_ratio=1.0),
            learner=LearnerConfig(batch_size=16, replay_ratio=ratio),
            replay=replays,
        )
        assert unrolls_per_version(cfg) * 2 * 4 == pytest.approx(16 / ratio)
        assert replay_ratio(cfg) == ratio and queue_uses(cfg, cfg.replay[0]) == pytest.approx(ratio * queue_share)
        assert unrolls_banked(cfg) == 64 // 8
    auto = Config(
        learner=LearnerConfig(replay_ratio=0.0),
        replay=(ReplayConfig(capacity=1, sample_ratio=0.25), ReplayConfig(type="uniform", sample_ratio=0.75)),
    )
    assert replay_ratio(auto) == 4 and queue_uses(auto, auto.replay[0]) == 1  # 0: once through the queue


def _mixed_broker(rings, replays, batch=32, scorer=None, **learner) -> VtraceBroker:
    cfg = make_config(
        learner={"batch_size": batch, "unroll_length": T, "replay_ratio": 0.0, **learner},
        workers={"produce_ratio": 0.0},
        replay=replays,
    )
    return VtraceBroker(cfg, WIRING, rings, scorer)


def test_a_batch_takes_each_replays_share(rings):
    _write(rings[0], 30)
    _write(rings[1], 30)
    broker = _mixed_broker(
        rings,
        [
            ReplayConfig(type="queue", capacity=1, sample_ratio=0.5),
            ReplayConfig(type="uniform", capacity=100, sample_ratio=0.5, fill_fraction=0.1),
        ],
    )
    for seq in range(8):  # 8 messages of M=2 units: 16 units, exactly the queue's share
        broker.store(_unroll(seq % 2, seq // 2, 4 + seq // 2))
    assert broker.ready() and broker.sizes().tolist() == [16, 16]
    batch = _next_batch(broker)
    assert len(batch.worker_ids) == 32
    assert np.bincount(batch.replay_index, minlength=2).tolist() == [16, 16]
    assert broker.sizes().tolist() == [0, 16]  # the queue hands its units out, the uniform replay keeps them
    assert _next_batch(broker) is None  # the queue has nothing fresh left
    index = broker.replay_index()
    assert index.replay.tolist() == [1] * 16 and index.counts.sum() == 16 and index.features.size == 0


def test_training_waits_until_every_replay_holds_its_fill(rings):
    _write(rings[0], 30)
    broker = _mixed_broker(
        rings,
        [
            ReplayConfig(type="queue", capacity=4, sample_ratio=0.5),
            ReplayConfig(type="uniform", capacity=40, sample_ratio=0.5, fill_fraction=0.5),
        ],
        batch=4,
    )
    for seq in range(9):  # 18 units: the uniform replay wants 20
        broker.store(_unroll(0, seq, 4 + seq))
        assert not broker.ready() and _next_batch(broker) is None
    broker.store(_unroll(0, 9, 13))
    assert broker.ready() and _next_batch(broker) is not None


def test_uniform_replay_evicts_units_whose_frames_are_gone(rings):
    _write(rings[0], 60)  # frames before 28 are gone
    broker = _mixed_broker(
        rings, [ReplayConfig(type="uniform", capacity=8, sample_ratio=1.0, fill_fraction=0.25)], batch=2
    )
    broker.store(_unroll(0, 0, 4))
    broker.store(_unroll(0, 1, 40))
    for _ in range(5):
        batch = _next_batch(broker)
        assert batch.first_frame.tolist() == [40, 40]
    assert broker.stale_total == 2 and broker.sizes().tolist() == [2]


def test_a_reusing_queue_serves_each_unit_k_times_through_a_failed_send_a_stale_unit_and_a_snapshot(rings):
    """IMPACT's circular buffer in the broker: learner.replay_ratio 3 with a queue alone hands each unit out three
    times; a batch put back (not sent) costs no use; a unit whose frames the ring overwrote is dropped for good;
    the index and a snapshot hold the units that come back."""
    for ring in rings:
        _write(ring, 20)
    cfg = make_config(
        learner={"batch_size": 2, "unroll_length": T, "replay_ratio": 3.0},
        workers={"produce_ratio": 0.0},
        replay=[{"capacity": 8}],
    )
    broker = VtraceBroker(cfg, WIRING, rings)
    broker.store(_unroll(0, 0, 4))  # units (worker 0, env 0) and (0, 1)
    broker.store(_unroll(1, 0, 8))
    taken = broker.next_units()
    broker.put_back(taken)  # the learner could not take it: nothing used
    served = []
    for _ in range(3):
        batch = _next_batch(broker)
        served += list(zip(batch.worker_ids.tolist(), batch.env_index.tolist()))
        assert len(set(zip(batch.worker_ids.tolist(), batch.env_index.tolist()))) == 2  # never a unit twice
    assert served == [(0, 0), (0, 1), (1, 0), (1, 1), (0, 0), (0, 1)]  # round the queue, oldest first
    assert len(broker.replay_index().worker_ids) == 4  # the last batch's two come back for their third use
    again = VtraceBroker(cfg, WIRING, rings)
    again.replays[0].load_state(broker.replays[0].state())
    _write(rings[0], 40)  # worker 0's frames are overwritten: its units go, worker 1's stay
    rest = []
    while (batch := _next_batch(again)) is not None:
        rest += batch.worker_ids.tolist()
    assert rest == [1, 1, 1, 1] and again.dropped_stale == 2  # worker 1's two uses each; worker 0's last lost
