"""Policy networks: the Atari conv net and an MLP, each with policy, value and feature heads.

Both take a batch of stacked observations ``[N, stack, *frame_shape]`` and return
``Output(logits [N, A], values [N], features [N, F] or None)``. uint8 inputs are scaled to [0, 1].
``forward_unrolls`` takes unrolls of frames instead, ``[B, T+S, *frame_shape]`` as the gatherer reads them, and
returns the outputs of their stacked observations ``[B*(T+1)]`` (or of the steps ``at``: ``[B*len(at)]``).
Weights cross processes as one flat float32 vector (:func:`flat_parameters` / :func:`load_flat`).
"""

from __future__ import annotations

import math
import time
from typing import NamedTuple, TypeVar, cast

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from zrl.config import ConfigError, ModelConfig
from zrl.gather import kept_frames, stack_observations


def scaled_frames(obs: torch.Tensor, scale: bool = True) -> torch.Tensor:
    """Observations as a torso takes them: floats, uint8 frames scaled to [0, 1] in place on their new float copy,
    which keeps the observations' memory layout and costs less than a second copy or one ``torch.mul(obs, 1 / 255)``
    (perf/README.md, "Rainbow-IQN Ape-X on Pong"). Float observations pass through as they are."""
    return obs.float().mul_(1.0 / 255.0) if scale and obs.dtype == torch.uint8 else obs.float()


class Output(NamedTuple):
    logits: torch.Tensor
    values: torch.Tensor
    features: torch.Tensor | None


_Layer = TypeVar("_Layer", nn.Linear, nn.Conv2d)


def _init(layer: _Layer, gain: float) -> _Layer:
    nn.init.orthogonal_(layer.weight, gain)
    assert layer.bias is not None  # every layer here has one
    nn.init.zeros_(layer.bias)
    return layer


class _Heads(nn.Module):
    """Policy, value and feature heads on a ``width`` hidden layer; ``feature_layer`` false: the features are the
    hidden layer itself (``feature_size`` must be its width), with no layer of their own."""

    def __init__(self, width: int, num_actions: int, feature_size: int, feature_layer: bool = True) -> None:
        super().__init__()
        self.policy = _init(nn.Linear(width, num_actions), 0.01)
        self.value = _init(nn.Linear(width, 1), 1.0)
        if not feature_layer and feature_size != width:
            raise ValueError(f"features without a layer of their own are the {width} hidden units, not {feature_size}")
        self.feature = _init(nn.Linear(width, feature_size), 1.0) if feature_layer else nn.Identity()

    def forward(self, hidden: torch.Tensor, with_features: bool) -> Output:
        features = self.feature(hidden) if with_features else None
        return Output(self.policy(hidden), self.value(hidden).squeeze(-1), features)


# each image kind's convolutions (kernel, stride) and output channels: their flattened width on any frame size
CONV_LAYERS = {"atari": (((8, 4), (4, 2), (3, 1)), 64), "atari_small": (((8, 4), (4, 2)), 32)}


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


def conv_side(kind: str, side: int) -> int:
    """A frame side's length after an image kind's convolutions (0: the frame is too small for them)."""
    for kernel, stride in CONV_LAYERS[kind][0]:
        side = (side - kernel) // stride + 1 if side >= kernel else 0
    return max(side, 0)


def conv_width(kind: str, height: int, width: int) -> int:
    """The flattened width of an image kind's convolutions on frames of height x width."""
    return CONV_LAYERS[kind][1] * conv_side(kind, height) * conv_side(kind, width)


NATURE_CONV_OUT = conv_width("atari", 84, 84)  # 64 x 7 x 7
SMALL_CONV_OUT = conv_width("atari_small", 84, 84)  # 32 x 9 x 9


def smallest_side(kind: str) -> int:
    """The smallest frame side an image kind's convolutions take (36 for atari, 20 for atari_small)."""
    return next(side for side in range(1, 1000) if conv_side(kind, side) >= 1)


def image_frames(frame_shape: tuple[int, ...]) -> bool:
    """Frames a conv net takes: [H, W] grey, or [3, H, W] colour."""
    return len(frame_shape) == 2 or (len(frame_shape) == 3 and frame_shape[0] == 3)


