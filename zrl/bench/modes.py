"""zrl-bench's modes. Each measures one hop of the pipeline beside the ceiling it is judged against, taken on
the same machine in the same invocation, and returns its figures; the command prints them as tables.

Targets (ratios, so that a shared, noisy machine still gives a meaningful answer) are checked here and
reported with the figures; they never fail a test.
"""

from __future__ import annotations

import csv
import dataclasses
import multiprocessing as mp
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from zrl import envs as zenvs
from zrl import metrics
from zrl.bench import envs as benv
from zrl.bench import transport as btransport
from zrl.bench.facts import cores
from zrl.bench.roles import Pipeline, frames_rate
from zrl.config import Config, ReplayConfig
from zrl.config import check as config_check
from zrl.launch import EXIT_SIGINT, private_prefix

Progress = Callable[[str], None]

TARGETS = {
    "sampling_ratio_to_ceiling": 0.90,  # sampling at 2 workers x 4 envs, against the env ceiling on the same cores
    "ring_gb_per_s": 1.0,  # ring write+read of 84x84 frames
    "index_messages_per_s": 50_000.0,
    "queue_slower_than_ring": 10.0,  # a pickled multiprocessing.Queue for the same frames
    "learner_ratio_to_bare": 0.90,  # the learner fed by the broker, against a bare PyTorch loop
    "elite_prepare_to_learner_step": 1.0,  # an elite batch is prepared faster than the learner consumes one
    "pipeline_ratio_to_limit": 0.80,  # trained env steps/s end to end, against the limit the unit costs allow
    "learner_ratio_to_matmul": 0.50,  # the learner's GFLOP/s while it steps, against a plain fp32 matmul's
}
MATMUL_N = 1024  # the square fp32 matmul whose GFLOP/s is the peak the learner is judged against
LEARNER_SEGMENT_S = 10.0  # the learner mode alternates bare and fed segments of about this length


def _workdir() -> tempfile.TemporaryDirectory:
    """A scratch folder named as a launcher's private folder (``zrl-<pid>-...``), so that if this process is
    killed the next zrl-launch or zrl-bench sweeps it with the rest of what a dead process left."""
    return tempfile.TemporaryDirectory(prefix=f"{private_prefix()}{os.getpid()}-bench-")


def _with(cfg: Config, **sections) -> Config:
    """cfg with some keys of some sections replaced: _with(cfg, workers={"count": 2})."""
    return dataclasses.replace(cfg, **{s: dataclasses.replace(getattr(cfg, s), **kv) for s, kv in sections.items()})


def check(value: float, target: str, lower_is_better: bool = False) -> dict:
    want = TARGETS[target]
    met = value <= want if lower_is_better else value >= want
    return {
        "target": target,
        "value": round(value, 4),
        "want": f"{'<=' if lower_is_better else '>='} {want:g}",
        "met": bool(met),
    }


# -- env ---------------------------------------------------------------------------------------------------


def env_mode(cfg: Config, workers: int, envs: int, seconds: float, progress: Progress, peers: bool = True) -> dict:
    progress(f"env ceiling: {workers} processes x {envs} envs of {cfg.env.id}, {seconds:g} s")
    ceiling = benv.ceiling(cfg, workers, envs, seconds)
    ceiling["frames_per_s_per_core"] = round(ceiling["frames_per_s"] / min(workers, cores()), 1)
    ceiling["steps_per_s_per_core"] = round(ceiling["steps_per_s"] / min(workers, cores()), 1)
    result: dict = {"ceiling": ceiling, "peers": [], "not_installed": []}
    if not peers:
        return result
    if zenvs.atari_rom(cfg.env.id) is None:
        result["not_installed"].append("peers: only for Atari ids")
        return result
    total = workers * envs
    progress(f"peer: ale-py's AtariVectorEnv, {total} envs on {cores()} threads, {seconds:g} s")
    result["peers"].append(benv.ale_vector(cfg, total, cores(), seconds))
    try:
        import cv2  # noqa: F401  gymnasium's AtariPreprocessing needs it
    except ImportError:
        result["not_installed"].append("gymnasium AtariPreprocessing needs opencv: pip install -e '.[peers]'")
    else:
        progress(f"peer: gymnasium AsyncVectorEnv with AtariPreprocessing, {total} envs, {seconds:g} s")
        result["peers"].append(benv.gym_async(cfg, total, seconds))
    progress(f"peer: EnvPool, {total} envs on {cores()} threads, {seconds:g} s")
    pool = benv.envpool(cfg, total, cores(), seconds)
    if pool is None:
        result["not_installed"].append("EnvPool: pip install -e '.[peers]'")
    else:
        result["peers"].append(pool)
    return result


