"""The learner's modes: learner (the real learner fed by the real broker, against a bare PyTorch loop on the same
batch shape) and elite (an elite or attentive batch's preparation, against a learner step)."""

from __future__ import annotations

import dataclasses
import multiprocessing as mp
import os
import queue
import time
from pathlib import Path
from typing import Any

import numpy as np

from zrl.bench import envs as benv
from zrl.bench.facts import cores
from zrl.bench.modes.harness import Progress, _with, _workdir, check
from zrl.bench.roles import Pipeline
from zrl.config import Config, ReplayConfig
from zrl.config import check as config_check

LEARNER_SEGMENT_S = 10.0  # the learner mode alternates bare and fed segments of about this length


# -- learner -----------------------------------------------------------------------------------------------


def _fixed_batch(cfg: Config, spec):
    """The learner role's model, optimiser, threads and device, and one preallocated batch of its shape with
    random frames: (model, optimiser, scheduler, observations, batch arrays)."""
    import torch

    from zrl.agents.vtrace.learner import choose_unroll_conv
    from zrl.config import learner_threads
    from zrl.gather import Unrolls
    from zrl.models import build_model, resolve_device
    from zrl.optim import make_optimizer
    from zrl.roles.lifecycle import keep_freed_memory

    lcfg = cfg.learner
    if cfg.run.keep_freed_memory:  # the learner role's allocator setting too
        keep_freed_memory()
    torch.set_num_threads(learner_threads(cfg))  # as the learner role
    device = resolve_device(lcfg.device)
    t, b, s = lcfg.unroll_length, lcfg.batch_size, cfg.env.frame_stack
    torch.manual_seed(0)
    model = build_model(cfg.model, spec.frame_shape, spec.frame_dtype, s, spec.num_actions).to(device)
    choose_unroll_conv(model, cfg)  # the learner role's first-convolution path
    opt, sched = make_optimizer(model, lcfg, 10**9)
    dtype = np.dtype(spec.frame_dtype)
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 256 if dtype == np.uint8 else 2, (b, t + s, *spec.frame_shape))
    steps = np.tile(np.arange(t + s, dtype=np.int32) + s, (b, 1))  # mid-episode: no blanked frames
    obs = Unrolls(torch.from_numpy(frames.astype(dtype)).to(device), torch.from_numpy(steps).to(device))
    # Rewards, episode ends and behaviour logits like a game's, so that the loss does not fade to nothing on
    # the one batch it trains on again and again.
    reward = rng.choice([-1.0, 0.0, 1.0], (t, b), p=[0.05, 0.9, 0.05])
    batch = {
        "actions": torch.randint(0, spec.num_actions, (t, b)),
        "rewards": torch.from_numpy(reward).float(),
        "discounts": torch.from_numpy((rng.random((t, b)) > 0.01).astype(np.float32)),
        "behaviour_logits": torch.randn(t, b, spec.num_actions),
        "behaviour_values": torch.randn(t, b),
    }
    batch = {k: v.to(device) for k, v in batch.items()}
    model.train()
    return model, opt, sched, obs, batch


def _bare_learner(cfg: Config, spec, commands, out, parent: int) -> None:
    """A bare PyTorch loop: the learner's V-trace step on one preallocated batch of the same shape, with the
    learner role's threads and device, in a process of its own as the learner has. It runs one timed segment
    per number of seconds it is sent (steps/s back through ``out``) and ends at None."""
    import torch

    from zrl.agents.vtrace.learner import sgd_step

    model, opt, sched, obs, batch = _fixed_batch(cfg, spec)
    lcfg, device = cfg.learner, obs.frames.device
    sgd_step(model, opt, sched, obs, batch, lcfg, cfg.vtrace)  # warm-up
    out.put(0.0)  # ready
    while (seconds := _next_command(commands, parent)) is not None:
        steps, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds or steps < 1:
            sgd_step(model, opt, sched, obs, batch, lcfg, cfg.vtrace)
            steps += 1
        if device.type == "cuda":
            torch.cuda.synchronize()
        out.put(steps / (time.perf_counter() - start))


