"""SIGKILL the launcher, alone or with its whole process group: nothing of the run can clean up after itself, and
still, within 5 s, its rings are gone from /dev/shm, its socket folder from the temp folder and its roles from the
process table, without waiting for another launch (the reaper, shm/reaper.py, started by the launcher's wiring in a
session of its own), and the next launch's sweep of what dead launchers left finds nothing."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest
from conftest import REPO, command, zrl_processes, zrl_segments, zrl_socket_folders

from zrl.launch import sweep_stale

pytestmark = pytest.mark.e2e

SMOKE = REPO / "config" / "smoke.toml"


@pytest.mark.parametrize("target", ["the launcher", "its process group"])
def test_nothing_of_a_killed_run_outlives_it_by_5_s(tmp_path, no_leaks, target):
    segments_before, folders_before = zrl_segments(), zrl_socket_folders()
    proc = subprocess.Popen(
        command("zrl-launch", "--config", SMOKE, "--set", "run.max_env_frames=100000000", "--quiet"),
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while len(zrl_processes()) < 4 and time.monotonic() < deadline:  # broker, learner, 2 workers
            time.sleep(0.2)
        assert len(zrl_processes()) >= 4, "the roles never started"
        time.sleep(2.0)
        mine = {s for s in zrl_segments() - segments_before if f"_{proc.pid}_" in s}
        assert len(mine) == 2, mine  # the two workers' rings, named for the launcher
        if target == "the launcher":
            proc.send_signal(signal.SIGKILL)
        else:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
        killed = time.monotonic()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()

    def left() -> tuple:
        return (zrl_segments() - segments_before, zrl_socket_folders() - folders_before, zrl_processes())

    while any(left()) and time.monotonic() - killed < 15:
        time.sleep(0.1)
    gone_after = time.monotonic() - killed
    segments, folders, procs = left()
    assert not segments and not folders, (segments, folders)
    assert not procs, [p.info["cmdline"] for p in procs]
    assert gone_after < 5.0, gone_after
    assert sweep_stale() == ([], [])  # what the next launch sweeps first (Launcher.run): nothing was left
