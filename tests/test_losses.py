"""Tests for zrl.algos.losses against direct hand computations."""

import math

import pytest
import torch

from zrl.algos import losses, vtrace

pytestmark = pytest.mark.unit


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


@pytest.mark.parametrize("mask_dtype", [torch.bool, torch.float64])
def test_masked_policy_gradient_and_baseline_loss(small, mask_dtype):
    logits, actions, advantages = small
    probs = _softmax_by_hand(logits)
    mask = [[1.0, 0.0], [1.0, 1.0], [0.0, 1.0]]
    mask_t = torch.tensor(mask).to(mask_dtype)
    expected = 0.0
    for t in range(3):
        for b in range(2):
            expected += -mask[t][b] * math.log(probs[t, b, actions[t, b]].item()) * advantages[t, b].item()
    assert losses.policy_gradient_loss(logits, actions, advantages, mask=mask_t).item() == pytest.approx(expected)
    vs = torch.tensor([[1.0, 2.0], [3.0, -1.0], [0.0, 0.0]])
    values = torch.tensor([[0.5, 2.0], [1.0, 1.0], [7.0, 1.0]])
    expected = 0.5 * (0.25 + 0.0 + 4.0 + 4.0 + 0.0 + 1.0)  # (t=0, b=1) and (t=2, b=0) dropped
    assert losses.baseline_loss(vs, values, mask=mask_t).item() == pytest.approx(expected)


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


def test_normalized_advantages_have_mean_0_and_std_1_over_the_kept_steps():
    g = torch.Generator().manual_seed(3)
    a = 5.0 + 0.01 * torch.randn(20, 8, generator=g, dtype=torch.float64)
    n = losses.normalized_advantages(a)
    assert abs(float(n.mean())) < 1e-12 and float(n.std()) == pytest.approx(1.0, rel=1e-5)
    mask = torch.rand(20, 8, generator=g) < 0.5
    mask[0, 0] = False
    a[0, 0] = 1e6  # a dropped step moves neither the mean nor the spread of the kept ones
    n = losses.normalized_advantages(a, mask)
    kept = n[mask]
    assert abs(float(kept.mean())) < 1e-9 and float(kept.std()) == pytest.approx(1.0, rel=1e-5)
    assert torch.isfinite(n).all()
    one = torch.zeros(20, 8, dtype=torch.bool)
    one[2, 3] = True
    assert torch.equal(losses.normalized_advantages(a, one), torch.zeros_like(a))
    assert not losses.normalized_advantages(a.clone().requires_grad_(True)).requires_grad
    with pytest.raises(ValueError, match="rank 2"):
        losses.normalized_advantages(a[0])


@pytest.mark.parametrize("laser", [None, 0.5])
def test_normalised_advantages_make_the_policy_gradient_independent_of_the_reward_scale(laser):
    """PPO's normalisation: rewards, values and bootstrap scaled by c leave the policy's gradient from the pg term
    unchanged, where the raw advantages scale it by c."""
    inputs = _vtrace_inputs(seed=4, T=20, B=8, A=6)
    scaled = dict(inputs)
    c = 37.0
    for k in ("rewards", "bootstrap_value"):
        scaled[k] = inputs[k] * c
    scaled["values"] = (inputs["values"].detach() * c).requires_grad_(True)
    scaled["learner_logits"] = inputs["learner_logits"].detach().clone().requires_grad_(True)

    def pg_grad(args, normalize):
        out = losses.vtrace_loss(**args, laser_kl_threshold=laser, normalize_advantages=normalize)
        (grad,) = torch.autograd.grad(out.pg, args["learner_logits"])
        return grad

    torch.testing.assert_close(pg_grad(scaled, True), pg_grad(inputs, True))
    torch.testing.assert_close(pg_grad(scaled, False), c * pg_grad(inputs, False))
    assert not torch.allclose(pg_grad(inputs, True), pg_grad(inputs, False))


