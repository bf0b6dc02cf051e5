"""TFRMSprop against TensorFlow 1's RMSProp update written out in numpy, step by step, and against PyTorch's
RMSprop where the two must differ."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from zrl.optim import TFRMSprop

pytestmark = pytest.mark.unit


def _tf_reference(p0, grads, lr, alpha, eps, momentum):
    """ms starts at 1; mom = momentum * mom + lr * g / sqrt(ms + eps); p -= mom."""
    p, ms, mom = p0.astype(np.float64).copy(), np.ones_like(p0, np.float64), np.zeros_like(p0, np.float64)
    for g in grads:
        ms = alpha * ms + (1 - alpha) * g**2
        mom = momentum * mom + lr * g / np.sqrt(ms + eps)
        p = p - mom
    return p


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_tf_rmsprop_follows_tensorflows_update(momentum):
    rng = np.random.default_rng(0)
    p0 = rng.standard_normal(17).astype(np.float32)
    grads = [rng.standard_normal(17).astype(np.float32) * scale for scale in (100.0, 0.01, 3.0, 1e-4, 10.0)]
    param = torch.nn.Parameter(torch.from_numpy(p0.copy()))
    opt = TFRMSprop([param], lr=0.01, alpha=0.9, eps=0.1, momentum=momentum)
    for g in grads:
        param.grad = torch.from_numpy(g)
        opt.step()
    expected = _tf_reference(p0, grads, 0.01, 0.9, 0.1, momentum)
    np.testing.assert_allclose(param.detach().numpy(), expected, rtol=1e-5, atol=1e-6)


def test_its_first_step_is_lr_times_the_gradient_where_pytorchs_is_ten_lr_in_every_coordinate():
    """The instability the IMPALA reference did not have: PyTorch's RMSprop (ms from 0, alpha 0.99, a small eps)
    moves every coordinate by about 10 x lr on the first step, however small its gradient."""
    g = torch.tensor([1e-3, 1.0, 30.0])
    steps = {}
    for name, make in (
        ("tf", lambda p: TFRMSprop([p], lr=1e-3, alpha=0.99, eps=1e-8)),
        ("torch", lambda p: torch.optim.RMSprop([p], lr=1e-3, alpha=0.99, eps=1e-8)),
    ):
        p = torch.nn.Parameter(torch.zeros(3))
        p.grad = g.clone()
        make(p).step()
        steps[name] = -p.detach()
    torch.testing.assert_close(steps["torch"], torch.full((3,), 1e-2), rtol=1e-3, atol=0)
    expected = 1e-3 * g / torch.sqrt(0.99 + 0.01 * g**2 + 1e-8)
    torch.testing.assert_close(steps["tf"], expected, rtol=1e-5, atol=0)


def test_bad_hyperparameters_are_refused():
    p = torch.nn.Parameter(torch.zeros(2))
    with pytest.raises(ValueError, match="eps > 0"):
        TFRMSprop([p], lr=1e-3, eps=0.0)


def test_its_state_round_trips_through_a_state_dict():
    """Checkpoints hold the optimiser state: a reloaded TFRMSprop takes the same next step."""
    torch.manual_seed(0)
    a, b = torch.nn.Parameter(torch.randn(5)), torch.nn.Parameter(torch.zeros(5))
    opt_a = TFRMSprop([a], lr=0.01, momentum=0.5)
    for _ in range(3):
        a.grad = torch.randn(5)
        opt_a.step()
    with torch.no_grad():
        b.copy_(a)
    opt_b = TFRMSprop([b], lr=0.01, momentum=0.5)
    opt_b.load_state_dict(copy.deepcopy(opt_a.state_dict()))  # as from a file: no tensor shared with opt_a
    g = torch.randn(5)
    a.grad, b.grad = g.clone(), g.clone()
    opt_a.step()
    opt_b.step()
    torch.testing.assert_close(a, b)


def _rates(cfg, total_steps: int, steps: int) -> list[float]:
    from zrl.optim import make_optimizer

    opt, sched = make_optimizer(torch.nn.Linear(2, 1), cfg, total_steps)
    out = []
    for _ in range(steps):
        out.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return out


def test_the_multistep_schedule_lowers_the_rate_as_torchs_multisteplr_does():
    from zrl.config import LearnerConfig

    cfg = LearnerConfig(
        optimizer="adam", learning_rate=0.01, lr_schedule="multistep", lr_milestones=(3, 7), lr_gamma=0.5
    )
    reference_opt = torch.optim.Adam(torch.nn.Linear(2, 1).parameters(), lr=0.01)
    reference = torch.optim.lr_scheduler.MultiStepLR(reference_opt, milestones=[3, 7], gamma=0.5)
    expected = []
    for _ in range(10):
        expected.append(reference_opt.param_groups[0]["lr"])
        reference_opt.step()
        reference.step()
    assert _rates(cfg, 10**6, 10) == pytest.approx(expected)
    assert expected[:3] == [0.01] * 3 and expected[3] == pytest.approx(0.005) and expected[9] == pytest.approx(0.0025)


def test_the_polynomial_schedule_with_power_2_is_the_reference_platforms_decay():
    """The reference's PolynomialLRDecay: lr(k) = (lr0 - lr_end) (1 - k/L)^2 + lr_end, then lr_end past L."""
    from zrl.config import LearnerConfig

    lr0, end, total = 0.0008, 0.00001, 8
    cfg = LearnerConfig(optimizer="adam", learning_rate=lr0, lr_end=end, lr_decay_power=2.0)
    expected = [(lr0 - end) * (1 - min(k, total) / total) ** 2 + end for k in range(12)]
    assert _rates(cfg, total, 12) == pytest.approx(expected)


@pytest.mark.parametrize(
    "sets, match",
    [
        (["learner.lr_schedule=cosine"], "learner.lr_schedule.*polynomial.*multistep"),
        (["learner.lr_schedule=multistep"], "learner.lr_milestones.*at least one"),
        (["learner.lr_schedule=multistep", "learner.lr_milestones=[500, 100]"], "learner.lr_milestones.*rising"),
        (["learner.lr_gamma=0"], "learner.lr_gamma"),
    ],
)
def test_a_bad_schedule_is_a_config_error_naming_the_key(sets, match):
    from zrl.config import ConfigError, load

    with pytest.raises(ConfigError, match=match):
        load(None, sets)
