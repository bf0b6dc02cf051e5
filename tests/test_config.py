"""Config: defaults documented, precedence, and every mistake named before anything starts."""

from __future__ import annotations

import dataclasses
import tomllib
from pathlib import Path
from typing import Annotated

import msgspec
import pytest

from zrl import config, envs
from zrl.config import ConfigError, ReplayConfig
from zrl.optim import lr_factor

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[1]


def test_defaults_toml_is_the_generated_one_and_documents_every_key():
    text = (REPO / "config" / "defaults.toml").read_text()
    assert text == config.defaults_toml(), "regenerate: python -m zrl.config > config/defaults.toml"
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if "=" in line and not line.startswith("#"):
            assert lines[i - 1].startswith("# ") and len(lines[i - 1]) > 10, f"undocumented key: {line}"
    assert config.load(REPO / "config" / "defaults.toml") == config.Config()


@pytest.mark.parametrize("name", ["pong", "breakout", "breakout_elite", "cartpole", "smoke", "defaults"])
def test_shipped_configs_load(name):
    cfg = config.load(REPO / "config" / f"{name}.toml")
    assert cfg.learner.batch_size > 0


def test_the_plain_zrl_launch_and_pong_toml_are_the_atari_defaults_with_pongs_settings_under_them():
    """zrl's settings for V-trace on Pong (zrl/config/games/vtrace/pong.toml) are its 5M-frame budget (over
    which the rate decays to 0), twice the rate, and the entropy weight falling to 0.001 over those 5M frames;
    every other key is the Atari defaults', so that Pong's curves measure those keys and nothing else. The plain
    zrl-launch (whose env is Pong) and config/pong.toml both run them; run.game_settings = false, the defaults."""
    plain, pong = config.load(), config.load(REPO / "config" / "pong.toml")
    assert plain == pong
    assert (pong.run.max_env_frames, pong.learner.learning_rate) == (5_000_000, 0.0012)
    assert (pong.learner.entropy_cost, pong.learner.entropy_cost_end) == (0.01, 0.001)
    assert pong.learner.entropy_decay_frames == pong.run.max_env_frames
    atari = config.load(REPO / "config" / "pong.toml", ["run.game_settings=false"])
    assert atari == dataclasses.replace(
        config.Config(), run=dataclasses.replace(config.Config().run, game_settings=False)
    )
    differ = {
        f"{name}.{key}"
        for name in ("run", "learner")
        for key, value in dataclasses.asdict(getattr(pong, name)).items()
        if value != dataclasses.asdict(getattr(atari, name))[key]
    }
    assert differ == {
        "run.max_env_frames",
        "learner.learning_rate",
        "learner.entropy_decay_frames",
        "run.game_settings",
    }
    assert "vtrace/pong.toml" in config.game_note(plain) and config.game_note(atari) is None


def test_a_games_settings_lie_under_the_run_file_and_only_for_their_game_and_agent(tmp_path):
    """The run file, --set and the options win over the game's file; Pong's v4 id reads it too; another game,
    another agent or a resumed run's stored config.toml (which holds every key it ran with) reads none."""
    path = tmp_path / "run.toml"
    path.write_text('[env]\nid = "PongNoFrameskip-v4"\n[learner]\nlearning_rate = 0.0005\n')
    cfg = config.load(path, ["run.max_env_frames=2000000"])
    assert (cfg.learner.learning_rate, cfg.run.max_env_frames, cfg.learner.entropy_decay_frames) == (
        0.0005,
        2_000_000,
        5_000_000,
    )
    atari = config.Config()
    for sets in (["env.id=ALE/Seaquest-v5"], ["algo=impact"], ["env.id=CartPole-v1"]):
        other = config.load(None, sets)
        assert (other.run.max_env_frames, other.learner.learning_rate) == (
            atari.run.max_env_frames,
            atari.learner.learning_rate,
        ), sets
        assert config.game_note(other) is None
    # a run folder's config.toml from before learner.entropy_decay_frames: resumed, it keeps no decay
    path.write_text('[env]\nid = "ALE/Pong-v5"\n[learner]\nlearning_rate = 0.0006\n')
    stored = config.load(path, stored=True)
    assert (stored.learner.entropy_decay_frames, stored.run.max_env_frames) == (0, atari.run.max_env_frames)


