"""Sizing: what the keys of a config imply together. A batch's share of each replay, the fill that starts
training, the producers' budget per weights version, the queue's true capacity, the decay and annealing
horizons, and the split of the machine's cores. Pure functions of a Config (and of the cores this process may
use)."""

from __future__ import annotations

import bisect
import math
import os
from collections.abc import Callable

from zrl.config.checks import FEATURE_REPLAYS
from zrl.config.learning import LearnerConfig
from zrl.config.replay import ReplayConfig
from zrl.config.schema import Config


def replay_share(cfg: Config, rep: ReplayConfig) -> int:
    """Unrolls each batch takes from a replay: batch_size x sample_ratio."""
    return round(cfg.learner.batch_size * rep.sample_ratio)


def fill_target(cfg: Config, rep: ReplayConfig) -> int:
    """Units a sampled replay must hold before training starts: one batch's share for a queue, else fill_fraction x
    capacity (and never less than the share). V-trace's rule; an agent says its own (``Agent.replay_fill``)."""
    share = replay_share(cfg, rep)
    return share if rep.type == "queue" else max(share, math.ceil(rep.fill_fraction * rep.capacity - 1e-9))


def fresh_share(cfg: Config) -> float:
    """The share of a batch taken from queues; 1 when no queue is configured."""
    return sum(r.sample_ratio for r in cfg.replay if r.type == "queue") or 1.0


def replay_ratio(cfg: Config) -> float:
    """Samples trained per fresh sample that a V-trace-family run asks for: learner.replay_ratio, or where it is
    0 one pass of every fresh unit through the queues (1 / their share of a batch)."""
    return cfg.learner.replay_ratio or 1.0 / fresh_share(cfg)


def queue_uses(cfg: Config, rep: ReplayConfig) -> float:
    """Times a queue hands out each unit, on average: its share of the batches' samples per fresh sample, and at
    least once (every unit goes into every queue: of two queues, the smaller one drops what it cannot use)."""
    return max(1.0, rep.sample_ratio * replay_ratio(cfg))


def needs_features(cfg: Config) -> bool:
    """Whether workers must send behaviour-time features (an elite or attentive replay needs them)."""
    return any(r.type in FEATURE_REPLAYS for r in cfg.replay)


def worker_slots(cfg: Config) -> int:
    """Workers the run has rings (and ids) for: its local ones, then ``workers.remote`` for other hosts."""
    return cfg.workers.count + cfg.workers.remote


def unrolls_per_version(cfg: Config, workers: int = 0) -> float:
    """How many unrolls each of ``workers`` workers (0: every worker slot, as sizing assumes) may send per new
    weights version, on average (0: no limit). Workers pass how many are live now: a run whose remote workers
    have not joined shares the budget among the local ones.

    All workers together send ``produce_ratio`` times the fresh samples a version trains on (a version covers
    ``publish_every`` learner steps of batch_size units, each fresh unit trained on replay_ratio times), so the
    learner always has fresh data and little is produced only to be dropped. Under 1 (many workers or envs for a small batch) a worker sends one unroll every
    1 / rate versions: at 8 workers x 4 envs and batches of 8, a whole unroll per worker per version was four
    batches' worth, three of them dropped. A deterministic run's single worker sends exactly what one version
    trains on.
    """
    if cfg.run.deterministic:
        return cfg.learner.batch_size * cfg.learner.publish_every // cfg.workers.envs_per_worker
    if not cfg.workers.produce_ratio:
        return 0
    units = cfg.workers.produce_ratio * cfg.learner.batch_size * cfg.learner.publish_every / replay_ratio(cfg)
    return units / ((workers or worker_slots(cfg)) * cfg.workers.envs_per_worker)


def unrolls_banked(cfg: Config, workers: int = 0) -> int:
    """The most unrolls a worker may bank while it plays (new weights add ``unrolls_per_version`` each): its share
    of the queues, so that a worker catching up never overflows them, and never less than one version's worth. A
    smaller bank loses the budget of versions that come while a worker plays its unroll, and a learner whose
    queue then runs dry waits with its workers for max_weights_wait_s."""
    rate = unrolls_per_version(cfg, workers)
    queued = sum(queue_capacity(cfg, r) for r in cfg.replay if r.type == "queue")
    share = queued // ((workers or worker_slots(cfg)) * cfg.workers.envs_per_worker)
    return max(math.ceil(rate - 1e-9), share, 1)


def learner_threads(cfg: Config) -> int:
    """learner.torch_threads, or where it is 0 the cores this process may use less the workers' inference
    threads, at least 1 (the broker, mostly idle for a queue, is not counted). On 2 cores PyTorch's own choice (2)
    had the learner's threads wait on workers that held a core (perf/README.md, "How the defaults were found")."""
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
    CPU time of its own and batches its inference over fewer envs, so fewer, larger workers train more learner
    steps per second (perf/README.md, zrl-bench --suggest)."""
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
    per_version = math.ceil(unrolls_per_version(cfg) - 1e-9) * worker_slots(cfg) * cfg.workers.envs_per_worker
    return max(rep.capacity, replay_share(cfg, rep), per_version)


def fresh_frames_per_step(cfg: Config, frames_per_step: int) -> float:
    """Env frames played per learner step: the fresh share of a batch, in frames."""
    return cfg.learner.batch_size / replay_ratio(cfg) * cfg.learner.unroll_length * frames_per_step


def entropy_cost(cfg: Config, frames_per_step: int, learner_step: int) -> float:
    """The entropy weight at a learner step. With entropy_decay_frames: entropy_cost for entropy_decay_start_frames,
    then a straight line to entropy_cost_end over entropy_decay_frames (frames counted in steps at the fresh frames
    per step), then held. Without: in step with the learning rate when entropy_follows_lr (the same share of the
    way to entropy_cost_end as the rate has gone to its end), else entropy_cost throughout."""
    lcfg = cfg.learner
    if lcfg.entropy_decay_frames:
        played = learner_step * fresh_frames_per_step(cfg, frames_per_step) - lcfg.entropy_decay_start_frames
        done = min(1.0, max(0.0, played) / lcfg.entropy_decay_frames)
    elif lcfg.entropy_follows_lr:
        done = 1.0 - lr_left(lcfg, lr_decay_steps(cfg, frames_per_step))(learner_step)
    else:
        return lcfg.entropy_cost
    return lcfg.entropy_cost + (lcfg.entropy_cost_end - lcfg.entropy_cost) * done


def lr_left(lcfg: LearnerConfig, total_steps: int) -> Callable[[int], float]:
    """The share of the learning rate's fall still to come at a learner step, 1 at the start: under polynomial,
    (1 - steps / total_steps) ** lr_decay_power, then 0; under multistep, lr_gamma to the number of lr_milestones
    at or below the step (torch's MultiStepLR's rule)."""
    if lcfg.lr_schedule == "multistep":
        milestones, gamma = sorted(lcfg.lr_milestones), lcfg.lr_gamma
        return lambda step: gamma ** bisect.bisect_right(milestones, step)
    power = lcfg.lr_decay_power
    return lambda step: (1.0 - min(step, total_steps) / total_steps) ** power


def lr_decay_steps(cfg: Config, frames_per_step: int) -> int:
    """Learner steps over which the learning rate decays (from the frame budget when not given); elite
    lambda annealing is measured against it too."""
    if cfg.learner.lr_decay_steps:
        return cfg.learner.lr_decay_steps
    return max(1, int(cfg.run.max_env_frames // fresh_frames_per_step(cfg, frames_per_step)))
