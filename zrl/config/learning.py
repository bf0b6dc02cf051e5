"""The [model], [learner] and [broker] sections: the network, the learner's optimisation and the broker that
prepares its batches. Each key declared once, as in ``zrl.config.schema``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from msgspec import Meta


@dataclass(frozen=True)
class ModelConfig:
    kind: Annotated[
        str,
        Meta(
            description="Network: atari (the Nature DQN's torso), atari_small (the 2013 DQN's and A3C's, a third of the cost), mlp, or auto (atari_small for image frames, else mlp; a run stores what it resolved)."
        ),
    ] = "auto"
    hidden_size: Annotated[
        int,
        Meta(gt=0, description="Width of the conv nets' fully connected layer (A3C's 256; the Nature DQN had 512)."),
    ] = 256
    mlp_hidden: Annotated[
        tuple[int, ...], Meta(description="Hidden layer widths of the MLP for vector observations.")
    ] = (64, 64)
    feature_size: Annotated[
        int,
        Meta(
            gt=0,
            description="Length of the state feature vector the feature head emits; workers send it with every unroll when an elite or attentive replay needs it.",
        ),
    ] = 512
    feature_layer: Annotated[
        bool,
        Meta(
            description="The features are a linear layer of their own on the hidden layer; false: the hidden layer itself, so feature_size must be its width (model.hidden_size, or mlp_hidden's last).",
        ),
    ] = True


@dataclass(frozen=True)
class LearnerConfig:
    batch_size: Annotated[
        int,
        Meta(
            gt=0,
            description='Unrolls per learner step. On a CPU a small batch costs less per sample and gives more updates for the same frames (perf/README.md, "How the defaults were found").',
        ),
    ] = 8
    unroll_length: Annotated[int, Meta(gt=0, description="Steps per unroll (T).")] = 20
    device: Annotated[str, Meta(description="cpu, cuda, cuda:N, or auto (cuda when available).")] = "auto"
    precision: Annotated[str, Meta(description="fp32, or bf16 (autocast for the forward pass and loss).")] = "fp32"
    unroll_conv: Annotated[
        str,
        Meta(
            description="An Atari conv net's first convolution in training: conv3d (one 3-d convolution over each unroll), stacks (the stacked observations through the 2-d one), or auto (the faster, timed at start)."
        ),
    ] = "auto"
    torch_threads: Annotated[
        int,
        Meta(
            ge=0,
            description="PyTorch threads for the learner; 0: the cores the workers leave (cores - workers.count x workers.torch_threads, at least 1), so that learner and workers do not fight over the cores.",
        ),
    ] = 0
    optimizer: Annotated[
        str,
        Meta(
            description="rmsprop (PyTorch's: mean square from 0, eps outside the root), rmsprop_tf (TensorFlow 1's, which IMPALA used: mean square from 1, eps inside the root) or adam."
        ),
    ] = "rmsprop_tf"
    learning_rate: Annotated[
        float,
        Meta(
            gt=0,
            description="Initial learning rate; learner.lr_schedule says how it changes.",
        ),
    ] = 0.0006
    lr_schedule: Annotated[
        str,
        Meta(
            extra={"hint": "polynomial or multistep"},
            description="How the learning rate changes over learner steps: polynomial, to lr_end over lr_decay_steps with power lr_decay_power; multistep, times lr_gamma at each of lr_milestones.",
        ),
    ] = "polynomial"
    lr_decay_steps: Annotated[
        int,
        Meta(
            ge=0,
            description="polynomial: learner steps over which the learning rate decays to lr_end; 0 derives them from run.max_env_frames. Elite and attentive replays anneal lambda over them too, whatever the schedule.",
        ),
    ] = 0
    lr_end: Annotated[float, Meta(ge=0, description="polynomial: the learning rate at the end of the decay.")] = 0.0
    lr_decay_power: Annotated[
        float,
        Meta(ge=0, description="polynomial: the power of the decay (1 is linear; 2 makes most of the fall early)."),
    ] = 1.0
    lr_milestones: Annotated[
        tuple[int, ...],
        Meta(description="multistep: the learner steps, rising, at which the learning rate is multiplied by lr_gamma."),
    ] = ()
    lr_gamma: Annotated[
        float,
        Meta(
            gt=0,
            le=1,
            description="multistep: the factor of the learning rate at each milestone (torch's MultiStepLR's 0.1).",
        ),
    ] = 0.1
    rmsprop_alpha: Annotated[float, Meta(ge=0, le=1, description="RMSprop smoothing constant.")] = 0.99
    rmsprop_eps: Annotated[
        float,
        Meta(
            gt=0,
            description="RMSprop epsilon: small, so that every parameter moves by about the learning rate (A2C's 1e-5; the losses are sums over T x B, so the gradients are large).",
        ),
    ] = 1e-05
    rmsprop_momentum: Annotated[float, Meta(ge=0, description="RMSprop momentum.")] = 0.0
    adam_eps: Annotated[float, Meta(gt=0, description="Adam epsilon.")] = 1e-8
    discount: Annotated[float, Meta(ge=0, le=1, description="Discount factor gamma.")] = 0.99
    reward_scale: Annotated[
        float,
        Meta(
            gt=0,
            description="Rewards are multiplied by this before the loss (after any clipping); keeps value targets in a range nets fit well.",
        ),
    ] = 1.0
    pg_cost: Annotated[
        float,
        Meta(
            ge=0,
            description="V-trace: weight of the policy-gradient loss (the reference platform's policy_gradient_loss_weight).",
        ),
    ] = 1.0
    baseline_cost: Annotated[float, Meta(ge=0, description="Weight of the value (baseline) loss.")] = 0.5
    entropy_cost: Annotated[
        float,
        Meta(
            ge=0,
            description="Weight of the entropy bonus (losses are sums over T x B, so this is per sample); with entropy_decay_frames, its weight at the start.",
        ),
    ] = 0.01
    entropy_cost_end: Annotated[
        float,
        Meta(
            ge=0,
            description="V-trace family: the entropy weight at the end of its fall from entropy_cost (entropy_follows_lr or entropy_decay_frames).",
        ),
    ] = 0.001
    entropy_follows_lr: Annotated[
        bool,
        Meta(
            description="V-trace family: the entropy weight falls from entropy_cost to entropy_cost_end in step with the learning rate's schedule; false: entropy_cost throughout. entropy_decay_frames overrides it.",
        ),
    ] = False
    entropy_decay_frames: Annotated[
        int,
        Meta(
            ge=0,
            description="V-trace family: env frames over which the entropy weight goes in a straight line from entropy_cost to entropy_cost_end; 0: entropy_follows_lr says.",
        ),
    ] = 0
    entropy_decay_start_frames: Annotated[
        int,
        Meta(
            ge=0,
            description="V-trace family: env frames played at entropy_cost before entropy_decay_frames' straight line starts, so that the bonus can stay high until learning has taken hold.",
        ),
    ] = 0
    normalize_advantages: Annotated[
        bool,
        Meta(
            description="V-trace family: normalise the batch's advantages to mean 0 and standard deviation 1, as PPO does, so that the loss weights mean the same in every game; false: raw, as IMPALA."
        ),
    ] = False
    grad_norm_clip: Annotated[float, Meta(ge=0, description="Global gradient norm clip; 0 disables it.")] = 40.0
    publish_every: Annotated[int, Meta(gt=0, description="Learner steps between weight broadcasts.")] = 1
    max_nonfinite_steps: Annotated[
        int,
        Meta(
            ge=0,
            description="A learner step whose loss or gradient norm is not finite is skipped (metrics.csv nonfinite_steps); this many in a row restore the newest checkpoint that loads. 0: never restore.",
        ),
    ] = 10
    replay_ratio: Annotated[
        float,
        Meta(
            ge=0,
            description="V-trace family: how many times each fresh sample is trained on, on average; a queue hands each unit sample_ratio x replay_ratio times and workers are paced to it. 0: once through the queue.",
        ),
    ] = 4.0


@dataclass(frozen=True)
class BrokerConfig:
    prefetch_batches: Annotated[
        int,
        Meta(
            gt=0,
            description="Batches ready ahead of the learner: the learner grants this many credits, the broker sends a batch per credit.",
        ),
    ] = 2
    torch_threads: Annotated[
        int,
        Meta(gt=0, description="PyTorch threads for the broker's feature recomputation (elite and attentive replay)."),
    ] = 1
    precision: Annotated[str, Meta(description="fp32, or bf16 (autocast) for the broker's feature recomputation.")] = (
        "fp32"
    )
    device: Annotated[
        str,
        Meta(
            description="cpu, cuda, cuda:N, or auto (cuda when available): where the broker recomputes features (elite and attentive replay). Frames are read on the CPU and sent there; the distances are computed on the CPU."
        ),
    ] = "auto"
    max_abs_reward: Annotated[
        float,
        Meta(
            gt=0,
            description="The largest reward magnitude (after env.clip_rewards) a worker's experience may carry; the broker refuses larger or non-finite ones (decode_errors, zrl.log). Raise it for larger rewards.",
        ),
    ] = 1e6
    max_abs_value: Annotated[
        float,
        Meta(
            gt=0,
            description="The largest magnitude of a behaviour-time value estimate or feature (V-trace) or a priority (Ape-X) a worker may send; beyond it, as for broker.max_abs_reward.",
        ),
    ] = 1e9
    max_abs_logit: Annotated[
        float,
        Meta(
            gt=0,
            description="The largest magnitude of a behaviour-time policy logit a worker may send; beyond it, as for broker.max_abs_reward. Discounts must lie in [0, 1], always.",
        ),
    ] = 1e4
