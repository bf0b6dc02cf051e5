"""Run configuration: frozen dataclasses, one per section, read from TOML.

Precedence, highest first: command-line options > ``--set section.key=value`` > the run file >
the defaults below (mirrored, with a comment per key, in ``config/defaults.toml``).

Every mistake is a :class:`ConfigError` that names the file (or ``--set`` / the option), the dotted
key and what would be valid. Nothing here starts a process or touches the disk beyond reading.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import tomllib
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BUILTIN = "<built-in defaults>"


class ConfigError(ValueError):
    """A configuration mistake; the message is meant for the user as is."""


@dataclass(frozen=True)
class RunConfig:
    results_dir: str = "results"
    """Folder that holds one sub-folder per run, results/<env>_<unix_ts>/."""
    max_env_frames: int = 50_000_000
    """Budget: the run stops after this many environment frames (Atari: env steps x frame_skip)."""
    seed: int = 0
    """Seed of the learner's model initialisation and of every worker's environments and actions."""
    log_interval_s: float = 5.0
    """Seconds between progress lines and rows of metrics.csv."""
    checkpoint_every_steps: int = 5000
    """Learner steps between checkpoints; a final one is always written at an orderly stop. 0: only the final one."""
    keep_checkpoints: int = 3
    """How many periodic checkpoints to keep (the newest ones)."""
    heartbeat_timeout_s: float = 60.0
    """A role that reports nothing for this long is declared hung and the run stops."""


@dataclass(frozen=True)
class EnvConfig:
    id: str = "ALE/Pong-v5"
    """Environment id: ALE/<Game>-v5 or <Game>NoFrameskip-v4 for Atari, any Gymnasium id with a Box observation otherwise."""
    frame_skip: int = 4
    """Atari: emulator frames per agent step, with a max over the last two."""
    noop_max: int = 30
    """Atari: up to this many random no-ops at every reset."""
    frame_stack: int = 4
    """Frames stacked into one observation, rebuilt from single frames at gather time (1 for vector observations)."""
    episodic_life: bool = True
    """Atari: a lost life ends the training episode (discount 0) without resetting the game; scores count whole games."""
    clip_rewards: bool = True
    """Train on sign(reward); raw scores are still what episodes.csv reports."""
    fire_reset: bool = True
    """Atari: press FIRE at reset in games that need it."""
    max_episode_frames: int = 108_000
    """Atari: episodes are truncated after this many emulator frames (30 minutes of play)."""
    sticky_action_prob: float = 0.0
    """Atari: probability that the emulator repeats the previous action (Machado et al. use 0.25)."""
    full_action_space: bool = False
    """Atari: use all 18 actions instead of the game's minimal set."""
    max_episode_steps: int = 0
    """Non-Atari: truncate episodes after this many steps; 0 keeps the environment's own limit."""


@dataclass(frozen=True)
class WorkersConfig:
    count: int = 2
    """Worker processes (the same as --workers)."""
    envs_per_worker: int = 4
    """Environments each worker steps in lock-step (the same as --envs-per-worker)."""
    ring_slots: int = 0
    """Slots in each worker's frame ring (one slot = one frame of every env); 0 sizes it from the replay and batch."""
    torch_threads: int = 1
    """PyTorch threads for each worker's policy inference."""
    stats_interval_s: float = 1.0
    """Seconds between a worker's stats messages, which double as its heartbeat."""
    produce_ratio: float = 1.25
    """Actor/learner balance: per weights version all workers send about this many batches' worth of unrolls (rounded up to whole unrolls per worker), then wait for new weights; 0 runs free."""
    max_weights_wait_s: float = 2.0
    """The longest a throttled worker waits for new weights before it sends another unroll anyway."""


@dataclass(frozen=True)
class ModelConfig:
    kind: str = "auto"
    """Network: atari (three conv layers and a 512-unit layer), mlp, or auto (atari for image observations)."""
    hidden_size: int = 512
    """Width of the Atari network's fully connected layer."""
    mlp_hidden: tuple[int, ...] = (64, 64)
    """Hidden layer widths of the MLP for vector observations."""
    feature_size: int = 512
    """Length of the state feature vector the feature head emits (used by elite and attentive replay)."""
    send_features: bool = False
    """Workers send their behaviour-time feature vectors with every unroll (needed by elite/attentive replay)."""


