"""zrl-translate: every command line in the two references' READMEs becomes a run file zrl loads, with the values
the reference would run with; every option of either reference, given alone, lands in a key or is named on
stderr; a flag the reference does not have is a usage error; the README's tables are the translator's own."""

from __future__ import annotations

import re
import shlex

import pytest
from conftest import REPO, csv_rows, run_command

from zrl.config import ConfigError
from zrl.translate import OPTIONS, load_text, table, translate

# The README of the elite-replay platform (shared/reference/000_..., at 8aa625c; note the two spaces before "\")
EBV_TRAIN = """python main.py --op_mode=train \\
--env=PongNoFrameskip-v4  \\
--environment_max_steps=1000000 \\
--batch_size=10 \\
--r_f_steps=10 \\
--worker_count=2 \\
--envs_per_worker=2 \\
--replay_parameters='[{"type": "queue", "capacity": 1, "sample_ratio": 0.5}, {"type": "standard", "capacity": 1000, "sample_ratio": 0.5}]'"""
EBV_CONTINUE = """python main.py --op_mode=train_w_load \\
--env=PongNoFrameskip-v4  \\
--environment_max_steps=1000000 \\
--load_model_url=<path_to_model>"""
EBV_TEST = """python main.py --op_mode=test \\
--env=PongNoFrameskip-v4  \\
--test_episode_count=1000 \\
--load_model_url=<path_to_model> \\
--render=True"""
EBV_ELITE = """python main.py --op_mode=train \\
--env=PongNoFrameskip-v4  \\
--environment_max_steps=1000000 \\
--replay_parameters='[{"type": "custom", "capacity": 1000, "sample_ratio": 0.5, "dist_function":"ln_norm", "sample_strategy":"elite_sampling", "lambda_batch_multiplier":6, "alfa_annealing_factor":2.0} ,{"type": "queue", "capacity": 1, "sample_ratio": 0.5}]'"""
# its newest README (shared/reference/001_...): the same, continue and test without --env
EBV_CONTINUE_HEAD = """python main.py --op_mode=train_w_load \\
--environment_max_steps=1000000 \\
--load_model_url=<path_to_model>"""

# The README of Rainbow-IQN Ape-X (shared/reference/004_...), with its defects (no .py, --nb-actor twice, False)
RAINBOW_LEARNER = "python launch_learner.py --memory-capacity 100000 --learn-start 8000 --log-interval 2500"
RAINBOW_ACTOR = "python launch_actor.py --id-actor 0 --memory-capacity 100000 --learn-start 8000 --log-interval 2500"
RAINBOW_TEST = "python test_multiple_seed.py --game #game_name# --model #path_to_saved_snapshot#"
RAINBOW_MULTI_LEARNER = "python launch_learner --nb-actor 6 --synchronize-actors-with-learner False"
RAINBOW_MULTI_ACTOR = (
    "python launch_actor --gpu-number 1 --nb-actor 6 --nb-actor 0 --synchronize-actors-with-learner False"
)
# start_learning_atari.sh, which its README says to run
RAINBOW_SCRIPT = "python launch_learner.py --nb-actor 1 --game space_invaders --gpu-number 0"


def _argv(command: str) -> list[str]:
    return shlex.split(command.replace("\\\n", " "))


def _run(reference: str, command: str):
    text, notes = translate(reference, _argv(command))
    return load_text(text), text, notes


@pytest.mark.unit
def test_the_elite_platforms_training_example_is_its_run_in_zrls_units():
    cfg, text, notes = _run("ebv", EBV_TRAIN)
    assert len(notes) == 1 and notes[0].startswith("its network's convolutions (64 3x3/3, 64 3x3/2, 128 3x3/2)")
    assert cfg.model.hidden_size == 512  # its hidden layer
    assert cfg.algo == "vtrace" and cfg.env.id == "PongNoFrameskip-v4"
    assert cfg.run.max_env_frames == 4_000_000  # 1M agent steps of 4 frames
    assert (cfg.workers.count, cfg.workers.envs_per_worker) == (2, 2)
    assert (cfg.learner.batch_size, cfg.learner.unroll_length) == (10, 10)
    assert [(r.type, r.capacity, r.sample_ratio) for r in cfg.replay] == [("queue", 1, 0.5), ("uniform", 1000, 0.5)]
    assert cfg.replay[1].fill_fraction == 0.2  # --training_fill_in_factor's default
    # the reference's defaults where zrl's differ: RMSprop with eps 0.01, lr 0.0008 decaying with power 2 over
    # 10,000 updates to 1e-5, entropy 0.01, CLEAR on in its own form
    learner = cfg.learner
    assert (learner.optimizer, learner.rmsprop_eps, learner.learning_rate) == ("rmsprop", 0.01, 0.0008)
    assert (learner.lr_decay_steps, learner.lr_end, learner.lr_decay_power) == (10_000, 1e-5, 2.0)
    assert learner.entropy_cost == 0.01
    assert (cfg.vtrace.clear_policy_weight, cfg.vtrace.clear_policy_kl) == (0.05, "pi_mu")
    assert (cfg.vtrace.clear_value_weight, cfg.vtrace.clear_value_loss) == (0.005, "l2_norm")
    assert "# --batch_size 10\nbatch_size = 10" in text and "# --lr (default 0.0008)" in text
    # its settings are the same for every game: none of zrl's for Pong lie under them (its entropy weight held)
    assert "# its settings are the same for every game\ngame_settings = false" in text
    assert (cfg.run.game_settings, learner.entropy_decay_frames) == (False, 0)


