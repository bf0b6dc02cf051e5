"""The schema: one frozen dataclass per section, each key declared once with its type, its bounds and its
documentation (``Annotated[type, Meta(...)]``). ``msgspec.convert`` checks types and bounds from these
declarations when a config is loaded (``zrl.config.loading``); ``config/defaults.toml`` is generated from the same
descriptions (``zrl.config.defaults``); the rules between keys are ``zrl.config.checks``. An agent's own section
is declared in its package (``zrl/agents/<name>/config.py``) and composed here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated

from msgspec import Meta

from zrl.agents.apex_iqn.config import ApexConfig
from zrl.agents.impact.config import ImpactConfig
from zrl.agents.vtrace.config import VtraceConfig
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
            description="Also write every figure of metrics.csv and episodes.csv as TensorBoard events in the run folder (tensorboard --logdir results), at env-frame steps. Needs the tensorboard package, which the install includes; without it the run says so once and goes on."
        ),
    ] = True
    background_save: Annotated[
        bool,
        Meta(
            description="The reference platform's background_save, taken with either value and no effect: zrl always writes metrics.csv, episodes.csv and zrl.log row by row as the run goes, from the launcher, off the learner's path (what the reference's true did in a thread of its learner). Its false held every line in memory until the run ended, where a crash lost them all; zrl does not offer that.",
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
            description="Save every replay's content with each checkpoint (checkpoints/replay/: units, priorities, sample counts, stored features and the ring frames they read, zstd-compressed, written incrementally by a thread of the broker), and start a resumed or restarted run with it, so that Ape-X and elite runs go on where they were instead of refilling. Costs disk (see perf/README.md for the size per million frames) and a copy of the replay index per checkpoint in the broker."
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
            description="A role that reports nothing for this long is declared hung (before its first report it has at least 60 s to start): a worker is killed and restarted; a hung broker, learner or ingest is handled by run.restart_policy.",
        ),
    ] = 60.0
    restart_policy: Annotated[
        str,
        Meta(
            extra={"hint": "resume or stop"},
            description='What a broker, learner or ingest that dies or hangs does to the run. "resume": the launcher stops the run\'s roles (a live learner writes its final checkpoint), starts them again from the newest good checkpoint in the same folder and the same rings, and the run goes on: frames played and episodes go on counting; the learner goes back to the checkpoint\'s step (the updates since it are lost: checkpoint often to lose few), and the replays refill. "stop": the run stops in order with exit code 1 and says how to --resume it. A deterministic run always stops (a restart would break its repeat).',
        ),
    ] = "resume"
    max_restarts: Annotated[
        int,
        Meta(
            ge=0,
            description="A crash loop's limit under run.restart_policy = \"resume\": a broker, learner or ingest death past this many restarts of the run's roles within run.restart_window_s stops the run with exit code 1 and the dead role's traceback. 0: never restart.",
        ),
    ] = 3
    restart_window_s: Annotated[
        float, Meta(gt=0, description="The window over which run.max_restarts counts the restarts of the run's roles.")
    ] = 1800.0
    keep_freed_memory: Annotated[
        bool,
        Meta(
            description="Learner and broker keep the memory PyTorch frees in their heap for the next step (glibc mallopt) instead of returning large blocks to the system at once: on CPU the Atari learner's step ran 1.8x faster on a 2-core machine. Their memory stays at its peak. No effect where the C library is not glibc."
        ),
    ] = True
    best_by: Annotated[
        str,
        Meta(
            extra={"hint": "train or eval"},
            description='What best.pt follows. "train": the checkpoint written when the mean raw score of the last 100 training episodes was at its best (best.json says which and when). "eval": the weights that scored best in an evaluation during training (the [eval] section, which must then be on): best.pt holds those weights, written by the evaluator, and best.json their evaluation.',
        ),
    ] = "train"
    deterministic: Annotated[
        bool,
        Meta(
            description="One worker in lockstep with the learner for bit-exact repeats: the same config and seed give the same weights, and a resumed run ends exactly as an uninterrupted one. Needs workers.count = 1, a single queue replay with each unit trained on once (learner.replay_ratio = 0), and learner.batch_size a multiple of workers.envs_per_worker; the budget counts frames trained. Slower: worker and learner take turns, and resume replays every trained action."
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
            description="Atari: grey frames (one channel); false keeps colour, three channels a frame, stored as [3, H, W] and stacked into 3 x frame_stack channels (the reference platform's grayscaling_frames). Colour triples the rings' memory and the first convolution's cost.",
        ),
    ] = True
    resolution: Annotated[
        tuple[int, int],
        Meta(
            extra={"hint": "[height, width]"},
            description="Atari: [height, width] the frames are resized to (the reference platform's frame_scale_resolution, which it gave as width,height). The conv nets' first fully connected layer follows the size; the smallest they take is 20 x 20 (atari_small) and 36 x 36 (atari).",
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
            description="How env.clip_rewards clips each step's reward r (the reference platform's reward_clipping_method): abs_one_sign, sign(r) (DQN's); abs_one_clamp, r clamped to [-1, 1] (IMPALA's abs_one); soft_asymmetric, 5 tanh(r/5) for r >= 0 and 1.5 tanh(r/5) below (IMPALA's soft_asymmetric: losses weigh 0.3 of gains, and large rewards keep their order).",
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
            description="Actor/learner balance: per weights version all workers send about this many times the fresh unrolls it trains on (batch_size x publish_every / learner.replay_ratio; a worker sends one unroll every few versions when there are many workers), then wait for new weights; above 1 is a margin that a full queue drops; 0 runs free.",
        ),
    ] = 1.0
    nice: Annotated[
        int,
        Meta(
            ge=0,
            le=19,
            extra={"hint": "the workers only lower their priority"},
            description="Scheduling priority the workers lower themselves by (Unix nice, 0-19), so that the learner keeps its share of the cores whatever the worker count. 10: at 8 x 4 on 2 cores the learner made 14.5 steps/s against 11.4 at 0 (the best split's 19.5).",
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
            description="A worker that dies (or hangs past run.heartbeat_timeout_s) is restarted; one that needs more than this many restarts within workers.restart_window_s stops the run, with its traceback. 0: never restart.",
        ),
    ] = 3
    restart_window_s: Annotated[
        float, Meta(gt=0, description="The window over which workers.max_restarts counts one worker's restarts.")
    ] = 300.0
    remote: Annotated[
        int,
        Meta(
            ge=0,
            description="Workers on other hosts the run admits beside its local ones (zrl-worker --connect, or zrl-launch --ray): each has a ring here, written by the ingest role from the frames it sends over TCP. The run goes on without them until they join and after they leave. 0: none, and no ingest.",
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
            description="Network: atari (the Nature DQN's three conv layers and a hidden_size layer), atari_small (the 2013 DQN's and A3C's two conv layers, 16 and 32 channels, a third of the cost), mlp, or auto (atari_small for image frames, [H, W] grey or [3, H, W] colour; mlp otherwise; a run stores the kind it resolved, and auto_nature is what a run folder written before atari_small stored: atari for 84x84 frames). On 2 CPU cores atari_small reached -10.8 on Pong at 10 minutes against the Nature net's -17.3 (10.6k against 7.6k frames/s; about the same return per frame)."
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
            description="The features are a linear layer of their own on the hidden layer (the reference platform's use_additional_scaling_FC_layer, true by default there too); false: the features are the hidden layer itself, so feature_size must be its width (model.hidden_size, or mlp_hidden's last).",
        ),
    ] = True


@dataclass(frozen=True)
class LearnerConfig:
    batch_size: Annotated[
        int,
        Meta(
            gt=0,
            description="Unrolls per learner step. 8 x T=20: 12 steps/s on 2 CPU cores for Pong against 0.8 at 32 (per sample the step costs less in a small batch); the updates, not the frames, were what Pong lacked.",
        ),
    ] = 8
    unroll_length: Annotated[int, Meta(gt=0, description="Steps per unroll (T).")] = 20
    device: Annotated[str, Meta(description="cpu, cuda, cuda:N, or auto (cuda when available).")] = "auto"
    precision: Annotated[str, Meta(description="fp32, or bf16 (autocast for the forward pass and loss).")] = "fp32"
    unroll_conv: Annotated[
        str,
        Meta(
            description="How the training pass of an Atari conv net computes its first convolution over each unroll's frames: conv3d (one 3-d convolution over the unroll, no stacked copy), stacks (the stacked observations through the 2-d convolution), or auto (both timed on the batch's shape when the learner starts, the faster kept; conv3d in a run.deterministic run). The two agree up to float rounding; which is faster depends on the CPU."
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
            description="Initial learning rate. With rmsprop_tf and eps 1e-5, Pong's 100-episode mean at 12 minutes was -12.7, against -19.5 with PyTorch's RMSprop at 4.8e-4 and eps 0.01 (2 cores, AMD EPYC, seed 1).",
        ),
    ] = 0.0006
    lr_schedule: Annotated[
        str,
        Meta(
            extra={"hint": "polynomial or multistep"},
            description="How the learning rate changes over learner steps: polynomial, from learning_rate to lr_end over lr_decay_steps with power lr_decay_power (the reference platform's PolynomialLRDecay, its only one in use, had power 2 over lr_scheduler_steps); multistep, learning_rate times lr_gamma for each of lr_milestones passed (the reference's MultiStepLR, which no option of its could select). A constant rate: polynomial with lr_end = learning_rate.",
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
            description="RMSprop epsilon: small, so that every parameter moves by about the learning rate (A2C's 1e-5; with sums over T x B the gradients are large). With optimizer = rmsprop (PyTorch's) a small eps makes the first steps move every weight by about 10 x lr.",
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
            description="V-trace family: env frames played over which the entropy weight goes from entropy_cost to entropy_cost_end (counted in learner steps, at the frames each step's fresh share stands for); 0: entropy_cost throughout.",
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
            description="V-trace family: train the policy on the batch's advantages normalised to mean 0 and standard deviation 1, as PPO does, so that the entropy and value weights mean the same in every game; false: the raw V-trace advantages, as IMPALA."
        ),
    ] = False
    grad_norm_clip: Annotated[float, Meta(ge=0, description="Global gradient norm clip; 0 disables it.")] = 40.0
    publish_every: Annotated[int, Meta(gt=0, description="Learner steps between weight broadcasts.")] = 1
    max_nonfinite_steps: Annotated[
        int,
        Meta(
            ge=0,
            description="A learner step whose loss or gradient norm is not finite (a poisoned batch, a diverged model) is skipped, the weights left as they were; it is counted in metrics.csv's nonfinite_steps and said at the 1st and every 100th. This many skipped in a row restore the model and optimiser from the run's newest checkpoint that loads (counters go on), publish those weights and say so. 0: never restore.",
        ),
    ] = 10
    replay_ratio: Annotated[
        float,
        Meta(
            ge=0,
            description="V-trace family: how many times each fresh sample is trained on, on average. A queue hands each unit sample_ratio x replay_ratio times (IMPACT's K) and workers are paced to it. 0: once through the queue.",
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
            description="The largest reward magnitude a worker's experience may carry (as the env gives it to the agent, after env.clip_rewards; Ape-X: an n-step return may reach apex.n_step x this). The broker refuses an unroll or transitions with a larger one, or a non-finite one, counts it in decode_errors and says why in zrl.log: a damaged or forged message (a remote worker any local user can run) must not reach the loss. Raise it for a game whose single-step rewards are larger.",
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
            description="queue: FIFO of fresh unrolls; uniform: ring sampled uniformly; elite: sampled by distance between stored behaviour-time and current features; attentive: by distance to the newest state's current feature."
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
            description="queue: what a full queue drops for a new unroll (the reference platform's discarding_strategy, which chose what its writer queue between workers and replays dropped; zrl's workers write frames into rings and the broker takes every unroll, so a queue replay is where a full buffer drops): keep_latest, its oldest unroll (the freshest data trains); keep_oldest, the new unroll; alternating, the oldest and the new one by turns. The reference's alternating dropped each new item with odds 0.5 whether or not the queue was full (and its writer applied no strategy at all); zrl's drops only when full, and by turns, so that nothing is lost below capacity and a run repeats.",
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
            description="elite, attentive: over the m candidates sorted by distance, w = floor(m / n): 1 the n lowest; 2 every w-th (the lowest of each of the first n windows of w); 3 like 1, least sampled first; 4 the least sampled of each of the first n windows of w."
        ),
    ] = 3
    lambda_batch_multiplier: Annotated[
        float,
        Meta(
            ge=1,
            extra={"hint": "1 samples uniformly"},
            description="elite, attentive: the candidate pool holds int(lambda x n) distinct units (n = batch_size x sample_ratio); lambda anneals to 1, where sampling is uniform. The reference's JSON (--replay) reads it with int() and defaults it to 1.",
        ),
    ] = 6.0
    alfa_annealing_factor: Annotated[
        float,
        Meta(
            gt=0,
            description="elite, attentive: lambda anneals linearly to 1 over alfa_annealing_factor x the learning-rate decay steps, counted in sample calls (each call lowers it, then uses it). The reference's JSON defaults it to 1.0.",
        ),
    ] = 2.0
    feature_steps: Annotated[
        int,
        Meta(
            ge=0,
            extra={"hint": "0 compares all steps"},
            description="elite, attentive: time steps of each unit whose features are compared, evenly spaced over the unroll; 0 (or T or more) compares all T, as the reference does. Fewer steps cost less and choose less faithfully: 5 of 20 kept 0.78 of the exact choice for half the broker's time (perf/README.md).",
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
            description="Folder of CurveZMQ keys made by zrl-keys: every socket is then encrypted, and bound sockets admit only the client keys in its authorized/ folder. Required to bind any address but loopback. Empty: a run with TCP sockets (transport.kind = tcp, or workers.remote) makes its own in RUN/keys, anew at each launch, and this host's remote workers use RUN/keys/clients/local (connect.txt names it)."
        ),
    ] = ""
    plaintext: Annotated[
        bool,
        Meta(
            description="true: a run with TCP sockets and no curve_keys makes no keys of its own, and its sockets on loopback are neither encrypted nor authenticated: any user of this host can connect to them (send experience, take the weights). Warned at start. Beyond loopback keys are always needed."
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
            description="The most connections the ingest's gate and its weights socket each hold (workers.remote). Past it, those of no joined worker are hung up, the longest waiting first: an idle flood takes neither files nor a worker's place.",
        ),
    ] = 256


@dataclass(frozen=True)
class EvalConfig:
    interval_frames: Annotated[
        int,
        Meta(
            ge=0,
            extra={"hint": "0: off"},
            description="Evaluate the policy every this many env frames while training goes on: a process of its own (zrl-evaluator) asks the learner for its current weights and plays eval.episodes under eval.protocol; eval.csv and TensorBoard (eval/*) get the score at the frames when the weights were taken. The learner never waits for it: requests that come while an evaluation plays wait, and only the newest is played (metrics.csv eval_skipped counts the others). 0: off (zrl-eval scores checkpoints afterwards). On 2 cores it takes CPU from the workers: see perf/README.md for its cost. The reference Rainbow-IQN Ape-X's evaluation-interval was 500k steps = 2M frames.",
        ),
    ] = 0
    episodes: Annotated[
        int,
        Meta(
            gt=0,
            description="Episodes per evaluation, played one after another; episode i of every evaluation plays with the same seed (eval.seed + i), so that successive scores differ by the policy, not by luck. The reference played 100; 10 is what a 2-core machine plays in minutes on Pong.",
        ),
    ] = 10
    protocol: Annotated[
        str,
        Meta(
            extra={"hint": "auto, deepmind, machado or saber"},
            description='zrl-eval\'s protocol the evaluations play under (see zrl-eval --help): deepmind (30 no-ops, no clipping, 30-minute cap), machado (sticky actions 0.25, the full action set) or saber (machado, and an episode ends after 5 minutes without reward; 100-hour cap). "auto": saber for a value-based agent (apex_iqn), deepmind for V-trace. An env that is not Atari is played as it trains (eval.csv says train_env).',
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
            description="Value-based agents (apex_iqn): the mean over this many held-out states of the largest Q-value, written with every evaluation (eval.csv mean_max_q), as DQN and Rainbow track it. The states are stacked observations of a uniformly random policy in the training env, collected once at the run's first evaluation with eval.seed and kept in eval/held_out_states.npz, so a resumed run tracks the same ones. 0: none. Ignored for V-trace.",
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
            description="Scheduling priority the evaluator lowers itself by (Unix nice, 0-19), below the workers' (workers.nice), so that training keeps the cores and evaluations take the cycles it leaves: on a busy machine an evaluation takes longer, training does not. A lower value buys faster evaluations with frames/s: see perf/README.md (zrl-bench pipeline --evaluation) for both on 2 cores.",
        ),
    ] = 19
    final: Annotated[
        bool,
        Meta(
            description="With evaluations on (eval.interval_frames): when the run ends by its budget, time limit or eval.stop_at_score (not a signal or a failure), evaluate the weights it ended with once more, after the run's roles have stopped: a fresh evaluator plays the learner's final checkpoint under the same terms, with the machine to itself, and its row in eval.csv has final = 1 (best.pt too may take it, with run.best_by = eval). The launch waits for it, saying how far it is; Ctrl-C stops it. false: the run's last evaluation is the last multiple of interval_frames it passed.",
        ),
    ] = True
    stop_at_score: Annotated[
        float,
        Meta(
            description="With evaluations on (eval.interval_frames): stop the run in order, with exit code 0, once an evaluation during training scores a mean of at least this, as a solved threshold does (Stable-Baselines3's StopTrainingOnRewardThreshold, RLlib's stop criteria). The weights that reached it are the evaluation's, taken from the learner earlier than the run's last checkpoint: with run.best_by = eval, best.pt holds them (unless eval.final's evaluation of the last checkpoint scores higher). eval.final then plays the last checkpoint as after a budget. inf: never.",
        ),
    ] = float("inf")


@dataclass(frozen=True)
class Config:
    algo: Annotated[
        str,
        Meta(
            description="The agent: vtrace (IMPALA with V-trace, CLEAR and LASER; the [vtrace] section), impact "
            "(IMPACT: V-trace against a target network, a clipped surrogate, each sample trained on "
            "learner.replay_ratio times; the [impact] section) or apex_iqn (Rainbow-IQN Ape-X with prioritized "
            "replay; the [apex] section)."
        ),
    ] = "vtrace"
    run: RunConfig = field(default_factory=RunConfig)
    env: EnvConfig = field(default_factory=EnvConfig)
    workers: WorkersConfig = field(default_factory=WorkersConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    learner: LearnerConfig = field(default_factory=LearnerConfig)
    vtrace: VtraceConfig = field(default_factory=VtraceConfig)
    impact: ImpactConfig = field(default_factory=ImpactConfig)
    apex: ApexConfig = field(default_factory=ApexConfig)
    broker: BrokerConfig = field(default_factory=BrokerConfig)
    replay: tuple[ReplayConfig, ...] = (
        ReplayConfig(type="queue", capacity=64, sample_ratio=0.5),
        ReplayConfig(type="uniform", capacity=1000, sample_ratio=0.5),
    )
    transport: TransportConfig = field(default_factory=TransportConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)

    def __post_init__(self) -> None:
        check(self)


# The tables of a run file, in the order config.toml and defaults.toml write them ([[replay]] comes last).
SECTIONS: dict[str, type] = {
    "run": RunConfig,
    "env": EnvConfig,
    "workers": WorkersConfig,
    "model": ModelConfig,
    "learner": LearnerConfig,
    "vtrace": VtraceConfig,
    "impact": ImpactConfig,
    "apex": ApexConfig,
    "broker": BrokerConfig,
    "transport": TransportConfig,
    "eval": EvalConfig,
}
TOP_KEYS: dict[str, type] = {"algo": str}  # keys outside any section
