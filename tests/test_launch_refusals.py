"""zrl-launch's refusals of bad input, run in the test process through click's CliRunner (conftest.refused): exit
code 2, one line on stderr naming the file, key or what would be valid, no traceback, and nothing made (no results
folder, no process left, no signal handler). A refusal that comes after zrl-launch started its fork server
(zrl/forkserver.py: once the config has loaded) stops it, with everything it started, so none needs a run; tests/test_e2e.py runs the installed command on the first of BAD_INPUT."""

from __future__ import annotations

import pytest
from conftest import REPO, refused

from zrl.cli.launch import launch_main

pytestmark = pytest.mark.integration

SMOKE = REPO / "config" / "smoke.toml"

BAD_INPUT = [
    (["--set", "learner.bacth_size=4"], "did you mean 'learner.batch_size'"),
    (["--set", "learner.batch_size=four"], "learner.batch_size"),
    (["--replay", '[{"type": "standard", "capacity": 2, "sample_ratio": 1}]'], "replay[0].capacity"),
    (["--replay", '[{"type": "custom", "capacity": 8, "sample_ratio": 1}]'], "needs sample_strategy"),
    (["--config", "missing.toml"], "missing.toml: no such config file"),
    (["--set", 'env.id="ALE/Pongg-v5"'], "env.id"),
    (["--workers", "0"], "--workers"),
    # 3136 x 6000 weights in the Nature network's dense layer at 84 x 84: more than one weights message carries
    (
        ["--set", 'model.kind="atari"', "--set", "model.hidden_size=6000", "--set", "env.resolution=[84, 84]"],
        "model: the network has",
    ),
]


@pytest.mark.parametrize("args, expected", BAD_INPUT)
def test_bad_input_exits_2_before_anything_is_created(tmp_path, monkeypatch, no_leaks, args, expected):
    monkeypatch.chdir(tmp_path)
    base = [] if "--config" in args else ["--config", SMOKE]
    assert expected in refused(launch_main, *base, *args)
    assert not (tmp_path / "results").exists()


def test_rings_larger_than_dev_shm_are_refused_before_a_run_folder_is_made(tmp_path, monkeypatch, no_leaks):
    monkeypatch.chdir(tmp_path)
    err = refused(launch_main, "--config", SMOKE, "--set", "workers.ring_slots=10000000")
    assert "the rings need" in err and "/dev/shm" in err
    assert not (tmp_path / "results").exists()  # no run folder left behind, nor the results folder


def test_a_bad_namespace_is_a_usage_error(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ZRL_NAMESPACE", "two_words")
    err = refused(launch_main, "--config", SMOKE)
    assert "ZRL_NAMESPACE='two_words'" in err and "letters and digits" in err
    assert not (tmp_path / "results").exists()


def test_bad_config_file_names_the_file(tmp_path, monkeypatch, no_leaks):
    monkeypatch.chdir(tmp_path)
    bad = tmp_path / "bad.toml"
    bad.write_text("[learner]\nbatch_size = 4\nunroll_lenght = 10\n")
    err = refused(launch_main, "--config", bad)
    assert str(bad) in err and "learner.unroll_lenght" in err and "unroll_length" in err
    assert not (tmp_path / "results").exists()
