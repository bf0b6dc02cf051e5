"""The learner's forward+backward+optimiser step per observation, for zrl's conv nets, by batch size, threads and
memory format, on random 84x84x4 Pong-shaped observations: the figures behind learner.batch_size, the channels-
last convolutions and model.kind = atari_small. Also one worker-sized inference (8 observations, no grad).

    python perf/model_cost.py --json perf/results/model_cost.json

Medians of --repeats timed steps after one warm-up; a ratio between rows is meaningful only within one run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from zrl.bench.facts import write_script_rows
from zrl.config import LearnerConfig, ModelConfig
from zrl.models import build_model
from zrl.optim import make_optimizer


def step_ms(kind: str, observations: int, channels_last: bool, repeats: int) -> tuple[float, float]:
    """Median ms of a training step on ``observations`` observations, and of an 8-observation inference."""
    torch.manual_seed(0)
    net = build_model(ModelConfig(kind=kind, hidden_size=512 if kind == "atari" else 256), (84, 84), "|u1", 4, 6)
    if not channels_last:  # zrl's nets are channels-last; this row undoes it, input included
        net = net.to(memory_format=torch.contiguous_format)
        net.forward = _plain(net)
    opt, _ = make_optimizer(net, LearnerConfig(optimizer="rmsprop_tf"), 10**6)
    obs = torch.randint(0, 256, (observations, 4, 84, 84), dtype=torch.uint8)
    times = []
    for _ in range(repeats + 1):
        t0 = time.perf_counter()
        out = net(obs)
        (out.logits.sum() + out.values.sum()).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - t0)
    with torch.no_grad():
        few = obs[:8]
        net(few)
        infer = []
        for _ in range(20):
            t0 = time.perf_counter()
            net(few)
            infer.append(time.perf_counter() - t0)
    return statistics.median(times[1:]) * 1e3, statistics.median(infer) * 1e3


def _plain(net):
    """The net's forward with its input left in the default (NCHW) layout."""

    def forward(obs, with_features: bool = False):
        x = obs.float().mul_(1.0 / 255.0)
        return net.heads(net.torso(x), with_features)

    return forward


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", default=None)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--threads", default="1,2")
    args = parser.parse_args()
    rows = []
    for threads in [int(t) for t in args.threads.split(",")]:
        torch.set_num_threads(threads)
        for kind in ("atari", "atari_small"):
            for unrolls, channels_last in ((32, False), (32, True), (8, False), (8, True)):
                observations = unrolls * 21  # B x (T+1), T = 20
                ms, infer_ms = step_ms(kind, observations, channels_last, args.repeats)
                row = {
                    "kind": kind,
                    "threads": threads,
                    "batch_unrolls": unrolls,
                    "observations": observations,
                    "channels_last": channels_last,
                    "step_ms": round(ms, 1),
                    "ms_per_observation": round(ms / observations, 4),
                    "core_ms_per_observation": round(ms * threads / observations, 4),
                    "inference_ms_per_observation_of_8": round(infer_ms / 8, 4),
                }
                rows.append(row)
                print(json.dumps(row), flush=True)
    if args.json:
        write_script_rows(args.json, rows)


if __name__ == "__main__":
    main()
