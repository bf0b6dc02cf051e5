"""CSV logs: a resumed run appends under the header its file already has."""

from __future__ import annotations

import csv

import pytest

from zrl.metrics import CsvLog

pytestmark = pytest.mark.unit


def test_a_file_with_an_older_header_keeps_its_columns_aligned(tmp_path):
    path = tmp_path / "metrics.csv"
    old = CsvLog(path, ("wall_time", "learner_step", "time_env_step_s"))
    old.write({"wall_time": 1.0, "learner_step": 5, "time_env_step_s": 0.5})
    old.close()
    newer = CsvLog(path, ("wall_time", "learner_step", "learner_decode_errors", "time_env_step_s"))
    newer.write({"wall_time": 2.0, "learner_step": 6, "learner_decode_errors": 3, "time_env_step_s": 0.75})
    newer.close()
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [r["learner_step"] for r in rows] == ["5", "6"]
    assert [r["time_env_step_s"] for r in rows] == ["0.5", "0.75"]
    assert set(rows[1]) == {"wall_time", "learner_step", "time_env_step_s"}
