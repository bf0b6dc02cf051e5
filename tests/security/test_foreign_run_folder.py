"""Issue 38, item 5: a run folder is data; what a kill, a full disk or another hand left in it cannot break a resume.

One tiny CartPole run is made per module; each test resumes a copy of it, changed as its case says."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from conftest import REPO, csv_rows, run_command

from zrl.metrics import read_csv

pytestmark = pytest.mark.e2e

CARTPOLE = REPO / "config" / "cartpole.toml"
FRAMES = 12_000  # about 400 episodes of an untrained CartPole: past the 100 that best.pt needs


@pytest.fixture(scope="module")
def made_run(tmp_path_factory) -> Path:
    cwd = tmp_path_factory.mktemp("made")
    result = run_command(
        "zrl-launch", "--config", CARTPOLE, "--set", f"run.max_env_frames={FRAMES}",
        "--set", "run.checkpoint_every_steps=10", "--quiet", cwd=cwd, timeout=180,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    (run_dir,) = (cwd / "results").iterdir()
    return run_dir


def _resume(run_dir: Path, cwd: Path):
    return run_command(
        "zrl-launch", "--resume", run_dir, "--set", f"run.max_env_frames={2 * FRAMES}", cwd=cwd, timeout=180
    )


def test_a_torn_last_line_in_the_csv_files_is_cut_off_on_resume_with_a_note(made_run, tmp_path, no_leaks):
    run_dir = Path(shutil.copytree(made_run, tmp_path / made_run.name))
    episodes_before, metrics_before = csv_rows(run_dir / "episodes.csv"), csv_rows(run_dir / "metrics.csv")
    with open(run_dir / "episodes.csv", "a") as fh:
        fh.write("57")  # a kill during a write: the start of a row, no newline
    with open(run_dir / "metrics.csv", "a") as fh:
        fh.write("1796000000.5,12")
    result = _resume(run_dir, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    assert "episodes.csv: dropped a torn last line (2 bytes with no newline: '57')" in result.stderr
    assert "metrics.csv: dropped a torn last line (15 bytes with no newline: '1796000000.5,12')" in result.stderr
    for name, before in (("episodes.csv", episodes_before), ("metrics.csv", metrics_before)):
        rows, notes = read_csv(run_dir / name)
        assert not notes and rows[: len(before)] == before and len(rows) > len(before), (name, notes)
    episodes = [int(r["episode"]) for r in csv_rows(run_dir / "episodes.csv")]
    assert episodes == list(range(1, len(episodes) + 1))  # the counts ran on from the whole rows


def test_a_best_json_that_cannot_be_written_is_a_warning_and_best_pt_still_moves(made_run, tmp_path, no_leaks):
    run_dir = Path(shutil.copytree(made_run, tmp_path / made_run.name))
    best_json = run_dir / "checkpoints" / "best.json"
    best_json.unlink()
    best_json.mkdir()  # where the record would go there is a folder: the write fails
    best_before = (run_dir / "checkpoints" / "best.pt").read_bytes()
    result = _resume(run_dir, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"could not write {best_json}" in result.stderr and "best.pt is updated, its record is not" in result.stderr
    assert (run_dir / "checkpoints" / "best.pt").read_bytes() != best_before
