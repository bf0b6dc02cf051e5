"""A learner step is a small function: it changes the weights, and the flat copy reaches an actor's model."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from zrl.agents.vtrace.learner import sgd_step
from zrl.config import LearnerConfig, ModelConfig
from zrl.gather import Unrolls, stack_observations
from zrl.models import build_model, flat_parameters, load_flat
from zrl.optim import make_optimizer

T, B, A, S = 5, 3, 6, 4


def _unrolls(frames: torch.Tensor) -> Unrolls:
    """Mid-episode unrolls of ``frames [B, T+S, *shape]``: no frame is blanked."""
    b, window = frames.shape[:2]
    return Unrolls(frames, (torch.arange(window, dtype=torch.int32) + 10).repeat(b, 1))


def _batch():
    g = torch.Generator().manual_seed(0)
    return {
        "actions": torch.randint(0, A, (T, B), generator=g),
        "rewards": torch.randn(T, B, generator=g),
        "discounts": torch.ones(T, B),
        "behaviour_logits": torch.randn(T, B, A, generator=g),
        "behaviour_values": torch.randn(T, B, generator=g),
    }


@pytest.mark.unit
@pytest.mark.parametrize("kind, optimizer", [("atari", "rmsprop"), ("atari_small", "rmsprop_tf"), ("atari", "adam")])
def test_sgd_step_changes_weights_and_they_reach_the_actor(kind, optimizer):
    torch.manual_seed(0)
    learner_model = build_model(ModelConfig(kind=kind), (84, 84), "|u1", S, A)
    actor_model = build_model(ModelConfig(kind=kind), (84, 84), "|u1", S, A)
    cfg = LearnerConfig(learning_rate=1e-3, optimizer=optimizer)
    opt, sched = make_optimizer(learner_model, cfg, total_steps=10)
    before = flat_parameters(learner_model)
    frames = torch.randint(0, 256, (B, T + S, 84, 84), dtype=torch.uint8)
    step = sgd_step(learner_model, opt, sched, _unrolls(frames), _batch(), cfg)
    after = flat_parameters(learner_model)
    assert np.isfinite(step.total) and step.grad_norm > 0
    assert not np.allclose(before, after)
    load_flat(actor_model, after)
    with torch.no_grad():
        x = stack_observations(frames, _unrolls(frames).episode_steps, S)[:, 0]
        assert torch.allclose(actor_model(x).logits, learner_model(x).logits)
    assert sched.get_last_lr()[0] < cfg.learning_rate  # the polynomial decay moved


@pytest.mark.unit
@pytest.mark.parametrize("kind", ["atari", "atari_small"])
def test_the_unrolls_forward_equals_the_forward_of_the_stacks(kind):
    """forward_unrolls runs the first convolution over each unroll's frames in 3-d instead of over the stacks:
    the same outputs and gradients up to float rounding, with the frames blanked at an episode start and at a
    run's start, for all T+1 steps, for steps that take the 3-d path and for steps few enough for the stacks."""
    torch.manual_seed(2)
    net = build_model(ModelConfig(kind=kind), (84, 84), "|u1", S, A)
    t = 20
    frames = torch.randint(0, 256, (4, t + S, 84, 84), dtype=torch.uint8)
    steps = (torch.arange(t + S, dtype=torch.int32) + 30).repeat(4, 1)
    steps[1, 7:] = torch.arange(t + S - 7)  # an episode starts at frame 7: stacks 4-6 blank frames
    steps[2, :] = torch.arange(t + S)  # a run's first frames
    for at in (None, np.arange(2, 14), np.array([0, 2, 4, 7, 9, 12, 15, 20]), np.array([0, 10, 20])):
        obs = stack_observations(frames, steps, S, at=at)
        with torch.no_grad():
            want = net(obs.reshape(-1, S, 84, 84), with_features=True)
            got = net.forward_unrolls(frames, steps, at=at, with_features=True)
        for a, b in zip(want, got):
            torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-5)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):  # broker.precision / learner.precision bf16
        want = net(stack_observations(frames, steps, S).reshape(-1, S, 84, 84), with_features=True).features
        got = net.forward_unrolls(frames, steps, with_features=True).features
    assert got.dtype == want.dtype == torch.bfloat16
    torch.testing.assert_close(got.float(), want.float(), rtol=0.02, atol=0.02)
    net.zero_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16):  # and a bf16 learner's backward through the patched stacks
        out = net.forward_unrolls(frames, steps)
    (out.logits.float().square().sum() + out.values.float().sum()).backward()
    conv_grad = net.torso[0].weight.grad
    assert conv_grad is not None and torch.isfinite(conv_grad).all() and conv_grad.abs().sum() > 0
    grads = []
    for forward in (
        lambda: net(stack_observations(frames, steps, S).reshape(-1, S, 84, 84)),
        lambda: net.forward_unrolls(frames, steps),
    ):
        net.zero_grad()
        out = forward()
        (out.logits.square().sum() + out.values.sum()).backward()
        grads.append([p.grad.clone() for p in net.parameters() if p.grad is not None])
    assert len(grads[0]) == len(grads[1]) > 0
    for a, b in zip(*grads):
        torch.testing.assert_close(b, a, rtol=1e-3, atol=1e-5)