def test_pg_cost_weighs_the_policy_gradient_term_alone():
    """The reference's policy_gradient_loss_weight: total = w * pg + ...; at 0 the policy learns from the entropy
    term only, and the value's gradient is the same whatever w."""
    inputs = _vtrace_inputs()
    one = losses.vtrace_loss(**inputs, baseline_cost=0.3, entropy_cost=0.02)
    w = losses.vtrace_loss(**inputs, baseline_cost=0.3, entropy_cost=0.02, pg_cost=2.5)
    torch.testing.assert_close(w.pg, one.pg)
    torch.testing.assert_close(w.total, 2.5 * one.pg + 0.3 * one.baseline + 0.02 * one.entropy)
    off = losses.vtrace_loss(**inputs, baseline_cost=0.3, entropy_cost=0.02, pg_cost=0.0)
    logits_grad, values_grad = torch.autograd.grad(
        off.total, [inputs["learner_logits"], inputs["values"]], retain_graph=True
    )
    entropy_only = torch.autograd.grad(0.02 * off.entropy, inputs["learner_logits"])[0]
    torch.testing.assert_close(logits_grad, entropy_only)
    torch.testing.assert_close(values_grad, torch.autograd.grad(one.total, inputs["values"])[0])
    with pytest.raises(ValueError, match="pg_cost must be non-negative"):
        losses.vtrace_loss(**inputs, pg_cost=-1.0)


def test_vtrace_loss_parts_match_components():
    inputs = _vtrace_inputs(seed=1)
    out = losses.vtrace_loss(**inputs, clip_rho_threshold=1.0, clip_pg_rho_threshold=1.0)
    with torch.no_grad():
        log_rhos = (
            (torch.log_softmax(inputs["learner_logits"], -1) - torch.log_softmax(inputs["behaviour_logits"], -1))
            .gather(-1, inputs["actions"][..., None])
            .squeeze(-1)
        )
    vt = vtrace.from_importance_weights(
        log_rhos,
        inputs["discounts"],
        inputs["rewards"],
        inputs["values"],
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
        (torch.log_softmax(inputs2["learner_logits"], -1) - torch.log_softmax(inputs2["behaviour_logits"], -1))
        .gather(-1, inputs2["actions"][..., None])
        .squeeze(-1)
    )
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


# --- KL, LASER mask and CLEAR cloning, against sums written out by hand -------------------------
#
# A tiny fixed batch, T = 2, B = 2, A = 3.  Per step, KL(pi || mu) is about
#   [[0.0133, 1.7754], [0.0784, 1.4048]]  and  KL(mu || pi) about  [[0.0132, 1.7041], [0.0817, 1.6115]],
# so a LASER threshold of 1.5 keeps every step but (t=0, b=1) for KL(pi || mu), while KL(mu || pi)
# would also cut (t=1, b=1): the mask shows which direction was used.

PI_LOGITS = [[[0.0, 0.0, 0.0], [2.0, 0.0, -1.0]], [[0.5, -0.5, 0.0], [0.0, 3.0, 0.0]]]
MU_LOGITS = [[[0.2, 0.0, -0.2], [-1.0, 0.5, 1.0]], [[0.0, 0.0, 0.0], [0.0, -1.0, 0.0]]]
LASER_THRESHOLD = 1.5
LASER_MASK = [[1.0, 0.0], [1.0, 1.0]]


def _tiny_logits(requires_grad=False):
    pi = torch.tensor(PI_LOGITS, dtype=torch.float64, requires_grad=requires_grad)
    mu = torch.tensor(MU_LOGITS, dtype=torch.float64)
    return pi, mu


def _probs_by_hand(logits_row):
    exps = [math.exp(x) for x in logits_row]
    z = sum(exps)
    return [e / z for e in exps]


def _kl_by_hand(p_logits, q_logits):
    """[[KL(softmax(p[t][b]) || softmax(q[t][b])) for b] for t], on nested lists."""
    out = []
    for p_t, q_t in zip(p_logits, q_logits):
        row = []
        for p_row, q_row in zip(p_t, q_t):
            p, q = _probs_by_hand(p_row), _probs_by_hand(q_row)
            row.append(sum(pa * (math.log(pa) - math.log(qa)) for pa, qa in zip(p, q)))
        out.append(row)
    return out


def _masked_sum(per_step, mask=None):
    total = 0.0
    for t in range(len(per_step)):
        for b in range(len(per_step[t])):
            total += (1.0 if mask is None else mask[t][b]) * per_step[t][b]
    return total


