"""Environments: Atari ids of both styles, DeepMind preprocessing, raw scores beside clipped rewards."""

from __future__ import annotations

import numpy as np
import pytest

from zrl.config import ConfigError, EnvConfig
from zrl.envs import atari_rom, clip_rewards, make_vector_env, probe

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


# Each method's values, worked by hand from the reference platform's formulas (ClipRewardEnv): sign(r);
# clamp(r, -1, 1); 5 tanh(r/5) for r >= 0 and 5 * 0.3 tanh(r/5) below.
RAW = [-30.0, -1.0, -0.5, 0.0, 0.25, 1.0, 5.0, 200.0]
CLIPPED = {
    "abs_one_sign": [-1.0, -1.0, -1.0, 0.0, 1.0, 1.0, 1.0, 1.0],
    "abs_one_clamp": [-1.0, -1.0, -0.5, 0.0, 0.25, 1.0, 1.0, 1.0],
    "soft_asymmetric": [-1.49998, -0.29606, -0.14950, 0.0, 0.24979, 0.98688, 3.80797, 5.0],
}


@pytest.mark.parametrize("method", sorted(CLIPPED))
def test_each_reward_clipping_method_gives_the_reference_formulas_values(method):
    got = clip_rewards(np.array(RAW, np.float32), method)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, CLIPPED[method], atol=5e-5)


@pytest.mark.parametrize("method", sorted(CLIPPED))
def test_space_invaders_trains_on_rewards_clipped_by_the_method_chosen(method):
    """Space Invaders scores 5 to 30 a shot: each method's clip of them is what the step gives to train on."""
    env = make_vector_env(EnvConfig(id="ALE/SpaceInvaders-v5", clip_method=method), 2, seed=3)
    try:
        env.reset()
        rng = np.random.default_rng(0)
        seen = set()
        for _ in range(3000):
            step = env.step(rng.integers(0, env.num_actions, 2))
            np.testing.assert_allclose(step.rewards, clip_rewards(step.raw_rewards, method), rtol=1e-6)
            seen |= {float(r) for r in step.raw_rewards if r > 1}
            if len(seen) >= 2:
                break
        assert len(seen) >= 2, "random Space Invaders should hit two kinds of alien within 3000 steps"
        big = np.array(sorted(seen), np.float32)
        expected = {"abs_one_sign": 1.0, "abs_one_clamp": 1.0, "soft_asymmetric": 5 * np.tanh(big / 5)}[method]
        np.testing.assert_allclose(clip_rewards(big, method), expected, rtol=1e-6)
    finally:
        env.close()


def test_an_unknown_clipping_method_is_a_config_error_naming_the_choices():
    from zrl.config import load

    with pytest.raises(ConfigError, match="env.clip_method.*abs_one_sign.*abs_one_clamp.*soft_asymmetric"):
        load(None, ["env.clip_method=tanh"])


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


def test_atari_frames_come_in_colour_and_at_any_resolution():
    grey = make_vector_env(EnvConfig(id="ALE/Pong-v5", resolution=(60, 50)), 2, seed=0)
    colour = make_vector_env(EnvConfig(id="ALE/Pong-v5", resolution=(60, 50), grayscale=False), 2, seed=0)
    try:
        assert grey.frame_shape == (60, 50) and colour.frame_shape == (3, 60, 50)
        g, c = grey.reset(), colour.reset()
        assert g.shape == (2, 60, 50) and c.shape == (2, 3, 60, 50) and c.dtype == np.uint8 and c.flags.c_contiguous
        step = colour.step(np.zeros(2, np.int64))
        assert step.frames.shape == (2, 3, 60, 50)
        # Pong's colour: the three channels differ (a grey frame copied thrice would not), and their luminance
        # is the grey frame's, to ale-py's rounding
        assert not np.array_equal(c[:, 0], c[:, 1])
        luminance = (0.299 * c[:, 0] + 0.587 * c[:, 1] + 0.114 * c[:, 2]).astype(np.float32)
        assert np.abs(luminance - g.astype(np.float32)).mean() < 2.0
    finally:
        grey.close()
        colour.close()
    assert probe(EnvConfig(id="ALE/Breakout-v5", grayscale=False, resolution=(100, 80))).frame_shape == (3, 100, 80)
