"""zrl.algos.impact against a slow reference written in the IMPACT paper's notation (Luo et al. 2020, section 3.1),
on random cases in which the surrogate's clip binds on both sides and episodes end inside unrolls."""

import numpy as np
import pytest
import torch
from test_vtrace import _reference_vtrace

from zrl.algos.impact import clipped_surrogate, impact_loss

pytestmark = pytest.mark.unit


def _pi(logits, a):
    """pi(a|x) of softmax(logits), float64, one step."""
    z = np.exp(logits - logits.max())
    return z[a] / z.sum()


def _reference_targets(case, rho_bar, c_bar, pg_rho_bar):
    """V-trace's v_s and advantages with rho_t = pi_target(a_t|x_t) / mu(a_t|x_t), by the O(T^2) sum."""
    T, B = case["actions"].shape
    log_rhos = np.zeros((T, B))
    for t in range(T):
        for b in range(B):
            a = case["actions"][t, b]
            log_rhos[t, b] = np.log(_pi(case["target"][t, b], a)) - np.log(_pi(case["behaviour"][t, b], a))
    return _reference_vtrace(
        log_rhos, case["discounts"], case["rewards"], case["values"], case["bootstrap"], rho_bar, pg_rho_bar, c_bar
    )


def _reference_total(case, learner, values, vs, adv, eps, costs):
    """L = -sum_t min(r_t A_t, clip(r_t, 1-eps, 1+eps) A_t) + c_v 0.5 sum (v_t - V(x_t))^2 + c_e sum_a pi log pi,
    with r_t = pi_theta(a_t|x_t) / pi_target(a_t|x_t), and v_t, A_t held constant."""
    pg_cost, baseline_cost, entropy_cost = costs
    T, B = case["actions"].shape
    surrogate = squared = neg_entropy = 0.0
    for t in range(T):
        for b in range(B):
            a = case["actions"][t, b]
            r = _pi(learner[t, b], a) / _pi(case["target"][t, b], a)
            surrogate += min(r * adv[t, b], min(max(r, 1 - eps), 1 + eps) * adv[t, b])
            squared += (vs[t, b] - values[t, b]) ** 2
            p = np.array([_pi(learner[t, b], k) for k in range(learner.shape[2])])
            neg_entropy += float((p * np.log(p)).sum())
    return pg_cost * -surrogate + baseline_cost * 0.5 * squared + entropy_cost * neg_entropy


