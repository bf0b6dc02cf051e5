"""zrl-sweep's plan: a sweep file read into its runs, and the index that records where each run stands.

A sweep file is TOML::

    [sweep]
    config = "../breakout.toml"      # the run file every run starts from, relative to this file ("": built-in)
    seeds = [1, 2, 3]
    parallel = 1                     # runs at a time
    set = { "run.max_env_frames" = 3_000_000 }   # overrides for every run

    [grid]                           # every combination of these values (optional)
    "learner.learning_rate" = [3e-4, 6e-4]

    [[variant]]                      # named override sets, each crossed with the grid (optional)
    name = "elite"
    replay = '[{"type": "queue", ...}, {"type": "custom", ...}]'   # the reference's JSON, as --replay takes it
    set = { "env.id" = "ALE/Breakout-v5" }

The runs are variants x grid points x seeds. ``OUT/index.json`` records each run's label, overrides, seed,
status (pending, running, done, failed, stopped), exit code and folder, and the last lines of a failed run's
log; it is rewritten (atomically) at every change. Running them is ``zrl.experiment.sweep``.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomli_w

from zrl import config as config_mod
from zrl.config import ConfigError

INDEX = "index.json"
SWEEP_COPY = "sweep.toml"
LOG = "launch.log"
STATUSES = ("pending", "running", "done", "failed", "stopped")
SWEEP_KEYS = ("config", "seeds", "parallel", "set")
VARIANT_KEYS = ("name", "replay", "set", "config")
TOP_KEYS = ("sweep", "grid", "variant")
NAME = re.compile(r"[A-Za-z0-9_+\-][A-Za-z0-9_.+\-]*")


@dataclass
class Run:
    """One planned run: its label (variant and grid point), overrides, seed and where it stands."""

    label: str
    variant: str
    grid: dict[str, Any]
    seed: int
    config: str | None
    sets: list[str]
    status: str = "pending"
    folder: str | None = None
    exit_code: int | None = None
    started: float | None = None
    ended: float | None = None
    log_tail: list[str] = field(default_factory=list)
    max_env_frames: int = 0

    @property
    def key(self) -> str:
        return f"{self.label}/seed{self.seed}"


@dataclass
class Sweep:
    path: Path
    seeds: list[int]
    parallel: int
    runs: list[Run]


def _toml_value(value: Any) -> str:
    return tomli_w.dumps({"v": value}).partition("=")[2].strip()


def _flat(table: dict, prefix: str = "") -> dict[str, Any]:
    """Dotted keys from a table whose keys TOML nested (``run.seed = 3`` unquoted is ``{run = {seed = 3}}``)."""
    out: dict[str, Any] = {}
    for key, value in table.items():
        if isinstance(value, dict):
            out |= _flat(value, f"{prefix}{key}.")
        else:
            out[f"{prefix}{key}"] = value
    return out


def _sets(table: Any, where: str) -> list[str]:
    if not isinstance(table, dict):
        raise ConfigError(f'{where}: expected a table of config keys and values, e.g. {{ "run.seed" = 3 }}')
    return [f"{key}={_toml_value(value)}" for key, value in _flat(table).items()]


def _unknown(table: dict, valid: tuple[str, ...], where: str) -> None:
    for key in table:
        if key not in valid:
            raise ConfigError(f"{where}.{key}: unknown key; valid keys are {', '.join(valid)}")


def label_part(key: str, value: Any) -> str:
    text = value if isinstance(value, str) else _toml_value(value)
    safe = "".join(c if c.isalnum() or c in "-_.+" else "_" for c in str(text))
    return f"{key.rpartition('.')[2]}={safe}"


def load(path: str | Path) -> Sweep:
    """Read and check a sweep file, and resolve every run's config (a ConfigError names the file and key)."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such sweep file") from None
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"{path}: cannot read: {err}") from None
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{path}: not valid TOML: {err}") from None
    _unknown(data, TOP_KEYS, str(path))
    head = data.get("sweep", {})
    if not isinstance(head, dict):
        raise ConfigError(f"{path}: [sweep] must be a table")
    _unknown(head, SWEEP_KEYS, f"{path}: sweep")
    seeds = head.get("seeds", [1])
    if (
        not isinstance(seeds, list)
        or not seeds
        or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in seeds)
    ):
        raise ConfigError(
            f"{path}: sweep.seeds = {seeds!r}: expected a non-empty list of integers >= 0, e.g. [1, 2, 3]"
        )
    if len(set(seeds)) != len(seeds):
        raise ConfigError(f"{path}: sweep.seeds = {seeds!r}: a seed is repeated")
    parallel = head.get("parallel", 1)
    if not isinstance(parallel, int) or isinstance(parallel, bool) or parallel < 1:
        raise ConfigError(f"{path}: sweep.parallel = {parallel!r}: expected an integer >= 1")
    base_config = _config_path(path, head.get("config", ""), "sweep.config")
    base_sets = _sets(head.get("set", {}), f"{path}: sweep.set")

    grid = data.get("grid", {})
    if not isinstance(grid, dict):
        raise ConfigError(f"{path}: [grid] must be a table of config keys, each with a list of values")
    grid = _flat(grid)
    for key, values in grid.items():
        if not isinstance(values, list) or not values:
            raise ConfigError(f"{path}: grid.{key} = {values!r}: expected a non-empty list of values")
    variants = data.get("variant", [{"name": ""}])
    if not isinstance(variants, list) or not variants or not all(isinstance(v, dict) for v in variants):
        raise ConfigError(f"{path}: variant: expected [[variant]] tables")
    names = []
    for i, variant in enumerate(variants):
        _unknown(variant, VARIANT_KEYS, f"{path}: variant[{i}]")
        name = variant.get("name", "" if len(variants) == 1 else None)
        if not isinstance(name, str) or (len(variants) > 1 and not name):
            raise ConfigError(f"{path}: variant[{i}].name: each of several variants needs a name (a string)")
        if name and not NAME.fullmatch(name):
            raise ConfigError(
                f"{path}: variant[{i}].name = {name!r}: letters, digits and _ . + - only, not starting with . "
                "(it names a folder)"
            )
        if name in names:
            raise ConfigError(f"{path}: variant[{i}].name = {name!r} is used twice")
        names.append(name)

    planned = []  # (label, variant, point, config, sets, max_env_frames)
    points = [dict(zip(grid, combo)) for combo in itertools.product(*grid.values())]
    for i, variant in enumerate(variants):
        where = f"{path}: variant[{i}]"
        config = _config_path(path, variant["config"], f"variant[{i}].config") if "config" in variant else base_config
        sets = base_sets + _sets(variant.get("set", {}), f"{where}.set")
        if "replay" in variant:
            if not isinstance(variant["replay"], str):
                raise ConfigError(f"{where}.replay: expected the reference's JSON list as a string")
            sets.append(f"replay={variant['replay']}")
        for point in points:
            run_sets = sets + [f"{key}={_toml_value(value)}" for key, value in point.items()]
            label = "-".join([p for p in [names[i], *(label_part(k, v) for k, v in point.items())] if p]) or "run"
            try:
                cfg = config_mod.load(config, run_sets)
            except ConfigError as err:
                raise ConfigError(f"{path}: {label}: {err}") from None
            planned.append((label, names[i], point, config, run_sets, cfg.run.max_env_frames))
    labels = [p[0] for p in planned]
    twice = sorted({label for label in labels if labels.count(label) > 1})
    if twice:
        raise ConfigError(f"{path}: two runs would share the label {twice[0]!r}; give the variants other names")
    # seed by seed, so that a sweep cut short has every config at the same number of seeds
    runs = [
        Run(label, variant, point, seed, config, sets, max_env_frames=frames)
        for seed in seeds
        for label, variant, point, config, sets, frames in planned
    ]
    return Sweep(path, list(seeds), parallel, runs)


