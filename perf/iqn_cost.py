"""The Ape-X IQN learner's update alone (zrl's apex_sgd_step: online and target passes, quantile Huber loss,
backward, Adam), by quantiles N = N' = K and batch size, on random Pong-shaped observations with
config/apex_iqn_pong.toml's network: the figures behind that config's apex.quantiles. The pipeline's own
update time (learner_step_s in a run's metrics.csv) is higher, because the workers share the cores.

    python perf/iqn_cost.py --json perf/results/iqn_cost.json
    python perf/iqn_cost.py --adam-ab 5 --json perf/results/iqn_adam_fused.json

Medians of --repeats timed updates after --warmup; a ratio between rows is meaningful only within one run.
``--adam-ab R`` instead times the learner's fused Adam against PyTorch's default for-loop Adam at 32 quantiles
and batch 32, alternating the two for R rounds so that the machine's drift falls on both alike.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import statistics
import time
from pathlib import Path

import torch

from zrl import config
from zrl.agents.apex_iqn.learner import apex_sgd_step
from zrl.algos.iqn import NStep
from zrl.bench.facts import write_script_rows
from zrl.models.iqn import build_apex_model
from zrl.optim import make_optimizer

PONG = Path(__file__).resolve().parents[1] / "config" / "apex_iqn_pong.toml"


def update_ms(cfg: config.Config, quantiles: int, batch: int, warmup: int, repeats: int, fused: bool = True):
    """Median ms of one update of ``batch`` transitions with N = N' = K = ``quantiles``, and a function that
    times ``repeats`` more of the same updates (``fused``: the learner's Adam; False: PyTorch's default)."""
    apex = dataclasses.replace(cfg.apex, quantiles=quantiles, target_quantiles=quantiles, acting_quantiles=quantiles)
    torch.manual_seed(0)
    online = build_apex_model(cfg.model, apex, (84, 84), "|u1", cfg.env.frame_stack, 6)
    target = copy.deepcopy(online).requires_grad_(False)
    if fused:
        optimizer, _ = make_optimizer(online, cfg.learner, 10**6)
    else:
        optimizer = torch.optim.Adam(online.parameters(), lr=cfg.learner.learning_rate, eps=cfg.learner.adam_eps)
    obs = torch.randint(0, 256, (batch, cfg.env.frame_stack, 84, 84), dtype=torch.uint8)
    next_obs = torch.randint(0, 256, obs.shape, dtype=torch.uint8)
    actions = torch.randint(0, 6, (batch,))
    nstep = NStep(torch.zeros(batch), torch.full((batch,), 0.9))
    weights = torch.ones(batch)

    def timed(count: int) -> float:
        times = []
        for _ in range(count):
            t0 = time.perf_counter()
            apex_sgd_step(
                online, target, optimizer, obs, actions, nstep, next_obs, weights, apex, cfg.learner.grad_norm_clip
            )
            times.append(time.perf_counter() - t0)
        return statistics.median(times) * 1e3

    timed(warmup)
    return timed(repeats), timed


def adam_ab(cfg: config.Config, rounds: int, warmup: int, repeats: int) -> list[dict]:
    """Fused against for-loop Adam, alternated for ``rounds``: a row each with its per-round medians."""
    timers = {fused: update_ms(cfg, 32, 32, warmup, 1, fused)[1] for fused in (True, False)}
    medians = {fused: [] for fused in timers}
    for _ in range(rounds):
        for fused, timed in timers.items():
            timed(warmup)
            medians[fused].append(round(timed(repeats), 2))
    return [
        {
            "adam": "fused" if fused else "for-loop",
            "quantiles": 32,
            "batch": 32,
            "threads": torch.get_num_threads(),
            "update_ms": round(statistics.median(ms), 1),
            "round_medians_ms": ms,
        }
        for fused, ms in medians.items()
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", default=None)
    parser.add_argument("--quantiles", default="32,16,8")
    parser.add_argument("--batches", default="32,64")
    parser.add_argument("--threads", type=int, default=2, help="the config's learner.torch_threads")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument(
        "--adam-ab",
        type=int,
        default=0,
        metavar="ROUNDS",
        help="time fused against for-loop Adam in this many alternating rounds instead",
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    cfg = config.load(PONG)
    if args.adam_ab:
        rows = adam_ab(cfg, args.adam_ab, args.warmup, args.repeats)
    else:
        rows = []
        for quantiles in [int(q) for q in args.quantiles.split(",")]:
            for batch in [int(b) for b in args.batches.split(",")]:
                ms = update_ms(cfg, quantiles, batch, args.warmup, args.repeats)[0]
                rows.append(
                    {
                        "quantiles": quantiles,
                        "batch": batch,
                        "threads": args.threads,
                        "update_ms": round(ms, 1),
                        "transitions_per_s": round(batch / ms * 1e3),
                    }
                )
    for row in rows:
        print(json.dumps(row), flush=True)
    if args.json:
        write_script_rows(args.json, rows)


if __name__ == "__main__":
    main()
