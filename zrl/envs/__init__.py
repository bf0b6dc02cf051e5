"""Environments as lock-step vectors of M copies that return single frames.

Both kinds share one interface (:class:`VectorEnv`):

- ``reset() -> frames [M, *frame_shape]``
- ``step(actions [M]) -> Step`` with the new frames, clipped and raw rewards, ``done`` (the training
  episode terminated: discount 0) and ``game_over`` (the environment was reset; the returned frame is the
  first frame of a new episode). Resets happen in the same step, so every frame returned is one the
  policy acts on next. A time-limit truncation resets the game but is not ``done``: it is not a terminal
  state, so the value bootstraps through it (from the next episode's first state, the one value the
  unroll has; for a time-limited env that is far closer than the 0 a terminal would claim).

Atari runs on ale-py's C++ ``AtariVectorEnv`` with the DeepMind preprocessing (no-op reset, frame skip
with max-pooling, 84x84 grayscale, fire reset, optional life loss as episode end); any Gymnasium
environment with a Box observation and a Discrete action space runs through :class:`GymVectorEnv`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from zrl.config import Config, ConfigError, EnvConfig, atari_game


@dataclass
class Step:
    frames: np.ndarray
    rewards: np.ndarray
    raw_rewards: np.ndarray
    done: np.ndarray
    game_over: np.ndarray


def clip_rewards(raw: np.ndarray, method: str) -> np.ndarray:
    """The rewards a learner trains on under ``env.clip_method`` (the reference platform's formulas):
    abs_one_sign, sign(r); abs_one_clamp, r clamped to [-1, 1]; soft_asymmetric, 5 tanh(r/5) for r >= 0 and
    1.5 tanh(r/5) below."""
    if method == "abs_one_sign":
        return np.sign(raw)
    if method == "abs_one_clamp":
        return np.clip(raw, -1.0, 1.0)
    if method == "soft_asymmetric":
        soft = np.tanh(raw / 5.0)
        return (np.where(raw < 0, 1.5, 5.0) * soft).astype(raw.dtype)
    raise ValueError(f"env.clip_method: {method!r} is not abs_one_sign, abs_one_clamp or soft_asymmetric")


def atari_rom(env_id: str) -> str | None:
    """The ALE rom name for an Atari id, None when the id is not Atari-shaped.

    ``ALE/Pong-v5``, ``PongNoFrameskip-v4`` and ``Pong-v4`` all map to ``pong``. Raises ConfigError for an
    Atari-shaped id whose game ale-py does not have.
    """
    rom = atari_game(env_id)
    if rom is None:
        return None
    from ale_py.roms import get_all_rom_ids

    roms = get_all_rom_ids()
    if rom in roms:
        return rom
    if env_id.startswith("ALE/"):
        import difflib

        hint = difflib.get_close_matches(rom, roms, n=1)
        extra = f" (did you mean ALE/{_camel(hint[0])}-v5?)" if hint else ""
        raise ConfigError(f"env.id: {env_id!r} names no game ale-py has{extra}")
    return None  # e.g. CartPole-v1 matches the v4-style pattern shape only by accident


def run_protocol(cfg: Config) -> str:
    """eval.protocol as the evaluator plays a run's config: "auto" is saber for a value-based agent, deepmind for
    a policy; "train_env" for an env that is not Atari (played as it trains). Here rather than in the evaluator,
    so that zrl-launch names it without importing torch."""
    from zrl import agents

    if atari_rom(cfg.env.id) is None:
        return "train_env"
    if cfg.eval.protocol != "auto":
        return cfg.eval.protocol
    return "saber" if agents.get(cfg.algo).acts_greedily else "deepmind"


def _camel(rom: str) -> str:
    return "".join(part.capitalize() for part in rom.split("_"))


class AtariVectorEnv:
    """M Atari games stepped by ale-py's C++ vector env, one thread, single frames: [H, W] grey (84x84 by
    default), or [3, H, W] in colour (env.grayscale false)."""

    frame_dtype = np.dtype(np.uint8)

    def __init__(self, cfg: EnvConfig, rom: str, num_envs: int, seed: int) -> None:
        import gymnasium
        from ale_py.vector_env import AtariVectorEnv as _Ale

        self.num_envs = num_envs
        self.frames_per_step = cfg.frame_skip
        self._clip = cfg.clip_method if cfg.clip_rewards else None
        self._seed = seed
        self._env = _Ale(
            rom,
            num_envs,
            num_threads=1,
            stack_num=1,
            frameskip=cfg.frame_skip,
            noop_max=cfg.noop_max,
            use_fire_reset=cfg.fire_reset,
            max_num_frames_per_episode=cfg.max_episode_frames,
            img_height=cfg.resolution[0],
            img_width=cfg.resolution[1],
            grayscale=cfg.grayscale,
            repeat_action_probability=cfg.sticky_action_prob,
            full_action_space=cfg.full_action_space,
            episodic_life=False,
            life_loss_info=cfg.episodic_life,
            reward_clipping=False,
            autoreset_mode=gymnasium.vector.AutoresetMode.SAME_STEP,
        )
        actions = cast(gymnasium.spaces.Discrete, self._env.single_action_space)  # ALE's actions are Discrete
        self.num_actions = int(actions.n)
        self._episode_frame = np.zeros(num_envs, np.int64)
        self._colour = not cfg.grayscale
        height, width = cfg.resolution
        self.frame_shape = (height, width) if cfg.grayscale else (3, height, width)

    def _frames(self, obs: np.ndarray) -> np.ndarray:
        """ale-py's [M, 1, H, W] grey or [M, 1, H, W, 3] colour observations as single frames [M, *frame_shape]."""
        return np.ascontiguousarray(obs[:, 0].transpose(0, 3, 1, 2)) if self._colour else obs[:, 0]

    def reset(self) -> np.ndarray:
        obs, info = self._env.reset(seed=self._seed)
        self._episode_frame[:] = info["episode_frame_number"]
        return self._frames(obs)

    def step(self, actions: np.ndarray) -> Step:
        obs, rewards, terminated, truncated, info = self._env.step(actions)
        episode_frame = info["episode_frame_number"]
        # A reset (game over or time limit) restarts the emulator's episode frame counter.
        game_over = (truncated | terminated) & (episode_frame < self._episode_frame)
        self._episode_frame[:] = episode_frame
        raw = rewards.astype(np.float32)
        return Step(
            frames=self._frames(obs),
            rewards=raw if self._clip is None else clip_rewards(raw, self._clip),
            raw_rewards=raw,
            done=terminated,
            game_over=game_over | truncated,
        )

    def close(self) -> None:
        self._env.close()