def test_every_shipped_game_file_loads_under_its_agent_and_a_bad_one_is_named(tmp_path, monkeypatch):
    from zrl.config import per_game

    files = sorted(per_game.GAMES.glob("*/*.toml"))
    assert len(files) >= 2, "zrl ships settings for V-trace on Pong and Breakout"
    for path in files:
        algo, game = path.parent.name, "".join(part.capitalize() for part in path.stem.split("_"))
        cfg = config.load(None, [f'algo="{algo}"', f'env.id="ALE/{game}-v5"'])
        assert config.game_file(cfg.algo, cfg.env.id) == path
        for section, body in tomllib.loads(path.read_text()).items():
            for key, value in body.items():
                assert getattr(getattr(cfg, section), key) == value, f"{path}: {section}.{key}"
    (tmp_path / "vtrace").mkdir()
    (tmp_path / "vtrace" / "pong.toml").write_text("[learner]\nlearning_rate = -1.0\n")
    monkeypatch.setattr(per_game, "GAMES", tmp_path)
    with pytest.raises(ConfigError, match=r"zrl's settings for ALE/Pong-v5 \(.*pong\.toml\).*learning_rate"):
        config.load()
    (tmp_path / "vtrace" / "pong.toml").write_text('[env]\nid = "ALE/Breakout-v5"\n')
    with pytest.raises(ConfigError, match=r"pong\.toml\): env\.id cannot be a game's setting"):
        config.load()
    (tmp_path / "vtrace" / "pong.toml").write_text('algo = "impact"\n[run]\ngame_settings = false\n')
    with pytest.raises(ConfigError, match=r"algo, run\.game_settings cannot be a game's setting"):
        config.load()


@pytest.mark.parametrize(
    ("env_id", "game"),
    [
        ("ALE/Pong-v5", "pong"),
        ("PongNoFrameskip-v4", "pong"),
        ("Pong-v4", "pong"),
        ("ALE/MontezumaRevenge-v5", "montezuma_revenge"),
        ("CartPole-v1", None),
        ("CartPole-v0", "cart_pole"),  # Atari-shaped; whether ale-py has it is zrl.envs.atari_rom's question
        ("my_pkg.envs:MyEnv-v0", None),
        ("ALE/Pong-v5/../../x", None),
    ],
)
def test_the_game_of_an_id(env_id, game):
    assert config.atari_game(env_id) == game


