"""Append-only CSV files of a run (episodes.csv, metrics.csv), flushed row by row."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from zrl import protocol

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

STATS_MESSAGES = (protocol.LearnerStats, protocol.WorkerStats, protocol.BrokerStats)
"""The roles' reports whose fields marked ``protocol.Stat`` are columns of metrics.csv: the declaration gives each
column's name, how the launcher combines the workers' reports, and what it means (``METRIC_DOCS``)."""

METRIC_DOCS = {stat.column: stat.doc for message in STATS_MESSAGES for _, stat in message.STATS}

METRIC_COLUMNS = (
    "wall_time",
    "elapsed_s",
    "env_frames",
    "frames_per_s",
    "samples_per_s",
    *(column for column in METRIC_DOCS if not column.startswith("time_")),
    "learner_wait_fraction",
    "learner_step_s",
    "broker_prepare_s",
    "broker_feature_s",
    "episodes",
    "mean_return_100",
    "worker_restarts",
    "stats_decode_errors",
    *(column for column in METRIC_DOCS if column.startswith("time_")),
)
"""The launcher's own figures, the roles' (their Stat fields; the time_* columns last: seconds each named section
has taken since this launch began, summed over the workers) and the interval's time shares."""


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