@pytest.mark.unit
def test_the_elite_sampling_example_gives_an_elite_replay_first():
    cfg, _, _ = _run("ebv", EBV_ELITE)
    elite, queue = cfg.replay
    assert (elite.type, elite.capacity, elite.sample_ratio, elite.dist_function) == ("elite", 1000, 0.5, "ln_norm")
    assert (elite.lambda_batch_multiplier, elite.alfa_annealing_factor, elite.strategy, elite.p) == (6, 2.0, 3, 2)
    assert (queue.type, queue.capacity) == ("queue", 1)
    assert cfg.learner.batch_size == 100  # the reference's default batch


@pytest.mark.unit
@pytest.mark.parametrize("command", [EBV_CONTINUE, EBV_CONTINUE_HEAD, EBV_TEST])
def test_continuing_and_testing_are_named_with_the_zrl_command_that_does_them(command):
    cfg, _, notes = _run("ebv", command)
    said = "\n".join(notes)
    assert "--load_model_url <path_to_model>" in said and "--init-from / --resume" in said
    assert re.search(r"--op_mode (train_w_load|test): the run file holds only the flags given", said)
    assert ("zrl-launch --resume RUN" if "train_w_load" in command else "use zrl-eval") in said
    if "test_episode_count" in command:
        assert "--test_episode_count 1000" in said and "zrl-eval --episodes" in said
    # the reference took every flag not given from the checkpoint: the run file holds only those given
    assert cfg.learner.batch_size == 8 and cfg.run.max_env_frames in (4_000_000, 50_000_000)
    assert cfg.run.game_settings is False  # written even where only the flags given are
    assert cfg.env.id == ("PongNoFrameskip-v4" if "--env=" in command else "ALE/Pong-v5")


@pytest.mark.unit
def test_rainbows_examples_are_its_run_with_its_counters_in_zrls_units():
    cfg, _, notes = _run("rainbow", RAINBOW_LEARNER)
    assert cfg.algo == "apex_iqn" and cfg.env.id == "ALE/SpaceInvaders-v5"
    assert (cfg.replay[0].type, cfg.replay[0].capacity) == ("prioritized", 100_000)
    assert cfg.apex.learn_start == 8000
    assert cfg.run.max_env_frames == 200_000_000  # 50M steps of 4 frames
    assert cfg.apex.target_update == 8000  # 32,000 of its steps, an update every 4
    assert cfg.learner.publish_every == 100  # 400 of its steps
    assert (cfg.apex.priority_exponent, cfg.apex.importance_beta, cfg.apex.n_step) == (0.2, 0.4, 3)
    assert cfg.apex.beta_anneal_steps == (50_000_000 - 8000) // 4
    assert cfg.env.sticky_action_prob == 0.25 and cfg.env.full_action_space and cfg.env.noop_max == 0
    assert (cfg.learner.optimizer, cfg.learner.learning_rate, cfg.learner.lr_end) == ("adam", 5e-5, 5e-5)
    assert cfg.apex.replay_ratio == 4.0  # synchronised actors: an update per 4 env steps
    # it ran no evaluation of its own: zrl's stays off unless an --evaluation flag asks for it
    assert cfg.eval.interval_frames == 0
    asked, _, _ = _run("rainbow", RAINBOW_LEARNER + " --evaluation-episodes 20")
    # then every 500,000 steps of 4 frames, under SABER, with 500 held-out states
    assert (asked.eval.interval_frames, asked.eval.episodes, asked.eval.protocol) == (2_000_000, 20, "saber")
    assert asked.eval.held_out_states == 500
    assert sorted(notes) == [
        "--log-interval 2500: no equivalent: zrl prints progress every run.log_interval_s seconds",
        "SABER mode: its training episodes also ended after 5 minutes without reward; zrl's training env has no "
        "such rule (zrl-eval --protocol saber scores with it)",
    ]
    assert (cfg.model.kind, cfg.learner.grad_norm_clip, cfg.model.hidden_size) == ("atari", 0.0, 512)
    actor, _, actor_notes = _run("rainbow", RAINBOW_ACTOR)
    assert actor == cfg and any(n.startswith("--id-actor 0: no equivalent") for n in actor_notes)
    script, _, _ = _run("rainbow", RAINBOW_SCRIPT)
    assert script.workers.count == 1 and script.learner.device == "cuda:0"


