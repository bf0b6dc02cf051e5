"""SIGKILL the launcher's whole process group: nothing can clean up, so the next launch sweeps what is left."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest
from conftest import REPO, command, run_command, zrl_processes, zrl_segments, zrl_socket_folders

pytestmark = pytest.mark.e2e

SMOKE = REPO / "config" / "smoke.toml"


def test_the_next_launch_reaps_what_a_killed_process_group_left(tmp_path, no_leaks):
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
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    deadline = time.monotonic() + 10
    while zrl_processes() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not zrl_processes()
    left = zrl_segments() - segments_before
    folders = zrl_socket_folders() - folders_before
    assert len(left) == 2 and len(folders) == 1, (left, folders)  # two rings and the socket folder
    again = run_command("zrl-launch", "--config", SMOKE, "--set", "run.max_env_frames=4000", cwd=tmp_path, timeout=180)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "removed 2 stale shared-memory segments and 1 socket folders" in again.stdout
    assert not (zrl_segments() - segments_before) and not (zrl_socket_folders() - folders_before)


def test_roles_exit_within_seconds_when_only_the_launcher_is_killed(tmp_path, no_leaks):
    """SIGKILL the launcher alone: its roles get the parent-death signal (and watch its pid) and are gone
    within a few seconds; the next launch sweeps the rings and the socket folder."""
    proc = subprocess.Popen(
        command("zrl-launch", "--config", SMOKE, "--set", "run.max_env_frames=100000000", "--quiet"),
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 120
        while len(zrl_processes()) < 4 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert len(zrl_processes()) >= 4, "the roles never started"
        time.sleep(2.0)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        killed = time.monotonic()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    while zrl_processes() and time.monotonic() - killed < 15:
        time.sleep(0.1)
    gone_after = time.monotonic() - killed
    assert not zrl_processes(), [p.info["cmdline"] for p in zrl_processes()]
    assert gone_after < 5.0, gone_after
    again = run_command("zrl-launch", "--config", SMOKE, "--set", "run.max_env_frames=4000", cwd=tmp_path, timeout=180)
    assert again.returncode == 0 and "removed 2 stale shared-memory segments and 1 socket folders" in again.stdout
