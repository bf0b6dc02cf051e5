"""CSV logs: a resumed run appends under the header its file already has; reading them as they grow or damaged;
the time split and its bottleneck; the TensorBoard events beside them; starts.csv. Writes a disk refuses, in a
process of their own, are in tests/test_metrics_integration.py."""

from __future__ import annotations

import csv

import pytest
from conftest import REPO, tensorboard_scalars

from zrl import config
from zrl.launch.folder import RunFolder
from zrl.machine import cpu_description
from zrl.metrics.reading import CsvFollower, number, read_csv
from zrl.metrics.tensorboard import TensorBoardLog, episode_steps
from zrl.metrics.time_split import SECTIONS, bottleneck, time_shares
from zrl.metrics.writing import CsvLog

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


# -- reading a CSV as it grows, and a damaged one ---------------------------------------------------------------


def test_a_follower_takes_complete_rows_only_and_waits_for_a_half_written_line(tmp_path):
    path = tmp_path / "metrics.csv"
    path.write_text("a,b\n1,2\n3,")
    follower = CsvFollower(path)
    assert follower.poll() == [{"a": "1", "b": "2"}]
    assert follower.poll() == []  # the half-written line is not read as a row
    with open(path, "a") as fh:
        fh.write("4\n5,6\n")
    assert follower.poll() == [{"a": "3", "b": "4"}, {"a": "5", "b": "6"}]
    assert not follower.reset


def test_a_follower_reads_a_replaced_file_again_from_its_start(tmp_path):
    path = tmp_path / "metrics.csv"
    path.write_text("a\n1\n2\n3\n")
    follower = CsvFollower(path)
    assert len(follower.poll()) == 3
    path.unlink()
    path.write_text("a\n9\n")
    assert follower.poll() == [{"a": "9"}]
    assert follower.reset


def test_read_csv_skips_a_torn_last_line_and_malformed_lines_with_a_note(tmp_path):
    path = tmp_path / "episodes.csv"
    path.write_text("episode,raw_return\n1,-21\n2,-20,extra\n3,-19\n4,-1")
    rows, notes = read_csv(path)
    assert [r["episode"] for r in rows] == ["1", "3"]
    assert len(notes) == 2
    assert "torn last line" in notes[0] and "episodes.csv" in notes[0]
    assert "1 malformed" in notes[1]
    assert read_csv(tmp_path / "none.csv") == ([], [f"{tmp_path / 'none.csv'}: no such file"])


def test_read_csv_skips_a_line_whose_field_the_csv_module_refuses(tmp_path):
    path = tmp_path / "starts.csv"  # a hostile run folder: a field past the csv module's size limit
    path.write_text(f"wall_time,cpu\n1,A\n2,{'x' * 200_000}\n3,B\n")
    rows, notes = read_csv(path)
    assert [r["cpu"] for r in rows] == ["A", "B"]
    assert len(notes) == 1 and notes[0].startswith(f"{path}: skipped 1 malformed line (")


def test_number_reads_cells_and_refuses_what_is_not_a_finite_number():
    row = {"a": "1.5", "b": "", "c": "nan", "d": "inf", "e": "x", "f": 0, "g": 0.0, "h": "0", "i": float("inf")}
    keys = ("a", "b", "c", "d", "e", "f", "g", "h", "i", "missing")
    assert [number(row, k) for k in keys] == [1.5, None, None, None, None, 0.0, 0.0, 0.0, None, None]


def test_episode_steps_only_go_forward_when_workers_reports_cross():
    rows = [{"env_frames": "900"}, {"env_frames": "850"}, {"env_frames": "901"}, {"env_frames": "2000"}]
    assert episode_steps(rows) == [900, 901, 902, 2000]
    assert episode_steps(rows[:1], last=950) == [951]


# -- the time split and the bottleneck -------------------------------------------------------------------------


def _row(elapsed: float, **seconds: float) -> dict:
    row = {"elapsed_s": str(elapsed)}
    for group in SECTIONS.values():
        for section in group:
            row[f"time_{section}_s"] = str(seconds.get(section, 0.0))
    return row


def test_time_shares_are_seconds_per_second_between_two_rows():
    shares = time_shares(_row(10, env_step=1.0, learner_step=2.0), _row(20, env_step=9.0, learner_step=7.0))
    assert shares["env_step"] == 0.8 and shares["learner_step"] == 0.5 and shares["learner_wait"] == 0.0
    assert time_shares(_row(10), _row(10)) is None


def test_the_bottleneck_is_the_learner_when_it_never_waits_else_the_busiest_role():
    learner_bound = {s: 0.0 for g in SECTIONS.values() for s in g} | {"learner_step": 0.9, "learner_wait": 0.05}
    assert bottleneck(learner_bound, 2) == ("learner", "learner_step")
    worker_bound = learner_bound | {"learner_wait": 0.6, "env_step": 1.2, "inference": 0.5}
    assert bottleneck(worker_bound, 2) == ("workers (2)", "env_step")
    broker_bound = worker_bound | {"broker_sample": 0.9}
    assert bottleneck(broker_bound, 2) == ("broker", "broker_sample")