def _case(seed, T=6, B=4, A=3, spread=1.0):
    """Random logits for the three policies (the learner's ``spread`` away from the target's, so that the ratio
    leaves [1 - eps, 1 + eps] at some steps), with episode ends inside the unrolls."""
    rng = np.random.default_rng(seed)
    target = rng.normal(size=(T, B, A))
    discounts = np.where(rng.random((T, B)) < 0.2, 0.0, 0.97)
    discounts[T // 2, 0] = 0.0  # an episode ends mid-unroll in every case
    return {
        "learner": target + spread * rng.normal(size=(T, B, A)),
        "target": target,
        "behaviour": target + rng.normal(size=(T, B, A)),
        "actions": rng.integers(0, A, (T, B)),
        "values": rng.normal(size=(T, B)),
        "bootstrap": rng.normal(size=B),
        "rewards": rng.normal(size=(T, B)),
        "discounts": discounts,
    }


def _fast(case, eps, costs, clips, dtype=torch.float64, normalize=False):
    t = {k: torch.tensor(v, dtype=torch.int64 if k == "actions" else dtype) for k, v in case.items()}
    learner = t["learner"].clone().requires_grad_(True)
    values = t["values"].clone().requires_grad_(True)
    loss = impact_loss(
        learner,
        t["target"],
        t["behaviour"],
        t["actions"],
        values,
        t["bootstrap"],
        t["rewards"],
        t["discounts"],
        clip=eps,
        pg_cost=costs[0],
        baseline_cost=costs[1],
        entropy_cost=costs[2],
        clip_rho_threshold=clips[0],
        clip_c_threshold=clips[1],
        clip_pg_rho_threshold=clips[2],
        normalize_advantages=normalize,
    )
    loss.total.backward()
    return loss, learner.grad.numpy(), values.grad.numpy()


CLIPS = [(1.0, 1.0, 1.0), (2.0, 0.5, 1.5), (None, None, None)]


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("clips", CLIPS)
def test_the_loss_and_its_gradients_match_the_slow_reference(seed, clips):
    case = _case(seed)
    eps, costs = 0.2, (1.0, 0.5, 0.01)
    vs, adv = _reference_targets(case, clips[0], clips[1], clips[2])
    loss, grad_logits, grad_values = _fast(case, eps, costs, clips)
    expected = _reference_total(case, case["learner"], case["values"], vs, adv, eps, costs)
    assert float(loss.total.detach()) == pytest.approx(expected, rel=1e-9, abs=1e-9)

    # Gradients by central differences of the reference, with v_t and A_t held (they are targets, not paths).
    h = 1e-6
    for name, grad in (("learner", grad_logits), ("values", grad_values)):
        numeric = np.zeros_like(case[name])
        for idx in np.ndindex(case[name].shape):
            up, down = case[name].copy(), case[name].copy()
            up[idx] += h
            down[idx] -= h
            args = {"learner": case["learner"], "values": case["values"]}
            f_up = _reference_total(case, *{**args, name: up}.values(), vs, adv, eps, costs)
            f_down = _reference_total(case, *{**args, name: down}.values(), vs, adv, eps, costs)
            numeric[idx] = (f_up - f_down) / (2 * h)
        # differences of a sum of O(100) terms: an absolute error of about 1e-5 of the largest entry
        np.testing.assert_allclose(grad, numeric, rtol=1e-5, atol=1e-5 * np.abs(numeric).max(), err_msg=name)


@pytest.mark.parametrize("seed", range(4))
def test_normalised_advantages_match_the_reference_with_standardised_a(seed):
    """With normalize_advantages the surrogate takes (A - mean A) / (std A + 1e-8) over the batch (std with
    Bessel's correction): the same reference, fed the standardised advantages."""
    case = _case(seed)
    eps, costs, clips = 0.2, (1.0, 0.5, 0.01), (1.0, 1.0, 1.0)
    vs, adv = _reference_targets(case, *clips)
    standard = (adv - adv.mean()) / (adv.std(ddof=1) + 1e-8)
    loss, grad_logits, _ = _fast(case, eps, costs, clips, normalize=True)
    expected = _reference_total(case, case["learner"], case["values"], vs, standard, eps, costs)
    assert float(loss.total.detach()) == pytest.approx(expected, rel=1e-9, abs=1e-9)
    raw, raw_grad, _ = _fast(case, eps, costs, clips)
    assert float(raw.pg.detach()) != pytest.approx(float(loss.pg.detach()))
    assert not np.allclose(grad_logits, raw_grad)


def test_the_cases_clip_on_both_sides_with_advantages_of_both_signs():
    """The reference comparison above is only worth something if every branch of the min runs."""
    seen = set()
    for seed in range(6):
        case = _case(seed)
        _, adv = _reference_targets(case, 1.0, 1.0, 1.0)
        for t, b in np.ndindex(case["actions"].shape):
            a = case["actions"][t, b]
            r = _pi(case["learner"][t, b], a) / _pi(case["target"][t, b], a)
            side = "above" if r > 1.2 else "below" if r < 0.8 else "inside"
            seen.add((side, adv[t, b] > 0))
    assert seen == {(side, sign) for side in ("above", "below", "inside") for sign in (True, False)}


def test_float32_agrees_with_float64():
    case = _case(11, T=20, B=8, A=6)
    a, _, _ = _fast(case, 0.2, (1.0, 0.5, 0.01), (1.0, 1.0, 1.0), torch.float32)
    b, _, _ = _fast(case, 0.2, (1.0, 0.5, 0.01), (1.0, 1.0, 1.0), torch.float64)
    for x, y in zip(a, b):
        assert float(x.detach()) == pytest.approx(float(y.detach()), rel=1e-4, abs=1e-4)


def test_a_learner_equal_to_its_target_is_plain_vtrace_on_the_target_policy():
    """r = 1: the surrogate is sum A_t and its gradient that of sum A_t log pi_theta (the policy gradient)."""
    from zrl.algos.losses import vtrace_loss

    case = _case(3, spread=0.0)
    t = {k: torch.tensor(v, dtype=torch.int64 if k == "actions" else torch.float64) for k, v in case.items()}
    grads = []
    for which in ("impact", "vtrace"):
        logits = t["target"].clone().requires_grad_(True)
        common = dict(actions=t["actions"], bootstrap_value=t["bootstrap"], rewards=t["rewards"])
        if which == "impact":
            loss = impact_loss(
                logits, t["target"], t["behaviour"], values=t["values"], discounts=t["discounts"], **common
            )
        else:
            loss = vtrace_loss(logits, t["behaviour"], values=t["values"], discounts=t["discounts"], **common)
        loss.pg.backward()
        grads.append(logits.grad.numpy())
    np.testing.assert_allclose(grads[0], grads[1], rtol=1e-9, atol=1e-12)


def test_diagnostics():
    case = _case(5, spread=2.0)
    loss, _, _ = _fast(case, 0.2, (1.0, 0.5, 0.01), (1.0, 1.0, 1.0))
    r = np.array(
        [
            _pi(case["learner"][t, b], case["actions"][t, b]) / _pi(case["target"][t, b], case["actions"][t, b])
            for t, b in np.ndindex(case["actions"].shape)
        ]
    )
    assert float(loss.clip_fraction) == pytest.approx(np.mean(np.abs(r - 1) > 0.2))
    assert 0 < float(loss.clip_fraction) < 1
    assert float(loss.target_kl) > 0
    same, _, _ = _fast({**case, "learner": case["target"]}, 0.2, (1.0, 0.5, 0.01), (1.0, 1.0, 1.0))
    assert float(same.clip_fraction) == 0 and float(same.target_kl) == pytest.approx(0, abs=1e-12)


def test_advantages_get_no_gradient_and_targets_none():
    ratio = torch.zeros(3, 2, requires_grad=True)
    adv = torch.randn(3, 2, requires_grad=True)
    clipped_surrogate(ratio, adv, 0.2).sum().backward()
    assert adv.grad is None
    case = {k: torch.tensor(v, dtype=torch.int64 if k == "actions" else torch.float32) for k, v in _case(0).items()}
    target = case["target"].clone().requires_grad_(True)
    behaviour = case["behaviour"].clone().requires_grad_(True)
    loss = impact_loss(
        case["learner"].requires_grad_(True),
        target,
        behaviour,
        case["actions"],
        case["values"].requires_grad_(True),
        case["bootstrap"],
        case["rewards"],
        case["discounts"],
    )
    loss.total.backward()
    assert target.grad is None and behaviour.grad is None


@pytest.mark.parametrize("clip", [0.0, 1.0, -0.1, float("nan")])
def test_a_clip_outside_zero_one_is_refused(clip):
    with pytest.raises(ValueError, match="clip"):
        clipped_surrogate(torch.zeros(2, 2), torch.zeros(2, 2), clip)


def test_shapes_are_checked():
    case = {k: torch.tensor(v, dtype=torch.int64 if k == "actions" else torch.float32) for k, v in _case(0).items()}
    args = [case[k] for k in ("learner", "target", "behaviour", "actions", "values", "bootstrap", "rewards")]
    with pytest.raises(ValueError, match="target_logits"):
        impact_loss(args[0], args[1][:, :, :2], *args[2:], case["discounts"])
    with pytest.raises(ValueError, match="discounts"):
        impact_loss(*args, case["discounts"][:-1])
