"""A second Ctrl-C: out within 3 s, a loadable checkpoint, nothing left behind. SIGUSR1 to a role: its stacks."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest
from conftest import REPO, command, wait_for_checkpoint

from zrl import checkpoint

pytestmark = pytest.mark.e2e

SMOKE = REPO / "config" / "smoke.toml"


def test_a_second_ctrl_c_exits_within_3_s_and_leaves_a_loadable_checkpoint(tmp_path, no_leaks):
    proc = subprocess.Popen(
        command(
            "zrl-launch",
            "--config",
            SMOKE,
            "--set",
            "run.max_env_frames=100000000",
            "--set",
            "run.checkpoint_every_steps=2",
            "--quiet",
        ),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        folder = wait_for_checkpoint(tmp_path)
        proc.send_signal(signal.SIGINT)
        time.sleep(0.3)  # the orderly stop has begun: the learner may be writing its final checkpoint
        proc.send_signal(signal.SIGINT)
        second = time.monotonic()
        _, err = proc.communicate(timeout=30)
        took = time.monotonic() - second
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err[-2000:]
    assert took < 3.0, f"the second Ctrl-C took {took:.1f} s"
    good = next(state for _, state, _ in checkpoint.newest_good(folder) if state is not None)
    assert good["learner_step"] >= 2
    assert not list(folder.glob(".*.tmp-*"))  # a write cut short leaves no temp file


def test_sigusr1_makes_a_role_print_where_it_is():
    """The launcher sends SIGUSR1 to a role it declares hung before it kills it; a user can send it too."""
    code = (
        "import os, time\nfrom zrl.roles.lifecycle import start_role\nstart_role('zrl-test-role', os.getppid())\n"
        "def stuck_here():\n    print('ready', flush=True)\n    time.sleep(60)\nstuck_here()\n"
    )
    # 'ready' is printed inside stuck_here: the signal may land before print returns, and must still find it
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        proc.send_signal(signal.SIGUSR1)
        time.sleep(1.0)
        assert proc.poll() is None  # it goes on
    finally:
        proc.kill()
        _, err = proc.communicate(timeout=30)
    assert "most recent call first" in err and "stuck_here" in err, err
