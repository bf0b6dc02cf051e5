"""What the broker's check of one worker message costs (zrl/agents/vtrace/broker.py ``misfit``): run in two checkouts
to compare (issue 38 added range checks to it). A default-config unroll (the Atari defaults: envs per worker x
unroll length, 6 actions), without features and with elite's (512 per step).

    python perf/range_check_cost.py [--repeat 20000]
"""

from __future__ import annotations

import argparse
import sys
import timeit
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from zrl.agents.vtrace.broker import misfit  # noqa: E402
from zrl.agents.vtrace.messages import Unroll
from zrl.config import Config, load  # noqa: E402


def unroll(cfg: Config, features: int) -> Unroll:
    m, t, a = cfg.workers.envs_per_worker, cfg.learner.unroll_length, 6
    rng = np.random.default_rng(0)
    return Unroll(
        worker_id=0, seq=0, policy_version=0, first_frame=0, num_envs=m, length=t, env_frames=0,
        actions=rng.integers(0, a, (m, t)).astype(np.int32), rewards=rng.normal(size=(m, t)).astype(np.float32),
        discounts=np.ones((m, t), np.float32), behaviour_logits=rng.normal(size=(m, t, a)).astype(np.float32),
        behaviour_values=rng.normal(size=(m, t)).astype(np.float32),
        features=rng.random((m, t, features), dtype=np.float32) if features else np.zeros((0, 0, 0), np.float32),
    )  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20_000)
    args = parser.parse_args()
    plain = load(None, [])
    elite = load(None, ['replay=[{"type": "elite", "capacity": 64, "sample_ratio": 1.0}]'])
    for name, cfg, features in (("no features", plain, 0), ("elite's features", elite, 512)):
        msg = unroll(cfg, features)
        assert misfit(msg, cfg, 6) is None
        best = min(timeit.repeat(lambda: misfit(msg, cfg, 6), number=args.repeat, repeat=5)) / args.repeat  # noqa: B023
        print(f"{name}: {best * 1e6:.1f} us per unroll ({msg.num_envs} envs x {msg.length} steps)")


if __name__ == "__main__":
    main()
