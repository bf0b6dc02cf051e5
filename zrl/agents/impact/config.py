"""IMPACT's config section, ``[impact]``: the target network's period and the surrogate's clip, with their rules.
IMPACT's other two knobs are every V-trace-family agent's: the reuse factor K is ``learner.replay_ratio`` (each
fresh unit trained on K times, on average) and its circular buffer is the queue replay (``capacity`` units).
V-trace's clips come from ``[vtrace]``. A leaf: it imports nothing of zrl but the error type."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from msgspec import Meta

from zrl.errors import fail

SECTION = "impact"


@dataclass(frozen=True)
class ImpactConfig:
    target_update_steps: Annotated[
        int,
        Meta(
            gt=0,
            description="Learner steps between copies of the network into the target network, which the surrogate's ratio and V-trace's importance weights are taken against.",
        ),
    ] = 4
    clip: Annotated[
        float,
        Meta(
            gt=0,
            lt=1,
            description="The surrogate's epsilon: the ratio of the policy to the target network counts within [1 - clip, 1 + clip] (PPO's and IMPACT's 0.2 is the default).",
        ),
    ] = 0.2


def check(cfg) -> None:
    """IMPACT's own rules on a whole config whose algo is impact (V-trace's run first: zrl.agents.impact): none of
    V-trace's CLEAR or LASER terms, which its loss does not take."""
    v = cfg.vtrace
    for key, on in (
        ("laser", v.laser),
        ("clear_policy_weight", v.clear_policy_weight),
        ("clear_value_weight", v.clear_value_weight),
    ):
        if on:
            fail(
                f"vtrace.{key}", 'is V-trace\'s; algo = "impact" takes no CLEAR or LASER term: leave it at its default'
            )
