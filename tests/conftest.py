"""Shared test helpers: run the real commands, and check that nothing leaks."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import psutil
import pytest

REPO = Path(__file__).resolve().parents[1]

# The tiers (markers declared in pyproject.toml) and each one's timeout per test: the suite's one timeout policy,
# enforced by pytest-timeout. A command that a test runs has its own, shorter timeout (run_command), so that a
# hung run fails with its own output; these catch a test that hangs anywhere else.
TIER_TIMEOUT_S = {"unit": 60, "integration": 180, "e2e": 600, "learning": 1500}
BIN = REPO / "bin"
ROLE_TITLES = ("zrl-worker", "zrl-broker", "zrl-learner")


def zrl_segments() -> set[str]:
    return {name for name in os.listdir("/dev/shm") if name.startswith("zrl_")}


def zrl_socket_folders() -> set[str]:
    return {p.name for p in Path(tempfile.gettempdir()).glob("zrl-*")}


def zrl_processes() -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmd = " ".join(proc.info["cmdline"] or [])
        if any(cmd.startswith(title) for title in ROLE_TITLES):
            found.append(proc)
    return found


def command(name: str, *args: str) -> list[str]:
    """The real command, run through its bin/ shim with this interpreter."""
    return [sys.executable, str(BIN / name), *map(str, args)]


def run_command(name: str, *args: str, cwd: Path, timeout: float = 300, preexec_fn=None) -> subprocess.CompletedProcess:
    """Run a command to its end. One past ``timeout`` gets Ctrl-C first, as a user would give it, so that a hung
    run fails its test with its own output and cleans up after itself; it is killed only if that fails.
    ``preexec_fn`` runs in the child before the command (to set a resource limit)."""
    with subprocess.Popen(
        command(name, *args), cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=preexec_fn
    ) as proc:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGINT)
            try:
                out, err = proc.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                out, err = proc.communicate()
            raise AssertionError(
                f"{name} ran past {timeout:g} s; its stdout ends:\n{out[-3000:]}\nits stderr ends:\n{err[-3000:]}"
            ) from None
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def metrics_rows(cwd: Path) -> list[dict]:
    """The rows of the metrics.csv of the one run under ``cwd/results`` so far ([] before it exists)."""
    import csv

    found = list((cwd / "results").glob("*/metrics.csv"))
    if not found:
        return []
    with open(found[0]) as fh:
        return list(csv.DictReader(fh))


def wait_for_checkpoint(cwd: Path, timeout: float = 120) -> Path:
    """The checkpoints folder of the one run under ``cwd/results``, once it holds a periodic checkpoint."""
    import time

    from zrl import checkpoint

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        folders = list((cwd / "results").glob("*/checkpoints"))
        if folders and checkpoint.periodic(folders[0]):
            return folders[0]
        time.sleep(0.2)
    raise AssertionError(f"no checkpoint was written within {timeout:g} s")


@pytest.fixture
def no_leaks():
    """Fails the test if it leaves a zrl shared-memory segment, socket folder or role process behind."""
    before, folders_before = zrl_segments(), zrl_socket_folders()
    yield
    left = zrl_segments() - before
    folders = zrl_socket_folders() - folders_before
    procs = zrl_processes()
    for proc in procs:
        proc.kill()
    assert not left, f"shared-memory segments left behind: {sorted(left)}"
    assert not folders, f"socket folders left behind: {sorted(folders)}"
    assert not procs, f"role processes left behind: {[p.info['cmdline'] for p in procs]}"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test has exactly one tier marker (its own, or its module's ``pytestmark``; a module whose tests
    differ marks each test instead), and runs under that tier's timeout."""
    for item in items:
        tiers = {m.name for m in item.iter_markers() if m.name in TIER_TIMEOUT_S}
        if len(tiers) != 1:
            raise pytest.UsageError(
                f"{item.nodeid}: a test takes exactly one tier marker of {', '.join(TIER_TIMEOUT_S)}, found "
                f"{', '.join(sorted(tiers)) or 'none'}; mark the test, or its module with pytestmark"
            )
        item.add_marker(pytest.mark.timeout(TIER_TIMEOUT_S[tiers.pop()]))
