"""Elite and attentive replay inside the broker, with the real feature scorer: frames in real rings, a
real network, features recomputed from the rings. The behaviour features of some units are exactly what
the current network computes, so their distance must be 0: that proves the stored steps and the
recomputed observations line up."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from conftest import make_config, unroll_message

from zrl import protocol
from zrl.agents.vtrace.broker import FeatureScorer, VtraceBroker, make_batch
from zrl.agents.vtrace.messages import Unroll
from zrl.config import Config, ModelConfig
from zrl.gather import Gatherer, stack_observations
from zrl.replay.elite import feature_distance

pytestmark = pytest.mark.integration

M, T, A, S, F, SHAPE = 2, 4, 3, 2, 8, (3,)
MODEL = ModelConfig(kind="mlp", mlp_hidden=(16,), feature_size=F)
WIRING = SimpleNamespace(frame_shape=SHAPE, frame_dtype="float32", num_actions=A, frames_per_step=1, sample_calls=())


@pytest.fixture
def ring(make_rings):
    (made,) = make_rings(1, 64, SHAPE, "float32", envs=M)
    rng = np.random.default_rng(0)
    for slot in range(48):
        made.write(frame=rng.standard_normal((M, *SHAPE)).astype(np.float32), episode_step=np.full(M, slot, np.int32))
    return made


def _config(**replay) -> Config:
    return make_config(
        env={"id": "CartPole-v1", "frame_stack": S},
        model=MODEL,
        workers={"produce_ratio": 0.0},
        learner={"batch_size": 4, "unroll_length": T},
        replay=[replay],
    )


def _behaviour_features(model, ring, first_frame: int) -> np.ndarray:
    """What a worker acting with ``model`` would have sent: features of observations 0..T-1, [M, T, F]."""
    where = SimpleNamespace(
        worker_ids=np.zeros(M, np.int32),
        env_index=np.arange(M, dtype=np.int32),
        first_frame=np.full(M, first_frame, np.int64),
    )
    frames, steps, ok = Gatherer([ring], S, T, M, SHAPE, "float32").gather(where)
    assert ok.all()
    obs = stack_observations(frames, steps, S)[:, :T]
    device = next(model.parameters()).device  # the scorer's model: broker.device, a GPU where there is one
    with torch.no_grad():
        return model(obs.reshape(-1, S, *SHAPE).to(device), with_features=True).features.view(M, T, F).cpu().numpy()


def _unroll(seq: int, features: np.ndarray) -> Unroll:
    return unroll_message(
        num_envs=M,
        length=T,
        num_actions=A,
        seq=seq,
        policy_version=seq,
        first_frame=4 + seq * T,
        features=features.astype(np.float32),
    )


def _filled(ring, cfg: Config, messages: int = 8) -> tuple[VtraceBroker, FeatureScorer]:
    """A broker whose unit from message j has behaviour features off by noise of scale j^2."""
    scorer = FeatureScorer(cfg, WIRING, [ring])
    broker = VtraceBroker(cfg, WIRING, [ring], scorer)
    noise = np.random.default_rng(1)
    for seq in range(messages):
        exact = _behaviour_features(scorer.model, ring, 4 + seq * T)
        broker.store(_unroll(seq, exact + seq**2 * noise.standard_normal(exact.shape)))
    return broker, scorer


@pytest.mark.parametrize("feature_steps", [0, 2])
def test_elite_picks_the_units_whose_features_the_current_policy_reproduces(ring, feature_steps):
    cfg = _config(
        type="elite",
        capacity=16,
        sample_ratio=1.0,
        fill_fraction=1.0,
        strategy=1,
        lambda_batch_multiplier=4.5,  # the first call already anneals a little: int(4.49.. x 4) is still 16
        feature_steps=feature_steps,
    )
    broker, _ = _filled(ring, cfg)
    batch = make_batch(1, *broker.next_units())
    assert sorted(batch.policy_versions.tolist()) == [0, 0, 1, 1]  # messages 0 and 1: the smallest noise
    replay = broker.replays[0]
    assert len(replay.last_distances) == 16  # lambda 4.5 x n 4, at most the 16 stored: the whole store was the pool
    assert replay.last_distances.min() < 1e-4  # message 0's stored features are exact
    assert replay.last_chosen.max() < np.sort(replay.last_distances)[4]


def test_elite_counts_samples_and_strategy_3_prefers_the_least_sampled(ring):
    cfg = _config(
        type="elite", capacity=16, sample_ratio=1.0, fill_fraction=1.0, strategy=3, lambda_batch_multiplier=5.0
    )  # (the pool stays the whole store while lambda anneals)
    broker, _ = _filled(ring, cfg)
    first = make_batch(1, *broker.next_units())
    second = make_batch(2, *broker.next_units())
    assert sorted(first.policy_versions.tolist()) == [0, 0, 1, 1]
    assert sorted(second.policy_versions.tolist()) == [2, 2, 3, 3]  # the next closest, never sampled yet
    assert broker.replays[0].store.counts.sum() == 8


@pytest.mark.parametrize("dist_function", ["cos_dist", "kl_div"])
def test_attentive_prefers_units_like_the_newest_state(ring, dist_function):
    cfg = _config(
        type="attentive",
        capacity=16,
        sample_ratio=1.0,
        fill_fraction=1.0,
        strategy=1,
        lambda_batch_multiplier=4.5,
        feature_steps=0,
        dist_function=dist_function,
    )
    broker, scorer = _filled(ring, cfg)
    store = broker.replays[0].store
    slots = store.slots()
    current, ok = scorer(store.worker_id[slots], store.env_index[slots], store.first_frame[slots], np.arange(T))
    newest = store.newest_slot()

    def distances(step: int, newest_first: bool = False) -> np.ndarray:
        """Each unit's distance to the newest unit's feature at ``step``; kl_div as KL(candidate || newest) or,
        with newest_first, the other way round."""
        at = np.array([step])
        now, _ = scorer(store.worker_id[[newest]], store.env_index[[newest]], store.first_frame[[newest]], at)
        return feature_distance(*((current, now) if newest_first else (now, current)), dist_function).numpy()

    def picks(d: np.ndarray) -> set:
        order = np.argsort(d, kind="stable")[:4]
        return set(zip(store.first_frame[slots[order]].tolist(), store.env_index[slots[order]].tolist()))

    # the newest unit's step T-1, the last state whose features a worker computed, as the reference compares
    expected = picks(distances(T - 1))
    assert picks(distances(T)) != expected  # the case tells step T-1 from step T
    batch = make_batch(1, *broker.next_units())
    assert set(zip(batch.first_frame.tolist(), batch.env_index.tolist())) == expected
    pool = np.sort(broker.replays[0].last_distances)  # lambda 4.5 x 4 > 16: the pool was the whole store
    np.testing.assert_allclose(pool, np.sort(distances(T - 1)), rtol=1e-5)
    if dist_function == "kl_div":  # KL's direction shows in the distances, if not in these picks
        assert not np.allclose(pool, np.sort(distances(T - 1, newest_first=True)), rtol=1e-3)


def test_elite_insertion_replaces_the_farthest_units(ring):
    cfg = _config(
        type="elite", capacity=16, sample_ratio=1.0, fill_fraction=1.0, elite_insertion=True, elite_batch_size=16
    )
    broker, scorer = _filled(ring, cfg)
    store = broker.replays[0].store
    assert store.full and sorted(store.first_frame.tolist()).count(4 + 7 * T) == 2
    broker.store(_unroll(8, _behaviour_features(scorer.model, ring, 4 + 8 * T)))
    versions = sorted(u.policy_version for u in store.units)
    assert versions == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 8, 8]  # message 7, the noisiest, is gone
    plain = _config(type="elite", capacity=16, sample_ratio=1.0, fill_fraction=1.0)
    broker, scorer = _filled(ring, plain)
    broker.store(_unroll(8, _behaviour_features(scorer.model, ring, 4 + 8 * T)))
    assert sorted(u.policy_version for u in broker.replays[0].store.units)[:2] == [1, 1]  # FIFO: the oldest went


def test_lambda_one_is_uniform_and_skips_the_forward_pass(ring):
    cfg = _config(type="elite", capacity=16, sample_ratio=1.0, fill_fraction=1.0, lambda_batch_multiplier=1.0)
    broker, scorer = _filled(ring, cfg)
    before = scorer.time_s
    seen = set()
    for i in range(40):
        batch = make_batch(i, *broker.next_units())
        seen |= set(zip(batch.first_frame.tolist(), batch.env_index.tolist()))
    assert scorer.time_s == before and len(seen) == 16


def test_stale_candidates_are_replaced_so_a_batch_holds_distinct_fresh_units(ring):
    cfg = _config(type="elite", capacity=16, sample_ratio=1.0, fill_fraction=1.0, lambda_batch_multiplier=1.0)
    broker, _ = _filled(ring, cfg)
    for _ in range(30):  # a 64-slot ring at frame 78: messages 0-2 (first frames 4, 8, 12) lose their frames
        ring.write(frame=np.zeros((M, *SHAPE), np.float32), episode_step=np.zeros(M, np.int32))
    for i in range(10):
        batch = make_batch(i, *broker.next_units())
        units = set(zip(batch.first_frame.tolist(), batch.env_index.tolist()))
        assert len(units) == 4 and min(batch.first_frame) >= 16
    assert broker.stale_total == 6 and len(broker.replays[0]) == 10


def test_the_replay_index_holds_units_counts_and_stored_features(ring):
    cfg = _config(
        type="elite",
        capacity=16,
        sample_ratio=1.0,
        fill_fraction=1.0,
        strategy=1,
        lambda_batch_multiplier=5.0,
        feature_steps=2,
    )
    broker, _ = _filled(ring, cfg)
    broker.next_units()
    index = protocol.decode(broker.index())
    store = broker.replays[0].store
    assert len(index.worker_ids) == 16 and index.counts.sum() == 4 and (index.replay == 0).all()
    assert index.sample_calls.tolist() == [1]  # restored on resume, so lambda anneals on
    assert index.features.shape == (16, 2, F) and index.feature_rows.tolist() == list(range(16))
    slots = store.slots()
    assert np.array_equal(index.features, store.features[slots])
    assert index.first_frame.tolist() == store.first_frame[slots].tolist()
