"""Tests for zrl.algos.losses against direct hand computations."""

import math

import pytest
import torch

from zrl.algos import losses, vtrace


def _softmax_by_hand(logits):
    out = torch.empty_like(logits)
    T, B, A = logits.shape
    for t in range(T):
        for b in range(B):
            exps = [math.exp(float(x)) for x in logits[t, b]]
            z = sum(exps)
            for a in range(A):
                out[t, b, a] = exps[a] / z
    return out


@pytest.fixture
def small():
    g = torch.Generator().manual_seed(0)
    T, B, A = 3, 2, 4
    logits = torch.randn(T, B, A, generator=g, dtype=torch.float64)
    actions = torch.randint(0, A, (T, B), generator=g)
    advantages = torch.randn(T, B, generator=g, dtype=torch.float64)
    return logits, actions, advantages


def test_action_log_probs(small):
    logits, actions, _ = small
    probs = _softmax_by_hand(logits)
    out = losses.action_log_probs(logits, actions)
    assert out.shape == actions.shape
    for t in range(actions.shape[0]):
        for b in range(actions.shape[1]):
            assert out[t, b].item() == pytest.approx(math.log(probs[t, b, actions[t, b]].item()))


def test_policy_gradient_loss(small):
    logits, actions, advantages = small
    probs = _softmax_by_hand(logits)
    expected = 0.0
    for t in range(actions.shape[0]):
        for b in range(actions.shape[1]):
            expected += -math.log(probs[t, b, actions[t, b]].item()) * advantages[t, b].item()
    out = losses.policy_gradient_loss(logits, actions, advantages)
    assert out.dim() == 0
    assert out.item() == pytest.approx(expected)


def test_pg_gradient_does_not_flow_into_advantages(small):
    logits, actions, advantages = small
    logits = logits.clone().requires_grad_(True)
    advantages = advantages.clone().requires_grad_(True)
    loss = losses.policy_gradient_loss(logits, actions, advantages)
    loss.backward()
    assert advantages.grad is None
    assert logits.grad is not None
    # d/dlogits of -log softmax(a) * adv = (softmax - onehot(a)) * adv.
    probs = torch.softmax(logits.detach(), -1)
    onehot = torch.nn.functional.one_hot(actions, logits.shape[-1]).to(probs.dtype)
    torch.testing.assert_close(logits.grad, (probs - onehot) * advantages.detach()[..., None])


def test_baseline_loss():
    vs = torch.tensor([[1.0, 2.0], [3.0, -1.0]])
    values = torch.tensor([[0.5, 2.0], [1.0, 1.0]])
    expected = 0.5 * (0.25 + 0.0 + 4.0 + 4.0)
    assert losses.baseline_loss(vs, values).item() == pytest.approx(expected)


def test_entropy_loss(small):
    logits, _, _ = small
    probs = _softmax_by_hand(logits)
    expected = sum(p * math.log(p) for p in probs.reshape(-1).tolist())
    out = losses.entropy_loss(logits)
    assert out.item() == pytest.approx(expected)
    assert out.item() < 0


def test_entropy_loss_uniform():
    T, B, A = 5, 3, 6
    out = losses.entropy_loss(torch.zeros(T, B, A, dtype=torch.float64))
    assert out.item() == pytest.approx(-T * B * math.log(A))


def test_entropy_gradient_raises_entropy(small):
    logits, _, _ = small
    logits = logits.clone().requires_grad_(True)
    losses.entropy_loss(logits).backward()
    with torch.no_grad():
        stepped = logits - 0.01 * logits.grad
    assert losses.entropy_loss(stepped).item() < losses.entropy_loss(logits.detach()).item()


def _vtrace_inputs(seed=0, T=5, B=3, A=4):
    g = torch.Generator().manual_seed(seed)
    return dict(
        learner_logits=torch.randn(T, B, A, generator=g, dtype=torch.float64).requires_grad_(True),
        behaviour_logits=torch.randn(T, B, A, generator=g, dtype=torch.float64),
        actions=torch.randint(0, A, (T, B), generator=g),
        values=torch.randn(T, B, generator=g, dtype=torch.float64).requires_grad_(True),
        bootstrap_value=torch.randn(B, generator=g, dtype=torch.float64),
        rewards=torch.randn(T, B, generator=g, dtype=torch.float64),
        discounts=torch.full((T, B), 0.99, dtype=torch.float64),
    )


