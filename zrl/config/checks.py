"""The rules between keys, and the choices each string key has. A key's type and bounds are its declaration's
(``zrl.config.schema``); what is left here is what one field cannot say alone: a valid name, a combination that
cannot work, and each agent's own rules (its ``zrl/agents/<name>/config.py``, through the registry). Every rule
raises a ConfigError naming the dotted key and what would be valid; the loader puts the file in front."""

from __future__ import annotations

import dataclasses
import math
import typing
from typing import Any

import msgspec

from zrl.agents import REGISTRY as agent_registry  # the registry's table of names: no agent is imported here
from zrl.agents import get as get_agent
from zrl.errors import ConfigError, choice, fail

REPLAY_TYPES = ("queue", "uniform", "elite", "attentive", "prioritized")
WORKER_POLICIES = ("network", "uniform")
RESTART_POLICIES = ("resume", "stop")
BEST_BY = ("train", "eval")
EVAL_PROTOCOLS = ("auto", "deepmind", "machado", "saber")
CLIP_METHODS = ("abs_one_sign", "abs_one_clamp", "soft_asymmetric")
FEATURE_REPLAYS = ("elite", "attentive")
DISTANCES = ("ln_norm", "cos_dist", "kl_div")
QUEUE_DISCARDS = ("keep_latest", "keep_oldest", "alternating")
OPTIMIZERS = ("rmsprop", "rmsprop_tf", "adam")
LR_SCHEDULES = ("polynomial", "multistep")
PRECISIONS = ("fp32", "bf16")
UNROLL_CONVS = ("auto", "conv3d", "stacks")
MODEL_KINDS = ("auto", "atari", "atari_small", "mlp", "auto_nature")
TRANSPORT_KINDS = ("ipc", "tcp")
LOOPBACK_HOSTS = ("127.0.0.1", "localhost")
_REPLAY_COMMON = ("type", "capacity", "sample_ratio")
_REPLAY_SAMPLED = (
    "dist_function",
    "p",
    "strategy",
    "lambda_batch_multiplier",
    "alfa_annealing_factor",
    "feature_steps",
)
# The keys each replay type takes: a key of another type is a mistake that names the types it belongs to.
REPLAY_KEYS = {
    "queue": _REPLAY_COMMON + ("discard",),
    "uniform": _REPLAY_COMMON + ("fill_fraction",),
    "elite": _REPLAY_COMMON + ("fill_fraction",) + _REPLAY_SAMPLED + ("elite_insertion", "elite_batch_size"),
    "attentive": _REPLAY_COMMON + ("fill_fraction",) + _REPLAY_SAMPLED + ("elite_insertion", "elite_batch_size"),
    "prioritized": _REPLAY_COMMON,  # capacity in transitions; the [apex] section holds the rest
}


_TYPE_NAMES = {int: "an integer", float: "a number", str: "a string", bool: "true or false"}


# float keys whose "never" is inf; every other float must be finite
UNBOUNDED = ("eval.stop_at_score", "run.stop_at_return")


def declared(cls: type[Any], values: dict[str, Any], where: str) -> Any:
    """A section built from ``values`` by ``msgspec.convert``, which checks each key's type and bounds as the
    schema declares them (ints are taken for floats, lists for tuples); a ConfigError naming
    ``where.key``, the value and what is valid otherwise."""
    try:
        section = msgspec.convert(values, cls)
    except msgspec.ValidationError as err:
        text = str(err)
        name = text.rpartition("at `$.")[2].rstrip("`").partition("[")[0] if "at `$." in text else ""
        if name not in {f.name for f in dataclasses.fields(cls)}:  # not about one key: msgspec's own account
            raise ConfigError(f"{where}: {text}", where) from None
        _refuse(cls, name, values.get(name), where, text.startswith("Expected") and ", got `" in text)
    for name, value in values.items():
        key = f"{where}.{name}"
        if isinstance(value, float) and not math.isfinite(value) and not (key in UNBOUNDED and value > 0):
            valid = "a finite number, or inf" if key in UNBOUNDED else "a finite number"
            raise ConfigError(f"{key} = {value!r} must be {valid}", key)
    return section


def _refuse(cls: type, name: str, value: Any, where: str, wrong_type: bool) -> typing.NoReturn:
    hint = typing.get_type_hints(cls, include_extras=True)[name]
    base, meta = typing.get_args(hint)[:2] if typing.get_origin(hint) is typing.Annotated else (hint, None)
    key = f"{where}.{name}"
    if wrong_type or meta is None or not any(b is not None for b in (meta.gt, meta.ge, meta.lt, meta.le)):
        raise ConfigError(f"{key} = {value!r} must be {_TYPE_NAMES.get(base, 'a list of integers')}", key)
    low = f"> {meta.gt}" if meta.gt is not None else f">= {meta.ge}" if meta.ge is not None else None
    high = f"< {meta.lt}" if meta.lt is not None else f"<= {meta.le}" if meta.le is not None else None
    hint = f" ({meta.extra['hint']})" if meta.extra and "hint" in meta.extra else ""  # what the bound means
    if meta.ge is not None and meta.le is not None:
        fail(key, f"must be between {meta.ge} and {meta.le}{hint}, got {value!r}")
    if low and high:
        fail(key, f"must be {low} and {high}{hint}, got {value!r}")
    fail(key, f"must be {low or high}{hint}, got {value!r}")