@dataclass(frozen=True)
class LearnerConfig:
    batch_size: int = 32
    """Unrolls per learner step."""
    unroll_length: int = 20
    """Steps per unroll (T)."""
    device: str = "auto"
    """cpu, cuda, cuda:N, or auto (cuda when available)."""
    precision: str = "fp32"
    """fp32, or bf16 (autocast for the forward pass and loss)."""
    torch_threads: int = 0
    """PyTorch threads for the learner; 0 lets PyTorch choose."""
    optimizer: str = "rmsprop"
    """rmsprop or adam."""
    learning_rate: float = 0.00048
    """Initial learning rate."""
    lr_decay_steps: int = 0
    """Learner steps over which the learning rate decays polynomially to lr_end; 0 derives them from run.max_env_frames."""
    lr_end: float = 0.0
    """Learning rate at the end of the decay."""
    lr_decay_power: float = 1.0
    """Power of the polynomial decay (1 is linear)."""
    rmsprop_alpha: float = 0.99
    """RMSprop smoothing constant."""
    rmsprop_eps: float = 0.01
    """RMSprop epsilon."""
    rmsprop_momentum: float = 0.0
    """RMSprop momentum."""
    adam_eps: float = 1e-8
    """Adam epsilon."""
    discount: float = 0.99
    """Discount factor gamma."""
    reward_scale: float = 1.0
    """Rewards are multiplied by this before the loss (after any clipping); keeps value targets in a range nets fit well."""
    baseline_cost: float = 0.5
    """Weight of the value (baseline) loss."""
    entropy_cost: float = 0.0006
    """Weight of the entropy bonus (losses are sums over T x B, so this is per sample)."""
    grad_norm_clip: float = 40.0
    """Global gradient norm clip; 0 disables it."""
    clip_rho_threshold: float = 1.0
    """V-trace rho-bar; 0 means no clipping."""
    clip_pg_rho_threshold: float = 1.0
    """V-trace clip of the policy-gradient importance weight; 0 means no clipping."""
    publish_every: int = 1
    """Learner steps between weight broadcasts."""


@dataclass(frozen=True)
class BrokerConfig:
    prefetch_batches: int = 2
    """Batches ready ahead of the learner: the learner grants this many credits, the broker sends a batch per credit."""


@dataclass(frozen=True)
class ReplayConfig:
    type: str = "queue"
    """queue: FIFO of fresh unrolls (more replay types arrive with later releases)."""
    capacity: int = 64
    """Unrolls the replay holds; when full the oldest is dropped and counted."""
    sample_ratio: float = 1.0
    """Share of every batch taken from this replay; the ratios sum to 1."""


@dataclass(frozen=True)
class TransportConfig:
    kind: str = "ipc"
    """ipc (unix sockets in the run's private folder) or tcp."""
    bind_host: str = "127.0.0.1"
    """Address tcp sockets bind to: 127.0.0.1 (anything else needs CurveZMQ keys, not yet supported)."""
    hwm: int = 64
    """ZeroMQ high-water mark (messages) on every socket that carries unrolls or batches."""
    poll_timeout_ms: int = 100
    """Every blocking receive polls this long before it checks whether to stop."""


REPLAY_TYPES = ("queue",)
OPTIMIZERS = ("rmsprop", "adam")
PRECISIONS = ("fp32", "bf16")
MODEL_KINDS = ("auto", "atari", "mlp")
TRANSPORT_KINDS = ("ipc", "tcp")
LOOPBACK_HOSTS = ("127.0.0.1", "localhost")
OPTION_FLAGS = {"workers.count": "--workers", "workers.envs_per_worker": "--envs-per-worker"}