# -- sampling ----------------------------------------------------------------------------------------------


def sampling_point(cfg: Config, spec, workers: int, envs: int, seconds: float, warmup: float, policy: str) -> dict:
    """Workers, rings and broker with a fixed (network) or uniform policy and no learner: frames/s."""
    cfg = _with(cfg, workers={"count": workers, "envs_per_worker": envs, "policy": policy, "stats_interval_s": 0.5})
    with _workdir() as tmp, Pipeline(cfg, spec, with_learner=False, workdir=Path(tmp)) as p:
        p.watch(180, until=Pipeline.all_reported)
        if not p.all_reported():
            raise RuntimeError("the roles did not report within 180 s")
        p.watch(warmup)
        start = dict(p.workers)
        p.watch(seconds)
        # A window shorter than the report interval, or a loaded machine, can end before every worker has
        # reported again: wait for each one's next report, so its rate is measured and not taken as zero.
        p.watch(60, until=lambda q: all(q.workers[w].time > start[w].time for w in start))
        end = dict(p.workers)
        broker = p.broker
    return {
        "workers": workers,
        "envs_per_worker": envs,
        "policy": policy,
        "frames_per_s": round(frames_rate(start, end), 1),
        "broker_unrolls_received": broker.unrolls_received if broker else 0,
        "broker_decode_errors": broker.decode_errors if broker else 0,
    }


def sampling_mode(
    cfg: Config,
    spec,
    grid: list[tuple[int, int]],
    seconds: float,
    warmup: float,
    policy: str,
    with_ceiling: bool,
    progress: Progress,
) -> dict:
    rows = []
    for i, (n, m) in enumerate(grid, 1):
        row: dict = {}
        if with_ceiling:
            progress(f"[{i}/{len(grid)}] env ceiling: {n} processes x {m} envs, {seconds:g} s")
            row["ceiling_frames_per_s"] = benv.ceiling(cfg, n, m, seconds)["frames_per_s"]
        progress(
            f"[{i}/{len(grid)}] sampling: {n} workers x {m} envs, {policy} policy, {warmup:g} s warm-up + {seconds:g} s"
        )
        row = {**sampling_point(cfg, spec, n, m, seconds, warmup, policy), **row}
        if with_ceiling:
            row["ratio_to_ceiling"] = round(row["frames_per_s"] / row["ceiling_frames_per_s"], 4)
        rows.append(row)
    result: dict = {"rows": rows, "targets": []}
    for row in rows:
        if (row["workers"], row["envs_per_worker"]) == (2, 4) and "ratio_to_ceiling" in row and policy == "uniform":
            result["targets"].append(check(row["ratio_to_ceiling"], "sampling_ratio_to_ceiling"))
    return result


# -- transport ---------------------------------------------------------------------------------------------