def devices(cfg) -> tuple[tuple[str, str], ...]:
    """The config's torch devices, each with its key: the learner's and the broker's."""
    return (("learner.device", cfg.learner.device), ("broker.device", cfg.broker.device))


def check(cfg) -> None:
    """Raise ConfigError for impossible values and combinations (no I/O)."""
    parts = [(part.name, getattr(cfg, part.name)) for part in dataclasses.fields(cfg)]
    for name, section in [*parts, *cfg.agent_sections]:  # each section's bounds, also in a config built in code
        if dataclasses.is_dataclass(section):
            declared(type(section), msgspec.to_builtins(section), name)
            if hasattr(section, "check"):  # a section's own rules (an agent's: its names), for every run
                section.check()
    for i, rep in enumerate(cfg.replay):
        declared(type(rep), msgspec.to_builtins(rep), f"replay[{i}]")
    if cfg.learner.lr_end > cfg.learner.learning_rate:
        fail("learner.lr_end", f"{cfg.learner.lr_end} is above learner.learning_rate {cfg.learner.learning_rate}")
    if cfg.learner.entropy_decay_start_frames and not cfg.learner.entropy_decay_frames:
        fail(
            "learner.entropy_decay_start_frames",
            "starts the straight line that learner.entropy_decay_frames draws, and it is 0; give the frames it takes, e.g. 1000000",
        )
    choice("learner.optimizer", cfg.learner.optimizer, OPTIMIZERS)
    choice("learner.lr_schedule", cfg.learner.lr_schedule, LR_SCHEDULES)
    milestones = list(cfg.learner.lr_milestones)
    if cfg.learner.lr_schedule == "multistep" and not milestones:
        fail("learner.lr_milestones", "multistep needs at least one learner step to lower the rate at, e.g. [100000]")
    if any(m <= 0 for m in milestones) or milestones != sorted(set(milestones)):
        fail("learner.lr_milestones", f"must be positive learner steps in rising order, got {milestones}")
    if cfg.learner.optimizer == "rmsprop_tf" and not cfg.learner.rmsprop_alpha < 1.0:
        fail(
            "learner.rmsprop_alpha",
            f"must be below 1 for rmsprop_tf (the mean square would never move), got {cfg.learner.rmsprop_alpha}",
        )
    choice("learner.precision", cfg.learner.precision, PRECISIONS)
    choice("learner.unroll_conv", cfg.learner.unroll_conv, UNROLL_CONVS)
    choice("broker.precision", cfg.broker.precision, PRECISIONS)
    choice("model.kind", cfg.model.kind, MODEL_KINDS)
    choice("transport.kind", cfg.transport.kind, TRANSPORT_KINDS)
    choice("workers.policy", cfg.workers.policy, WORKER_POLICIES)
    choice("run.restart_policy", cfg.run.restart_policy, RESTART_POLICIES)
    choice("env.clip_method", cfg.env.clip_method, CLIP_METHODS)
    choice("eval.protocol", cfg.eval.protocol, EVAL_PROTOCOLS)
    choice("run.best_by", cfg.run.best_by, BEST_BY)
    if cfg.run.best_by == "eval" and not cfg.eval.interval_frames:
        fail("run.best_by", '"eval" needs evaluations during training: set eval.interval_frames, e.g. 1000000')
    if cfg.eval.stop_at_score != math.inf and not cfg.eval.interval_frames:
        fail(
            "eval.stop_at_score",
            f"{cfg.eval.stop_at_score:g} needs evaluations during training: set eval.interval_frames, e.g. 1000000 "
            "(or eval.stop_at_score = inf: never)",
        )
    if not cfg.env.id:
        fail("env.id", "must name an environment, e.g. ALE/Pong-v5 or CartPole-v1")
    for key, device in devices(cfg):
        if not (device in ("auto", "cpu", "cuda") or (device.startswith("cuda:") and device[5:].isdigit())):
            fail(key, f"{device!r} is not one of auto, cpu, cuda, cuda:N")
    if any(width <= 0 for width in cfg.model.mlp_hidden) or not cfg.model.mlp_hidden:
        fail("model.mlp_hidden", f"needs at least one positive width, got {list(cfg.model.mlp_hidden)}")
    if cfg.transport.bind_host not in LOOPBACK_HOSTS and not cfg.transport.curve_keys:
        fail(
            "transport.bind_host",
            f"{cfg.transport.bind_host!r} is not a loopback address; binding other addresses needs CurveZMQ keys: "
            "make a folder with zrl-keys PATH and set transport.curve_keys = PATH, or use 127.0.0.1.",
        )
    if cfg.transport.max_connections <= cfg.workers.remote:
        fail(
            "transport.max_connections",
            f"{cfg.transport.max_connections} would keep out some of the {cfg.workers.remote} remote workers "
            f"(workers.remote), each of which holds a connection to the gate; give more, e.g. {cfg.workers.remote + 64}",
        )
    choice("algo", cfg.algo, tuple(agent_registry))  # the agents zrl trains: zrl/agents/, one package each
    _check_replays(cfg)
    get_agent(cfg.algo).check(cfg)  # the agent's own section and replay: its zrl/agents/<name>/config.py
    _check_deterministic(cfg)
    if 0 < cfg.workers.produce_ratio < 1:
        fail(
            "workers.produce_ratio",
            f"{cfg.workers.produce_ratio} would send less than one batch per weights "
            "version and starve the learner; give 1 or more (1.25 leaves a margin), or 0 to run free",
        )
    ratio = cfg.learner.replay_ratio
    for i, rep in enumerate(cfg.replay):
        if ratio and rep.type == "queue" and rep.sample_ratio * ratio < 1 - 1e-9:
            fail(
                "learner.replay_ratio",
                f"{ratio:g} would hand each unit of replay[{i}] (a queue, sample_ratio {rep.sample_ratio:g}) "
                f"{rep.sample_ratio * ratio:g} times; every fresh unit goes through its queue at least once: give "
                f"at least 1 / sample_ratio = {1 / rep.sample_ratio:g}, or 0 for exactly once",
            )
    window = cfg.learner.unroll_length + cfg.env.frame_stack
    if cfg.workers.ring_slots and cfg.workers.ring_slots < 2 * window:
        fail(
            "workers.ring_slots",
            f"{cfg.workers.ring_slots} slots cannot keep one unroll's frames while the next is "
            f"written; give at least 2 x (learner.unroll_length + env.frame_stack) = {2 * window}, or 0 for auto",
        )


