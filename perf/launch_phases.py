"""Where a small zrl-launch spends its time, read out of its zrl.log: the launch's start to its run-folder line
(the launcher's imports and checks), to its roles' start (the fork server's preload), to the first frames, to
its exit line, and to the process's exit; and the CPU seconds of all its processes together.

    python perf/launch_phases.py --runs 3 [--config config/smoke.toml] [--set KEY=VALUE ...] [--tree PATH ...]

``--tree`` (repeatable): run the zrl-launch of that source tree (its bin/ shim, this interpreter) instead of this
one's; with several trees the launches alternate between them, round by round (``git worktree add /tmp/zrl_old
<commit>`` makes an older tree).

Each launch runs in a fresh temporary folder with run.max_env_frames=6000 (unless --set says otherwise) and
ZRL_NAMESPACE=launchphases. zrl.log reports every run.log_interval_s, so "first frames" is as fine as that.
Results go to stdout; perf/results/startup/ keeps them with the machine named.
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _stamp(line: str) -> float:
    return datetime.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()


def _children_cpu() -> float:
    """User and system CPU seconds of this process's reaped descendants: a launch's launcher, reaper, fork server
    and roles (the fork server reaps its roles, the launcher its fork server and reaper)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def phases(tree: Path, config: str, sets: list[str]) -> dict[str, float]:
    """One launch's phases, in seconds."""
    with tempfile.TemporaryDirectory(prefix="zrl-launch-phases-") as folder:
        options = [part for item in ["run.max_env_frames=6000", *sets] for part in ("--set", item)]
        began = time.time()
        cpu_before = _children_cpu()
        done = subprocess.run(
            [sys.executable, str(tree / "bin" / "zrl-launch"), "--config", config, *options, "--quiet"],
            cwd=folder,
            env={**os.environ, "ZRL_NAMESPACE": "launchphases"},
            capture_output=True,
            text=True,
        )
        ended = time.time()
        cpu = _children_cpu() - cpu_before
        if done.returncode != 0:
            raise SystemExit(f"zrl-launch exited {done.returncode}: {done.stderr[-2000:]}")
        (log,) = Path(folder).glob("results/*/zrl.log")
        lines = log.read_text().splitlines()
    folder_at = _stamp(lines[0])
    roles = [_stamp(line) for line in lines if " started zrl-" in line]
    frames = [_stamp(line) for line in lines if re.search(r" INFO frames [1-9]", line)]
    exit_line = [_stamp(line) for line in lines if " INFO exit " in line][-1]
    return {
        "to_run_folder": folder_at - began,
        "to_roles": roles[-1] - folder_at,
        "to_first_frames": (frames[0] if frames else exit_line) - roles[-1],  # none logged: the budget came first
        "to_exit_line": exit_line - (frames[0] if frames else exit_line),
        "to_process_exit": ended - exit_line,
        "whole": ended - began,
        "cpu": cpu,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--config", default=str(REPO / "config" / "smoke.toml"))
    parser.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--tree", dest="trees", action="append", type=Path, default=[])
    args = parser.parse_args()
    trees = args.trees or [REPO]
    names = None
    for _ in range(args.runs):
        for tree in trees:
            found = phases(tree, args.config, args.sets)
            if names is None:
                names = list(found)
                print(" ".join(f"{n:>16}" for n in names), " tree")
            print(" ".join(f"{found[n]:16.2f}" for n in names), "", tree, flush=True)


if __name__ == "__main__":
    main()
