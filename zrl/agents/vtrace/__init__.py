"""IMPALA's V-trace actor-critic (``algo = "vtrace"``, the default), with CLEAR's cloning losses and LASER's mask
as ``[vtrace]`` says: workers act by sampling the policy's logits and send unrolls of T steps; the broker mixes
the ``[[replay]]`` tables (queue, uniform, elite, attentive) into batches; the learner takes V-trace steps."""

from __future__ import annotations

import math

import numpy as np

from zrl.agents import Agent
from zrl.agents.vtrace.config import SECTION, VtraceConfig, check


def build_model(cfg, frame_shape: tuple[int, ...], frame_dtype: str, num_actions: int):
    from zrl.models import build_model as actor_critic

    return actor_critic(cfg.model, frame_shape, frame_dtype, cfg.env.frame_stack, num_actions)


def ring_slots(cfg) -> int:
    """Every unit goes into every replay, so the units held are at most the largest replay's capacity (a reusing
    queue's units may be older: ``_queue_held``), plus
    the ready batches and the learner's batch. A worker produces M units per T slots; its ring keeps twice
    its fair share of them (all of them with one or two workers), so a worker may run at twice the others'
    pace before its oldest replayed units are dropped as stale (counted in metrics.csv). The share is the local
    workers': they take up the share of remote workers (workers.remote) that have not joined or have left, and a
    remote slot's ring is as large."""
    held = max(_queue_held(cfg, r) if r.type == "queue" else r.capacity for r in cfg.replay)
    in_flight = held + (cfg.broker.prefetch_batches + 2) * cfg.learner.batch_size
    per_worker = min(in_flight, math.ceil(2 * in_flight / cfg.workers.count))
    unrolls_per_env = math.ceil(per_worker / cfg.workers.envs_per_worker) + 2
    return unrolls_per_env * cfg.learner.unroll_length + cfg.env.frame_stack


def _queue_held(cfg, rep) -> int:
    """How many fresh units behind the newest a queue's units may be at their last use: its capacity; with reuse,
    its capacity and the batch's share that comes back, times the workers' margin (produce_ratio), which arrives
    while the queue rotates its units and is dropped."""
    from zrl.config import queue_capacity, queue_uses, replay_share

    if queue_uses(cfg, rep) <= 1:
        return queue_capacity(cfg, rep)
    return math.ceil((queue_capacity(cfg, rep) + replay_share(cfg, rep)) * max(1.0, cfg.workers.produce_ratio))


def action_scores(model, obs, cfg, generator) -> np.ndarray:
    return model(obs).logits.numpy()


def replay_ratio(cfg) -> float:
    from zrl.config import replay_ratio as asked

    return asked(cfg)


def replay_fill(cfg, rep) -> int:
    from zrl.config import fill_target

    return fill_target(cfg, rep)


def slots_per_message(cfg) -> int:
    """An unroll's T steps, and the reset's frame before the first."""
    return cfg.learner.unroll_length + 1


LEARNER_FIGURES = {
    "pg_loss": "the last step's policy-gradient term",
    "baseline_loss": "its value term",
    "entropy_loss": "its entropy term",
    "entropy_cost": "the entropy weight that step used (learner.entropy_follows_lr or entropy_decay_frames moves it)",
    "mean_rho": "the mean importance ratio pi/mu",
    "policy_cloning_loss": "CLEAR's policy-cloning term",
    "value_cloning_loss": "CLEAR's value-cloning term",
    "laser_masked_fraction": "the share of steps LASER masked",
}

BROKER_FIGURES = {
    "elite_lambda": "the first elite/attentive replay's batch multiplier (0: none)",
    "elite_distance_pool": "mean feature distance over its last candidate pool",
    "elite_distance_chosen": "mean distance of the units it chose from that pool",
    "elite_distance_min": "least distance in that pool",
    "elite_distance_max": "greatest distance in that pool",
}

AGENT = Agent(
    name="vtrace",
    summary="IMPALA's V-trace actor-critic, with CLEAR and LASER, on a mix of queue, uniform, elite and attentive replay",
    section=SECTION,
    config=VtraceConfig,
    check=check,
    build_model=build_model,
    ring_slots=ring_slots,
    slots_per_message=slots_per_message,
    action_scores=action_scores,
    acts_greedily=False,
    replay_fill=replay_fill,
    replay_ratio=replay_ratio,
    actor="zrl.agents.vtrace.actor:VtraceActor",
    broker="zrl.agents.vtrace.broker:VtraceBroker",
    learner="zrl.agents.vtrace.learner:VtraceLearner",
    messages="zrl.agents.vtrace.messages",
    learner_figures=LEARNER_FIGURES,
    broker_figures=BROKER_FIGURES,
)