def transport_mode(cfg: Config, spec, seconds: float, progress: Progress, remote: bool = False) -> dict:
    m, t = cfg.workers.envs_per_worker, cfg.learner.unroll_length
    progress(f"ring write+read: slots of {m} x 84x84 frames, read back {t} at a time, {seconds:g} s")
    ring = btransport.ring_bandwidth(m, t, seconds)
    progress(f"pickled multiprocessing.Queue: the same slots from another process, {seconds:g} s")
    queue = btransport.queue_bandwidth(m, seconds)
    progress(
        f"index messages: Unroll messages (M={m}, T={t}) PUSH -> PULL over ipc with the schema decode, {seconds:g} s"
    )
    index = btransport.index_messages(cfg, spec.num_actions, seconds)
    progress("weights broadcast: flatten + encode + PUB -> SUB decode + load, one at a time")
    weights = btransport.weights_latency(cfg, spec.frame_shape, spec.frame_dtype, spec.num_actions)
    slower = ring["gb_per_s"] / queue["gb_per_s"] if queue["gb_per_s"] else float("inf")
    extra = {}
    if remote:
        progress(f"the remote path: {m}-env slots of {cfg.env.id} frames recorded under random play")
        frames = btransport.recorded_frames(cfg, m)
        paths = []
        for curve in (False, True):
            progress(
                f"remote path{' with CurveZMQ' if curve else ''}: zstd over TCP loopback into the ingest, {seconds:g} s"
            )
            paths.append(btransport.remote_path(cfg, spec, frames, seconds, curve))
        shm_fps = ring["gb_per_s"] * 1e9 / (ring["slot_bytes"] / m)
        for path in paths:
            path["ratio_to_shm"] = round(path["frames_per_s"] / shm_fps, 4)
        extra["remote"] = {"shm_frames_per_s": round(shm_fps), "paths": paths}
    return {
        **extra,
        "ring": ring,
        "queue": {**queue, "ring_over_queue": round(slower, 1)},
        "index_messages": index,
        "weights": weights,
        "targets": [
            check(ring["gb_per_s"], "ring_gb_per_s"),
            check(index["messages_per_s"], "index_messages_per_s"),
            check(slower, "queue_slower_than_ring"),
        ],
    }


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
        rows = []
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


# -- pipeline ----------------------------------------------------------------------------------------------

LAUNCH = "import sys; sys.argv[0] = 'zrl-launch'; from zrl.cli import launch_main; launch_main()"


def _reported_rows(tmp: str) -> list[dict]:
    """The metrics.csv rows of the run in ``tmp`` since its workers first reported (none before it wrote any)."""
    found = list(Path(tmp).glob("results/*/metrics.csv"))
    if not found:
        return []
    with open(found[0]) as fh:
        return [r for r in csv.DictReader(fh) if r.get("time_env_step_s")]


def _run_until(cmd: list[str], tmp: str, seconds: float, timeout: float) -> tuple[int, str]:
    """Run ``cmd`` in ``tmp`` until ``seconds`` have passed by its metrics.csv since its workers first reported,
    then stop it with SIGINT as Ctrl-C would; its exit code and stderr. RuntimeError if it is still there after
    ``timeout`` seconds (it is stopped first)."""
    deadline = time.monotonic() + timeout
    with open(Path(tmp) / "launch.err", "w+") as err:
        proc = subprocess.Popen(cmd, cwd=tmp, stdout=subprocess.DEVNULL, stderr=err, text=True)
        try:
            while proc.poll() is None and time.monotonic() < deadline:
                rows = _reported_rows(tmp)
                if rows and float(rows[-1]["elapsed_s"]) >= float(rows[0]["elapsed_s"]) + seconds:
                    proc.send_signal(signal.SIGINT)
                    break
                time.sleep(0.25)
            proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGINT)
            proc.wait(60)
            raise RuntimeError(f"zrl-launch did not stop within {timeout:g} s") from None
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        err.seek(0)
        return proc.returncode, err.read()


