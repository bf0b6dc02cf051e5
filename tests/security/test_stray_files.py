"""Issue 38, item 6: what other users and stray files leave in /dev/shm and /tmp cannot stop a launch.

Any local user can create ``/dev/shm/zrl_x_2147483648_a``: a name the stale sweep parses, with a pid no process can
have (``os.kill`` overflowed on it, and every zrl-launch on the host died with exit 1). The sweep leaves what it
cannot judge, and says so in the run's log."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from conftest import REPO, reaped_pid, run_command

from shm import pid_max
from zrl.namespace import private_prefix, shm_prefix

pytestmark = pytest.mark.e2e


@pytest.fixture
def strays():
    """A stray segment name with a pid beyond any pid_max (2**31 overflows a C int), a directory and a symlink
    under segment names with a dead pid, and a socket-folder name with a pid beyond pid_max, all in this test
    session's namespace; removed afterwards."""
    dead = reaped_pid()
    shm_dir, tmp = Path("/dev/shm"), Path(tempfile.gettempdir())
    made = {
        "huge": shm_dir / f"{shm_prefix()}_x_{2**31}_a",
        "folder": shm_dir / f"{shm_prefix()}_x_{dead}_b",
        "link": shm_dir / f"{shm_prefix()}_x_{dead}_c",
        "socket folder": tmp / f"{private_prefix()}{pid_max() + 1}-stray",
    }
    target = tmp / f"{private_prefix()}target-{os.getpid()}"
    target.write_bytes(b"kept")
    made["huge"].write_bytes(b"")
    made["folder"].mkdir()
    made["link"].symlink_to(target)
    made["socket folder"].mkdir()
    try:
        yield made
    finally:
        for path in made.values():
            if path.is_dir() and not path.is_symlink():
                path.rmdir()
            else:
                path.unlink(missing_ok=True)
        target.unlink()


def test_stray_entries_that_the_sweep_cannot_judge_do_not_stop_a_launch(strays, tmp_path, no_leaks):
    result = run_command(
        "zrl-launch", "--config", REPO / "config" / "smoke.toml", "--set", "run.max_env_frames=4000",
        cwd=tmp_path, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "left 4 stray entries the stale sweep cannot judge (named in zrl.log)" in result.stdout
    log = next((tmp_path / "results").glob("*/zrl.log")).read_text()
    assert f"left {strays['huge']}: pid {2**31} is beyond this system's pid_max" in log
    assert f"left {strays['folder']}: not a regular file" in log
    assert f"left {strays['link']}: not a regular file" in log
    assert f"left {strays['socket folder']}: pid {pid_max() + 1} is beyond this system's pid_max" in log
    assert all(path.is_symlink() or path.exists() for path in strays.values())
    assert strays["link"].read_bytes() == b"kept"
