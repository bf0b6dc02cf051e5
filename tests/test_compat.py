"""What an older zrl wrote keeps working: a run folder and its checkpoint written by d8ab295, the last commit
before issue "2 of 7"'s redesign (agents as plug-ins, the config package, the launcher in parts), one per agent
(CartPole, 3,000 env frames, made with that commit's zrl-launch). zrl-eval plays the checkpoint, and
zrl-launch --resume reads the folder's config.toml (written by the old hand-written TOML writer), loads the
checkpoint and trains on to a larger budget in the same folder."""

from __future__ import annotations

import csv
import shutil

import pytest
from conftest import REPO, run_command

from zrl import checkpoint

pytestmark = pytest.mark.e2e

BEFORE = REPO / "tests" / "data" / "before_redesign"


@pytest.mark.background
@pytest.mark.parametrize("agent, budget", [("vtrace", 30_000), ("apex_iqn", 8_000)])
def test_a_run_written_before_the_redesign_plays_and_resumes(tmp_path, no_leaks, agent, budget):
    (source,) = (BEFORE / agent).iterdir()
    run_dir = tmp_path / "results" / source.name
    shutil.copytree(source, run_dir)
    (old,) = run_dir.glob("checkpoints/ckpt_*.pt")
    old_step = int(old.stem.removeprefix("ckpt_"))
    with open(run_dir / "metrics.csv") as fh:
        rows_before = len(list(csv.DictReader(fh)))

    played = run_command("zrl-eval", str(old), "--episodes", "2", cwd=tmp_path)
    assert played.returncode == 0, played.stderr[-3000:]

    resumed = run_command(
        "zrl-launch", "--resume", str(run_dir), "--set", f"run.max_env_frames={budget}", "--quiet", cwd=tmp_path
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    with open(run_dir / "metrics.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) > rows_before and int(rows[-1]["env_frames"]) >= budget
    steps = [
        int(p.stem.removeprefix("ckpt_")) for p, state, _ in checkpoint.newest_good(run_dir / "checkpoints") if state
    ]
    assert max(steps) > old_step, (steps, old_step)
