"""Issue 38, item 7: a hang-up stops a run in order, with its final checkpoint, as SIGTERM does.

The run is started as a user starts it, on a terminal (a pseudo-terminal here, the run's controlling terminal),
and the terminal is then closed, as a dropped ssh session closes it: the kernel sends SIGHUP to the run's whole
process group (the launcher, its fork server, every role), and from then on every write to the terminal fails."""

from __future__ import annotations

import fcntl
import os
import pty
import subprocess
import termios
import threading

import pytest
from conftest import REPO, command, metrics_rows, wait_until

from zrl import checkpoint

pytestmark = pytest.mark.e2e


def _take_the_terminal() -> None:
    """In the child, after setsid: its standard input, the pseudo-terminal, becomes its controlling terminal."""
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


def test_a_closed_terminal_stops_the_run_in_order_with_its_final_checkpoint(tmp_path, no_leaks):
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        command("zrl-launch", "--config", REPO / "config" / "cartpole.toml", "--set", "run.max_env_frames=100000000"),
        cwd=tmp_path, stdin=follower, stdout=follower, stderr=follower,
        start_new_session=True, preexec_fn=_take_the_terminal,
    )  # fmt: skip
    os.close(follower)
    seen = bytearray()

    def read() -> None:  # the terminal's screen: read until it closes, so that the run never blocks on a full pty
        try:
            while chunk := os.read(leader, 4096):
                seen.extend(chunk)
        except OSError:
            pass

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        wait_until(lambda: (rows := metrics_rows(tmp_path)) and int(rows[-1]["learner_step"] or 0) > 2, 180,
                   "the learner to step")  # fmt: skip
        assert proc.poll() is None, bytes(seen[-3000:]).decode(errors="replace")
        os.close(leader)  # the hang-up
        code = proc.wait(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert code == 129, bytes(seen[-3000:]).decode(errors="replace")
    (run_dir,) = (tmp_path / "results").iterdir()
    log = (run_dir / "zrl.log").read_text()
    assert "stopping (interrupted)" in log, log[-3000:]
    final = checkpoint.load(checkpoint.latest(run_dir / "checkpoints"))
    assert final["learner_step"] > 0 and f"ckpt_{final['learner_step']:09d}" in log
    assert "exited with code" not in log, log[-3000:]  # no role died of the signal