def pipeline(
    config_path: str | None,
    workers: int,
    envs: int,
    seconds: float,
    warmup: float,
    sets: list[str],
    args: tuple[str, ...] = (),
    watch: Callable[[Path, threading.Event], dict] | None = None,
) -> dict:
    """The real zrl-launch, stopped with SIGINT once warm-up + seconds have passed since its workers first
    reported (its start-up, seconds on a slow machine, counts toward neither); figures from its metrics.csv after
    the warm-up. ``args``: more options for zrl-launch; ``watch(results, done)``: runs in a thread beside it, from
    its start until ``done`` is set at its end, and returns figures for the result's ``watch`` entry."""
    with _workdir() as tmp:
        cmd = [
            sys.executable,
            "-c",
            LAUNCH,
            "--workers",
            str(workers),
            "--envs-per-worker",
            str(envs),
            "--set",
            "run.log_interval_s=1.0",
            "--set",
            "run.max_env_frames=1000000000000",
            "--set",
            "run.checkpoint_every_steps=0",
            "--set",
            "eval.final=false",  # the measured run ends at its seconds: no evaluation after it
            "--quiet",
            *args,
        ]
        if config_path:
            cmd += ["--config", str(Path(config_path).resolve())]
        for item in sets:
            cmd += ["--set", item]
        cmd += ["--set", f'run.results_dir="{Path(tmp) / "results"}"']  # last: it wins over the config's
        finished, watched = threading.Event(), {}
        watcher = threading.Thread(
            target=lambda: watched.update(watch(Path(tmp) / "results", finished)), name="zrl-bench-watch", daemon=True
        )
        if watch is not None:
            watcher.start()
        try:
            code, stderr = _run_until(cmd, tmp, warmup + seconds, timeout=warmup + seconds + 300)
        finally:
            finished.set()
            if watch is not None:
                watcher.join(30)
        if code not in (0, EXIT_SIGINT):
            raise RuntimeError(f"zrl-launch exited with {code}: {stderr.strip()[-2000:]}")
        rows = _reported_rows(tmp)
    if len(rows) < 2 or float(rows[-1]["elapsed_s"]) < float(rows[0]["elapsed_s"]) + warmup:
        raise RuntimeError("the run gave too few metrics rows after its start-up; give more --seconds or --warmup")
    begin = float(rows[0]["elapsed_s"]) + warmup
    first = max(
        (r for r in rows[:-1] if float(r["elapsed_s"]) <= begin), key=lambda r: float(r["elapsed_s"]), default=rows[0]
    )
    last = rows[-1]
    window = float(last["elapsed_s"]) - float(first["elapsed_s"])
    delta = lambda col: float(last[col] or 0) - float(first[col] or 0)  # noqa: E731
    times = metrics.time_shares(first, last)
    steps = delta("learner_step")
    return {
        **({"watch": watched} if watch is not None else {}),
        "workers": workers,
        "envs_per_worker": envs,
        "window_s": round(window, 1),
        "frames_per_s": round(delta("env_frames") / window, 1),
        "learner_steps_per_s": round(steps / window, 3),
        "policy_lag": float(last["policy_lag"] or 0),
        "seconds_per_second": times,
    }


def bottleneck(result: dict) -> tuple[str, str]:
    """Which role limits the pipeline, and its busiest section (``metrics.bottleneck``)."""
    return metrics.bottleneck(result["seconds_per_second"], result["workers"])


