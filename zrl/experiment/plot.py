"""zrl-plot: a run's pictures, drawn headless from its CSV files (``zrl.metrics.reading.read_csv``: a torn last line, as
a run still writing or one that crashed leaves it, is left out with a note), so it works on a run as it goes.

Curves (the default): the 100-episode mean of the raw return against env frames and against wall time, side by
side, for one run or several overlaid; a run's evaluations during training (eval.csv) are points on them with their
95% bootstrap interval. Runs whose config.toml are equal but for the seed, the results folder and the budget
(``zrl.experiment.runs.IGNORED_KEYS``) are one group: its mean on a grid over the range all its runs reach, with the
95% bootstrap band of that mean (``zrl.experiment.report._band``); a group of one is its own line.

Health (``metrics=True``, one run): a panel of metrics.csv against run time: return, losses, gradient norm,
learning rate, policy lag, throughput, each role's time split, step costs, replay, drops, elite distances and
errors. A panel whose columns are empty or zero says so instead of drawing nothing.

This module draws; ``zrl.experiment.runs`` reads the run folders and groups them.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path

import numpy as np

from zrl.bench.learning import WINDOW
from zrl.config import ConfigError
from zrl.experiment.report import _band, _matplotlib
from zrl.experiment.runs import (
    Curve,
    Evaluations,
    Group,
    Run,
    column,
    curve,
    evaluations,
    group_runs,
    load_run,
    run_start,
)
from zrl.metrics.reading import number
from zrl.metrics.time_split import IDLE, SECTION_LABELS, SECTIONS, time_shares

MINUTES = "wall time since the run's start (minutes)"
DPI = 100
CURVES_SIZE = (14.0, 5.5)  # inches: two panels side by side
METRICS_SIZE = (14.0, 10.0)  # inches: four rows of four panels
GRID_POINTS = 200  # a group's common grid
BOOTSTRAP_REPS = 1000
TIME_WINDOWS = 100  # the time split is shown over about this many windows of the run
HEADROOM = 1.4  # a panel's y range over its data's, to leave its legend room above the lines
LABEL_WIDTH = 60  # characters per line of a legend entry: a longer one line would squash the axes beside it
AGES = (("policy lag", "policy_lag"), ("sample age, mean", "sample_age_mean"), ("sample age, max", "sample_age_max"))
BROKER_COSTS = (("broker, per batch", "broker_prepare_s"), ("broker features", "broker_feature_s"))
DROPS = (
    ("stale (frames overwritten)", "unrolls_dropped_stale"),
    ("full queue", "unrolls_dropped_full"),
    ("torn when read", "units_dropped_torn"),
    ("messages missing", "seq_gaps"),
)
ERRORS = (
    ("worker restarts", "worker_restarts"),
    ("broker decode errors", "decode_errors"),
    ("learner decode errors", "learner_decode_errors"),
    ("stats decode errors", "stats_decode_errors"),
)
"""The health panels' series: legend label, metrics.csv column."""
STYLE = {
    "font.size": 9,
    "axes.titlesize": 10,
    "axes.labelsize": 9,
    "xtick.labelsize": 8,
    "ytick.labelsize": 8,
    "legend.fontsize": 7.5,
    "legend.handlelength": 1.2,
    "legend.columnspacing": 0.8,
    "legend.labelspacing": 0.3,
    "legend.borderaxespad": 0.3,
    "legend.framealpha": 0.8,
    "axes.grid": True,
    "grid.alpha": 0.3,
}


def _legend_label(group: Group, drawn: int) -> str:
    """A group's name, and for several runs how many are drawn (seeds where their seeds differ)."""
    if len(group.runs) == 1:
        return group.name
    seeds = {r.config.get("run", {}).get("seed") for r in group.runs}
    kind = "seeds" if len(seeds) == len(group.runs) else "runs"
    waiting = len(group.runs) - drawn
    return f"{group.name} ({drawn} {kind}" + (f", {waiting} with no episodes yet)" if waiting else ")")


def _wrapped(label: str) -> str:
    return "\n".join(textwrap.wrap(label, LABEL_WIDTH, break_long_words=False)) or label


# -- drawing ------------------------------------------------------------------------------------------------


