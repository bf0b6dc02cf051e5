"""Two launchers into one run folder: the second is refused, names the first one's pid, and touches nothing."""

from __future__ import annotations

import signal
import subprocess

import pytest
from conftest import REPO, command, run_command, wait_for_checkpoint

from zrl import checkpoint

pytestmark = pytest.mark.e2e

CARTPOLE = REPO / "config" / "cartpole.toml"


def test_a_second_launch_into_a_running_run_is_refused(tmp_path, no_leaks):
    first = subprocess.Popen(
        command(
            "zrl-launch",
            "--config",
            CARTPOLE,
            "--set",
            "run.max_env_frames=100000000",
            "--set",
            "run.checkpoint_every_steps=5",
            "--quiet",
        ),
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        folder = wait_for_checkpoint(tmp_path)
        run_dir = folder.parent
        before = sorted(p.name for p in folder.iterdir())
        for args in (("--resume", run_dir), ("--resume", "auto", "--config", CARTPOLE)):
            second = run_command("zrl-launch", *args, cwd=tmp_path, timeout=60)
            assert second.returncode == 2, second.stderr
            assert f"{run_dir.name}: in use by another zrl-launch (pid {first.pid})" in second.stderr, second.stderr
            assert "Traceback" not in second.stderr and second.stderr.count("\n") == 1
        assert first.poll() is None, "the first launch was disturbed"
        assert (run_dir / "config.toml").is_file()
        after = {p.name for p in folder.iterdir()}
        assert not {name for name in before if name.endswith(".bad")} ^ {n for n in after if n.endswith(".bad")}
        first.send_signal(signal.SIGINT)
        assert first.wait(60) == 130, first.stderr.read()[-2000:]
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    # the hold ends with the launcher: the run resumes now
    state = checkpoint.load(checkpoint.latest(run_dir / "checkpoints"))
    again = run_command(
        "zrl-launch",
        "--resume",
        run_dir,
        "--set",
        f"run.max_env_frames={state['env_frames'] + 5000}",
        "--quiet",
        cwd=tmp_path,
        timeout=180,
    )
    assert again.returncode == 0, again.stderr[-2000:]
    assert not (run_dir / ".zrl-launch.lock").exists()


def test_a_run_folder_that_cannot_hold_the_lock_is_a_clear_error(tmp_path, monkeypatch):
    """A read-only run folder (as root, permissions do not stop this process: the refusal is simulated)."""
    import errno
    import os

    import pytest

    from zrl.config import ConfigError
    from zrl.launch import RunLock

    def refuse(*_args, **_kwargs):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES))

    monkeypatch.setattr(os, "open", refuse)
    with pytest.raises(ConfigError, match="cannot write its lock file .zrl-launch.lock \\(Permission denied\\)"):
        RunLock(tmp_path)