def _unit_costs(cfg: Config, spec, seconds: float, out) -> None:
    """In a process of its own, one after another: a worker's inference on its batch of observations (its
    threads, no gradient), the learner's step on a fixed batch (its threads and device) with the FLOPs that
    PyTorch's counter finds in it, and a square fp32 matmul with the learner's threads, the peak the learner
    is judged against. Seconds per call of each, through ``out``."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from zrl.agents.vtrace.learner import sgd_step
    from zrl.config import needs_features
    from zrl.models import build_model

    def timed(fn, sync=lambda: None) -> float:
        fn()  # warm-up
        sync()
        calls, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds or calls < 3:
            fn()
            calls += 1
        sync()
        return (time.perf_counter() - start) / calls

    torch.set_num_threads(cfg.workers.torch_threads)  # as a worker
    torch.manual_seed(0)
    net = build_model(cfg.model, spec.frame_shape, spec.frame_dtype, cfg.env.frame_stack, spec.num_actions).eval()
    dtype = np.dtype(spec.frame_dtype)
    shape = (cfg.workers.envs_per_worker, cfg.env.frame_stack, *spec.frame_shape)
    frames = torch.from_numpy(
        np.random.default_rng(0).integers(0, 256 if dtype == np.uint8 else 2, shape).astype(dtype)
    )
    features = needs_features(cfg)
    with torch.no_grad():
        inference_s = timed(lambda: net(frames, with_features=features))
    model, opt, sched, obs, batch = _fixed_batch(cfg, spec)  # the learner's threads from here on
    sync = torch.cuda.synchronize if obs.frames.device.type == "cuda" else (lambda: None)
    step = lambda: sgd_step(model, opt, sched, obs, batch, cfg.learner, cfg.vtrace)  # noqa: E731
    with FlopCounterMode(display=False) as counter:
        step()
    step_s = timed(step, sync)
    a, b = (torch.randn(MATMUL_N, MATMUL_N, device=obs.frames.device) for _ in range(2))
    matmul_s = timed(lambda: a @ b, sync)
    out.put(
        {"inference_s": inference_s, "step_s": step_s, "step_flops": counter.get_total_flops(), "matmul_s": matmul_s}
    )


def machine_limit(cfg: Config, spec, seconds: float, result: dict) -> dict:
    """What these cores allow end to end, from three costs per sample, each measured alone after the run: an
    env step (one process stepping the worker's envs), an inference (a worker's batch, per observation) and
    the learner's share of a step (per sample), in core-seconds. Every env step costs an env step and an
    inference; every trained sample costs a learner's share, and only the fresh share of a batch is new env
    steps. The limit, in env steps trained on per second (a replayed one counts each time): cores divided by the
    core-seconds one trained sample costs. Beside it the learner's GFLOP/s against an fp32 matmul's."""
    from zrl.config import learner_threads, replay_ratio

    env = benv.ceiling(cfg, 1, cfg.workers.envs_per_worker, seconds)
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    proc = ctx.Process(target=_unit_costs, args=(cfg, spec, seconds, out), name="zrl-bench-costs")
    proc.start()
    try:
        (costs,) = benv.collect(out, [proc], 3 * seconds + 300)
    finally:
        proc.join(10)
        if proc.is_alive():
            proc.kill()
            proc.join(5)
    samples = cfg.learner.batch_size * cfg.learner.unroll_length
    env_s = 1.0 / env["steps_per_s"]
    inference_s = cfg.workers.torch_threads * costs["inference_s"] / cfg.workers.envs_per_worker
    learner_s = learner_threads(cfg) * costs["step_s"] / samples
    fresh = 1.0 / replay_ratio(cfg)  # of a trained sample, the env steps it took to make
    limit = cores() / (fresh * (env_s + inference_s) + learner_s)
    steps_per_s = result["learner_steps_per_s"]
    trained = steps_per_s * samples
    gflop = costs["step_flops"] / 1e9
    busy = result["seconds_per_second"]["learner_step"]
    matmul = 2 * MATMUL_N**3 / costs["matmul_s"] / 1e9
    while_stepping = gflop * steps_per_s / busy if busy > 0 else 0.0
    return {
        "cores": cores(),
        "fresh_share": fresh,
        "learner_threads": learner_threads(cfg),
        "env_step_core_ms": round(env_s * 1e3, 4),
        "inference_core_ms_per_obs": round(inference_s * 1e3, 4),
        "learner_core_ms_per_sample": round(learner_s * 1e3, 4),
        "limit_trained_steps_per_s": round(limit, 1),
        "trained_steps_per_s": round(trained, 1),
        "ratio_to_limit": round(trained / limit, 3),
        "learner_gflop_per_step": round(gflop, 3),
        "learner_gflop_per_s": round(gflop * steps_per_s, 2),
        "learner_gflop_per_s_stepping": round(while_stepping, 2),
        "bare_learner_gflop_per_s": round(gflop / costs["step_s"], 2),
        "matmul_gflop_per_s": round(matmul, 2),
        "ratio_to_matmul": round(while_stepping / matmul, 3),
    }


def pipeline_mode(
    cfg: Config,
    spec,
    config_path: str | None,
    sets: list[str],
    seconds: float,
    warmup: float,
    progress: Progress,
    limit: bool = True,
) -> dict:
    """The real pipeline's figures, its bottleneck and (``limit``) what the machine allows, for the split in ``cfg``."""
    workers, envs = cfg.workers.count, cfg.workers.envs_per_worker
    progress(f"pipeline: zrl-launch {workers} workers x {envs} envs, {warmup:g} s warm-up + {seconds:g} s")
    result = pipeline(config_path, workers, envs, seconds, warmup, sets)
    role, section = bottleneck(result)
    result["bottleneck"] = {"role": role, "section": section}
    if limit:
        each = min(seconds, 10.0)
        progress(f"the machine's limit: an env step, an inference and a learner step, each alone for {each:g} s")
        result["limit"] = machine_limit(cfg, spec, each, result)
        result["targets"] = [
            check(result["limit"]["ratio_to_limit"], "pipeline_ratio_to_limit"),
            check(result["limit"]["ratio_to_matmul"], "learner_ratio_to_matmul"),
        ]
    return result


