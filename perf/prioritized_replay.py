"""The prioritized replay's cost per batch at Ape-X's capacity: sample B transitions (stratified, with
importance weights) plus the learner's priority update for them, and a worker's insertion of a block.

    python perf/prioritized_replay.py --capacity 1000000 --batch 32 --repeats 2000

Figures go to stdout and to perf/results/prioritized_replay.json with the machine's facts.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from zrl.bench.facts import machine  # noqa: E402
from zrl.replay.prioritized import PrioritizedReplay, Transitions  # noqa: E402


def block(rng: np.random.Generator, start: int, n: int) -> Transitions:
    frames = np.arange(start, start + n, dtype=np.int64)
    return Transitions(
        rng.integers(0, 8, n, dtype=np.int32),
        rng.integers(0, 4, n, dtype=np.int32),
        frames,
        rng.integers(0, 18, n, dtype=np.int32),
        rng.random(n, dtype=np.float32),
        np.full(n, 0.99**3, np.float32),
        frames + 3,
        np.zeros(n, np.int64),
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--capacity", type=int, default=1_000_000)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--insert-block", type=int, default=1000, help="transitions a worker sends at once")
    ap.add_argument("--repeats", type=int, default=2000)
    ap.add_argument("--json", default=str(REPO / "perf" / "results" / "prioritized_replay.json"))
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    replay = PrioritizedReplay(args.capacity)
    t0 = time.perf_counter()
    for start in range(0, args.capacity, args.insert_block):
        n = min(args.insert_block, args.capacity - start)
        replay.insert(block(rng, start, n), rng.random(n) + 0.01)
    fill_s = time.perf_counter() - t0
    insert_s = fill_s / -(-args.capacity // args.insert_block)
    sample_s = update_s = 0.0
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        sample = replay.sample(args.batch, 0.4, rng)
        t1 = time.perf_counter()
        replay.update(sample.slots, sample.stamps, rng.random(args.batch) + 0.01)
        t2 = time.perf_counter()
        sample_s, update_s = sample_s + t1 - t0, update_s + t2 - t1
    result = {
        "capacity": args.capacity,
        "batch": args.batch,
        "insert_block": args.insert_block,
        "sample_us": round(sample_s / args.repeats * 1e6, 1),
        "update_us": round(update_s / args.repeats * 1e6, 1),
        "sample_plus_update_us": round((sample_s + update_s) / args.repeats * 1e6, 1),
        "insert_block_us": round(insert_s * 1e6, 1),
        "fill_s": round(fill_s, 2),
    }
    print(
        f"prioritized replay, capacity {args.capacity:,}, batch {args.batch}: sample {result['sample_us']} us + "
        f"update {result['update_us']} us = {result['sample_plus_update_us']} us per batch; insert of "
        f"{args.insert_block} transitions {result['insert_block_us']} us"
    )
    doc = {
        "mode": "prioritized_replay",
        "machine": {**machine(), "command": " ".join(["python", *sys.argv])},
        "result": result,
    }
    Path(args.json).write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
