"""The learner's two ways to compute the first convolution of a training pass (learner.unroll_conv), timed on
this machine: the V-trace ``sgd_step`` on one batch of the config's shape (random frames, mid-episode), with the
3-d convolution over each unroll's frames and with the stacked observations, at 1 and 2 threads, alternating
the two ``--rounds`` times (median steps of ``--repeats`` each), and what auto picks.

    python perf/unroll_conv.py --config config/pong.toml --json perf/results/unroll_conv/<cpu>.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from types import SimpleNamespace


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=None)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()

    import torch

    from zrl import config
    from zrl.agents.vtrace.learner import choose_unroll_conv, sgd_step
    from zrl.bench.facts import machine
    from zrl.bench.modes.learner import _fixed_batch
    from zrl.envs import probe

    cfg = config.load(args.config)
    spec = probe(cfg.env)
    model, opt, sched, obs, batch = _fixed_batch(cfg, spec)
    result: dict = {"config": args.config, "batch": [cfg.learner.batch_size, cfg.learner.unroll_length]}
    for threads in (1, 2):
        torch.set_num_threads(threads)
        times: dict[str, list[float]] = {"conv3d": [], "stacks": []}
        for _ in range(args.rounds):
            for path, samples in times.items():
                model.unroll_conv = path
                sgd_step(model, opt, sched, obs, batch, cfg.learner, cfg.vtrace)  # warm-up
                steps = []
                for _ in range(args.repeats):
                    start = time.perf_counter()
                    sgd_step(model, opt, sched, obs, batch, cfg.learner, cfg.vtrace)
                    steps.append(time.perf_counter() - start)
                samples.append(statistics.median(steps))
        row = {f"{path}_step_ms": round(statistics.median(s) * 1000, 1) for path, s in times.items()}
        row["stacks_over_conv3d"] = round(row["stacks_step_ms"] / row["conv3d_step_ms"], 3)
        row["picked"] = choose_unroll_conv(model, cfg)  # what learner.unroll_conv (auto by default) takes
        result[f"{threads}_threads"] = row
        print(f"{threads} threads: {row}", flush=True)
    out = {"command": "python perf/unroll_conv.py " + " ".join(_argv(args)), "machine": machine(), **result}
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=1)
        print(f"wrote {args.json}")


def _argv(args: SimpleNamespace) -> list[str]:
    return [f"--{k}={v}" for k, v in vars(args).items() if v is not None]


if __name__ == "__main__":
    main()
