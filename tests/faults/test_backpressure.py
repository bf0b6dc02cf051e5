"""A slow learner for 20 s: the broker's and the workers' memory stays flat, and the drop counters rise."""

from __future__ import annotations

import signal
import subprocess
import time

import pytest
from conftest import REPO, command, last_metric, reaped, zrl_processes

pytestmark = pytest.mark.e2e

SMOKE = REPO / "config" / "smoke.toml"


def _uss_floor(samples: int = 8, every_s: float = 0.25) -> dict[str, int]:
    """Each role's lowest USS over ``samples`` readings (the learner's aside). A worker's USS rises for a moment by a
    weights message or two (about 7 MB each on this net) while it takes one in, then falls back: a single reading
    can land on such a moment, while a leak raises the floor itself."""
    floor: dict[str, int] = {}
    for i in range(samples):
        for p in zrl_processes():
            role = " ".join(p.info["cmdline"])
            if not role.startswith("zrl-learner"):
                uss = p.memory_full_info().uss
                floor[role] = min(floor.get(role, uss), uss)
        if i + 1 < samples:
            time.sleep(every_s)
    return floor


def test_a_slow_learner_keeps_memory_bounded_and_counts_what_it_drops(tmp_path, no_leaks):
    # Workers run free (produce_ratio 0): paced, they wait for the slow learner's weights and send about what it
    # takes, so nothing would be dropped; free, they push as hard as they can against every bound.
    proc = subprocess.Popen(
        command(
            "zrl-launch",
            "--config",
            SMOKE,
            "--set",
            "run.max_env_frames=100000000",
            "--set",
            "run.log_interval_s=1.0",
            "--set",
            "workers.produce_ratio=0",
            "--quiet",
        ),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    with reaped(proc):
        deadline = time.monotonic() + 120
        while last_metric(tmp_path, "learner_step") < 3:
            assert time.monotonic() < deadline and proc.poll() is None, "the learner never stepped"
            time.sleep(0.3)
        time.sleep(3.0)  # the queues fill to their bounds
        start = _uss_floor()  # 2 s more
        assert len(start) == 3, start  # the broker and two workers
        dropped = last_metric(tmp_path, "unrolls_dropped_full") + last_metric(tmp_path, "unrolls_dropped_stale")
        (learner,) = [p for p in zrl_processes() if " ".join(p.info["cmdline"]).startswith("zrl-learner")]
        end = time.monotonic() + 20  # 20 s at a tenth of its speed: the bounds filled in the 5 s before
        while time.monotonic() < end:  # the injected delay: the learner runs a tenth of the time
            learner.suspend()
            time.sleep(0.9)
            learner.resume()
            time.sleep(0.1)
        after = _uss_floor()  # 2 s, in which the last stats come in too
        dropped_after = last_metric(tmp_path, "unrolls_dropped_full") + last_metric(tmp_path, "unrolls_dropped_stale")
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=90)
    assert proc.returncode == 130, err[-3000:]
    for role, uss in start.items():
        assert after[role] <= 1.15 * uss, f"{role}: USS grew from {uss / 1e6:.0f} to {after[role] / 1e6:.0f} MB"
    assert dropped_after > dropped, (dropped, dropped_after)