@pytest.mark.unit
def test_the_unroll_conv_picked_for_training_leaves_passes_without_gradients_on_the_3d_convolution(monkeypatch):
    """learner.unroll_conv: a fixed choice is set as it is; auto times both paths (under bf16 autocast too) and
    keeps one, except in a deterministic run, which keeps conv3d; a training pass with "stacks" runs no 3-d
    convolution, while a pass without gradients (the broker's features, IMPACT's target)
    still does; an MLP has no choice to make."""
    import torch.nn.functional as F

    from zrl.agents.vtrace.learner import choose_unroll_conv
    from zrl.models import pick_unroll_conv

    torch.manual_seed(3)
    net = build_model(ModelConfig(kind="atari_small"), (84, 84), "|u1", S, A)
    assert pick_unroll_conv(net, "stacks", 2, T + S) == {"unroll_conv": "stacks"} and net.unroll_conv == "stacks"
    picked = pick_unroll_conv(net, "auto", 2, T + S, repeats=1)
    assert picked["unroll_conv"] == net.unroll_conv in ("conv3d", "stacks")
    assert picked["conv3d_s"] > 0 and picked["stacks_s"] > 0
    assert all(p.grad is None for p in net.parameters())  # the timing leaves no gradients behind
    assert set(pick_unroll_conv(net, "auto", 2, T + S, "bf16", repeats=1)) == {"unroll_conv", "conv3d_s", "stacks_s"}
    run = SimpleNamespace(deterministic=True)  # auto keeps a deterministic run on conv3d
    deterministic = SimpleNamespace(learner=LearnerConfig(), run=run, env=SimpleNamespace(frame_stack=S))
    assert choose_unroll_conv(net, deterministic) == {"unroll_conv": "conv3d"} and net.unroll_conv == "conv3d"
    calls = []
    conv3d = F.conv3d
    monkeypatch.setattr(F, "conv3d", lambda *a, **k: calls.append(1) or conv3d(*a, **k))
    frames = torch.randint(0, 256, (2, T + S, 84, 84), dtype=torch.uint8)
    steps = _unrolls(frames).episode_steps
    for choice, grad, want in (("stacks", True, 0), ("stacks", False, 1), ("conv3d", True, 1)):
        pick_unroll_conv(net, choice, 2, T + S)
        calls.clear()
        with torch.set_grad_enabled(grad):
            net.forward_unrolls(frames, steps)
        assert len(calls) == want, (choice, grad)
    assert pick_unroll_conv(build_model(ModelConfig(kind="mlp"), (4,), "<f4", 1, 2), "auto", 2, T + 1) == {}


@pytest.mark.unit
def test_channels_last_weights_travel_in_the_logical_order():
    """The conv nets compute channels-last; their flat weights are in PyTorch's logical (NCHW) order, so a plain
    contiguous copy of the network given them computes the same logits."""
    from zrl.models import AtariNet

    torch.manual_seed(1)
    for kind in ("atari", "atari_small"):
        net = build_model(ModelConfig(kind=kind), (84, 84), "|u1", S, A)
        conv = net.torso[0].weight
        assert conv.is_contiguous(memory_format=torch.channels_last) and not conv.is_contiguous()
        plain = AtariNet(S, A, ModelConfig().hidden_size, ModelConfig().feature_size, kind)
        load_flat(plain, flat_parameters(net))
        assert all(p.is_contiguous() for p in plain.parameters())
        x = torch.randint(0, 256, (2, S, 84, 84), dtype=torch.uint8)
        with torch.no_grad():
            torch.testing.assert_close(plain(x).logits, net(x).logits, rtol=1e-4, atol=1e-5)
            torch.testing.assert_close(plain(x).values, net(x).values, rtol=1e-4, atol=1e-5)


@pytest.mark.unit
def test_no_gradient_clip_still_reports_the_norm():
    model = build_model(ModelConfig(kind="mlp"), (4,), "<f4", 1, A)
    cfg = LearnerConfig(grad_norm_clip=0.0)
    opt, sched = make_optimizer(model, cfg, 10)
    step = sgd_step(model, opt, sched, _unrolls(torch.randn(B, T + 1, 4)), _batch(), cfg)
    assert step.grad_norm > 0 and np.isfinite(step.grad_norm)