OBSERVERS = ("none", "tensorboard", "dashboard")
"""What may watch a run: nothing, TensorBoard events (run.tensorboard), the live dashboard with a page open."""


def read_dashboard(results: Path, done: threading.Event) -> dict:
    """An open dashboard page, as a browser keeps one: find the address the run logs, then take its stream of
    updates until the run ends. How many updates came, and how many bytes."""
    import re
    import urllib.request

    address = None
    while address is None and not done.wait(0.2):
        for log in results.glob("*/zrl.log"):
            found = re.search(r"dashboard at (http://\S+/)", log.read_text(errors="replace"))
            address = found.group(1) if found else None
    events = size = 0
    if address is None:
        return {"events": 0, "bytes": 0}
    direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # 127.0.0.1, never through a proxy
    while not done.is_set():  # as a browser does, it reconnects when the stream drops
        try:
            with direct.open(address + "api/stream", timeout=10) as stream:
                for line in stream:
                    size += len(line)
                    events += line.startswith(b"data: ")
                    if done.is_set():
                        break
        except Exception:  # the run ended and its page server with it, or the stream dropped
            done.wait(1.0)
    return {"events": events, "bytes": size}


@dataclasses.dataclass(frozen=True)
class Variant:
    """One way of running the pipeline in a comparison: its local workers, more settings and options, and a
    watcher beside it (``pipeline``'s ``watch``)."""

    workers: int
    sets: tuple[str, ...] = ()
    args: tuple[str, ...] = ()
    watch: Callable[[Path, threading.Event], dict] | None = None


def compare_mode(
    config_path: str | None,
    sets: list[str],
    envs: int,
    seconds: float,
    warmup: float,
    rounds: int,
    progress,
    variants: dict[str, Variant],
    label: str,
) -> dict:
    """The real pipeline run each of ``variants``' ways in turn, ``rounds`` times, the order rotating from round to
    round (so that the machine's drift, and any cost of going first or last, falls on each alike): each one's
    learner steps/s and frames/s, and the mean of its per-round ratios to the first variant's beside it.
    ``label``: what the rows call a variant."""
    names, rows = list(variants), []
    for r in range(1, rounds + 1):
        for name in names[r % len(names) :] + names[: r % len(names)]:  # each in each place of a round, in turn
            v = variants[name]
            progress(f"round {r}/{rounds}: {name}, {warmup:g} s warm-up + {seconds:g} s")
            result = pipeline(config_path, v.workers, envs, seconds, warmup, [*sets, *v.sets], v.args, v.watch)
            watched = result.get("watch", {})
            rows.append(
                {
                    "round": r,
                    label: name,
                    "learner_steps_per_s": result["learner_steps_per_s"],
                    "frames_per_s": result["frames_per_s"],
                    "learner_wait": round(result["seconds_per_second"]["learner_wait"], 3),
                    **{k: v for k, v in watched.items() if not isinstance(v, (dict, list))},
                }
            )
    summary = []
    for name in names:
        ratios = {"learner_steps_per_s": [], "frames_per_s": []}
        for r in range(1, rounds + 1):
            this = next(x for x in rows if x["round"] == r and x[label] == name)
            base = next(x for x in rows if x["round"] == r and x[label] == names[0])
            for key in ratios:
                ratios[key].append(this[key] / base[key] if base[key] else float("nan"))
        mine = [x for x in rows if x[label] == name]
        summary.append(
            {
                label: name,
                "learner_steps_per_s": round(float(np.mean([x["learner_steps_per_s"] for x in mine])), 3),
                "frames_per_s": round(float(np.mean([x["frames_per_s"] for x in mine])), 1),
                "learner_ratio": round(float(np.mean(ratios["learner_steps_per_s"])), 3),
                "learner_ratio_range": [
                    round(min(ratios["learner_steps_per_s"]), 3),
                    round(max(ratios["learner_steps_per_s"]), 3),
                ],
                "frames_ratio": round(float(np.mean(ratios["frames_per_s"])), 3),
            }
        )
    return {"envs_per_worker": envs, "rounds": rounds, "label": label, "rows": rows, "summary": summary}


