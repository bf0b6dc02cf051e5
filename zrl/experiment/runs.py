"""A run folder as zrl-plot reads it: its resolved config and its CSV rows as they stand (``zrl.metrics.reading.read_csv``:
a torn last line, as a run still writing or one that crashed leaves it, is left out with a note), its return
curve, its evaluations during training (eval.csv), and runs grouped by config over seeds (``IGNORED_KEYS``)."""

from __future__ import annotations

import json
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

import numpy as np

from zrl import config as config_mod
from zrl.bench.learning import WINDOW
from zrl.config import ConfigError
from zrl.metrics.reading import number, read_csv

IGNORED_KEYS = (
    "run.seed",
    "run.results_dir",
    "run.max_seconds",
    "run.max_env_frames",
    "eval.stop_at_score",
    "run.stop_at_return",
    "run.game_settings",  # where the values came from, not what they are
)
"""Keys that differ between runs of one config over seeds: left out when runs are grouped."""
RUN_FOLDER = "a run folder (results/<env>_<time>/) holds config.toml, episodes.csv and metrics.csv"
LABEL_KEYS = 3  # config keys named in a group's label at the most


@dataclass
class Run:
    """A run folder's resolved config and its CSV rows as they stood when read, with a note for each thing left
    out of them."""

    folder: Path
    config: dict
    episodes: list[dict]
    metrics: list[dict]
    notes: list[str]
    evaluations: list[dict] = field(default_factory=list)  # eval.csv's rows: none where the run has no evaluations

    @property
    def name(self) -> str:
        return self.folder.resolve().name


@dataclass
class Curve:
    """The 100-episode mean raw return after each finished episode, in the order they ended, with the run's env
    frames then (never falling) and the minutes since the run started."""

    frames: np.ndarray
    minutes: np.ndarray
    mean_return: np.ndarray


@dataclass
class Group:
    """Runs of one config over seeds, and its name in a legend (the count of seeds not included)."""

    name: str
    runs: list[Run] = field(default_factory=list)


# -- reading ------------------------------------------------------------------------------------------------


def load_run(path: str | Path) -> Run:
    """A run folder's config and CSV rows; ConfigError for a path that is not one."""
    folder = Path(path)
    if not folder.is_dir():
        raise ConfigError(f"{path}: no such folder; {RUN_FOLDER}")
    if not (folder / "config.toml").is_file():
        raise ConfigError(f"{path}: not a zrl run folder (no config.toml); {RUN_FOLDER}")
    if not (folder / "episodes.csv").is_file() and not (folder / "metrics.csv").is_file():
        raise ConfigError(f"{path}: not a zrl run folder (no episodes.csv or metrics.csv); {RUN_FOLDER}")
    episodes, episode_notes = read_csv(folder / "episodes.csv")
    metrics, metric_notes = read_csv(folder / "metrics.csv")
    evaluations, eval_notes = read_csv(folder / "eval.csv") if (folder / "eval.csv").is_file() else ([], [])
    notes = episode_notes + metric_notes + eval_notes
    return Run(folder, _config(folder / "config.toml"), episodes, metrics, notes, evaluations)


def _config(path: Path) -> dict:
    """A run's config as this zrl resolves it: the keys an older zrl did not write take their defaults, so that
    runs from before and after a key was added compare equal. The file as it stands where this zrl cannot resolve
    it (it holds a key since removed)."""
    try:
        return config_mod.to_dict(config_mod.load(path, stored=True))
    except ConfigError:
        pass
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except (OSError, tomllib.TOMLDecodeError) as err:
        raise ConfigError(f"{path}: cannot be read ({err}); {RUN_FOLDER}") from None


def column(rows: list[dict], key: str | int, scale: float = 1.0) -> np.ndarray:
    """A CSV column as floats times ``scale``, NaN where a cell is empty or not a number."""
    return np.array([np.nan if (v := number(r, key)) is None else v * scale for r in rows], dtype=np.float64)


def run_start(run: Run) -> float | None:
    """The run's start (unix seconds): its first metrics row's wall time less its elapsed seconds, else its first
    episode's wall time; None where neither file has a row yet."""
    if run.metrics:
        wall, elapsed = number(run.metrics[0], "wall_time"), number(run.metrics[0], "elapsed_s")
        if wall is not None and elapsed is not None:
            return wall - elapsed
    walls = [w for r in run.episodes if (w := number(r, "wall_time")) is not None]
    return min(walls) if walls else None


