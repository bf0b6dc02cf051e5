"""Append-only CSV files of a run (episodes.csv, metrics.csv), flushed row by row."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

EPISODE_COLUMNS = (
    "episode",
    "raw_return",
    "score_5min",
    "score_30min",
    "length_frames",
    "length_env_steps",
    "env_frames",
    "wall_time",
    "worker_id",
    "env_index",
)

METRIC_COLUMNS = (
    "wall_time",
    "elapsed_s",
    "env_frames",
    "frames_per_s",
    "learner_step",
    "policy_version",
    "policy_lag",
    "sample_age_mean",
    "sample_age_max",
    "worker_policy_version_min",
    "worker_policy_version_max",
    "worker_weights_wait_s",
    "samples_per_s",
    "total_loss",
    "pg_loss",
    "baseline_loss",
    "entropy_loss",
    "policy_cloning_loss",
    "value_cloning_loss",
    "laser_masked_fraction",
    "learning_rate",
    "grad_norm",
    "mean_rho",
    "units_dropped_torn",
    "learner_wait_fraction",
    "learner_step_s",
    "broker_prepare_s",
    "broker_feature_s",
    "elite_lambda",
    "elite_distance_pool",
    "elite_distance_chosen",
    "elite_distance_min",
    "elite_distance_max",
    "unrolls_received",
    "unrolls_dropped_stale",
    "unrolls_dropped_full",
    "seq_gaps",
    "decode_errors",
    "replay_size",
    "replay_sizes",
    "ready_batches",
    "episodes",
    "mean_return_100",
    "worker_restarts",
    "stats_decode_errors",
    "learner_decode_errors",
) + tuple(
    f"time_{section}_s"
    for section in (
        "env_step",
        "inference",
        "ring_write",
        "send",
        "weights_wait",
        "broker_insert",
        "broker_sample",
        "broker_features",
        "learner_wait",
        "learner_gather",
        "learner_step",
        "learner_publish",
    )
)
"""The time_* columns: seconds each named section has taken since this launch began, summed over the
workers (env step, policy inference, ring write, unroll send, waiting for weights), the broker (decoding
and inserting unrolls, making batches; its feature passes, which sampling and insertion include) and the
learner (waiting for a batch, gathering frames, forward/backward/optimiser, publishing weights)."""


class CsvLog:
    """One CSV file with a fixed header; each row is written and flushed at once."""

    def __init__(self, path: str | Path, columns: tuple[str, ...]) -> None:
        self.path = Path(path)
        new = not self.path.exists() or self.path.stat().st_size == 0
        if not new:  # a resumed run keeps the header its file has, so that rows stay aligned under it
            with open(self.path, newline="") as fh:
                header = next(csv.reader(fh), None)
            columns = tuple(header) if header else columns
        self.columns = columns
        self._fh = open(self.path, "a", newline="")
        self._writer = csv.DictWriter(self._fh, fieldnames=columns)
        if new:
            self._writer.writeheader()
            self._fh.flush()

    def write(self, row: dict[str, Any]) -> None:
        self._writer.writerow({k: _fmt(row.get(k, "")) for k in self.columns})
        self._fh.flush()

    def close(self) -> None:
        self._fh.close()


def _fmt(value: Any) -> Any:
    return f"{value:.6g}" if isinstance(value, float) else value