def observers_mode(
    config_path: str | None, sets: list[str], cfg: Config, seconds: float, warmup: float, rounds: int, progress
) -> dict:
    """The real pipeline with nothing watching it, with TensorBoard events, and with the dashboard and a page
    reading its stream, in turn (compare_mode)."""
    workers = cfg.workers.count
    variants = {
        observer: Variant(
            workers,
            (f"run.tensorboard={'true' if observer == 'tensorboard' else 'false'}",),
            ("--dashboard",) if observer == "dashboard" else (),
            read_dashboard if observer == "dashboard" else None,
        )
        for observer in OBSERVERS
    }
    result = compare_mode(
        config_path, sets, cfg.workers.envs_per_worker, seconds, warmup, rounds, progress, variants, "observer"
    )
    for row in result["rows"]:
        row["page_updates"] = row.pop("events", "")
        row.pop("bytes", None)
    return {"workers": workers, **result}


REPLAY_CHECKPOINT_EVERY = 25  # learner steps between checkpoints in both variants of replay_mode


def replay_watch(results: Path, done: threading.Event) -> dict:
    """At the run's end, its newest replay checkpoint: the observation frames its rings' files hold, its bytes on
    disk (the state and the frame files it needs) and bytes per million frames; and how many were written."""
    from zrl.replay_checkpoint import newest

    done.wait()
    folders = list(results.glob("*/checkpoints/replay"))
    found = newest(folders[0]) if folders else None
    if found is None:
        return {"replay_saves": 0}
    path, manifest = found
    rows = next(iter(folders[0].parent.parent.glob("metrics.csv")))
    with open(rows) as fh:
        last = list(csv.DictReader(fh))[-1]
    frames = manifest["observations_per_slot"] * sum(ring["head"] - ring["first"] for ring in manifest["rings"])
    files = [
        path.parent / manifest["state"],
        *(path.parent / "frames" / c for r in manifest["rings"] for c in r["chunks"]),
    ]
    size = sum(f.stat().st_size for f in files)
    return {
        "replay_saves": int(float(last.get("replay_saves") or 0)),
        "replay_save_s": float(last.get("replay_save_s") or 0),
        "replay_frames": frames,
        "replay_mb": round(size / 1e6, 2),
        "mb_per_million_frames": round(size / frames, 1) if frames else float("nan"),
    }


def replay_mode(
    config_path: str | None, sets: list[str], cfg: Config, seconds: float, warmup: float, rounds: int, progress
) -> dict:
    """The pipeline with a checkpoint every REPLAY_CHECKPOINT_EVERY learner steps, without and with the replays
    saved beside each (run.checkpoint_replay), in turn (compare_mode): what saving the replays costs the learner,
    and what they take on disk per million frames."""
    every = f"run.checkpoint_every_steps={REPLAY_CHECKPOINT_EVERY}"
    variants = {
        "off": Variant(cfg.workers.count, (every, "run.checkpoint_replay=false")),
        "on": Variant(cfg.workers.count, (every, "run.checkpoint_replay=true"), (), replay_watch),
    }
    result = compare_mode(
        config_path, sets, cfg.workers.envs_per_worker, seconds, warmup, rounds, progress, variants, "replay_checkpoint"
    )
    return {"workers": cfg.workers.count, **result}


# env frames between evaluations in evaluation_mode when the config sets none: fewer than any run makes while an
# evaluation plays, so that the next request always waits and the evaluator never idles (the worst case)
EVALUATION_EVERY = 5_000
EVALUATION_NICE_BESIDE = 5  # evaluation_mode also runs the evaluator at this priority, unless the config's is it


def evaluation_watch(results: Path, done: threading.Event) -> dict:
    """At the run's end, its eval.csv: the evaluations done, the seconds they took and the episodes they played;
    and how often its log says the evaluator was restarted (dead or taken for hung)."""
    done.wait()
    found = list(results.glob("*/eval.csv"))
    if not found:
        return {"evaluations": 0}
    with open(found[0]) as fh:
        rows = list(csv.DictReader(fh))
    log = found[0].with_name("zrl.log")
    lines = log.read_text().splitlines() if log.is_file() else []
    restarts = sum("zrl-evaluator" in line and "; restarted it" in line for line in lines)
    return {
        "evaluations": len(rows),
        "eval_seconds": round(sum(float(r["seconds"]) for r in rows), 1),
        "eval_episodes": sum(int(r["episodes"]) for r in rows),
        "evaluator_restarts": restarts,
    }


