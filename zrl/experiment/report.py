"""zrl-report: runs and sweeps aggregated over seeds and games, rliable-style (``zrl.experiment.stats``).

Each argument is a sweep folder (its ``index.json``: the runs marked done; the others are listed as left out, unless
another sweep given has them done, as each ``--only`` sweep of one suite holds the other arms pending; a run done in
two sweeps counts once) or a run folder (``config.toml`` and ``episodes.csv``). Runs are grouped into arms: a sweep run's variant and grid
values, or a loose run's parent folder (its grandparent when the parent is ``seed<N>``, as zrl-bench learning and
zrl-sweep lay them out). A leading game name (``breakout-`` in ``breakout-elite``) and an env.id grid value are
taken off, so that one arm on several games aggregates over them; games may have different numbers of runs.

A run's score is its mean raw return over the last 100 episodes at its game's common frame budget: the frames
the shortest run of that game reached, or ``--frames`` (which every run must have reached), so every run is read
at an equal budget. Over several games scores are human-normalised ((score - random) / (human - random),
``zrl.scores``); one game is reported raw, with each run's human-normalised score beside it where the game has
reference scores.

Outputs, for ``--out PREFIX``: PREFIX.md (the table, each run and the CPU its launcher ran on, a note where a
game's wall times span machines, what was left out, the method), PREFIX.json (every number), PREFIX_curves.png
(return against env frames and against wall time, each arm's mean across runs with a 95% bootstrap band, one row
per game) and PREFIX_profile.png (performance profiles with bands); ``--svg`` adds SVG copies. The Markdown also
goes to stdout.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from zrl import scores as reference_scores
from zrl.bench.learning import WINDOW, read_curve, run_config
from zrl.config import ConfigError
from zrl.experiment import stats
from zrl.metrics.reading import read_csv

GRID_POINTS = 80


@dataclass
class RunData:
    arm: str
    label: str
    env: str
    rom: str | None
    seed: int | None
    folder: str
    curve: dict
    machines: tuple[str, ...] = ()  # the CPUs its starts ran on (starts.csv); none for a run from before it


def _env_and_seed(folder: Path) -> tuple[str, int | None]:
    resolved = run_config(folder)
    if not resolved:
        raise ConfigError(f"{folder}: not a zrl run folder (no readable config.toml)")
    return resolved.get("env", {}).get("id", "?"), resolved.get("run", {}).get("seed")


def _rom(env: str) -> str | None:
    from zrl.envs import atari_rom

    try:
        return atari_rom(env)
    except ConfigError:
        return None


def _without_game(name: str, rom: str | None) -> str:
    """``name`` less a leading game name and separator (breakout-elite, space_invaders_elite, SpaceInvaders-elite)."""
    if rom:
        for game in {rom, rom.replace("_", ""), rom.replace("_", "-")}:
            cut = re.sub(rf"^{re.escape(game)}[-_]", "", name, flags=re.IGNORECASE)
            if cut != name:
                return cut
    return name


def _sweep_arm(row: dict, rom: str | None) -> str:
    """A sweep run's arm: its variant, less the game's name, and its grid values but env.id."""
    from zrl.experiment.sweep_plan import label_part

    parts = [_without_game(row.get("variant") or "", rom)]
    parts += [label_part(k, v) for k, v in (row.get("grid") or {}).items() if k != "env.id"]
    return "-".join(p for p in parts if p) or row.get("label") or "run"


def _loose_label(folder: Path) -> str:
    parent = folder.resolve().parent
    if re.fullmatch(r"seed\d+", parent.name):
        parent = parent.parent
    return parent.name


def collect(paths: list[str]) -> tuple[list[RunData], list[str]]:
    """The runs the arguments name, and a line per arm and status of the sweep runs left out (not done)."""
    from zrl.experiment.sweep_plan import read_index

    not_done: dict[tuple[str, Any], str] = {}  # (arm, seed) -> its sweep runs' most telling status
    runs, done, twice = [], set(), []
    for arg in paths:
        path = Path(arg)
        if (path / "index.json").is_file():
            for row in read_index(path)["runs"]:
                # one run of a suite in every --only sweep of it: the same arm, seed, config and settings
                key = (str(row.get("label")), row.get("seed"), str(row.get("config")), str(row.get("sets")))
                status = str(row.get("status"))
                if status != "done" or not row.get("folder"):  # an arm's seed, whatever its sets in this sweep
                    if _severity(status) >= _severity(not_done.get(key[:2])):  # the most telling status of the run
                        not_done[key[:2]] = status
                    continue
                if key in done:  # the same run done in two sweeps given: count it once, the first one
                    twice.append(key)
                    continue
                done.add(key)
                folder = Path(row["folder"])
                folder = folder if folder.is_absolute() else Path.cwd() / folder
                runs.append(_load(folder, row["label"], lambda rom, row=row: _sweep_arm(row, rom)))
        elif (path / "config.toml").is_file():
            label = _loose_label(path)
            runs.append(_load(path, label, lambda rom, label=label: _without_game(label, rom)))
        else:
            raise ConfigError(f"{arg}: not a zrl run folder (config.toml, episodes.csv) or sweep folder (index.json)")
    arms_done = {key[:2] for key in done}  # an arm's seed done in any sweep given is not left out
    left_out = _left_out(
        {key: status for key, status in not_done.items() if key not in arms_done}
        | dict.fromkeys(twice, "done twice, the first sweep's kept")
    )
    if not runs:
        raise ConfigError("no finished runs to report" + (f" ({'; '.join(left_out)})" if left_out else ""))
    return runs, left_out


NOT_DONE = ("pending", "running", "stopped", "failed")  # a sweep run's statuses short of done, the most telling last


def _severity(status: str | None) -> int:
    return NOT_DONE.index(status) + 1 if status in NOT_DONE else 0


def _left_out(not_done: dict[tuple, str]) -> list[str]:
    """One line per arm and status of the sweep runs not done (and done in no other sweep given), in the order
    first seen, seeds in order: "broken/seeds 1, 2 (failed)"."""
    seeds: dict[tuple[str, str], list] = {}
    for (label, seed, *_), status in not_done.items():
        seeds.setdefault((label, status), []).append(seed)
    lines = []
    for (label, status), these in seeds.items():
        names = ", ".join(
            str(s) for s in sorted(these, key=lambda s: (not isinstance(s, int), s if isinstance(s, int) else str(s)))
        )
        lines.append(f"{label}/seed{'s ' if len(these) > 1 else ''}{names} ({status})")
    return lines


def _load(folder: Path, label: str, arm) -> RunData:
    env, seed = _env_and_seed(folder)
    rom = _rom(env)
    starts, _ = read_csv(folder / "starts.csv")
    machines = tuple(dict.fromkeys(_cell(row["cpu"]) for row in starts if row.get("cpu", "").strip()))
    return RunData(arm(rom), label, env, rom, seed, str(folder), read_curve(folder), machines)


def _cell(text: str, limit: int = 120) -> str:
    """A name read from a run folder (untrusted), made safe for one Markdown table cell: one line of printable
    text, no pipe or angle bracket, at most ``limit`` characters."""
    text = " ".join("".join(c if c.isprintable() else " " for c in text).split())
    text = text.replace("|", "/").replace("<", "(").replace(">", ")")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _values_at(points: list[dict], key: str, xs) -> np.ndarray:
    """The 100-episode mean as it stood at each of ``xs`` (frames or minutes; the points are in that order): the
    last episode ended by then, NaN before the first."""
    at = np.array([p[key] for p in points], dtype=np.float64)
    means = np.array([np.nan] + [p["mean_return_100"] for p in points], dtype=np.float64)
    return means[np.searchsorted(at, np.asarray(xs, dtype=np.float64), side="right")]


def _score(run: RunData, budget: int) -> float:
    value = float(_values_at(run.curve["points"], "env_frames", [budget])[0])
    if np.isnan(value):
        raise ConfigError(f"{run.folder}: no episode ended within {budget:,} env frames, so it has no score")
    return value


def _band(values: np.ndarray, reps: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean over runs [runs, points] at each point and the 95% bootstrap interval of that mean (points where a
    run has no value yet are NaN)."""
    runs = values.shape[0]
    picks = rng.integers(0, runs, size=(reps, runs))
    means = values[picks].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5], axis=0)
    return values.mean(axis=0), low, high


