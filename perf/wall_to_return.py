"""Wall time to a training return, old defaults against new, alternating on one machine (issue "1 of 6").

    python perf/wall_to_return.py --seeds 0,1,2 --cap-minutes 40 --out perf/results/wall/pairs_DATE

For each seed, one after the other and each alone on the machine: the plain `zrl-launch` (V-trace on Pong, the
Atari defaults with zrl's settings for Pong under them, as `config/pong.toml` has them), then the defaults before 2026-11-28 (a queue alone, each frame trained on once, their rate,
budget and constant entropy weight), both with `run.stop_at_return` at the return asked. The new run is capped at --cap-minutes (and its
budget), the old one at the new one's minutes to the return / --goal: an old run still short of the return by then
gives a bound that shows the goal met. It writes each run's folder under --out and
`summary.md` there: for each pair, the frames and minutes at which the 100-episode mean first reached the return,
and new/old minutes.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

from zrl.bench.learning import WINDOW, read_curve
from zrl.machine import cpu_description

NEW: list[str] = []
# the defaults before 2026-11-28, as README.md's "Reuse" gives them, each key they had set so that a change of
# today's defaults does not move them (Pong is the default env.id), and no game's settings under them
OLD = [
    *("--set", "run.game_settings=false"),
    "--replay",
    '[{"type": "queue", "capacity": 64, "sample_ratio": 1.0}]',
    *("--set", "learner.replay_ratio=0", "--set", "workers.produce_ratio=1.25"),
    *("--set", "learner.entropy_cost=0.0006", "--set", "learner.entropy_follows_lr=false"),
    *("--set", "learner.entropy_decay_frames=0", "--set", "env.id=ALE/Pong-v5"),
    *("--set", "learner.learning_rate=0.0006", "--set", "learner.lr_decay_power=1"),
    *("--set", "run.max_env_frames=50000000"),
]


def first_at(run_dir: Path, target: float) -> tuple[int, float] | None:
    """Env frames and minutes since the run's start at which its 100-episode mean (zrl-bench learning's curve)
    first reached ``target``; None if it never did."""
    points = read_curve(run_dir)["points"]
    reached = (p for p in points[WINDOW - 1 :] if p["mean_return_100"] >= target)
    return next(((p["env_frames"], p["minutes"]) for p in reached), None)


def run(arm: list[str], seed: int, target: float, cap_s: float, out: Path) -> tuple[Path, float]:
    """One zrl-launch to the target or the cap; its run folder and its minutes."""
    out.mkdir(parents=True, exist_ok=True)
    command = [
        "zrl-launch",
        *arm,
        *("--set", f"run.seed={seed}", "--set", f"run.stop_at_return={target}"),
        *("--set", f"run.max_seconds={cap_s}", "--set", f"run.results_dir={out}", "--quiet"),
    ]
    print(f"{time.strftime('%H:%M:%S')} {' '.join(command)}", file=sys.stderr, flush=True)
    begun = time.monotonic()
    subprocess.run(command, check=True)
    (run_dir,) = out.iterdir()
    return run_dir, (time.monotonic() - begun) / 60


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", default="0")
    parser.add_argument("--return", dest="target", type=float, default=18.0)
    parser.add_argument("--cap-minutes", type=float, default=60.0)
    parser.add_argument(
        "--goal",
        type=float,
        default=0.6,
        help="cap the old run at the new run's minutes to the return / this (plus half a minute); 0: at --cap-minutes",
    )
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    lines = [
        f"# Wall time to a 100-episode mean of {args.target:+g}: the plain zrl-launch against the defaults before 2026-11-28",
        "",
        f"Machine: {cpu_description()}, `python {' '.join(sys.argv)}`, "
        f"{time.strftime('%Y-%m-%d')}. Each run alone, new then old for each seed; a cap of "
        f"{args.cap_minutes:g} minutes for the new run; the old run's cap is the new run's minutes to the return / "
        f"{args.goal:g}, plus half a minute, so that an old run still short of it shows new/old below {args.goal:g}.",
        "",
        "| seed | new: frames | new: minutes | old: frames | old: minutes | new/old minutes |",
        "|---|---|---|---|---|---|",
    ]
    for seed in [int(s) for s in args.seeds.split(",")]:
        run_dir, new_min = run(NEW, seed, args.target, args.cap_minutes * 60, args.out / f"seed{seed}_new")
        new = first_at(run_dir, args.target)
        # the goal is new/old <= --goal: an old run still short of the return at new's minutes / goal shows it met
        old_cap = new[1] / args.goal + 0.5 if new and args.goal else args.cap_minutes
        run_dir, old_min = run(OLD, seed, args.target, old_cap * 60, args.out / f"seed{seed}_old")
        old = first_at(run_dir, args.target)
        new_text = f"{new[0] / 1e6:.2f}M | {new[1]:.1f}" if new else f"not yet | > {new_min:.1f}"
        old_text = f"{old[0] / 1e6:.2f}M | {old[1]:.1f}" if old else f"not yet | > {old_min:.1f}"
        ratio = f"{new[1] / old[1]:.2f}" if new and old else f"< {new[1] / old_min:.2f}" if new else "?"
        lines.append(f"| {seed} | {new_text} | {old_text} | {ratio} |")
        (args.out / "summary.md").write_text("\n".join(lines) + "\n")
        print(lines[-1], flush=True)


if __name__ == "__main__":
    main()