# -- TensorBoard -------------------------------------------------------------------------------------------------


def _metrics(frames: int, elapsed: float, **cells) -> dict:
    return {"wall_time": f"{1.7e9 + elapsed:.3f}", "elapsed_s": elapsed, "env_frames": frames, **cells} | _row(
        elapsed, env_step=elapsed / 2, learner_step=elapsed / 4
    )


def test_tensorboard_events_hold_every_figure_at_env_frame_steps_and_a_resume_never_steps_back(tmp_path):
    log = TensorBoardLog(tmp_path)
    log.metrics(_metrics(0, 1.0))
    log.metrics(
        _metrics(1000, 2.0, total_loss=0.5, mean_return_100=-20.0, replay_sizes="16 4", frames_per_s=800.0)
        | {"worker_restarts": 0, "policy_lag": 0.0}  # numbers, as the launcher's rows hold them: zeros are figures
    )
    log.metrics(_metrics(1000, 2.5, total_loss=0.7))  # no new frames: left out, the step is taken
    log.episode({"env_frames": 900, "raw_return": -21, "length_frames": 800, "wall_time": "1700000001.5"}, -21.0)
    log.episode({"env_frames": 850, "raw_return": -19, "length_frames": 700, "wall_time": "1700000001.6"}, -20.0)
    log.close()
    resumed = TensorBoardLog(tmp_path, metrics_after=1000, episodes_after=901)
    resumed.metrics(_metrics(1000, 1.0, total_loss=9.0))  # the resumed run's first row repeats the last count
    resumed.metrics(_metrics(2000, 2.0, total_loss=0.25))
    resumed.episode({"env_frames": 1500, "raw_return": -18, "length_frames": 700, "wall_time": "1700000009"}, -19.3)
    resumed.close()

    scalars = tensorboard_scalars(tmp_path)
    assert scalars["learner/total_loss"] == [(1000, 0.5), (2000, 0.25)]
    assert scalars["run/mean_return_100"] == [(1000, -20.0)]
    assert scalars["run/frames_per_s"] == [(1000, 800.0)]
    assert scalars["run/worker_restarts"] == [(1000, 0.0)] and scalars["learner/policy_lag"] == [(1000, 0.0)]
    assert scalars["broker/replay_size_0"] == [(1000, 16.0)] and scalars["broker/replay_size_1"] == [(1000, 4.0)]
    assert scalars["time_share/workers/env_step"][0] == (1000, 0.5)  # (1.0 - 0.5) s over 1 s
    assert scalars["time_share/learner/learner_step"][0] == (1000, 0.25)
    assert [s for s, _ in scalars["episodes/raw_return"]] == [900, 901, 1500]  # crossed reports: one frame on
    assert [v for _, v in scalars["episodes/mean_return_100"]] == pytest.approx([-21.0, -20.0, -19.3])
    for tag, points in scalars.items():
        steps = [s for s, _ in points]
        assert steps == sorted(set(steps)), f"{tag}: steps repeat or go back: {steps}"
    assert not any(tag.startswith(("learner/time_", "workers/time_")) for tag in scalars)  # shares, not totals


def test_each_start_of_a_run_is_a_row_of_starts_csv_and_a_file_that_refuses_it_costs_a_warning(tmp_path, capsys):
    """starts.csv: a row per launcher start naming its machine; a torn last line is cut off, with a note,
    and rows go under the header the file has; a starts.csv that cannot be written is said on stderr, and the
    launch goes on."""
    folder = RunFolder(tmp_path, config.load(REPO / "config" / "smoke.toml"))
    try:
        said = folder.record_start(0)
        starts = tmp_path / "starts.csv"
        starts.write_bytes(starts.read_bytes() + b"1.0,12")  # a start cut short mid-write
        folder.record_start(5000)
        rows, notes = read_csv(starts)
        assert [r["env_frames"] for r in rows] == ["0", "5000"] and not notes, (rows, notes)
        assert "starts.csv: dropped a torn last line (6 bytes with no newline: '1.0,12')" in capsys.readouterr().err
        assert all(r["cpu"] == cpu_description() and int(r["cores"]) >= 1 for r in rows)
        assert said.startswith(cpu_description())
        starts.write_text("cpu,env_frames,gpu\nX,1,H200\n")  # another version's columns: rows go under them
        folder.record_start(7000)
        assert read_csv(starts)[0][-1] == {"cpu": cpu_description(), "env_frames": "7000", "gpu": ""}
        starts.unlink()
        starts.mkdir()
        folder.record_start(6000)
        assert "cannot record this start in" in capsys.readouterr().err
    finally:
        folder.close_log()
