"""Loading and writing: a run file, ``--set`` items and command-line options merged over the defaults (names
checked, with a hint for a near miss, and keys that moved named), built through the schema, and written back
as the TOML a run folder keeps (``config.toml``) or a checkpoint stores (``to_dict``)."""

from __future__ import annotations

import difflib
import tomllib
from collections.abc import Sequence
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

import tomli_w

from zrl.agents import REGISTRY as agent_registry
from zrl.config.checks import REPLAY_KEYS, declared
from zrl.config.per_game import game_file
from zrl.config.reference import replays_from_json
from zrl.config.replay import ReplayConfig
from zrl.config.run import EnvConfig
from zrl.config.schema import BUILTIN, SECTIONS, TOP_KEYS, Config, sections
from zrl.errors import ConfigError

MOVED_KEYS = {
    "learner.clip_rho_threshold": "vtrace.clip_rho",
    "learner.clip_pg_rho_threshold": "vtrace.clip_pg_rho",
    "model.send_features": None,  # workers send features whenever an elite or attentive replay needs them
}
# Keys a resumed run may change: how long, how many processes, how often it reports and saves.
SAFE_ON_RESUME = (
    "run.tensorboard",
    "run.best_by",
    "eval.interval_frames",
    "eval.episodes",
    "eval.protocol",
    "eval.greedy",
    "eval.held_out_states",
    "eval.nice",
    "eval.final",
    "eval.stop_at_score",
    "run.stop_at_return",
    "run.background_save",
    "run.max_env_frames",
    "run.log_interval_s",
    "run.checkpoint_every_steps",
    "run.checkpoint_every_minutes",
    "run.keep_checkpoints",
    "run.checkpoint_replay",
    "run.heartbeat_timeout_s",
    "run.restart_policy",
    "run.max_restarts",
    "run.restart_window_s",
    "run.max_seconds",
    "workers.max_restarts",
    "workers.restart_window_s",
    "workers.count",
    "workers.remote",
    "workers.envs_per_worker",
    "workers.torch_threads",
    "workers.nice",
    "workers.stats_interval_s",
    "workers.max_weights_wait_s",
    "learner.device",
    "learner.unroll_conv",
    "broker.device",
    "learner.torch_threads",
    "broker.torch_threads",
    "broker.prefetch_batches",
    "transport.kind",
    "transport.remote_port",
    "transport.public_host",
    "transport.hwm",
    "transport.poll_timeout_ms",
)
OPTION_FLAGS = {"workers.count": "--workers", "workers.envs_per_worker": "--envs-per-worker"}


def _unknown(source: str, key: str, valid: list[str]) -> ConfigError:
    hint = difflib.get_close_matches(key, valid, n=1, cutoff=0.6)
    extra = f" (did you mean '{hint[0]}'?)" if hint else ""
    return ConfigError(f"{source}: unknown key '{key}'{extra}")


def _all_keys() -> list[str]:
    tables = sections()
    keys = [f"{name}.{f.name}" for name, cls in tables.items() for f in fields(cls)]
    keys += [f"replay.{f.name}" for f in fields(ReplayConfig)]
    return keys + list(tables) + ["replay"] + list(TOP_KEYS)


def _merge(base: dict, layer: dict, source: str, sources: dict[str, str]) -> None:
    """Merge one layer of raw values into base, checking section and key names."""
    for section, body in layer.items():
        if section in TOP_KEYS:
            if section == "algo" and isinstance(body, dict):
                raise ConfigError(
                    f"{source}: [algo] is now [vtrace] (V-trace's clips, CLEAR and LASER); the top-level "
                    "key algo = " + " or ".join(f'"{name}"' for name in agent_registry) + " names the agent"
                )
            base[section] = body
            sources[section] = source
            continue
        if section == "replay":
            if not isinstance(body, list) or not all(isinstance(t, dict) for t in body):
                raise ConfigError(f"{source}: replay must be a list of tables ([[replay]])")
            everything = [f.name for f in fields(ReplayConfig)]
            for i, table in enumerate(body):
                kind = table.get("type", ReplayConfig.type)
                valid = REPLAY_KEYS.get(kind, everything) if isinstance(kind, str) else everything
                for key in table:
                    if key in everything and key not in valid:
                        users = " and ".join(k for k, keys in REPLAY_KEYS.items() if key in keys)
                        raise ConfigError(
                            f"{source}: replay[{i}].{key} applies only to {users} replays; this one is {kind}"
                        )
                    if key not in valid:
                        raise _unknown(source, f"replay[{i}].{key}", [f"replay[{i}].{v}" for v in valid])
            base["replay"] = [dict(t) for t in body]
            sources["replay"] = source
            continue
        tables = sections()
        if section not in tables:
            raise _unknown(source, section, _all_keys())
        if not isinstance(body, dict):
            raise ConfigError(f"{source}: {section} must be a table ([{section}])")
        keys = {f.name for f in fields(tables[section])}
        for key, value in body.items():
            if f"{section}.{key}" in MOVED_KEYS:
                to = MOVED_KEYS[f"{section}.{key}"]
                why = (
                    f"it is now {to}"
                    if to
                    else "workers now send features whenever an elite or attentive replay needs them"
                )
                raise ConfigError(f"{source}: {section}.{key} is no longer a key: {why}")
            if key not in keys:
                raise _unknown(source, f"{section}.{key}", _all_keys())
            base.setdefault(section, {})[key] = value
            sources[f"{section}.{key}"] = source