def test_vtrace_loss_total_is_weighted_sum():
    inputs = _vtrace_inputs()
    out = losses.vtrace_loss(**inputs, baseline_cost=0.3, entropy_cost=0.02)
    assert isinstance(out, losses.VTraceLoss)
    expected = out.pg + 0.3 * out.baseline + 0.02 * out.entropy
    torch.testing.assert_close(out.total, expected)
    for x in out:
        assert x.dim() == 0


def test_vtrace_loss_parts_match_components():
    inputs = _vtrace_inputs(seed=1)
    out = losses.vtrace_loss(**inputs, clip_rho_threshold=1.0, clip_pg_rho_threshold=1.0)
    with torch.no_grad():
        log_rhos = (
            torch.log_softmax(inputs["learner_logits"], -1)
            - torch.log_softmax(inputs["behaviour_logits"], -1)
        ).gather(-1, inputs["actions"][..., None]).squeeze(-1)
    vt = vtrace.from_importance_weights(
        log_rhos, inputs["discounts"], inputs["rewards"], inputs["values"],
        inputs["bootstrap_value"],
    )
    torch.testing.assert_close(
        out.pg, losses.policy_gradient_loss(inputs["learner_logits"], inputs["actions"], vt.pg_advantages)
    )
    torch.testing.assert_close(out.baseline, losses.baseline_loss(vt.vs, inputs["values"]))
    torch.testing.assert_close(out.entropy, losses.entropy_loss(inputs["learner_logits"]))
    torch.testing.assert_close(out.mean_rho, log_rhos.exp().mean())


def test_vtrace_loss_gradients():
    inputs = _vtrace_inputs(seed=2)
    out = losses.vtrace_loss(**inputs)
    out.total.backward()
    assert inputs["learner_logits"].grad is not None
    assert inputs["values"].grad is not None
    assert not out.mean_rho.requires_grad
    # Baseline gradient: d/dV [c * 0.5 (vs - V)^2] with vs detached = -c (vs - V).
    vals = inputs["values"].detach().clone().requires_grad_(True)
    inputs2 = dict(inputs, values=vals, learner_logits=inputs["learner_logits"].detach())
    out2 = losses.vtrace_loss(**inputs2, baseline_cost=1.0, entropy_cost=0.0)
    out2.baseline.backward()
    log_rhos = (
        torch.log_softmax(inputs2["learner_logits"], -1)
        - torch.log_softmax(inputs2["behaviour_logits"], -1)
    ).gather(-1, inputs2["actions"][..., None]).squeeze(-1)
    vt = vtrace.from_importance_weights(
        log_rhos, inputs2["discounts"], inputs2["rewards"], vals.detach(), inputs2["bootstrap_value"]
    )
    torch.testing.assert_close(vals.grad, -(vt.vs - vals.detach()))


def test_vtrace_loss_on_policy_mean_rho_is_one():
    inputs = _vtrace_inputs(seed=3)
    inputs["behaviour_logits"] = inputs["learner_logits"].detach().clone()
    out = losses.vtrace_loss(**inputs)
    assert out.mean_rho.item() == pytest.approx(1.0)


@pytest.mark.parametrize(
    "call",
    [
        lambda: losses.action_log_probs(torch.zeros(3, 2), torch.zeros(3, 2, dtype=torch.long)),
        lambda: losses.action_log_probs(torch.zeros(3, 2, 4), torch.zeros(3, 1, dtype=torch.long)),
        lambda: losses.action_log_probs(torch.zeros(3, 2, 4), torch.zeros(3, 2)),
        lambda: losses.policy_gradient_loss(
            torch.zeros(3, 2, 4), torch.zeros(3, 2, dtype=torch.long), torch.zeros(2, 2)
        ),
        lambda: losses.baseline_loss(torch.zeros(3, 2), torch.zeros(3, 3)),
        lambda: losses.baseline_loss(torch.zeros(3), torch.zeros(3)),
        lambda: losses.entropy_loss(torch.zeros(3, 2)),
        lambda: losses.vtrace_loss(**dict(_vtrace_inputs(), behaviour_logits=torch.zeros(5, 3, 5))),
        lambda: losses.vtrace_loss(**dict(_vtrace_inputs(), rewards=torch.zeros(4, 3))),
        lambda: losses.vtrace_loss(**dict(_vtrace_inputs(), bootstrap_value=torch.zeros(2))),
    ],
)
def test_shape_errors(call):
    with pytest.raises(ValueError):
        call()