def test_kl_divergence():
    pi, mu = _tiny_logits()
    out = losses.kl_divergence(pi, mu)
    assert out.shape == (2, 2) and out.dtype == torch.float64
    expected = _kl_by_hand(PI_LOGITS, MU_LOGITS)
    for t in range(2):
        for b in range(2):
            assert out[t, b].item() == pytest.approx(expected[t][b], rel=1e-12)
    # KL is asymmetric, zero against itself and invariant to a constant shift of the logits.
    reverse = _kl_by_hand(MU_LOGITS, PI_LOGITS)
    torch.testing.assert_close(losses.kl_divergence(mu, pi), torch.tensor(reverse, dtype=torch.float64))
    assert abs(reverse[1][1] - expected[1][1]) > 0.1
    torch.testing.assert_close(losses.kl_divergence(pi, pi), torch.zeros(2, 2, dtype=torch.float64))
    torch.testing.assert_close(losses.kl_divergence(pi + 7.0, mu - 3.0), out)


def test_laser_mask_at_a_threshold_between_two_kls():
    kl_pi_mu = _kl_by_hand(PI_LOGITS, MU_LOGITS)
    kl_mu_pi = _kl_by_hand(MU_LOGITS, PI_LOGITS)
    # The threshold falls between two known KLs, and the two directions disagree at (1, 1).
    assert kl_pi_mu[1][1] < LASER_THRESHOLD < kl_pi_mu[0][1]
    assert kl_mu_pi[1][1] > LASER_THRESHOLD
    pi, mu = _tiny_logits(requires_grad=True)
    mask = losses.laser_mask(pi, mu, LASER_THRESHOLD)
    assert mask.dtype == torch.float64 and mask.shape == (2, 2)
    assert not mask.requires_grad
    assert mask.tolist() == [[1.0 if kl <= LASER_THRESHOLD else 0.0 for kl in row] for row in kl_pi_mu]
    assert mask.tolist() == LASER_MASK
    # Boundary: a step whose KL equals the threshold is kept (the same float, so compare with the function's KL).
    at = losses.kl_divergence(pi, mu)[1, 1].item()
    assert losses.laser_mask(pi, mu, at)[1, 1].item() == 1.0
    assert losses.laser_mask(pi, mu, math.nextafter(at, 0.0))[1, 1].item() == 0.0
    assert losses.laser_mask(pi, mu, 1e9).tolist() == [[1.0, 1.0], [1.0, 1.0]]


@pytest.mark.parametrize("direction", ["mu_pi", "pi_mu"])
@pytest.mark.parametrize("mask", [None, LASER_MASK])
def test_policy_cloning_loss(direction, mask):
    pi, mu = _tiny_logits()
    if direction == "mu_pi":
        per_step = _kl_by_hand(MU_LOGITS, PI_LOGITS)
    else:
        per_step = _kl_by_hand(PI_LOGITS, MU_LOGITS)
    expected = _masked_sum(per_step, mask)
    mask_t = None if mask is None else torch.tensor(mask, dtype=torch.float64)
    out = losses.policy_cloning_loss(pi, mu, direction=direction, mask=mask_t)
    assert out.dim() == 0
    assert out.item() == pytest.approx(expected, rel=1e-12)
    if mask is not None:  # a bool mask gives the same
        as_bool = losses.policy_cloning_loss(pi, mu, direction=direction, mask=mask_t.bool())
        assert as_bool.item() == out.item()


def test_policy_cloning_default_direction_is_kl_mu_pi():
    pi, mu = _tiny_logits()
    expected = _masked_sum(_kl_by_hand(MU_LOGITS, PI_LOGITS))
    assert losses.policy_cloning_loss(pi, mu).item() == pytest.approx(expected, rel=1e-12)


VALUES = [[0.5, -1.0], [2.0, 0.25]]
BEHAVIOUR_VALUES = [[1.0, 1.0], [-1.0, 0.25]]


@pytest.mark.parametrize("mask", [None, LASER_MASK])
def test_value_cloning_loss(mask):
    values = torch.tensor(VALUES, dtype=torch.float64)
    behaviour_values = torch.tensor(BEHAVIOUR_VALUES, dtype=torch.float64)
    squared_terms = [[(v - bv) ** 2 for v, bv in zip(vr, br)] for vr, br in zip(VALUES, BEHAVIOUR_VALUES)]
    # No mask: 0.25 + 4 + 9 + 0 = 13.25; LASER_MASK drops the 4.
    expected_squared = _masked_sum(squared_terms, mask)
    assert expected_squared == (13.25 if mask is None else 9.25)
    mask_t = None if mask is None else torch.tensor(mask, dtype=torch.float64)
    squared = losses.value_cloning_loss(values, behaviour_values, form="squared", mask=mask_t)
    l2 = losses.value_cloning_loss(values, behaviour_values, form="l2_norm", mask=mask_t)
    assert squared.dim() == 0 and l2.dim() == 0
    assert squared.item() == pytest.approx(expected_squared, rel=1e-12)
    assert l2.item() == pytest.approx(math.sqrt(expected_squared), rel=1e-12)
    assert losses.value_cloning_loss(values, behaviour_values, mask=mask_t).item() == squared.item()  # default


