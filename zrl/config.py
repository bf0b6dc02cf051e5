"""Run configuration: frozen dataclasses, one per section, read from TOML.

Precedence, highest first: command-line options > ``--set section.key=value`` > the run file >
the defaults below (mirrored, with a comment per key, in ``config/defaults.toml``).

Every mistake is a :class:`ConfigError` that names the file (or ``--set`` / the option), the dotted
key and what would be valid. Nothing here starts a process or touches the disk beyond reading.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
import tomllib
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from zrl.agents import REGISTRY as agent_registry  # the registry's table of names: no agent is imported here
from zrl.agents import get as get_agent

BUILTIN = "<built-in defaults>"


class ConfigError(ValueError):
    """A configuration mistake; the message is meant for the user as is."""


@dataclass(frozen=True)
class RunConfig:
    results_dir: str = "results"
    """Folder that holds one sub-folder per run, results/<env>_<unix_ts>/."""
    max_env_frames: int = 50_000_000
    """Budget: the run stops after this many environment frames (Atari: env steps x frame_skip)."""
    seed: int = 0
    """Seed of the learner's model initialisation and of every worker's environments and actions."""
    log_interval_s: float = 5.0
    """Seconds between progress lines and rows of metrics.csv."""
    checkpoint_every_steps: int = 5000
    """Learner steps between checkpoints; a final one is always written at an orderly stop. 0: only the final one."""
    checkpoint_every_minutes: float = 0.0
    """Minutes between checkpoints, besides checkpoint_every_steps; 0: by learner steps only."""
    keep_checkpoints: int = 3
    """How many periodic checkpoints to keep (the newest ones); best.pt, the best 100-episode mean, is kept apart."""
    max_seconds: float = 0.0
    """Wall-clock budget: the run stops in order (exit code 0) after this many seconds; 0: no limit."""
    heartbeat_timeout_s: float = 60.0
    """A role that reports nothing for this long is declared hung (before its first report it has at least 60 s to start): a worker is killed and restarted, a hung broker or learner stops the run."""
    keep_freed_memory: bool = True
    """Learner and broker keep the memory PyTorch frees in their heap for the next step (glibc mallopt) instead of returning large blocks to the system at once: on CPU the Atari learner's step ran 1.8x faster on a 2-core machine. Their memory stays at its peak. No effect where the C library is not glibc."""
    deterministic: bool = False
    """One worker in lockstep with the learner for bit-exact repeats: the same config and seed give the same weights, and a resumed run ends exactly as an uninterrupted one. Needs workers.count = 1, a single queue replay, and learner.batch_size a multiple of workers.envs_per_worker; the budget counts frames trained. Slower: worker and learner take turns, and resume replays every trained action."""


@dataclass(frozen=True)
class EnvConfig:
    id: str = "ALE/Pong-v5"
    """Environment id: ALE/<Game>-v5 or <Game>NoFrameskip-v4 for Atari, any Gymnasium id with a Box observation otherwise."""
    frame_skip: int = 4
    """Atari: emulator frames per agent step, with a max over the last two."""
    noop_max: int = 30
    """Atari: up to this many random no-ops at every reset."""
    frame_stack: int = 4
    """Frames stacked into one observation, rebuilt from single frames at gather time (1 for vector observations)."""
    episodic_life: bool = True
    """Atari: a lost life ends the training episode (discount 0) without resetting the game; scores count whole games."""
    clip_rewards: bool = True
    """Train on sign(reward); raw scores are still what episodes.csv reports."""
    fire_reset: bool = True
    """Atari: press FIRE at reset in games that need it."""
    max_episode_frames: int = 108_000
    """Atari: episodes are truncated after this many emulator frames (30 minutes of play)."""
    sticky_action_prob: float = 0.0
    """Atari: probability that the emulator repeats the previous action (Machado et al. use 0.25)."""
    full_action_space: bool = False
    """Atari: use all 18 actions instead of the game's minimal set."""
    max_episode_steps: int = 0
    """Non-Atari: truncate episodes after this many steps; 0 keeps the environment's own limit."""


@dataclass(frozen=True)
class WorkersConfig:
    count: int = 1
    """Worker processes (the same as --workers). One worker of 8 envs leaves the second of 2 cores to the learner (zrl-bench --suggest's pick on 2 cores); give more on a larger machine."""
    envs_per_worker: int = 8
    """Environments each worker steps in lock-step (the same as --envs-per-worker); 8 envs batch the worker's inference."""
    ring_slots: int = 0
    """Slots in each worker's frame ring (one slot = one frame of every env); 0 sizes it from the replay and batch."""
    torch_threads: int = 1
    """PyTorch threads for each worker's policy inference."""
    stats_interval_s: float = 1.0
    """Seconds between a worker's stats messages, which double as its heartbeat."""
    produce_ratio: float = 1.25
    """Actor/learner balance: per weights version all workers send about this many batches' worth of unrolls (a worker sends one unroll every few versions when there are many workers), then wait for new weights; 0 runs free."""
    nice: int = 10
    """Scheduling priority the workers lower themselves by (Unix nice, 0-19), so that the learner keeps its share of the cores whatever the worker count. 10: at 8 x 4 on 2 cores the learner made 14.5 steps/s against 11.4 at 0 (the best split's 19.5)."""
    max_weights_wait_s: float = 2.0
    """The longest a throttled worker waits for new weights before it sends another unroll anyway."""
    max_restarts: int = 3
    """A worker that dies (or hangs past run.heartbeat_timeout_s) is restarted; one that needs more than this many restarts within workers.restart_window_s stops the run, with its traceback. 0: never restart."""
    restart_window_s: float = 300.0
    """The window over which workers.max_restarts counts one worker's restarts."""
    policy: str = "network"
    """How workers act: network (the learner's policy) or uniform (uniformly random actions without running the network; what zrl-bench sampling uses to measure the data path alone)."""


@dataclass(frozen=True)
class ModelConfig:
    kind: str = "auto"
    """Network: atari (the Nature DQN's three conv layers and a hidden_size layer), atari_small (the 2013 DQN's and A3C's two conv layers, 16 and 32 channels, a third of the cost), mlp, or auto (atari_small for 84x84 frames, mlp otherwise; a run stores the kind it resolved, and auto_nature is what a run folder written before atari_small stored: atari for 84x84 frames). On 2 CPU cores atari_small reached -10.8 on Pong at 10 minutes against the Nature net's -17.3 (10.6k against 7.6k frames/s; about the same return per frame)."""
    hidden_size: int = 256
    """Width of the conv nets' fully connected layer (A3C's 256; the Nature DQN had 512)."""
    mlp_hidden: tuple[int, ...] = (64, 64)
    """Hidden layer widths of the MLP for vector observations."""
    feature_size: int = 512
    """Length of the state feature vector the feature head emits; workers send it with every unroll when an elite or attentive replay needs it."""