@dataclass(frozen=True)
class Config:
    run: RunConfig = field(default_factory=RunConfig)
    env: EnvConfig = field(default_factory=EnvConfig)
    workers: WorkersConfig = field(default_factory=WorkersConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    learner: LearnerConfig = field(default_factory=LearnerConfig)
    broker: BrokerConfig = field(default_factory=BrokerConfig)
    replay: tuple[ReplayConfig, ...] = (ReplayConfig(),)
    transport: TransportConfig = field(default_factory=TransportConfig)

    def __post_init__(self) -> None:
        check(self)


SECTIONS: dict[str, type] = {
    "run": RunConfig,
    "env": EnvConfig,
    "workers": WorkersConfig,
    "model": ModelConfig,
    "learner": LearnerConfig,
    "broker": BrokerConfig,
    "transport": TransportConfig,
}


# ---------------------------------------------------------------------------------------------
# validation of combinations


def _fail(key: str, message: str) -> typing.NoReturn:
    raise ConfigError(f"{key}: {message}")


def check(cfg: Config) -> None:
    """Raise ConfigError for impossible values and combinations (no I/O)."""
    positive = {
        "run.max_env_frames": cfg.run.max_env_frames,
        "run.log_interval_s": cfg.run.log_interval_s,
        "run.keep_checkpoints": cfg.run.keep_checkpoints,
        "run.heartbeat_timeout_s": cfg.run.heartbeat_timeout_s,
        "env.frame_skip": cfg.env.frame_skip,
        "env.frame_stack": cfg.env.frame_stack,
        "env.max_episode_frames": cfg.env.max_episode_frames,
        "workers.count": cfg.workers.count,
        "workers.envs_per_worker": cfg.workers.envs_per_worker,
        "workers.torch_threads": cfg.workers.torch_threads,
        "workers.stats_interval_s": cfg.workers.stats_interval_s,
        "workers.max_weights_wait_s": cfg.workers.max_weights_wait_s,
        "model.hidden_size": cfg.model.hidden_size,
        "model.feature_size": cfg.model.feature_size,
        "learner.batch_size": cfg.learner.batch_size,
        "learner.unroll_length": cfg.learner.unroll_length,
        "learner.learning_rate": cfg.learner.learning_rate,
        "learner.reward_scale": cfg.learner.reward_scale,
        "learner.rmsprop_eps": cfg.learner.rmsprop_eps,
        "learner.adam_eps": cfg.learner.adam_eps,
        "learner.publish_every": cfg.learner.publish_every,
        "broker.prefetch_batches": cfg.broker.prefetch_batches,
        "transport.hwm": cfg.transport.hwm,
        "transport.poll_timeout_ms": cfg.transport.poll_timeout_ms,
    }
    for key, value in positive.items():
        if not value > 0:
            _fail(key, f"must be > 0, got {value!r}")
    non_negative = {
        "run.seed": cfg.run.seed,
        "run.checkpoint_every_steps": cfg.run.checkpoint_every_steps,
        "env.noop_max": cfg.env.noop_max,
        "env.max_episode_steps": cfg.env.max_episode_steps,
        "workers.ring_slots": cfg.workers.ring_slots,
        "workers.produce_ratio": cfg.workers.produce_ratio,
        "learner.torch_threads": cfg.learner.torch_threads,
        "learner.lr_decay_steps": cfg.learner.lr_decay_steps,
        "learner.lr_end": cfg.learner.lr_end,
        "learner.lr_decay_power": cfg.learner.lr_decay_power,
        "learner.rmsprop_momentum": cfg.learner.rmsprop_momentum,
        "learner.baseline_cost": cfg.learner.baseline_cost,
        "learner.entropy_cost": cfg.learner.entropy_cost,
        "learner.grad_norm_clip": cfg.learner.grad_norm_clip,
        "learner.clip_rho_threshold": cfg.learner.clip_rho_threshold,
        "learner.clip_pg_rho_threshold": cfg.learner.clip_pg_rho_threshold,
    }
    for key, value in non_negative.items():
        if not value >= 0:
            _fail(key, f"must be >= 0, got {value!r}")
    for key, value in {
        "env.sticky_action_prob": cfg.env.sticky_action_prob,
        "learner.discount": cfg.learner.discount,
        "learner.rmsprop_alpha": cfg.learner.rmsprop_alpha,
    }.items():
        if not 0.0 <= value <= 1.0:
            _fail(key, f"must be between 0 and 1, got {value!r}")
    if cfg.learner.lr_end > cfg.learner.learning_rate:
        _fail("learner.lr_end", f"{cfg.learner.lr_end} is above learner.learning_rate {cfg.learner.learning_rate}")
    _choice("learner.optimizer", cfg.learner.optimizer, OPTIMIZERS)
    _choice("learner.precision", cfg.learner.precision, PRECISIONS)
    _choice("model.kind", cfg.model.kind, MODEL_KINDS)
    _choice("transport.kind", cfg.transport.kind, TRANSPORT_KINDS)
    if not cfg.env.id:
        _fail("env.id", "must name an environment, e.g. ALE/Pong-v5 or CartPole-v1")
    device = cfg.learner.device
    if not (device in ("auto", "cpu", "cuda") or (device.startswith("cuda:") and device[5:].isdigit())):
        _fail("learner.device", f"{device!r} is not one of auto, cpu, cuda, cuda:N")
    if any(width <= 0 for width in cfg.model.mlp_hidden) or not cfg.model.mlp_hidden:
        _fail("model.mlp_hidden", f"needs at least one positive width, got {list(cfg.model.mlp_hidden)}")
    if cfg.transport.bind_host not in LOOPBACK_HOSTS:
        _fail(
            "transport.bind_host",
            f"{cfg.transport.bind_host!r} is not a loopback address; binding other addresses needs "
            "CurveZMQ keys, which this release does not support yet. Use 127.0.0.1.",
        )
    _check_replays(cfg)
    if 0 < cfg.workers.produce_ratio < 1:
        _fail("workers.produce_ratio", f"{cfg.workers.produce_ratio} would send less than one batch per weights "
              "version and starve the learner; give 1 or more (1.25 leaves a margin), or 0 to run free")
    per_version = math.ceil(cfg.workers.produce_ratio * cfg.learner.batch_size * cfg.learner.publish_every)
    if cfg.workers.produce_ratio and cfg.replay and cfg.replay[0].capacity < per_version:
        _fail("replay[0].capacity", f"{cfg.replay[0].capacity} unrolls cannot hold what the workers send per weights "
              f"version (workers.produce_ratio {cfg.workers.produce_ratio} x learner.batch_size "
              f"{cfg.learner.batch_size} x learner.publish_every {cfg.learner.publish_every} = {per_version}); the "
              "learner would starve while the workers wait. Raise the capacity, or lower publish_every")
    window = cfg.learner.unroll_length + cfg.env.frame_stack
    if cfg.workers.ring_slots and cfg.workers.ring_slots < 2 * window:
        _fail("workers.ring_slots", f"{cfg.workers.ring_slots} slots cannot keep one unroll's frames while the next is "
              f"written; give at least 2 x (learner.unroll_length + env.frame_stack) = {2 * window}, or 0 for auto")


def _choice(key: str, value: str, valid: tuple[str, ...]) -> None:
    if value not in valid:
        hint = difflib.get_close_matches(value, valid, n=1)
        extra = f" (did you mean {hint[0]!r}?)" if hint else ""
        _fail(key, f"{value!r} is not one of {', '.join(valid)}{extra}")


def _check_replays(cfg: Config) -> None:
    if not cfg.replay:
        _fail("replay", "at least one [[replay]] table is needed")
    if len(cfg.replay) > 1:
        _fail("replay", f"{len(cfg.replay)} [[replay]] tables; this release mixes no replays yet, give one")
    batch = cfg.learner.batch_size
    total = 0.0
    for i, rep in enumerate(cfg.replay):
        key = f"replay[{i}]"
        _choice(f"{key}.type", rep.type, REPLAY_TYPES)
        if rep.capacity <= 0:
            _fail(f"{key}.capacity", f"must be > 0, got {rep.capacity}")
        if not 0.0 < rep.sample_ratio <= 1.0:
            _fail(f"{key}.sample_ratio", f"must be in (0, 1], got {rep.sample_ratio}")
        share = batch * rep.sample_ratio
        if abs(share - round(share)) > 1e-6:
            _fail(
                f"{key}.sample_ratio",
                f"learner.batch_size {batch} x sample_ratio {rep.sample_ratio} = {share:g} is not a whole number of unrolls",
            )
        if round(share) > rep.capacity:
            _fail(
                f"{key}.capacity",
                f"{rep.capacity} unrolls is less than one batch takes from this replay "
                f"(learner.batch_size {batch} x sample_ratio {rep.sample_ratio} = {round(share)})",
            )
        total += rep.sample_ratio
    if abs(total - 1.0) > 1e-6:
        _fail("replay", f"the sample_ratio values sum to {total:g}; they must sum to 1")


# ---------------------------------------------------------------------------------------------
# building from dictionaries, with type checks that name the key


def _type_name(tp: Any) -> str:
    return {int: "an integer", float: "a number", str: "a string", bool: "true or false"}.get(tp, "a list of integers")


def _coerce(key: str, value: Any, tp: Any, source: str) -> Any:
    origin = typing.get_origin(tp)
    ok = False
    if tp is bool:
        ok = isinstance(value, bool)
    elif tp is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif tp is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        value = float(value) if ok else value
    elif tp is str:
        ok = isinstance(value, str)
    elif origin is tuple:
        ok = isinstance(value, (list, tuple)) and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
        value = tuple(value) if ok else value
    if not ok:
        raise ConfigError(f"{source}: {key} = {value!r} must be {_type_name(tp)}")
    return value


def _unknown(source: str, key: str, valid: list[str]) -> ConfigError:
    hint = difflib.get_close_matches(key, valid, n=1, cutoff=0.6)
    extra = f" (did you mean '{hint[0]}'?)" if hint else ""
    return ConfigError(f"{source}: unknown key '{key}'{extra}")


def _all_keys() -> list[str]:
    keys = [f"{name}.{f.name}" for name, cls in SECTIONS.items() for f in dataclasses.fields(cls)]
    keys += [f"replay.{f.name}" for f in dataclasses.fields(ReplayConfig)]
    return keys + list(SECTIONS) + ["replay"]


def _merge(base: dict, layer: dict, source: str, sources: dict[str, str]) -> None:
    """Merge one layer of raw values into base, checking section and key names."""
    for section, body in layer.items():
        if section == "replay":
            if not isinstance(body, list) or not all(isinstance(t, dict) for t in body):
                raise ConfigError(f"{source}: replay must be a list of tables ([[replay]])")
            valid = [f.name for f in dataclasses.fields(ReplayConfig)]
            for i, table in enumerate(body):
                for key in table:
                    if key not in valid:
                        raise _unknown(source, f"replay[{i}].{key}", [f"replay[{i}].{v}" for v in valid])
            base["replay"] = [dict(t) for t in body]
            sources["replay"] = source
            continue
        if section not in SECTIONS:
            raise _unknown(source, section, _all_keys())
        if not isinstance(body, dict):
            raise ConfigError(f"{source}: {section} must be a table ([{section}])")
        valid = {f.name for f in dataclasses.fields(SECTIONS[section])}
        for key, value in body.items():
            if key not in valid:
                raise _unknown(source, f"{section}.{key}", _all_keys())
            base.setdefault(section, {})[key] = value
            sources[f"{section}.{key}"] = source


def _build(raw: dict, sources: dict[str, str]) -> Config:
    sections: dict[str, Any] = {}
    for name, cls in SECTIONS.items():
        hints = typing.get_type_hints(cls)
        values = {
            key: _coerce(f"{name}.{key}", value, hints[key], sources.get(f"{name}.{key}", BUILTIN))
            for key, value in raw.get(name, {}).items()
        }
        sections[name] = cls(**values)
    hints = typing.get_type_hints(ReplayConfig)
    replays = []
    for i, table in enumerate(raw.get("replay", [dataclasses.asdict(ReplayConfig())])):
        src = sources.get("replay", BUILTIN)
        replays.append(ReplayConfig(**{k: _coerce(f"replay[{i}].{k}", v, hints[k], src) for k, v in table.items()}))
    sections["replay"] = tuple(replays)
    try:
        return Config(**sections)
    except ConfigError as err:
        raise ConfigError(f"{_source_of(sources, str(err).split(':', 1)[0])}: {err}") from None


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


def parse_set(item: str) -> tuple[str, str, Any]:
    """Split ``section.key=value``; the value is read as a TOML value, or as a bare string."""
    if "=" not in item:
        raise ConfigError(f"--set {item}: expected section.key=value, e.g. learner.batch_size=16")
    dotted, text = (part.strip() for part in item.split("=", 1))
    if dotted.count(".") != 1:
        raise ConfigError(f"--set {item}: the key must be section.key, e.g. learner.batch_size")
    section, key = dotted.split(".")
    try:
        value = tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        value = text
    return section, key, value


def load(
    path: str | Path | None = None,
    sets: typing.Sequence[str] = (),
    options: dict[str, Any] | None = None,
) -> Config:
    """Resolve a config: defaults < run file < --set items < command-line options.

    ``options`` maps dotted keys (e.g. ``"workers.count"``) to values; None values are ignored.
    """
    raw: dict[str, Any] = {}
    sources: dict[str, str] = {}
    if path is not None:
        _merge(raw, read_toml(path), str(path), sources)
    for item in sets:
        section, key, value = parse_set(item)
        _merge(raw, {section: {key: value}}, f"--set {item}", sources)
    for dotted, value in (options or {}).items():
        if value is None:
            continue
        section, key = dotted.split(".")
        flag = OPTION_FLAGS.get(dotted, "--" + key.replace("_", "-"))
        _merge(raw, {section: {key: value}}, f"option {flag}", sources)
    return _build(raw, sources)


def to_dict(cfg: Config) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in SECTIONS:
        out[name] = {k: (list(v) if isinstance(v, tuple) else v) for k, v in dataclasses.asdict(getattr(cfg, name)).items()}
    out["replay"] = [dataclasses.asdict(r) for r in cfg.replay]
    return out


def from_dict(raw: dict[str, Any], source: str) -> Config:
    """Rebuild a config from to_dict output (e.g. stored in a checkpoint)."""
    layered: dict[str, Any] = {}
    sources: dict[str, str] = {}
    _merge(layered, raw, source, sources)
    return _build(layered, sources)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        escaped = value.replace("\\", "\\\\").replace('"', '\\"')
        return f'"{escaped}"'
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"cannot write {value!r} as TOML")


