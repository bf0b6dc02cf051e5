"""Before/after: zrl's selection at an older commit and now, against the reference's pick written out in
tests/test_replay_elite.py (reference_pick, _slow_distance), on the test's seeded cases (40 seeds per strategy x
distance, buckets with repeats; cases the reference cannot run, m < n, are skipped)."""

import argparse
import importlib.util
import sys
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO))
import test_replay_elite as t  # noqa: E402


def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--before", required=True, help="the older zrl/replay/elite.py, e.g. from git worktree add")
parser.add_argument("--label", default="before")
args = parser.parse_args()
old = load(args.before, "old_elite")
new = load(str(REPO / "zrl" / "replay" / "elite.py"), "new_elite")


def mismatch(mod, strategy, kind):
    cases = differ = 0
    for seed in range(200):
        n = int(np.random.default_rng(1000 + seed).integers(1, 9))
        lam = float(np.random.default_rng(2000 + seed).uniform(1.5, 6.0))  # annealed: not whole
        size = max(n, int(lam * n))
        stored, current, counts, bucket = t._case(seed, 3 * size, n, size, False)
        distinct = np.array(list(dict.fromkeys(bucket.tolist())))
        dist = {int(u): t._slow_distance(kind, stored[u], current[u]) for u in distinct}
        s, c = torch.from_numpy(stored[distinct]), torch.from_numpy(current[distinct])
        ours = mod.feature_distance(s, c, kind).numpy()
        picked = distinct[mod.select(strategy, ours, counts[distinct], n)]
        ref = t.reference_pick(strategy, bucket.tolist(), dist, counts, n)
        cases += 1
        differ += sorted(picked.tolist()) != sorted(ref)
    return differ, cases


print(
    "share of seeded cases (200 per row, no repeats in the bucket, lambda uniform in [1.5, 6) as annealing makes it, n 1-8) where zrl's batch differs"
)
print("from the reference's pick written out from its definition")
print(f"{'strategy':>8} {'distance':>9} {args.label:>9} {'now':>6}")
for kind in ("ln_norm", "cos_dist", "kl_div"):
    for strategy in (1, 2, 3, 4):
        d0, c0 = mismatch(old, strategy, kind)
        d1, c1 = mismatch(new, strategy, kind)
        print(f"{strategy:>8} {kind:>9} {d0 / c0:>9.2f} {d1 / c1:>6.2f}")