def _config_path(sweep_path: Path, value: Any, key: str) -> str | None:
    if not isinstance(value, str):
        raise ConfigError(f"{sweep_path}: {key} = {value!r}: expected a path to a run file (a string)")
    if not value:
        return None
    found = (sweep_path.parent / value).resolve()
    if not found.is_file():
        raise ConfigError(f"{sweep_path}: {key} = {value!r}: no such run file ({found})")
    return str(found)


# ---- the index ---------------------------------------------------------------------------------------------


def write_index(out: Path, sweep: Sweep) -> None:
    rows = [
        {
            "label": r.label,
            "variant": r.variant,
            "grid": r.grid,
            "seed": r.seed,
            "config": r.config,
            "sets": r.sets,
            "status": r.status,
            "exit_code": r.exit_code,
            "folder": r.folder,
            "started": r.started,
            "ended": r.ended,
            "log": str(Path(r.label) / f"seed{r.seed}" / LOG),
            "log_tail": r.log_tail,
        }
        for r in sweep.runs
    ]
    text = json.dumps({"sweep": SWEEP_COPY, "runs": rows}, indent=1) + "\n"
    tmp = out / f".{INDEX}.tmp"
    tmp.write_text(text)
    os.replace(tmp, out / INDEX)


def read_index(out: Path) -> dict:
    try:
        index = json.loads((out / INDEX).read_text())
    except FileNotFoundError:
        raise ConfigError(f"{out}: not a sweep folder (no {INDEX})") from None
    except (OSError, json.JSONDecodeError) as err:
        raise ConfigError(f"{out}/{INDEX}: unreadable: {err}") from None
    if not isinstance(index, dict) or not isinstance(index.get("runs"), list):
        raise ConfigError(f"{out}/{INDEX}: not a zrl-sweep index (no runs list)")
    return index


def restore(out: Path, sweep: Sweep) -> None:
    """Take each run's status and folder from the index of a sweep resumed in ``out``."""
    known = {f"{r['label']}/seed{r['seed']}": r for r in read_index(out)["runs"]}
    for run in sweep.runs:
        row = known.get(run.key)
        if row is None:
            continue
        run.status = row["status"] if row["status"] in STATUSES else "pending"
        run.folder, run.exit_code = row.get("folder"), row.get("exit_code")
        run.started, run.ended, run.log_tail = row.get("started"), row.get("ended"), row.get("log_tail") or []
        if run.status == "running":  # the sweep died while it ran
            run.status = "stopped"
