"""The data path's modes: env (the env ceiling and the peers that install), sampling (workers, rings and broker
without a learner, against the ceiling) and transport (each hop of the transport alone, and the remote path)."""

from __future__ import annotations

from pathlib import Path

from zrl import envs as zenvs
from zrl.bench import envs as benv
from zrl.bench import remote_path as bremote
from zrl.bench import transport as btransport
from zrl.bench.facts import cores
from zrl.bench.modes.harness import Progress, _with, _workdir, check
from zrl.bench.roles import Pipeline, frames_rate
from zrl.config import Config

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
        frames = bremote.recorded_frames(cfg, m)
        paths = []
        for curve in (False, True):
            progress(
                f"remote path{' with CurveZMQ' if curve else ''}: zstd over TCP loopback into the ingest, {seconds:g} s"
            )
            paths.append(bremote.remote_path(cfg, spec, frames, seconds, curve))
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
