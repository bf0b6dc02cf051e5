"""The ceiling every other figure is measured against: bare environment stepping with zrl's preprocessing,
one process per core and no pipeline; and, in the same run, the peers that install on this machine."""

from __future__ import annotations

import multiprocessing as mp
import queue
import time
from typing import cast

import numpy as np

from zrl.config import Config, EnvConfig
from zrl.envs import atari_rom, make_vector_env

WARMUP_S = 1.0  # stepping before the clock starts, in every process


def _bare(env_cfg: EnvConfig, num_envs: int, seed: int, seconds: float, barrier, out) -> None:
    env = make_vector_env(env_cfg, num_envs, seed=seed)
    rng = np.random.default_rng(seed)
    env.reset()
    n = env.num_actions
    barrier.wait()  # every process steps at once: they share the cores as the workers do
    end = time.perf_counter() + WARMUP_S
    while time.perf_counter() < end:
        env.step(rng.integers(0, n, num_envs))
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        env.step(rng.integers(0, n, num_envs))
        steps += num_envs
    elapsed = time.perf_counter() - start
    out.put((steps, steps * env.frames_per_step, elapsed))
    env.close()


def collect(out, procs: list, timeout: float) -> list:
    """One result from each process through ``out``; RuntimeError as soon as one dies without its result."""
    results: list = []
    deadline = time.monotonic() + timeout
    while len(results) < len(procs):
        try:
            results.append(out.get(timeout=0.5))
        except queue.Empty:
            dead = [p for p in procs if p.exitcode not in (None, 0)]
            if dead or time.monotonic() > deadline:
                why = f"exited with code {dead[0].exitcode}" if dead else f"sent nothing in {timeout:.0f} s"
                raise RuntimeError(f"a benchmark process {why}") from None
    return results


def ceiling(cfg: Config, processes: int, envs_per_process: int, seconds: float) -> dict:
    """``processes`` processes each step ``envs_per_process`` envs (zrl's vector env, random actions) at once."""
    ctx = mp.get_context("spawn")
    out, barrier = ctx.Queue(), ctx.Barrier(processes)
    procs = [
        ctx.Process(target=_bare, args=(cfg.env, envs_per_process, 1000 + i, seconds, barrier, out))
        for i in range(processes)
    ]
    for p in procs:
        p.start()
    try:
        results = collect(out, procs, seconds + 120)
    finally:
        for p in procs:
            p.join(10)
            if p.is_alive():
                p.kill()
    steps = sum(s / e for s, _, e in results)
    frames = sum(f / e for _, f, e in results)
    return {
        "processes": processes,
        "envs_per_process": envs_per_process,
        "steps_per_s": round(steps, 1),
        "frames_per_s": round(frames, 1),
        "frames_per_s_per_process": round(frames / processes, 1),
    }


def _rom(env_id: str) -> str:
    """The ALE rom of an Atari id: the peers are measured on Atari ids only (data_path.env_mode sees to it)."""
    rom = atari_rom(env_id)
    if rom is None:
        raise ValueError(f"{env_id!r} is not an Atari id")
    return rom


def _game(env_id: str) -> str:
    """The game's name as Gymnasium and EnvPool ids spell it: space_invaders -> SpaceInvaders."""
    return _rom(env_id).title().replace("_", "")


def _timed(step, seconds: float, per_call: int, frames_per_step: int) -> dict:
    end = time.perf_counter() + WARMUP_S
    while time.perf_counter() < end:
        step()
    calls, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        step()
        calls += 1
    rate = calls * per_call / (time.perf_counter() - start)
    return {"steps_per_s": round(rate, 1), "frames_per_s": round(rate * frames_per_step, 1)}


def _random_actions(env, actions: int, num_envs: int, seconds: float, frame_skip: int, **reset) -> dict:
    """Reset, then time ``env`` stepping on uniformly random actions; the env is closed either way."""
    try:
        env.reset(**reset)
        rng = np.random.default_rng(0)
        return _timed(lambda: env.step(rng.integers(0, actions, num_envs)), seconds, num_envs, frame_skip)
    finally:
        env.close()


def ale_vector(cfg: Config, num_envs: int, threads: int, seconds: float) -> dict:
    """ale-py's own C++ vector env: every env in one process on ``threads`` threads, the same preprocessing."""
    import gymnasium
    from ale_py.vector_env import AtariVectorEnv

    e = cfg.env
    env = AtariVectorEnv(
        _rom(e.id),
        num_envs,
        num_threads=threads,
        stack_num=e.frame_stack,
        frameskip=e.frame_skip,
        noop_max=e.noop_max,
        use_fire_reset=e.fire_reset,
        repeat_action_probability=e.sticky_action_prob,
        episodic_life=e.episodic_life,
        autoreset_mode=gymnasium.vector.AutoresetMode.SAME_STEP,
    )
    actions = cast(gymnasium.spaces.Discrete, env.single_action_space)  # ALE's actions are Discrete
    figures = _random_actions(env, int(actions.n), num_envs, seconds, e.frame_skip, seed=0)
    return {"peer": "ale-py AtariVectorEnv", "envs": num_envs, "threads": threads, **figures}


def _gym_atari(env_id: str, cfg: EnvConfig):
    import ale_py
    import gymnasium
    from gymnasium.wrappers import AtariPreprocessing, FrameStackObservation

    gymnasium.register_envs(ale_py)
    env = gymnasium.make(env_id, frameskip=1, repeat_action_probability=cfg.sticky_action_prob)
    env = AtariPreprocessing(
        env,
        noop_max=cfg.noop_max,
        frame_skip=cfg.frame_skip,
        screen_size=84,
        terminal_on_life_loss=False,
        grayscale_obs=True,
    )
    return FrameStackObservation(env, cfg.frame_stack)


def gym_async(cfg: Config, num_envs: int, seconds: float) -> dict:
    """Gymnasium's AsyncVectorEnv (a process per env, pickled over pipes) with the standard Atari wrappers."""
    import functools

    import gymnasium

    env_id = f"ALE/{_game(cfg.env.id)}-v5"
    env = gymnasium.vector.AsyncVectorEnv([functools.partial(_gym_atari, env_id, cfg.env)] * num_envs)
    try:
        env.reset(seed=0)
        figures = _timed(lambda: env.step(env.action_space.sample()), seconds, num_envs, cfg.env.frame_skip)
    finally:
        env.close()
    return {"peer": "gymnasium AsyncVectorEnv + AtariPreprocessing", "envs": num_envs, **figures}


def envpool(cfg: Config, num_envs: int, threads: int, seconds: float) -> dict | None:
    """EnvPool's Atari env with the same preprocessing, where it is installed; None where it is not."""
    try:
        import envpool as ep
    except ImportError:
        return None
    e = cfg.env
    task = f"{_game(e.id)}-v5"
    env = ep.make(
        task,
        env_type="gymnasium",
        num_envs=num_envs,
        num_threads=threads,
        batch_size=num_envs,
        stack_num=e.frame_stack,
        frame_skip=e.frame_skip,
        noop_max=e.noop_max,
        episodic_life=e.episodic_life,
        repeat_action_probability=e.sticky_action_prob,
    )
    figures = _random_actions(env, int(env.action_space.n), num_envs, seconds, e.frame_skip)
    return {"peer": "EnvPool", "envs": num_envs, "threads": threads, **figures}
