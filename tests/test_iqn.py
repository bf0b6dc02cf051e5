"""IQN's numerics against hand-computed cases."""

from __future__ import annotations

import math

import pytest
import torch

from zrl.algos.iqn import (
    NStep,
    cosine_basis,
    double_q_targets,
    greedy_actions,
    iqn_losses,
    nstep_returns,
    quantile_huber_loss,
)

pytestmark = pytest.mark.unit


def test_quantile_huber_loss_matches_a_hand_computed_case():
    """Quantiles 0 and 1 at taus 0.25 and 0.75 against targets 0.5 and 3, kappa 1.

    delta = target - quantile: row tau=0.25: 0.5, 3; row tau=0.75: -0.5, 2.
    Huber: 0.125, 2.5; 0.125, 1.5. Weights |tau - 1{delta<0}|: 0.25, 0.25; 0.25, 0.75.
    Means over the targets: (0.03125 + 0.625) / 2 = 0.328125; (0.03125 + 1.125) / 2 = 0.578125. Sum: 0.90625.
    """
    q = torch.tensor([[0.0, 1.0]], requires_grad=True)
    loss = quantile_huber_loss(q, torch.tensor([[0.25, 0.75]]), torch.tensor([[0.5, 3.0]]), kappa=1.0)
    assert loss.shape == (1,)
    assert loss.item() == pytest.approx(0.90625)
    loss.sum().backward()
    # d/dq of row 0: -(0.25 * 0.5 + 0.25 * 1) / 2; row 1: -(-0.25 * 0.5 + 0.75 * 1) / 2 (Huber's slope clipped at 1)
    torch.testing.assert_close(q.grad, torch.tensor([[-0.1875, -0.3125]]))


def test_quantile_huber_loss_with_a_larger_kappa_is_quadratic_longer():
    q, taus, t = torch.tensor([[0.0]]), torch.tensor([[0.5]]), torch.tensor([[3.0]])
    assert quantile_huber_loss(q, taus, t, kappa=1.0).item() == pytest.approx(0.5 * 2.5)
    assert quantile_huber_loss(q, taus, t, kappa=4.0).item() == pytest.approx(0.5 * 4.5 / 4.0)


def test_nstep_double_q_target_with_an_episode_end_inside_the_n_steps():
    gamma = 0.9
    rewards = torch.tensor([[1.0, 2.0, 5.0], [1.0, 1.0, 1.0]])
    # Row 0: the step at k = 1 ends the episode (discount 0): the reward 5 belongs to the next episode.
    discounts = torch.tensor([[gamma, 0.0, gamma], [gamma, gamma, gamma]])
    nstep = nstep_returns(rewards, discounts)
    torch.testing.assert_close(nstep.returns, torch.tensor([1 + 0.9 * 2, 1 + 0.9 + 0.81]))
    torch.testing.assert_close(nstep.bootstrap_discount, torch.tensor([0.0, 0.729]))
    # Online network: action 1 has the larger mean; the target network would prefer action 0 (double Q: no).
    online_next = torch.tensor([[[0.0, 1.0], [0.0, 3.0]]]).expand(2, 2, 2)  # [B, K, A]
    target_next = torch.tensor([[[10.0, 2.0], [10.0, 4.0], [10.0, 6.0]]]).expand(2, 3, 2)  # [B, N', A]
    targets = double_q_targets(nstep, online_next, target_next)
    assert targets.shape == (2, 3)
    torch.testing.assert_close(targets[0], torch.full((3,), 2.8))  # the end cuts the bootstrap
    torch.testing.assert_close(targets[1], 2.71 + 0.729 * torch.tensor([2.0, 4.0, 6.0]))


def test_greedy_actions_take_the_largest_mean_quantile():
    quantiles = torch.tensor([[[0.0, 5.0, 1.0], [0.0, -4.0, 1.0]]])  # means 0, 0.5, 1
    assert greedy_actions(quantiles).tolist() == [2]


def test_cosine_basis_is_the_papers_embedding():
    taus = torch.tensor([[0.0, 0.5, 1.0]])
    basis = cosine_basis(taus, 4)
    assert basis.shape == (1, 3, 4)
    torch.testing.assert_close(basis[0, 1], torch.tensor([math.cos(math.pi * i * 0.5) for i in range(4)]))
    torch.testing.assert_close(basis[0, :, 0], torch.ones(3))


def test_shapes_that_do_not_fit_are_refused():
    with pytest.raises(ValueError, match="want"):
        quantile_huber_loss(torch.zeros(2, 3), torch.zeros(2, 4), torch.zeros(2, 5))
    with pytest.raises(ValueError, match="want"):
        nstep_returns(torch.zeros(2, 3), torch.zeros(2, 2))
    assert isinstance(nstep_returns(torch.zeros(1, 1), torch.zeros(1, 1)), NStep)