@pytest.mark.unit
def test_rainbows_multi_machine_examples_are_read_as_meant_and_their_defects_named():
    learner, _, notes = _run("rainbow", RAINBOW_MULTI_LEARNER)
    assert learner.workers.count == 6 and learner.apex.replay_ratio == 0.0  # actors not synchronised: free
    assert any(
        "--synchronize-actors-with-learner False: the README's version read any text as true" in n for n in notes
    )
    actor, _, notes = _run("rainbow", RAINBOW_MULTI_ACTOR)
    assert actor.workers.count == 1 and actor.learner.device == "cuda:1"
    assert any(n.startswith("--nb-actor 0: the reference divides by it") and "--id-actor" in n for n in notes)


@pytest.mark.unit
def test_rainbows_test_command_names_zrl_eval():
    _, _, notes = _run(
        "rainbow", RAINBOW_TEST.replace("#game_name#", "pong").replace("#path_to_saved_snapshot#", "m.pth")
    )
    assert any(n.startswith("--model m.pth: a zrl checkpoint") for n in notes)
    cfg, _, notes = _run("rainbow", "--game pong --rainbow-only 1 --lr 0.001 --disable-SABER-mode")
    assert notes == ["--lr 0.001: ignored: --lr-Rainbow is the one this run takes"]
    evaluated, _, _ = _run("rainbow", "--game pong --disable-SABER-mode --evaluation-interval 100000")
    assert evaluated.eval.protocol == "machado"  # sticky actions and the 30-minute cap, without SABER's rules
    assert (cfg.env.id, cfg.apex.head, cfg.apex.priority_exponent, cfg.learner.learning_rate) == (
        "ALE/Pong-v5",
        "c51",
        0.5,
        0.0000625,
    )


# A value other than the default for each option (valid in zrl too); the rest are derived below.
SAMPLES = {
    "--op_mode": "train_w_load",
    "--load_model_url": "runs/x",
    "--env": "BreakoutNoFrameskip-v4",
    "--reward_clipping_method": "soft_asymmetric",
    "--multiprocessing_backend": "python_native",
    "--discarding_strategy": "keep_oldest",
    "--optimizer": "adam",
    "--frame_scale_resolution": "80,64",
    "--observation_shape": "(4, 64, 64)",
    "--replay_parameters": '[{"type": "queue", "capacity": 1, "sample_ratio": 1}]',
    "--batch_size": "20",
    "--training_fill_in_factor": "0.4",
    "--game": "breakout",
    "--model": "m.pth",
    "--host-redis": "10.0.0.2",
    "--path-to-results": "elsewhere",
    "--id-actor": "2",
    "--V-min": "-20",
    "--rainbow-only": "1",
    "--synchronize-actors-with-learner": "0",
}


def _sample(option) -> list[str]:
    if option.flag == "--reproducible":  # zrl's deterministic mode needs one worker and one queue
        queue = '[{"type": "queue", "capacity": 1, "sample_ratio": 1}]'
        return ["--reproducible=True", "--worker_count=1", "--batch_size=10", f"--replay_parameters={queue}"]
    if option.kind == "flag":
        return [option.flag]
    if option.flag in SAMPLES:
        return [option.flag, SAMPLES[option.flag]]
    if option.kind == "bool":
        return [option.flag, "" if option.default else "True"]
    if option.kind == "int":
        return [option.flag, str((option.default or 1) + 1)]
    return [option.flag, str((option.default or 0.25) / 2)]


@pytest.mark.unit
@pytest.mark.parametrize(
    "reference, option",
    [(ref, o) for ref, options in OPTIONS.items() for o in options],
    ids=lambda x: x if isinstance(x, str) else x.flag,
)
def test_every_option_given_alone_lands_in_a_key_or_is_named_on_stderr(reference, option):
    argv = _sample(option)
    text, notes = translate(reference, argv)
    load_text(text)
    given = re.compile(re.escape(option.flag) + r"( \S|=|$)")  # the flag as given, not at its default
    in_a_key = any(line.startswith("# ") and given.search(line) for line in text.splitlines())
    named = any(given.match(n.split(":")[0]) for n in notes)
    in_a_replay = REPLAY_FLAGS.get(option.flag, "\0") in text.partition("[[replay]]")[2]
    assert in_a_key or named or in_a_replay, (text, notes)
    assert not (option.home == "" and not named), "an option with no home must be named on stderr"


