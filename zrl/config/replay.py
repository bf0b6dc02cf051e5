"""The [[replay]] tables: each replay of a run and how it stores and samples unrolls. Each key declared once, as
in ``zrl.config.schema``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from msgspec import Meta


@dataclass(frozen=True)
class ReplayConfig:
    type: Annotated[
        str,
        Meta(
            description="queue: FIFO of fresh unrolls; uniform: sampled uniformly; elite: by distance of stored to current features; attentive: by distance to the newest state's current feature; prioritized: Ape-X's."
        ),
    ] = "queue"
    capacity: Annotated[
        int,
        Meta(
            gt=0,
            description="Unrolls the replay holds; when full the oldest is replaced. A queue holds at least what one batch takes from it, so capacity 1 means as fresh as possible.",
        ),
    ] = 64
    sample_ratio: Annotated[
        float,
        Meta(
            gt=0,
            le=1,
            description="Share of every batch taken from this replay; the ratios sum to 1 and batch_size x sample_ratio must be whole.",
        ),
    ] = 1.0
    discard: Annotated[
        str,
        Meta(
            extra={"hint": "keep_latest, keep_oldest or alternating"},
            description="queue: what a full queue drops for a new unroll: keep_latest, its oldest unit (the freshest data trains); keep_oldest, the new unroll; alternating, the oldest and the new one by turns.",
        ),
    ] = "keep_latest"
    fill_fraction: Annotated[
        float,
        Meta(
            gt=0,
            le=1,
            description="uniform, elite, attentive: training starts once the replay holds fill_fraction x capacity unrolls (a queue: one batch's share).",
        ),
    ] = 0.1
    dist_function: Annotated[
        str,
        Meta(
            description="elite, attentive: ln_norm (p-norm of the [steps, F] difference), cos_dist (1 - the cosine of the flattened [steps, F] matrices) or kl_div (sum over steps of KL(softmax(current) || softmax(stored)))."
        ),
    ] = "ln_norm"
    p: Annotated[
        float, Meta(ge=1, extra={"hint": "the p of a p-norm"}, description="elite, attentive: the p of ln_norm.")
    ] = 2.0
    strategy: Annotated[
        int,
        Meta(
            description="elite, attentive: of m candidates sorted by distance, w = floor(m / n): 1 the n lowest; 2 the lowest of each of the first n windows of w; 3 as 1, least sampled first; 4 as 2, least sampled first."
        ),
    ] = 3
    lambda_batch_multiplier: Annotated[
        float,
        Meta(
            ge=1,
            extra={"hint": "1 samples uniformly"},
            description="elite, attentive: the candidate pool holds int(lambda x n) distinct units (n = batch_size x sample_ratio); lambda anneals to 1, where sampling is uniform.",
        ),
    ] = 6.0
    alfa_annealing_factor: Annotated[
        float,
        Meta(
            gt=0,
            description="elite, attentive: lambda anneals linearly to 1 over alfa_annealing_factor x the learning-rate decay steps, counted in sample calls.",
        ),
    ] = 2.0
    feature_steps: Annotated[
        int,
        Meta(
            ge=0,
            extra={"hint": "0 compares all steps"},
            description="elite, attentive: time steps of each unit whose features are compared, evenly spaced; 0 (or T or more): all T. Fewer cost less and choose less faithfully (perf/README.md).",
        ),
    ] = 0
    elite_insertion: Annotated[
        bool,
        Meta(
            description="elite, attentive: once full, a new unit replaces the unit with the largest distance among elite_batch_size random ones instead of the oldest."
        ),
    ] = False
    elite_batch_size: Annotated[
        int,
        Meta(
            ge=1,
            extra={"hint": "at most the capacity is drawn"},
            description="elite, attentive: units drawn for each elite insertion (the units of one worker message share a draw).",
        ),
    ] = 20
