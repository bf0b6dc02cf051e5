"""Environments: Atari ids of both styles, DeepMind preprocessing, raw scores beside clipped rewards."""

from __future__ import annotations

import numpy as np
import pytest

from zrl.config import ConfigError, EnvConfig
from zrl.envs import atari_rom, make_vector_env, probe

pytestmark = pytest.mark.integration


@pytest.mark.parametrize(
    "env_id, rom",
    [
        ("ALE/Pong-v5", "pong"),
        ("PongNoFrameskip-v4", "pong"),
        ("ALE/SpaceInvaders-v5", "space_invaders"),
        ("BreakoutNoFrameskip-v4", "breakout"),
        ("CartPole-v1", None),
    ],
)
def test_atari_ids_of_both_styles(env_id, rom):
    assert atari_rom(env_id) == rom


def test_unknown_ids_are_config_errors_with_a_hint():
    with pytest.raises(ConfigError, match="did you mean ALE/Pong-v5"):
        probe(EnvConfig(id="ALE/Pongg-v5"))
    with pytest.raises(ConfigError, match="env.id"):
        probe(EnvConfig(id="NoSuchThing-v1"))


def test_atari_frames_are_single_84x84_grayscale():
    spec = probe(EnvConfig(id="ALE/Breakout-v5"))
    assert spec.frame_shape == (84, 84) and spec.frame_dtype == "|u1" and spec.frames_per_step == 4
    assert spec.num_actions == 4
    assert probe(EnvConfig(id="ALE/Breakout-v5", full_action_space=True)).num_actions == 18


def test_pong_clips_rewards_and_keeps_raw_scores():
    env = make_vector_env(EnvConfig(id="ALE/Pong-v5"), 2, seed=1)
    try:
        frames = env.reset()
        assert frames.shape == (2, 84, 84) and frames.dtype == np.uint8
        rng = np.random.default_rng(0)
        raw_total = np.zeros(2)
        games = 0
        for _ in range(6000):
            step = env.step(rng.integers(0, env.num_actions, 2))
            assert set(np.unique(step.rewards)) <= {-1.0, 0.0, 1.0}
            raw_total += step.raw_rewards
            games += int(step.game_over.sum())
            if games:
                break
        assert games >= 1, "random Pong should lose a game within 6000 steps"
        assert raw_total.min() <= -21 + 5
    finally:
        env.close()


def test_breakout_life_loss_ends_training_episode_not_the_game():
    env = make_vector_env(EnvConfig(id="ALE/Breakout-v5", episodic_life=True), 1, seed=0)
    try:
        env.reset()
        rng = np.random.default_rng(0)
        life_losses = game_overs = 0
        for _ in range(3000):
            step = env.step(rng.integers(0, 4, 1))
            life_losses += int(step.done[0] and not step.game_over[0])
            game_overs += int(step.game_over[0])
            if game_overs:
                break
        assert game_overs == 1 and life_losses == 4  # five lives: four losses end training episodes, the fifth the game
    finally:
        env.close()


def test_gymnasium_box_env_resets_in_the_same_step():
    env = make_vector_env(EnvConfig(id="CartPole-v1", frame_stack=1, clip_rewards=False), 3, seed=0)
    try:
        assert env.reset().shape == (3, 4)
        ends = 0
        for _ in range(200):
            step = env.step(np.zeros(3, np.int64))  # always left: the pole falls quickly
            ends += int(step.game_over.sum())
            assert (step.raw_rewards == 1.0).all()
        assert ends >= 3
    finally:
        env.close()
