"""The agents zrl trains, as plug-ins, and the one registry that maps a config's ``algo`` to one.

An agent is a package under ``zrl/agents/`` whose ``AGENT`` (an :class:`Agent`) declares what is specific to it:
its config checks, its network, how many ring slots its workers need, how a trained policy picks actions in
evaluation, and its actor, broker part and learner part, which the one worker, broker and learner loops run. Nothing outside this package asks which agent a run uses: the roles, the launcher, zrl-eval
and zrl-bench call ``get(cfg.algo)`` and use what it declares.

A new agent is one package and one line in ``REGISTRY`` (``zrl.config`` takes its valid ``algo`` names from
it). This module imports nothing of zrl. An agent's parts (actor, broker part, learner part) and its network are
imported when first asked for, so that a role imports only its own; what ``zrl.config`` loads of an agent is its
package's ``__init__`` and its config section, which import nothing of zrl but this registry and ``zrl.errors``
(``tests/test_layering.py`` holds both).

The worker, the broker and the learner are one loop each (``zrl/roles/``) that takes the agent's part. An
agent's config section, with its rules, is its ``config.py``: a leaf module that ``zrl.config`` composes into
the run's config (one field of ``Config`` per section).
"""

from __future__ import annotations

import importlib
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

# algo -> the package whose AGENT declares it: zrl's own, and those named in $ZRL_AGENTS (``register``)
REGISTRY: dict[str, str] = {
    "vtrace": "zrl.agents.vtrace",
    "impact": "zrl.agents.impact",
    "apex_iqn": "zrl.agents.apex_iqn",
}
ENV_VAR = "ZRL_AGENTS"  # "name=package,name=package": agents outside zrl, in this process and every one it starts


def _from_environment() -> None:
    for entry in filter(None, os.environ.get(ENV_VAR, "").split(",")):
        name, _, package = entry.partition("=")
        REGISTRY.setdefault(name.strip(), package.strip())


def register(name: str, package: str) -> None:
    """Register the agent that ``package`` declares (its ``AGENT``) as ``name``, in this process and in the processes
    it starts from now on (through $ZRL_AGENTS, which they read at import): an agent kept outside zrl, a user's or a
    test's. The package is imported when the agent is first asked for."""
    if not name.isidentifier() or not all(part.isidentifier() for part in package.split(".")):
        raise ValueError(f"agent {name!r} = {package!r}: a name and a dotted package path are needed")
    if REGISTRY.get(name, package) != package:
        raise ValueError(f"agent {name!r} is already registered, as {REGISTRY[name]}")
    REGISTRY[name] = package
    others = [e for e in os.environ.get(ENV_VAR, "").split(",") if e and e.partition("=")[0] != name]
    os.environ[ENV_VAR] = ",".join([*others, f"{name}={package}"])


def config_sections() -> dict[str, type]:
    """Every registered agent's config section, table name -> its dataclass, in registry order (agents that share
    a section, as IMPACT shares V-trace's, name it once)."""
    out: dict[str, type] = {}
    for name in REGISTRY:
        agent = get(name)
        out.setdefault(agent.section, agent.config)
    return out


ROLES = ("worker", "broker", "learner")  # the processes of a run beside the launcher


class Outgoing(NamedTuple):
    """A message an actor hands the worker loop to send: its encoded bytes, the units (unrolls' env rows or
    transitions) it carries, and the seconds of forward passes spent making it (Ape-X's first priorities)."""

    message: bytes
    units: int
    inference_s: float = 0.0


class Trained(NamedTuple):
    """What one learner step of an agent did: the samples (unroll steps or transitions) and env frames it trained
    on, its figures by their LearnerStats names (losses, grad_norm, policy_lag, sample_age_mean, sample_age_max;
    the ones an agent does not have stay 0), and a message for the broker (Ape-X's new priorities) or None."""

    samples: int
    frames: int
    metrics: dict[str, float]
    reply: bytes | None = None

    @property
    def applied(self) -> bool:
        """Whether the step changed the weights: a step whose loss or gradient norm is not finite is skipped
        (``finite_update``), and its reply is None."""
        return finite_update(self.metrics.get("total_loss", 0.0), self.metrics.get("grad_norm", 0.0))


def finite_update(loss: float, grad_norm: float) -> bool:
    """Whether an optimiser step may be applied: a non-finite loss or gradient (a poisoned batch, a diverged
    model) would put NaN or inf into the weights, and from there into every worker's acting."""
    return math.isfinite(loss) and math.isfinite(grad_norm)