def conv_torso(kind: str, stack: int, frame_shape: tuple[int, ...] = (84, 84)) -> tuple[list[nn.Module], int]:
    """The convolutions of an image ``kind`` (atari or atari_small) on ``stack`` frames of ``frame_shape`` and their
    flattened width. Colour frames [3, H, W] take 3 x stack input channels: the caller merges a stack's
    [N, stack, 3, H, W] into [N, 3 x stack, H, W] first."""
    channels = stack * (frame_shape[0] if len(frame_shape) == 3 else 1)
    convs = small_convs(channels) if kind == "atari_small" else nature_convs(channels)
    return convs, conv_width(kind, *frame_shape[-2:])


def _forward_stacks(
    model: AtariNet | MLPNet,
    frames: torch.Tensor,
    episode_steps: torch.Tensor,
    at: np.ndarray | None = None,
    with_features: bool = False,
) -> Output:
    """A model's outputs for the stacked observations of unrolls ``[B, T+S, *shape]``, flattened to ``[B*K]``."""
    obs = stack_observations(frames, episode_steps, model.stack, at=at)
    return model(obs.reshape(-1, *obs.shape[2:]), with_features)


class AtariNet(nn.Module):
    """A conv torso (Nature DQN's: conv 32x8/4, 64x4/2, 64x3/1; or ``kind = "atari_small"``: 16x8/4, 32x4/2) and a
    hidden_size layer on stacked 84x84 frames, computed channels-last."""

    def __init__(
        self,
        stack: int,
        num_actions: int,
        hidden_size: int,
        feature_size: int,
        kind: str = "atari",
        feature_layer: bool = True,
        frame_shape: tuple[int, ...] = (84, 84),
    ) -> None:
        super().__init__()
        convs, width = conv_torso(kind, stack, frame_shape)
        self.colour = len(frame_shape) == 3  # forward merges a colour stack's channels (channels-last wants 4-d)
        self.torso = nn.Sequential(*convs, _init(nn.Linear(width, hidden_size), math.sqrt(2)), nn.ReLU())
        self.heads = _Heads(hidden_size, num_actions, feature_size, feature_layer)
        self.stack = stack
        self.frame_shape = tuple(frame_shape)
        # forward_unrolls' first convolution where gradients flow, "conv3d" or "stacks" (pick_unroll_conv); a
        # pass without gradients always takes the 3-d convolution
        self.unroll_conv = "conv3d"

    def forward(self, obs: torch.Tensor, with_features: bool = False) -> Output:
        if self.colour:  # [N, stack, 3, H, W] -> [N, 3 x stack, H, W]
            obs = obs.flatten(1, 2)
        # channels-last while the frames are bytes, a quarter of the copy their floats would need
        x = scaled_frames(obs.contiguous(memory_format=torch.channels_last))
        return self.heads(self.torso(x), with_features)

    def forward_unrolls(
        self,
        frames: torch.Tensor,
        episode_steps: torch.Tensor,
        at: np.ndarray | None = None,
        with_features: bool = False,
    ) -> Output:
        """``forward(stack_observations(frames, episode_steps, stack, at))`` flattened to ``[B*K]``, without the
        stacks: the first convolution runs once over each unroll's frames as a 3-d convolution whose depth is
        the stack (a stack's conv output is the sum over its frames), so the S-times larger float copy of
        the stacked observations is never made. The observations that reach back past an episode start, whose
        older frames are blanked, go through the first convolution as stacks and replace their outputs.
        Equal to the stacked forward up to float rounding (perf/input_prep.py has the speeds). When the
        steps ``at`` hold fewer frames as stacks than the unroll has (K x S <= T+S), the stacks are cheaper
        and are used. Where gradients flow, ``unroll_conv = "stacks"`` takes the stacks too: the 3-d
        convolution's weight gradient is slow on some CPUs (:func:`pick_unroll_conv`)."""
        conv = cast(nn.Conv2d, self.torso[0])  # conv_torso's first layer
        s = self.stack
        b = frames.shape[0]
        steps = np.arange(frames.shape[1] - s + 1) if at is None else np.asarray(at, np.int64)
        training = self.unroll_conv == "stacks" and torch.is_grad_enabled() and conv.weight.requires_grad
        if len(steps) * s <= frames.shape[1] or self.colour or training:  # colour frames: as stacks
            return _forward_stacks(self, frames, episode_steps, steps, with_features)
        index = torch.from_numpy(steps).to(frames.device)
        lo, hi = int(steps[0]), int(steps[-1]) + 1
        in_range = hi - lo == len(steps) and bool((np.diff(steps) == 1).all())  # steps lo..hi-1: no selection
        x = scaled_frames(frames[:, lo : hi + s - 1] if in_range else frames).unsqueeze(1)  # [B, 1, frames, H, W]
        y = F.conv3d(x, conv.weight.unsqueeze(1), conv.bias, (1, *conv.stride))  # [B, C, windows, h, w]
        y = y if in_range else y.index_select(2, index)
        y = y.permute(0, 2, 3, 4, 1)  # [B, K, h, w, C]: channels-last observations
        newest = episode_steps[:, s - 1 :].index_select(1, index)  # [B, K]: the episode step of each newest frame
        blanked = newest < s - 1
        if bool(blanked.any()):
            unit, k = blanked.nonzero(as_tuple=True)
            first = index[k]  # each blanked stack's oldest frame
            own = frames.unfold(1, s, 1)[unit, first]  # [n, H, W, S]: only these stacks' frames
            own = own * kept_frames(newest[unit, k], s).to(own.dtype).view(len(unit), 1, 1, s)
            patch = conv(scaled_frames(own.permute(0, 3, 1, 2)))  # [n, C, h, w]: own is channels-last already
            y = y.index_put((unit, k), patch.permute(0, 2, 3, 1))
        x = y.reshape(b * len(steps), *y.shape[2:]).permute(0, 3, 1, 2)  # [B*K, C, h, w], channels-last
        return self.heads(self.torso[1:](x), with_features)