def _minutes_to(run: RunData, frames: int) -> float:
    """The minutes at which a run's first episode past ``frames`` env frames ended (its last, if none did)."""
    return next((p["minutes"] for p in run.curve["points"] if p["env_frames"] >= frames), run.curve["minutes"])


def build(paths: list[str], reps: int = 5000, frames: int | None = None) -> dict:
    """The report's numbers: per game and arm the score at the budget (``frames``, which every run must have
    reached; by default the frames of each game's shortest run); per arm the aggregates with CIs."""
    runs, left_out = collect(paths)
    games = sorted({r.env for r in runs})
    roms = {r.env: r.rom for r in runs}
    unnormalisable = [g for g in games if roms[g] is None or roms[g] not in reference_scores.SCORES]
    if len(games) > 1 and unnormalisable:
        raise ConfigError(
            f"runs of different games ({', '.join(games)}), and {', '.join(unnormalisable)} has no reference "
            "score to normalise by: report each game on its own"
        )
    if frames is None:
        budgets = {g: min(r.curve["env_frames"] for r in runs if r.env == g) for g in games}
    else:
        short = [f"{r.folder} ({r.curve['env_frames']:,})" for r in runs if r.curve["env_frames"] < frames]
        if short:
            raise ConfigError(
                f"--frames {frames:,}: {len(short)} run{'s' if len(short) > 1 else ''} stopped short of it: "
                f"{', '.join(short)}; give a budget every run reached, or leave those runs out"
            )
        budgets = {g: frames for g in games}
    minutes = {g: min(_minutes_to(r, budgets[g]) for r in runs if r.env == g) for g in games}
    arms = sorted({r.arm for r in runs})
    per_run = []
    for r in sorted(runs, key=lambda r: (r.env, r.arm, r.seed or 0)):
        score = _score(r, budgets[r.env])
        per_run.append(
            {
                "arm": r.arm,
                "label": r.label,
                "env": r.env,
                "seed": r.seed,
                "folder": r.folder,
                "score": score,
                "at_minutes": float(_values_at(r.curve["points"], "minutes", [minutes[r.env]])[0]),
                "hns": reference_scores.human_normalised(r.rom, score) if r.rom else None,
                "env_frames": r.curve["env_frames"],
                "minutes": r.curve["minutes"],
                "episodes": r.curve["episodes"],
                "machines": list(r.machines),
            }
        )
    normalised = len(games) > 1
    aggregates: dict[str, dict[str, Any]] = {}
    for arm in arms:
        key = "hns" if normalised else "score"
        columns = [[p[key] for p in per_run if p["arm"] == arm and p["env"] == g] for g in games]
        if not all(columns):
            aggregates[arm] = {"missing_games": [g for g, c in zip(games, columns) if not c]}
            continue
        iq, iq_lo, iq_hi = stats.interval(columns, stats.iqm, reps)
        mu, mu_lo, mu_hi = stats.interval(columns, stats.mean, reps)
        aggregates[arm] = {
            "runs_per_game": [len(c) for c in columns],
            "iqm": [iq, iq_lo, iq_hi],
            "mean": [mu, mu_lo, mu_hi],
            "scores": columns,
        }
    per_game = {}
    for g in games:
        for arm in arms:
            mine = [p for p in per_run if p["arm"] == arm and p["env"] == g]
            if mine:
                m, lo, hi = stats.interval([[p["score"] for p in mine]], stats.mean, reps)
                row = {"env": g, "arm": arm, "runs": len(mine), "mean": [m, lo, hi], "mean_at_minutes": None}
                at = [p["at_minutes"] for p in mine]
                if not np.isnan(at).any():
                    row["mean_at_minutes"] = list(stats.interval([at], stats.mean, reps))
                per_game[f"{g}|{arm}"] = row
    return {
        "inputs": list(paths),
        "games": games,
        "arms": arms,
        "normalised": normalised,
        "budgets": budgets,
        "frames_given": frames is not None,
        "minutes": minutes,
        "runs": per_run,
        "per_game": per_game,
        "aggregates": aggregates,
        "left_out": left_out,
        "bootstrap_reps": reps,
        "_curves": {r.folder: r.curve["points"] for r in runs},
    }