def _vtrace_by_hand(log_rhos, discounts, rewards, values, bootstrap, mask, rho_bar, c_bar, pg_rho_bar):
    """Backward recursion in plain Python: returns (vs, pg_advantages) as nested lists."""
    T, B = len(values), len(values[0])
    vs = [[0.0] * B for _ in range(T)]
    pg = [[0.0] * B for _ in range(T)]
    for b in range(B):
        carry = 0.0  # v_{t+1} - V(x_{t+1})
        for t in reversed(range(T)):
            rho = math.exp(log_rhos[t][b])
            next_value = bootstrap[b] if t == T - 1 else values[t + 1][b]
            delta = mask[t][b] * min(rho_bar, rho) * (rewards[t][b] + discounts[t][b] * next_value - values[t][b])
            carry = delta + discounts[t][b] * mask[t][b] * min(c_bar, rho) * carry
            vs[t][b] = values[t][b] + carry
        for t in range(T):
            rho = math.exp(log_rhos[t][b])
            next_vs = bootstrap[b] if t == T - 1 else vs[t + 1][b]
            pg[t][b] = mask[t][b] * min(pg_rho_bar, rho) * (rewards[t][b] + discounts[t][b] * next_vs - values[t][b])
    return vs, pg


ACTIONS = [[0, 2], [1, 1]]
REWARDS = [[1.0, -0.5], [0.25, 2.0]]
DISCOUNTS = [[0.9, 0.9], [0.9, 0.0]]
BOOTSTRAP = [0.75, -2.0]


def _tiny_vtrace_inputs(requires_grad=True):
    pi, mu = _tiny_logits(requires_grad=requires_grad)
    return dict(
        learner_logits=pi,
        behaviour_logits=mu,
        actions=torch.tensor(ACTIONS),
        values=torch.tensor(VALUES, dtype=torch.float64, requires_grad=requires_grad),
        bootstrap_value=torch.tensor(BOOTSTRAP, dtype=torch.float64),
        rewards=torch.tensor(REWARDS, dtype=torch.float64),
        discounts=torch.tensor(DISCOUNTS, dtype=torch.float64),
        behaviour_values=torch.tensor(BEHAVIOUR_VALUES, dtype=torch.float64),
    )