def pick_unroll_conv(
    model: nn.Module, choice: str, batch_size: int, length: int, precision: str = "fp32", repeats: int = 3
) -> dict:
    """Set an AtariNet's ``unroll_conv`` to ``choice``, or for "auto" to the faster of the two on a training pass
    (forward, under bf16 autocast where ``precision`` says so, then backward of the outputs' sum) over
    ``batch_size`` unrolls of ``length`` frames of random bytes on the model's device, timed alternately
    ``repeats`` times each after one warm-up; the gradients are cleared after, and a pass that fails leaves
    conv3d set. Their speeds differ by CPU: the 3-d convolution's weight gradient is the slow part on some
    (perf/README.md). Returns {"unroll_conv": the one set, and for auto each one's best seconds}; a model
    with no choice to make (an MLP, colour frames) is left as it is: {}."""
    if not isinstance(model, AtariNet) or model.colour:
        return {}
    if choice != "auto":
        model.unroll_conv = choice
        return {"unroll_conv": choice}
    param = next(model.parameters())
    gen = torch.Generator().manual_seed(0)
    frames = torch.randint(0, 256, (batch_size, length, *model.frame_shape), generator=gen, dtype=torch.uint8)
    frames = frames.to(param.device)
    steps = (torch.arange(length, dtype=torch.int32) + model.stack).expand(batch_size, length).to(param.device)
    best = {"conv3d": math.inf, "stacks": math.inf}
    bf16 = precision == "bf16"
    try:
        for i in range(repeats + 1):
            for name in best:
                model.unroll_conv = name
                if param.device.type == "cuda":
                    torch.cuda.synchronize(param.device)
                start = time.perf_counter()
                with torch.autocast(param.device.type, dtype=torch.bfloat16, enabled=bf16):
                    out = model.forward_unrolls(frames, steps)
                (out.logits.float().sum() + out.values.float().sum()).backward()
                if param.device.type == "cuda":
                    torch.cuda.synchronize(param.device)
                if i:  # the first round warms up
                    best[name] = min(best[name], time.perf_counter() - start)
    finally:
        model.zero_grad(set_to_none=True)
        model.unroll_conv = "conv3d"
    model.unroll_conv = min(best, key=best.__getitem__)
    return {"unroll_conv": model.unroll_conv, **{f"{name}_s": round(t, 4) for name, t in best.items()}}


def _mlp(in_size: int, hidden: tuple[int, ...]) -> nn.Sequential:
    layers: list[nn.Module] = [nn.Flatten()]
    for width in hidden:
        layers += [_init(nn.Linear(in_size, width), math.sqrt(2)), nn.Tanh()]
        in_size = width
    return nn.Sequential(*layers)


