"""Training-time SABER scores: the return after 5 minutes, after 30 minutes, and uncapped."""

from __future__ import annotations

import numpy as np
import pytest

from zrl.scores import SABER_5_MIN_FRAMES, SaberEpisodes

pytestmark = pytest.mark.unit


def test_scores_at_the_caps_and_uncapped():
    saber = SaberEpisodes(2)
    step_frames = 4
    steps_5 = SABER_5_MIN_FRAMES // step_frames  # 4,500 steps of 4 frames
    ended = []
    for t in range(200):
        ended += saber.step(np.array([1.0, 1.0]), step_frames, np.array([False, t == 99]))
    # env 1 ended after 100 steps, long before 5 minutes: its whole return at every cap
    assert ended == [(1, 100.0, 100.0, 100.0, 400)]
    saber2 = SaberEpisodes(1)
    for t in range(7 * steps_5):  # 35 minutes of play, a point a step
        out = saber2.step(np.array([1.0]), step_frames, np.array([t == 7 * steps_5 - 1]))
    (env, at_5, at_30, total, frames) = out[0]
    assert (at_5, at_30, total) == (steps_5, 6 * steps_5, 7 * steps_5)  # rewards of the steps up to each cap
    assert frames == 7 * SABER_5_MIN_FRAMES


def test_a_step_that_straddles_a_cap_counts_toward_the_uncapped_score_only():
    saber = SaberEpisodes(1)
    frames_per_step = 7  # 18,000 is not a multiple of 7: step 2572 runs from frame 17,997 to 18,004
    steps = SABER_5_MIN_FRAMES // frames_per_step + 1  # 2572 steps reach past the cap
    out = []
    for t in range(steps + 1):
        out += saber.step(np.array([1.0]), frames_per_step, np.array([t == steps]))
    (_, at_5, _, total, _) = out[0]
    assert at_5 == SABER_5_MIN_FRAMES // frames_per_step  # 2571 steps ended within 5 minutes
    assert total == steps + 1