def dumps(cfg: Config) -> str:
    """The resolved config as TOML text that ``load`` reads back to an equal Config."""
    data = to_dict(cfg)
    lines = ["# zrl resolved config: every key, as this run used it."]
    for name in SECTIONS:
        lines.append(f"\n[{name}]")
        lines += [f"{k} = {_toml_value(v)}" for k, v in data[name].items()]
    for rep in data["replay"]:
        lines.append("\n[[replay]]")
        lines += [f"{k} = {_toml_value(v)}" for k, v in rep.items()]
    return "\n".join(lines) + "\n"


def _field_docs() -> dict[str, dict[str, str]]:
    """Each section's field docstrings, read from this file's source (the one place they are written)."""
    import ast
    import inspect

    tree = ast.parse(inspect.getsource(inspect.getmodule(_field_docs)))
    docs: dict[str, dict[str, str]] = {}
    for node in tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        body = node.body
        docs[node.name] = {
            stmt.target.id: nxt.value.value
            for stmt, nxt in zip(body, body[1:])
            if isinstance(stmt, ast.AnnAssign) and isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant)
        }
    return docs


def defaults_toml() -> str:
    """config/defaults.toml: every key with its default and its one-line documentation."""
    docs = _field_docs()
    data = to_dict(Config())
    lines = [
        "# zrl defaults: every config key, its default and what it means.",
        "# Run files override only what differs. Precedence: command-line options > --set section.key=value",
        "# > the run file > these defaults. Generated from zrl/config.py (python -m zrl.config > config/defaults.toml).",
    ]
    for name, cls in SECTIONS.items():
        lines.append(f"\n[{name}]")
        for key, value in data[name].items():
            lines += [f"# {docs[cls.__name__][key]}", f"{key} = {_toml_value(value)}"]
    lines.append("\n# Replays, one [[replay]] table each; a batch takes batch_size * sample_ratio unrolls from each.")
    for rep in data["replay"]:
        lines.append("[[replay]]")
        for key, value in rep.items():
            lines += [f"# {docs['ReplayConfig'][key]}", f"{key} = {_toml_value(value)}"]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(defaults_toml(), end="")