def _build(raw: dict, sources: dict[str, str]) -> Config:
    """The Config of merged raw values: each section converted and bounded by its declaration, then the rules
    between keys; a mistake names the file or option that set the key."""
    try:
        built = {name: declared(cls, raw.get(name, {}), name) for name, cls in sections().items()}
        parts: dict[str, Any] = {name: built.pop(name) for name in SECTIONS}
        parts["agent_sections"] = tuple(built.items())
        if "replay" in raw:  # else the schema's default replays
            tables = raw["replay"]
            parts["replay"] = tuple(declared(ReplayConfig, t, f"replay[{i}]") for i, t in enumerate(tables))
        for key in TOP_KEYS:
            if key in raw:
                parts[key] = raw[key]
                if not isinstance(raw[key], str):
                    raise ConfigError(f"{key} = {raw[key]!r} must be a string", key)
        return Config(**parts)
    except ConfigError as err:
        raise ConfigError(f"{_source_of(sources, err.key or str(err).split(':', 1)[0])}: {err}", err.key) from None


def _source_of(sources: dict[str, str], key: str) -> str:
    """Where the value behind a dotted key came from (its section's last source if it was a default)."""
    if key.startswith("replay"):
        key = "replay"
    if key in sources:
        return sources[key]
    named = [src for k, src in sources.items() if k.split(".")[0] == key.split(".")[0]]
    named = named or list(sources.values())
    return named[-1] if named else BUILTIN


def read_toml(path: str | Path) -> dict:
    """Read a TOML file; a missing, unreadable or malformed file is a ConfigError naming it."""
    path = Path(path)
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such config file") from None
    except IsADirectoryError:
        raise ConfigError(f"{path}: is a folder, not a config file") from None
    except PermissionError:
        raise ConfigError(f"{path}: cannot be read (permission denied)") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
        raise ConfigError(f"{path}: not valid TOML: {err}") from None
    except RecursionError:
        raise ConfigError(f"{path}: not valid TOML: values nested too deeply") from None


def parse_set(item: str) -> tuple[str, str, Any]:
    """Split ``section.key=value``; the value is read as a TOML value, or as a bare string."""
    if "=" not in item:
        raise ConfigError(f"--set {item}: expected section.key=value, e.g. learner.batch_size=16")
    dotted, text = (part.strip() for part in item.split("=", 1))
    if dotted == "replay":
        return "replay", "", replays_from_json(text, f"--set {item}")
    if dotted in TOP_KEYS:
        try:
            return dotted, "", tomllib.loads(f"v = {text}")["v"]
        except tomllib.TOMLDecodeError:
            return dotted, "", text
        except RecursionError:
            raise ConfigError(f"--set {item}: the value is nested too deeply") from None
    if dotted.count(".") != 1:
        raise ConfigError(f"--set {item}: the key must be section.key, e.g. learner.batch_size")
    section, key = dotted.split(".")
    try:
        value = tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        value = text
    except RecursionError:
        raise ConfigError(f"--set {item}: the value is nested too deeply") from None
    return section, key, value


def load(
    path: str | Path | None = None,
    sets: Sequence[str] = (),
    options: dict[str, Any] | None = None,
    stored: bool = False,
) -> Config:
    """Resolve a config: defaults < zrl's settings for the game (``zrl.config.per_game``) < run file < --set items
    < command-line options. ``stored``: the file is a run's own config.toml, written by an older zrl perhaps (its
    renamed sections are read as now); it holds every key, the game's settings among them, so none are read.

    ``options`` maps dotted keys (e.g. ``"workers.count"``) to values; None values are ignored.
    """
    raw: dict[str, Any] = {}
    sources: dict[str, str] = {}
    if path is not None:
        _merge(raw, _renamed(read_toml(path)) if stored else read_toml(path), str(path), sources)
    for item in sets:
        section, key, value = parse_set(item)
        _merge(
            raw,
            {section: value} if section == "replay" or section in TOP_KEYS else {section: {key: value}},
            f"--set {item}",
            sources,
        )
    for dotted, value in (options or {}).items():
        if value is None:
            continue
        if dotted == "replay":  # --replay: the reference platform's JSON list
            _merge(raw, {"replay": replays_from_json(value, "option --replay")}, "option --replay", sources)
            continue
        section, key = dotted.split(".")
        flag = OPTION_FLAGS.get(dotted, "--" + key.replace("_", "-"))
        _merge(raw, {section: {key: value}}, f"option {flag}", sources)
    if not stored:
        raw, sources = _under_game_settings(raw, sources)
    return _build(raw, sources)


