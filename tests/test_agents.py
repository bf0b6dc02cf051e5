"""The agent registry: every agent resolves with its parts, nothing outside zrl/agents/ asks which agent runs,
and a new agent is one package plus one registry line."""

from __future__ import annotations

import ast
import inspect

import pytest
from conftest import REPO

from zrl import agents, config
from zrl.agents import contracts
from zrl.config import ConfigError, load

pytestmark = pytest.mark.unit


def _methods(protocol: type) -> set[str]:
    """The methods a contract asks for (its properties may be instance attributes, which mypy checks)."""
    found = set()
    for cls in protocol.__mro__:
        if cls is not object and getattr(cls, "_is_protocol", False):
            found |= {n for n, v in vars(cls).items() if inspect.isfunction(v) and not n.startswith("_")}
    return found


def test_every_registered_agent_resolves_to_parts_with_the_contracts_methods():
    """Each registered agent's parts have the methods of zrl.agents.contracts (mypy holds the signatures: each part
    module assigns its class to the contract's type); the check reads the contracts rather than a list here."""
    for name in agents.REGISTRY:
        agent = agents.get(name)
        assert agent.name == name and agent.summary
        broker = contracts.ReplyingBroker if agent.broker_part().reply_type else contracts.BrokerPart
        for part, contract in (
            (agent.actor_part(), contracts.Actor),
            (agent.broker_part(), broker),
            (agent.learner_part(), contracts.LearnerPart),
        ):
            missing = [m for m in sorted(_methods(contract)) if not callable(getattr(part, m, None))]
            assert not missing, (name, part, missing)
    assert {"due_version", "record"} <= _methods(contracts.Actor) and "reply" in _methods(contracts.ReplyingBroker)


@pytest.mark.parametrize(
    "path, sets",
    [
        ("pong.toml", []),
        ("pong.toml", ['model.kind="atari"', "env.grayscale=false"]),  # the Nature net, on colour frames
        ("apex_iqn_pong.toml", []),
        ("apex_iqn_cartpole.toml", ['apex.head="c51"']),  # C51's support is a buffer
        ("impact_cartpole.toml", []),
        ("smoke.toml", []),
    ],
)
def test_the_launchers_shape_only_network_is_the_one_its_roles_build(path, sets):
    """The launcher counts and compares parameters on the meta device (no memory, no initialisation): each agent's
    network there has the names and shapes of the one the learner builds, and only they are on meta."""
    import torch

    from zrl import envs

    cfg = load(REPO / "config" / path, sets)
    spec = envs.probe(cfg.env)
    agent = agents.get(cfg.algo)
    shapes = agent.model_shapes(cfg, spec.frame_shape, spec.frame_dtype, spec.num_actions)
    built = agent.build_model(cfg, spec.frame_shape, spec.frame_dtype, spec.num_actions)
    as_shapes = lambda model: {k: tuple(v.shape) for k, v in model.state_dict().items()}  # noqa: E731
    assert as_shapes(shapes) == as_shapes(built) and as_shapes(built)
    assert {p.device.type for p in shapes.parameters()} == {"meta"}
    assert {p.device.type for p in built.parameters()} == {"cpu"} and torch.empty(1).device.type == "cpu"


def test_an_unknown_agent_is_refused_with_the_registered_names():
    with pytest.raises(ValueError, match="no agent 'ppo'; the agents are vtrace, impact, apex_iqn"):
        agents.get("ppo")
    with pytest.raises(
        ConfigError, match=r"algo: 'apex' is not one of vtrace, impact, apex_iqn \(did you mean 'apex_iqn'\?\)"
    ):
        load(None, ["algo=apex"])


def _branches_on_the_agent(source: str) -> list[int]:
    """Lines of ``source`` with a comparison that involves a name or attribute ``algo``, or a registered agent's
    name."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare) and any(_names_the_agent(side) for side in (node.left, *node.comparators)):
            found.append(node.lineno)
    return found


def _names_the_agent(node: ast.expr) -> bool:
    if isinstance(node, ast.Attribute | ast.Name):
        return getattr(node, "attr", getattr(node, "id", "")) == "algo"
    return isinstance(node, ast.Constant) and node.value in agents.REGISTRY


def test_no_code_outside_the_agents_asks_which_agent_runs():
    outside = [p for p in (REPO / "zrl").rglob("*.py") if "agents" not in p.relative_to(REPO / "zrl").parts]
    assert len(outside) > 30
    found = [f"{p.relative_to(REPO)}:{line}" for p in outside for line in _branches_on_the_agent(p.read_text())]
    assert not found, f"branches on the agent's name outside zrl/agents/: {found}"


def test_the_scan_finds_a_branch_on_the_agent():
    sample = (
        'def f(cfg):\n    return cfg.algo == "apex_iqn"\n\n\ndef g(name):\n    return "vtrace" != name or name in ()\n'
    )
    assert _branches_on_the_agent(sample) == [2, 6]


def test_an_agent_is_registered_by_name_and_package_and_refused_otherwise(onestep, monkeypatch):
    assert onestep.section == "onestep" and "onestep" in config.sections()
    cfg = load(None, ["algo=onestep", 'replay=[{"type": "queue", "capacity": 64, "sample_ratio": 1.0}]'])
    assert cfg.onestep.fill == 24 and cfg.vtrace.clip_rho == 1.0  # its section beside the others'
    with pytest.raises(ConfigError, match="the onestep agent trains from one queue"):
        load(None, ["algo=onestep"])  # its own rule: the defaults' two replays
    with pytest.raises(ValueError, match="already registered, as zrl.agents.vtrace"):
        agents.register("vtrace", "onestep_agent")
    with pytest.raises(ValueError, match="a name and a dotted package path"):
        agents.register("one step", "onestep_agent")