def test_names_scripts_rely_on_exist():
    cfg = config.Config()
    for dotted in [
        "run.results_dir",
        "run.max_env_frames",
        "run.seed",
        "env.id",
        "workers.count",
        "workers.envs_per_worker",
        "learner.batch_size",
        "learner.unroll_length",
        "learner.device",
        "transport.bind_host",
    ]:
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
        (
            "[learner]\nbatch_size = 128\n[[replay]]\ntype = 'uniform'\ncapacity = 64\nsample_ratio = 1.0\n",
            ["run.toml", "replay[0].capacity", "batch_size 128"],
        ),
        ("[learner]\noptimizer = 'adamw'\n", ["learner.optimizer", "rmsprop, rmsprop_tf, adam", "did you mean 'adam'"]),
        (
            "[learner]\nunroll_conv = 'stack'\n",
            ["learner.unroll_conv", "auto, conv3d, stacks", "did you mean 'stacks'"],
        ),
        ("[[replay]]\ntype = 'queue'\ncapacity = 64\nsample_ratio = 0.5\n", ["replay", "sum to 0.5"]),
        ("[[replay]]\ntype = 'elit'\ncapacity = 64\nsample_ratio = 1.0\n", ["replay[0].type", "did you mean 'elite'"]),
        (
            "[[replay]]\ntype = 'queue'\ncapacity = 64\nsample_ratio = 1.0\nstrategy = 2\n",
            ["replay[0].strategy applies only to elite and attentive replays; this one is queue"],
        ),
        (
            "[[replay]]\ntype = 'elite'\ncapacity = 64\nsample_ratio = 1.0\nstrategy = 5\n",
            ["replay[0].strategy", "1, 2, 3, 4"],
        ),
        (
            "[[replay]]\ntype = 'elite'\ncapacity = 64\nsample_ratio = 1.0\ndist_function = 'l2'\n",
            ["replay[0].dist_function", "ln_norm, cos_dist, kl_div"],
        ),
        (
            "[[replay]]\ntype = 'attentive'\ncapacity = 64\nsample_ratio = 1.0\nlambda_batch_multiplier = 0.5\n",
            ["replay[0].lambda_batch_multiplier", "must be >= 1 (1 samples uniformly), got 0.5"],
        ),
        (
            "[workers]\nnice = 20\n",
            ["workers.nice", "must be between 0 and 19 (the workers only lower their priority)"],
        ),
        ("[run]\nmax_seconds = -5\n", ["run.max_seconds", "must be >= 0 (0: no limit), got -5"]),
        (
            "[[replay]]\ntype = 'queue'\ncapacity = 64\nsample_ratio = 0.25\n[[replay]]\ntype = 'uniform'\n"
            "capacity = 64\nsample_ratio = 0.75\n[learner]\nbatch_size = 6\n",
            ["replay[0].sample_ratio", "1.5"],
        ),
        ("[learner]\nclip_rho_threshold = 2.0\n", ["learner.clip_rho_threshold is no longer a key", "vtrace.clip_rho"]),
        ("[vtrace]\nclear_policy_kl = 'forward'\n", ["vtrace.clear_policy_kl", "mu_pi, pi_mu"]),
        ("[vtrace]\nlaser_kl_threshold = 0\n", ["vtrace.laser_kl_threshold", "must be > 0"]),
        (  # a section's own names hold whatever the algo
            "algo = 'apex_iqn'\n[vtrace]\nclear_value_loss = 'l1'\n[[replay]]\ntype = 'prioritized'\ncapacity = 100000\n",
            ["vtrace.clear_value_loss", "squared, l2_norm"],
        ),
        ("[algo]\nlaser = true\n", ["[algo] is now [vtrace]", 'algo = "vtrace" or "impact" or "apex_iqn"']),
        ("algo = 'dqn'\n", ["algo", "vtrace, impact, apex_iqn"]),
        ("[[replay]]\ntype = 'prioritized'\ncapacity = 1000\n", ["replay[0].type", 'needs algo = "apex_iqn"']),
        ("algo = 'apex_iqn'\n", ["replay", 'exactly one [[replay]], of type "prioritized"']),
        (
            "algo = 'apex_iqn'\n[apex]\nhead = 'qr'\n[[replay]]\ntype = 'prioritized'\ncapacity = 100000\n",
            ["apex.head", "iqn, c51"],
        ),
        (
            "algo = 'apex_iqn'\n[learner]\nreplay_ratio = 0\n[[replay]]\ntype = 'prioritized'\ncapacity = 1000\n",
            ["apex.learn_start", "more than the replay holds (1000)"],
        ),
        (
            "algo = 'apex_iqn'\n[apex]\nstate_size = -1\n[[replay]]\ntype = 'prioritized'\ncapacity = 100000\n",
            ["apex.state_size", "must be >= 0"],
        ),
        ("[transport]\nbind_host = '0.0.0.0'\n", ["transport.bind_host", "CurveZMQ"]),
        ("[workers]\nremote = 8\n[transport]\nmax_connections = 8\n", ["transport.max_connections", "keep out"]),
        ("[workers]\ncount = 0\n", ["workers.count", "must be > 0"]),
        ("[workers]\nproduce_ratio = 0.5\n", ["workers.produce_ratio", "starve the learner"]),
        ("[learner]\nreplay_ratio = -1\n", ["learner.replay_ratio", "must be >= 0"]),
        (
            "[learner]\nreplay_ratio = 1.5\n[[replay]]\ntype = 'queue'\ncapacity = 8\nsample_ratio = 0.5\n"
            "[[replay]]\ntype = 'uniform'\ncapacity = 100\nsample_ratio = 0.5\n",
            ["learner.replay_ratio", "replay[0]", "0.75 times", "at least 1 / sample_ratio = 2"],
        ),
        (
            "algo = 'apex_iqn'\n[learner]\nreplay_ratio = 4\n[[replay]]\ntype = 'prioritized'\ncapacity = 100000\n",
            ["learner.replay_ratio", "apex.replay_ratio"],
        ),
        ("algo = 'impact'\n[vtrace]\nlaser = true\n", ["vtrace.laser", "impact"]),
        ("algo = 'impact'\n[impact]\nclip = 1.5\n", ["impact.clip", "< 1"]),
        ("algo = 'impact'\n[impact]\ntarget_update_steps = 0\n", ["impact.target_update_steps", "> 0"]),
        (
            "[run]\ndeterministic = true\n[learner]\nreplay_ratio = 2\n[[replay]]\ntype = 'queue'\n",
            ["learner.replay_ratio", "run.deterministic needs each unit trained on once"],
        ),
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