def _under_game_settings(raw: dict[str, Any], sources: dict[str, str]) -> tuple[dict[str, Any], dict[str, str]]:
    """The merged layers over zrl's settings for their game and agent, where zrl has a file of them and
    run.game_settings is not false; a value of the wrong type is left for the build to name."""
    run = raw.get("run", {})
    algo, env = raw.get("algo", Config.algo), raw.get("env", {}).get("id", EnvConfig.id)
    if run.get("game_settings") is False or not isinstance(algo, str) or not isinstance(env, str):
        return raw, sources
    path = game_file(algo, env)
    if path is None:
        return raw, sources
    under: dict[str, Any] = {}
    under_sources: dict[str, str] = {}
    source = f"zrl's settings for {env} ({path})"
    _merge(under, read_toml(path), source, under_sources)
    chosen = [key for key in (*TOP_KEYS, "env.id", "run.game_settings") if key in under_sources]
    if chosen:
        raise ConfigError(f"{source}: {', '.join(chosen)} cannot be a game's setting: they choose the file")
    for section, body in raw.items():
        if isinstance(body, dict):
            under.setdefault(section, {}).update(body)
        else:
            under[section] = body
    return under, {**under_sources, **sources}


def to_dict(cfg: Config) -> dict[str, Any]:
    out: dict[str, Any] = {key: getattr(cfg, key) for key in TOP_KEYS}
    for name in sections():
        out[name] = {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(getattr(cfg, name)).items()}
    out["replay"] = [{k: v for k, v in asdict(r).items() if k in REPLAY_KEYS[r.type]} for r in cfg.replay]
    return out


# learner keys added after run folders existed, and what a stored config without them meant
OLDER_MEANINGS = {"replay_ratio": 0.0, "entropy_follows_lr": False}


def _renamed(raw: dict[str, Any]) -> dict[str, Any]:
    """A config zrl wrote earlier (a run folder's, a checkpoint's), as it reads now: [algo] became [vtrace], and
    model.kind = "auto" meant the Nature net until atari_small came, with workers.nice (every config written
    since has that key; a run now also stores the kind it resolved); a config from before
    learner.replay_ratio trained each unit once (0), and one from before learner.entropy_follows_lr held its
    entropy weight where entropy_decay_frames did not move it (false), whatever today's defaults."""
    if isinstance(raw.get("algo"), dict):
        raw = {**{k: v for k, v in raw.items() if k != "algo"}, "vtrace": raw["algo"]}
    model, workers = raw.get("model"), raw.get("workers")
    if (
        isinstance(model, dict)
        and model.get("kind") == "auto"
        and not (isinstance(workers, dict) and "nice" in workers)
    ):
        raw = {**raw, "model": {**model, "kind": "auto_nature"}}
    learner = raw.get("learner")
    if isinstance(learner, dict):
        older = {key: value for key, value in OLDER_MEANINGS.items() if key not in learner}
        raw = {**raw, "learner": {**learner, **older}}
    return raw


def from_dict(raw: dict[str, Any], source: str) -> Config:
    """Rebuild a config from to_dict output (e.g. stored in a checkpoint); a ConfigError naming ``source`` for
    anything else (a checkpoint that verifies may still hold any value there)."""
    if not _named_tables(raw):
        raise ConfigError(f"{source}: the stored config is not a table of named keys")
    layered: dict[str, Any] = {}
    sources: dict[str, str] = {}
    _merge(layered, _renamed(raw), source, sources)
    return _build(layered, sources)


def _named_tables(value: Any, depth: int = 0) -> bool:
    """Whether ``value`` is a table whose keys, and those of every table within it (in lists too), are strings."""
    if not isinstance(value, dict) or depth > 8:  # no config nests that deep
        return False
    for key, item in value.items():
        if not isinstance(key, str):
            return False
        tables = (
            [item]
            if isinstance(item, dict)
            else [t for t in item if isinstance(t, dict)]
            if isinstance(item, list)
            else []
        )
        if not all(_named_tables(table, depth + 1) for table in tables):
            return False
    return True


def dumps(cfg: Config) -> str:
    """The resolved config as TOML text (each part written by tomli-w) that ``load`` reads back to an equal
    Config: the top keys, the sections in order, then one ``[[replay]]`` table per replay, as run files have them."""
    data = to_dict(cfg)
    parts = ["# zrl resolved config: every key, as this run used it.\n" + tomli_w.dumps({k: data[k] for k in TOP_KEYS})]
    parts += [tomli_w.dumps({name: data[name]}) for name in sections()]
    parts += ["[[replay]]\n" + tomli_w.dumps(rep) for rep in data["replay"]]
    return "\n".join(parts)