@pytest.mark.parametrize("direction,form", [("mu_pi", "squared"), ("pi_mu", "l2_norm")])
def test_vtrace_loss_with_clear_and_laser_is_the_sum_of_its_parts(direction, form):
    weights = dict(baseline_cost=0.4, entropy_cost=0.03, clear_policy_weight=0.7, clear_value_weight=0.2)
    rho_bar, c_bar, pg_rho_bar = 2.0, 0.5, 1.0
    out = losses.vtrace_loss(
        **_tiny_vtrace_inputs(),
        **weights,
        clip_rho_threshold=rho_bar,
        clip_pg_rho_threshold=pg_rho_bar,
        clip_c_threshold=c_bar,
        laser_kl_threshold=LASER_THRESHOLD,
        clear_policy_kl=direction,
        clear_value_loss=form,
    )
    assert isinstance(out, losses.VTraceLoss)
    assert out._fields[:5] == ("total", "pg", "baseline", "entropy", "mean_rho")
    assert out._fields[5:] == ("policy_cloning", "value_cloning", "masked_fraction")

    # Everything again by hand.
    mask = [[1.0 if kl <= LASER_THRESHOLD else 0.0 for kl in row] for row in _kl_by_hand(PI_LOGITS, MU_LOGITS)]
    assert mask == LASER_MASK
    pi_probs = [[_probs_by_hand(row) for row in t_rows] for t_rows in PI_LOGITS]
    mu_probs = [[_probs_by_hand(row) for row in t_rows] for t_rows in MU_LOGITS]
    log_pi_a = [[math.log(pi_probs[t][b][ACTIONS[t][b]]) for b in range(2)] for t in range(2)]
    log_rhos = [[log_pi_a[t][b] - math.log(mu_probs[t][b][ACTIONS[t][b]]) for b in range(2)] for t in range(2)]
    vs, pg_adv = _vtrace_by_hand(log_rhos, DISCOUNTS, REWARDS, VALUES, BOOTSTRAP, mask, rho_bar, c_bar, pg_rho_bar)
    assert vs[0][1] == VALUES[0][1] and pg_adv[0][1] == 0.0  # the masked step
    pg = -_masked_sum([[log_pi_a[t][b] * pg_adv[t][b] for b in range(2)] for t in range(2)], mask)
    baseline = 0.5 * _masked_sum([[(vs[t][b] - VALUES[t][b]) ** 2 for b in range(2)] for t in range(2)], mask)
    entropy = sum(p * math.log(p) for t_rows in pi_probs for row in t_rows for p in row)  # not masked
    if direction == "mu_pi":
        policy_cloning = _masked_sum(_kl_by_hand(MU_LOGITS, PI_LOGITS), mask)
    else:
        policy_cloning = _masked_sum(_kl_by_hand(PI_LOGITS, MU_LOGITS), mask)
    squared = _masked_sum([[(VALUES[t][b] - BEHAVIOUR_VALUES[t][b]) ** 2 for b in range(2)] for t in range(2)], mask)
    value_cloning = squared if form == "squared" else math.sqrt(squared)
    total = pg + 0.4 * baseline + 0.03 * entropy + 0.7 * policy_cloning + 0.2 * value_cloning
    mean_rho = sum(math.exp(x) for row in log_rhos for x in row) / 4

    assert out.pg.item() == pytest.approx(pg, rel=1e-12)
    assert out.baseline.item() == pytest.approx(baseline, rel=1e-12)
    assert out.entropy.item() == pytest.approx(entropy, rel=1e-12)
    assert out.policy_cloning.item() == pytest.approx(policy_cloning, rel=1e-12)
    assert out.value_cloning.item() == pytest.approx(value_cloning, rel=1e-12)
    assert out.total.item() == pytest.approx(total, rel=1e-12)
    assert out.mean_rho.item() == pytest.approx(mean_rho, rel=1e-12)
    assert out.masked_fraction.item() == 0.25
    assert not out.masked_fraction.requires_grad
    for x in out:
        assert x.dim() == 0


def test_vtrace_loss_defaults_leave_clear_and_laser_off():
    inputs = _vtrace_inputs(seed=4)
    out = losses.vtrace_loss(**inputs)
    assert out.policy_cloning.item() == 0.0 and out.value_cloning.item() == 0.0
    assert out.masked_fraction.item() == 0.0
    torch.testing.assert_close(out.total, out.pg + 0.5 * out.baseline + 0.01 * out.entropy, rtol=0, atol=0)
    # Explicit defaults, LASER threshold 0, and behaviour values with zero weights all give the same loss.
    same = [
        losses.vtrace_loss(**inputs, clip_c_threshold=1.0, laser_kl_threshold=None, clear_policy_weight=0.0),
        losses.vtrace_loss(**inputs, laser_kl_threshold=0.0),
        losses.vtrace_loss(**inputs, behaviour_values=torch.full((5, 3), math.nan, dtype=torch.float64)),
    ]
    for other in same:
        for a, b in zip(out, other):
            torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_laser_with_a_loose_threshold_masks_nothing():
    inputs = _vtrace_inputs(seed=5)
    off = losses.vtrace_loss(**inputs)
    loose = losses.vtrace_loss(**inputs, laser_kl_threshold=1e9)
    assert loose.masked_fraction.item() == 0.0
    for name in ("total", "pg", "baseline", "entropy"):
        torch.testing.assert_close(getattr(loose, name), getattr(off, name))


def test_laser_mask_cuts_the_vtrace_target():
    # At the masked step vs = V(x_t), so the baseline term there is 0 even before the loss masks it;
    # the step before bootstraps from V(x_t) rather than from the corrected target.
    inputs = _tiny_vtrace_inputs()
    out = losses.vtrace_loss(**inputs, laser_kl_threshold=LASER_THRESHOLD, baseline_cost=1.0, entropy_cost=0.0)
    unmasked_baseline = losses.vtrace_loss(**inputs, baseline_cost=1.0, entropy_cost=0.0).baseline
    assert out.baseline.item() < unmasked_baseline.item()


