"""zrl-bench learning: a config trained through the real ``zrl-launch`` for a wall-clock or frame budget, one
seed after another (each run alone on the machine), and its learning curve: the mean raw return of the last
100 episodes against env frames and against wall time, as JSON and as a PNG with a reference curve beside it.

The curve is read from the run folder's ``episodes.csv`` (every finished game, raw score) and ``metrics.csv``
(the run's start, learner steps), so a run started by hand can be measured the same way (``--runs``).
Reference curves live in ``zrl/bench/reference/*.json``, each with where its figures came from.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import deque
from pathlib import Path

from zrl.config import ConfigError
from zrl.metrics.reading import read_csv

REFERENCES = Path(__file__).with_name("reference")
WINDOW = 100  # episodes in the moving mean, as in the issue's and the papers' "100-episode mean"
MARKS_MIN = (15, 30, 45, 60)  # wall-clock marks the summary quotes
LAST_FEW = 20  # the summary's "last 20 episodes" mean, CartPole's usual yardstick


def references(env_id: str | None = None) -> list[dict]:
    """The stored reference curves, those of ``env_id`` only when it is given."""
    found = [json.loads(p.read_text()) | {"file": p.name} for p in sorted(REFERENCES.glob("*.json"))]
    return [r for r in found if env_id is None or r["env"] == env_id]


def metrics_rows(metrics: Path) -> list[dict]:
    """The complete rows of a run's metrics.csv ([] where it cannot be read yet; a torn last line left out)."""
    return read_csv(metrics)[0]


def read_curve(run_dir: str | Path) -> dict:
    """The 100-episode mean raw return after every finished episode of a run folder (in the order they ended),
    against the run's env
    frames (all workers', read from metrics.csv at the episode's end: episodes.csv counts each episode's own
    worker) and minutes since the run started, with the run's last learner figures. Raises ConfigError for a
    folder that is not a run (no episodes.csv or metrics.csv)."""
    import numpy as np

    run_dir = Path(run_dir)
    episodes, metrics = run_dir / "episodes.csv", run_dir / "metrics.csv"
    rows = metrics_rows(metrics)
    if not episodes.is_file() or not rows:
        raise ConfigError(f"{run_dir}: not a zrl run folder with episodes (needs episodes.csv and metrics.csv)")
    start = float(rows[0]["wall_time"]) - float(rows[0]["elapsed_s"])
    times = np.array([float(r["wall_time"]) for r in rows])
    totals = np.array([float(r["env_frames"] or 0) for r in rows])
    window: deque[float] = deque(maxlen=WINDOW)
    points, returns = [], []
    ordered = sorted(read_csv(episodes)[0], key=lambda row: float(row["wall_time"]))  # workers report apart
    for row in ordered:
        window.append(float(row["raw_return"]))
        returns.append(window[-1])
        ended = float(row["wall_time"])
        frames = max(int(row["env_frames"]), int(np.interp(ended, times, totals)))
        points.append(
            {
                "episode": int(row["episode"]),
                "env_frames": frames,
                "minutes": round((ended - start) / 60.0, 3),
                "mean_return_100": round(sum(window) / len(window), 3),
            }
        )
    for earlier, later in zip(reversed(points[:-1]), reversed(points)):  # frames never fall between episodes
        earlier["env_frames"] = min(earlier["env_frames"], later["env_frames"])
    last = rows[-1]

    def number(key: str) -> float | None:
        value = last.get(key, "")
        return float(value) if value not in ("", "nan") else None

    minutes = (number("elapsed_s") or 0.0) / 60.0
    return {
        "run": str(run_dir),
        "episodes": len(points),
        "minutes": round(minutes, 2),
        "env_frames": int(number("env_frames") or 0),
        "learner_steps": int(number("learner_step") or 0),
        "marks": marks(points, minutes),
        "last_20": round(sum(returns[-LAST_FEW:]) / len(returns[-LAST_FEW:]), 3) if returns else None,
        "points": points,
    }


def at_minutes(points: list[dict], minutes: float) -> float | None:
    """The 100-episode mean as it stood at ``minutes`` (the last episode ended by then), None before a full
    window of episodes had ended."""
    value = None
    for p in points:
        if p["minutes"] > minutes:
            break
        if p["episode"] >= WINDOW:
            value = p["mean_return_100"]
    return value


def marks(points: list[dict], run_minutes: float) -> dict[str, float | None]:
    """The 100-episode mean at each of MARKS_MIN minutes (None where the run did not last that long; a run
    that stopped at its budget a few seconds short of a mark, as a 3600 s run does, is at that mark)."""
    return {f"{m}min": (at_minutes(points, m) if run_minutes >= m - 0.5 else None) for m in MARKS_MIN}


