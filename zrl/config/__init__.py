"""Run configuration: one frozen dataclass per section, read from TOML, declared once.

Precedence, highest first: command-line options > ``--set section.key=value`` > the run file > the defaults
(generated, with each key's description, into ``config/defaults.toml``).

The package, by job:

- ``schema``: ``Config``, composed of the sections; each key's type, bounds and description in one declaration.
  The core's sections live by area: ``run`` ([run], [env]), ``workers`` ([workers], [transport]), ``learning``
  ([model], [learner], [broker]), ``replay`` ([[replay]]), ``evaluation`` ([eval]). An agent's section is its own
  (``zrl/agents/<name>/config.py``) and composed here.
- ``checks``: ``declared`` (msgspec checks a section's types and bounds against the schema) and ``check``
  (the rules between keys, and the agent's own rules through the registry).
- ``sizing``: what the keys imply together (shares, fills, budgets, horizons, the cores' split).
- ``reference``: the reference platform's replay JSON as ``[[replay]]`` tables.
- ``loading``: merging the layers, ``load``, ``from_dict`` / ``to_dict`` and ``dumps`` (TOML by tomli-w).
- ``defaults``: ``config/defaults.toml`` generated from the schema's descriptions.

Every mistake is a :class:`ConfigError` that names the file (or ``--set`` / the option), the dotted key and what
would be valid. Nothing here starts a process or touches the disk beyond reading.
"""

from zrl.config.checks import (
    DISTANCES,
    FEATURE_REPLAYS,
    LOOPBACK_HOSTS,
    MODEL_KINDS,
    OPTIMIZERS,
    PRECISIONS,
    REPLAY_KEYS,
    REPLAY_TYPES,
    TRANSPORT_KINDS,
    WORKER_POLICIES,
    check,
    declared,
    devices,
)
from zrl.config.defaults import defaults_toml
from zrl.config.evaluation import EvalConfig
from zrl.config.learning import BrokerConfig, LearnerConfig, ModelConfig
from zrl.config.loading import (
    MOVED_KEYS,
    OPTION_FLAGS,
    SAFE_ON_RESUME,
    dumps,
    from_dict,
    load,
    parse_set,
    read_toml,
    to_dict,
)
from zrl.config.per_game import atari_game, game_file, game_note
from zrl.config.reference import replays_from_json
from zrl.config.replay import ReplayConfig
from zrl.config.run import EnvConfig, RunConfig
from zrl.config.schema import BUILTIN, SECTIONS, TOP_KEYS, Config, sections
from zrl.config.sizing import (
    entropy_cost,
    fill_target,
    fresh_share,
    learner_threads,
    lr_decay_steps,
    needs_features,
    queue_capacity,
    queue_uses,
    replay_ratio,
    replay_share,
    split_note,
    unrolls_banked,
    unrolls_per_version,
    usable_cores,
    worker_slots,
)
from zrl.config.workers import TransportConfig, WorkersConfig
from zrl.errors import ConfigError

__all__ = [
    "BUILTIN",
    "DISTANCES",
    "FEATURE_REPLAYS",
    "LOOPBACK_HOSTS",
    "MODEL_KINDS",
    "MOVED_KEYS",
    "OPTIMIZERS",
    "OPTION_FLAGS",
    "PRECISIONS",
    "REPLAY_KEYS",
    "REPLAY_TYPES",
    "SAFE_ON_RESUME",
    "SECTIONS",
    "sections",
    "TOP_KEYS",
    "TRANSPORT_KINDS",
    "WORKER_POLICIES",
    "BrokerConfig",
    "Config",
    "ConfigError",
    "EnvConfig",
    "EvalConfig",
    "LearnerConfig",
    "ModelConfig",
    "ReplayConfig",
    "RunConfig",
    "TransportConfig",
    "WorkersConfig",
    "atari_game",
    "check",
    "declared",
    "devices",
    "defaults_toml",
    "dumps",
    "entropy_cost",
    "fill_target",
    "fresh_share",
    "game_file",
    "game_note",
    "from_dict",
    "learner_threads",
    "load",
    "lr_decay_steps",
    "needs_features",
    "parse_set",
    "queue_capacity",
    "queue_uses",
    "read_toml",
    "replay_ratio",
    "replay_share",
    "replays_from_json",
    "split_note",
    "to_dict",
    "unrolls_banked",
    "unrolls_per_version",
    "usable_cores",
    "worker_slots",
]
