"""Every test tier, as CI runs it, in two lanes on one machine: ``python tests/run_all.py [PYTEST ARGS]``.

The learning tier (minutes of training each, budgeted in env steps, never in seconds) runs at the lowest CPU
priority (nice 19) in its own ``ZRL_NAMESPACE``, beside the other tiers at normal priority. A zrl run keeps about
three quarters of two cores busy (a worker waits for weights, a learner for batches), so the learning runs take
the cycles the rest leave idle, and a test in the other lane that watches the clock (a heartbeat, a Ctrl-C that
must end a run within seconds) keeps the cores it asks for. The e2e tests marked ``background`` (runs budgeted in
frames that assert nothing about timing) run in the learning lane too: that lane ends minutes before the other,
which they would lengthen. The namespace keeps the lanes apart: each lane's leak
checks (tests/conftest.py) count only its own shared-memory segments, socket folders and role processes, and no
launch sweeps the other lane's.

Arguments go to both lanes' pytest (``-x``, ``-k ...``, ``--durations=20``); ``-m`` is refused, since each
lane's marker is what splits them. The other lane's output streams; the learning lane's is kept and printed after
it. The exit status is 0 when both lanes pass, else the first failing lane's (the other lane's, then the learning
lane's). ``python -m pytest -q tests``
runs the same tests one after another, slower: the learning tier then has the machine alone and keeps it about
three quarters busy. Ctrl-C or SIGTERM stops both lanes (the
learning lane's runs stop in order, as zrl-launch does on SIGTERM).
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LEARNING_NAMESPACE = "learning"
LEARNING_NICE = 19
PR_SET_PDEATHSIG = 1


def _lane(marker: str, args: list[str], nice: int = 0, env: dict | None = None, log=None, basetemp=None):
    """One lane's pytest, in its own process group (so that it can be stopped whole) of this session (so that a
    nice value still ranks it: Linux's autogroups share the CPU fairly between sessions, not between processes)."""

    def start() -> None:
        os.setpgid(0, 0)
        if nice:
            os.nice(nice)
        if sys.platform.startswith("linux"):  # a lane outlives no killed runner: it gets the Ctrl-C pytest handles
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGINT)

    command = [sys.executable, "-m", "pytest", "-q", "-m", marker, *args, "tests"]
    if basetemp:
        command.insert(-1, f"--basetemp={basetemp}")
    output = {} if log is None else {"stdout": log, "stderr": subprocess.STDOUT}
    return subprocess.Popen(command, cwd=REPO, env=env, preexec_fn=start, **output)


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def _stop(lanes: list[subprocess.Popen]) -> None:
    """Ctrl-C each lane (pytest tears its tests down; a zrl-launch in the group stops in order), and kill what is
    still there a minute later."""
    for lane in lanes:
        if lane.poll() is None:
            os.killpg(lane.pid, signal.SIGINT)
    for lane in lanes:
        try:
            lane.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(lane.pid, signal.SIGKILL)
            lane.wait()


def main(args: list[str]) -> int:
    if any(arg == "-m" or arg.startswith("-m") and not arg.startswith("--") for arg in args):
        print("run_all: -m picks the tests of a lane here; run python -m pytest -m ... for one tier", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, _interrupt)
    started = time.monotonic()
    lanes: list[subprocess.Popen] = []
    with tempfile.TemporaryDirectory(prefix="zrl-tests-learning-") as scratch:
        log_path = Path(scratch) / "learning.log"
        with open(log_path, "w") as log:
            try:
                env = {**os.environ, "ZRL_NAMESPACE": LEARNING_NAMESPACE}
                basetemp = Path(scratch) / "tmp"
                lanes.append(_lane("learning or background", args, LEARNING_NICE, env, log, basetemp))
                print(
                    f"run_all: the learning tier and the background tests run beside the rest (nice {LEARNING_NICE}, "
                    f"ZRL_NAMESPACE={LEARNING_NAMESPACE}); their output follows",
                    flush=True,
                )
                lanes.append(_lane("not learning and not background", args))
                rest = lanes[1].wait()
                if lanes[0].poll() is None:
                    took = time.monotonic() - started
                    print(f"run_all: the other lane took {took:.0f} s; waiting for the learning lane", flush=True)
                learning = lanes[0].wait()
            except KeyboardInterrupt:
                _stop(lanes)
                print("run_all: interrupted; both lanes stopped", file=sys.stderr)
                return 130
        print(f"---- the learning lane (nice {LEARNING_NICE}, ZRL_NAMESPACE={LEARNING_NAMESPACE}) ----")
        print(log_path.read_text(), end="", flush=True)
    took = time.monotonic() - started
    print(f"run_all: the other lane exits {rest}, the learning lane {learning}; {took:.0f} s in all")
    return rest or learning


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
