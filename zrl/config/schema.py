"""The schema: one frozen dataclass per section, each key declared once with its type, its bounds and its
documentation (``Annotated[type, Meta(...)]``). ``msgspec.convert`` checks types and bounds from these
declarations when a config is loaded (``zrl.config.loading``); ``config/defaults.toml`` is generated from the same
descriptions (``zrl.config.defaults``); the rules between keys are ``zrl.config.checks``. An agent's own section
is declared in its package (``zrl/agents/<name>/config.py``) and composed here.
The sections live by area, each a frozen dataclass: ``run`` ([run], [env]), ``workers`` ([workers], [transport]),
``learning`` ([model], [learner], [broker]), ``replay`` ([[replay]]) and ``evaluation`` ([eval]).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any

from msgspec import Meta

from zrl import agents
from zrl.config.checks import check
from zrl.config.evaluation import EvalConfig
from zrl.config.learning import BrokerConfig, LearnerConfig, ModelConfig
from zrl.config.replay import ReplayConfig
from zrl.config.run import EnvConfig, RunConfig
from zrl.config.workers import TransportConfig, WorkersConfig

BUILTIN = "<built-in defaults>"


@dataclass(frozen=True)
class Config:
    algo: Annotated[
        str,
        Meta(
            description="The agent: vtrace (IMPALA with V-trace, CLEAR and LASER; [vtrace]), impact (IMPACT: V-trace against a target network, a clipped surrogate; [impact]) or apex_iqn (Rainbow-IQN Ape-X; [apex])."
        ),
    ] = "vtrace"
    run: RunConfig = field(default_factory=RunConfig)
    env: EnvConfig = field(default_factory=EnvConfig)
    workers: WorkersConfig = field(default_factory=WorkersConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    learner: LearnerConfig = field(default_factory=LearnerConfig)
    broker: BrokerConfig = field(default_factory=BrokerConfig)
    replay: tuple[ReplayConfig, ...] = (
        ReplayConfig(type="queue", capacity=64, sample_ratio=0.5),
        ReplayConfig(type="uniform", capacity=1000, sample_ratio=0.5),
    )
    transport: TransportConfig = field(default_factory=TransportConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    # every registered agent's section (zrl.agents.config_sections), (table, section) pairs; cfg.<table> reads one
    agent_sections: tuple[tuple[str, Any], ...] = field(default_factory=lambda: default_agent_sections())

    def __post_init__(self) -> None:
        check(self)

    def __getattr__(self, name: str) -> Any:
        """An agent's section by its table's name (``cfg.vtrace``, ``cfg.apex``): called only for a name that is not
        a field, so the core's sections are plain attributes."""
        for table, section in self.__dict__.get("agent_sections", ()):
            if table == name:
                return section
        raise AttributeError(f"{type(self).__name__} has no section or key {name!r}")


def default_agent_sections() -> tuple[tuple[str, Any], ...]:
    """Every registered agent's section at its defaults."""
    return tuple((table, cls()) for table, cls in agents.config_sections().items())


def sections() -> dict[str, type]:
    """Every table of a run file but [[replay]], in the order config.toml and defaults.toml write them: the core's,
    with the registered agents' sections after [learner]."""
    core = list(SECTIONS.items())
    at = [name for name, _ in core].index("learner") + 1
    return dict(core[:at] + list(agents.config_sections().items()) + core[at:])


# The core's tables of a run file, in the order config.toml and defaults.toml write them ([[replay]] comes last;
# ``sections()`` adds the agents').
SECTIONS: dict[str, type] = {
    "run": RunConfig,
    "env": EnvConfig,
    "workers": WorkersConfig,
    "model": ModelConfig,
    "learner": LearnerConfig,
    "broker": BrokerConfig,
    "transport": TransportConfig,
    "eval": EvalConfig,
}
TOP_KEYS: dict[str, type] = {"algo": str}  # keys outside any section