REFERENCE_ELITE = (
    '[{"type": "custom", "capacity": 1000, "sample_ratio": 0.5, "dist_function": "ln_norm", '
    '"sample_strategy": "elite_sampling", "lambda_batch_multiplier": 6, "alfa_annealing_factor": 2.0, '
    '"elite_sampling_strategy": "strategy4", "insert_strategy": "elite_insertion", "elite_batch_size": 10},'
    ' {"type": "queue", "capacity": 1, "sample_ratio": 0.5}]'
)


def test_the_reference_platforms_replay_json_maps_onto_replay_tables(tmp_path):
    cfg = config.load(None, [], {"replay": REFERENCE_ELITE})
    elite, queue = cfg.replay
    assert (elite.type, elite.capacity, elite.sample_ratio, elite.strategy) == ("elite", 1000, 0.5, 4)
    assert (elite.lambda_batch_multiplier, elite.alfa_annealing_factor) == (6.0, 2.0)
    assert elite.elite_insertion and elite.elite_batch_size == 10
    assert (queue.type, queue.capacity) == ("queue", 1)
    standard = config.load(None, ['replay=[{"type": "standard", "capacity": 1000, "sample_ratio": 1}]'])
    assert standard.replay[0].type == "uniform"
    attentive = config.load(
        None,
        [],
        {
            "replay": '[{"type": "custom", "capacity": 100, "sample_ratio": 1, '
            '"sample_strategy": "attentive_sampling", "dist_function": "cos_dist"}]'
        },
    )
    assert attentive.replay[0].type == "attentive" and attentive.replay[0].dist_function == "cos_dist"
    # the option replaces the run file's tables, and the resolved config round-trips
    path = tmp_path / "config.toml"
    path.write_text(config.dumps(cfg))
    assert config.load(path) == cfg
    assert config.load(REPO / "config" / "smoke.toml", [], {"replay": REFERENCE_ELITE}).replay == cfg.replay


def _custom(extra: str) -> str:
    return (
        '[{"type": "custom", "capacity": 1000, "sample_ratio": 0.5, "dist_function": "ln_norm", '
        f'"sample_strategy": "elite_sampling"{extra}}}, {{"type": "queue", "capacity": 1, "sample_ratio": 0.5}}]'
    )


def test_reference_json_takes_the_reference_schemas_defaults_and_truncates_lambda():
    """A custom entry that leaves out lambda and alfa gets the reference schema's 1 and 1.0 (uniform sampling),
    not zrl's [[replay]] defaults; lambda and p are read with int(), as the reference's Use(int) reads them."""
    bare = config.load(None, [], {"replay": _custom("")}).replay[0]
    assert (bare.type, bare.lambda_batch_multiplier, bare.alfa_annealing_factor) == ("elite", 1.0, 1.0)
    assert (bare.strategy, bare.p) == (3, 2.0)
    assert ReplayConfig().lambda_batch_multiplier == 6.0  # a [[replay]] table's own default is unchanged
    cut = config.load(None, [], {"replay": _custom(', "lambda_batch_multiplier": 6.9, "p": 2.5')}).replay[0]
    assert (cut.lambda_batch_multiplier, cut.p) == (6.0, 2.0)
    text = config.load(None, [], {"replay": _custom(', "lambda_batch_multiplier": "3"')}).replay[0]
    assert text.lambda_batch_multiplier == 3.0
    # zrl's own type keeps fractions
    own = '[{"type": "elite", "capacity": 1000, "sample_ratio": 1, "lambda_batch_multiplier": 2.5}]'
    assert config.load(None, [], {"replay": own}).replay[0].lambda_batch_multiplier == 2.5
    insert_only = (
        '[{"type": "custom", "capacity": 1000, "sample_ratio": 1, "insert_strategy": "elite_insertion", '
        '"lambda_batch_multiplier": 6}]'
    )
    assert config.load(None, [], {"replay": insert_only}).replay[0].lambda_batch_multiplier == 1.0
    with pytest.raises(ConfigError, match=r"replay\[0\].lambda_batch_multiplier = 'six' is not a whole number"):
        config.load(None, [], {"replay": _custom(', "lambda_batch_multiplier": "six"')})
    with pytest.raises(ConfigError, match=r"replay\[0\].lambda_batch_multiplier.*must be >= 1"):
        config.load(None, [], {"replay": _custom(', "lambda_batch_multiplier": 0.9')})


