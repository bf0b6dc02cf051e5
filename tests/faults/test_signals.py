"""A second Ctrl-C: out within 3 s, a loadable checkpoint, nothing left behind."""

from __future__ import annotations

import signal
import subprocess
import time

from conftest import REPO, command, wait_for_checkpoint
from zrl import checkpoint

SMOKE = REPO / "config" / "smoke.toml"


def test_a_second_ctrl_c_exits_within_3_s_and_leaves_a_loadable_checkpoint(tmp_path, no_leaks):
    proc = subprocess.Popen(command("zrl-launch", "--config", SMOKE, "--set", "run.max_env_frames=100000000", "--set",
                                    "run.checkpoint_every_steps=2", "--quiet"),
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
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
