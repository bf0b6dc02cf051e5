"""Rainbow's value networks: a torso (the Nature conv net, or an MLP for vector observations) and dueling heads
of factorised noisy linear layers, under one of two distributional heads.

- IQN: ``IQNNet(obs [B, stack, *frame_shape], taus [B, N])`` returns quantiles ``[B, N, A]`` at the
  fractions ``taus``, through the IQN cosine embedding; the mean over the N is the Q-value.
- C51 ("Rainbow only"): ``C51Net(obs)`` returns log-probabilities ``[B, A, atoms]`` on a fixed support;
  the expectation under them is the Q-value.

Both answer ``q_values(obs, k, generator)``. In train mode the noisy layers draw new noise at every forward
pass; in eval mode they use their means only.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from zrl.algos.iqn import cosine_basis
from zrl.models import scaled_frames


def _scaled_noise(n: int, generator: torch.Generator | None, device) -> torch.Tensor:
    if generator is not None and generator.device != torch.device(device):  # a CPU generator for a GPU layer
        x = torch.randn(n, generator=generator, device=generator.device).to(device)
    else:
        x = torch.randn(n, generator=generator, device=device)
    return x.sign() * x.abs().sqrt()


class NoisyLinear(nn.Module):
    """A linear layer with factorised Gaussian noise on its weights and biases (Fortunato et al. 2018):
    ``w = mu_w + sigma_w * (f(eps_out) f(eps_in)^T)``, ``f(x) = sign(x) sqrt(|x|)``, sigma initialised to
    ``sigma0 / sqrt(in_features)``."""

    def __init__(self, in_features: int, out_features: int, sigma0: float = 0.1) -> None:
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        bound = 1.0 / math.sqrt(in_features)
        self.weight_mu = nn.Parameter(torch.empty(out_features, in_features).uniform_(-bound, bound))
        self.bias_mu = nn.Parameter(torch.empty(out_features).uniform_(-bound, bound))
        self.weight_sigma = nn.Parameter(torch.full((out_features, in_features), sigma0 * bound))
        self.bias_sigma = nn.Parameter(torch.full((out_features,), sigma0 * bound))
        self.generator: torch.Generator | None = None  # a seeded one makes the noise repeatable

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training:
            return F.linear(x, self.weight_mu, self.bias_mu)
        eps_in = _scaled_noise(self.in_features, self.generator, x.device)
        eps_out = _scaled_noise(self.out_features, self.generator, x.device)
        weight = self.weight_mu + self.weight_sigma * torch.outer(eps_out, eps_in)
        return F.linear(x, weight, self.bias_mu + self.bias_sigma * eps_out)


class DuelingHead(nn.Module):
    """``Q = V + A - mean(A)`` from two two-layer streams, noisy or plain: ``[..., A]``; with ``atoms`` > 0,
    the same per atom (Rainbow's dueling over the atoms' logits): ``[..., A, atoms]``."""

    def __init__(self, width: int, hidden: int, num_actions: int, noisy: bool, sigma0: float, atoms: int = 0) -> None:
        super().__init__()

        def linear(i: int, o: int) -> nn.Module:
            return NoisyLinear(i, o, sigma0) if noisy else nn.Linear(i, o)

        self.atoms = atoms
        per = max(atoms, 1)
        self.value = nn.Sequential(linear(width, hidden), nn.ReLU(), linear(hidden, per))
        self.advantage = nn.Sequential(linear(width, hidden), nn.ReLU(), linear(hidden, num_actions * per))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        value, advantage = self.value(x), self.advantage(x)
        if self.atoms:
            value = value.unsqueeze(-2)  # [..., 1, atoms]
            advantage = advantage.unflatten(-1, (-1, self.atoms))  # [..., A, atoms]
            return value + advantage - advantage.mean(dim=-2, keepdim=True)
        return value + advantage - advantage.mean(dim=-1, keepdim=True)


class IQNNet(nn.Module):
    """Quantiles ``[B, N, A]`` of the return of each action at the fractions ``taus [B, N]``. Its torso takes
    NCHW, not channels-last (unlike AtariNet's): IQN's update was slower channels-last, on AMD and Intel CPUs."""

    def __init__(
        self,
        torso: nn.Module,
        width: int,
        num_actions: int,
        *,
        embedding_dim: int = 64,
        hidden: int = 512,
        noisy: bool = True,
        sigma0: float = 0.1,
        scale: bool = True,
    ) -> None:
        super().__init__()
        self.torso = torso
        self.embedding_dim = embedding_dim
        self.tau_embedding = nn.Linear(embedding_dim, width)
        self.head = DuelingHead(width, hidden, num_actions, noisy, sigma0)
        self.num_actions = num_actions
        self._scale = scale

    def forward(self, obs: torch.Tensor, taus: torch.Tensor) -> torch.Tensor:
        state = self.torso(scaled_frames(obs, self._scale))  # [B, width]
        b, n = taus.shape
        if len(state) != b:
            raise ValueError(f"{len(state)} observations but taus for {b}")
        phi = F.relu(self.tau_embedding(cosine_basis(taus, self.embedding_dim)))  # [B, N, width]
        return self.head(state.unsqueeze(1) * phi)  # [B, N, A]

    def q_values(self, obs: torch.Tensor, k: int, generator: torch.Generator | None = None) -> torch.Tensor:
        """Q ``[B, A]``: the mean of ``k`` quantiles at uniformly drawn fractions."""
        taus = torch.rand(len(obs), k, generator=generator, device=obs.device)
        return self(obs, taus).mean(dim=1)


class C51Net(nn.Module):
    """Log-probabilities ``[B, A, atoms]`` of the return of each action on the support ``atoms`` (a buffer,
    evenly spaced from v_min to v_max)."""

    def __init__(
        self,
        torso: nn.Module,
        width: int,
        num_actions: int,
        support: torch.Tensor,
        *,
        hidden: int = 512,
        noisy: bool = True,
        sigma0: float = 0.1,
        scale: bool = True,
    ) -> None:
        super().__init__()
        self.torso = torso
        self.register_buffer("support", support.clone())
        self.head = DuelingHead(width, hidden, num_actions, noisy, sigma0, atoms=len(support))
        self.num_actions = num_actions
        self._scale = scale

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return F.log_softmax(self.head(self.torso(scaled_frames(obs, self._scale))), dim=-1)

    def q_values(self, obs: torch.Tensor, k: int = 0, generator: torch.Generator | None = None) -> torch.Tensor:
        """Q ``[B, A]``: the expected return under each action's distribution (``k`` and ``generator`` are
        IQN's and unused here)."""
        return (self(obs).exp() * self.support).sum(dim=-1)


def _torso(cfg, frame_shape: tuple[int, ...], stack: int, state_size: int = 0) -> tuple[nn.Module, int, int]:
    """The torso for ``cfg`` (a ModelConfig), its output width and the heads' hidden width: a conv torso for
    84x84 frames (Nature's, or the small one), an MLP otherwise; with ``state_size`` > 0 a linear layer and
    ReLU of that width follow (``apex.state_size``)."""
    import numpy as np

    from zrl.models import IMAGE_KINDS, _init, conv_torso, model_kind

    kind = model_kind(cfg, frame_shape)
    if kind in IMAGE_KINDS:
        convs, width = conv_torso(kind, stack, frame_shape)
        merge = [nn.Flatten(1, 2)] if len(frame_shape) == 3 else []  # a colour stack's [stack, 3] channels as one
        layers, hidden = merge + list(convs), cfg.hidden_size
    else:
        layers, width = [nn.Flatten()], stack * int(np.prod(frame_shape))
        for w in cfg.mlp_hidden:
            layers += [_init(nn.Linear(width, w), math.sqrt(2)), nn.ReLU()]
            width = w
        hidden = max(cfg.mlp_hidden)
    if state_size:
        layers += [_init(nn.Linear(width, state_size), math.sqrt(2)), nn.ReLU()]
        width = state_size
    return nn.Sequential(*layers), width, hidden


def build_iqn_model(cfg, apex, frame_shape: tuple[int, ...], frame_dtype: str, stack: int, num_actions: int) -> IQNNet:
    """The IQN network for ``cfg`` (a ModelConfig) with ``apex``'s (an ApexConfig) embedding, dueling noisy
    heads and sigma0."""
    import numpy as np

    torso, width, hidden = _torso(cfg, frame_shape, stack, apex.state_size)
    return IQNNet(
        torso,
        width,
        num_actions,
        embedding_dim=apex.embedding_dim,
        hidden=hidden,
        noisy=apex.noisy,
        sigma0=apex.noisy_sigma0,
        scale=np.dtype(frame_dtype) == np.uint8,
    )


def build_c51_model(cfg, apex, frame_shape: tuple[int, ...], frame_dtype: str, stack: int, num_actions: int) -> C51Net:
    """The C51 network for ``cfg`` with ``apex``'s atoms, v_min, v_max, dueling noisy heads and sigma0."""
    import numpy as np

    from zrl.algos.c51 import support

    torso, width, hidden = _torso(cfg, frame_shape, stack, apex.state_size)
    return C51Net(
        torso,
        width,
        num_actions,
        support(apex.atoms, apex.v_min, apex.v_max),
        hidden=hidden,
        noisy=apex.noisy,
        sigma0=apex.noisy_sigma0,
        scale=np.dtype(frame_dtype) == np.uint8,
    )


def build_apex_model(
    cfg, apex, frame_shape: tuple[int, ...], frame_dtype: str, stack: int, num_actions: int
) -> IQNNet | C51Net:
    """The network of ``apex.head``: IQN or C51."""
    build = build_c51_model if apex.head == "c51" else build_iqn_model
    return build(cfg, apex, frame_shape, frame_dtype, stack, num_actions)