@pytest.mark.parametrize(
    "text, expected",
    [
        ("not json", ["option --replay", "not valid JSON"]),
        ('{"type": "queue"}', ["expected a JSON list of objects"]),
        ('[{"type": "standerd", "capacity": 10, "sample_ratio": 1}]', ["replay[0].type", "did you mean 'standard'"]),
        ('[{"type": "custom", "capacity": 10, "sample_ratio": 1}]', ["replay[0]", "needs sample_strategy"]),
        (
            '[{"type": "custom", "capacity": 10, "sample_ratio": 1, "sample_strategy": "elite"}]',
            ["replay[0].sample_strategy", "elite_sampling, attentive_sampling"],
        ),
        (
            '[{"type": "queue", "capacity": 10, "sample_ratio": 1, "lambda": 2}]',
            ["option --replay", "replay[0].lambda"],
        ),
        (
            '[{"type": "standard", "capacity": 100, "sample_ratio": 1, "sample_strategy": "elite_sampling"}]',
            ["replay[0].sample_strategy applies only to custom replays; this one is standard"],
        ),
        (
            '[{"type": "custom", "capacity": 2, "sample_ratio": 0.0625, "sample_strategy": "elite_sampling", '
            '"insert_strategy": "elite_insertion"}, {"type": "queue", "capacity": 1, "sample_ratio": 0.9375}]',
            ["replay[0].capacity", "workers.envs_per_worker 4", "elite insertion"],
        ),
        ('[{"type": "standard", "capacity": 100, "sample_ratio": 0.5}]', ["option --replay", "sum to 0.5"]),
    ],
)
def test_replay_json_mistakes_are_named(text, expected):
    with pytest.raises(ConfigError) as err:
        config.load(None, ["learner.batch_size=32"], {"replay": text, "workers.envs_per_worker": 4})
    for part in expected:
        assert part in str(err.value), (part, str(err.value))


def test_attentive_replay_takes_elite_insertion_too():
    cfg = config.load(
        None,
        [],
        {
            "replay": '[{"type": "custom", "capacity": 100, "sample_ratio": 1, '
            '"sample_strategy": "attentive_sampling", "insert_strategy": "elite_insertion"}]'
        },
    )
    assert cfg.replay[0].type == "attentive" and cfg.replay[0].elite_insertion


def test_learning_rate_decays_over_the_budget_counted_in_fresh_units():
    budget = ["run.max_env_frames=2560000", "learner.batch_size=32"]
    once = ["learner.replay_ratio=0"]
    queue_only = config.load(None, budget + once, {"replay": '[{"type": "queue", "capacity": 64, "sample_ratio": 1}]'})
    mixed = config.load(
        None,
        budget + once,
        {
            "replay": '[{"type": "queue", "capacity": 1, '
            '"sample_ratio": 0.5}, {"type": "uniform", "capacity": 100, "sample_ratio": 0.5}]'
        },
    )
    assert config.lr_decay_steps(queue_only, 4) == 1000  # 2.56M frames / (32 x 20 x 4)
    assert config.lr_decay_steps(mixed, 4) == 2000  # half of every batch is replayed: twice the steps
    assert config.lr_decay_steps(config.load(None, budget), 4) == 4000  # the defaults: each fresh unit 4 times
    assert config.lr_decay_steps(config.load(None, ["learner.lr_decay_steps=7"]), 4) == 7


def test_the_entropy_weight_moves_to_its_end_over_the_frames_asked_then_holds():
    # the defaults: 8 units of 20 steps of 4 frames, a quarter of them fresh: 160 frames played per learner step
    cfg = config.load(None, ["learner.entropy_decay_frames=1600000", "learner.entropy_cost_end=0.002"])
    assert config.entropy_cost(cfg, 4, 0) == pytest.approx(0.01)
    assert config.entropy_cost(cfg, 4, 5_000) == pytest.approx(0.006)
    assert config.entropy_cost(cfg, 4, 10_000) == pytest.approx(0.002)
    assert config.entropy_cost(cfg, 4, 50_000) == pytest.approx(0.002)
    once = config.load(None, ["learner.entropy_decay_frames=1600000", "learner.replay_ratio=0"])
    assert config.entropy_cost(once, 4, 5_000) == pytest.approx(0.001)  # each unit once: 640 frames per step
    held = config.load(None, ["learner.entropy_follows_lr=false", "run.game_settings=false"])  # the Atari defaults
    assert config.entropy_cost(held, 4, 10**6) == held.learner.entropy_cost
    late = config.load(None, ["learner.entropy_decay_frames=1600000", "learner.entropy_decay_start_frames=800000"])
    assert config.entropy_cost(late, 4, 2_500) == pytest.approx(0.01)  # 800k frames: held until here
    assert config.entropy_cost(late, 4, 10_000) == pytest.approx(0.0055)
    assert config.entropy_cost(late, 4, 15_000) == pytest.approx(0.001)
    with pytest.raises(ConfigError, match="entropy_decay_start_frames"):
        config.load(None, ["learner.entropy_decay_start_frames=800000", "run.game_settings=false"])


