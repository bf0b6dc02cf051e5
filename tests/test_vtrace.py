"""Tests for zrl.algos.vtrace against a slow reference of IMPALA eq. (1)."""

import math

import numpy as np
import pytest
import torch

from zrl.algos import vtrace

pytestmark = pytest.mark.unit


def _reference_vtrace(
    log_rhos,
    discounts,
    rewards,
    values,
    bootstrap_value,
    clip_rho_threshold,
    clip_pg_rho_threshold,
    clip_c_threshold=1.0,
    mask=None,
):
    """Direct O(T^2) evaluation of the paper's sum, in float64 numpy.

    A 0/1 ``mask`` m_t enters as rho_t -> m_t rho_t, c_t -> m_t c_t and a pg
    advantage multiplied by m_t.
    """
    log_rhos = np.asarray(log_rhos, dtype=np.float64)
    discounts = np.asarray(discounts, dtype=np.float64)
    rewards = np.asarray(rewards, dtype=np.float64)
    values = np.asarray(values, dtype=np.float64)
    bootstrap_value = np.asarray(bootstrap_value, dtype=np.float64)
    T, B = log_rhos.shape
    rhos = np.exp(log_rhos)
    rho_bar = np.inf if clip_rho_threshold is None else clip_rho_threshold
    pg_rho_bar = np.inf if clip_pg_rho_threshold is None else clip_pg_rho_threshold
    c_bar = np.inf if clip_c_threshold is None else clip_c_threshold
    m = np.ones((T, B)) if mask is None else np.asarray(mask, dtype=np.float64)
    clipped_rhos = m * np.minimum(rho_bar, rhos)
    cs = m * np.minimum(c_bar, rhos)
    values_ext = np.concatenate([values, bootstrap_value[None]], axis=0)  # [T+1, B]

    vs = np.zeros((T, B))
    for b in range(B):
        for s in range(T):
            total = values[s, b]
            for t in range(s, T):
                weight = 1.0
                for i in range(s, t):
                    weight *= discounts[i, b] * cs[i, b]
                delta = clipped_rhos[t, b] * (rewards[t, b] + discounts[t, b] * values_ext[t + 1, b] - values[t, b])
                total += weight * delta
            vs[s, b] = total

    vs_ext = np.concatenate([vs, bootstrap_value[None]], axis=0)
    pg = np.zeros((T, B))
    for b in range(B):
        for t in range(T):
            pg[t, b] = (
                m[t, b]
                * min(pg_rho_bar, rhos[t, b])
                * (rewards[t, b] + discounts[t, b] * vs_ext[t + 1, b] - values[t, b])
            )
    return vs, pg


