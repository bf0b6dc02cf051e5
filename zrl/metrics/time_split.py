"""What the time_* columns of metrics.csv say: each role's time split and the pipeline's bottleneck."""

from __future__ import annotations

from zrl.metrics.reading import number

SECTIONS = {
    "workers": ("env_step", "inference", "ring_write", "send", "weights_wait"),
    "broker": ("broker_insert", "broker_sample"),
    "learner": ("learner_wait", "learner_gather", "learner_step", "learner_publish"),
}
"""Each role's named timed sections: metrics.csv's ``time_<section>_s`` columns (the workers' summed)."""
IDLE = {"weights_wait", "learner_wait"}  # waiting, not working
SECTION_LABELS = {
    "env_step": "env step",
    "inference": "inference",
    "ring_write": "ring write",
    "send": "send",
    "weights_wait": "waiting for weights",
    "broker_insert": "insert",
    "broker_sample": "sample",
    "learner_wait": "waiting for batches",
    "learner_gather": "gather",
    "learner_step": "forward/backward",
    "learner_publish": "publish",
}


def time_shares(first: dict, last: dict) -> dict[str, float] | None:
    """Seconds each section took per second of run between two metrics.csv rows (workers summed); None where the
    rows span no time or lack the columns."""
    start, end = number(first, "elapsed_s"), number(last, "elapsed_s")
    if start is None or end is None or end <= start:
        return None
    out = {}
    for group in SECTIONS.values():
        for s in group:
            a, b = number(first, f"time_{s}_s"), number(last, f"time_{s}_s")
            if a is None or b is None:
                return None
            out[s] = round(max(0.0, b - a) / (end - start), 4)
    return out


def learner_wait_share(shares: dict[str, float]) -> float:
    """The share of the learner's time it spent waiting for batches."""
    busy = sum(shares[s] for s in SECTIONS["learner"] if s not in IDLE)
    return shares["learner_wait"] / max(1e-9, busy + shares["learner_wait"])


def bottleneck(shares: dict[str, float], workers: int) -> tuple[str, str]:
    """Which role limits the pipeline, and its busiest section, from each role's share of its time: the learner
    when it waits under a tenth of its time, the broker when it is busy over 0.8 of a core, the workers else."""
    broker_busy = sum(shares[s] for s in SECTIONS["broker"])
    if learner_wait_share(shares) < 0.10:
        return "learner", max((s for s in SECTIONS["learner"] if s not in IDLE), key=shares.__getitem__)
    if broker_busy > 0.8:
        return "broker", max(SECTIONS["broker"], key=shares.__getitem__)
    section = max((s for s in SECTIONS["workers"] if s not in IDLE), key=shares.__getitem__)
    return f"workers ({workers})", section
