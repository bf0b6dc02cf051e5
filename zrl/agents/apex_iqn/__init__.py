"""Rainbow-IQN Ape-X (``algo = "apex_iqn"``): workers act epsilon-greedily on an IQN (or C51, ``apex.head``)
network's Q-values and send n-step transitions with their first priorities; the broker keeps them in one
prioritized replay; the learner takes importance-weighted steps against a target network and sends the new
priorities back. Its actor, broker part and learner part are this package's actor.py, broker.py, learner.py."""

from __future__ import annotations

import math

import numpy as np

from zrl.agents import Agent
from zrl.agents.apex_iqn.config import SECTION, ApexConfig, check


def build_model(cfg, frame_shape: tuple[int, ...], frame_dtype: str, num_actions: int):
    from zrl.models.iqn import build_apex_model

    return build_apex_model(cfg.model, cfg.apex, frame_shape, frame_dtype, cfg.env.frame_stack, num_actions)


def ring_slots(cfg) -> int:
    """The replay's transitions, one frame each, spread over the local workers (twice a fair share, so that a worker
    may run at twice the others' pace), plus a worker's block awaiting its priorities, the n-step window and
    the stacks."""
    m, apex = cfg.workers.envs_per_worker, cfg.apex
    capacity = cfg.replay[0].capacity
    per_worker = min(capacity, math.ceil(2 * capacity / cfg.workers.count))
    return math.ceil((per_worker + apex.priority_batch) / m) + apex.n_step + 2 * cfg.env.frame_stack + 2


def action_scores(model, obs, cfg, generator) -> np.ndarray:
    """Q-values (noisy layers at their means in eval mode) over ``apex.acting_quantiles`` quantile samples."""
    return model.q_values(obs, cfg.apex.acting_quantiles, generator).numpy()


def replay_ratio(cfg) -> float:
    """Transitions trained per env step: a batch per apex.replay_ratio env steps (0: workers run free)."""
    return cfg.learner.batch_size / cfg.apex.replay_ratio if cfg.apex.replay_ratio else 0.0


def replay_fill(cfg, rep) -> int:
    """Transitions the prioritized replay holds before the learner starts: apex.learn_start."""
    return cfg.apex.learn_start


def anneal_steps(cfg, frames_per_step: int) -> int:
    """Learner steps over which the importance exponent beta reaches 1: apex.beta_anneal_steps, or from the budget,
    one step per apex.replay_ratio env steps after learn_start (4 when the ratio is off, Rainbow's)."""
    if cfg.apex.beta_anneal_steps:
        return cfg.apex.beta_anneal_steps
    steps = cfg.run.max_env_frames // frames_per_step - cfg.apex.learn_start
    return max(1, int(steps // (cfg.apex.replay_ratio or 4)))


def slots_per_message(cfg) -> int:
    """The steps until ``apex.priority_batch`` transitions are done (each step finishes at most one per env, once
    the n-step window is full), and the reset's frame."""
    m, apex = cfg.workers.envs_per_worker, cfg.apex
    return math.ceil(apex.priority_batch / m) + apex.n_step + 2


AGENT = Agent(
    name="apex_iqn",
    summary="Rainbow-IQN Ape-X: distributed prioritized replay of n-step transitions, IQN or C51 heads",
    section=SECTION,
    config=ApexConfig,
    check=check,
    build_model=build_model,
    ring_slots=ring_slots,
    slots_per_message=slots_per_message,
    action_scores=action_scores,
    acts_greedily=True,
    replay_fill=replay_fill,
    replay_ratio=replay_ratio,
    actor="zrl.agents.apex_iqn.actor:ApexActor",
    broker="zrl.agents.apex_iqn.broker:ApexBroker",
    learner="zrl.agents.apex_iqn.learner:ApexLearner",
    messages="zrl.agents.apex_iqn.messages",
)
