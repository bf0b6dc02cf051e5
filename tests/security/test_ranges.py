"""Issue 38, item 1, its parts: the range checks on what workers send, the learner's guard against a non-finite
step, and the weights feed's refusal of non-finite weights; and item 2's escaping of what peers name."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from conftest import apex_broker, make_config, transitions_message, unroll_message

from zrl import protocol
from zrl.agents.vtrace.broker import misfit
from zrl.agents.vtrace.learner import sgd_step
from zrl.bounds import printable
from zrl.config import LearnerConfig, ModelConfig
from zrl.gather import Unrolls
from zrl.models import build_model, flat_parameters
from zrl.optim import make_optimizer
from zrl.roles.weights_feed import finite_weights

pytestmark = pytest.mark.unit

M, T, A = 2, 4, 3
CFG = make_config(workers={"envs_per_worker": M, "count": 1}, learner={"unroll_length": T})
RANGED = {  # a value beyond the range, what the refusal says, and the range's limit
    "rewards": (1e30, "rewards out of range: |1e+30| > broker.max_abs_reward = 1e+06", 1e6),
    "behaviour_logits": (2e4, "behaviour logits out of range: |2e+04| > broker.max_abs_logit = 1e+04", 1e4),
    "behaviour_values": (1e10, "behaviour values out of range: |1e+10| > broker.max_abs_value = 1e+09", 1e9),
}


@pytest.mark.parametrize("field", RANGED)
def test_an_unroll_beyond_the_brokers_range_or_not_finite_is_refused_and_says_why(field):
    huge, why, limit = RANGED[field]
    good = unroll_message(num_envs=M, length=T, num_actions=A)
    assert misfit(good, CFG, A) is None
    array = getattr(good, field).copy()
    array.flat[-1] = -huge
    assert misfit(unroll_message(num_envs=M, length=T, num_actions=A, **{field: array}), CFG, A) == why
    array.flat[-1] = np.nan
    name = why.split(" out of range")[0]
    assert misfit(unroll_message(num_envs=M, length=T, num_actions=A, **{field: array}), CFG, A) == f"non-finite {name}"
    array.flat[-1] = -limit  # at the limit: taken
    assert misfit(unroll_message(num_envs=M, length=T, num_actions=A, **{field: array}), CFG, A) is None


def test_discounts_outside_0_1_are_refused():
    for bad in (1.5, -0.1, np.inf, np.nan):
        discounts = np.ones((M, T), np.float32)
        discounts[1, 2] = bad
        msg = unroll_message(num_envs=M, length=T, num_actions=A, discounts=discounts)
        assert misfit(msg, CFG, A) == "discounts outside [0, 1]", bad


def test_ape_x_transitions_beyond_the_range_are_refused():
    replay = apex_broker(64, 4, 5, 1, 1, 3, 3, 0.4, 10, 0, max_abs_reward=10.0, max_abs_value=100.0)
    assert replay.misfit(transitions_message()) is None
    n = 4
    cases = {
        "n-step returns out of range: |31| > 3 x broker.max_abs_reward = 30": {"nstep_return": np.full(n, 31.0)},
        "priorities out of range: |101| > broker.max_abs_value = 100": {"priority": np.full(n, 101.0)},
        "a negative priority other than -1 (unknown)": {"priority": np.full(n, -2.0)},
        "bootstrap discounts outside [0, 1]": {"bootstrap_discount": np.full(n, 1.01)},
        "non-finite n-step returns": {"nstep_return": np.full(n, np.inf)},
    }
    for why, fields in cases.items():
        fields = {k: v.astype(np.float32) for k, v in fields.items()}
        assert replay.misfit(transitions_message(**fields)) == why
    assert replay.misfit(transitions_message(priority=np.full(n, -1.0, np.float32))) is None  # unknown: taken


def test_a_step_on_an_infinite_reward_leaves_the_weights_the_optimiser_and_the_schedule_as_they_were():
    torch.manual_seed(0)
    model = build_model(ModelConfig(kind="mlp", mlp_hidden=(16,)), (4,), "<f4", 1, A)
    cfg = LearnerConfig(learning_rate=1e-3, optimizer="adam")
    optimizer, scheduler = make_optimizer(model, cfg, total_steps=10)
    b = 3
    unrolls = Unrolls(torch.randn(b, T + 1, 4), (torch.arange(T + 1, dtype=torch.int32) + 10).repeat(b, 1))
    batch = {
        "actions": torch.zeros(T, b, dtype=torch.int64),
        "rewards": torch.zeros(T, b),
        "discounts": torch.ones(T, b),
        "behaviour_logits": torch.zeros(T, b, A),
        "behaviour_values": torch.zeros(T, b),
    }
    sgd_step(model, optimizer, scheduler, unrolls, batch, cfg)  # one good step: the optimiser has moments
    weights, moments, lr = flat_parameters(model).copy(), copy.deepcopy(optimizer.state_dict()), scheduler.get_last_lr()
    batch["rewards"][2, 1] = float("inf")
    step = sgd_step(model, optimizer, scheduler, unrolls, batch, cfg)
    assert not (np.isfinite(step.total) and np.isfinite(step.grad_norm))
    np.testing.assert_array_equal(weights, flat_parameters(model))
    assert scheduler.get_last_lr() == lr
    after = optimizer.state_dict()["state"]
    for key, state in moments["state"].items():
        assert all(torch.equal(state[name], after[key][name]) for name in state)
    assert all(p.grad is None for p in model.parameters())


def test_weights_that_are_not_finite_are_refused_as_a_protocol_error():
    good = protocol.encode_weights(3, 7, np.ones(5, np.float32))
    assert finite_weights(good)[0] == 3
    for bad in (np.nan, np.inf, -np.inf):
        flat = np.ones(5, np.float32)
        flat[2] = bad
        with pytest.raises(protocol.ProtocolError, match="weights version 4 hold non-finite numbers"):
            finite_weights(protocol.encode_weights(4, 8, flat))


def test_a_peers_text_is_escaped_and_cut_before_it_is_printed():
    assert printable("evil\x1b[2J\r\nFAKE line") == "evil\\x1b[2J\\x0d\\x0aFAKE line"
    assert printable("abc\u202edef\u2028") == "abc\\u202edef\\u2028"  # a right-to-left override, a line separator
    assert printable("\x7f\x9b") == "\\x7f\\x9b"  # DEL, and C1's CSI
    assert printable("Traceback:\n  line\x07", newlines=True) == "Traceback:\n  line\\x07"
    assert printable("x" * 250, limit=200) == "x" * 200 + "... (50 more characters)"
    assert printable("zrl-worker on gpu-07, Zürich 東京") == "zrl-worker on gpu-07, Zürich 東京"  # text stays text


def test_a_step_counts_as_applied_only_when_its_loss_and_gradient_norm_are_finite():
    from zrl.agents import Trained

    assert Trained(1, 1, {"total_loss": 1.0, "grad_norm": 2.0}).applied
    assert not Trained(1, 1, {"total_loss": float("inf"), "grad_norm": 2.0}).applied
    assert not Trained(1, 1, {"total_loss": 1.0, "grad_norm": float("nan")}).applied