@dataclass(frozen=True)
class LearnerConfig:
    batch_size: int = 8
    """Unrolls per learner step. 8 x T=20: 12 steps/s on 2 CPU cores for Pong against 0.8 at 32 (per sample the step costs less in a small batch); the updates, not the frames, were what Pong lacked."""
    unroll_length: int = 20
    """Steps per unroll (T)."""
    device: str = "auto"
    """cpu, cuda, cuda:N, or auto (cuda when available)."""
    precision: str = "fp32"
    """fp32, or bf16 (autocast for the forward pass and loss)."""
    torch_threads: int = 0
    """PyTorch threads for the learner; 0: the cores the workers leave (cores - workers.count x workers.torch_threads, at least 1), so that learner and workers do not fight over the cores."""
    optimizer: str = "rmsprop_tf"
    """rmsprop (PyTorch's: mean square from 0, eps outside the root), rmsprop_tf (TensorFlow 1's, which IMPALA used: mean square from 1, eps inside the root) or adam."""
    learning_rate: float = 0.0006
    """Initial learning rate. With rmsprop_tf and eps 1e-5, Pong's 100-episode mean at 12 minutes was -12.7, against -19.5 with PyTorch's RMSprop at 4.8e-4 and eps 0.01 (2 cores, AMD EPYC, seed 1)."""
    lr_decay_steps: int = 0
    """Learner steps over which the learning rate decays polynomially to lr_end; 0 derives them from run.max_env_frames."""
    lr_end: float = 0.0
    """Learning rate at the end of the decay."""
    lr_decay_power: float = 1.0
    """Power of the polynomial decay (1 is linear)."""
    rmsprop_alpha: float = 0.99
    """RMSprop smoothing constant."""
    rmsprop_eps: float = 1e-05
    """RMSprop epsilon: small, so that every parameter moves by about the learning rate (A2C's 1e-5; with sums over T x B the gradients are large). With optimizer = rmsprop (PyTorch's) a small eps makes the first steps move every weight by about 10 x lr."""
    rmsprop_momentum: float = 0.0
    """RMSprop momentum."""
    adam_eps: float = 1e-8
    """Adam epsilon."""
    discount: float = 0.99
    """Discount factor gamma."""
    reward_scale: float = 1.0
    """Rewards are multiplied by this before the loss (after any clipping); keeps value targets in a range nets fit well."""
    baseline_cost: float = 0.5
    """Weight of the value (baseline) loss."""
    entropy_cost: float = 0.0006
    """Weight of the entropy bonus (losses are sums over T x B, so this is per sample)."""
    grad_norm_clip: float = 40.0
    """Global gradient norm clip; 0 disables it."""
    publish_every: int = 1
    """Learner steps between weight broadcasts."""


@dataclass(frozen=True)
class VtraceConfig:
    clip_rho: float = 1.0
    """V-trace rho-bar: clip of the importance weight in the value targets; 0 means no clipping."""
    clip_c: float = 1.0
    """V-trace c-bar: clip of the trace coefficients (the reference platform hard-wired it to 1); 0 means no clipping."""
    clip_pg_rho: float = 1.0
    """Clip of the importance weight in the policy-gradient advantage (the reference platform called it c); 0 means no clipping."""
    laser: bool = False
    """LASER: a step whose KL(pi || mu) exceeds laser_kl_threshold is cut from the trace, the advantages, the value error and the cloning terms."""
    laser_kl_threshold: float = 0.3
    """LASER's KL threshold (the reference platform's default)."""
    clear_policy_weight: float = 0.0
    """CLEAR policy cloning: weight of the KL between behaviour and current policy, summed over every step of the batch; 0 switches it off (plain IMPALA: a queue-only run has no old behaviour worth keeping; CLEAR's paper uses 0.01 with replay)."""
    clear_policy_kl: str = "mu_pi"
    """Direction of the cloning KL: mu_pi is KL(mu || pi), the CLEAR paper's; pi_mu is KL(pi || mu), what the reference platform computed."""
    clear_value_weight: float = 0.0
    """CLEAR value cloning: weight of the error between the current value and the worker's behaviour-time value; 0 switches it off (the CLEAR paper uses 0.005 with replay)."""
    clear_value_loss: str = "squared"
    """squared: sum of (V - V_mu)^2, the CLEAR paper's form; l2_norm: its square root, the reference platform's unsquared form."""


@dataclass(frozen=True)
class ApexConfig:
    epsilon: float = 0.4
    """Ape-X exploration: worker i of N acts epsilon-greedily with epsilon ** (1 + epsilon_alpha * i / (N - 1)) (unused when noisy: the noise explores)."""
    epsilon_alpha: float = 7.0
    """The exponent's spread across workers in the Ape-X epsilon schedule."""
    n_step: int = 3
    """Steps of return in each transition's target (n-step double Q-learning)."""
    priority_batch: int = 1000
    """Transitions a worker collects before it computes their initial priorities with its network copies and sends them."""
    worker_priorities: bool = True
    """Workers compute initial priorities (loss ** priority_exponent); false sends them as unknown, which the replay gives its largest priority."""
    priority_exponent: float = 0.5
    """omega: a transition's priority is its loss to this power."""
    importance_beta: float = 0.4
    """Exponent of the importance weights (N * P) ** -beta at the start; it anneals linearly to 1."""
    beta_anneal_steps: int = 0
    """Learner steps over which beta reaches 1; 0 derives them from run.max_env_frames."""
    learn_start: int = 80_000
    """Transitions the replay holds before the learner starts."""
    target_update: int = 2000
    """Learner steps between copies of the online network into the target network."""
    head: str = "iqn"
    """iqn (implicit quantiles) or c51 (categorical on atoms, "Rainbow only"; v_min..v_max must cover the discounted returns)."""
    quantiles: int = 64
    """IQN: N, fractions sampled for the online quantiles."""
    target_quantiles: int = 64
    """IQN: N', fractions sampled for the target quantiles."""
    acting_quantiles: int = 32
    """IQN: K, fractions whose mean quantile is the Q-value for acting and for the double-Q action."""
    embedding_dim: int = 64
    """IQN: length of the cosine embedding of a fraction."""
    state_size: int = 0
    """IQN and C51: width of a linear layer (and ReLU) between the torso and the heads; IQN multiplies its output by each fraction's embedding, so every quantile row costs state_size x model.hidden_size x 2 instead of the torso's width (2,592 for atari_small, 3,136 for atari). 0: the torso's output goes straight in, as in the papers."""
    kappa: float = 1.0
    """IQN: threshold of the quantile Huber loss."""
    noisy: bool = True
    """Dueling heads of factorised noisy linear layers; workers then act greedily on the noisy Q-values (epsilon is not used)."""
    noisy_sigma0: float = 0.1
    """Initial noise scale of the noisy layers, divided by the square root of their fan-in."""
    atoms: int = 51
    """C51: atoms of the return distribution."""
    v_min: float = -10.0
    """C51: smallest atom."""
    v_max: float = 10.0
    """C51: largest atom."""
    replay_ratio: float = 0.0
    """Keep about one learner update per this many worker env steps (summed over workers); 0: workers run free."""