def _draw_evaluations(ax, xs: np.ndarray, e: Evaluations, colour: str, label: str | None) -> None:
    """Evaluation points at ``xs`` with their 95% interval as error bars (none where a row has no interval)."""
    known = ~np.isnan(e.low) & ~np.isnan(e.high)
    below = np.where(known, np.maximum(0.0, e.mean - e.low), 0.0)
    above = np.where(known, np.maximum(0.0, e.high - e.mean), 0.0)
    ax.errorbar(
        xs,
        e.mean,
        yerr=[below, above],
        fmt="o",
        ms=4,
        color=colour,
        mec="white",
        mew=0.6,
        elinewidth=1,
        capsize=2,
        label=label,
        zorder=3,
    )


def _evaluation_label(e: Evaluations, head: str = "") -> str:
    episodes = f", {e.episodes} episode{'s' if e.episodes != 1 else ''}" if e.episodes else ""
    return f"{head}evaluations ({e.protocol or '?'}{episodes}), 95% CI"


def _say(ax, text: str) -> None:
    """A panel's message where there is nothing to draw, in its middle."""
    ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center", color="0.35", fontsize=9, wrap=True)


def _step_at(xs: np.ndarray, ys: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """``ys`` as it stood at each grid point: the value at the last ``xs`` not past it, NaN before the first."""
    before = np.concatenate([[np.nan], ys])
    return before[np.searchsorted(xs, grid, side="right")]


def _draw_group(ax, lines: list[tuple[np.ndarray, np.ndarray]], colour: str, label: str, rng) -> None:
    """One run's line, or a group's mean on the grid over the range every run reaches, with its band."""
    low_end, high_end = max(x[0] for x, _ in lines), min(x[-1] for x, _ in lines)
    if len(lines) == 1 or high_end <= low_end:
        for i, (x, y) in enumerate(lines):
            ax.plot(x, y, color=colour, lw=1.4 if len(lines) == 1 else 0.9, label=None if i else label)
        return
    grid = np.linspace(low_end, high_end, GRID_POINTS)
    mean, low, high = _band(np.array([_step_at(x, y, grid) for x, y in lines]), BOOTSTRAP_REPS, rng)
    ax.plot(grid, mean, color=colour, lw=1.6, label=label)
    ax.fill_between(grid, low, high, color=colour, alpha=0.2, lw=0)


def draw_curves(runs: list[Run]):
    """The return figure: against env frames (left) and wall time (right), one line or band per group."""
    plt = _matplotlib()
    fig, axes = plt.subplots(1, 2, figsize=CURVES_SIZE, dpi=DPI, layout="constrained")
    rng = np.random.default_rng(0)
    waiting, banded, evaluated = [], False, False
    for i, group in enumerate(group_runs(runs)):
        curves = [c for c in map(curve, group.runs) if len(c.frames)]
        if not curves:
            waiting.append(group.name)
            continue
        label = _wrapped(_legend_label(group, len(curves)))
        banded |= len(curves) > 1
        _draw_group(axes[0], [(c.frames / 1e6, c.mean_return) for c in curves], f"C{i % 10}", label, rng)
        _draw_group(axes[1], [(c.minutes, c.mean_return) for c in curves], f"C{i % 10}", label, rng)
        scored = [e for e in map(evaluations, group.runs) if len(e.frames)]
        evaluated |= bool(scored)
        for j, e in enumerate(scored):  # each run's own points: they are not at the same frames across seeds
            text = None if j else _wrapped(_evaluation_label(e, "" if len(runs) == 1 else f"{group.name}: "))
            _draw_evaluations(axes[0], e.frames / 1e6, e, f"C{i % 10}", text)
            _draw_evaluations(axes[1], e.minutes, e, f"C{i % 10}", text)
    for ax, xlabel in zip(axes, ("env frames (millions)", MINUTES)):
        ax.set_xlabel(xlabel)
        ax.set_ylabel(f"mean raw return, last {WINDOW} episodes")
        if ax.lines:
            ax.legend(loc="best", fontsize=9)
            if waiting:
                ax.text(0.01, 0.01, "no episodes yet: " + ", ".join(waiting), transform=ax.transAxes, fontsize=8)
        else:
            _say(ax, "no episodes yet")
    envs = sorted({str(r.config.get("env", {}).get("id", "?")) for r in runs})
    title = f"{', '.join(envs)}: return, the mean raw return of the last {WINDOW} episodes"
    if banded:
        title += "\nruns of one config over seeds: their mean, with a 95% bootstrap band of the mean"
    if evaluated:
        title += "\npoints: evaluations during training (eval.csv), with their 95% bootstrap interval"
    fig.suptitle(title)
    return fig


def _lines(ax, x: np.ndarray, series: list[tuple[str, np.ndarray]], empty: str, title: str, ylabel: str, zeros=False):
    """A panel of lines; a series all empty or zero is left out (named in the legend with ``zeros``, where others
    are drawn); with none left, the panel says ``empty`` (or that there are no rows at all)."""
    ax.set_title(title)
    ax.set_ylabel(ylabel)
    drawn, flat = 0, []
    for label, y in series:
        ok = ~np.isnan(x) & ~np.isnan(y)
        if ok.any() and np.any(y[ok] != 0):
            ax.plot(x[ok], y[ok], lw=1.1, label=label)
            drawn += 1
        elif ok.any():
            flat.append(label)
    if not drawn:
        _say(ax, empty if len(x) else "no metrics rows yet")
        return
    if zeros:
        for label in flat:
            ax.plot([], [], " ", label=f"{label}: 0 throughout")
    if len(ax.lines) > 1:
        ax.legend(loc="best")


def _return(ax, c: Curve, e: Evaluations) -> None:
    """The return's curve against minutes, and the evaluations during training as points with their intervals."""
    ax.set_title("return")
    ax.set_ylabel(f"mean raw return, last {WINDOW}")
    if len(c.minutes):
        ax.plot(c.minutes, c.mean_return, lw=1.1, label=f"training, last {WINDOW}" if len(e.frames) else None)
    if len(e.frames):
        _draw_evaluations(ax, e.minutes, e, "C1", _evaluation_label(e))
        ax.legend(loc="best")
    elif not len(c.minutes):
        _say(ax, "no episodes yet")


def _throughput(ax, rows: list[dict], minutes: np.ndarray) -> None:
    """Env frames and learner samples per second (left axis), learner steps per second (right axis)."""
    ax.set_title("throughput")
    ax.set_ylabel("thousands per second")
    if not rows:
        _say(ax, "no metrics rows yet")
        return
    for key, label, colour in (("frames_per_s", "env frames/s", "C0"), ("samples_per_s", "samples/s", "C1")):
        y = column(rows, key, 1e-3)
        ok = ~np.isnan(minutes) & ~np.isnan(y)
        ax.plot(minutes[ok], y[ok], color=colour, lw=1.1, label=label)
    steps, elapsed = column(rows, "learner_step"), column(rows, "elapsed_s")
    with np.errstate(invalid="ignore", divide="ignore"):
        rate = np.where(np.diff(elapsed) > 0, np.diff(steps) / np.diff(elapsed), np.nan)
    right = ax.twinx()
    right.grid(False)
    ok = ~np.isnan(rate) & ~np.isnan(minutes[1:])
    right.plot(minutes[1:][ok], rate[ok], color="C2", lw=1.1, label="learner steps/s (right)")
    right.set_ylabel("learner steps per second")
    for side in (ax, right):  # room above the lines for the legend
        side.set_ylim(0, max(1.0, side.get_ylim()[1]) * HEADROOM)
    handles = ax.get_legend_handles_labels()[0] + right.get_legend_handles_labels()[0]
    ax.legend(handles=handles, loc="upper left", ncol=2)


def _time_split(ax, rows: list[dict], minutes: np.ndarray, role: str, workers: int) -> None:
    """A role's seconds per second of run in each of its named sections, stacked, over windows of rows (the
    waits in grey, on top)."""
    step = max(1, len(rows) // TIME_WINDOWS)
    ends, shares = [], []
    for i in range(step, len(rows), step):
        if (share := time_shares(rows[i - step], rows[i])) is not None:
            ends.append(i)
            shares.append(share)
    ax.set_title(f"time split: {role}" + (f" ({workers} summed)" if role == "workers" and workers > 1 else ""))
    if not shares:
        _say(ax, "no timings recorded yet")
        return
    elapsed = column(rows, "elapsed_s")
    window = float(np.nanmedian(elapsed[ends] - elapsed[[i - step for i in ends]]))
    sections = sorted(SECTIONS[role], key=lambda s: s in IDLE)
    colours = ["0.8" if s in IDLE else f"C{j}" for j, s in enumerate(sections)]
    ys = [[share[s] for share in shares] for s in sections]
    ax.stackplot(minutes[ends], ys, labels=[SECTION_LABELS[s] for s in sections], colors=colours, lw=0)
    ax.set_ylabel(f"seconds per second ({window:.0f} s windows)" if window >= 1.5 else "seconds per second")
    ax.set_ylim(0, ax.get_ylim()[1] * HEADROOM)
    ax.legend(loc="upper left", ncol=2)


def _replay_sizes(rows: list[dict], config: dict) -> list[tuple[str, np.ndarray]]:
    """Each [[replay]] table's units held (metrics.csv's replay_sizes: one count a table, space-separated), or the
    fullest table's where there is one table or the counts do not match the tables."""
    tables = config.get("replay", [])
    cells = [(r.get("replay_sizes") or "").split() for r in rows]
    per_table = [dict(enumerate(c)) if len(c) == len(tables) else {} for c in cells]  # {table index: count}
    if len(tables) < 2 or not any(per_table):
        return [("units held", column(rows, "replay_size"))]
    return [(f"units, {j + 1}: {t.get('type', '?')}", column(per_table, j)) for j, t in enumerate(tables)]


def draw_metrics(run: Run):
    """The health figure: four rows of four panels against wall time since the run's start. The learner's figures are
    left out before its first step (it reports zeros until then)."""
    plt = _matplotlib()
    fig, axes = plt.subplots(4, 4, figsize=METRICS_SIZE, dpi=DPI, sharex=True, layout="constrained")
    (
        (ret, losses, entropy, grad),
        (lr, lag, rho, speed),
        (work, broker, learner, costs),
        (replay, drops, elite, errs),
    ) = axes
    rows, cfg = run.metrics, run.config
    minutes = (column(rows, "wall_time") - (run_start(run) or 0.0)) / 60.0  # as the return's: across resumes too
    # the rows whose step figures are a step's: the learner stepped since the row before (after a resume or a role
    # restart its reports carry its step count, but zeros for the figures, until it steps again)
    steps = column(rows, "learner_step")
    stepped = (steps > 0) & (np.diff(steps, prepend=0.0) > 0)
    col = lambda key, scale=1.0: column(rows, key, scale)
    stepped_col = lambda key, scale=1.0: np.where(stepped, col(key, scale), np.nan)
    named = lambda pairs, scale=1.0: [(label, col(key, scale)) for label, key in pairs]

    _return(ret, curve(run), evaluations(run))
    loss_keys = ("total_loss", "pg_loss", "baseline_loss", "policy_cloning_loss", "value_cloning_loss")
    loss_series = [(k.removesuffix("_loss").replace("_", " "), stepped_col(k)) for k in loss_keys]
    _lines(losses, minutes, loss_series, "no learner step yet", "losses", "loss")
    _lines(entropy, minutes, [("", stepped_col("entropy_loss"))], "no learner step yet", "entropy loss", "loss")
    weight = stepped_col("entropy_cost")  # drawn where its schedule moves it
    moved = ~np.isnan(minutes) & ~np.isnan(weight)
    if entropy.lines and moved.any() and np.ptp(weight[moved]) > 0:
        beside = entropy.twinx()
        beside.plot(minutes[moved], weight[moved], color="0.4", ls="--", lw=0.9, label="entropy weight")
        beside.set_ylabel("entropy weight")
        beside.legend(loc="upper right")
    _lines(
        grad, minutes, [("", stepped_col("grad_norm"))], "no learner step yet", "gradient norm, before clipping", "norm"
    )
    clip = cfg.get("learner", {}).get("grad_norm_clip", 0)
    if grad.lines and clip:
        grad.axhline(clip, color="0.3", ls="--", lw=0.9, label=f"clipped to {clip:g}")
        grad.legend(loc="upper right")
    _lines(lr, minutes, [("", stepped_col("learning_rate"))], "no learner step yet", "learning rate", "learning rate")
    lr.ticklabel_format(axis="y", style="sci", scilimits=(0, 0), useMathText=True)
    ages = [(label, stepped_col(key)) for label, key in AGES]
    _lines(lag, minutes, ages, "no learner step yet", "policy lag and sample age", "policy versions behind")
    off_policy = [
        ("mean rho (pi/mu)", stepped_col("mean_rho")),
        ("LASER masked share", stepped_col("laser_masked_fraction")),
    ]
    _lines(rho, minutes, off_policy, "no learner step yet", "off-policy correction", "ratio, share")
    _throughput(speed, rows, minutes)
    workers = int(cfg.get("workers", {}).get("count", 1))
    for ax, role in ((work, "workers"), (broker, "broker"), (learner, "learner")):
        _time_split(ax, rows, minutes, role, workers)
    step_costs = [("learner, per step", stepped_col("learner_step_s", 1e3)), *named(BROKER_COSTS, 1e3)]
    _lines(costs, minutes, step_costs, "no timings yet", "step costs", "milliseconds (log scale)", zeros=True)
    if costs.lines:
        costs.set_yscale("log")
    sizes = _replay_sizes(rows, cfg) + [("batches ready", col("ready_batches"))]
    _lines(replay, minutes, sizes, "empty throughout", "replay", "units, batches", zeros=True)
    _lines(drops, minutes, named(DROPS), "none in this run", "drops and gaps (cumulative)", "count", zeros=True)
    elite_series = [(k, col(f"elite_distance_{k}")) for k in ("pool", "chosen", "min", "max")]
    unused = "not used in this run\n(no elite or attentive replay)"
    _lines(elite, minutes, elite_series, unused, "elite feature distances", "distance")
    _lines(errs, minutes, named(ERRORS), "none in this run", "restarts and errors (cumulative)", "count", zeros=True)
    for ax in axes[-1]:
        ax.set_xlabel(MINUTES)
    fig.suptitle(_metrics_title(run, float(np.nanmax(minutes, initial=0.0))))
    return fig


def _metrics_title(run: Run, minutes: float) -> str:
    last = run.metrics[-1] if run.metrics else {}
    frames, steps = number(last, "env_frames") or 0.0, number(last, "learner_step") or 0.0
    env, algo = run.config.get("env", {}).get("id", "?"), run.config.get("algo", "?")
    return (
        f"{run.name} ({env}, {algo}): {frames / 1e6:.2f} M env frames, {steps:,.0f} learner steps, "
        f"{len(run.episodes)} episodes in {minutes:.1f} minutes"
    )


# -- the command --------------------------------------------------------------------------------------------


def default_out(paths: list[str], metrics: bool) -> Path:
    """RUN/plots/curves.png or RUN/plots/metrics.png for one run; zrl-plot.png in this folder for several."""
    if len(paths) == 1:
        return Path(paths[0]) / "plots" / ("metrics.png" if metrics else "curves.png")
    return Path("zrl-plot.png")


def save(fig, out: Path, svg: bool) -> list[Path]:
    """``out`` (.png or .svg) and, with ``svg``, an SVG beside a PNG."""
    written = [out, *([out.with_suffix(".svg")] if svg and out.suffix.lower() == ".png" else [])]
    out.parent.mkdir(parents=True, exist_ok=True)
    for path in written:
        fig.savefig(path, format=path.suffix.lower().lstrip("."))
    return written


def plot(
    paths: list[str], out: str | None, svg: bool, metrics: bool, note: Callable[[str], None] = lambda _: None
) -> list[Path]:
    """Draw the runs' curves, or one run's health (``metrics``), into ``out`` (``default_out`` without it); each
    thing left out of a CSV file is passed to ``note``. ConfigError for a path that is not a run folder and for
    ``metrics`` with several runs. The files written."""
    if metrics and len(paths) != 1:
        raise ConfigError(f"--metrics draws one run's health: give one run folder, not {len(paths)}")
    target = Path(out) if out else default_out(paths, metrics)
    if target.suffix.lower() not in (".png", ".svg"):
        raise ConfigError(f"--out {out}: zrl-plot writes PNG (FILE.png) or SVG (FILE.svg)")
    runs = [load_run(p) for p in paths]
    for run in runs:
        for text in run.notes:
            note(text)
    plt = _matplotlib()
    with plt.rc_context(STYLE):
        fig = draw_metrics(runs[0]) if metrics else draw_curves(runs)
        try:
            return save(fig, target, svg)
        finally:
            plt.close(fig)
