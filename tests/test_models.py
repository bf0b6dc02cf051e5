"""The networks' feature heads: model.feature_layer (the reference platform's use_additional_scaling_FC_layer)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from conftest import REPO, csv_rows, refused, run_command

from zrl.config import ConfigError, ModelConfig
from zrl.models import build_model, check_feature_layer

CARTPOLE = str(REPO / "config" / "cartpole.toml")


def _parameters(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


@pytest.mark.unit
@pytest.mark.parametrize("frame_shape, kind", [((84, 84), "atari_small"), ((4,), "mlp")])
def test_without_a_feature_layer_the_features_are_the_hidden_layer(frame_shape, kind):
    cfg = ModelConfig(kind=kind, hidden_size=32, mlp_hidden=(16, 32), feature_size=32)
    dtype = "|u1" if kind != "mlp" else "<f4"
    with_layer = build_model(cfg, frame_shape, dtype, 4, 3)
    without = build_model(dataclasses.replace(cfg, feature_layer=False), frame_shape, dtype, 4, 3)
    assert _parameters(with_layer) - _parameters(without) == 32 * 32 + 32  # the layer's weights and biases
    obs = torch.from_numpy(np.random.default_rng(0).integers(0, 255, (5, 4, *frame_shape)).astype(np.dtype(dtype)))
    hidden = {}
    torso = without.torso
    torso.register_forward_hook(lambda module, args, out: hidden.update(out=out))
    out = without(obs, with_features=True)
    assert out.features.shape == (5, 32)
    torch.testing.assert_close(out.features, hidden["out"].reshape(5, 32))


@pytest.mark.unit
def test_features_without_a_layer_must_have_the_hidden_layers_width():
    cfg = ModelConfig(kind="atari_small", hidden_size=256, feature_size=512, feature_layer=False)
    with pytest.raises(ConfigError, match=r"model.feature_size: 512.*model.hidden_size = 256.*feature_size = 256"):
        check_feature_layer(cfg, "atari_small")
    with pytest.raises(ConfigError, match=r"mlp_hidden's last width = 64"):
        check_feature_layer(dataclasses.replace(cfg, mlp_hidden=(64, 64)), "mlp")
    check_feature_layer(dataclasses.replace(cfg, feature_size=256), "atari_small")
    with pytest.raises(ConfigError, match="model.feature_size: 512") as refused:
        build_model(cfg, (84, 84), "|u1", 4, 3)
    assert refused.value.key == "model.feature_size"


@pytest.mark.unit
def test_an_ape_x_network_has_no_feature_head_and_takes_any_feature_keys():
    from zrl import agents
    from zrl.config import load

    apex = str(REPO / "config" / "apex_iqn_pong.toml")
    cfg = load(apex, ["model.feature_layer=false", "model.feature_size=7"])
    model = agents.get("apex_iqn").build_model(cfg, (84, 84), "|u1", 6)
    assert model is not None


@pytest.mark.integration
def test_a_run_whose_features_cannot_be_its_hidden_layer_is_refused_before_anything_is_made(
    tmp_path, no_leaks, monkeypatch
):
    """zrl-launch's click command in this process (CliRunner; an exception would fail the test): exit code 2 and
    the key named, no results folder."""
    from zrl.cli.launch import launch_main

    monkeypatch.chdir(tmp_path)
    args = ["--config", CARTPOLE, "--set", "model.feature_layer=false", "--set", "model.feature_size=7"]
    assert "model.feature_size: 7" in refused(launch_main, *args)
    assert not (tmp_path / "results").exists() or not any((tmp_path / "results").iterdir())


@pytest.mark.unit
@pytest.mark.parametrize("frame_shape", [(60, 50), (3, 60, 50), (3, 84, 84)])
def test_conv_nets_take_colour_and_any_resolution_and_unrolls_equal_their_stacks(frame_shape):
    """The first fully connected layer follows the frame size; colour frames are 3 x stack channels; a batch of
    unrolls gives what their stacked observations give (episode starts blanked)."""
    from zrl.gather import stack_observations
    from zrl.models import CONV_LAYERS, conv_side

    torch.manual_seed(0)
    model = build_model(ModelConfig(kind="atari_small", hidden_size=32, feature_size=8), frame_shape, "|u1", 4, 5)
    first = model.torso[0]
    assert first.in_channels == 4 * (3 if len(frame_shape) == 3 else 1)
    convs_out = (
        CONV_LAYERS["atari_small"][1]
        * conv_side("atari_small", frame_shape[-2])
        * conv_side("atari_small", frame_shape[-1])
    )
    assert [m for m in model.torso if isinstance(m, torch.nn.Linear)][0].in_features == convs_out
    frames = torch.randint(0, 255, (2, 12, *frame_shape), dtype=torch.uint8)
    steps = torch.tensor([list(range(12)), [5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7, 8]])  # the second starts an episode
    got = model.forward_unrolls(frames, steps, with_features=True)
    stacks = stack_observations(frames, steps, 4)
    want = model(stacks.reshape(-1, *stacks.shape[2:]), with_features=True)
    torch.testing.assert_close(got.logits, want.logits, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(got.features, want.features, atol=1e-5, rtol=1e-4)


@pytest.mark.unit
@pytest.mark.parametrize("kind, smallest", [("atari", 36), ("atari_small", 20)])
def test_a_resolution_too_small_for_the_convolutions_names_the_smallest_that_fits(kind, smallest):
    from zrl import agents
    from zrl.config import load

    build_model(ModelConfig(kind=kind), (smallest, smallest), "|u1", 4, 5)  # the smallest fits
    with pytest.raises(
        ConfigError, match=rf"env.resolution: \[{smallest - 1}, {smallest}\] is too small.*\[{smallest}, {smallest}\]"
    ):
        build_model(ModelConfig(kind=kind), (3, smallest - 1, smallest), "|u1", 4, 5)
    apex = load(str(REPO / "config" / "apex_iqn_pong.toml"), [f'model.kind="{kind}"'])
    with pytest.raises(ConfigError, match="env.resolution"):
        agents.get("apex_iqn").build_model(apex, (smallest - 1, smallest - 1), "|u1", 6)


@pytest.mark.integration
def test_colour_with_a_frame_stack_the_rings_cannot_hold_is_refused_before_anything_starts():
    """Two ways a colour run's frames do not fit: ring slots too few for an unroll and its stack (the config's
    check), and rings whose colour slots do not fit /dev/shm (the launcher's, before the run folder is made):
    each a ConfigError naming the key and what would fit."""
    from zrl.config import load
    from zrl.envs import probe
    from zrl.launch.checks import check_shm_room

    colour = ["env.grayscale=false", "env.resolution=[64, 48]", "env.frame_stack=8"]
    with pytest.raises(ConfigError, match=r"workers.ring_slots: 30 slots cannot keep.*at least .*= 36"):
        load(REPO / "config" / "smoke.toml", [*colour, "workers.ring_slots=30"])
    cfg = load(REPO / "config" / "smoke.toml", [*colour, "workers.ring_slots=100000000"])
    spec = probe(cfg.env)
    assert spec.frame_shape == (3, 64, 48)
    with pytest.raises(ConfigError, match=r"workers.ring_slots: the rings need .* env.grayscale: 9216 bytes each now"):
        check_shm_room(cfg, spec)


@pytest.mark.e2e
@pytest.mark.background
def test_colour_frames_at_another_resolution_train_through_the_rings_and_gather(tmp_path, no_leaks):
    """V-trace's unrolls of colour frames (Ape-X's transitions in colour: tests/test_apex.py's Pong run)."""
    budget = 30_000
    sets = [
        "env.grayscale=false",
        "env.resolution=[64, 48]",
        f"run.max_env_frames={budget}",
        "workers.envs_per_worker=4",
    ]
    done = run_command(
        "zrl-launch", "--config", str(REPO / "config" / "pong.toml"), *(x for s in sets for x in ("--set", s)), "--quiet",
        cwd=tmp_path, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    (folder,) = (tmp_path / "results").iterdir()
    rows = csv_rows(folder / "metrics.csv")
    assert int(rows[-1]["env_frames"]) >= budget and int(rows[-1]["learner_step"]) > 0
    from zrl.config import load

    stored = load(folder / "config.toml", (), stored=True)
    assert stored.env.resolution == (64, 48) and not stored.env.grayscale
    # Pong's own settings lay under pong.toml, but for the budget set here; the log says which, config.toml keeps them
    said = "this run takes zrl's settings for vtrace on ALE/Pong-v5 (learner.learning_rate, learner.entropy_"
    assert said in (folder / "zrl.log").read_text()
    assert (stored.learner.learning_rate, stored.learner.entropy_decay_frames) == (0.0012, 5_000_000)