def _net(noisy: bool = True):
    from torch import nn

    from zrl.models.iqn import IQNNet

    torch.manual_seed(0)
    torso = nn.Sequential(nn.Flatten(), nn.Linear(8, 16), nn.ReLU())
    return IQNNet(torso, 16, 3, embedding_dim=8, hidden=32, noisy=noisy, scale=False)


def test_noisy_layers_differ_in_train_mode_and_repeat_in_eval_mode():
    from zrl.models.iqn import NoisyLinear

    layer = NoisyLinear(5, 4, sigma0=0.5)
    x = torch.randn(3, 5)
    layer.train()
    assert not torch.allclose(layer(x), layer(x))
    layer.eval()
    torch.testing.assert_close(layer(x), layer(x))
    torch.testing.assert_close(layer(x), x @ layer.weight_mu.T + layer.bias_mu)
    # sigma0 / sqrt(fan-in): the paper's initialisation for factorised noise
    torch.testing.assert_close(layer.weight_sigma, torch.full((4, 5), 0.5 / math.sqrt(5)))


def test_iqn_net_gives_quantiles_per_fraction_and_action():
    net = _net()
    obs, taus = torch.randn(2, 1, 8), torch.rand(2, 5)
    net.eval()
    q = net(obs, taus)
    assert q.shape == (2, 5, 3)
    torch.testing.assert_close(net(obs, taus), q)  # eval: no noise
    # Quantiles at a larger fraction are not below those at a smaller one for a trained net only; here
    # only the dependence on tau is checked: other fractions, other values.
    assert not torch.allclose(net(obs, torch.rand(2, 5)), q)
    net.train()
    assert not torch.allclose(net(obs, taus), net(obs, taus))
    assert net.q_values(obs, 32).shape == (2, 3)


def test_c51_projection_matches_a_hand_computed_case():
    from zrl.algos.c51 import cross_entropy, project, support

    atoms = support(5, -2.0, 2.0)  # -2, -1, 0, 1, 2
    probs = torch.tensor([[0.0, 0.0, 1.0, 0.0, 0.0], [0.2, 0.2, 0.2, 0.2, 0.2], [0.0, 0.0, 0.0, 0.0, 1.0]])
    returns = torch.tensor([0.5, 0.0, 1.0])
    discounts = torch.tensor([0.9, 0.0, 0.5])
    out = project(returns, discounts, probs, atoms)
    # Row 0: all mass at 0.5 + 0.9 * 0 = 0.5, split half to 0 and half to 1.
    torch.testing.assert_close(out[0], torch.tensor([0.0, 0.0, 0.5, 0.5, 0.0]))
    # Row 1: the episode ended: every atom lands on the return 0.
    torch.testing.assert_close(out[1], torch.tensor([0.0, 0.0, 1.0, 0.0, 0.0]))
    # Row 2: 1 + 0.5 * 2 = 2, exactly the top atom.
    torch.testing.assert_close(out[2], torch.tensor([0.0, 0.0, 0.0, 0.0, 1.0]))
    torch.testing.assert_close(out.sum(dim=1), torch.ones(3))
    assert cross_entropy(torch.log(out.clamp_min(1e-6)), out).shape == (3,)


def test_apex_worker_epsilons_follow_the_schedule():
    from zrl.algos.apex import worker_epsilons

    eps = worker_epsilons(8)
    assert eps[0] == pytest.approx(0.4) and eps[-1] == pytest.approx(0.4**8)
    assert eps[3] == pytest.approx(0.4 ** (1 + 7 * 3 / 7))
    assert (eps[1:] < eps[:-1]).all()
    assert worker_epsilons(1).tolist() == [0.4]


def _run_builder(n, rewards, discounts, game_over):
    import numpy as np

    from zrl.algos.apex import NStepBuilder

    builder = NStepBuilder(1, n)
    out = []
    for t in range(len(rewards)):
        got = builder.step(
            np.array([100 + t]),
            np.array([t % 3]),
            np.array([rewards[t]], np.float32),
            np.array([discounts[t]], np.float32),
            np.array([game_over[t]]),
            np.array([101 + t]),
        )
        out += [
            (t, int(f) - 100, float(r), float(d), int(nf) - 100)
            for f, r, d, nf in zip(got["frame"], got["nstep_return"], got["bootstrap_discount"], got["next_frame"])
        ]
    return out


def test_nstep_builder_emits_each_transition_once_with_its_return():
    g = 0.5
    rewards = [1.0, 2.0, 4.0, 8.0, 16.0]
    out = _run_builder(3, rewards, [g] * 5, [False] * 5)
    # (emitted at step, transition t, return, bootstrap discount, frame of s_{t+3})
    assert out == [(2, 0, 1 + 0.5 * 2 + 0.25 * 4, 0.125, 3), (3, 1, 2 + 2 + 2, 0.125, 4), (4, 2, 4 + 4 + 4, 0.125, 5)]


