"""Frames written once by the worker, gathered by the learner: the stacks must be the ones the worker acted on."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import batch_message

from shm.ring import Ring
from zrl.agents.apex_iqn.messages import TransitionBatch
from zrl.agents.vtrace.messages import Batch
from zrl.gather import ActingStack, Gatherer, stack_observations

pytestmark = pytest.mark.integration

M, S, T, A = 3, 4, 5, 2
SHAPE = (2, 3)


def _frame(step: int, env: int) -> np.ndarray:
    return np.full(SHAPE, (step * M + env) % 250 + 1, np.uint8)  # never 0, so blanking shows


def _act(ring: Ring, steps: int, seed: int):
    """Play a fake env through ActingStack and the ring, as the worker does; return the stacks acted on."""
    rng = np.random.default_rng(seed)
    stack = ActingStack(M, S, SHAPE, "|u1")
    stack.reset(np.stack([_frame(0, e) for e in range(M)]))
    ring.write(frame=np.stack([_frame(0, e) for e in range(M)]), episode_step=stack.episode_step)
    seen = [stack.array.copy()]
    for step in range(1, steps + 1):
        frames = np.stack([_frame(step, e) for e in range(M)])
        game_over = rng.random(M) < 0.15
        stack.push(frames, game_over)
        ring.write(frame=frames, episode_step=stack.episode_step)
        seen.append(stack.array.copy())
    return np.stack(seen)  # [steps+1, M, S, *SHAPE]


def _batch(worker_ids, env_index, first_frame) -> Batch:
    return batch_message(
        size=len(worker_ids),
        length=T,
        num_actions=A,
        worker_ids=np.array(worker_ids, np.int32),
        env_index=np.array(env_index, np.int32),
        first_frame=np.array(first_frame, np.int64),
    )


@pytest.fixture
def rings(make_rings):
    return make_rings(2, 64, SHAPE, envs=M)


def test_gathered_stacks_equal_the_stacks_the_worker_acted_on(rings):
    seen = [_act(ring, 40, seed=i) for i, ring in enumerate(rings)]
    # units from both rings, starting at frame 0 (history before the run), mid-run and late.
    units = [(0, 0, 0), (0, 2, 10), (0, 1, 35), (1, 0, 5), (1, 2, 20), (1, 1, 0)]
    batch = _batch(*zip(*units))
    gatherer = Gatherer(rings, S, T, max_batch=8, frame_shape=SHAPE, frame_dtype="|u1")
    frames, steps, ok = gatherer.gather(batch)
    assert ok.all()
    obs = stack_observations(frames, steps, S)
    assert obs.shape == (len(units), T + 1, S, *SHAPE) and obs.is_contiguous()
    blanked = 0
    for b, (w, e, first) in enumerate(units):
        expected = torch.from_numpy(seen[w][first : first + T + 1, e])
        assert torch.equal(obs[b], expected), f"unit {b} differs"
        blanked += int((expected[1:, :-1] == 0).all(dim=(-2, -1)).any())  # an episode start after t=0
    assert blanked >= 2, "the units compared must include episode starts mid-unroll"


def test_overwritten_units_are_flagged_not_used(rings):
    _act(rings[0], 100, seed=0)  # 101 frames through a 64-slot ring
    batch = _batch([0, 0], [0, 1], [10, 80])
    gatherer = Gatherer(rings, S, T, max_batch=4, frame_shape=SHAPE, frame_dtype="|u1")
    _, _, ok = gatherer.gather(batch)
    assert ok.tolist() == [False, True]


def test_transition_stacks_equal_the_stacks_the_worker_acted_on(rings):
    from zrl.gather import TransitionGatherer

    seen = [_act(ring, 40, seed=i) for i, ring in enumerate(rings)]
    # (worker, env, frame of s_t, frame of s_{t+3}, bootstrap discount)
    picks = [(0, 0, 0, 3, 0.97), (0, 2, 10, 13, 0.97), (1, 1, 30, 33, 0.0), (1, 0, 37, 40, 0.97)]
    w, e, f, nf, d = (np.array(c) for c in zip(*picks))
    b = len(picks)
    batch = TransitionBatch(
        batch_id=1,
        env_frames=0,
        size=b,
        worker_ids=w.astype(np.int32),
        env_index=e.astype(np.int32),
        frame=f.astype(np.int64),
        action=np.zeros(b, np.int32),
        nstep_return=np.zeros(b, np.float32),
        bootstrap_discount=d.astype(np.float32),
        next_frame=nf.astype(np.int64),
        slots=np.arange(b),
        stamps=np.ones(b, np.int64),
        weights=np.ones(b, np.float32),
        policy_version=np.zeros(b, np.int64),
    )
    obs, next_obs, ok = TransitionGatherer(rings, S, 8, SHAPE, "|u1").gather(batch)
    assert ok.all() and obs.shape == (b, S, *SHAPE) and next_obs.shape == (b, S, *SHAPE)
    for i, (wi, ei, fi, nfi, _) in enumerate(picks):
        assert torch.equal(obs[i], torch.from_numpy(seen[wi][fi, ei]))
        assert torch.equal(next_obs[i], torch.from_numpy(seen[wi][nfi, ei]))


def test_a_transition_whose_next_stack_is_not_there_is_ok_only_without_bootstrap(rings):
    from zrl.gather import TransitionGatherer

    _act(rings[0], 20, seed=0)  # frames 0..20 written; frame 22 does not exist yet
    b = 3
    batch = TransitionBatch(
        batch_id=1,
        env_frames=0,
        size=b,
        worker_ids=np.zeros(b, np.int32),
        env_index=np.zeros(b, np.int32),
        frame=np.array([10, 19, 19]),
        action=np.zeros(b, np.int32),
        nstep_return=np.zeros(b, np.float32),
        bootstrap_discount=np.array([0.97, 0.97, 0.0], np.float32),
        next_frame=np.array([13, 22, 22]),
        slots=np.arange(b),
        stamps=np.ones(b, np.int64),
        weights=np.ones(b, np.float32),
        policy_version=np.zeros(b, np.int64),
    )
    _, _, ok = TransitionGatherer(rings, S, 4, SHAPE, "|u1").gather(batch)
    assert ok.tolist() == [True, False, True]
