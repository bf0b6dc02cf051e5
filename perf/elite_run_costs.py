"""The wall-time cost of elite replay inside real runs: for each run folder of a zrl-sweep, from its last
metrics.csv row, the broker's feature time per learner step, the learner's own step, its wait, and the run's
frames per second over its whole length.

    python perf/elite_run_costs.py results/sweeps/elite_vs_uniform_breakout
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path


def main() -> None:
    sweep = Path(sys.argv[1])
    index = json.loads((sweep / "index.json").read_text())
    print(
        f"{'run':<24} {'learner steps':>13} {'step ms':>8} {'broker features ms/step':>24} "
        f"{'learner wait':>12} {'frames/s':>9} {'minutes':>8}"
    )
    for row in index["runs"]:
        if row["status"] != "done":
            continue
        folder = Path(row["folder"])
        folder = folder if folder.is_absolute() else Path.cwd() / folder
        with open(folder / "metrics.csv") as fh:
            rows = list(csv.DictReader(fh))
        last = rows[-1]
        steps = float(last["learner_step"])
        elapsed = float(last["elapsed_s"])
        step_ms = 1000 * float(last["time_learner_step_s"]) / steps
        features_ms = 1000 * float(last["time_broker_features_s"] or 0) / steps
        wait = float(last["time_learner_wait_s"]) / elapsed
        print(
            f"{row['label'] + '/seed' + str(row['seed']):<24} {steps:>13,.0f} {step_ms:>8.1f} {features_ms:>24.1f} "
            f"{wait:>12.3f} {float(last['env_frames']) / elapsed:>9,.0f} {elapsed / 60:>8.1f}"
        )


if __name__ == "__main__":
    main()