# what the flags that shape the [[replay]] tables leave there, given their SAMPLES values
REPLAY_FLAGS = {
    "--replay_parameters": 'type = "queue"\ncapacity = 1\nsample_ratio = 1',
    "--discarding_strategy": 'discard = "keep_oldest"',
    "--training_fill_in_factor": "fill_fraction = 0.4",
    "--memory-capacity": "capacity = 1000001",
}


@pytest.mark.unit
def test_colour_frames_and_the_resolution_are_carried_over_as_height_and_width():
    cfg, _, _ = _run("ebv", "--grayscaling_frames= --frame_scale_resolution=80,64")
    assert not cfg.env.grayscale and cfg.env.resolution == (64, 80)
    with pytest.raises(ConfigError, match="--frame_scale_resolution: '84x84' is not two integers"):
        translate("ebv", ["--frame_scale_resolution=84x84"])


@pytest.mark.unit
def test_replay_flags_no_replay_of_theirs_takes_are_named():
    uniform = '[{"type": "standard", "capacity": 1000, "sample_ratio": 1}]'
    _, text, notes = _run("ebv", f"--replay_parameters='{uniform}' --discarding_strategy=keep_oldest")
    assert "discard" not in text and any(n.startswith("--discarding_strategy keep_oldest:") for n in notes)
    queue = '[{"type": "queue", "capacity": 1, "sample_ratio": 1}]'
    _, text, notes = _run("ebv", f"--replay_parameters='{queue}' --training_fill_in_factor=0.5")
    assert "fill_fraction" not in text and any(n.startswith("--training_fill_in_factor 0.5:") for n in notes)


@pytest.mark.unit
def test_only_the_words_before_the_first_flag_are_taken_for_the_script():
    from zrl.translate import parse

    given = parse("ebv", ["python", "main.py", "--load_model_url=results/main", "--lr", "0.001"])
    assert given == {"--load_model_url": "results/main", "--lr": "0.001"}
    assert parse("rainbow", ["--path-to-results", "/data/main"]) == {"--path-to-results": "/data/main"}
    with pytest.raises(ConfigError, match="--out is zrl-translate's own option: give it before --"):
        parse("rainbow", ["--game", "pong", "--out", "x.toml"])


@pytest.mark.unit
def test_the_readme_tables_are_the_translators_and_list_every_option():
    readme = (REPO / "README.md").read_text()
    for reference, options in OPTIONS.items():
        block = re.search(rf"<!-- translate:{reference} -->\n(.*?)\n<!-- /translate:{reference} -->", readme, re.S)
        assert block is not None and block.group(1) == table(reference), (
            f"README.md's {reference} table is stale: python -m zrl.translate --table {reference}"
        )
        assert len(block.group(1).splitlines()) == 2 + len(options)
    assert (len(OPTIONS["ebv"]), len(OPTIONS["rainbow"])) == (64, 54)


@pytest.mark.unit
def test_a_translation_zrl_cannot_run_is_refused_naming_the_flags_it_came_from():
    with pytest.raises(
        ConfigError,
        match=r"\(from --worker_count \(default 7\)\); --reproducible is zrl's run.deterministic.*single worker",
    ):
        translate("ebv", ["--reproducible=True"])


@pytest.mark.integration
def test_the_command_refuses_an_option_the_reference_does_not_have_and_writes_out_files_once(tmp_path):
    done = run_command("zrl-translate", "--from", "ebv", "--", "--lrr", "0.1", cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert (
        "'--lrr' is not an option of the elite-replay platform" in done.stderr and "did you mean --lr?" in done.stderr
    )
    done = run_command("zrl-translate", "--from", "rainbow", "--out", "run.toml", "--", "--game", "pong", cwd=tmp_path)
    assert done.returncode == 0 and 'id = "ALE/Pong-v5"' in (tmp_path / "run.toml").read_text()
    again = run_command("zrl-translate", "--from", "rainbow", "--out", "run.toml", "--", "--game", "pong", cwd=tmp_path)
    assert again.returncode == 2 and "already exists" in again.stderr


@pytest.mark.e2e
@pytest.mark.background
def test_the_translated_readme_example_trains_under_zrl_launch(tmp_path, no_leaks):
    done = run_command("zrl-translate", "--from", "ebv", "--out", "ebv.toml", "--", *_argv(EBV_TRAIN), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    run = run_command(
        "zrl-launch", "--config", "ebv.toml", "--set", "run.max_env_frames=20000", "--quiet", cwd=tmp_path, timeout=240
    )
    assert run.returncode == 0, run.stderr[-3000:]
    (folder,) = (tmp_path / "results").iterdir()
    rows = csv_rows(folder / "metrics.csv")
    assert int(rows[-1]["env_frames"]) >= 20000 and int(rows[-1]["learner_step"]) > 0