def _check_deterministic(cfg) -> None:
    if not cfg.run.deterministic:
        return
    why = "run.deterministic needs"
    if cfg.workers.count != 1:
        fail("workers.count", f"{cfg.workers.count}: {why} a single worker (workers.count = 1)")
    if cfg.workers.remote:
        fail("workers.remote", f"{cfg.workers.remote}: {why} a single local worker (workers.remote = 0)")
    if len(cfg.replay) != 1 or cfg.replay[0].type != "queue":
        fail(
            "replay",
            f"{why} a single queue replay (sampled replays draw at random, in time with the workers), each unit "
            """trained on once: e.g. --replay '[{"type": "queue", "capacity": 64, "sample_ratio": 1.0}]' """
            "--set learner.replay_ratio=0",
        )
    if cfg.learner.replay_ratio and abs(cfg.learner.replay_ratio * cfg.replay[0].sample_ratio - 1) > 1e-9:
        fail("learner.replay_ratio", f"{cfg.learner.replay_ratio:g}: {why} each unit trained on once (0)")
    if cfg.learner.batch_size % cfg.workers.envs_per_worker:
        fail(
            "workers.envs_per_worker",
            f"{cfg.workers.envs_per_worker}: {why} learner.batch_size "
            f"({cfg.learner.batch_size}) to be a multiple of it, so that every batch trains on whole unrolls of "
            "the worker",
        )


def _check_replays(cfg) -> None:
    if not cfg.replay:
        fail("replay", "at least one [[replay]] table is needed")
    batch = cfg.learner.batch_size
    total = 0.0
    for i, rep in enumerate(cfg.replay):
        key = f"replay[{i}]"
        choice(f"{key}.type", rep.type, REPLAY_TYPES)
        share = batch * rep.sample_ratio
        if abs(share - round(share)) > 1e-6:
            fail(
                f"{key}.sample_ratio",
                f"learner.batch_size {batch} x sample_ratio {rep.sample_ratio} = {share:g} is not a whole number of unrolls",
            )
        if rep.type not in ("queue", "prioritized") and round(share) > rep.capacity:
            fail(
                f"{key}.capacity",
                f"{rep.capacity} unrolls is less than one batch takes from this replay "
                f"(learner.batch_size {batch} x sample_ratio {rep.sample_ratio} = {round(share)})",
            )
        choice(f"{key}.dist_function", rep.dist_function, DISTANCES)
        choice(f"{key}.discard", rep.discard, QUEUE_DISCARDS)
        if rep.strategy not in (1, 2, 3, 4):
            fail(f"{key}.strategy", f"{rep.strategy} is not one of 1, 2, 3, 4")
        if rep.elite_insertion and rep.capacity < cfg.workers.envs_per_worker:
            fail(
                f"{key}.capacity",
                f"{rep.capacity} units cannot take one worker message of workers.envs_per_worker "
                f"{cfg.workers.envs_per_worker} units by elite insertion; raise it, or set elite_insertion = false",
            )
        total += rep.sample_ratio
    if abs(total - 1.0) > 1e-6:
        fail("replay", f"the sample_ratio values sum to {total:g}; they must sum to 1")
