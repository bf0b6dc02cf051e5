"""The image models' input preparation, before and after: the V-trace learner's step and the elite broker's
feature pass on real Pong frames, timed with one source tree's zrl and then another's, in alternating processes.

    python perf/input_prep.py --before /tmp/zrl_old --rounds 3

``--before`` is a checkout of the older tree (``git worktree add /tmp/zrl_old <commit>``); the after tree is
this one. Each round runs one process per tree (the same seeds, the same replay of random-action Pong frames),
which times:

- the learner: ``sgd_step`` on a batch of ``learner.batch_size`` units of T+1 observations, at 1 and 2 threads
  (median of ``--repeats``);
- the broker: a FeatureScorer's pass over a pool of lambda x B units at K compared steps, 1 thread (the
  broker's), for K in ``--steps``.

Both processes keep freed memory as the roles do (run.keep_freed_memory). The figures are medians over rounds
and their after/before ratios; they go to stdout and to perf/results/input_prep.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def measure(args) -> dict:
    """In a child process whose sys.path starts with the tree being measured."""
    sys.path.insert(0, args.child)
    import numpy as np
    import torch

    import zrl

    if not Path(zrl.__file__).resolve().is_relative_to(Path(args.child).resolve()):
        raise SystemExit(f"imported {zrl.__file__}, not the tree {args.child}")
    from zrl import config as config_mod
    from zrl.bench.elite import M, Replay, time_learner_step
    from zrl.envs import probe
    from zrl.replay.sampled import compared_steps
    from zrl.roles.common import keep_freed_memory

    keep_freed_memory()
    torch.manual_seed(0)
    cfg = config_mod.load(None, ["run.max_env_frames=10000000000"])
    spec = probe(cfg.env)
    replay = Replay(cfg, spec, args.capacity, drift_steps=2, progress=lambda _: None)
    out: dict = {}
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            out[f"learner_step_s_{threads}_threads"] = time_learner_step(
                replay.model, cfg, spec, replay.ring, replay.messages, args.repeats
            )
        torch.set_num_threads(1)
        _, scorer = replay.broker("elite", args.capacity, args.lam, 0, "fp32")
        units = len(replay.messages) * M
        pool_size = round(args.lam * cfg.learner.batch_size)
        first = np.repeat([m.first_frame for m in replay.messages], M).astype(np.int64)
        env = np.tile(np.arange(M, dtype=np.int32), len(replay.messages))
        for k in args.steps:
            at = compared_steps(cfg.learner.unroll_length, k)
            times = []
            for r in range(args.repeats + 1):
                pool = np.random.default_rng(r).choice(units, pool_size, replace=False)
                t0 = time.perf_counter()
                scorer(np.zeros(pool_size, np.int32), env[pool], first[pool], at)
                times.append(time.perf_counter() - t0)
            out[f"scorer_s_{len(at)}_steps"] = float(np.median(times[1:]))
    finally:
        replay.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", required=True, help="a checkout of the tree to compare with")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--capacity", type=int, default=400)
    parser.add_argument("--lambda", dest="lam", type=float, default=6.0)
    parser.add_argument("--steps", default="20,10,5", help="compared steps K of the scorer passes")
    parser.add_argument("--json", default=str(REPO / "perf" / "results" / "input_prep.json"))
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)  # the tree a child process measures
    args = parser.parse_args()
    args.steps = [int(k) for k in args.steps.split(",")]
    if args.child:
        print(json.dumps(measure(args)))
        return
    trees = {"before": str(Path(args.before).resolve()), "after": str(REPO)}
    for name, tree in trees.items():
        if not (Path(tree) / "zrl" / "gather.py").is_file():
            raise SystemExit(f"--{name}: {tree} holds no zrl source tree")
    runs: dict[str, list[dict]] = {name: [] for name in trees}
    for r in range(args.rounds):
        for name, tree in trees.items():
            command = [sys.executable, __file__, "--before", args.before, "--child", tree]
            command += ["--repeats", str(args.repeats), "--capacity", str(args.capacity), "--lambda", str(args.lam)]
            command += ["--steps", ",".join(map(str, args.steps))]
            env = {**os.environ, "PYTHONPATH": tree}
            done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=tree)
            if done.returncode:
                raise SystemExit(f"{name} tree failed:\n{done.stderr[-3000:]}")
            runs[name].append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(f"round {r + 1} {name}: " + ", ".join(f"{k} {v * 1000:.1f} ms" for k, v in runs[name][-1].items()))
    import numpy as np

    keys = list(runs["after"][0])
    summary = {
        k: {
            "before_ms": round(float(np.median([x[k] for x in runs["before"]])) * 1000, 2),
            "after_ms": round(float(np.median([x[k] for x in runs["after"]])) * 1000, 2),
        }
        for k in keys
    }
    for v in summary.values():
        v["after_over_before"] = round(v["after_ms"] / v["before_ms"], 3)
    result = {
        "command": "python perf/input_prep.py " + " ".join(sys.argv[1:]),
        "before": subprocess.run(
            ["git", "-C", args.before, "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        ).stdout.strip(),
        "summary": summary,
        "rounds": runs,
        "machine": {
            "cpu": _cpu_model(),
            "cores": os.cpu_count(),
            "python": platform.python_version(),
            "date": time.strftime("%Y-%m-%d %H:%M"),
        },
    }
    print(json.dumps(summary, indent=1))
    Path(args.json).write_text(json.dumps(result, indent=2) + "\n")


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


if __name__ == "__main__":
    main()
