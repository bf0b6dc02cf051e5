"""A test agent, kept outside zrl to prove that an agent is one package: an n-step advantage actor-critic trained
on-policy from a queue. It declares its own config section ([onestep]), its own messages (Steps, StepBatch), its
own learner and broker figures, its own replay-fill rule (onestep.fill units before the first batch) and its own
renumbering of a remote worker's frames, and it is registered at test time (zrl.agents.register, which tells the
run's processes through $ZRL_AGENTS). tests/test_agents.py runs it end to end through the real roles."""

from __future__ import annotations

import math

from onestep_agent.config import SECTION, OnestepConfig, check
from zrl.agents import Agent


def build_model(cfg, frame_shape: tuple[int, ...], frame_dtype: str, num_actions: int):
    from zrl.models import build_model as actor_critic

    return actor_critic(cfg.model, frame_shape, frame_dtype, cfg.env.frame_stack, num_actions)


def ring_slots(cfg) -> int:
    """Twice a worker's share of the queue's units, in messages of onestep.steps steps, and the stacks."""
    per_worker = math.ceil(2 * cfg.replay[0].capacity / cfg.workers.count / cfg.workers.envs_per_worker) + 2
    return per_worker * cfg.onestep.steps + cfg.env.frame_stack


def slots_per_message(cfg) -> int:
    return cfg.onestep.steps + 1


def action_scores(model, obs, cfg, generator):
    return model(obs).logits.numpy()


AGENT = Agent(
    name="onestep",
    summary="a test agent: n-step advantage actor-critic, on-policy from a queue",
    section=SECTION,
    config=OnestepConfig,
    check=check,
    build_model=build_model,
    ring_slots=ring_slots,
    slots_per_message=slots_per_message,
    action_scores=action_scores,
    acts_greedily=False,
    replay_fill=lambda cfg, rep: cfg.onestep.fill,
    replay_ratio=lambda cfg: 0.0,
    actor="onestep_agent.actor:OnestepActor",
    broker="onestep_agent.broker:OnestepBroker",
    learner="onestep_agent.learner:OnestepLearner",
    messages="onestep_agent.messages",
    learner_figures={"onestep_advantage": "the last step's mean absolute n-step advantage"},
    broker_figures={"onestep_held": "units the broker's queue holds"},
)
