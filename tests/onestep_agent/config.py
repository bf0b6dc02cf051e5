"""The test agent's config section, [onestep]: a leaf, as zrl's agents' sections are."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from msgspec import Meta

from zrl.errors import fail

SECTION = "onestep"


@dataclass(frozen=True)
class OnestepConfig:
    steps: Annotated[int, Meta(ge=1, description="Env steps per message and per n-step return.")] = 5
    fill: Annotated[int, Meta(ge=1, description="Units the queue holds before the learner's first batch.")] = 24
    ahead: Annotated[int, Meta(ge=1, description="Messages a worker sends per weights version before it waits.")] = 4
    entropy_cost: Annotated[float, Meta(ge=0, description="Weight of the policy's entropy in the loss.")] = 0.01


def check(cfg) -> None:
    if len(cfg.replay) != 1 or cfg.replay[0].type != "queue":
        fail("replay", "the onestep agent trains from one queue: give one [[replay]] of type queue")
    if cfg.replay[0].capacity < cfg.learner.batch_size:
        fail("replay[0].capacity", f"must hold at least a batch ({cfg.learner.batch_size} units)")
