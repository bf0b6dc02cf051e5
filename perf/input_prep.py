"""The image models' input preparation, before and after: the V-trace learner's step and the elite broker's
feature pass on real Pong frames, timed with one source tree's zrl and then another's, in alternating processes.

    python perf/input_prep.py --before /tmp/zrl_old --rounds 3

``--before`` is a checkout of the older tree (``git worktree add /tmp/zrl_old <commit>``); the after tree is
this one. Each round runs one process per tree (the same seeds, the same replay of random-action Pong frames),
which times:

- the learner: ``sgd_step`` on a batch of ``learner.batch_size`` units of T+1 observations spread over the
  replay, at 1 and 2 threads (median of ``--repeats``), and on the batch of the replay's first units, every
  one of which holds the run's start (its first S-1 stacks blank frames: the unrolls forward's worst case);
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
    import zrl.gather as gather
    from zrl import config as config_mod
    from zrl.agents.vtrace.broker import make_batch
    from zrl.agents.vtrace.learner import batch_tensors, sgd_step
    from zrl.bench.elite import M, Replay, _unit
    from zrl.envs import probe
    from zrl.optim import make_optimizer
    from zrl.replay.sampled import compared_steps
    from zrl.roles.lifecycle import keep_freed_memory

    keep_freed_memory()
    torch.manual_seed(0)
    cfg = config_mod.load(None, ["run.max_env_frames=10000000000", "run.game_settings=false"])
    spec = probe(cfg.env)
    replay = Replay(cfg, spec, args.capacity, drift_steps=2, progress=lambda _: None)
    out: dict = {}
    try:
        lcfg, s, b = cfg.learner, cfg.env.frame_stack, cfg.learner.batch_size
        opt, sched = make_optimizer(replay.model, lcfg, 10**6)
        gatherer = gather.Gatherer([replay.ring], s, lcfg.unroll_length, b, spec.frame_shape, spec.frame_dtype)
        spread = [_unit(replay.messages[k * len(replay.messages) // b], k % M) for k in range(b)]
        run_start = [_unit(replay.messages[0], k % M) for k in range(b)]  # every unit holds the run's start
        for name, units, threads in (("", spread, 1), ("", spread, 2), ("_run_start", run_start, 1)):
            torch.set_num_threads(threads)
            batch = make_batch(0, units)
            frames, steps, ok = gatherer.gather(batch)
            # each tree's learner input: unrolls (after) or stacked observations (before)
            unrolls = hasattr(gather, "Unrolls")
            inputs = gather.Unrolls(frames, steps) if unrolls else gather.stack_observations(frames, steps, s)
            tensors = batch_tensors(batch, ok, torch.device("cpu"))
            times = []
            for _ in range(args.repeats + 1):
                t0 = time.perf_counter()
                sgd_step(replay.model, opt, sched, inputs, tensors, lcfg, cfg.vtrace)
                times.append(time.perf_counter() - t0)
            out[f"learner_step_s_{threads}_threads{name}"] = float(np.median(times[1:]))
            out[f"blanked_stacks{name}"] = int((steps[:, s - 1 :] < s - 1).sum())
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
            shown = (
                f"{k} {v}" if k.startswith("blanked") else f"{k} {v * 1000:.1f} ms" for k, v in runs[name][-1].items()
            )
            print(f"round {r + 1} {name}: " + ", ".join(shown))
    import numpy as np

    from zrl.machine import cpu_description

    summary: dict = {}
    for k in runs["after"][0]:
        if k.startswith("blanked"):
            summary[k] = runs["after"][0][k]  # the same frames in every round
            continue
        before, after = (round(float(np.median([x[k] for x in runs[t]])) * 1000, 2) for t in ("before", "after"))
        summary[k] = {"before_ms": before, "after_ms": after, "after_over_before": round(after / before, 3)}
    result = {
        "command": "python perf/input_prep.py " + " ".join(sys.argv[1:]),
        "before": subprocess.run(
            ["git", "-C", args.before, "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        ).stdout.strip(),
        "summary": summary,
        "rounds": runs,
        "machine": {
            "cpu": cpu_description(),
            "cores": os.cpu_count(),
            "python": platform.python_version(),
            "date": time.strftime("%Y-%m-%d %H:%M"),
        },
    }
    print(json.dumps(summary, indent=1))
    Path(args.json).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
