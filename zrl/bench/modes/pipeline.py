"""The pipeline's modes: pipeline (the real zrl-launch for a measured window, its time split by role, its
bottleneck and what the machine allows end to end) and suggest (short pipeline runs over a grid of splits)."""

from __future__ import annotations

import multiprocessing as mp
import time

import numpy as np

from zrl.bench import envs as benv
from zrl.bench.facts import cores
from zrl.bench.modes.harness import Progress, check, pipeline
from zrl.bench.modes.learner import _fixed_batch
from zrl.config import Config
from zrl.metrics import time_split

MATMUL_N = 1024  # the square fp32 matmul whose GFLOP/s is the peak the learner is judged against


def bottleneck(result: dict) -> tuple[str, str]:
    """Which role limits the pipeline, and its busiest section (``time_split.bottleneck``)."""
    return time_split.bottleneck(result["seconds_per_second"], result["workers"])


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
