"""Config: defaults documented, precedence, and every mistake named before anything starts."""

from __future__ import annotations

import dataclasses
import tomllib
from pathlib import Path

import pytest

from zrl import config
from zrl.config import ConfigError

REPO = Path(__file__).resolve().parents[1]


def test_defaults_toml_is_the_generated_one_and_documents_every_key():
    text = (REPO / "config" / "defaults.toml").read_text()
    assert text == config.defaults_toml(), "regenerate: python -m zrl.config > config/defaults.toml"
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if "=" in line and not line.startswith("#"):
            assert lines[i - 1].startswith("# ") and len(lines[i - 1]) > 10, f"undocumented key: {line}"
    assert config.load(REPO / "config" / "defaults.toml") == config.Config()


@pytest.mark.parametrize("name", ["pong", "breakout", "cartpole", "smoke", "defaults"])
def test_shipped_configs_load(name):
    cfg = config.load(REPO / "config" / f"{name}.toml")
    assert cfg.learner.batch_size > 0


def test_names_scripts_rely_on_exist():
    cfg = config.Config()
    for dotted in ["run.results_dir", "run.max_env_frames", "run.seed", "env.id", "workers.count",
                   "workers.envs_per_worker", "learner.batch_size", "learner.unroll_length", "learner.device",
                   "transport.bind_host"]:
        section, key = dotted.split(".")
        assert hasattr(getattr(cfg, section), key), dotted


def test_precedence_option_over_set_over_file_over_defaults(tmp_path):
    run = tmp_path / "run.toml"
    run.write_text("[workers]\ncount = 3\nenvs_per_worker = 5\n[learner]\nbatch_size = 8\n")
    cfg = config.load(run)
    assert (cfg.workers.count, cfg.workers.envs_per_worker, cfg.learner.batch_size) == (3, 5, 8)
    cfg = config.load(run, ["workers.count=6", "learner.batch_size=16"])
    assert (cfg.workers.count, cfg.learner.batch_size) == (6, 16)
    cfg = config.load(run, ["workers.count=6"], {"workers.count": 7, "workers.envs_per_worker": None})
    assert (cfg.workers.count, cfg.workers.envs_per_worker) == (7, 5)
    assert config.load().learner.unroll_length == config.LearnerConfig().unroll_length


def test_resolved_config_round_trips(tmp_path):
    cfg = config.load(REPO / "config" / "cartpole.toml", ["model.mlp_hidden=[32, 16]", 'env.id="CartPole-v0"'])
    path = tmp_path / "config.toml"
    path.write_text(config.dumps(cfg))
    assert config.load(path) == cfg
    assert config.from_dict(tomllib.loads(path.read_text()), "x") == cfg
    assert dataclasses.replace(cfg.model) == cfg.model


@pytest.mark.parametrize(
    "text, expected",
    [
        ("[learner]\nbacth_size = 4\n", ["run.toml", "learner.bacth_size", "did you mean 'learner.batch_size'"]),
        ("[lerner]\nbatch_size = 4\n", ["run.toml", "unknown key 'lerner'", "learner"]),
        ("[learner]\nbatch_size = 'four'\n", ["run.toml", "learner.batch_size", "must be an integer"]),
        ("[learner]\nlearning_rate = true\n", ["learner.learning_rate", "must be a number"]),
        ("[learner]\nbatch_size = 128\n", ["run.toml", "replay[0].capacity", "batch_size 128"]),
        ("[learner]\noptimizer = 'adamw'\n", ["learner.optimizer", "rmsprop, adam", "did you mean 'adam'"]),
        ("[[replay]]\ntype = 'queue'\ncapacity = 64\nsample_ratio = 0.5\n", ["replay", "sum to 0.5"]),
        ("[[replay]]\ntype = 'elite'\ncapacity = 64\nsample_ratio = 1.0\n", ["replay[0].type", "queue"]),
        ("[transport]\nbind_host = '0.0.0.0'\n", ["transport.bind_host", "CurveZMQ"]),
        ("[workers]\ncount = 0\n", ["workers.count", "must be > 0"]),
        ("[learner]\npublish_every = 4\n", ["replay[0].capacity", "learner would starve"]),
        ("[workers]\nproduce_ratio = 0.5\n", ["workers.produce_ratio", "starve the learner"]),
        ("[learner\nbatch_size = 4\n", ["run.toml", "not valid TOML"]),
    ],
)
def test_mistakes_name_the_file_and_key(tmp_path, text, expected):
    run = tmp_path / "run.toml"
    run.write_text(text)
    with pytest.raises(ConfigError) as err:
        config.load(run)
    for part in expected:
        assert part in str(err.value), (part, str(err.value))


def test_set_and_option_mistakes_name_their_source():
    with pytest.raises(ConfigError, match=r"--set learner.batch_size=x: learner.batch_size = 'x' must be an integer"):
        config.load(None, ["learner.batch_size=x"])
    with pytest.raises(ConfigError, match="expected section.key=value"):
        config.load(None, ["learner.batch_size"])
    with pytest.raises(ConfigError, match="--workers"):
        config.load(None, [], {"workers.count": -1})
    with pytest.raises(ConfigError, match="no such config file"):
        config.load("does/not/exist.toml")