class MLPNet(nn.Module):
    """Tanh MLPs on the flattened stack of vector observations: one torso for the policy and feature
    heads, a separate one for the value, so that large value errors do not swamp the policy's inputs."""

    def __init__(
        self,
        in_size: int,
        num_actions: int,
        hidden: tuple[int, ...],
        feature_size: int,
        scale: bool,
        stack: int,
        feature_layer: bool = True,
    ) -> None:
        super().__init__()
        self.torso = _mlp(in_size, hidden)
        self.value_torso = _mlp(in_size, hidden)
        self.heads = _Heads(hidden[-1], num_actions, feature_size, feature_layer)
        self._scale = scale
        self.stack = stack

    def forward(self, obs: torch.Tensor, with_features: bool = False) -> Output:
        x = obs.float() / 255.0 if self._scale else obs.float()
        hidden = self.torso(x)
        heads = self.heads
        features = heads.feature(hidden) if with_features else None
        return Output(heads.policy(hidden), heads.value(self.value_torso(x)).squeeze(-1), features)

    forward_unrolls = _forward_stacks  # vector frames are small: their stacks cost little


IMAGE_KINDS = ("atari", "atari_small")


def model_kind(cfg: ModelConfig, frame_shape: tuple[int, ...]) -> str:
    """atari, atari_small or mlp: what ``cfg.kind`` means for these frames (auto: the small conv net for image
    frames, [H, W] or [3, H, W], an MLP otherwise). ConfigError (env.resolution) for frames too small for the
    kind's convolutions, naming the smallest that fits."""
    kind = cfg.kind
    if kind == "auto":
        kind = "atari_small" if image_frames(frame_shape) else "mlp"
    elif kind == "auto_nature":  # a run folder's config from before atari_small: auto meant the Nature net
        kind = "atari" if image_frames(frame_shape) else "mlp"
    if kind in IMAGE_KINDS and not image_frames(frame_shape):
        raise ValueError(
            f"model.kind = {kind!r} needs image frames, [H, W] or [3, H, W]; the environment gives {frame_shape}"
        )
    if kind in IMAGE_KINDS and min(frame_shape[-2:]) < smallest_side(kind):
        side = smallest_side(kind)
        raise ConfigError(
            f"env.resolution: {list(frame_shape[-2:])} is too small for model.kind {kind}'s convolutions; the smallest "
            f'that fits is [{side}, {side}] (set model.kind = "mlp" for an MLP on frames this small)',
            "env.resolution",
        )
    return kind


def build_model(
    cfg: ModelConfig, frame_shape: tuple[int, ...], frame_dtype: str, stack: int, num_actions: int
) -> AtariNet | MLPNet:
    """The network ``cfg.kind`` asks for; auto picks the conv net for image frames."""
    kind = model_kind(cfg, frame_shape)
    check_feature_layer(cfg, kind)
    if kind in IMAGE_KINDS:
        # Channels-last convolutions: a faster forward and backward on CPU (perf/README.md, perf/model_cost.py's
        # table); the weights' flat vector is unchanged (logical order).
        net = AtariNet(stack, num_actions, cfg.hidden_size, cfg.feature_size, kind, cfg.feature_layer, frame_shape)
        # torch's stubs give Module.to no memory_format overload; Module.to takes one (its docstring's last form)
        return net.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
    in_size = stack * int(np.prod(frame_shape))
    scale = np.dtype(frame_dtype) == np.uint8
    return MLPNet(in_size, num_actions, cfg.mlp_hidden, cfg.feature_size, scale, stack, cfg.feature_layer)


def check_feature_layer(cfg: ModelConfig, kind: str) -> None:
    """ConfigError when features without a layer of their own (model.feature_layer false) cannot be the
    hidden layer: model.feature_size must be its width."""
    width = cfg.hidden_size if kind in IMAGE_KINDS else cfg.mlp_hidden[-1]
    if not cfg.feature_layer and cfg.feature_size != width:
        key = "model.hidden_size" if kind in IMAGE_KINDS else "model.mlp_hidden's last width"
        raise ConfigError(
            f"model.feature_size: {cfg.feature_size}, but with model.feature_layer = false the features are the "
            f"hidden layer, {key} = {width} units; set model.feature_size = {width}, or feature_layer = true",
            "model.feature_size",
        )


def resolve_device(name: str) -> torch.device:
    """A torch device from a config's ``device`` (cpu, cuda, cuda:N, or auto: cuda when available)."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


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
