"""Soak: a long zrl-launch run whose resources are sampled every minute, to show that nothing grows.

    python perf/soak.py --minutes 30 --config config/pong.toml --workers 2 --envs-per-worker 4

Every ``--every`` seconds it records, for the launcher and each role process (by title, so a restarted
worker is followed to its new pid): USS (unique set size: the memory only that process holds), open file
descriptors and threads; and the zrl shared-memory segments in /dev/shm, their count and bytes. At the
end it compares the last sample with the first one after ``--warmup`` minutes and reports each growth;
the goal is under 5%. The run keeps its checkpoints (one every 5 minutes) as a user's run would.

Figures go to stdout and to perf/results/soak.json with the machine's facts. Not part of CI.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from zrl.bench.facts import machine  # noqa: E402

TITLES = ("zrl-launch", "zrl-learner", "zrl-broker", "zrl-worker")
GOAL = 0.05


def role_processes(launcher: psutil.Process) -> dict[str, psutil.Process]:
    """The launcher and its role processes, keyed by title (zrl-worker-0, ...)."""
    found = {"zrl-launch": launcher}
    for child in launcher.children(recursive=True):
        try:
            title = " ".join(child.cmdline()).split(" ")[0]
        except psutil.Error:
            continue
        if title.startswith(TITLES[1:]):
            found[title] = child
    return found


def sample(launcher: psutil.Process, minute: float) -> dict:
    row: dict = {"minute": round(minute, 2), "roles": {}}
    for title, proc in sorted(role_processes(launcher).items()):
        try:
            with proc.oneshot():
                row["roles"][title] = {
                    "pid": proc.pid,
                    "uss_mb": round(proc.memory_full_info().uss / 2**20, 1),
                    "fds": proc.num_fds(),
                    "threads": proc.num_threads(),
                }
        except psutil.Error:  # exited between the listing and the reading (a restart)
            continue
    segments = [e for e in os.scandir("/dev/shm") if e.name.startswith("zrl_")]
    row["shm_segments"] = len(segments)
    row["shm_mb"] = round(sum(e.stat().st_blocks * 512 for e in segments) / 2**20, 1)
    return row


def growth(first: dict, last: dict) -> list[dict]:
    """Each figure's growth from ``first`` to ``last``: per role and for /dev/shm."""
    out = []
    for title, a in first["roles"].items():
        b = last["roles"].get(title)
        if b is None:
            continue
        for key in ("uss_mb", "fds", "threads"):
            out.append(
                {
                    "what": f"{title} {key}",
                    "first": a[key],
                    "last": b[key],
                    "growth": round((b[key] - a[key]) / a[key], 4) if a[key] else 0.0,
                }
            )
    for key in ("shm_segments", "shm_mb"):
        out.append(
            {
                "what": key,
                "first": first[key],
                "last": last[key],
                "growth": round((last[key] - first[key]) / first[key], 4) if first[key] else 0.0,
            }
        )
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--every", type=float, default=60.0, help="seconds between samples")
    ap.add_argument("--warmup", type=float, default=5.0, help="minutes before the first sample growth is measured from")
    ap.add_argument("--config", default=str(REPO / "config" / "pong.toml"))
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--envs-per-worker", type=int, default=4)
    ap.add_argument("--json", default=str(REPO / "perf" / "results" / "soak.json"))
    args = ap.parse_args()

    results = tempfile.mkdtemp(prefix="zrl-soak-")
    cmd = [
        sys.executable,
        str(REPO / "bin" / "zrl-launch"),
        "--config",
        args.config,
        "--workers",
        str(args.workers),
        "--envs-per-worker",
        str(args.envs_per_worker),
        "--set",
        f"run.results_dir={results}",
        "--set",
        f"run.max_seconds={args.minutes * 60 + 30:g}",
        "--set",
        "run.max_env_frames=10000000000",
        "--set",
        "run.checkpoint_every_minutes=5",
        "--set",
        "run.checkpoint_every_steps=0",
        "--quiet",
    ]
    print("soak: zrl-launch", " ".join(cmd[2:]), flush=True)
    log_path = Path(results) / "zrl-launch.out"  # a file, not a pipe that could fill over the run and block it
    log = open(log_path, "w")
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, text=True)
    launcher = psutil.Process(proc.pid)
    rows: list[dict] = []
    start = time.monotonic()
    try:
        while (minute := (time.monotonic() - start) / 60) <= args.minutes and proc.poll() is None:
            row = sample(launcher, minute)
            rows.append(row)
            roles = ", ".join(
                f"{t} {r['uss_mb']} MB/{r['fds']} fds/{r['threads']} thr" for t, r in row["roles"].items()
            )
            print(
                f"soak: minute {minute:5.1f}: /dev/shm {row['shm_segments']} segments {row['shm_mb']} MB; {roles}",
                flush=True,
            )
            time.sleep(max(0.0, args.every - (time.monotonic() - start) % args.every))
    finally:
        interrupted = proc.poll() is None
        if interrupted:
            proc.send_signal(signal.SIGINT)  # an orderly stop with a final checkpoint (exit code 130)
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()  # the roles follow their launcher (parent-death signal)
            proc.wait()
        log.close()
        out = log_path.read_text()
        shutil.rmtree(results, ignore_errors=True)
    if proc.returncode not in ((0, 130) if interrupted else (0,)):
        print(out[-3000:], file=sys.stderr)
        print(f"soak: zrl-launch exited with {proc.returncode}", file=sys.stderr)
        return 1
    warm = [r for r in rows if r["minute"] >= args.warmup]
    if len(warm) < 2:
        print(f"soak: fewer than two samples after the {args.warmup:g}-minute warm-up", file=sys.stderr)
        return 1
    table = growth(warm[0], warm[-1])
    worst = max(table, key=lambda g: g["growth"])
    print(f"soak: growth from minute {warm[0]['minute']} to {warm[-1]['minute']}:")
    for g in table:
        print(f"  {g['what']:<32} {g['first']:>10} -> {g['last']:>10}  {g['growth']:+.2%}")
    print(
        f"soak: largest growth {worst['what']} {worst['growth']:+.2%} (goal under {GOAL:.0%}): "
        f"{'met' if worst['growth'] < GOAL else 'NOT met'}"
    )
    doc = {
        "mode": "soak",
        "machine": {**machine(), "command": " ".join(["python", *sys.argv])},
        "result": {
            "minutes": args.minutes,
            "warmup_minutes": args.warmup,
            "samples": rows,
            "growth": table,
            "largest_growth": worst,
            "goal": GOAL,
            "met": worst["growth"] < GOAL,
        },
    }
    Path(args.json).write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
