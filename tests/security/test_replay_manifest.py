"""A run folder from elsewhere is data (issue 38, item 5): a resumed run whose replay checkpoint's manifest names a
file outside its folder is refused with one line, exit 2, before a frame is read, rather than a traceback."""

from __future__ import annotations

import json

import pytest
from conftest import REPO, run_command

from zrl.replay_checkpoint import newest, replay_folder

pytestmark = pytest.mark.e2e


def test_a_resume_with_a_poisoned_replay_manifest_is_a_usage_error(tmp_path, no_leaks):
    """A tiny CartPole run saves its replay (run.checkpoint_replay); its newest manifest is then made to name a
    chunk up the tree. ``zrl-launch --resume RUN`` exits 2 with one line naming the manifest and the way to start
    without the saved replay, and no traceback; that way out resumes."""
    replay = ("--set", "run.checkpoint_replay=true", "--set", "workers.count=1")
    first = run_command(
        "zrl-launch", "--config", REPO / "config" / "cartpole.toml", "--set", "run.max_env_frames=3000", *replay,
        "--quiet", cwd=tmp_path, timeout=120,
    )  # fmt: skip
    assert first.returncode == 0, first.stderr[-3000:]
    (run_dir,) = (tmp_path / "results").iterdir()
    path, manifest = newest(replay_folder(run_dir))
    manifest["rings"][0]["chunks"][0] = "../../../config.toml"
    path.write_text(json.dumps(manifest))

    again = run_command("zrl-launch", "--resume", run_dir, *replay, cwd=tmp_path, timeout=120)
    assert again.returncode == 2, again.stderr[-3000:]
    assert "Traceback" not in again.stdout + again.stderr, again.stderr[-3000:]
    (line,) = again.stderr.splitlines()
    assert str(path) in line and "'../../../config.toml'" in line and "run.checkpoint_replay=false" in line, line
    hint = ("--set", "run.checkpoint_replay=false", "--set", "workers.count=1", "--quiet")
    without = run_command("zrl-launch", "--resume", run_dir, *hint, cwd=tmp_path, timeout=120)
    assert without.returncode == 0, without.stderr[-3000:]  # the way out the line names works