def _grad_of(loss, *tensors):
    return torch.autograd.grad(loss, tensors, allow_unused=True)


def test_policy_cloning_gradient_is_masked():
    mask = torch.tensor(LASER_MASK, dtype=torch.float64)
    for direction in ("mu_pi", "pi_mu"):
        pi, mu = _tiny_logits(requires_grad=True)
        (grad,) = _grad_of(losses.policy_cloning_loss(pi, mu, direction=direction, mask=mask), pi)
        for t in range(2):
            for b in range(2):
                if LASER_MASK[t][b]:
                    assert grad[t, b].abs().max().item() > 1e-4
                else:
                    assert torch.count_nonzero(grad[t, b]) == 0
    # d/dlogits KL(mu || softmax(logits)) = softmax(logits) - mu, by hand.
    pi, mu = _tiny_logits(requires_grad=True)
    (grad,) = _grad_of(losses.policy_cloning_loss(pi, mu, mask=mask), pi)
    for t in range(2):
        for b in range(2):
            p, q = _probs_by_hand(PI_LOGITS[t][b]), _probs_by_hand(MU_LOGITS[t][b])
            for a in range(3):
                assert grad[t, b, a].item() == pytest.approx(LASER_MASK[t][b] * (p[a] - q[a]), abs=1e-12)


def test_value_cloning_gradient():
    mask = torch.tensor(LASER_MASK, dtype=torch.float64)
    values = torch.tensor(VALUES, dtype=torch.float64, requires_grad=True)
    behaviour_values = torch.tensor(BEHAVIOUR_VALUES, dtype=torch.float64)
    (grad,) = _grad_of(losses.value_cloning_loss(values, behaviour_values, "squared", mask=mask), values)
    norm = math.sqrt(9.25)
    (grad_l2,) = _grad_of(losses.value_cloning_loss(values, behaviour_values, "l2_norm", mask=mask), values)
    for t in range(2):
        for b in range(2):
            diff = LASER_MASK[t][b] * (VALUES[t][b] - BEHAVIOUR_VALUES[t][b])
            assert grad[t, b].item() == pytest.approx(2.0 * diff, abs=1e-12)
            assert grad_l2[t, b].item() == pytest.approx(diff / norm, abs=1e-12)
    assert grad[0, 0].item() != 0.0  # an unmasked step with V != V_mu moves


def test_l2_norm_value_cloning_gradient_is_finite_at_zero_difference():
    behaviour_values = torch.tensor(VALUES, dtype=torch.float64)
    values = behaviour_values.clone().requires_grad_(True)
    loss = losses.value_cloning_loss(values, behaviour_values, "l2_norm")
    assert loss.item() == 0.0
    (grad,) = _grad_of(loss, values)
    assert torch.isfinite(grad).all()
    assert torch.count_nonzero(grad) == 0
    # Also when the only differences are masked out.
    values = torch.tensor([[0.5, 5.0], [2.0, 0.25]], dtype=torch.float64, requires_grad=True)
    mask = torch.tensor(LASER_MASK, dtype=torch.float64)
    (grad,) = _grad_of(losses.value_cloning_loss(values, behaviour_values, "l2_norm", mask=mask), values)
    assert torch.isfinite(grad).all()


def test_laser_masks_pg_and_baseline_gradients_but_not_entropy():
    inputs = _tiny_vtrace_inputs()
    out = losses.vtrace_loss(**inputs, laser_kl_threshold=LASER_THRESHOLD)
    pi, values = inputs["learner_logits"], inputs["values"]
    (pg_grad,) = _grad_of(out.pg, pi)
    (baseline_grad,) = _grad_of(out.baseline, values)
    (entropy_grad,) = _grad_of(out.entropy, pi)
    masked, kept = (0, 1), [(0, 0), (1, 0), (1, 1)]
    assert torch.count_nonzero(pg_grad[masked]) == 0
    assert baseline_grad[masked].item() == 0.0
    assert entropy_grad[masked].abs().max().item() > 1e-4  # the entropy bonus still applies there
    assert any(pg_grad[tb].abs().max().item() > 1e-6 for tb in kept)
    assert any(abs(baseline_grad[tb].item()) > 1e-6 for tb in kept)
    # Without LASER the same step has a pg gradient.
    (pg_grad_off,) = _grad_of(losses.vtrace_loss(**inputs).pg, pi)
    assert pg_grad_off[masked].abs().max().item() > 1e-6