@dataclass(frozen=True)
class Agent:
    """What is specific to one agent. Callables take the run's resolved ``Config`` as ``cfg``."""

    name: str
    summary: str  # one line, for docs and errors
    # the agent's config table ([vtrace], [apex]) and its frozen dataclass: a leaf module of the agent's package that
    # imports nothing of zrl but zrl.errors; zrl.config composes every registered agent's into the run's config
    section: str
    config: type
    # cfg -> None, or a ConfigError naming the key: what the agent's own section and replay must be (run by
    # zrl.config's checks once every section is valid on its own)
    check: Callable[[Any], None]
    # (cfg, frame_shape, frame_dtype, num_actions) -> the network the learner trains and the workers act with
    build_model: Callable[..., Any]
    # cfg -> ring slots per worker when workers.ring_slots = 0 (auto): enough that every unit or transition the
    # replays may still hold keeps its frames
    ring_slots: Callable[[Any], int]
    # cfg -> the most ring slots a worker writes between two of its messages (what a remote worker's message may
    # carry; the ingest refuses more)
    slots_per_message: Callable[[Any], int]
    # (model, obs [B, S, *frame_shape], cfg, generator) -> [B, actions] numpy scores a trained policy acts on in
    # evaluation: logits (sampled, or argmax with --greedy) or Q-values (argmax, always: ``acts_greedily``)
    action_scores: Callable[..., Any]
    acts_greedily: bool
    # (cfg, one of cfg.replay) -> the units (unrolls, transitions) that replay holds before the learner starts
    replay_fill: Callable[[Any, Any], int]
    # cfg -> samples trained per fresh sample (env step) that the run asks for, metrics.csv's replay_ratio_target
    # beside the replay_ratio achieved; 0 where nothing paces the run to one
    replay_ratio: Callable[[Any], float]
    # "module:Class" of the agent's actor, which the one worker loop (zrl/roles/worker.py) runs:
    # Class(worker_id, cfg, wiring, offset, ring) with
    #   model (the network it acts with: the loop loads the learner's weights into it); paces_every_step (bool);
    #   begin(worker, slot): the envs were reset and their frames written into ``slot``;
    #   act(obs) -> actions; record(worker, actions, step, slot) -> Outgoing | None: a message for the broker;
    #   weights_taken(versions): new weights came; pace(worker) -> bool: after a message (or every step), take
    #   new weights and wait for them while ahead of the learner; False if the run stops meanwhile
    actor: str
    # "module:Class" of the agent's broker part, which the one broker loop (zrl/roles/broker.py) runs:
    # Class(cfg, wiring, rings) with
    #   message_type (what its workers send), inbox_per_turn, reply_type (what its learner sends back, or None),
    #   wants_weights (it needs the current policy: load_weights(version, flat));
    #   units(msg) -> int; insert(msg) -> str | None: stores a worker's message, or says why it does not fit;
    #   reply(msg) -> str | None; next_batch(batch_id, env_frames, env_steps) -> (message, taken) | None;
    #   put_back(taken): a batch that could not be sent; index() -> bytes | None: the replay index for
    #   checkpoints; stats() -> its BrokerStats fields (replay sizes, drops, times, elite figures)
    broker: str
    # "module:Class" of the agent's learner part, which the one learner loop (zrl/roles/learner.py) runs:
    # Class(cfg, wiring, rings, device) with
    #   model (the network the workers act with: the loop publishes its weights), optimizer, scheduler;
    #   batch_types (the messages on the batches socket), asks_replay_index, replies (bools);
    #   load(state, resume, optimizer) and state() -> dict: its entries of a checkpoint;
    #   misfit(message) -> str | None: why a well-formed message cannot be from this run's broker;
    #   take(message) -> bool: keeps a message that is not a batch;
    #   gather(batch) -> (gathered or None, torn units); step(gathered, learner_step, policy_version) -> Trained
    learner: str
    # the module that declares the agent's messages (zrl.protocol's framework): what its workers send, what its
    # broker sends its learner and the learner's replies; importing it adds them to the wire's union
    messages: str
    # the agent's own figures, name -> what it is with its unit: each is a column of metrics.csv (and a TensorBoard
    # scalar, and a figure on the dashboard) for this agent's runs, beside the ones every run has. The learner's
    # are the figures of Trained.metrics by these names (0 where a step has none); the broker's, its part's
    # stats()["figures"]
    learner_figures: Mapping[str, str] = field(default_factory=dict)
    broker_figures: Mapping[str, str] = field(default_factory=dict)

    def model_shapes(self, cfg: Any, frame_shape: tuple[int, ...], frame_dtype: str, num_actions: int) -> Any:
        """The network ``build_model`` makes, on PyTorch's meta device: parameters with their shapes but no memory
        and no initialisation, for the launcher's checks that count or compare them (a Nature network with a wide
        dense layer takes seconds to initialise on a CPU)."""
        import torch

        with torch.device("meta"):
            return self.build_model(cfg, frame_shape, frame_dtype, num_actions)

    # A part's class, of the type zrl.agents.contracts declares (Actor, BrokerPart, LearnerPart), which its loop
    # states where it builds one: the registry, a leaf, cannot import the contracts to say so here.
    def actor_part(self) -> type[Any]:
        return self.part(self.actor)

    def broker_part(self) -> type[Any]:
        return self.part(self.broker)

    def learner_part(self) -> type[Any]:
        return self.part(self.learner)

    @staticmethod
    def part(ref: str) -> type[Any]:
        module, _, name = ref.partition(":")
        cls: type[Any] = getattr(importlib.import_module(module), name)  # "module:Class"
        return cls


_from_environment()


def get(name: str) -> Agent:
    """The agent registered as ``name``; a ValueError naming the registered ones otherwise (a config naming an
    unknown agent is refused earlier, with its file and key)."""
    if name not in REGISTRY:
        raise ValueError(f"no agent {name!r}; the agents are {', '.join(REGISTRY)}")
    agent: Agent = importlib.import_module(REGISTRY[name]).AGENT
    if agent.name != name:
        raise RuntimeError(f"{REGISTRY[name]} declares agent {agent.name!r}, registered as {name!r}")
    return agent
