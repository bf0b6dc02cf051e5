"""Policy networks: the Atari conv net and an MLP, each with policy, value and feature heads.

Both take a batch of stacked observations ``[N, stack, *frame_shape]`` and return
``Output(logits [N, A], values [N], features [N, F] or None)``. uint8 inputs are scaled to [0, 1].
Weights cross processes as one flat float32 vector (:func:`flat_parameters` / :func:`load_flat`).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import torch
from torch import nn

from zrl.config import ModelConfig


def scaled_frames(obs: torch.Tensor, scale: bool = True) -> torch.Tensor:
    """Observations as a torso takes them: floats, uint8 frames scaled to [0, 1] in place on their new float copy
    (a second 3.6 MB tensor per pass of 32 Pong observations cost ~1 ms of a 20 ms IQN update, Intel Xeon,
    2 threads). Float observations pass through as they are."""
    return obs.float().mul_(1.0 / 255.0) if scale and obs.dtype == torch.uint8 else obs.float()


class Output(NamedTuple):
    logits: torch.Tensor
    values: torch.Tensor
    features: torch.Tensor | None


def _init(layer: nn.Module, gain: float) -> nn.Module:
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer


class _Heads(nn.Module):
    def __init__(self, width: int, num_actions: int, feature_size: int) -> None:
        super().__init__()
        self.policy = _init(nn.Linear(width, num_actions), 0.01)
        self.value = _init(nn.Linear(width, 1), 1.0)
        self.feature = _init(nn.Linear(width, feature_size), 1.0)

    def forward(self, hidden: torch.Tensor, with_features: bool) -> Output:
        features = self.feature(hidden) if with_features else None
        return Output(self.policy(hidden), self.value(hidden).squeeze(-1), features)


NATURE_CONV_OUT = 64 * 7 * 7
SMALL_CONV_OUT = 32 * 9 * 9


def nature_convs(stack: int) -> list[nn.Module]:
    """The Nature DQN convolutions on ``stack`` 84x84 frames, flattened to NATURE_CONV_OUT features."""
    relu = math.sqrt(2)
    return [
        _init(nn.Conv2d(stack, 32, 8, stride=4), relu),
        nn.ReLU(),
        _init(nn.Conv2d(32, 64, 4, stride=2), relu),
        nn.ReLU(),
        _init(nn.Conv2d(64, 64, 3, stride=1), relu),
        nn.ReLU(),
        nn.Flatten(),
    ]


def small_convs(stack: int) -> list[nn.Module]:
    """The convolutions of the 2013 DQN and of A3C's feed-forward agent (16 8x8/4, 32 4x4/2) on ``stack`` 84x84
    frames, flattened to SMALL_CONV_OUT features: about a third of the Nature torso's multiply-adds."""
    relu = math.sqrt(2)
    return [
        _init(nn.Conv2d(stack, 16, 8, stride=4), relu),
        nn.ReLU(),
        _init(nn.Conv2d(16, 32, 4, stride=2), relu),
        nn.ReLU(),
        nn.Flatten(),
    ]


def conv_torso(kind: str, stack: int) -> tuple[list[nn.Module], int]:
    """The convolutions of an image ``kind`` (atari or atari_small) and their flattened width."""
    return (small_convs(stack), SMALL_CONV_OUT) if kind == "atari_small" else (nature_convs(stack), NATURE_CONV_OUT)


class AtariNet(nn.Module):
    """A conv torso (Nature DQN's: conv 32x8/4, 64x4/2, 64x3/1; or ``kind = "atari_small"``: 16x8/4, 32x4/2) and a
    hidden_size layer on stacked 84x84 frames, computed channels-last."""

    def __init__(self, stack: int, num_actions: int, hidden_size: int, feature_size: int, kind: str = "atari") -> None:
        super().__init__()
        convs, width = conv_torso(kind, stack)
        self.torso = nn.Sequential(*convs, _init(nn.Linear(width, hidden_size), math.sqrt(2)), nn.ReLU())
        self.heads = _Heads(hidden_size, num_actions, feature_size)

    def forward(self, obs: torch.Tensor, with_features: bool = False) -> Output:
        x = scaled_frames(obs).contiguous(memory_format=torch.channels_last)
        return self.heads(self.torso(x), with_features)