def test_behaviour_tensors_get_no_gradient():
    for direction, form in (("mu_pi", "squared"), ("pi_mu", "l2_norm")):
        inputs = _tiny_vtrace_inputs()
        inputs["behaviour_logits"].requires_grad_(True)
        inputs["behaviour_values"].requires_grad_(True)
        out = losses.vtrace_loss(
            **inputs,
            laser_kl_threshold=LASER_THRESHOLD,
            clear_policy_weight=1.0,
            clear_value_weight=1.0,
            clear_policy_kl=direction,
            clear_value_loss=form,
        )
        out.total.backward()
        assert inputs["behaviour_logits"].grad is None
        assert inputs["behaviour_values"].grad is None
        assert inputs["learner_logits"].grad is not None and inputs["values"].grad is not None
        pi, mu = _tiny_logits(requires_grad=True)
        mu.requires_grad_(True)
        losses.policy_cloning_loss(pi, mu, direction=direction).backward()
        assert mu.grad is None and pi.grad is not None


def test_clear_weights_scale_only_their_terms():
    inputs = _tiny_vtrace_inputs()
    base = losses.vtrace_loss(**inputs)
    both = losses.vtrace_loss(**inputs, clear_policy_weight=2.0, clear_value_weight=3.0)
    torch.testing.assert_close(both.total, base.total + 2.0 * both.policy_cloning + 3.0 * both.value_cloning)
    assert both.policy_cloning.item() > 0 and both.value_cloning.item() > 0


@pytest.mark.parametrize(
    "call,match",
    [
        (lambda: losses.policy_cloning_loss(*_tiny_logits(), direction="forward"), "mu_pi"),
        (lambda: losses.value_cloning_loss(torch.zeros(2, 2), torch.zeros(2, 2), form="huber"), "l2_norm"),
        (
            lambda: losses.vtrace_loss(**dict(_tiny_vtrace_inputs(), behaviour_values=None), clear_value_weight=1.0),
            "behaviour_values",
        ),
        (lambda: losses.vtrace_loss(**_tiny_vtrace_inputs(), clear_policy_kl="kl"), "clear_policy_kl"),
        (lambda: losses.vtrace_loss(**_tiny_vtrace_inputs(), clear_value_loss="l1"), "clear_value_loss"),
        (lambda: losses.vtrace_loss(**_tiny_vtrace_inputs(), clear_policy_weight=-1.0), "clear_policy_weight"),
        (lambda: losses.vtrace_loss(**_tiny_vtrace_inputs(), laser_kl_threshold=-0.1), "laser_kl_threshold"),
        (lambda: losses.vtrace_loss(**_tiny_vtrace_inputs(), clip_c_threshold=0.0), "clip_c_threshold"),
        (
            lambda: losses.vtrace_loss(**dict(_tiny_vtrace_inputs(), behaviour_values=torch.zeros(2, 3))),
            "behaviour_values",
        ),
        (lambda: losses.laser_mask(*_tiny_logits(), threshold=math.nan), "threshold"),
        (lambda: losses.kl_divergence(torch.zeros(2, 2, 3), torch.zeros(2, 2, 4)), "q_logits"),
        (lambda: losses.kl_divergence(torch.zeros(2, 3), torch.zeros(2, 3)), "p_logits"),
        (lambda: losses.policy_cloning_loss(*_tiny_logits(), mask=torch.ones(2, 3)), "mask"),
        (lambda: losses.value_cloning_loss(torch.zeros(2, 2), torch.zeros(2, 3)), "behaviour_values"),
        (lambda: losses.value_cloning_loss(torch.zeros(2, 2), torch.zeros(2, 2), mask=torch.ones(2)), "mask"),
        (lambda: losses.baseline_loss(torch.zeros(2, 2), torch.zeros(2, 2), mask=torch.ones(3, 2)), "mask"),
    ],
)
def test_clear_and_laser_errors(call, match):
    with pytest.raises(ValueError, match=match):
        call()