@dataclass(frozen=True)
class BrokerConfig:
    prefetch_batches: int = 2
    """Batches ready ahead of the learner: the learner grants this many credits, the broker sends a batch per credit."""
    torch_threads: int = 1
    """PyTorch threads for the broker's feature recomputation (elite and attentive replay)."""
    precision: str = "fp32"
    """fp32, or bf16 (autocast) for the broker's feature recomputation."""


@dataclass(frozen=True)
class ReplayConfig:
    type: str = "queue"
    """queue: FIFO of fresh unrolls; uniform: ring sampled uniformly; elite: sampled by distance between stored behaviour-time and current features; attentive: by distance to the newest state's current feature."""
    capacity: int = 64
    """Unrolls the replay holds; when full the oldest is replaced. A queue holds at least what one batch takes from it, so capacity 1 means as fresh as possible."""
    sample_ratio: float = 1.0
    """Share of every batch taken from this replay; the ratios sum to 1 and batch_size x sample_ratio must be whole."""
    fill_fraction: float = 0.1
    """uniform, elite, attentive: training starts once the replay holds fill_fraction x capacity unrolls (a queue: one batch's share)."""
    dist_function: str = "ln_norm"
    """elite, attentive: ln_norm (p-norm of the [steps, F] difference), cos_dist (1 - cosine similarity, mean over steps) or kl_div (sum over steps of KL(softmax(stored) || softmax(current)))."""
    p: float = 2.0
    """elite, attentive: the p of ln_norm."""
    strategy: int = 3
    """elite, attentive: 1 the n lowest distances; 2 the lowest of each of n distance strata; 3 like 1, least sampled first; 4 like 2, least sampled in each stratum."""
    lambda_batch_multiplier: float = 6.0
    """elite, attentive: the candidate pool holds lambda x n distinct units (n = batch_size x sample_ratio); lambda anneals to 1, where sampling is uniform."""
    alfa_annealing_factor: float = 2.0
    """elite, attentive: lambda anneals linearly to 1 over alfa_annealing_factor x the learning-rate decay steps, counted in sample calls."""
    feature_steps: int = 5
    """elite, attentive: time steps of each unit whose features are compared, evenly spaced over the unroll; 0 (or T or more) compares all T (exact, and the costliest)."""
    elite_insertion: bool = False
    """elite, attentive: once full, a new unit replaces the unit with the largest distance among elite_batch_size random ones instead of the oldest."""
    elite_batch_size: int = 20
    """elite, attentive: units drawn for each elite insertion (the units of one worker message share a draw)."""


@dataclass(frozen=True)
class TransportConfig:
    kind: str = "ipc"
    """ipc (unix sockets in the run's private folder) or tcp."""
    bind_host: str = "127.0.0.1"
    """Address tcp sockets bind to: 127.0.0.1, or any other address (0.0.0.0: every interface) when curve_keys is set."""
    curve_keys: str = ""
    """Folder of CurveZMQ keys made by zrl-keys: every socket is then encrypted, and bound sockets admit only the client keys in its authorized/ folder. Required to bind any address but loopback."""
    hwm: int = 64
    """ZeroMQ high-water mark (messages) on every socket that carries unrolls or batches."""
    poll_timeout_ms: int = 100
    """Every blocking receive polls this long before it checks whether to stop."""


REPLAY_TYPES = ("queue", "uniform", "elite", "attentive", "prioritized")
APEX_HEADS = ("iqn", "c51")
WORKER_POLICIES = ("network", "uniform")
FEATURE_REPLAYS = ("elite", "attentive")
DISTANCES = ("ln_norm", "cos_dist", "kl_div")
CLONING_KL = ("mu_pi", "pi_mu")
CLONING_VALUE = ("squared", "l2_norm")
_REPLAY_COMMON = ("type", "capacity", "sample_ratio")
_REPLAY_SAMPLED = (
    "dist_function",
    "p",
    "strategy",
    "lambda_batch_multiplier",
    "alfa_annealing_factor",
    "feature_steps",
)
REPLAY_KEYS = {
    "queue": _REPLAY_COMMON,
    "uniform": _REPLAY_COMMON + ("fill_fraction",),
    "elite": _REPLAY_COMMON + ("fill_fraction",) + _REPLAY_SAMPLED + ("elite_insertion", "elite_batch_size"),
    "attentive": _REPLAY_COMMON + ("fill_fraction",) + _REPLAY_SAMPLED + ("elite_insertion", "elite_batch_size"),
    "prioritized": _REPLAY_COMMON,  # capacity in transitions; the [apex] section holds the rest
}
MOVED_KEYS = {
    "learner.clip_rho_threshold": "vtrace.clip_rho",
    "learner.clip_pg_rho_threshold": "vtrace.clip_pg_rho",
    "model.send_features": None,  # workers send features whenever an elite or attentive replay needs them
}
OPTIMIZERS = ("rmsprop", "rmsprop_tf", "adam")
PRECISIONS = ("fp32", "bf16")
MODEL_KINDS = ("auto", "atari", "atari_small", "mlp", "auto_nature")
TRANSPORT_KINDS = ("ipc", "tcp")
LOOPBACK_HOSTS = ("127.0.0.1", "localhost")
# Keys a resumed run may change: how long, how many processes, how often it reports and saves.
SAFE_ON_RESUME = (
    "run.max_env_frames",
    "run.log_interval_s",
    "run.checkpoint_every_steps",
    "run.checkpoint_every_minutes",
    "run.keep_checkpoints",
    "run.heartbeat_timeout_s",
    "run.max_seconds",
    "workers.max_restarts",
    "workers.restart_window_s",
    "workers.count",
    "workers.envs_per_worker",
    "workers.torch_threads",
    "workers.nice",
    "workers.stats_interval_s",
    "workers.max_weights_wait_s",
    "learner.device",
    "learner.torch_threads",
    "broker.torch_threads",
    "broker.prefetch_batches",
    "transport.kind",
    "transport.hwm",
    "transport.poll_timeout_ms",
)
TOP_KEYS: dict[str, type] = {"algo": str}  # keys outside any section
OPTION_FLAGS = {"workers.count": "--workers", "workers.envs_per_worker": "--envs-per-worker"}