def _ci(triple: list[float], digits: int = 2) -> str:
    point, low, high = triple
    return f"{point:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"


def markdown(report: dict) -> str:
    digits = 3 if report["normalised"] else 2
    unit = "human-normalised score" if report["normalised"] else "raw return"
    lines = [
        "# zrl-report",
        "",
        f"Inputs: {', '.join(report['inputs'])}. Written {time.strftime('%Y-%m-%d %H:%M')}.",
        "",
        "Each run's score: its mean raw return over the last 100 episodes at its game's common budget of env "
        "frames ("
        + ("given with --frames" if report.get("frames_given") else "the frames its shortest run reached")
        + "). Aggregates are over runs"
        + (" and games, on human-normalised scores" if report["normalised"] else "")
        + f"; brackets are 95% stratified-bootstrap percentile intervals ({report['bootstrap_reps']} replicates).",
        "",
        "| game | budget (env frames) | shortest run to it (min) |",
        "|---|---|---|",
        *(f"| {g} | {report['budgets'][g]:,} | {report['minutes'][g]:.1f} |" for g in report["games"]),
        "",
        f"| arm | runs ({', '.join(report['games'])}) | IQM {unit} | mean {unit} |",
        "|---|---|---|---|",
    ]
    for arm, agg in report["aggregates"].items():
        if "missing_games" in agg:
            lines.append(f"| {arm} | (no runs of {', '.join(agg['missing_games'])}) | | |")
        else:
            runs = ", ".join(map(str, agg["runs_per_game"]))
            lines.append(f"| {arm} | {runs} | {_ci(agg['iqm'], digits)} | {_ci(agg['mean'], digits)} |")
    lines += [
        "",
        "Per game, the mean raw return at the frame budget, and at the wall time in which the game's fastest run "
        "reached it:",
        "",
        "| game | arm | runs | at the frame budget | at the fastest run's minutes to it |",
        "|---|---|---|---|---|",
    ]
    for row in report["per_game"].values():
        at = _ci(row["mean_at_minutes"]) if row["mean_at_minutes"] else "(a run had no episode by then)"
        lines.append(f"| {row['env']} | {row['arm']} | {row['runs']} | {_ci(row['mean'])} | {at} |")
    lines += [
        "",
        *_machine_notes(report),
        "| run | seed | score | human-normalised | env frames | minutes | episodes | machine |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in report["runs"]:
        hns = f"{r['hns']:.3f}" if r["hns"] is not None else "-"
        lines.append(
            f"| {r['label']} | {r['seed']} | {r['score']:.2f} | {hns} | {r['env_frames']:,} | {r['minutes']:.1f} | "
            f"{r['episodes']} | {' + '.join(r['machines']) or '-'} |"
        )
    if report["left_out"]:
        lines += ["", "Left out: " + "; ".join(report["left_out"]) + "."]
    return "\n".join(lines) + "\n"


def _machine_notes(report: dict) -> list[str]:
    """Where a game's wall times do not compare: its runs ran on different CPUs, or some do not say which
    (starts.csv). Each note a paragraph, followed by a blank line."""
    notes = []
    for g in report["games"]:
        runs = [r for r in report["runs"] if r["env"] == g]
        cpus = list(dict.fromkeys(cpu for r in runs for cpu in r["machines"]))
        unknown = sum(not r["machines"] for r in runs)
        if len(cpus) > 1:
            notes.append(
                f"{g}: its runs ran on {len(cpus)} CPUs ({'; '.join(cpus)}), so its minutes, and the mean at the "
                "fastest run's minutes, compare machines as well as arms."
            )
        if unknown:
            notes.append(
                f"{g}: {unknown} of {len(runs)} runs do not say which machine they ran on (starts.csv records none): "
                "compare their minutes only where they are known to share one."
            )
    return [line for note in notes for line in (note, "")]


def _matplotlib():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_curves(report: dict, png: Path, svg: bool = False) -> list[Path]:
    """Return against env frames and against wall minutes: each arm's mean across its runs, with the 95%
    bootstrap band of that mean, one row per game."""
    plt = _matplotlib()
    games = report["games"]
    fig, axes = plt.subplots(len(games), 2, figsize=(12, 4.2 * len(games)), dpi=110, squeeze=False)
    rng = np.random.default_rng(0)
    colours = {arm: f"C{i}" for i, arm in enumerate(report["arms"])}
    for row, g in enumerate(games):
        for col, (key, limit, scale, xlabel) in enumerate(
            [
                ("env_frames", report["budgets"][g], 1e6, "env frames (millions)"),
                ("minutes", report["minutes"][g], 1.0, "wall time (minutes)"),
            ]
        ):
            ax = axes[row][col]
            xs = np.linspace(0, limit, GRID_POINTS)
            for arm in report["arms"]:
                folders = [r["folder"] for r in report["runs"] if r["arm"] == arm and r["env"] == g]
                if not folders:
                    continue
                values = np.array([_values_at(report["_curves"][f], key, xs) for f in folders])
                ok = ~np.isnan(values).any(axis=0)
                if not ok.any():
                    continue
                mean, low, high = _band(values[:, ok], 1000, rng)
                ax.plot(xs[ok] / scale, mean, color=colours[arm], label=f"{arm} ({len(folders)} runs)")
                ax.fill_between(xs[ok] / scale, low, high, color=colours[arm], alpha=0.2)
            ax.set_xlabel(xlabel)
            ax.set_ylabel(f"{g}: mean raw return, last {WINDOW} episodes")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8, loc="upper left")
    fig.suptitle("mean across runs, 95% bootstrap band", fontsize=9)
    fig.tight_layout()
    return _save(fig, plt, png, svg)


