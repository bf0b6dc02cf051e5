"""Rainbow-IQN Ape-X (``algo = "apex_iqn"``): workers act epsilon-greedily on an IQN (or C51, ``apex.head``)
network's Q-values and send n-step transitions with their first priorities; the broker keeps them in one
prioritized replay; the learner takes importance-weighted steps against a target network and sends the new
priorities back. Its actor, broker part and learner part are this package's actor.py, broker.py, learner.py."""

from __future__ import annotations

import math

import numpy as np

from zrl.agents import Agent


def build_model(cfg, frame_shape: tuple[int, ...], frame_dtype: str, num_actions: int):
    from zrl.models.iqn import build_apex_model

    return build_apex_model(cfg.model, cfg.apex, frame_shape, frame_dtype, cfg.env.frame_stack, num_actions)


def ring_slots(cfg) -> int:
    """The replay's transitions, one frame each, spread over the workers (twice a fair share, so that a worker
    may run at twice the others' pace), plus a worker's block awaiting its priorities, the n-step window and
    the stacks."""
    m, apex = cfg.workers.envs_per_worker, cfg.apex
    capacity = cfg.replay[0].capacity
    per_worker = min(capacity, math.ceil(2 * capacity / cfg.workers.count))
    return math.ceil((per_worker + apex.priority_batch) / m) + apex.n_step + 2 * cfg.env.frame_stack + 2


def check(cfg) -> None:
    """The Ape-X section and replay: a ConfigError naming the key otherwise."""
    from zrl.config import APEX_HEADS, _choice, _fail

    prioritized = [i for i, rep in enumerate(cfg.replay) if rep.type == "prioritized"]
    if len(cfg.replay) != 1 or not prioritized:
        _fail(
            "replay", 'algo = "apex_iqn" takes exactly one [[replay]], of type "prioritized" (capacity in transitions)'
        )
    a = cfg.apex
    _choice("apex.head", a.head, APEX_HEADS)
    at_least_one = ("n_step", "priority_batch", "target_update", "quantiles", "target_quantiles", "acting_quantiles")
    for key in (*at_least_one, "embedding_dim", "learn_start"):
        if getattr(a, key) < 1:
            _fail(f"apex.{key}", f"must be >= 1, got {getattr(a, key)}")
    if not 0.0 <= a.epsilon <= 1.0:
        _fail("apex.epsilon", f"must be in [0, 1], got {a.epsilon}")
    for key in (
        "epsilon_alpha",
        "priority_exponent",
        "noisy_sigma0",
        "replay_ratio",
        "beta_anneal_steps",
        "state_size",
    ):
        if getattr(a, key) < 0:
            _fail(f"apex.{key}", f"must be >= 0, got {getattr(a, key)}")
    if not 0.0 <= a.importance_beta <= 1.0:
        _fail("apex.importance_beta", f"must be in [0, 1], got {a.importance_beta}")
    if a.kappa <= 0:
        _fail("apex.kappa", f"must be > 0, got {a.kappa}")
    if a.head == "c51" and (a.atoms < 2 or not a.v_min < a.v_max):
        _fail("apex.atoms", f"C51 needs at least 2 atoms and v_min < v_max, got {a.atoms}, {a.v_min}, {a.v_max}")
    if cfg.run.deterministic:
        _fail(
            "run.deterministic",
            'algo = "apex_iqn" runs are not deterministic (workers and learner run free); set run.deterministic = false',
        )
    capacity = cfg.replay[prioritized[0]].capacity
    if a.learn_start > capacity:
        _fail("apex.learn_start", f"{a.learn_start} transitions is more than the replay holds ({capacity})")
    if a.priority_batch > capacity:
        _fail(
            "apex.priority_batch",
            f"a worker's block of {a.priority_batch} transitions does not fit the replay ({capacity})",
        )


def action_scores(model, obs, cfg, generator) -> np.ndarray:
    """Q-values (noisy layers at their means in eval mode) over ``apex.acting_quantiles`` quantile samples."""
    return model.q_values(obs, cfg.apex.acting_quantiles, generator).numpy()


AGENT = Agent(
    name="apex_iqn",
    summary="Rainbow-IQN Ape-X: distributed prioritized replay of n-step transitions, IQN or C51 heads",
    check=check,
    build_model=build_model,
    ring_slots=ring_slots,
    action_scores=action_scores,
    acts_greedily=True,
    actor="zrl.agents.apex_iqn.actor:ApexActor",
    broker="zrl.agents.apex_iqn.broker:ApexBroker",
    learner="zrl.agents.apex_iqn.learner:ApexLearner",
)
