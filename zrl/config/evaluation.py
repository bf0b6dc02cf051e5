"""The [eval] section: evaluations during training. Each key declared once, as in ``zrl.config.schema``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from msgspec import Meta


@dataclass(frozen=True)
class EvalConfig:
    interval_frames: Annotated[
        int,
        Meta(
            ge=0,
            extra={"hint": "0: off"},
            description="Evaluate the policy every this many env frames in a process of its own (zrl-evaluator), which the learner never waits for; scores go to eval.csv and TensorBoard. 0: off.",
        ),
    ] = 0
    episodes: Annotated[
        int,
        Meta(
            gt=0,
            description="Episodes per evaluation, one after another; episode i of every evaluation plays with seed eval.seed + i, so that successive scores differ by the policy, not by luck.",
        ),
    ] = 10
    protocol: Annotated[
        str,
        Meta(
            extra={"hint": "auto, deepmind, machado or saber"},
            description='The evaluations\' protocol (zrl-eval --help): deepmind, machado, saber, or "auto": saber for a value-based agent (apex_iqn), deepmind for V-trace. An env that is not Atari plays as it trains.',
        ),
    ] = "auto"
    greedy: Annotated[
        bool,
        Meta(
            description="V-trace: act on the policy's most likely action instead of sampling it (zrl-eval --greedy). Value-based agents always act greedily.",
        ),
    ] = False
    held_out_states: Annotated[
        int,
        Meta(
            ge=0,
            description="Value-based agents (apex_iqn): the mean largest Q-value over this many held-out states of a random policy, with every evaluation (eval.csv mean_max_q). 0: none. Ignored for V-trace.",
        ),
    ] = 500
    seed: Annotated[
        int,
        Meta(ge=0, description="Seed of the evaluation episodes (episode i: seed + i) and of the held-out states."),
    ] = 1_000_003
    nice: Annotated[
        int,
        Meta(
            ge=0,
            le=19,
            description="Unix nice (0-19) the evaluator lowers itself by, below the workers', so that training keeps the cores; a lower value buys faster evaluations with frames/s (perf/README.md).",
        ),
    ] = 19
    final: Annotated[
        bool,
        Meta(
            description="With evaluations on: when the run ends by budget, time limit or eval.stop_at_score, evaluate its final checkpoint once more after the roles stop (eval.csv final = 1). false: none.",
        ),
    ] = True
    stop_at_score: Annotated[
        float,
        Meta(
            description="With evaluations on (eval.interval_frames): stop the run in order, with exit code 0, once an evaluation during training scores a mean of at least this. inf: never.",
        ),
    ] = float("inf")