def test_nstep_builder_cuts_windows_at_an_episode_end():
    g = 0.5
    rewards = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0]
    discounts = [g, g, g, 0.0, g, g]  # step 3 ends the episode (a reset follows)
    over = [False, False, False, True, False, False]
    out = _run_builder(3, rewards, discounts, over)
    assert out[:4] == [
        (2, 0, 1 + 1 + 1, 0.125, 3),
        (3, 1, 2 + 2 + 0.25 * 8, 0.0, 4),
        (3, 2, 4 + 0.5 * 8, 0.0, 4),
        (3, 3, 8.0, 0.0, 4),
    ]
    assert out[4:] == []  # the new episode has only 2 steps: nothing complete yet
    # Every step of the first episode was emitted exactly once.
    assert sorted(t for _, t, *_ in out) == [0, 1, 2, 3]


def test_nstep_builder_drops_windows_a_truncation_cuts():
    out = _run_builder(2, [1.0] * 4, [0.9] * 4, [False, True, False, False])
    # Step 1 is a truncation (the game is over without a terminal discount): steps 0 and 1 never complete.
    assert [t for _, t, *_ in out] == [2]


def test_iqn_losses_train_the_online_network_only_and_fall_on_a_fixed_batch():
    import copy

    net = _net()
    target = copy.deepcopy(net)
    g = torch.Generator().manual_seed(0)
    obs, next_obs = torch.randn(16, 1, 8, generator=g), torch.randn(16, 1, 8, generator=g)
    actions = torch.randint(0, 3, (16,), generator=g)
    nstep = nstep_returns(torch.randn(16, 3, generator=g), torch.full((16, 3), 0.9))
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    net.eval()  # no noise: the fall of the loss is the optimiser's, not luck's
    target.eval()
    first = None
    for step in range(300):
        losses = iqn_losses(
            net,
            target,
            obs,
            actions,
            nstep,
            next_obs,
            n=16,
            n_target=16,
            k=8,
            generator=torch.Generator().manual_seed(step),
        )
        assert losses.shape == (16,) and (losses >= 0).all()
        opt.zero_grad()
        losses.mean().backward()
        if step == 0:
            first = losses.mean().item()
            assert all(p.grad is None for p in target.parameters())
        opt.step()
    assert losses.mean().item() < 0.5 * first


def test_epsilon_greedy_explores_at_its_rate_and_is_greedy_otherwise():
    import numpy as np

    from zrl.algos.apex import epsilon_greedy

    q = np.tile(np.array([[0.0, 2.0, 1.0]]), (20_000, 1))
    rng = np.random.default_rng(0)
    assert (epsilon_greedy(q, 0.0, rng) == 1).all()
    actions = epsilon_greedy(q, 0.3, rng)
    # Greedy 70% of the time, plus a third of the 30% that explore: 0.8 of the actions are 1.
    assert abs((actions == 1).mean() - 0.8) < 0.01
    assert abs((actions == 0).mean() - 0.1) < 0.01


def test_worker_priorities_are_the_losses_to_the_power_omega():
    from zrl.agents.apex_iqn.config import ApexConfig
    from zrl.algos.apex import first_priorities

    net = _net()
    net.eval()
    g = torch.Generator().manual_seed(0)
    obs, next_obs = torch.randn(6, 1, 8, generator=g), torch.randn(6, 1, 8, generator=g)
    actions = torch.randint(0, 3, (6,), generator=g)
    nstep = nstep_returns(torch.randn(6, 3, generator=g), torch.full((6, 3), 0.9))
    losses = iqn_losses(
        net, net, obs, actions, nstep, next_obs, n=8, n_target=8, k=4, generator=torch.Generator().manual_seed(5)
    ).detach()
    apex = ApexConfig(quantiles=8, target_quantiles=8, acting_quantiles=4, priority_exponent=0.5)
    p = first_priorities(net, obs, actions, nstep, next_obs, apex, generator=torch.Generator().manual_seed(5))
    torch.testing.assert_close(p, losses.sqrt())


