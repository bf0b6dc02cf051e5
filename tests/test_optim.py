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