def plot_profile(report: dict, png: Path, svg: bool = False) -> list[Path]:
    """Performance profiles of the scores at the budget: the share of runs above each tau, with bands."""
    plt = _matplotlib()
    fig, ax = plt.subplots(figsize=(6.5, 4.4), dpi=110)
    all_scores = np.concatenate([np.concatenate(a["scores"]) for a in report["aggregates"].values() if "scores" in a])
    lo, hi = float(all_scores.min()), float(all_scores.max())
    taus = np.linspace(lo - 0.05 * (hi - lo + 1e-9), hi + 0.05 * (hi - lo + 1e-9), 100)
    for i, (arm, agg) in enumerate(report["aggregates"].items()):
        if "scores" not in agg:
            continue
        curve, low, high = stats.profile_band(agg["scores"], taus)
        ax.plot(taus, curve, color=f"C{i}", label=arm)
        ax.fill_between(taus, low, high, color=f"C{i}", alpha=0.2)
    ax.set_xlabel("human-normalised score tau" if report["normalised"] else f"raw return tau ({report['games'][0]})")
    ax.set_ylabel("share of runs with score > tau")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return _save(fig, plt, png, svg)


def _save(fig, plt, png: Path, svg: bool) -> list[Path]:
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png)
    written = [png]
    if svg:
        fig.savefig(png.with_suffix(".svg"))
        written.append(png.with_suffix(".svg"))
    plt.close(fig)
    return written


def write(report: dict, prefix: str | Path, svg: bool = False) -> list[Path]:
    prefix = Path(prefix)
    prefix.parent.mkdir(parents=True, exist_ok=True)
    md = prefix.with_name(prefix.name + ".md")
    md.write_text(markdown(report))
    js = prefix.with_name(prefix.name + ".json")
    js.write_text(json.dumps({k: v for k, v in report.items() if not k.startswith("_")}, indent=1) + "\n")
    written = [md, js]
    written += plot_curves(report, prefix.with_name(prefix.name + "_curves.png"), svg)
    written += plot_profile(report, prefix.with_name(prefix.name + "_profile.png"), svg)
    return written
