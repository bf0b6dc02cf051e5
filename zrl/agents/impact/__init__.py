"""IMPACT (``algo = "impact"``; Luo et al. 2020): V-trace's workers and replays, with a learner that trains each
fresh unit K times (``learner.replay_ratio``) against a target network, through a clipped surrogate. Its actor,
broker part, network and sizing are V-trace's, taken from the registry when first asked for (so that loading the
config imports no other agent); its learner part is V-trace's with IMPACT's update (``[impact]``)."""

from __future__ import annotations

from zrl.agents import Agent, get
from zrl.agents.impact.config import SECTION, ImpactConfig
from zrl.agents.impact.config import check as impact_check
from zrl.agents.vtrace import BROKER_FIGURES
from zrl.agents.vtrace import LEARNER_FIGURES as VTRACE_FIGURES


def _vtraces(name: str):
    """V-trace's declaration ``name``, looked up when called."""

    def call(*args):
        return getattr(get("vtrace"), name)(*args)

    call.__name__ = name
    return call


def check(cfg) -> None:
    """V-trace's rules (its replays), then IMPACT's own."""
    get("vtrace").check(cfg)
    impact_check(cfg)


LEARNER_FIGURES = {
    **VTRACE_FIGURES,
    "mean_rho": "the mean importance ratio pi_target/mu",
    "clip_fraction": "the share of steps whose ratio to the target network left the surrogate's clip",
    "target_kl": "the mean KL from the target network to the policy",
}

AGENT = Agent(
    name="impact",
    summary="IMPACT: V-trace against a target network with a clipped surrogate, each fresh unit trained on K times",
    section=SECTION,
    config=ImpactConfig,
    check=check,
    build_model=_vtraces("build_model"),
    ring_slots=_vtraces("ring_slots"),
    slots_per_message=_vtraces("slots_per_message"),
    action_scores=_vtraces("action_scores"),
    acts_greedily=False,
    replay_fill=_vtraces("replay_fill"),
    replay_ratio=_vtraces("replay_ratio"),
    actor="zrl.agents.vtrace.actor:VtraceActor",
    broker="zrl.agents.vtrace.broker:VtraceBroker",
    learner="zrl.agents.impact.learner:ImpactLearner",
    messages="zrl.agents.vtrace.messages",
    learner_figures=LEARNER_FIGURES,
    broker_figures=BROKER_FIGURES,
)
