"""The networks' feature heads: model.feature_layer (the reference platform's use_additional_scaling_FC_layer)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from conftest import REPO, run_command

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


@pytest.mark.e2e
def test_a_run_whose_features_cannot_be_its_hidden_layer_is_refused_before_anything_is_made(tmp_path, no_leaks):
    done = run_command(
        "zrl-launch", "--config", CARTPOLE, "--set", "model.feature_layer=false", "--set", "model.feature_size=7",
        cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "model.feature_size: 7" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "results").exists() or not any((tmp_path / "results").iterdir())