def _make_inputs(T, B, seed):
    rng = np.random.default_rng(seed)
    # Spread log-rhos over [-2.5, 2.5] so rhos land below 1, between 1 and 3.7,
    # and above 3.7 (log 3.7 ~ 1.31); pin a few values to hit each branch.
    log_rhos = rng.uniform(-2.5, 2.5, size=(T, B))
    pinned = [-1.0, 0.5, 2.0, 0.0]  # rho < 1, 1 < rho < 3.7, rho > 3.7, rho == 1
    flat = log_rhos.reshape(-1)
    for k, value in enumerate(pinned[: flat.size]):
        flat[k] = value
    discounts = np.full((T, B), 0.9)
    # Episode ends inside the unroll.
    done = rng.uniform(size=(T, B)) < 0.25
    if T > 2:
        done[T // 2, 0] = True
    discounts[done] = 0.0
    rewards = rng.normal(size=(T, B))
    values = rng.normal(size=(T, B))
    bootstrap_value = rng.normal(size=(B,))
    return log_rhos, discounts, rewards, values, bootstrap_value


THRESHOLDS = [(1.0, 1.0), (3.7, 1.0), (1.0, 3.7), (None, 1.0), (1.0, None), (None, None), (0.5, 2.0)]


@pytest.mark.parametrize("dtype,atol", [(torch.float64, 1e-10), (torch.float32, 1e-4)])
@pytest.mark.parametrize("clip_rho,clip_pg_rho", THRESHOLDS)
@pytest.mark.parametrize("T", [1, 7])
@pytest.mark.parametrize("B", [1, 5])
def test_matches_reference(B, T, clip_rho, clip_pg_rho, dtype, atol):
    inputs = _make_inputs(T, B, seed=T * 100 + B)
    expected_vs, expected_pg = _reference_vtrace(*inputs, clip_rho, clip_pg_rho)
    tensors = [torch.tensor(x, dtype=dtype) for x in inputs]
    out = vtrace.from_importance_weights(*tensors, clip_rho_threshold=clip_rho, clip_pg_rho_threshold=clip_pg_rho)
    assert isinstance(out, vtrace.VTraceReturns)
    assert out.vs.shape == (T, B) and out.pg_advantages.shape == (T, B)
    assert out.vs.dtype == dtype and out.pg_advantages.dtype == dtype
    rtol = 1e-10 if dtype == torch.float64 else 1e-4
    np.testing.assert_allclose(out.vs.numpy(), expected_vs, rtol=rtol, atol=atol)
    np.testing.assert_allclose(out.pg_advantages.numpy(), expected_pg, rtol=rtol, atol=atol)


def test_inputs_exercise_every_clipping_branch():
    log_rhos = _make_inputs(7, 5, seed=705)[0]
    rhos = np.exp(log_rhos)
    assert (rhos < 1).any()
    assert ((rhos > 1) & (rhos < 3.7)).any()
    assert (rhos > 3.7).any()
    discounts = _make_inputs(7, 5, seed=705)[1]
    assert (discounts[:-1] == 0).any()  # an episode ends strictly inside the unroll


# (rho_bar, c_bar, pg_rho_bar) with c_bar != rho_bar; (2.0, 0.5, 1.0) runs both clip branches of
# rho and c separately: the pinned rhos 0.37, 1.65 and 7.4 fall below, between and above 0.5 and 2.0.
C_THRESHOLDS = [(2.0, 0.5, 1.0), (1.0, None, 1.0), (None, 0.5, None), (0.5, 2.0, 2.0), (3.7, 3.7, 3.7)]


@pytest.mark.parametrize("dtype,atol", [(torch.float64, 1e-10), (torch.float32, 1e-4)])
@pytest.mark.parametrize("clip_rho,clip_c,clip_pg_rho", C_THRESHOLDS)
@pytest.mark.parametrize("T,B", [(1, 1), (7, 5)])
def test_clip_c_matches_reference(T, B, clip_rho, clip_c, clip_pg_rho, dtype, atol):
    inputs = _make_inputs(T, B, seed=T * 100 + B)
    expected_vs, expected_pg = _reference_vtrace(*inputs, clip_rho, clip_pg_rho, clip_c_threshold=clip_c)
    out = vtrace.from_importance_weights(
        *[torch.tensor(x, dtype=dtype) for x in inputs],
        clip_rho_threshold=clip_rho,
        clip_pg_rho_threshold=clip_pg_rho,
        clip_c_threshold=clip_c,
    )
    rtol = 1e-10 if dtype == torch.float64 else 1e-4
    np.testing.assert_allclose(out.vs.numpy(), expected_vs, rtol=rtol, atol=atol)
    np.testing.assert_allclose(out.pg_advantages.numpy(), expected_pg, rtol=rtol, atol=atol)


def test_inputs_exercise_both_clip_branches_of_rho_and_c():
    rhos = np.exp(_make_inputs(7, 5, seed=705)[0])
    rho_bar, c_bar = 2.0, 0.5
    assert (rhos < c_bar).any()  # neither clipped
    assert ((rhos > c_bar) & (rhos < rho_bar)).any()  # c clipped, rho not
    assert (rhos > rho_bar).any()  # both clipped


def test_clip_c_is_separate_from_clip_rho():
    inputs = [torch.tensor(x) for x in _make_inputs(7, 5, seed=705)]
    default = vtrace.from_importance_weights(*inputs)
    explicit = vtrace.from_importance_weights(*inputs, clip_c_threshold=1.0)
    torch.testing.assert_close(default.vs, explicit.vs, rtol=0, atol=0)
    torch.testing.assert_close(default.pg_advantages, explicit.pg_advantages, rtol=0, atol=0)
    # c_bar only scales the trace: the last step's vs (no later step to carry) is unchanged, earlier ones move.
    low_c = vtrace.from_importance_weights(*inputs, clip_rho_threshold=2.0, clip_c_threshold=0.5)
    same_c = vtrace.from_importance_weights(*inputs, clip_rho_threshold=2.0, clip_c_threshold=2.0)
    torch.testing.assert_close(low_c.vs[-1], same_c.vs[-1])
    assert not torch.allclose(low_c.vs[:-1], same_c.vs[:-1])


def _mask_with_cut(T, B, t_cut):
    mask = np.ones((T, B))
    mask[t_cut, 0] = 0.0
    return mask


@pytest.mark.parametrize("mask_dtype", [torch.bool, torch.float32, torch.float64])
@pytest.mark.parametrize("clip_rho,clip_c,clip_pg_rho", [(1.0, 1.0, 1.0), (2.0, 0.5, 1.0), (None, None, None)])
def test_mask_matches_reference(clip_rho, clip_c, clip_pg_rho, mask_dtype):
    T, B, t_cut = 7, 5, 3
    inputs = _make_inputs(T, B, seed=705)
    inputs[1][:] = 0.9  # no episode end, so only the mask cuts the trace
    mask = _mask_with_cut(T, B, t_cut)
    mask[5, 2] = 0.0  # a second cut in another column
    expected_vs, expected_pg = _reference_vtrace(*inputs, clip_rho, clip_pg_rho, clip_c_threshold=clip_c, mask=mask)
    tensors = [torch.tensor(x) for x in inputs]
    out = vtrace.from_importance_weights(
        *tensors,
        clip_rho_threshold=clip_rho,
        clip_pg_rho_threshold=clip_pg_rho,
        clip_c_threshold=clip_c,
        mask=torch.tensor(mask).to(mask_dtype),
    )
    np.testing.assert_allclose(out.vs.numpy(), expected_vs, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(out.pg_advantages.numpy(), expected_pg, rtol=1e-10, atol=1e-10)
    values = tensors[3]
    # At a masked step: no TD error, so vs = V(x_s), and the pg advantage is 0.
    for t, b in ((t_cut, 0), (5, 2)):
        assert out.vs[t, b].item() == values[t, b].item()
        assert out.pg_advantages[t, b].item() == 0.0
    # Without the mask the same step does move, so the mask is what cut it.
    unmasked = vtrace.from_importance_weights(
        *tensors, clip_rho_threshold=clip_rho, clip_pg_rho_threshold=clip_pg_rho, clip_c_threshold=clip_c
    )
    assert unmasked.vs[t_cut, 0].item() != values[t_cut, 0].item()
    # Columns without a masked step are unchanged.
    torch.testing.assert_close(out.vs[:, [1, 3, 4]], unmasked.vs[:, [1, 3, 4]])
    torch.testing.assert_close(out.pg_advantages[:, [1, 3, 4]], unmasked.pg_advantages[:, [1, 3, 4]])


def test_mask_cuts_the_trace():
    # Steps before the cut see only V(x_cut), not the rewards or values after it.
    T, B, t_cut = 6, 2, 2
    log_rhos, _, rewards, values, bootstrap = [torch.tensor(x) for x in _make_inputs(T, B, seed=3)]
    discounts = torch.full((T, B), 0.9, dtype=torch.float64)
    mask = torch.tensor(_mask_with_cut(T, B, t_cut), dtype=torch.bool)
    base = vtrace.from_importance_weights(log_rhos, discounts, rewards, values, bootstrap, mask=mask)
    rewards2, values2 = rewards.clone(), values.clone()
    rewards2[t_cut:] += 10.0
    values2[t_cut + 1 :] -= 3.0
    changed = vtrace.from_importance_weights(log_rhos, discounts, rewards2, values2, bootstrap + 5.0, mask=mask)
    torch.testing.assert_close(base.vs[: t_cut + 1, 0], changed.vs[: t_cut + 1, 0])
    torch.testing.assert_close(base.pg_advantages[: t_cut + 1, 0], changed.pg_advantages[: t_cut + 1, 0])
    assert not torch.allclose(base.vs[t_cut + 1 :, 0], changed.vs[t_cut + 1 :, 0])
    assert not torch.allclose(base.vs[:, 1], changed.vs[:, 1])  # the unmasked column still sees them
    # Step t_cut - 1 is a one-step target bootstrapped from V(x_cut) (rho_bar = c_bar = 1).
    s = t_cut - 1
    rho = min(1.0, math.exp(log_rhos[s, 0].item()))
    expected = values[s, 0].item() + rho * (rewards[s, 0].item() + 0.9 * values[t_cut, 0].item() - values[s, 0].item())
    assert base.vs[s, 0].item() == pytest.approx(expected, rel=1e-12)


def test_mask_all_ones_is_no_mask_and_all_zeros_is_values():
    inputs = [torch.tensor(x) for x in _make_inputs(7, 5, seed=705)]
    plain = vtrace.from_importance_weights(*inputs)
    ones = vtrace.from_importance_weights(*inputs, mask=torch.ones(7, 5, dtype=torch.bool))
    torch.testing.assert_close(ones.vs, plain.vs, rtol=0, atol=0)
    torch.testing.assert_close(ones.pg_advantages, plain.pg_advantages, rtol=0, atol=0)
    zeros = vtrace.from_importance_weights(*inputs, mask=torch.zeros(7, 5))
    torch.testing.assert_close(zeros.vs, inputs[3], rtol=0, atol=0)
    assert torch.count_nonzero(zeros.pg_advantages) == 0


def test_masked_infinite_rho_does_not_poison_the_unroll():
    # LASER masks exactly the steps where pi and mu disagree most, so rho there may overflow to inf.
    log_rhos, discounts, rewards, values, bootstrap = [torch.tensor(x) for x in _make_inputs(5, 2, seed=4)]
    log_rhos[2, 0] = 1000.0
    mask = torch.ones(5, 2)
    mask[2, 0] = 0.0
    out = vtrace.from_importance_weights(
        log_rhos,
        discounts,
        rewards,
        values,
        bootstrap,
        clip_rho_threshold=None,
        clip_pg_rho_threshold=None,
        clip_c_threshold=None,
        mask=mask,
    )
    assert torch.isfinite(out.vs).all() and torch.isfinite(out.pg_advantages).all()


def test_clipping_changes_result():
    inputs = [torch.tensor(x) for x in _make_inputs(7, 5, seed=705)]
    clipped = vtrace.from_importance_weights(*inputs, clip_rho_threshold=1.0, clip_pg_rho_threshold=1.0)
    unclipped = vtrace.from_importance_weights(*inputs, clip_rho_threshold=None, clip_pg_rho_threshold=None)
    assert not torch.allclose(clipped.vs, unclipped.vs)
    assert not torch.allclose(clipped.pg_advantages, unclipped.pg_advantages)


def test_zero_discount_cuts_trace():
    # With discount 0 at step k, vs for steps <= k does not depend on anything after k.
    T, B = 6, 2
    inputs = [torch.tensor(x) for x in _make_inputs(T, B, seed=3)]
    log_rhos, discounts, rewards, values, bootstrap = inputs
    discounts = torch.full((T, B), 0.9, dtype=torch.float64)
    discounts[2] = 0.0
    base = vtrace.from_importance_weights(log_rhos, discounts, rewards, values, bootstrap)
    rewards2 = rewards.clone()
    rewards2[3:] += 10.0
    bootstrap2 = bootstrap + 5.0
    changed = vtrace.from_importance_weights(log_rhos, discounts, rewards2, values, bootstrap2)
    torch.testing.assert_close(base.vs[:3], changed.vs[:3])
    torch.testing.assert_close(base.pg_advantages[:3], changed.pg_advantages[:3])
    assert not torch.allclose(base.vs[3:], changed.vs[3:])


def test_on_policy_equals_n_step_return():
    # log_rhos = 0 and no clipping: vs_s is the n-step bootstrapped return.
    rewards = torch.tensor([[1.0, 0.0], [2.0, -1.0], [3.0, 0.5]], dtype=torch.float64)
    discounts = torch.tensor([[0.9, 0.9], [0.9, 0.0], [0.9, 0.9]], dtype=torch.float64)
    values = torch.tensor([[0.3, 1.0], [-0.2, 2.0], [0.7, -1.0]], dtype=torch.float64)
    bootstrap = torch.tensor([4.0, 10.0], dtype=torch.float64)
    out = vtrace.from_importance_weights(
        torch.zeros(3, 2, dtype=torch.float64),
        discounts,
        rewards,
        values,
        bootstrap,
        clip_rho_threshold=None,
        clip_pg_rho_threshold=None,
    )
    g = 0.9
    # Column 0: no episode end.
    v2 = 3.0 + g * 4.0
    v1 = 2.0 + g * v2
    v0 = 1.0 + g * v1
    # Column 1: episode ends after step 1 (discount 0 there).
    w2 = 0.5 + g * 10.0
    w1 = -1.0 + 0.0 * w2
    w0 = 0.0 + g * w1
    expected_vs = torch.tensor([[v0, w0], [v1, w1], [v2, w2]], dtype=torch.float64)
    torch.testing.assert_close(out.vs, expected_vs)
    # pg advantage = r_t + gamma_t vs_{t+1} - V(x_t) = vs_t - V(x_t) on-policy.
    torch.testing.assert_close(out.pg_advantages, expected_vs - values)
    # Same result with default clipping, since rhos == 1.
    clipped = vtrace.from_importance_weights(
        torch.zeros(3, 2, dtype=torch.float64), discounts, rewards, values, bootstrap
    )
    torch.testing.assert_close(clipped.vs, expected_vs)


def test_outputs_are_detached():
    T, B = 4, 3
    tensors = [torch.tensor(x, requires_grad=True) for x in _make_inputs(T, B, seed=11)]
    out = vtrace.from_importance_weights(*tensors)
    assert not out.vs.requires_grad
    assert not out.pg_advantages.requires_grad
    assert out.vs.grad_fn is None and out.pg_advantages.grad_fn is None


def test_does_not_modify_inputs():
    tensors = [torch.tensor(x) for x in _make_inputs(5, 2, seed=1)]
    copies = [t.clone() for t in tensors]
    vtrace.from_importance_weights(*tensors)
    for t, c in zip(tensors, copies):
        assert torch.equal(t, c)


def _good(T=4, B=3):
    return dict(
        log_rhos=torch.zeros(T, B),
        discounts=torch.ones(T, B),
        rewards=torch.zeros(T, B),
        values=torch.zeros(T, B),
        bootstrap_value=torch.zeros(B),
    )


@pytest.mark.parametrize(
    "name,bad,match",
    [
        ("log_rhos", torch.zeros(4, 3, 1), "log_rhos"),
        ("log_rhos", torch.zeros(4), "log_rhos"),
        ("discounts", torch.zeros(4), "discounts"),
        ("rewards", torch.zeros(5, 3), "rewards"),  # mismatched T
        ("values", torch.zeros(4, 2), "values"),  # mismatched B
        ("discounts", torch.zeros(4, 3, 2), "discounts"),
        ("bootstrap_value", torch.zeros(4, 3), "bootstrap_value"),  # wrong rank
        ("bootstrap_value", torch.zeros(2), "bootstrap_value"),  # mismatched B
        ("mask", torch.zeros(4), "mask"),  # wrong rank
        ("mask", torch.zeros(4, 2), "mask"),  # mismatched B
        ("mask", torch.zeros(4, 3, 1, dtype=torch.bool), "mask"),
    ],
)
def test_shape_errors(name, bad, match):
    kwargs = _good()
    kwargs[name] = bad
    with pytest.raises(ValueError, match=match) as info:
        vtrace.from_importance_weights(**kwargs)
    assert str(tuple(bad.shape)) in str(info.value)


@pytest.mark.parametrize("kw", ["clip_rho_threshold", "clip_pg_rho_threshold", "clip_c_threshold"])
@pytest.mark.parametrize("value", [0.0, -1.0, math.nan])
def test_bad_threshold(kw, value):
    with pytest.raises(ValueError, match=kw):
        vtrace.from_importance_weights(**_good(), **{kw: value})


def test_mask_must_be_a_tensor():
    with pytest.raises(TypeError, match="mask"):
        vtrace.from_importance_weights(**_good(), mask=[[1.0] * 3] * 4)