def test_c51_loss_takes_the_online_action_and_the_target_distribution():
    """Atoms 0, 1, 2; one transition, action 0 taken, return 0.5, bootstrap discount 0.5.

    At the next state the online network prefers action 1 (its expected returns 0.2 and 1.8); the target
    network rates action 0 higher (2 against 1), so plain max-Q would take action 0 and double Q takes 1.
    The target network's distribution of action 1 is [0.5, 0, 0.5]: its atom 0 lands on 0.5 + 0.5 * 0 = 0.5
    (half to atoms 0 and 1), its atom 2 on 1.5 (half to atoms 1 and 2): the target is [0.25, 0.5, 0.25].
    The online distribution of action 0 at the state is [0.2, 0.5, 0.3]: the loss is
    -(0.25 ln 0.2 + 0.5 ln 0.5 + 0.25 ln 0.3).
    """
    from zrl.algos.c51 import c51_losses, support

    atoms = support(3, 0.0, 2.0)
    at_state = torch.tensor([[0.2, 0.5, 0.3], [1 / 3, 1 / 3, 1 / 3]])
    online_next = torch.tensor([[0.9, 0.0, 0.1], [0.1, 0.0, 0.9]])  # expected 0.2 and 1.8
    target_next = torch.tensor([[0.0, 0.0, 1.0], [0.5, 0.0, 0.5]])  # expected 2 and 1

    def net(table_next):
        def call(obs):  # obs 0: the state; obs 1: the n-th next state
            table = torch.where(obs.view(-1, 1, 1) == 0, at_state, table_next)
            return table.log()

        return call

    obs, next_obs = torch.zeros(1, 1), torch.ones(1, 1)
    nstep = NStep(torch.tensor([0.5]), torch.tensor([0.5]))
    loss = c51_losses(net(online_next), net(target_next), obs, torch.tensor([0]), nstep, next_obs, atoms)
    expected = -(0.25 * math.log(0.2) + 0.5 * math.log(0.5) + 0.25 * math.log(0.3))
    assert loss.shape == (1,) and loss.item() == pytest.approx(expected, rel=1e-5)
    ended = c51_losses(
        net(online_next),
        net(target_next),
        obs,
        torch.tensor([0]),
        NStep(torch.tensor([2.0]), torch.tensor([0.0])),
        next_obs,
        atoms,
    )
    assert ended.item() == pytest.approx(-math.log(0.3), rel=1e-5)  # an episode end: all mass on the return


def test_c51_net_gives_a_distribution_per_action_and_its_expectation_as_q():
    from torch import nn

    from zrl.algos.c51 import support
    from zrl.models.iqn import C51Net

    torch.manual_seed(0)
    net = C51Net(
        nn.Sequential(nn.Flatten(), nn.Linear(8, 16), nn.ReLU()), 16, 3, support(11, -5.0, 5.0), hidden=32, scale=False
    )
    obs = torch.randn(2, 1, 8)
    net.eval()
    log_probs = net(obs)
    assert log_probs.shape == (2, 3, 11)
    torch.testing.assert_close(log_probs.exp().sum(dim=-1), torch.ones(2, 3))
    torch.testing.assert_close(net.q_values(obs), (log_probs.exp() * torch.linspace(-5, 5, 11)).sum(dim=-1))
    torch.testing.assert_close(net(obs), log_probs)  # eval: the noisy layers at their means
    net.train()
    assert not torch.allclose(net(obs), net(obs))


@pytest.mark.parametrize("head", ["iqn", "c51"])
def test_a_state_layer_narrows_what_the_heads_take_and_zero_keeps_the_papers_network(head):
    """apex.state_size = 256 puts a 2,592 -> 256 layer after the small conv torso, so each quantile row of the
    dueling heads costs 256 x hidden instead of 2,592 x hidden; 0 is the papers' network, parameter for
    parameter (a checkpoint of a run from before the key still loads)."""
    from zrl.agents.apex_iqn.config import ApexConfig
    from zrl.config import ModelConfig
    from zrl.models import SMALL_CONV_OUT
    from zrl.models.iqn import build_apex_model

    model = ModelConfig(kind="atari_small", hidden_size=64)
    plain = build_apex_model(model, ApexConfig(head=head), (84, 84), "uint8", 4, 6)
    narrow = build_apex_model(model, ApexConfig(head=head, state_size=256), (84, 84), "uint8", 4, 6)
    first_head_layer = {n: p.shape for n, p in narrow.named_parameters()}["head.value.0.weight_mu"]
    assert first_head_layer == (64, 256)
    assert {n: p.shape for n, p in plain.named_parameters()}["head.value.0.weight_mu"] == (64, SMALL_CONV_OUT)
    old_layout = build_apex_model(model, ApexConfig(head=head), (84, 84), "uint8", 4, 6)
    old_layout.load_state_dict(plain.state_dict())  # state_size 0: the same names and shapes as before the key
    with pytest.raises(RuntimeError):
        narrow.load_state_dict(plain.state_dict())
    obs = torch.randint(0, 256, (3, 4, 84, 84), dtype=torch.uint8)
    narrow.eval()
    if head == "iqn":
        assert narrow(obs, torch.rand(3, 5)).shape == (3, 5, 6)
    else:
        assert narrow(obs).shape == (3, 6, ApexConfig().atoms)
    assert narrow.q_values(obs, 4).shape == (3, 6)
