"""V-trace's config section, ``[vtrace]``: its clips, CLEAR's cloning losses and LASER's mask, with their rules.
A leaf: it imports nothing of zrl but the error type, so that ``zrl.config`` composes it into the run's config
without importing the agent."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from msgspec import Meta

from zrl.errors import choice, fail

SECTION = "vtrace"
CLONING_KL = ("mu_pi", "pi_mu")
CLONING_VALUE = ("squared", "l2_norm")


@dataclass(frozen=True)
class VtraceConfig:
    clip_rho: Annotated[
        float,
        Meta(
            ge=0,
            description="V-trace rho-bar: clip of the importance weight in the value targets; 0 means no clipping.",
        ),
    ] = 1.0
    clip_c: Annotated[
        float,
        Meta(
            ge=0,
            description="V-trace c-bar: clip of the trace coefficients (the reference platform hard-wired it to 1); 0 means no clipping.",
        ),
    ] = 1.0
    clip_pg_rho: Annotated[
        float,
        Meta(
            ge=0,
            description="Clip of the importance weight in the policy-gradient advantage (the reference platform called it c); 0 means no clipping.",
        ),
    ] = 1.0
    laser: Annotated[
        bool,
        Meta(
            description="LASER: a step whose KL(pi || mu) exceeds laser_kl_threshold is cut from the trace, the advantages, the value error and the cloning terms."
        ),
    ] = False
    laser_kl_threshold: Annotated[
        float, Meta(gt=0, description="LASER's KL threshold (the reference platform's default).")
    ] = 0.3
    clear_policy_weight: Annotated[
        float,
        Meta(
            ge=0,
            description="CLEAR policy cloning: weight of the KL between behaviour and current policy, summed over every step of the batch; 0: off (plain IMPALA; CLEAR's paper uses 0.01 with replay).",
        ),
    ] = 0.0
    clear_policy_kl: Annotated[
        str,
        Meta(
            description="Direction of the cloning KL: mu_pi is KL(mu || pi), the CLEAR paper's; pi_mu is KL(pi || mu), what the reference platform computed."
        ),
    ] = "mu_pi"
    clear_value_weight: Annotated[
        float,
        Meta(
            ge=0,
            description="CLEAR value cloning: weight of the error between the current value and the worker's behaviour-time value; 0 switches it off (the CLEAR paper uses 0.005 with replay).",
        ),
    ] = 0.0
    clear_value_loss: Annotated[
        str,
        Meta(
            description="squared: sum of (V - V_mu)^2, the CLEAR paper's form; l2_norm: its square root, the reference platform's unsquared form."
        ),
    ] = "squared"

    def check(self) -> None:
        """The section's own rules, for every run whatever its algo: the names its string keys take."""
        choice("vtrace.clear_policy_kl", self.clear_policy_kl, CLONING_KL)
        choice("vtrace.clear_value_loss", self.clear_value_loss, CLONING_VALUE)


def check(cfg) -> None:
    """V-trace's rules on a whole config whose algo is vtrace: no prioritized replay, which holds Ape-X
    transitions. (Its section's bounds and choices hold for every run: the fields' own, and VtraceConfig.check.)"""
    prioritized = [i for i, rep in enumerate(cfg.replay) if rep.type == "prioritized"]
    if prioritized:
        fail(
            f"replay[{prioritized[0]}].type", 'a prioritized replay holds Ape-X transitions: it needs algo = "apex_iqn"'
        )
