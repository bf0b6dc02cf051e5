"""The schema: one frozen dataclass per section, each key declared once with its type, its bounds and its
documentation (``Annotated[type, Meta(...)]``). ``msgspec.convert`` checks types and bounds from these
declarations when a config is loaded (``zrl.config.loading``); ``config/defaults.toml`` is generated from the same
descriptions (``zrl.config.defaults``); the rules between keys are ``zrl.config.checks``. An agent's own section
is declared in its package (``zrl/agents/<name>/config.py``) and composed here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any

from msgspec import Meta

from zrl import agents
from zrl.config.checks import check

BUILTIN = "<built-in defaults>"


@dataclass(frozen=True)
class RunConfig:
    results_dir: Annotated[
        str, Meta(description="Folder that holds one sub-folder per run, results/<env>_<unix_ts>/.")
    ] = "results"
    max_env_frames: Annotated[
        int,
        Meta(
            gt=0,
            description="Budget: the run stops after this many environment frames (Atari: env steps x frame_skip).",
        ),
    ] = 50_000_000
    seed: Annotated[
        int,
        Meta(
            ge=0,
            description="Seed of the learner's model initialisation and of every worker's environments and actions.",
        ),
    ] = 0
    log_interval_s: Annotated[
        float, Meta(gt=0, description="Seconds between progress lines and rows of metrics.csv.")
    ] = 5.0
    tensorboard: Annotated[
        bool,
        Meta(
            description="Also write the figures of metrics.csv and episodes.csv as TensorBoard events in the run folder, at env-frame steps. Without the tensorboard package the run says so once and goes on."
        ),
    ] = True
    background_save: Annotated[
        bool,
        Meta(
            description="The reference platform's key, taken with either value and no effect: zrl always writes metrics.csv, episodes.csv and zrl.log row by row as the run goes, from the launcher.",
        ),
    ] = True
    checkpoint_every_steps: Annotated[
        int,
        Meta(
            ge=0,
            description="Learner steps between checkpoints; a final one is always written at an orderly stop. 0: only the final one.",
        ),
    ] = 5000
    checkpoint_every_minutes: Annotated[
        float,
        Meta(
            ge=0, description="Minutes between checkpoints, besides checkpoint_every_steps; 0: by learner steps only."
        ),
    ] = 0.0
    checkpoint_replay: Annotated[
        bool,
        Meta(
            description="Save every replay (units, priorities, features and the ring frames they read) with each checkpoint, and restore it on resume or restart, so that Ape-X and elite runs need not refill. Costs disk."
        ),
    ] = False
    keep_checkpoints: Annotated[
        int,
        Meta(
            gt=0,
            description="How many periodic checkpoints to keep (the newest ones); best.pt, the best 100-episode mean, is kept apart.",
        ),
    ] = 3
    max_seconds: Annotated[
        float,
        Meta(
            ge=0,
            extra={"hint": "0: no limit"},
            description="Wall-clock budget: the run stops in order (exit code 0) after this many seconds; 0: no limit.",
        ),
    ] = 0.0
    heartbeat_timeout_s: Annotated[
        float,
        Meta(
            gt=0,
            description="Seconds without a report after which a role is hung (at least 60 s before its first report): a worker is restarted; a broker, learner or ingest is handled by run.restart_policy.",
        ),
    ] = 60.0
    restart_policy: Annotated[
        str,
        Meta(
            extra={"hint": "resume or stop"},
            description='What a dead or hung broker, learner or ingest does to the run: "resume", its roles restart from the newest good checkpoint in the same folder; "stop", exit code 1 (a deterministic run always stops).',
        ),
    ] = "resume"
    max_restarts: Annotated[
        int,
        Meta(
            ge=0,
            description="Under run.restart_policy = \"resume\": more restarts of the run's roles than this within run.restart_window_s stop the run with exit code 1 and the dead role's traceback. 0: never restart.",
        ),
    ] = 3
    restart_window_s: Annotated[
        float, Meta(gt=0, description="The window over which run.max_restarts counts the restarts of the run's roles.")
    ] = 1800.0
    keep_freed_memory: Annotated[
        bool,
        Meta(
            description="Learner and broker keep the memory PyTorch frees in their heap for the next step (glibc mallopt): faster on CPU (perf/README.md), but memory stays at its peak. No effect without glibc."
        ),
    ] = True
    best_by: Annotated[
        str,
        Meta(
            extra={"hint": "train or eval"},
            description='What best.pt follows: "train", the best mean raw score of the last 100 training episodes; "eval", the best evaluation during training (the [eval] section must be on). best.json says which.',
        ),
    ] = "train"
    deterministic: Annotated[
        bool,
        Meta(
            description="One worker in lockstep with the learner, for bit-exact repeats and resumes. Needs workers.count = 1, one queue replay, learner.replay_ratio = 0, batch_size a multiple of envs_per_worker. Slower."
        ),
    ] = False


@dataclass(frozen=True)
class EnvConfig:
    id: Annotated[
        str,
        Meta(
            description="Environment id: ALE/<Game>-v5 or <Game>NoFrameskip-v4 for Atari, any Gymnasium id with a Box observation otherwise."
        ),
    ] = "ALE/Pong-v5"
    frame_skip: Annotated[
        int, Meta(gt=0, description="Atari: emulator frames per agent step, with a max over the last two.")
    ] = 4
    noop_max: Annotated[int, Meta(ge=0, description="Atari: up to this many random no-ops at every reset.")] = 30
    frame_stack: Annotated[
        int,
        Meta(
            gt=0,
            description="Frames stacked into one observation, rebuilt from single frames at gather time (1 for vector observations).",
        ),
    ] = 4
    episodic_life: Annotated[
        bool,
        Meta(
            description="Atari: a lost life ends the training episode (discount 0) without resetting the game; scores count whole games."
        ),
    ] = True
    grayscale: Annotated[
        bool,
        Meta(
            description="Atari: grey frames, one channel; false keeps colour: [3, H, W] frames stacked into 3 x frame_stack channels, three times the rings' memory and the first convolution's cost.",
        ),
    ] = True
    resolution: Annotated[
        tuple[int, int],
        Meta(
            extra={"hint": "[height, width]"},
            description="Atari: [height, width] the frames are resized to; the conv nets' fully connected layer follows the size. The smallest they take: 20 x 20 (atari_small), 36 x 36 (atari).",
        ),
    ] = (84, 84)
    clip_rewards: Annotated[
        bool,
        Meta(
            description="Train on clipped rewards (env.clip_method says how); raw scores are still what episodes.csv reports."
        ),
    ] = True
    clip_method: Annotated[
        str,
        Meta(
            extra={"hint": "abs_one_sign, abs_one_clamp or soft_asymmetric"},
            description="How env.clip_rewards clips a reward r: abs_one_sign, sign(r) (DQN's); abs_one_clamp, r clamped to [-1, 1]; soft_asymmetric, 5 tanh(r/5) for r >= 0 and 1.5 tanh(r/5) below.",
        ),
    ] = "abs_one_sign"
    fire_reset: Annotated[bool, Meta(description="Atari: press FIRE at reset in games that need it.")] = True
    max_episode_frames: Annotated[
        int,
        Meta(gt=0, description="Atari: episodes are truncated after this many emulator frames (30 minutes of play)."),
    ] = 108_000
    sticky_action_prob: Annotated[
        float,
        Meta(
            ge=0,
            le=1,
            description="Atari: probability that the emulator repeats the previous action (Machado et al. use 0.25).",
        ),
    ] = 0.0
    full_action_space: Annotated[
        bool, Meta(description="Atari: use all 18 actions instead of the game's minimal set.")
    ] = False
    max_episode_steps: Annotated[
        int,
        Meta(
            ge=0, description="Non-Atari: truncate episodes after this many steps; 0 keeps the environment's own limit."
        ),
    ] = 0


@dataclass(frozen=True)
class WorkersConfig:
    count: Annotated[
        int,
        Meta(
            gt=0,
            description="Worker processes (the same as --workers). One worker of 8 envs leaves the second of 2 cores to the learner (zrl-bench --suggest's pick on 2 cores); give more on a larger machine.",
        ),
    ] = 1
    envs_per_worker: Annotated[
        int,
        Meta(
            gt=0,
            description="Environments each worker steps in lock-step (the same as --envs-per-worker); 8 envs batch the worker's inference.",
        ),
    ] = 8
    ring_slots: Annotated[
        int,
        Meta(
            ge=0,
            description="Slots in each worker's frame ring (one slot = one frame of every env); 0 sizes it from the replay and batch.",
        ),
    ] = 0
    torch_threads: Annotated[int, Meta(gt=0, description="PyTorch threads for each worker's policy inference.")] = 1
    stats_interval_s: Annotated[
        float, Meta(gt=0, description="Seconds between a worker's stats messages, which double as its heartbeat.")
    ] = 1.0
    produce_ratio: Annotated[
        float,
        Meta(
            ge=0,
            description="Actor/learner balance: per weights version the workers send about this many times the fresh unrolls it trains on, then wait for new weights; above 1 is a margin a full queue drops. 0: run free.",
        ),
    ] = 1.0
    nice: Annotated[
        int,
        Meta(
            ge=0,
            le=19,
            extra={"hint": "the workers only lower their priority"},
            description="Unix nice (0-19) the workers lower their priority by, so that the learner keeps its share of the cores whatever the worker count (perf/README.md, zrl-bench --suggest).",
        ),
    ] = 10
    max_weights_wait_s: Annotated[
        float,
        Meta(
            gt=0,
            description="The longest a throttled worker waits for new weights before it sends another unroll anyway.",
        ),
    ] = 2.0
    max_restarts: Annotated[
        int,
        Meta(
            ge=0,
            extra={"hint": "0: a worker that dies stops the run"},
            description="A dead or hung worker is restarted; one that needs more than this many restarts within workers.restart_window_s stops the run with its traceback. 0: never restart.",
        ),
    ] = 3
    restart_window_s: Annotated[
        float, Meta(gt=0, description="The window over which workers.max_restarts counts one worker's restarts.")
    ] = 300.0
    remote: Annotated[
        int,
        Meta(
            ge=0,
            description="Workers on other hosts the run admits beside its local ones (zrl-worker --connect, or zrl-launch --ray); the ingest role writes their frames into rings here. 0: none, and no ingest.",
        ),
    ] = 0
    policy: Annotated[
        str,
        Meta(
            description="How workers act: network (the learner's policy) or uniform (uniformly random actions without running the network; what zrl-bench sampling uses to measure the data path alone)."
        ),
    ] = "network"


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
    lr_decay_power: Annotated[float, Meta(ge=0, description="polynomial: the power of the decay (1 is linear).")] = 1.0
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
            description="V-trace family: the entropy weight once entropy_decay_frames have been played; it moves there from entropy_cost in a straight line.",
        ),
    ] = 0.001
    entropy_decay_frames: Annotated[
        int,
        Meta(
            ge=0,
            description="V-trace family: env frames over which the entropy weight goes in a straight line from entropy_cost to entropy_cost_end; 0: entropy_cost throughout.",
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


@dataclass(frozen=True)
class ReplayConfig:
    type: Annotated[
        str,
        Meta(
            description="queue: FIFO of fresh unrolls; uniform: sampled uniformly; elite: by distance of stored to current features; attentive: by distance to the newest state's current feature; prioritized: Ape-X's."
        ),
    ] = "queue"
    capacity: Annotated[
        int,
        Meta(
            gt=0,
            description="Unrolls the replay holds; when full the oldest is replaced. A queue holds at least what one batch takes from it, so capacity 1 means as fresh as possible.",
        ),
    ] = 64
    sample_ratio: Annotated[
        float,
        Meta(
            gt=0,
            le=1,
            description="Share of every batch taken from this replay; the ratios sum to 1 and batch_size x sample_ratio must be whole.",
        ),
    ] = 1.0
    discard: Annotated[
        str,
        Meta(
            extra={"hint": "keep_latest, keep_oldest or alternating"},
            description="queue: what a full queue drops for a new unroll: keep_latest, its oldest unit (the freshest data trains); keep_oldest, the new unroll; alternating, the oldest and the new one by turns.",
        ),
    ] = "keep_latest"
    fill_fraction: Annotated[
        float,
        Meta(
            gt=0,
            le=1,
            description="uniform, elite, attentive: training starts once the replay holds fill_fraction x capacity unrolls (a queue: one batch's share).",
        ),
    ] = 0.1
    dist_function: Annotated[
        str,
        Meta(
            description="elite, attentive: ln_norm (p-norm of the [steps, F] difference), cos_dist (1 - the cosine of the flattened [steps, F] matrices) or kl_div (sum over steps of KL(softmax(current) || softmax(stored)))."
        ),
    ] = "ln_norm"
    p: Annotated[
        float, Meta(ge=1, extra={"hint": "the p of a p-norm"}, description="elite, attentive: the p of ln_norm.")
    ] = 2.0
    strategy: Annotated[
        int,
        Meta(
            description="elite, attentive: of m candidates sorted by distance, w = floor(m / n): 1 the n lowest; 2 the lowest of each of the first n windows of w; 3 as 1, least sampled first; 4 as 2, least sampled first."
        ),
    ] = 3
    lambda_batch_multiplier: Annotated[
        float,
        Meta(
            ge=1,
            extra={"hint": "1 samples uniformly"},
            description="elite, attentive: the candidate pool holds int(lambda x n) distinct units (n = batch_size x sample_ratio); lambda anneals to 1, where sampling is uniform.",
        ),
    ] = 6.0
    alfa_annealing_factor: Annotated[
        float,
        Meta(
            gt=0,
            description="elite, attentive: lambda anneals linearly to 1 over alfa_annealing_factor x the learning-rate decay steps, counted in sample calls.",
        ),
    ] = 2.0
    feature_steps: Annotated[
        int,
        Meta(
            ge=0,
            extra={"hint": "0 compares all steps"},
            description="elite, attentive: time steps of each unit whose features are compared, evenly spaced; 0 (or T or more): all T. Fewer cost less and choose less faithfully (perf/README.md).",
        ),
    ] = 0
    elite_insertion: Annotated[
        bool,
        Meta(
            description="elite, attentive: once full, a new unit replaces the unit with the largest distance among elite_batch_size random ones instead of the oldest."
        ),
    ] = False
    elite_batch_size: Annotated[
        int,
        Meta(
            ge=1,
            extra={"hint": "at most the capacity is drawn"},
            description="elite, attentive: units drawn for each elite insertion (the units of one worker message share a draw).",
        ),
    ] = 20


@dataclass(frozen=True)
class TransportConfig:
    kind: Annotated[str, Meta(description="ipc (unix sockets in the run's private folder) or tcp.")] = "ipc"
    bind_host: Annotated[
        str,
        Meta(
            description="Address tcp sockets bind to: 127.0.0.1, or any other address (0.0.0.0: every interface) when curve_keys is set."
        ),
    ] = "127.0.0.1"
    curve_keys: Annotated[
        str,
        Meta(
            description="Folder of CurveZMQ keys from zrl-keys: every socket is encrypted, and bound ones admit only authorized/ keys; needed beyond loopback. Empty: a run with TCP sockets makes its own in RUN/keys."
        ),
    ] = ""
    plaintext: Annotated[
        bool,
        Meta(
            description="true: a run with TCP sockets and no curve_keys makes no keys, and its loopback sockets are open to any user of this host (warned at start). Beyond loopback keys are always needed."
        ),
    ] = False
    remote_port: Annotated[
        int,
        Meta(
            ge=0,
            le=65534,
            description="The tcp port on bind_host where remote workers (workers.remote) connect; their weights go out on the next port. 0: ports the OS picks, written to the run's connect.txt (fix one for a firewall).",
        ),
    ] = 0
    public_host: Annotated[
        str,
        Meta(
            description="The host name remote workers use to reach this one, in the zrl-worker line the launcher prints and writes to connect.txt. Empty: bind_host, or this machine's name when bind_host is 0.0.0.0.",
        ),
    ] = ""
    hwm: Annotated[
        int,
        Meta(gt=0, description="ZeroMQ high-water mark (messages) on every socket that carries unrolls or batches."),
    ] = 64
    poll_timeout_ms: Annotated[
        int, Meta(gt=0, description="Every blocking receive polls this long before it checks whether to stop.")
    ] = 100
    max_connections: Annotated[
        int,
        Meta(
            gt=0,
            description="The most connections the ingest's gate and its weights socket each hold (workers.remote); past it, those of no joined worker are hung up, the longest waiting first.",
        ),
    ] = 256


@dataclass(frozen=True)
class EvalConfig:
    interval_frames: Annotated[
        int,
        Meta(
            ge=0,
            extra={"hint": "0: off"},
            description="Evaluate the policy every this many env frames in a process of its own (zrl-evaluator), which the learner never waits for; scores go to eval.csv and TensorBoard. 0: off.",
        ),
    ] = 0
    episodes: Annotated[
        int,
        Meta(
            gt=0,
            description="Episodes per evaluation, one after another; episode i of every evaluation plays with seed eval.seed + i, so that successive scores differ by the policy, not by luck.",
        ),
    ] = 10
    protocol: Annotated[
        str,
        Meta(
            extra={"hint": "auto, deepmind, machado or saber"},
            description='The evaluations\' protocol (zrl-eval --help): deepmind, machado, saber, or "auto": saber for a value-based agent (apex_iqn), deepmind for V-trace. An env that is not Atari plays as it trains.',
        ),
    ] = "auto"
    greedy: Annotated[
        bool,
        Meta(
            description="V-trace: act on the policy's most likely action instead of sampling it (zrl-eval --greedy). Value-based agents always act greedily.",
        ),
    ] = False
    held_out_states: Annotated[
        int,
        Meta(
            ge=0,
            description="Value-based agents (apex_iqn): the mean largest Q-value over this many held-out states of a random policy, with every evaluation (eval.csv mean_max_q). 0: none. Ignored for V-trace.",
        ),
    ] = 500
    seed: Annotated[
        int,
        Meta(ge=0, description="Seed of the evaluation episodes (episode i: seed + i) and of the held-out states."),
    ] = 1_000_003
    nice: Annotated[
        int,
        Meta(
            ge=0,
            le=19,
            description="Unix nice (0-19) the evaluator lowers itself by, below the workers', so that training keeps the cores; a lower value buys faster evaluations with frames/s (perf/README.md).",
        ),
    ] = 19
    final: Annotated[
        bool,
        Meta(
            description="With evaluations on: when the run ends by budget, time limit or eval.stop_at_score, evaluate its final checkpoint once more after the roles stop (eval.csv final = 1). false: none.",
        ),
    ] = True
    stop_at_score: Annotated[
        float,
        Meta(
            description="With evaluations on (eval.interval_frames): stop the run in order, with exit code 0, once an evaluation during training scores a mean of at least this. inf: never.",
        ),
    ] = float("inf")


@dataclass(frozen=True)
class Config:
    algo: Annotated[
        str,
        Meta(
            description="The agent: vtrace (IMPALA with V-trace, CLEAR and LASER; [vtrace]), impact (IMPACT: V-trace against a target network, a clipped surrogate; [impact]) or apex_iqn (Rainbow-IQN Ape-X; [apex])."
        ),
    ] = "vtrace"
    run: RunConfig = field(default_factory=RunConfig)
    env: EnvConfig = field(default_factory=EnvConfig)
    workers: WorkersConfig = field(default_factory=WorkersConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    learner: LearnerConfig = field(default_factory=LearnerConfig)
    broker: BrokerConfig = field(default_factory=BrokerConfig)
    replay: tuple[ReplayConfig, ...] = (
        ReplayConfig(type="queue", capacity=64, sample_ratio=0.5),
        ReplayConfig(type="uniform", capacity=1000, sample_ratio=0.5),
    )
    transport: TransportConfig = field(default_factory=TransportConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    # every registered agent's section (zrl.agents.config_sections), (table, section) pairs; cfg.<table> reads one
    agent_sections: tuple[tuple[str, Any], ...] = field(default_factory=lambda: default_agent_sections())

    def __post_init__(self) -> None:
        check(self)

    def __getattr__(self, name: str) -> Any:
        """An agent's section by its table's name (``cfg.vtrace``, ``cfg.apex``): called only for a name that is not
        a field, so the core's sections are plain attributes."""
        for table, section in self.__dict__.get("agent_sections", ()):
            if table == name:
                return section
        raise AttributeError(f"{type(self).__name__} has no section or key {name!r}")


def default_agent_sections() -> tuple[tuple[str, Any], ...]:
    """Every registered agent's section at its defaults."""
    return tuple((table, cls()) for table, cls in agents.config_sections().items())


def sections() -> dict[str, type]:
    """Every table of a run file but [[replay]], in the order config.toml and defaults.toml write them: the core's,
    with the registered agents' sections after [learner]."""
    core = list(SECTIONS.items())
    at = [name for name, _ in core].index("learner") + 1
    return dict(core[:at] + list(agents.config_sections().items()) + core[at:])


# The core's tables of a run file, in the order config.toml and defaults.toml write them ([[replay]] comes last;
# ``sections()`` adds the agents').
SECTIONS: dict[str, type] = {
    "run": RunConfig,
    "env": EnvConfig,
    "workers": WorkersConfig,
    "model": ModelConfig,
    "learner": LearnerConfig,
    "broker": BrokerConfig,
    "transport": TransportConfig,
    "eval": EvalConfig,
}
TOP_KEYS: dict[str, type] = {"algo": str}  # keys outside any section
