"""The [run] and [env] sections: the run's budgets, checkpoints, restarts and files, and the environments its workers
step. Each key declared once, as in ``zrl.config.schema``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from msgspec import Meta


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
    stop_at_return: Annotated[
        float,
        Meta(
            description="Stop the run in order, with exit code 0, once the mean raw return of its last 100 training episodes is at least this (Pong: 18). inf: never.",
        ),
    ] = float("inf")
    game_settings: Annotated[
        bool,
        Meta(
            description="Read zrl's settings for the game and agent (zrl/config/games/<algo>/<game>.toml; V-trace on Pong: budget, rate, entropy schedule) under the run file, which still wins. false: the defaults alone.",
        ),
    ] = True
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
