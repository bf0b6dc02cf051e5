"""Pong before/after a change: 100-episode means at marks, first frames at thresholds, and a plot against frames.

    python perf/pong_before_after.py OUT "NAME=episodes.csv" ...

Writes OUT.png and OUT_table.md."""

import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def curve(path):
    rows = list(csv.DictReader(open(path)))
    frames = [int(r["env_frames"]) for r in rows]
    ret = [float(r["raw_return"]) for r in rows]
    means = [sum(ret[max(0, i - 99) : i + 1]) / len(ret[max(0, i - 99) : i + 1]) for i in range(len(ret))]
    return frames, means


def at(frames, means, mark):
    best = None
    for f, m in zip(frames, means):
        if f <= mark:
            best = m
    return best


def first(frames, means, level):
    for i, (f, m) in enumerate(zip(frames, means)):
        if i >= 99 and m >= level:
            return f
    return None


runs = dict(arg.split("=", 1) for arg in sys.argv[2:])
out = sys.argv[1]
marks = [1e6, 2e6, 3e6, 4e6, 4.5e6, 5e6]
lines = [
    "| run | " + " | ".join(f"{m / 1e6:g}M" for m in marks) + " | first at 0 | +12 | +17 | +18 |",
    "|---" * (len(marks) + 5) + "|",
]
fig, ax = plt.subplots(figsize=(8, 4.5))
for name, path in runs.items():
    f, m = curve(path)
    vals = [at(f, m, k) for k in marks]
    firsts = [first(f, m, lv) for lv in (0, 12, 17, 18)]
    lines.append(
        f"| {name} | "
        + " | ".join("" if v is None else f"{v:+.2f}" for v in vals)
        + " | "
        + " | ".join("not reached" if x is None else f"{x / 1e6:.2f}M" for x in firsts)
        + " |"
    )
    ax.plot([x / 1e6 for x in f], m, label=name, ls="-" if "after" in name else "--")
ax.set_xlabel("env frames (M)")
ax.set_ylabel("100-episode mean raw return")
ax.set_title("Pong: before and after")
ax.axhline(18, color="grey", lw=0.5)
ax.legend()
ax.grid(alpha=0.3)
fig.tight_layout()
fig.savefig(out + ".png", dpi=110)
open(out + "_table.md", "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