def evaluation_mode(
    config_path: str | None, sets: list[str], cfg: Config, seconds: float, warmup: float, rounds: int, progress
) -> dict:
    """The pipeline without and with evaluation during training (the config's eval.interval_frames, or an
    evaluation every EVALUATION_EVERY frames: the evaluator busy all the time), at the config's eval.nice and
    at EVALUATION_NICE_BESIDE, in turn (compare_mode): what the evaluator costs the learner and the workers, and
    how long its evaluations take."""
    every = cfg.eval.interval_frames or EVALUATION_EVERY
    on = f"eval.interval_frames={every}"
    variants = {
        "off": Variant(cfg.workers.count, ("eval.interval_frames=0", "run.best_by=train")),
        f"on, nice {cfg.eval.nice}": Variant(cfg.workers.count, (on,), (), evaluation_watch),
    }
    if cfg.eval.nice != EVALUATION_NICE_BESIDE:  # what a higher priority would buy and cost, beside it
        variants[f"on, nice {EVALUATION_NICE_BESIDE}"] = Variant(
            cfg.workers.count, (on, f"eval.nice={EVALUATION_NICE_BESIDE}"), (), evaluation_watch
        )
    result = compare_mode(
        config_path, sets, cfg.workers.envs_per_worker, seconds, warmup, rounds, progress, variants, "evaluation"
    )
    return {"workers": cfg.workers.count, "eval_interval_frames": every, **result}


WORKER = "import sys; sys.argv[0] = 'zrl-worker'; from zrl.cli import worker_main; worker_main()"


def remote_worker(results: Path, done: threading.Event) -> dict:
    """A worker on this host over the remote path: once the run writes connect.txt, run its zrl-worker line (TCP
    loopback, zstd, no keys) until the run ends; whether it joined, and its last progress line."""
    line = None
    while line is None and not done.wait(0.2):
        found = list(results.glob("*/connect.txt"))
        line = found[0].read_text().split() if found else None
    if line is None:
        return {"joined": False}
    with subprocess.Popen([sys.executable, "-c", WORKER, *line[1:]], stderr=subprocess.PIPE, text=True) as proc:
        done.wait()
        proc.send_signal(signal.SIGTERM)
        try:
            _, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
    said = [x for x in err.splitlines() if "B per observation" in x]
    return {"joined": "joined run" in err, "worker_said": said[-1].removeprefix("zrl-worker: ") if said else ""}


def remote_mode(
    config_path: str | None, sets: list[str], cfg: Config, seconds: float, warmup: float, rounds: int, progress
) -> dict:
    """The pipeline with N + 1 local workers against N local and one remote worker on this host (zrl-worker over
    TCP loopback into the ingest), in turn (compare_mode): what the remote path costs the learner."""
    n = cfg.workers.count
    variants = {
        f"{n + 1} local": Variant(n + 1),
        f"{n} local + 1 remote": Variant(n, ("workers.remote=1",), (), remote_worker),
    }
    result = compare_mode(
        config_path, sets, cfg.workers.envs_per_worker, seconds, warmup, rounds, progress, variants, "workers"
    )
    return {"workers": n, **result}


def suggest(
    config_path: str | None,
    sets: list[str],
    seconds: float,
    warmup: float,
    progress: Progress,
    workers: list[int] | None = None,
    envs: list[int] | None = None,
) -> dict:
    """Short pipeline runs over a small grid (by default half, all and twice the cores x 2, 4, 8 envs); the best
    is the one whose learner trains the most per second (frames produced break ties)."""
    c = cores()
    grid = [(w, m) for w in (workers or sorted({max(1, c // 2), c, 2 * c})) for m in (envs or (2, 4, 8))]
    rows = []
    for i, (w, m) in enumerate(grid, 1):
        progress(f"[{i}/{len(grid)}] {w} workers x {m} envs")
        rows.append(pipeline(config_path, w, m, seconds, warmup, sets))
    best = max(rows, key=lambda r: (r["learner_steps_per_s"], r["frames_per_s"]))
    return {"rows": rows, "best": {"workers": best["workers"], "envs_per_worker": best["envs_per_worker"]}}
