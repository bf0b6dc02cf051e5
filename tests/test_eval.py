"""zrl-eval on small real checkpoints and real ALE games: every protocol's report, sticky actions really on,
the SABER no-reward rule, the same results for the same seed, and the minimal-to-full action mapping."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import REPO, refused, run_command

from zrl import checkpoint, evaluate, scores
from zrl.config import load, to_dict
from zrl.envs import make_vector_env, probe
from zrl.models import build_model


def _checkpoint(folder: Path, env_id: str, always: int | None = None) -> Path:
    """A checkpoint of an untrained Nature CNN for ``env_id`` (in a run-like folder); ``always`` makes its
    policy pick that action index every time."""
    cfg = load(REPO / "config" / "smoke.toml", [f'env.id="{env_id}"'])
    spec = probe(cfg.env)
    torch.manual_seed(0)
    model = build_model(cfg.model, spec.frame_shape, spec.frame_dtype, cfg.env.frame_stack, spec.num_actions)
    if always is not None:
        with torch.no_grad():
            model.heads.policy.weight.zero_()
            model.heads.policy.bias.fill_(-100.0)
            model.heads.policy.bias[always] = 100.0
    (folder / "checkpoints").mkdir(parents=True, exist_ok=True)
    return checkpoint.save(
        folder / "checkpoints" / checkpoint.PATTERN.format(step=1),
        {"model": model.state_dict(), "learner_step": 1, "env_frames": 0, "config": to_dict(cfg)},
    )


@pytest.fixture(scope="module")
def pong(tmp_path_factory) -> Path:
    return _checkpoint(tmp_path_factory.mktemp("pong_run"), "ALE/Pong-v5")


FIELDS = {
    "checkpoint",
    "sha256",
    "learner_step",
    "env_id",
    "protocol",
    "episodes",
    "seed",
    "workers",
    "action_rule",
    "score",
    "reference_scores",
    "human_normalised_mean",
    "reference",
    "per_episode",
}
STATS = {"mean", "median", "min", "max", "std", "ci95_low", "ci95_high"}


@pytest.mark.integration
@pytest.mark.parametrize("protocol", evaluate.PROTOCOLS)
def test_every_protocol_writes_every_field(pong, protocol):
    report = evaluate.evaluate(str(pong), episodes=1, protocol=protocol, seed=5, progress=lambda _: None)
    assert FIELDS <= set(report) and STATS == set(report["score"])
    assert report["reference"] == dict(zip(("random", "human", "record"), scores.SCORES["pong"]))
    assert report["human_normalised_mean"] == pytest.approx((report["score"]["mean"] + 21) / 36)
    episode = report["per_episode"][0]
    assert -21 <= episode["score"] <= 21 and episode["frames"] > 0
    if protocol == "saber":
        assert STATS == set(report["score_5min"]) == set(report["score_30min"])
        assert report["record_normalised_mean"] == pytest.approx((report["score"]["mean"] + 21) / 42)
        assert episode["score_5min"] <= 21 and episode["frames"] > 0
    written = json.loads(Path(report["files"][0]).read_text())
    assert written["protocol"] == protocol and written["per_episode"] == report["per_episode"]
    assert Path(report["files"][0]).parent == pong.parent.parent / "eval"


@pytest.mark.integration
def test_the_same_seed_gives_the_same_results_on_any_number_of_workers(pong):
    one = evaluate.evaluate(str(pong), episodes=2, protocol="machado", seed=11, workers=1, progress=lambda _: None)
    two = evaluate.evaluate(str(pong), episodes=2, protocol="machado", seed=11, workers=2, progress=lambda _: None)
    assert one["per_episode"] == two["per_episode"]


def _frames(env_cfg, seed: int, actions: np.ndarray) -> np.ndarray:
    env = make_vector_env(env_cfg, 1, seed)
    env.reset()
    seen = np.stack([env.step(actions[t : t + 1]).frames[0] for t in range(len(actions))])
    env.close()
    return seen


@pytest.mark.integration
def test_sticky_actions_are_really_on():
    cfg = load(REPO / "config" / "smoke.toml")
    sticky, _ = evaluate.protocol_env(cfg.env, "machado")
    assert sticky.sticky_action_prob == 0.25 and sticky.full_action_space
    plain = sticky.__class__(**{**sticky.__dict__, "sticky_action_prob": 0.0})
    actions = np.random.default_rng(0).choice([0, 3, 4], size=400).astype(np.int64)  # NOOP, RIGHT, LEFT
    a, b = _frames(plain, 7, actions), _frames(plain, 7, actions)
    assert np.array_equal(a, b)  # p = 0 repeats itself
    assert not np.array_equal(_frames(sticky, 7, actions), a)  # p = 0.25 changes the trajectory


@pytest.mark.integration
def test_saber_ends_an_episode_after_five_minutes_without_reward(tmp_path):
    # Breakout with a policy that never presses FIRE: after the first lost life the ball never comes back.
    ckpt = _checkpoint(tmp_path / "run", "ALE/Breakout-v5", always=0)
    report = evaluate.evaluate(str(ckpt), episodes=1, protocol="saber", seed=0, progress=lambda _: None)
    episode = report["per_episode"][0]
    assert episode["ended_by"] == "no reward for 5 minutes"
    assert evaluate.FRAMES_5_MIN <= episode["frames"] < 4 * evaluate.FRAMES_5_MIN


@pytest.mark.integration
def test_a_minimal_set_policy_acts_through_the_games_action_ids():
    assert evaluate.minimal_actions("pong").tolist() == [0, 1, 3, 4, 11, 12]  # NOOP FIRE RIGHT LEFT RIGHTFIRE LEFTFIRE
    assert len(evaluate.minimal_actions("space_invaders")) == 6
    assert evaluate.minimal_actions("montezuma_revenge").tolist() == list(range(18))


@pytest.mark.unit
def test_reference_scores_cover_the_57_games_with_their_source():
    assert len(scores.SCORES) == 57 and "Hafner et al. 2021" in scores.SOURCE
    import ale_py

    assert set(scores.SCORES) <= set(ale_py.roms.get_all_rom_ids())
    assert scores.human_normalised("breakout", 30) == pytest.approx(1.0)
    assert scores.record_normalised("surround", 1.0) is None


@pytest.mark.e2e
def test_zrl_eval_cli_and_compare(pong, tmp_path, monkeypatch):
    """The real zrl-eval on a run and --compare of it with itself; its refusals through its click command."""

    from zrl.cli.eval import eval_main

    run = pong.parent.parent
    result = run_command(
        "zrl-eval",
        run,
        "--episodes",
        "2",
        "--protocol",
        "deepmind",
        "--workers",
        "2",
        "--greedy",
        cwd=tmp_path,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "human-normalised mean" in result.stdout and "wrote" in result.stdout
    compared = run_command("zrl-eval", "--compare", run, run, "--protocol", "deepmind", cwd=tmp_path)
    assert compared.returncode == 0 and "B - A: +0.0" in compared.stdout, compared.stderr
    monkeypatch.chdir(tmp_path)
    for args, reason in [  # refused by the command in this process (CliRunner): an exception would fail the test
        (["nowhere.pt"], "no such checkpoint file"),
        (["--compare", run, tmp_path], "no deepmind evaluation"),
        ([run, "--protocol", "atari"], "Invalid value for '--protocol'"),
    ]:
        assert reason in refused(eval_main, *args, one_line="Invalid value" not in reason)


@pytest.mark.integration
@pytest.mark.parametrize("suffix", [".mp4", ".gif"])
def test_video_records_the_first_episode(pong, tmp_path, suffix):
    import imageio.v2 as imageio

    out = tmp_path / f"first{suffix}"
    report = evaluate.evaluate(
        str(pong), episodes=1, protocol="deepmind", seed=2, video=str(out), progress=lambda _: None
    )
    frames = imageio.mimread(out, memtest=False)
    steps = report["per_episode"][0]["frames"] // 4
    height, width = load(REPO / "config" / "smoke.toml").env.resolution  # the checkpoint's frames
    want = (height * evaluate.VIDEO_SCALE, width * evaluate.VIDEO_SCALE)
    if suffix == ".mp4":  # its writer rounds each side up to a whole 16-pixel macro block
        want = tuple(-(-side // 16) * 16 for side in want)
    assert frames[0].shape[:2] == want
    if suffix == ".mp4":
        assert len(frames) == steps + 1
    else:  # a GIF writer merges identical consecutive frames into one longer frame
        assert steps // 2 < len(frames) <= steps + 1
    assert report["video"] == str(out.resolve())


@pytest.mark.integration
def test_render_without_a_display_says_so(pong, tmp_path, monkeypatch):
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    with pytest.raises(evaluate.ConfigError, match="no display"):
        evaluate.evaluate(str(pong), episodes=1, render=True, progress=lambda _: None)
    with pytest.raises(evaluate.ConfigError, match="give a .mp4 or .gif file"):
        evaluate.evaluate(str(pong), episodes=1, video=str(tmp_path / "x.avi"), progress=lambda _: None)