def _next_command(commands, parent: int):
    """The next command, or None once the bench process that sends them is gone."""
    while os.getppid() == parent:
        try:
            return commands.get(timeout=0.5)
        except queue.Empty:
            continue
    return None


class BareLearner:
    """The bare loop's process, kept alive so that its segments can alternate with the fed learner's."""

    def __init__(self, cfg: Config, spec) -> None:
        ctx = mp.get_context("spawn")
        self._commands, self._out = ctx.Queue(), ctx.Queue()
        self._proc = ctx.Process(
            target=_bare_learner, args=(cfg, spec, self._commands, self._out, os.getpid()), name="zrl-bench-bare"
        )

    def __enter__(self) -> BareLearner:
        self._proc.start()
        benv.collect(self._out, [self._proc], 600)  # built and warmed up
        return self

    def segment(self, seconds: float) -> float:
        """Steps/s over one segment of about ``seconds``."""
        self._commands.put(seconds)
        (rate,) = benv.collect(self._out, [self._proc], seconds + 300)
        return rate

    def __exit__(self, *_exc) -> None:
        if self._proc.is_alive():
            self._commands.put(None)
        self._proc.join(10)
        if self._proc.is_alive():
            self._proc.kill()
            self._proc.join(5)


def _await(p: Pipeline, until, what: str):
    """The learner's stats once ``until`` holds (within 60 s), else RuntimeError naming ``what``."""
    p.watch(60, until=until)
    if not until(p):
        raise RuntimeError(f"the fed learner did not {what}")
    return p.learner


def learner_mode(cfg: Config, spec, seconds: float, capacity: int, progress: Progress) -> dict:
    """The real learner fed by the real broker from a full uniform replay (workers fill it, then stop, so that
    the learner has the cores as the bare loop has them), against the bare loop on the same batch shape.

    The two alternate in segments: bare, fed, bare, ..., fed, bare, the one side suspended (SIGSTOP) while
    the other runs, so that the drift of a shared machine over the minutes this takes falls on both alike."""
    replay = (ReplayConfig(type="uniform", capacity=capacity, sample_ratio=1.0, fill_fraction=1.0),)
    cfg = dataclasses.replace(
        _with(
            cfg,
            workers={"policy": "uniform", "stats_interval_s": 0.5},
            run={"checkpoint_every_steps": 0, "max_env_frames": 10**12},
        ),
        replay=replay,
    )
    config_check(cfg)
    b, t = cfg.learner.batch_size, cfg.learner.unroll_length
    rounds = max(2, round(seconds / LEARNER_SEGMENT_S))
    segment = seconds / rounds
    fed_rates: list[float] = []
    bare_rates: list[float] = []
    fed_steps = fed_time = 0.0
    sections = {"wait": 0.0, "gather": 0.0, "publish": 0.0, "step": 0.0}
    progress(
        f"learner fed by the broker: filling a uniform replay of {capacity} units with "
        f"{cfg.workers.count} workers x {cfg.workers.envs_per_worker} envs, and building the bare loop"
    )
    with _workdir() as tmp, Pipeline(cfg, spec, with_learner=True, workdir=Path(tmp)) as p:
        full = lambda p: p.broker is not None and int(p.broker.replay_sizes.min()) >= capacity  # noqa: E731
        p.watch(600, until=full)
        if not full(p):
            raise RuntimeError(f"the replay did not fill to {capacity} units within 600 s")
        p.stop_workers()
        stepped = lambda p: p.learner is not None and p.learner.learner_step >= 2  # noqa: E731
        p.watch(300, until=stepped)
        with BareLearner(cfg, spec) as bare:
            for r in range(rounds):
                progress(
                    f"round {r + 1} of {rounds}: bare PyTorch loop, then the learner fed by the broker, "
                    f"B={b} x T={t}, {segment:g} s each"
                )
                p.pause("zrl-learner")
                bare_rates.append(bare.segment(segment))
                resumed = time.time()
                p.resume("zrl-learner")
                start = _await(p, lambda p, resumed=resumed: p.learner.time > resumed, "report after it was resumed")
                p.watch(segment)
                end = _await(
                    p,
                    lambda p, start=start: p.learner.learner_step > start.learner_step and p.learner.time > start.time,
                    f"step within 60 s after {segment:g} s",
                )
                steps, elapsed = end.learner_step - start.learner_step, end.time - start.time
                fed_rates.append(steps / elapsed)
                fed_steps, fed_time = fed_steps + steps, fed_time + elapsed
                for k in sections:
                    sections[k] += getattr(end, f"{k}_time_s") - getattr(start, f"{k}_time_s")
            p.pause("zrl-learner")
            progress(f"last segment: bare PyTorch loop, {segment:g} s")
            bare_rates.append(bare.segment(segment))
    fed = fed_steps / fed_time
    bare_rate = float(np.mean(bare_rates))
    ratio = fed / bare_rate
    return {
        "batch_size": b,
        "unroll_length": t,
        "replay_capacity": capacity,
        "device": cfg.learner.device,
        "fed_steps_per_s": round(fed, 3),
        "fed_samples_per_s": round(fed * b * t, 1),
        "bare_steps_per_s": round(bare_rate, 3),
        "bare_samples_per_s": round(bare_rate * b * t, 1),
        "segment_s": round(segment, 2),
        "fed_segments_steps_per_s": [round(x, 3) for x in fed_rates],
        "bare_segments_steps_per_s": [round(x, 3) for x in bare_rates],
        "publish_every": cfg.learner.publish_every,
        "ratio_to_bare": round(ratio, 4),
        **{f"fed_{k}_s": round(v, 3) for k, v in sections.items()},
        "targets": [check(ratio, "learner_ratio_to_bare")],
    }