class GymVectorEnv:
    """M copies of a Gymnasium env with a Box observation and Discrete actions, reset in the same step."""

    frames_per_step = 1

    def __init__(self, cfg: EnvConfig, num_envs: int, seed: int) -> None:
        import gymnasium

        kwargs: dict[str, Any] = {"max_episode_steps": cfg.max_episode_steps} if cfg.max_episode_steps else {}
        try:
            self._envs = [gymnasium.make(cfg.id, **kwargs) for _ in range(num_envs)]
        except (gymnasium.error.Error, ImportError) as err:
            raise ConfigError(f"env.id: {cfg.id!r} cannot be made here: {str(err).splitlines()[0]}") from None
        space = self._envs[0].observation_space
        actions = self._envs[0].action_space
        if not isinstance(space, gymnasium.spaces.Box):
            raise ConfigError(f"env.id: {cfg.id!r} has a {type(space).__name__} observation; zrl needs a Box")
        if not isinstance(actions, gymnasium.spaces.Discrete):
            raise ConfigError(f"env.id: {cfg.id!r} has {type(actions).__name__} actions; zrl needs Discrete actions")
        self.num_envs = num_envs
        self.num_actions = int(actions.n)
        self.frame_shape = tuple(space.shape)
        self.frame_dtype = np.dtype(np.uint8) if space.dtype == np.uint8 else np.dtype(np.float32)
        self._clip = cfg.clip_method if cfg.clip_rewards else None
        self._seed = seed
        self._frames = np.zeros((num_envs, *self.frame_shape), self.frame_dtype)

    def reset(self) -> np.ndarray:
        for i, env in enumerate(self._envs):
            obs, _ = env.reset(seed=self._seed + i)
            self._frames[i] = obs
        return self._frames.copy()

    def step(self, actions: np.ndarray) -> Step:
        m = self.num_envs
        raw = np.zeros(m, np.float32)
        done = np.zeros(m, bool)
        game_over = np.zeros(m, bool)
        for i, env in enumerate(self._envs):
            obs, reward, terminated, truncated, _ = env.step(int(actions[i]))
            raw[i] = reward
            if terminated or truncated:
                done[i] = terminated
                game_over[i] = True
                obs, _ = env.reset()
            self._frames[i] = obs
        return Step(
            frames=self._frames,  # valid until the next step; the worker copies it into its ring and stack
            rewards=raw if self._clip is None else clip_rewards(raw, self._clip),
            raw_rewards=raw,
            done=done,
            game_over=game_over,
        )

    def close(self) -> None:
        for env in self._envs:
            env.close()


VectorEnv = AtariVectorEnv | GymVectorEnv


def make_vector_env(cfg: EnvConfig, num_envs: int, seed: int) -> VectorEnv:
    """Build M environments for ``cfg.id``; ConfigError for an id nothing can build."""
    rom = atari_rom(cfg.id)
    if rom is not None:
        return AtariVectorEnv(cfg, rom, num_envs, seed)
    import gymnasium

    module, _, name = cfg.id.rpartition(":")  # "my_package.envs:MyEnv-v0" registers MyEnv-v0 on import
    if module:
        import importlib

        try:
            importlib.import_module(module)
        except ImportError as err:
            raise ConfigError(f"env.id: {cfg.id!r}: cannot import {module} ({err})") from None
    try:
        gymnasium.spec(name)
    except gymnasium.error.Error as err:
        raise ConfigError(f"env.id: {cfg.id!r} is not a known environment ({err})") from None
    return GymVectorEnv(cfg, num_envs, seed)


@dataclass(frozen=True)
class EnvSpec:
    """What the rest of the pipeline needs to know about an environment, found before any process starts."""

    frame_shape: tuple[int, ...]
    frame_dtype: str
    num_actions: int
    frames_per_step: int
    image: bool


def probe(cfg: EnvConfig) -> EnvSpec:
    """Build one environment, read its shapes and close it; ConfigError if it cannot be built."""
    env = make_vector_env(cfg, 1, 0)
    try:
        return EnvSpec(
            frame_shape=tuple(env.frame_shape),
            frame_dtype=env.frame_dtype.str,
            num_actions=env.num_actions,
            frames_per_step=env.frames_per_step,
            image=len(env.frame_shape) >= 2,
        )
    finally:
        env.close()