def curve(run: Run) -> Curve:
    """The run's return curve (empty arrays before its first episode ends). Workers report apart, so the rows
    are put in the order the episodes ended; the mean is over the last ``WINDOW`` episodes, fewer at the start."""
    ended = sorted(
        (wall, raw, number(r, "env_frames") or 0.0)
        for r in run.episodes
        if (wall := number(r, "wall_time")) is not None and (raw := number(r, "raw_return")) is not None
    )
    if not ended:
        return Curve(np.zeros(0), np.zeros(0), np.zeros(0))
    walls, raws, frames = (np.array(v, dtype=np.float64) for v in zip(*ended))
    sums = np.concatenate([[0.0], np.cumsum(raws)])
    upto = np.arange(1, len(raws) + 1)
    since = np.maximum(0, upto - WINDOW)
    start = run_start(run)
    assert start is not None  # an episode with a wall time gives the run a start
    return Curve(np.maximum.accumulate(frames), (walls - start) / 60.0, (sums[upto] - sums[since]) / (upto - since))


@dataclass
class Evaluations:
    """A run's evaluations during training (eval.csv): the env frames and the minutes since the run's start when
    each one's weights were taken, its mean score and 95% bootstrap interval (NaN where a row has none), and the
    protocol and episodes of the last."""

    frames: np.ndarray
    minutes: np.ndarray
    mean: np.ndarray
    low: np.ndarray
    high: np.ndarray
    protocol: str = ""
    episodes: int = 0


def evaluations(run: Run) -> Evaluations:
    """The run's evaluations, in the order of their frames; empty arrays where it has none."""
    rows = sorted(
        (r for r in run.evaluations if number(r, "env_frames") is not None and number(r, "mean") is not None),
        key=lambda r: cast(float, number(r, "env_frames")),  # a number: the rows without one are left out
    )
    start = run_start(run)
    if start is None:  # neither metrics nor episodes yet: from the first evaluation
        start = min((number(r, "wall_time") or 0.0 for r in rows), default=0.0)
    last = rows[-1] if rows else {}
    return Evaluations(
        column(rows, "env_frames"),
        (column(rows, "wall_time") - start) / 60.0,
        column(rows, "mean"),
        column(rows, "ci95_low"),
        column(rows, "ci95_high"),
        str(last.get("protocol") or ""),
        int(number(last, "episodes") or 0),
    )


# -- grouping -----------------------------------------------------------------------------------------------


def _flat(tree, prefix: str = "") -> dict[str, object]:
    """A config as dotted keys (``learner.learning_rate``; list items by index: ``replay.0.type``)."""
    items = tree.items() if isinstance(tree, dict) else enumerate(tree) if isinstance(tree, list) else None
    if items is None:
        return {prefix: tree}
    out: dict[str, object] = {}
    for key, value in items:
        out |= _flat(value, f"{prefix}.{key}" if prefix else str(key))
    return out


def _compared(run: Run) -> dict[str, object]:
    return {k: v for k, v in _flat(run.config).items() if k not in IGNORED_KEYS}


def _part(key: str, value: object) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    return f"{key}={text if len(text) <= 24 else text[:23] + '…'}"


def group_runs(runs: list[Run]) -> list[Group]:
    """Runs grouped by config less ``IGNORED_KEYS``, in the order their first run was given. A group of one is
    named by its run folder; a larger one by its env id. Where the groups' configs differ, the name adds the
    keys that differ (``LABEL_KEYS`` at the most)."""
    configs: dict[str, dict[str, object]] = {}
    members: dict[str, list[Run]] = {}
    for run in runs:
        compared = _compared(run)
        key = json.dumps(compared, sort_keys=True, default=str)
        configs.setdefault(key, compared)
        members.setdefault(key, []).append(run)
    keys = sorted({k for c in configs.values() for k in c})
    differing = [k for k in keys if len({json.dumps(c.get(k), default=str) for c in configs.values()}) > 1]
    groups = []
    named = [k for k in differing if k != "env.id"]  # the head names the env (a run folder is named by it)
    for key, config in configs.items():
        mine = members[key]
        parts = [_part(k, config.get(k)) for k in named[:LABEL_KEYS]]
        if len(named) > LABEL_KEYS:
            parts.append(f"+{len(named) - LABEL_KEYS} keys")
        head = mine[0].name if len(mine) == 1 else str(config.get("env.id", mine[0].name))
        groups.append(Group(", ".join([head, *parts]), mine))
    return groups