# -- elite -------------------------------------------------------------------------------------------------


def elite_mode(
    cfg: Config, spec, capacity: int, lam: float, feature_steps: int, precision: str, repeats: int, progress: Progress
) -> dict:
    import torch

    from zrl.bench.elite import Replay, prepare_time, time_learner_step
    from zrl.models import resolve_device
    from zrl.roles.lifecycle import keep_freed_memory

    torch.manual_seed(0)
    if cfg.run.keep_freed_memory:  # as the learner and broker roles have it
        keep_freed_memory()
    torch.set_num_threads(cfg.learner.torch_threads or cores())
    replay = Replay(cfg, spec, capacity, progress=progress)
    try:
        b, t = cfg.learner.batch_size, cfg.learner.unroll_length
        progress(f"learner step: B={b} x T={t}, {cfg.learner.precision}, {repeats} repeats")
        learner_s = time_learner_step(replay.model, cfg, spec, replay.ring, replay.messages, repeats)
        torch.set_num_threads(cfg.broker.torch_threads)
        rows: list[dict[str, Any]] = []
        for kind in ("elite", "attentive"):
            progress(
                f"{kind} batch: n={b}, lambda={lam:g} (pool {round(lam * b)}), F={cfg.model.feature_size}, "
                f"feature_steps={feature_steps}, {precision}, {repeats} repeats"
            )
            broker, _ = replay.broker(kind, capacity, lam, feature_steps, precision)
            prep = prepare_time(broker, repeats)
            rows.append(
                {"sampler": kind, "prepare_s": round(prep, 4), "ratio_to_learner_step": round(prep / learner_s, 3)}
            )
    finally:
        replay.close()
    return {
        "batch_size": b,
        "unroll_length": t,
        "lambda": lam,
        "feature_size": cfg.model.feature_size,
        "capacity": capacity,
        "feature_steps": feature_steps,
        "precision": precision,
        "broker_threads": cfg.broker.torch_threads,
        "broker_device": str(resolve_device(cfg.broker.device)),
        "learner_device": str(resolve_device(cfg.learner.device)),
        "learner_step_s": round(learner_s, 4),
        "rows": rows,
        "targets": [check(rows[0]["ratio_to_learner_step"], "elite_prepare_to_learner_step", lower_is_better=True)],
    }