def _mlp(in_size: int, hidden: tuple[int, ...]) -> nn.Sequential:
    layers: list[nn.Module] = [nn.Flatten()]
    for width in hidden:
        layers += [_init(nn.Linear(in_size, width), math.sqrt(2)), nn.Tanh()]
        in_size = width
    return nn.Sequential(*layers)


class MLPNet(nn.Module):
    """Tanh MLPs on the flattened stack of vector observations: one torso for the policy and feature
    heads, a separate one for the value, so that large value errors do not swamp the policy's inputs."""

    def __init__(self, in_size: int, num_actions: int, hidden: tuple[int, ...], feature_size: int, scale: bool) -> None:
        super().__init__()
        self.torso = _mlp(in_size, hidden)
        self.value_torso = _mlp(in_size, hidden)
        self.heads = _Heads(hidden[-1], num_actions, feature_size)
        self._scale = scale

    def forward(self, obs: torch.Tensor, with_features: bool = False) -> Output:
        x = obs.float() / 255.0 if self._scale else obs.float()
        hidden = self.torso(x)
        heads = self.heads
        features = heads.feature(hidden) if with_features else None
        return Output(heads.policy(hidden), heads.value(self.value_torso(x)).squeeze(-1), features)


IMAGE_KINDS = ("atari", "atari_small")


def model_kind(cfg: ModelConfig, frame_shape: tuple[int, ...]) -> str:
    """atari, atari_small or mlp: what ``cfg.kind`` means for these frames (auto: the small conv net for 84x84
    frames, an MLP otherwise)."""
    kind = cfg.kind
    if kind == "auto":
        kind = "atari_small" if tuple(frame_shape) == (84, 84) else "mlp"
    elif kind == "auto_nature":  # a run folder's config from before atari_small: auto meant the Nature net
        kind = "atari" if tuple(frame_shape) == (84, 84) else "mlp"
    if kind in IMAGE_KINDS and tuple(frame_shape) != (84, 84):
        raise ValueError(f"model.kind = {kind!r} needs 84x84 frames, the environment gives {frame_shape}")
    return kind


def build_model(
    cfg: ModelConfig, frame_shape: tuple[int, ...], frame_dtype: str, stack: int, num_actions: int
) -> nn.Module:
    """The network ``cfg.kind`` asks for; auto picks the conv net for 84x84 frames."""
    kind = model_kind(cfg, frame_shape)
    if kind in IMAGE_KINDS:
        # Channels-last convolutions: the Nature CNN's forward and backward on 8 x 21 Pong observations took
        # 48 ms instead of 109 ms (2 threads, AMD EPYC); the weights' flat vector is unchanged (logical order).
        net = AtariNet(stack, num_actions, cfg.hidden_size, cfg.feature_size, kind)
        return net.to(memory_format=torch.channels_last)
    in_size = stack * int(np.prod(frame_shape))
    return MLPNet(in_size, num_actions, cfg.mlp_hidden, cfg.feature_size, scale=np.dtype(frame_dtype) == np.uint8)


def flat_parameters(model: nn.Module) -> np.ndarray:
    """All parameters as one contiguous float32 vector (a copy)."""
    with torch.no_grad():
        flat = torch.cat([p.detach().reshape(-1).float().cpu() for p in model.parameters()])
    return flat.numpy()


def parameter_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def load_flat(model: nn.Module, flat: np.ndarray) -> None:
    """Copy a flat float32 vector from :func:`flat_parameters` into the model's parameters."""
    if flat.shape != (parameter_count(model),):
        raise ValueError(f"weights of {flat.shape} do not fit a model of {parameter_count(model)} parameters")
    source = torch.from_numpy(np.array(flat, np.float32))  # a writable copy; received buffers are read-only
    offset = 0
    with torch.no_grad():
        for p in model.parameters():
            n = p.numel()
            p.copy_(source[offset : offset + n].view_as(p))
            offset += n
