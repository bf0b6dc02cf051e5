"""A flood of connections to a real run's dashboard costs the run nothing: a CartPole ``zrl-launch --dashboard``
whose launcher may hold 128 files at most is held by 300 loopback connections that never finish a request (each
sends a byte of a header now and then, and is opened again when the server drops it, as a slowloris does); a worker
killed meanwhile is restarted, the run writes a new checkpoint, and the launcher holds no more of the page's
connections than its cap (zrl/dashboard/server.py, MAX_CONNECTIONS)."""

from __future__ import annotations

import re
import resource
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest
from conftest import REPO, command, reaped, wait_until
from flood import Slowloris, established

from zrl import checkpoint
from zrl.dashboard.server import MAX_CONNECTIONS
from zrl.namespace import role_title

pytestmark = pytest.mark.e2e

CARTPOLE = REPO / "config" / "cartpole.toml"
FLOOD = 300
# The launcher's limit: the flood alone would take more than it has, and an uncapped server, which a busy launcher
# lets take a few connections a second, would reach it within the flood's first seconds.
OPEN_FILES = 128


def _limit_open_files() -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (OPEN_FILES, hard))


def _worker(launcher: int, name: str) -> psutil.Process | None:
    title = role_title(name)
    for proc in psutil.Process(launcher).children(recursive=True):
        try:
            if " ".join(proc.cmdline()).strip() == title:
                return proc
        except psutil.Error:
            continue
    return None


def _stderr(run: subprocess.Popen) -> str:
    """The launcher's stderr once it has exited (its end), or a note that it runs still."""
    return run.stderr.read()[-3000:] if run.poll() is not None else "(zrl-launch runs still)"


def _checkpoints(run_dir: Path) -> set[str]:
    return {p.name for p in checkpoint.periodic(run_dir / "checkpoints")}


def test_a_flood_of_connections_to_the_dashboard_leaves_the_run_able_to_restart_and_checkpoint(tmp_path, no_leaks):
    args = ["--config", CARTPOLE, "--dashboard", "--quiet"]
    for key in ("run.max_env_frames=1000000000", "run.max_seconds=120", "run.checkpoint_every_steps=10"):
        args += ["--set", key]
    run = subprocess.Popen(
        command("zrl-launch", *args),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,  # a few lines: a restart's warning
        text=True,
        preexec_fn=_limit_open_files,
    )
    with reaped(run):
        line = run.stdout.readline()
        match = re.match(r"dashboard: http://127\.0\.0\.1:(\d+)/", line)
        assert match, (line, _stderr(run))
        port = int(match.group(1))
        victim = wait_until(lambda: _worker(run.pid, "zrl-worker-0"), 60, "worker 0", run)
        run_dir = next((tmp_path / "results").iterdir())
        wait_until(lambda: _checkpoints(run_dir), 60, "a first checkpoint", run)

        with Slowloris(port, FLOOD):
            time.sleep(12)  # the flood takes its hold
            assert run.poll() is None, _stderr(run)
            before = _checkpoints(run_dir)
            victim.send_signal(signal.SIGKILL)
            log = run_dir / "zrl.log"
            wait_until(
                lambda: "zrl-worker-0 exited with code -9; restarted it" in log.read_text(), 20, "the restart", run
            )
            new = wait_until(lambda: _worker(run.pid, "zrl-worker-0"), 10, "the new worker 0", run)
            assert new.pid != victim.pid
            wait_until(lambda: _checkpoints(run_dir) - before, 20, "a new checkpoint after the restart", run)
            assert run.poll() is None, _stderr(run)
            assert "Too many open files" not in log.read_text(), log.read_text()[-2000:]
            held = established(run.pid, port)  # what the launcher holds a file and a thread for
            assert held <= MAX_CONNECTIONS, f"the launcher holds {held} of the page's connections"

        run.send_signal(signal.SIGINT)
        assert run.wait(timeout=60) == 130, _stderr(run)