def launcher() -> list[str]:
    """zrl-launch, run with this interpreter (and so this zrl), without its arguments. -P: not from the working
    folder, which python -c puts first on sys.path (and the roles then take): a sweep's may be a results folder."""
    root = str(Path(__file__).resolve().parents[2])  # the folder that holds this zrl
    return [
        sys.executable,
        "-Pc",
        f"import sys; sys.path.insert(0, {root!r}); from zrl.cli.launch import launch_main; launch_main()",
    ]


def launch_command(
    config_path: str | None,
    sets: list[str],
    workers: int | None,
    envs: int | None,
    seed: int,
    seconds: float | None,
    frames: int | None,
    results_dir: Path,
) -> list[str]:
    cmd = launcher()
    if config_path:
        cmd += ["--config", config_path]
    if workers:
        cmd += ["--workers", str(workers)]
    if envs:
        cmd += ["--envs-per-worker", str(envs)]
    for s in sets:
        cmd += ["--set", s]
    cmd += ["--set", f"run.seed={seed}", "--set", f"run.results_dir={json.dumps(str(results_dir))}"]
    if seconds:
        cmd += ["--set", f"run.max_seconds={seconds}"]
    if frames:
        cmd += ["--set", f"run.max_env_frames={frames}"]
    return cmd


def train(cmd: list[str], results_dir: Path, progress) -> Path:
    """Run one zrl-launch to its budget, its progress lines on our stderr; the run folder it made. A Ctrl-C at
    the terminal reaches zrl-launch too (same process group), which stops in order: we only wait for it (a
    second SIGINT from us would make it stop at once) and re-raise."""
    results_dir.mkdir(parents=True, exist_ok=True)
    before = set(results_dir.iterdir())
    progress("training: " + " ".join(cmd[3:]))
    with subprocess.Popen(cmd, stdout=sys.stderr, stderr=sys.stderr) as proc:
        try:
            code = proc.wait()
        except KeyboardInterrupt:
            proc.wait()
            raise
    made = sorted(set(results_dir.iterdir()) - before)
    if code != 0 or len(made) != 1:
        raise RuntimeError(f"zrl-launch exited with {code} (made {len(made)} run folders under {results_dir})")
    return made[0]


def learning(
    config_path: str | None,
    sets: list[str],
    workers: int | None,
    envs: int | None,
    seeds: list[int],
    seconds: float | None,
    frames: int | None,
    runs: list[str],
    results_dir: str,
    progress,
) -> dict:
    """Train each seed (or read ``runs``) and return their curves beside the env's reference curves."""
    from zrl import config as config_mod

    one = {"workers.count": workers, "workers.envs_per_worker": envs}
    cfg = config_mod.load(config_path, list(sets), one)  # a ConfigError before anything runs
    curves, env_id = [], cfg.env.id
    if runs:
        for run in runs:
            resolved = run_config(Path(run))
            env_id = resolved.get("env", {}).get("id", env_id)
            seed = resolved.get("run", {}).get("seed")
            label = f"{Path(run).resolve().parent.name}/{Path(run).name} seed {seed}"
            curves.append(
                read_curve(run) | {"seed": seed, "label": label, "command": None, "resolved_config": resolved}
            )
    else:
        if not seconds and not frames:
            raise ConfigError("learning needs a budget: --seconds (wall clock) and/or --frames (env frames)")
        stamp = time.strftime("%Y%m%d_%H%M%S")
        for seed in seeds:
            out = Path(results_dir) / f"learning_{stamp}" / f"seed{seed}"
            cmd = launch_command(config_path, list(sets), workers, envs, seed, seconds, frames, out)
            run_dir = train(cmd, out, progress)
            shown = ["zrl-launch", *cmd[3:]]
            curves.append(read_curve(run_dir) | {"seed": seed, "label": f"seed {seed}", "command": " ".join(shown)})
    return {
        "config": config_path,
        "sets": list(sets),
        "env": env_id,
        "seconds": seconds,
        "frames": frames,
        "runs": list(runs),
        "curves": curves,
        "references": references(env_id),
    }


def for_json(result: dict) -> dict:
    """``result`` with each curve's points as columns (episode, env_frames, minutes, mean_return_100): an hour of
    Pong is thousands of episodes, and columns keep the file to a third of the size."""
    curves = []
    for c in result["curves"]:
        columns = {
            key: [p[key] for p in c["points"]] for key in ("episode", "env_frames", "minutes", "mean_return_100")
        }
        curves.append(c | {"points": columns})
    return result | {"curves": curves}


