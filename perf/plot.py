"""Frames/s against workers, from zrl-bench sampling JSON files, as a PNG (needs matplotlib: pip install -e '.[peers]').

    python perf/plot.py perf/results/sampling_grid_uniform.json perf/results/sampling_grid_network.json \
        --out perf/results/frames_vs_workers.png

Each file gives one line of zrl's frames/s per worker count (at its envs per worker), and the env ceiling measured
beside it in the same run as a dashed line.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+", help="zrl-bench sampling --json outputs")
    parser.add_argument("--out", default="perf/results/frames_vs_workers.png")
    args = parser.parse_args()

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
    machine = None
    ceilings: set[int] = set()  # one ceiling line per envs-per-worker value, from the first file that has it
    for name in args.files:
        doc = json.loads(Path(name).read_text())
        machine = doc["machine"]
        rows = sorted(doc["result"]["rows"], key=lambda r: (r["envs_per_worker"], r["workers"]))
        for envs in sorted({r["envs_per_worker"] for r in rows}):
            line = [r for r in rows if r["envs_per_worker"] == envs]
            workers = [r["workers"] for r in line]
            label = f"zrl sampling, {line[0]['policy']} policy, {envs} envs/worker"
            ax.plot(workers, [r["frames_per_s"] for r in line], marker="o", label=label)
            if envs not in ceilings and all("ceiling_frames_per_s" in r for r in line):
                ceilings.add(envs)
                ax.plot(
                    workers,
                    [r["ceiling_frames_per_s"] for r in line],
                    linestyle="--",
                    marker=".",
                    label=f"env ceiling, {envs} envs/process (same run)",
                )
    ax.set_xlabel("workers (processes)")
    ax.set_ylabel("env frames per second")
    ax.set_xscale("log", base=2)
    ticks = sorted({r["workers"] for name in args.files for r in json.loads(Path(name).read_text())["result"]["rows"]})
    ax.set_xticks(ticks, [str(t) for t in ticks])
    ax.minorticks_off()
    ax.set_ylim(bottom=0)
    if machine:
        ax.set_title(f"{machine['cores']} cores, {machine['cpu']}", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