@dataclass(frozen=True)
class Config:
    algo: str = "vtrace"
    """The agent: vtrace (IMPALA with V-trace, CLEAR and LASER; the [vtrace] section) or apex_iqn (Rainbow-IQN Ape-X with prioritized replay; the [apex] section)."""
    run: RunConfig = field(default_factory=RunConfig)
    env: EnvConfig = field(default_factory=EnvConfig)
    workers: WorkersConfig = field(default_factory=WorkersConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    learner: LearnerConfig = field(default_factory=LearnerConfig)
    vtrace: VtraceConfig = field(default_factory=VtraceConfig)
    apex: ApexConfig = field(default_factory=ApexConfig)
    broker: BrokerConfig = field(default_factory=BrokerConfig)
    replay: tuple[ReplayConfig, ...] = (ReplayConfig(),)
    transport: TransportConfig = field(default_factory=TransportConfig)

    def __post_init__(self) -> None:
        check(self)


SECTIONS: dict[str, type] = {
    "run": RunConfig,
    "env": EnvConfig,
    "workers": WorkersConfig,
    "model": ModelConfig,
    "learner": LearnerConfig,
    "vtrace": VtraceConfig,
    "apex": ApexConfig,
    "broker": BrokerConfig,
    "transport": TransportConfig,
}


# ---------------------------------------------------------------------------------------------
# validation of combinations


def _fail(key: str, message: str) -> typing.NoReturn:
    raise ConfigError(f"{key}: {message}")


def check(cfg: Config) -> None:
    """Raise ConfigError for impossible values and combinations (no I/O)."""
    positive = {
        "run.max_env_frames": cfg.run.max_env_frames,
        "run.log_interval_s": cfg.run.log_interval_s,
        "run.keep_checkpoints": cfg.run.keep_checkpoints,
        "run.heartbeat_timeout_s": cfg.run.heartbeat_timeout_s,
        "env.frame_skip": cfg.env.frame_skip,
        "env.frame_stack": cfg.env.frame_stack,
        "env.max_episode_frames": cfg.env.max_episode_frames,
        "workers.count": cfg.workers.count,
        "workers.envs_per_worker": cfg.workers.envs_per_worker,
        "workers.torch_threads": cfg.workers.torch_threads,
        "workers.stats_interval_s": cfg.workers.stats_interval_s,
        "workers.max_weights_wait_s": cfg.workers.max_weights_wait_s,
        "model.hidden_size": cfg.model.hidden_size,
        "model.feature_size": cfg.model.feature_size,
        "learner.batch_size": cfg.learner.batch_size,
        "learner.unroll_length": cfg.learner.unroll_length,
        "learner.learning_rate": cfg.learner.learning_rate,
        "learner.reward_scale": cfg.learner.reward_scale,
        "learner.rmsprop_eps": cfg.learner.rmsprop_eps,
        "learner.adam_eps": cfg.learner.adam_eps,
        "learner.publish_every": cfg.learner.publish_every,
        "broker.prefetch_batches": cfg.broker.prefetch_batches,
        "broker.torch_threads": cfg.broker.torch_threads,
        "vtrace.laser_kl_threshold": cfg.vtrace.laser_kl_threshold,
        "transport.hwm": cfg.transport.hwm,
        "transport.poll_timeout_ms": cfg.transport.poll_timeout_ms,
    }
    for key, value in positive.items():
        if not value > 0:
            _fail(key, f"must be > 0, got {value!r}")
    non_negative = {
        "run.seed": cfg.run.seed,
        "run.checkpoint_every_steps": cfg.run.checkpoint_every_steps,
        "run.checkpoint_every_minutes": cfg.run.checkpoint_every_minutes,
        "env.noop_max": cfg.env.noop_max,
        "env.max_episode_steps": cfg.env.max_episode_steps,
        "workers.ring_slots": cfg.workers.ring_slots,
        "workers.produce_ratio": cfg.workers.produce_ratio,
        "learner.torch_threads": cfg.learner.torch_threads,
        "learner.lr_decay_steps": cfg.learner.lr_decay_steps,
        "learner.lr_end": cfg.learner.lr_end,
        "learner.lr_decay_power": cfg.learner.lr_decay_power,
        "learner.rmsprop_momentum": cfg.learner.rmsprop_momentum,
        "learner.baseline_cost": cfg.learner.baseline_cost,
        "learner.entropy_cost": cfg.learner.entropy_cost,
        "learner.grad_norm_clip": cfg.learner.grad_norm_clip,
        "vtrace.clip_rho": cfg.vtrace.clip_rho,
        "vtrace.clip_c": cfg.vtrace.clip_c,
        "vtrace.clip_pg_rho": cfg.vtrace.clip_pg_rho,
        "vtrace.clear_policy_weight": cfg.vtrace.clear_policy_weight,
        "vtrace.clear_value_weight": cfg.vtrace.clear_value_weight,
    }
    for key, value in non_negative.items():
        if not value >= 0:
            _fail(key, f"must be >= 0, got {value!r}")
    for key, value in {
        "env.sticky_action_prob": cfg.env.sticky_action_prob,
        "learner.discount": cfg.learner.discount,
        "learner.rmsprop_alpha": cfg.learner.rmsprop_alpha,
    }.items():
        if not 0.0 <= value <= 1.0:
            _fail(key, f"must be between 0 and 1, got {value!r}")
    if cfg.learner.lr_end > cfg.learner.learning_rate:
        _fail("learner.lr_end", f"{cfg.learner.lr_end} is above learner.learning_rate {cfg.learner.learning_rate}")
    _choice("learner.optimizer", cfg.learner.optimizer, OPTIMIZERS)
    if cfg.learner.optimizer == "rmsprop_tf" and not cfg.learner.rmsprop_alpha < 1.0:
        _fail(
            "learner.rmsprop_alpha",
            f"must be below 1 for rmsprop_tf (the mean square would never move), got {cfg.learner.rmsprop_alpha}",
        )
    _choice("learner.precision", cfg.learner.precision, PRECISIONS)
    _choice("broker.precision", cfg.broker.precision, PRECISIONS)
    _choice("vtrace.clear_policy_kl", cfg.vtrace.clear_policy_kl, CLONING_KL)
    _choice("vtrace.clear_value_loss", cfg.vtrace.clear_value_loss, CLONING_VALUE)
    _choice("model.kind", cfg.model.kind, MODEL_KINDS)
    _choice("transport.kind", cfg.transport.kind, TRANSPORT_KINDS)
    _choice("workers.policy", cfg.workers.policy, WORKER_POLICIES)
    if not 0 <= cfg.workers.nice <= 19:
        _fail(
            "workers.nice", f"must be between 0 and 19 (the workers only lower their priority), got {cfg.workers.nice}"
        )
    if cfg.workers.max_restarts < 0:
        _fail(
            "workers.max_restarts",
            f"must be >= 0 (0: a worker that dies stops the run), got {cfg.workers.max_restarts}",
        )
    if not cfg.workers.restart_window_s > 0:
        _fail("workers.restart_window_s", f"must be > 0, got {cfg.workers.restart_window_s}")
    if cfg.run.max_seconds < 0:
        _fail("run.max_seconds", f"must be >= 0 (0: no limit), got {cfg.run.max_seconds}")
    if not cfg.env.id:
        _fail("env.id", "must name an environment, e.g. ALE/Pong-v5 or CartPole-v1")
    device = cfg.learner.device
    if not (device in ("auto", "cpu", "cuda") or (device.startswith("cuda:") and device[5:].isdigit())):
        _fail("learner.device", f"{device!r} is not one of auto, cpu, cuda, cuda:N")
    if any(width <= 0 for width in cfg.model.mlp_hidden) or not cfg.model.mlp_hidden:
        _fail("model.mlp_hidden", f"needs at least one positive width, got {list(cfg.model.mlp_hidden)}")
    if cfg.transport.bind_host not in LOOPBACK_HOSTS and not cfg.transport.curve_keys:
        _fail(
            "transport.bind_host",
            f"{cfg.transport.bind_host!r} is not a loopback address; binding other addresses needs CurveZMQ keys: "
            "make a folder with zrl-keys PATH and set transport.curve_keys = PATH, or use 127.0.0.1.",
        )
    _choice("algo", cfg.algo, tuple(agent_registry))  # the agents zrl trains: zrl/agents/, one package each
    _check_replays(cfg)
    get_agent(cfg.algo).check(cfg)  # what the agent's own section and replay must be
    _check_deterministic(cfg)
    if 0 < cfg.workers.produce_ratio < 1:
        _fail(
            "workers.produce_ratio",
            f"{cfg.workers.produce_ratio} would send less than one batch per weights "
            "version and starve the learner; give 1 or more (1.25 leaves a margin), or 0 to run free",
        )
    window = cfg.learner.unroll_length + cfg.env.frame_stack
    if cfg.workers.ring_slots and cfg.workers.ring_slots < 2 * window:
        _fail(
            "workers.ring_slots",
            f"{cfg.workers.ring_slots} slots cannot keep one unroll's frames while the next is "
            f"written; give at least 2 x (learner.unroll_length + env.frame_stack) = {2 * window}, or 0 for auto",
        )


def _check_deterministic(cfg: Config) -> None:
    if not cfg.run.deterministic:
        return
    why = "run.deterministic needs"
    if cfg.workers.count != 1:
        _fail("workers.count", f"{cfg.workers.count}: {why} a single worker (workers.count = 1)")
    if len(cfg.replay) != 1 or cfg.replay[0].type != "queue":
        _fail("replay", f"{why} a single queue replay (sampled replays draw at random, in time with the workers)")
    if cfg.learner.batch_size % cfg.workers.envs_per_worker:
        _fail(
            "workers.envs_per_worker",
            f"{cfg.workers.envs_per_worker}: {why} learner.batch_size "
            f"({cfg.learner.batch_size}) to be a multiple of it, so that every batch trains on whole unrolls of "
            "the worker",
        )


def _choice(key: str, value: str, valid: tuple[str, ...]) -> None:
    if value not in valid:
        hint = difflib.get_close_matches(value, valid, n=1)
        extra = f" (did you mean {hint[0]!r}?)" if hint else ""
        _fail(key, f"{value!r} is not one of {', '.join(valid)}{extra}")


def _check_replays(cfg: Config) -> None:
    if not cfg.replay:
        _fail("replay", "at least one [[replay]] table is needed")
    batch = cfg.learner.batch_size
    total = 0.0
    for i, rep in enumerate(cfg.replay):
        key = f"replay[{i}]"
        _choice(f"{key}.type", rep.type, REPLAY_TYPES)
        if rep.capacity <= 0:
            _fail(f"{key}.capacity", f"must be > 0, got {rep.capacity}")
        if not 0.0 < rep.sample_ratio <= 1.0:
            _fail(f"{key}.sample_ratio", f"must be in (0, 1], got {rep.sample_ratio}")
        share = batch * rep.sample_ratio
        if abs(share - round(share)) > 1e-6:
            _fail(
                f"{key}.sample_ratio",
                f"learner.batch_size {batch} x sample_ratio {rep.sample_ratio} = {share:g} is not a whole number of unrolls",
            )
        if rep.type not in ("queue", "prioritized") and round(share) > rep.capacity:
            _fail(
                f"{key}.capacity",
                f"{rep.capacity} unrolls is less than one batch takes from this replay "
                f"(learner.batch_size {batch} x sample_ratio {rep.sample_ratio} = {round(share)})",
            )
        if not 0.0 < rep.fill_fraction <= 1.0:
            _fail(f"{key}.fill_fraction", f"must be in (0, 1], got {rep.fill_fraction}")
        _choice(f"{key}.dist_function", rep.dist_function, DISTANCES)
        if not rep.p >= 1.0:
            _fail(f"{key}.p", f"the p of a p-norm must be >= 1, got {rep.p}")
        if rep.strategy not in (1, 2, 3, 4):
            _fail(f"{key}.strategy", f"{rep.strategy} is not one of 1, 2, 3, 4")
        if not rep.lambda_batch_multiplier >= 1.0:
            _fail(
                f"{key}.lambda_batch_multiplier",
                f"must be >= 1 (1 samples uniformly), got {rep.lambda_batch_multiplier}",
            )
        if not rep.alfa_annealing_factor > 0.0:
            _fail(f"{key}.alfa_annealing_factor", f"must be > 0, got {rep.alfa_annealing_factor}")
        if rep.feature_steps < 0:
            _fail(f"{key}.feature_steps", f"must be >= 0 (0 compares all steps), got {rep.feature_steps}")
        if rep.elite_insertion and rep.capacity < cfg.workers.envs_per_worker:
            _fail(
                f"{key}.capacity",
                f"{rep.capacity} units cannot take one worker message of workers.envs_per_worker "
                f"{cfg.workers.envs_per_worker} units by elite insertion; raise it, or set elite_insertion = false",
            )
        if rep.elite_batch_size < 1:
            _fail(
                f"{key}.elite_batch_size", f"must be >= 1 (at most the capacity is drawn), got {rep.elite_batch_size}"
            )
        total += rep.sample_ratio
    if abs(total - 1.0) > 1e-6:
        _fail("replay", f"the sample_ratio values sum to {total:g}; they must sum to 1")


def replay_share(cfg: Config, rep: ReplayConfig) -> int:
    """Unrolls each batch takes from a replay: batch_size x sample_ratio."""
    return round(cfg.learner.batch_size * rep.sample_ratio)


def apex_anneal_steps(cfg: Config, frames_per_step: int) -> int:
    """Learner steps over which Ape-X's importance exponent beta reaches 1: apex.beta_anneal_steps, or from the
    budget, one step per apex.replay_ratio env steps after learn_start (4 when the ratio is off, Rainbow's)."""
    if cfg.apex.beta_anneal_steps:
        return cfg.apex.beta_anneal_steps
    steps = cfg.run.max_env_frames // frames_per_step - cfg.apex.learn_start
    return max(1, int(steps // (cfg.apex.replay_ratio or 4)))


def fill_target(cfg: Config, rep: ReplayConfig) -> int:
    """Units a replay must hold before training starts: one batch's share for a queue, apex.learn_start
    transitions for a prioritized replay, else fill_fraction x capacity (and never less than the share)."""
    if rep.type == "prioritized":
        return cfg.apex.learn_start
    share = replay_share(cfg, rep)
    return share if rep.type == "queue" else max(share, math.ceil(rep.fill_fraction * rep.capacity - 1e-9))


def fresh_share(cfg: Config) -> float:
    """The share of a batch that is fresh (taken from queues); 1 when no queue is configured."""
    return sum(r.sample_ratio for r in cfg.replay if r.type == "queue") or 1.0


def needs_features(cfg: Config) -> bool:
    """Whether workers must send behaviour-time features (an elite or attentive replay needs them)."""
    return any(r.type in FEATURE_REPLAYS for r in cfg.replay)


def unrolls_per_version(cfg: Config) -> float:
    """How many unrolls each worker may send per new weights version, on average (0: no limit).

    All workers together send ``produce_ratio`` times the fresh share of a batch per version (a version
    covers ``publish_every`` learner steps), so the learner always has fresh data and little is produced
    only to be dropped. Under 1 (many workers or envs for a small batch) a worker sends one unroll every
    1 / rate versions: at 8 workers x 4 envs and batches of 8, a whole unroll per worker per version was four
    batches' worth, three of them dropped. A deterministic run's single worker sends exactly what one version
    trains on.
    """
    if cfg.run.deterministic:
        return cfg.learner.batch_size * cfg.learner.publish_every // cfg.workers.envs_per_worker
    if not cfg.workers.produce_ratio:
        return 0
    units = cfg.workers.produce_ratio * cfg.learner.batch_size * cfg.learner.publish_every * fresh_share(cfg)
    return units / (cfg.workers.count * cfg.workers.envs_per_worker)


def learner_threads(cfg: Config) -> int:
    """learner.torch_threads, or where it is 0 the cores this process may use less the workers' inference
    threads, at least 1 (the broker, mostly idle for a queue, is not counted). On 2 cores PyTorch's own choice (2) had the learner's threads wait on workers that
    held a core (the learner of one 1 x 8 Pong run trained 12 steps/s with 1 thread)."""
    if cfg.learner.torch_threads:
        return cfg.learner.torch_threads
    return max(1, usable_cores() - cfg.workers.count * cfg.workers.torch_threads)


def usable_cores() -> int:
    """The cores this process may run on (its affinity), which the workers and the learner share."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def split_note(cfg: Config) -> str | None:
    """What to tell a user whose split has more worker processes than cores, None otherwise. Each process costs
    CPU time of its own and batches its inference over fewer envs: on 2 cores (AMD EPYC), 8 x 4 trained 14.5
    learner steps/s with the workers at nice 10, against 19.5 at 2 x 8 (zrl-bench --suggest)."""
    cores = usable_cores()
    if cfg.workers.count <= cores:
        return None
    return (
        f"{cfg.workers.count} worker processes share {cores} cores with the learner; they run at nice "
        f"{cfg.workers.nice} so that the learner keeps its share, but fewer, larger workers train faster here "
        f"(on 2 cores, 8 x 4 made 0.74 of the learner steps/s of 2 x 8). Try --workers {cores} "
        f"--envs-per-worker 8; zrl-bench --suggest measures the splits on this machine."
    )


def queue_capacity(cfg: Config, rep: ReplayConfig) -> int:
    """A queue holds at least what one batch takes from it and what the workers send per weights version,
    so that throttled workers never wait on a learner that starves (the reference's capacity 1 queue)."""
    per_version = math.ceil(unrolls_per_version(cfg) - 1e-9) * cfg.workers.count * cfg.workers.envs_per_worker
    return max(rep.capacity, replay_share(cfg, rep), per_version)


def lr_decay_steps(cfg: Config, frames_per_step: int) -> int:
    """Learner steps over which the learning rate decays (from the frame budget when not given); elite
    lambda annealing is measured against it too."""
    if cfg.learner.lr_decay_steps:
        return cfg.learner.lr_decay_steps
    fresh_per_step = cfg.learner.batch_size * fresh_share(cfg) * cfg.learner.unroll_length * frames_per_step
    return max(1, int(cfg.run.max_env_frames // fresh_per_step))


REFERENCE_TYPES = {
    "queue": "queue",
    "standard": "uniform",
    "uniform": "uniform",
    "elite": "elite",
    "attentive": "attentive",
    "prioritized": "prioritized",
    "custom": None,
}
REFERENCE_SAMPLERS = {"elite_sampling": "elite", "attentive_sampling": "attentive"}


def replays_from_json(text: str, source: str) -> list[dict[str, Any]]:
    """[[replay]] tables from a JSON list in the reference platform's --replay_parameters form (zrl's own
    key names are accepted as well): standard means uniform, and custom maps to elite or attentive by its
    sample_strategy (elite with lambda 1, i.e. uniform sampling, when it only names elite_insertion)."""
    import json

    try:
        items = json.loads(text)
    except json.JSONDecodeError as err:
        raise ConfigError(f"{source}: not valid JSON: {err}") from None
    if not isinstance(items, list) or not items or not all(isinstance(i, dict) for i in items):
        raise ConfigError(
            f'{source}: expected a JSON list of objects, e.g. [{{"type": "queue", "capacity": 1, "sample_ratio": 1}}]'
        )
    tables = []
    for i, item in enumerate(items):
        item = dict(item)
        key = f"replay[{i}]"
        kind = item.pop("type", None)
        if not isinstance(kind, str) or kind.lower() not in REFERENCE_TYPES:
            hint = difflib.get_close_matches(str(kind).lower(), list(REFERENCE_TYPES), n=1)
            extra = f" (did you mean {hint[0]!r}?)" if hint else ""
            raise ConfigError(f"{source}: {key}.type = {kind!r} is not one of {', '.join(REFERENCE_TYPES)}{extra}")
        kind = REFERENCE_TYPES[kind.lower()]
        table: dict[str, Any] = {}
        sampler = item.pop("sample_strategy", None)
        insert = item.pop("insert_strategy", None)
        if kind in ("queue", "uniform") and sampler is not None:
            raise ConfigError(
                f"{source}: {key}.sample_strategy applies only to custom replays; this one is {items[i]['type']}"
            )
        if sampler is not None and (not isinstance(sampler, str) or sampler.lower() not in REFERENCE_SAMPLERS):
            raise ConfigError(
                f"{source}: {key}.sample_strategy = {sampler!r} is not one of elite_sampling, attentive_sampling"
            )
        if insert is not None and (not isinstance(insert, str) or insert.lower() != "elite_insertion"):
            raise ConfigError(
                f"{source}: {key}.insert_strategy = {insert!r}: the only insertion strategy is elite_insertion"
            )
        if kind is None:  # custom
            if sampler is None and insert is None:
                raise ConfigError(
                    f"{source}: {key}: a custom replay needs sample_strategy (elite_sampling or "
                    "attentive_sampling) or insert_strategy (elite_insertion)"
                )
            kind = REFERENCE_SAMPLERS[sampler.lower()] if sampler else "elite"
            if sampler is None:
                table["lambda_batch_multiplier"] = 1.0
        if insert is not None:
            table["elite_insertion"] = True
        strategy = item.pop("elite_sampling_strategy", None)
        if strategy is not None:
            text_value = str(strategy).lower().removeprefix("strategy")
            if text_value not in ("1", "2", "3", "4"):
                raise ConfigError(
                    f"{source}: {key}.elite_sampling_strategy = {strategy!r} is not one of strategy1, "
                    "strategy2, strategy3, strategy4"
                )
            table["strategy"] = int(text_value)
        for name, value in item.items():
            if isinstance(value, str) and name == "dist_function":
                value = value.lower()
            if name in ("lambda_batch_multiplier", "alfa_annealing_factor", "p") and isinstance(value, int):
                value = float(value)
            table[name] = value
        table["type"] = kind
        tables.append(table)
    return tables


# ---------------------------------------------------------------------------------------------
# building from dictionaries, with type checks that name the key


def _type_name(tp: Any) -> str:
    return {int: "an integer", float: "a number", str: "a string", bool: "true or false"}.get(tp, "a list of integers")


def _coerce(key: str, value: Any, tp: Any, source: str) -> Any:
    origin = typing.get_origin(tp)
    ok = False
    if tp is bool:
        ok = isinstance(value, bool)
    elif tp is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif tp is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        value = float(value) if ok else value
    elif tp is str:
        ok = isinstance(value, str)
    elif origin is tuple:
        ok = isinstance(value, (list, tuple)) and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
        value = tuple(value) if ok else value
    if not ok:
        raise ConfigError(f"{source}: {key} = {value!r} must be {_type_name(tp)}")
    return value


def _unknown(source: str, key: str, valid: list[str]) -> ConfigError:
    hint = difflib.get_close_matches(key, valid, n=1, cutoff=0.6)
    extra = f" (did you mean '{hint[0]}'?)" if hint else ""
    return ConfigError(f"{source}: unknown key '{key}'{extra}")


def _all_keys() -> list[str]:
    keys = [f"{name}.{f.name}" for name, cls in SECTIONS.items() for f in dataclasses.fields(cls)]
    keys += [f"replay.{f.name}" for f in dataclasses.fields(ReplayConfig)]
    return keys + list(SECTIONS) + ["replay"] + list(TOP_KEYS)


def _merge(base: dict, layer: dict, source: str, sources: dict[str, str]) -> None:
    """Merge one layer of raw values into base, checking section and key names."""
    for section, body in layer.items():
        if section in TOP_KEYS:
            if section == "algo" and isinstance(body, dict):
                raise ConfigError(
                    f"{source}: [algo] is now [vtrace] (V-trace's clips, CLEAR and LASER); the top-level "
                    "key algo = " + " or ".join(f'"{name}"' for name in agent_registry) + " names the agent"
                )
            base[section] = body
            sources[section] = source
            continue
        if section == "replay":
            if not isinstance(body, list) or not all(isinstance(t, dict) for t in body):
                raise ConfigError(f"{source}: replay must be a list of tables ([[replay]])")
            everything = [f.name for f in dataclasses.fields(ReplayConfig)]
            for i, table in enumerate(body):
                kind = table.get("type", ReplayConfig.type)
                valid = REPLAY_KEYS.get(kind, everything) if isinstance(kind, str) else everything
                for key in table:
                    if key in everything and key not in valid:
                        users = " and ".join(k for k, keys in REPLAY_KEYS.items() if key in keys)
                        raise ConfigError(
                            f"{source}: replay[{i}].{key} applies only to {users} replays; this one is {kind}"
                        )
                    if key not in valid:
                        raise _unknown(source, f"replay[{i}].{key}", [f"replay[{i}].{v}" for v in valid])
            base["replay"] = [dict(t) for t in body]
            sources["replay"] = source
            continue
        if section not in SECTIONS:
            raise _unknown(source, section, _all_keys())
        if not isinstance(body, dict):
            raise ConfigError(f"{source}: {section} must be a table ([{section}])")
        valid = {f.name for f in dataclasses.fields(SECTIONS[section])}
        for key, value in body.items():
            if f"{section}.{key}" in MOVED_KEYS:
                to = MOVED_KEYS[f"{section}.{key}"]
                why = (
                    f"it is now {to}"
                    if to
                    else "workers now send features whenever an elite or attentive replay needs them"
                )
                raise ConfigError(f"{source}: {section}.{key} is no longer a key: {why}")
            if key not in valid:
                raise _unknown(source, f"{section}.{key}", _all_keys())
            base.setdefault(section, {})[key] = value
            sources[f"{section}.{key}"] = source


def _build(raw: dict, sources: dict[str, str]) -> Config:
    sections: dict[str, Any] = {}
    for name, cls in SECTIONS.items():
        hints = typing.get_type_hints(cls)
        values = {
            key: _coerce(f"{name}.{key}", value, hints[key], sources.get(f"{name}.{key}", BUILTIN))
            for key, value in raw.get(name, {}).items()
        }
        sections[name] = cls(**values)
    hints = typing.get_type_hints(ReplayConfig)
    replays = []
    for i, table in enumerate(raw.get("replay", [dataclasses.asdict(ReplayConfig())])):
        src = sources.get("replay", BUILTIN)
        replays.append(ReplayConfig(**{k: _coerce(f"replay[{i}].{k}", v, hints[k], src) for k, v in table.items()}))
    sections["replay"] = tuple(replays)
    for key, tp in TOP_KEYS.items():
        if key in raw:
            sections[key] = _coerce(key, raw[key], tp, sources.get(key, BUILTIN))
    try:
        return Config(**sections)
    except ConfigError as err:
        raise ConfigError(f"{_source_of(sources, str(err).split(':', 1)[0])}: {err}") from None


def _source_of(sources: dict[str, str], key: str) -> str:
    """Where the value behind a dotted key came from (its section's last source if it was a default)."""
    if key.startswith("replay"):
        key = "replay"
    if key in sources:
        return sources[key]
    named = [src for k, src in sources.items() if k.split(".")[0] == key.split(".")[0]]
    named = named or list(sources.values())
    return named[-1] if named else BUILTIN


def read_toml(path: str | Path) -> dict:
    """Read a TOML file; a missing, unreadable or malformed file is a ConfigError naming it."""
    path = Path(path)
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such config file") from None
    except IsADirectoryError:
        raise ConfigError(f"{path}: is a folder, not a config file") from None
    except PermissionError:
        raise ConfigError(f"{path}: cannot be read (permission denied)") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
        raise ConfigError(f"{path}: not valid TOML: {err}") from None


def parse_set(item: str) -> tuple[str, str, Any]:
    """Split ``section.key=value``; the value is read as a TOML value, or as a bare string."""
    if "=" not in item:
        raise ConfigError(f"--set {item}: expected section.key=value, e.g. learner.batch_size=16")
    dotted, text = (part.strip() for part in item.split("=", 1))
    if dotted == "replay":
        return "replay", "", replays_from_json(text, f"--set {item}")
    if dotted in TOP_KEYS:
        try:
            return dotted, "", tomllib.loads(f"v = {text}")["v"]
        except tomllib.TOMLDecodeError:
            return dotted, "", text
    if dotted.count(".") != 1:
        raise ConfigError(f"--set {item}: the key must be section.key, e.g. learner.batch_size")
    section, key = dotted.split(".")
    try:
        value = tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        value = text
    return section, key, value


def load(
    path: str | Path | None = None,
    sets: typing.Sequence[str] = (),
    options: dict[str, Any] | None = None,
    stored: bool = False,
) -> Config:
    """Resolve a config: defaults < run file < --set items < command-line options. ``stored``: the file is
    a run's own config.toml, written by an older zrl perhaps (its renamed sections are read as now).

    ``options`` maps dotted keys (e.g. ``"workers.count"``) to values; None values are ignored.
    """
    raw: dict[str, Any] = {}
    sources: dict[str, str] = {}
    if path is not None:
        _merge(raw, _renamed(read_toml(path)) if stored else read_toml(path), str(path), sources)
    for item in sets:
        section, key, value = parse_set(item)
        _merge(
            raw,
            {section: value} if section == "replay" or section in TOP_KEYS else {section: {key: value}},
            f"--set {item}",
            sources,
        )
    for dotted, value in (options or {}).items():
        if value is None:
            continue
        if dotted == "replay":  # --replay: the reference platform's JSON list
            _merge(raw, {"replay": replays_from_json(value, "option --replay")}, "option --replay", sources)
            continue
        section, key = dotted.split(".")
        flag = OPTION_FLAGS.get(dotted, "--" + key.replace("_", "-"))
        _merge(raw, {section: {key: value}}, f"option {flag}", sources)
    return _build(raw, sources)


def to_dict(cfg: Config) -> dict[str, Any]:
    out: dict[str, Any] = {key: getattr(cfg, key) for key in TOP_KEYS}
    for name in SECTIONS:
        out[name] = {
            k: (list(v) if isinstance(v, tuple) else v) for k, v in dataclasses.asdict(getattr(cfg, name)).items()
        }
    out["replay"] = [{k: v for k, v in dataclasses.asdict(r).items() if k in REPLAY_KEYS[r.type]} for r in cfg.replay]
    return out


def _renamed(raw: dict[str, Any]) -> dict[str, Any]:
    """A config zrl wrote earlier (a run folder's, a checkpoint's), as it reads now: [algo] became [vtrace], and
    model.kind = "auto" meant the Nature net until atari_small came, with workers.nice (every config written
    since has that key; a run now also stores the kind it resolved)."""
    if isinstance(raw.get("algo"), dict):
        raw = {**{k: v for k, v in raw.items() if k != "algo"}, "vtrace": raw["algo"]}
    model, workers = raw.get("model"), raw.get("workers")
    if (
        isinstance(model, dict)
        and model.get("kind") == "auto"
        and not (isinstance(workers, dict) and "nice" in workers)
    ):
        raw = {**raw, "model": {**model, "kind": "auto_nature"}}
    return raw


def from_dict(raw: dict[str, Any], source: str) -> Config:
    """Rebuild a config from to_dict output (e.g. stored in a checkpoint)."""
    layered: dict[str, Any] = {}
    sources: dict[str, str] = {}
    _merge(layered, _renamed(raw), source, sources)
    return _build(layered, sources)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        escaped = value.replace("\\", "\\\\").replace('"', '\\"')
        return f'"{escaped}"'
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"cannot write {value!r} as TOML")


def dumps(cfg: Config) -> str:
    """The resolved config as TOML text that ``load`` reads back to an equal Config."""
    data = to_dict(cfg)
    lines = ["# zrl resolved config: every key, as this run used it."]
    lines += [f"{key} = {_toml_value(data[key])}" for key in TOP_KEYS]
    for name in SECTIONS:
        lines.append(f"\n[{name}]")
        lines += [f"{k} = {_toml_value(v)}" for k, v in data[name].items()]
    for rep in data["replay"]:
        lines.append("\n[[replay]]")
        lines += [f"{k} = {_toml_value(v)}" for k, v in rep.items()]
    return "\n".join(lines) + "\n"


def _field_docs() -> dict[str, dict[str, str]]:
    """Each section's field docstrings, read from this file's source (the one place they are written)."""
    import ast
    import inspect

    tree = ast.parse(inspect.getsource(inspect.getmodule(_field_docs)))
    docs: dict[str, dict[str, str]] = {}
    for node in tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        body = node.body
        docs[node.name] = {
            stmt.target.id: nxt.value.value
            for stmt, nxt in zip(body, body[1:])
            if isinstance(stmt, ast.AnnAssign) and isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant)
        }
    return docs


def defaults_toml() -> str:
    """config/defaults.toml: every key with its default and its one-line documentation."""
    docs = _field_docs()
    data = to_dict(Config())
    lines = [
        "# zrl defaults: every config key, its default and what it means.",
        "# Run files override only what differs. Precedence: command-line options > --set section.key=value",
        "# > the run file > these defaults. Generated from zrl/config.py (python -m zrl.config > config/defaults.toml).",
    ]
    for key in TOP_KEYS:
        lines += ["", f"# {docs['Config'][key]}", f"{key} = {_toml_value(data[key])}"]
    for name, cls in SECTIONS.items():
        lines.append(f"\n[{name}]")
        for key, value in data[name].items():
            lines += [f"# {docs[cls.__name__][key]}", f"{key} = {_toml_value(value)}"]
    lines += [
        "\n# Replays, one [[replay]] table each. Every unroll goes into every replay; a batch takes",
        "# batch_size * sample_ratio unrolls from each. The default is one queue: plain on-policy IMPALA.",
        "# --replay also takes the reference platform's JSON list (standard = uniform; custom = elite or attentive).",
    ]
    for rep in data["replay"]:
        lines.append("[[replay]]")
        for key, value in rep.items():
            lines += [f"# {docs['ReplayConfig'][key]}", f"{key} = {_toml_value(value)}"]
    everything = dataclasses.asdict(ReplayConfig())
    lines.append("\n# The other replay keys and their defaults, e.g. for an elite replay:\n# [[replay]]")
    for key, value in everything.items():
        if key not in REPLAY_KEYS["queue"] or key == "type":
            if key == "type":
                lines.append('# type = "elite"')
            else:
                lines += [f"# {key} = {_toml_value(value)}", f"#   {docs['ReplayConfig'][key]}"]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(defaults_toml(), end="")
