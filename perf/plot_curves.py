"""Overlay the curves of several zrl-bench learning JSON files (return against env frames and against wall time),
e.g. a curve after a change beside the ones before it (needs matplotlib: pip install -e '.[test]').

    python perf/plot_curves.py perf/results/learning/pong_defaults_60min_seed1.json \
        perf/results/learning/pong_defaults_60min_seed1_bca70aa.json --out perf/results/learning/x.png

Each curve is labelled with its file's name (without .json), its seed and the machine's CPU, which sets the pace
per minute; the reference curve is drawn once, from the first file that has one.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+", help="zrl-bench learning --json outputs")
    parser.add_argument("--out", required=True, help="the PNG to write")
    parser.add_argument("--title", default="", help="the figure's title")
    args = parser.parse_args()

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (by_frames, by_time) = plt.subplots(1, 2, figsize=(13, 4.8), dpi=110, sharey=True)
    reference = None
    for path in args.files:
        doc = json.loads(Path(path).read_text())
        cpu = doc["machine"]["cpu"].replace("(R)", "").replace(" Processor", "")
        for curve in doc["result"]["curves"]:
            points = curve["points"]
            label = f"{Path(path).stem}, seed {curve.get('seed', '?')} ({cpu})"
            frames = [f / 1e6 for f in points["env_frames"]]
            (line,) = by_frames.plot(frames, points["mean_return_100"], lw=1.3, label=label)
            by_time.plot(points["minutes"], points["mean_return_100"], lw=1.3, color=line.get_color(), label=label)
        reference = reference or next(iter(doc["result"].get("references", [])), None)
    if reference:
        points, label = reference["points"], reference["label"]
        returns = [p["mean_return"] for p in points]
        by_frames.plot([p["env_frames"] / 1e6 for p in points], returns, "k--", marker=".", label=label)
        by_time.plot([p["minutes"] for p in points], returns, "k--", marker=".", label=label)
    by_frames.set_xlabel("env frames (millions)")
    by_time.set_xlabel("wall time (minutes)")
    by_frames.set_ylabel("mean raw return, last 100 episodes")
    for ax in (by_frames, by_time):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="lower right")
    if args.title:
        fig.suptitle(args.title, fontsize=10)
    fig.tight_layout()
    fig.savefig(args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