def from_json(result: dict) -> dict:
    """The inverse of :func:`for_json`: a JSON file's result with each curve's points as a list of dicts again, as
    :func:`plot` and :func:`summary_rows` take them."""
    curves = []
    for c in result["curves"]:
        columns = c["points"]
        curves.append(c | {"points": [dict(zip(columns, row)) for row in zip(*columns.values())]})
    return result | {"curves": curves}


def run_config(run_dir: Path) -> dict:
    """A run folder's resolved config.toml, {} where it cannot be read."""
    import tomllib

    try:
        with open(run_dir / "config.toml", "rb") as fh:
            return tomllib.load(fh)
    except (OSError, tomllib.TOMLDecodeError):
        return {}


def summary_rows(result: dict) -> list[dict]:
    rows = []
    for c in result["curves"]:
        row = {
            "curve": c["label"],
            "minutes": c["minutes"],
            "env_frames": f"{c['env_frames']:,}",
            "learner_steps": f"{c['learner_steps']:,}",
            "episodes": c["episodes"],
        }
        row |= {k: ("" if v is None else f"{v:+.1f}") for k, v in c["marks"].items()}
        last = c["points"][-1]["mean_return_100"] if c["episodes"] >= WINDOW else None
        row["last"] = "" if last is None else f"{last:+.1f}"
        row[f"last {LAST_FEW} ep"] = "" if c["last_20"] is None else f"{c['last_20']:+.1f}"
        rows.append(row)
    for ref in result["references"]:
        row = {
            "curve": ref["label"],
            "minutes": ref["points"][-1]["minutes"],
            "env_frames": f"{ref['points'][-1]['env_frames']:,}",
        }
        for m in MARKS_MIN:
            value = _reference_at(ref, m)
            row[f"{m}min"] = "" if value is None else f"{value:+.1f}"
        row["last"] = f"{ref['points'][-1]['mean_return']:+.1f}"
        rows.append(row)
    return rows


def _reference_at(ref: dict, minutes: float) -> float | None:
    """A reference's return at ``minutes``, interpolated linearly between its points (None outside them)."""
    pts = ref["points"]
    for a, b in zip(pts, pts[1:]):
        if a["minutes"] <= minutes <= b["minutes"]:
            f = (minutes - a["minutes"]) / (b["minutes"] - a["minutes"])
            return a["mean_return"] + f * (b["mean_return"] - a["mean_return"])
    return None


def plot(result: dict, png: str | Path, machine: str = "") -> Path:
    """Two panels, return against env frames and against wall minutes: every curve, and the references
    dashed. Needs matplotlib (installed with zrl's test and peers extras)."""
    try:
        import matplotlib
    except ImportError:
        raise RuntimeError(
            "the PNG needs matplotlib: pip install matplotlib (or -e '.[peers]'); the JSON is written without it"
        ) from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (by_frames, by_time) = plt.subplots(1, 2, figsize=(12, 4.6), dpi=110, sharey=True)
    for c in result["curves"]:
        pts = [p for p in c["points"] if p["episode"] >= min(WINDOW, c["episodes"])]
        label = f"zrl {c['label']}"
        by_frames.plot([p["env_frames"] / 1e6 for p in pts], [p["mean_return_100"] for p in pts], label=label)
        by_time.plot([p["minutes"] for p in pts], [p["mean_return_100"] for p in pts], label=label)
    for ref in result["references"]:
        pts = ref["points"]
        style = {"color": "black", "linestyle": "--", "marker": "o", "markersize": 3, "label": ref["label"]}
        by_frames.plot([p["env_frames"] / 1e6 for p in pts], [p["mean_return"] for p in pts], **style)
        by_time.plot([p["minutes"] for p in pts], [p["mean_return"] for p in pts], **style)
    by_frames.set_xlabel("env frames (millions)")
    by_time.set_xlabel("wall time (minutes)")
    by_frames.set_ylabel(f"mean raw return, last {WINDOW} episodes")
    for ax in (by_frames, by_time):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="lower right")
    named = result["config"] or (
        "runs " + ", ".join(Path(c["run"]).name for c in result["curves"]) if result["runs"] else "defaults"
    )
    title = f"{result['env']}: {named}"
    if result["sets"]:
        title += " " + " ".join(f"--set {s}" for s in result["sets"])
    fig.suptitle(title + (f"\n{machine}" if machine else ""), fontsize=9)
    fig.tight_layout()
    png = Path(png)
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png)
    plt.close(fig)
    return png