def test_the_entropy_weight_falls_in_step_with_the_learning_rate_when_it_follows_it():
    """The rate falling with power 2 over a 10M-frame budget (62,500 steps of 160 fresh frames): the entropy
    weight goes the same share of its way from 0.01 to 0.001; under multistep, lr_gamma's."""
    follows = ["learner.entropy_follows_lr=true", "learner.lr_decay_power=2", "learner.learning_rate=0.0012"]
    follows += ["run.game_settings=false"]  # the Atari defaults, without Pong's straight line
    cfg = config.load(None, [*follows, "run.max_env_frames=10000000"])
    steps = config.lr_decay_steps(cfg, 4)
    assert steps == 62_500 and config.entropy_cost(cfg, 4, 0) == pytest.approx(0.01)
    assert config.entropy_cost(cfg, 4, steps // 2) == pytest.approx(0.001 + 0.009 * 0.25)
    assert config.entropy_cost(cfg, 4, steps) == config.entropy_cost(cfg, 4, 10 * steps) == pytest.approx(0.001)
    assert config.entropy_cost(cfg, 4, steps // 2) == pytest.approx(
        0.001 + 0.009 * (cfg.learner.learning_rate * lr_factor(cfg.learner, steps)(steps // 2)) / 0.0012
    )
    multistep = ["learner.lr_schedule=multistep", "learner.lr_milestones=[100]", "learner.lr_gamma=0.5"]
    stepped = config.load(None, [*follows, *multistep])
    assert config.entropy_cost(stepped, 4, 99) == pytest.approx(0.01)
    assert config.entropy_cost(stepped, 4, 100) == pytest.approx(0.0055)
    line = config.load(None, [*follows, "learner.entropy_decay_frames=1600000"])  # its own straight line wins
    assert config.entropy_cost(line, 4, 5_000) == pytest.approx(0.0055)


def test_a_queue_holds_at_least_what_a_batch_and_a_weights_version_need():
    cfg = config.load(None, [], {"replay": '[{"type": "queue", "capacity": 1, "sample_ratio": 1}]'})
    assert config.queue_capacity(cfg, cfg.replay[0]) >= cfg.learner.batch_size * cfg.workers.produce_ratio
    big = config.load(None, ['replay=[{"type": "queue", "capacity": 500, "sample_ratio": 1}]'])
    assert config.queue_capacity(big, big.replay[0]) == 500


def test_deterministic_mode_needs_one_worker_one_queue_and_whole_unrolls_per_version():
    det = [
        "run.deterministic=true",
        "workers.count=1",
        "workers.envs_per_worker=4",
        "learner.batch_size=8",
        "learner.publish_every=1",
    ]
    with pytest.raises(ConfigError, match=r"replay: run.deterministic needs a single queue replay.*replay_ratio=0"):
        config.load(None, det)  # the defaults' queue and uniform replay: the error says what to give
    det += ['replay=[{"type": "queue", "capacity": 64, "sample_ratio": 1.0}]', "learner.replay_ratio=0"]
    cfg = config.load(None, det)
    assert config.unrolls_per_version(cfg) == 2  # exactly what one version trains on: 8 units / 4 envs
    with pytest.raises(ConfigError, match=r"workers.count: 2: run.deterministic needs a single worker"):
        config.load(None, det + ["workers.count=2"])
    with pytest.raises(ConfigError, match=r"workers.envs_per_worker: 3: .* learner.batch_size \(8\) to be a multiple"):
        config.load(None, det + ["workers.envs_per_worker=3"])
    elite = 'replay=[{"type": "queue", "capacity": 8, "sample_ratio": 0.5}, {"type": "elite", "capacity": 64, "sample_ratio": 0.5}]'
    with pytest.raises(ConfigError, match=r"replay: run.deterministic needs a single queue replay"):
        config.load(None, det + [elite])


def test_the_agent_is_named_by_the_top_level_algo_key(tmp_path):
    from zrl.config import dumps, from_dict, load, to_dict

    cfg = load(
        None,
        [
            "algo=apex_iqn",
            'replay=[{"type": "prioritized", "capacity": 100000, "sample_ratio": 1}]',
            "learner.replay_ratio=0",
            "apex.n_step=5",
        ],
    )
    assert cfg.algo == "apex_iqn" and cfg.apex.n_step == 5 and cfg.replay[0].type == "prioritized"
    path = tmp_path / "again.toml"
    path.write_text(dumps(cfg))
    assert path.read_text().splitlines()[1] == 'algo = "apex_iqn"'  # before any table, as TOML needs
    assert load(path) == cfg
    assert from_dict(to_dict(cfg), "checkpoint") == cfg


def test_a_config_saved_with_the_old_algo_section_still_loads_from_a_checkpoint():
    from zrl.config import from_dict, load, to_dict

    saved = to_dict(load(None, ["vtrace.laser=true"]))
    saved = {**{k: v for k, v in saved.items() if k not in ("algo", "vtrace")}, "algo": saved["vtrace"]}
    assert from_dict(saved, "checkpoint").vtrace.laser is True


def test_a_run_folder_config_written_with_the_old_algo_section_still_loads(tmp_path):
    from zrl.config import load

    path = tmp_path / "config.toml"
    path.write_text("[algo]\nlaser = true\n")
    assert load(path, stored=True).vtrace.laser is True
    with pytest.raises(ConfigError, match=r"\[algo\] is now \[vtrace\]"):
        load(path)  # a config a user writes gets the error that says what changed


def test_a_stored_config_from_before_a_learner_key_keeps_what_it_meant_then(tmp_path):
    """A run folder's config.toml from before learner.replay_ratio trained each unit once, and one from before
    learner.entropy_follows_lr held its entropy weight: resumed, they keep doing so. A config a user writes
    without them takes today's defaults, and a stored config that has them keeps its own values."""
    from zrl.config import load

    path = tmp_path / "config.toml"
    path.write_text("[learner]\nentropy_cost = 0.0006\n")
    old = load(path, stored=True)
    assert (old.learner.replay_ratio, old.learner.entropy_follows_lr) == (0.0, False)
    assert config.entropy_cost(old, 4, 10**6) == 0.0006
    fresh, defaults = load(path).learner, config.Config().learner
    assert (fresh.replay_ratio, fresh.entropy_follows_lr) == (defaults.replay_ratio, defaults.entropy_follows_lr)
    path.write_text("[learner]\nreplay_ratio = 2.0\nentropy_follows_lr = true\n")
    assert (load(path, stored=True).learner.replay_ratio, load(path, stored=True).learner.entropy_follows_lr) == (
        2.0,
        True,
    )


def test_apex_settings_it_cannot_run_are_refused_naming_the_key():
    base = [
        "algo=apex_iqn",
        'replay=[{"type": "prioritized", "capacity": 100000, "sample_ratio": 1}]',
        "learner.replay_ratio=0",
    ]
    assert config.load(None, [*base, "apex.head=c51"]).apex.head == "c51"
    with pytest.raises(ConfigError, match="apex.atoms.*v_min < v_max"):
        config.load(None, [*base, "apex.head=c51", "apex.v_min=5", "apex.v_max=5"])
    with pytest.raises(ConfigError, match="run.deterministic"):
        config.load(None, [*base, "run.deterministic=true", "workers.count=1"])


def test_a_stored_auto_kind_from_before_the_small_torso_still_means_the_nature_net():
    """Run folders and checkpoints written before atari_small stored model.kind = "auto", which then meant the
    Nature net: they read as auto_nature, so they still resume and load. New runs store the kind they resolved."""
    from zrl.envs import EnvSpec
    from zrl.launch import resolve_model_kind
    from zrl.launch.network import describe
    from zrl.models import model_kind

    old = config.from_dict({"env": {"id": "ALE/Pong-v5"}, "model": {"kind": "auto", "hidden_size": 512}}, "ckpt.pt")
    assert old.model.kind == "auto_nature" and model_kind(old.model, (84, 84)) == "atari"
    assert model_kind(old.model, (4,)) == "mlp"
    assert model_kind(config.load(None).model, (84, 84)) == "atari_small"  # what auto means for a new run
    spec = EnvSpec(frame_shape=(84, 84), frame_dtype="|u1", num_actions=6, frames_per_step=4, image=True)
    resolved = resolve_model_kind(config.load(None), describe(config.load(None), spec).kind)
    assert resolved.model.kind == "atari_small"
    assert config.from_dict(config.to_dict(resolved), "config.toml").model.kind == "atari_small"
    assert config.from_dict(config.to_dict(config.load(None)), "ckpt.pt").model.kind == "auto"  # written now


def test_a_split_with_more_workers_than_cores_gets_a_note_naming_a_better_one(monkeypatch):
    monkeypatch.setattr(config.sizing, "usable_cores", lambda: 2)  # where split_note and learner_threads look
    cfg = config.load(None, [], {"workers.count": 8, "workers.envs_per_worker": 4})
    note = config.split_note(cfg)
    assert note and "--workers 2 --envs-per-worker 8" in note and "nice 10" in note
    assert config.split_note(config.load(None, [], {"workers.count": 2, "workers.envs_per_worker": 8})) is None
    assert config.learner_threads(cfg) == 1  # the learner keeps a thread whatever the workers take


def test_bounds_are_the_declarations_and_hold_for_a_config_built_in_code():
    """A key's bounds live in its declaration alone; msgspec checks them on load and on every Config built in
    code, so a dataclasses.replace cannot make an invalid run either."""
    cfg = config.Config()
    with pytest.raises(ConfigError, match=r"learner.batch_size: must be > 0, got 0"):
        dataclasses.replace(cfg, learner=dataclasses.replace(cfg.learner, batch_size=0))
    with pytest.raises(ConfigError, match=r"replay\[1\].sample_ratio: must be > 0 and <= 1, got 1.5"):
        dataclasses.replace(cfg, replay=(cfg.replay[0], dataclasses.replace(cfg.replay[0], sample_ratio=1.5)))
    with pytest.raises(ConfigError, match=r"--set learner.discount=1.5: learner.discount: must be between 0 and 1"):
        config.load(None, ["learner.discount=1.5"])
    with pytest.raises(ConfigError, match=r"--set apex.v_min=nan: apex.v_min = nan must be a finite number"):
        config.load(None, ["apex.v_min=nan"])
    with pytest.raises(ConfigError, match=r"model.mlp_hidden = \[64, 'a'\] must be a list of integers"):
        config.load(None, ['model.mlp_hidden=[64, "a"]'])
    with pytest.raises(ConfigError, match=r"^run: Expected `object`, got `array`"):  # not about one key
        config.declared(config.RunConfig, [1], "run")


def test_every_key_is_declared_with_a_description():
    from zrl.config.defaults import descriptions

    for cls in [config.Config, *config.sections().values(), config.ReplayConfig]:
        docs = descriptions(cls)
        assert set(docs) >= {
            f.name for f in dataclasses.fields(cls) if f.name not in (*config.sections(), "replay", "agent_sections")
        }, cls
        assert all(len(text) > 10 for text in docs.values()), cls


def test_a_description_longer_than_help_should_be_is_refused():
    """A key's description says what it does, its unit and its values; the why goes to the README."""
    from zrl.config.defaults import MAX_DESCRIPTION, descriptions

    @dataclasses.dataclass
    class Section:
        key: Annotated[int, msgspec.Meta(description="x" * 201)] = 0

    with pytest.raises(TypeError, match=rf"Section.key: its description has {MAX_DESCRIPTION + 1} characters"):
        descriptions(Section)


@pytest.mark.parametrize("key", ["learner.device", "broker.device"])
def test_a_device_that_is_not_one_is_named_with_the_valid_ones(key):
    with pytest.raises(ConfigError, match=rf"{key}.*'gpu' is not one of auto, cpu, cuda, cuda:N"):
        config.load(None, [f'{key}="gpu"'])
    assert getattr(config.load(None, [f'{key}="cuda:1"']), key.split(".")[0]).device == "cuda:1"


@pytest.mark.parametrize("key", ["learner.device", "broker.device"])
def test_a_cuda_device_without_cuda_is_refused_before_any_process_starts(key, tmp_path):
    import torch

    from zrl.launch.network import describe

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    cfg = config.load(REPO / "config" / "cartpole.toml", [f'{key}="cuda"', f'run.results_dir="{tmp_path}"'])
    with pytest.raises(ConfigError, match=rf"{key}: 'cuda' but no CUDA device is available; use auto or cpu"):
        describe(cfg, envs.probe(cfg.env))