@pytest.mark.unit
def test_learning_rate_decays_polynomially_to_the_end_value():
    model = build_model(ModelConfig(kind="mlp"), (4,), "<f4", 1, 2)
    cfg = LearnerConfig(learning_rate=0.01, lr_end=0.001, lr_decay_power=2.0)
    opt, sched = make_optimizer(model, cfg, total_steps=4)
    seen = []
    for _ in range(6):
        seen.append(sched.get_last_lr()[0])
        opt.step()
        sched.step()
    expected = [(0.01 - 0.001) * (1 - min(k, 4) / 4) ** 2 + 0.001 for k in range(6)]
    assert np.allclose(seen, expected)


@pytest.mark.unit
def test_bf16_step_is_finite_and_close_to_fp32():
    torch.manual_seed(1)
    model = build_model(ModelConfig(kind="mlp"), (4,), "<f4", 1, A)
    obs = _unrolls(torch.randn(B, T + 1, 4))
    losses = []
    for precision in ("fp32", "bf16"):
        m = build_model(ModelConfig(kind="mlp"), (4,), "<f4", 1, A)
        m.load_state_dict(model.state_dict())
        cfg = LearnerConfig(precision=precision)
        opt, sched = make_optimizer(m, cfg, 10)
        losses.append(sgd_step(m, opt, sched, obs, _batch(), cfg).total)
    assert abs(losses[0] - losses[1]) <= 0.05 * abs(losses[0]) + 1e-2


_FAULTS_PER_REALLOC = """
import resource, sys, torch
from zrl.roles.lifecycle import keep_freed_memory
kept = keep_freed_memory() if sys.argv[1] == "keep" else False
faults = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_minflt
before = faults()
torch.empty(16 << 20).fill_(1.0)  # 64 MB: its pages (4 KiB, or 2 MiB where huge pages are always on)
first = faults() - before
for _ in range(2):  # allocated and freed again before counting
    torch.empty(16 << 20).fill_(1.0)
before = faults()
for _ in range(10):
    torch.empty(16 << 20).fill_(1.0)
print(kept, first, faults() - before)
"""


@pytest.mark.integration
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_kept_freed_memory_is_reused_without_page_faults():
    """run.keep_freed_memory: a freed 64 MB tensor's memory serves the next one, where by default glibc
    unmaps it and each of the next ten faults its pages in again (counted against the first one's faults)."""

    def faults(mode: str) -> tuple[str, int, int]:
        done = subprocess.run(
            [sys.executable, "-c", _FAULTS_PER_REALLOC, mode], capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr
        kept, first, ten = done.stdout.split()
        return kept, int(first), int(ten)

    kept, first, ten = faults("keep")
    assert kept == "True" and first > 0
    assert ten <= 2 * first  # at most two of the ten fault their pages in again
    _, first, ten = faults("default")
    assert ten >= 9 * first * 0.9


def _iqn_setup(noisy=False, head="iqn"):
    import copy

    from zrl.agents.apex_iqn.config import ApexConfig
    from zrl.models.iqn import build_apex_model

    apex = ApexConfig(noisy=noisy, quantiles=8, target_quantiles=8, acting_quantiles=4, embedding_dim=16, head=head)
    torch.manual_seed(0)
    online = build_apex_model(ModelConfig(kind="mlp", mlp_hidden=(32, 32)), apex, (4,), "float32", 1, 3)
    target = copy.deepcopy(online)
    g = torch.Generator().manual_seed(1)
    batch = dict(
        obs=torch.randn(16, 1, 4, generator=g),
        actions=torch.randint(0, 3, (16,), generator=g),
        next_obs=torch.randn(16, 1, 4, generator=g),
    )
    from zrl.algos.iqn import nstep_returns

    nstep = nstep_returns(torch.randn(16, 3, generator=g), torch.full((16, 3), 0.99))
    return apex, online, target, batch, nstep


@pytest.mark.unit
@pytest.mark.parametrize("head", ["iqn", "c51"])
def test_apex_step_changes_the_online_network_and_returns_new_priorities(head):
    from zrl.agents.apex_iqn.learner import apex_sgd_step

    apex, online, target, b, nstep = _iqn_setup(noisy=True, head=head)
    before = flat_parameters(online).copy()
    target_before = flat_parameters(target).copy()
    opt = torch.optim.Adam(online.parameters(), lr=5e-5, eps=3.125e-4)
    step = apex_sgd_step(online, target, opt, b["obs"], b["actions"], nstep, b["next_obs"], torch.ones(16), apex, 10.0)
    assert not np.array_equal(before, flat_parameters(online))
    np.testing.assert_array_equal(target_before, flat_parameters(target))  # the target moves only when copied
    assert step.priorities.shape == (16,) and (step.priorities > 0).all() and np.isfinite(step.loss)


@pytest.mark.unit
def test_iqn_step_with_zero_importance_weights_changes_nothing():
    from zrl.agents.apex_iqn.learner import apex_sgd_step

    apex, online, target, b, nstep = _iqn_setup()
    before = flat_parameters(online).copy()
    opt = torch.optim.SGD(online.parameters(), lr=0.1)
    step = apex_sgd_step(online, target, opt, b["obs"], b["actions"], nstep, b["next_obs"], torch.zeros(16), apex, 0.0)
    np.testing.assert_array_equal(before, flat_parameters(online))
    assert (step.priorities > 0).all()  # the losses, and so the priorities, are there all the same


@pytest.mark.unit
def test_the_atari_iqn_network_takes_stacked_frames():
    from zrl.agents.apex_iqn.config import ApexConfig
    from zrl.models.iqn import build_iqn_model

    net = build_iqn_model(ModelConfig(), ApexConfig(), (84, 84), "uint8", 4, 6)
    obs = torch.randint(0, 256, (2, 4, 84, 84), dtype=torch.uint8)
    assert net(obs, torch.rand(2, 8)).shape == (2, 8, 6)
    assert net.q_values(obs, 32).shape == (2, 6)


@pytest.mark.unit
def test_impact_trains_against_a_target_network_copied_every_target_update_steps_and_checkpointed():
    from types import SimpleNamespace

    from zrl.agents.impact.learner import ImpactLearner
    from zrl.config import load

    torch.manual_seed(0)
    sets = ["algo=impact", "impact.target_update_steps=3", "model.kind=atari_small", "learner.batch_size=3"]
    sets.append("learner.entropy_decay_frames=2000")  # its weight falls each step, and is reported
    sets.append('replay=[{"type": "queue", "capacity": 64, "sample_ratio": 1.0}]')  # a circular buffer alone
    cfg = load(None, [*sets, f"learner.unroll_length={T}", f"env.frame_stack={S}"])
    wiring = SimpleNamespace(frame_shape=(84, 84), frame_dtype="|u1", num_actions=A, frames_per_step=4)
    learner = ImpactLearner(cfg, wiring, [], torch.device("cpu"))
    frames = torch.randint(0, 256, (B, T + S, 84, 84), dtype=torch.uint8)

    def same(a, b) -> bool:
        return np.array_equal(flat_parameters(a), flat_parameters(b))

    for step in range(1, 7):
        before = flat_parameters(learner.model)
        figures = learner.update(_unrolls(frames), _batch(), step)
        assert not np.array_equal(before, flat_parameters(learner.model))
        assert same(learner.target.net, learner.model) == (step % 3 == 0), step
        assert all(np.isfinite(v) for v in figures.values()) and figures["grad_norm"] > 0
    assert {"clip_fraction", "target_kl", "mean_rho", "pg_loss"} <= set(figures)
    assert cfg.learner.entropy_cost > figures["entropy_cost"] == pytest.approx(learner.entropy_cost(6))
    assert figures["entropy_cost"] < learner.entropy_cost(5)
    assert not any(p.requires_grad for p in learner.target.net.parameters())

    learner.update(_unrolls(frames), _batch(), 7)  # the target now lags the network
    resumed = ImpactLearner(cfg, wiring, [], torch.device("cpu"))
    resumed.load(learner.state(), resume=True, optimizer=True)
    assert same(resumed.target.net, learner.target.net) and same(resumed.model, learner.model)
    assert not same(resumed.target.net, resumed.model)
    no_target = {k: v for k, v in learner.state().items() if k != "target"}  # a V-trace checkpoint
    resumed.load(no_target, resume=False, optimizer=False)
    assert same(resumed.target.net, learner.model)


@pytest.mark.unit
def test_the_replay_index_is_asked_for_at_doubling_steps_and_every_few_seconds():
    from zrl.roles.learner import IndexSchedule

    due = IndexSchedule(every_s=10.0)
    asked = [s for s in range(40) if due.due(s, now=1.0)]  # the clock stands still: the steps alone
    assert asked == [0, 1, 2, 4, 8, 16, 32]
    assert not due.due(63, now=10.9) and due.due(63, now=11.0)  # 10 s after the last request
    assert not due.due(63, now=12.0) and due.due(64, now=12.0)
    assert due.due(1000, now=12.0) and not due.due(1023, now=12.0) and due.due(1024, now=12.0)  # a jump of steps
    resumed = IndexSchedule(every_s=10.0)  # a resumed launch counts its steps from its own first
    assert [s for s in range(5) if resumed.due(s, now=0.0)] == [0, 1, 2, 4]
