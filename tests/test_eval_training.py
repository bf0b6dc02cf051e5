"""Evaluation during training (the [eval] section, run.best_by): its config rules, the held-out states and their
mean max-Q, and a real zrl-launch whose evaluator plays the learner's latest weights under zrl-eval's protocols,
writes eval.csv and TensorBoard's eval/*, keeps best.pt by the evaluation score, and is restarted alone when it
is killed, and evaluates the final checkpoint after the run's end (eval.final), which Ctrl-C skips. Ape-X's
evaluation with held-out states rides on tests/test_apex.py's Pong run."""

from __future__ import annotations

import json
import math
import os
import re
import signal
import time
from pathlib import Path

import numpy as np
import psutil
import pytest
import torch
from conftest import REPO, csv_rows, reaped, start_command, tensorboard_scalars, wait_until, zrl_processes

from zrl import agents, checkpoint, evaluate
from zrl.config import SAFE_ON_RESUME, ConfigError, dumps, load
from zrl.roles import evaluator

SMOKE = REPO / "config" / "smoke.toml"
CARTPOLE = REPO / "config" / "apex_iqn_cartpole.toml"
PONG_APEX = REPO / "config" / "apex_iqn_pong.toml"


@pytest.mark.unit
def test_best_by_eval_needs_evaluations_and_a_bad_protocol_names_the_valid_ones(tmp_path: Path):
    with pytest.raises(ConfigError, match=r'run.best_by: "eval" needs evaluations during training: set eval.interval'):
        load(SMOKE, ["run.best_by=eval"])
    with pytest.raises(ConfigError, match=r"eval.protocol: 'sabre' is not one of auto, deepmind, machado, saber"):
        load(SMOKE, ["eval.interval_frames=1000", "eval.protocol=sabre"])
    with pytest.raises(ConfigError, match=r"eval.episodes: must be > 0, got 0"):
        load(SMOKE, ["eval.episodes=0"])
    with pytest.raises(ConfigError, match=r"run.best_by: 'best' is not one of train, eval"):
        load(SMOKE, ["run.best_by=best"])
    assert load(SMOKE, ["eval.interval_frames=1000", "run.best_by=eval"]).run.best_by == "eval"
    with pytest.raises(ConfigError, match=r"eval.stop_at_score: 400 needs evaluations during training: set eval"):
        load(CARTPOLE, ["eval.stop_at_score=400"])
    for bad in ("nan", "-inf"):
        with pytest.raises(ConfigError, match=rf"eval.stop_at_score = {bad} must be a finite number, or inf$"):
            load(CARTPOLE, ["eval.interval_frames=1000", f"eval.stop_at_score={bad}"])
    assert load(SMOKE).eval.stop_at_score == math.inf  # never, by default
    for text in ("-20.5", "inf"):  # the run folder's config.toml reads back as it was
        (tmp_path / "config.toml").write_text(
            dumps(load(SMOKE, ["eval.interval_frames=1", f"eval.stop_at_score={text}"]))
        )
        assert load(tmp_path / "config.toml").eval.stop_at_score == float(text)
    # a resumed run may turn evaluation on or off, or change how it is done; not its seed (its held-out states)
    assert {"eval.interval_frames", "eval.episodes", "eval.protocol", "eval.stop_at_score", "run.best_by"} <= set(
        SAFE_ON_RESUME
    )
    assert "eval.seed" not in SAFE_ON_RESUME


@pytest.mark.unit
def test_auto_is_saber_for_a_value_based_agent_deepmind_for_vtrace_and_none_off_atari():
    assert evaluator.run_protocol(load(SMOKE)) == "deepmind"
    assert evaluator.run_protocol(load(PONG_APEX)) == "saber"
    assert evaluator.run_protocol(load(SMOKE, ["eval.protocol=machado"])) == "machado"
    assert evaluator.run_protocol(load(CARTPOLE)) == "train_env"  # not Atari: played as it trains


@pytest.mark.integration
def test_held_out_states_are_a_random_policys_stacks_kept_for_the_run_and_made_anew_when_they_do_not_fit(tmp_path):
    cfg = load(SMOKE, ["eval.held_out_states=24", "eval.seed=5"])
    shape = (cfg.env.frame_stack, *cfg.env.resolution)
    states = evaluator.held_out_states(cfg, tmp_path, shape)
    assert states.shape == (24, *shape) and states.dtype == np.uint8
    assert len({s.tobytes() for s in states}) == 24  # each a different moment of play
    assert (states[-1].reshape(4, -1).max(axis=1) > 0).all()  # real frames: the last stack is full
    np.testing.assert_array_equal(states, evaluator.collect_states(cfg, 24, 5))  # the seed decides them
    kept = (tmp_path / evaluator.HELD_OUT_FILE).stat().st_mtime_ns
    again = evaluator.held_out_states(cfg, tmp_path, shape)  # a resumed run: the same ones, read back
    np.testing.assert_array_equal(again, states)
    assert (tmp_path / evaluator.HELD_OUT_FILE).stat().st_mtime_ns == kept
    more = evaluator.held_out_states(load(SMOKE, ["eval.held_out_states=30", "eval.seed=5"]), tmp_path, shape)
    assert more.shape[0] == 30
    np.testing.assert_array_equal(more[:24], states)  # the same random play, further
    (tmp_path / evaluator.HELD_OUT_FILE).write_bytes(b"not an npz")  # damaged: made again, not a crash
    np.testing.assert_array_equal(evaluator.held_out_states(cfg, tmp_path, shape), states)
    np.save(tmp_path / "plain.npy", states)  # an .npy under the name: made again too
    (tmp_path / "plain.npy").rename(tmp_path / evaluator.HELD_OUT_FILE)
    np.testing.assert_array_equal(evaluator.held_out_states(cfg, tmp_path, shape), states)
    blocked = tmp_path / "blocked"  # a file where the folder should be: nothing can be kept there
    blocked.write_bytes(b"")
    np.testing.assert_array_equal(evaluator.held_out_states(cfg, blocked, shape), states)  # in memory only
    assert blocked.read_bytes() == b""


@pytest.mark.integration
def test_mean_max_q_is_the_mean_of_each_states_largest_q_value():
    cfg = load(PONG_APEX, ["apex.acting_quantiles=8", "eval.held_out_states=12"])
    player = evaluator.Player(cfg, "saber")
    torch.manual_seed(1)
    player.model = agents.get(cfg.algo).build_model(cfg, player.frame_shape, player.frame_dtype, len(player.mapping))
    player.model.eval()
    states = evaluator.collect_states(cfg, 12, 3)
    got = evaluator.mean_max_q(player, states, seed=9, batch=5)  # in batches of 5, 5 and 2
    generator = torch.Generator().manual_seed(9)
    with torch.no_grad():
        expected = []
        for i in range(0, 12, 5):
            q = player.model.q_values(torch.from_numpy(states[i : i + 5]), 8, generator)
            expected.append(q.max(dim=1).values)
    assert got == pytest.approx(float(torch.cat(expected).mean()), rel=1e-6)
    # SABER plays the full action set, the minimal-set policy through its actions' ALE ids
    assert player.env_cfg.full_action_space and player.mapping.tolist() == [0, 1, 3, 4, 11, 12]
    assert math.isfinite(got)


def _evaluator() -> psutil.Process | None:
    found = [p for p in zrl_processes() if " ".join(p.info["cmdline"]).startswith(evaluator.NAME)]
    return found[0] if found else None


@pytest.mark.e2e
def test_a_run_evaluates_its_latest_weights_keeps_best_pt_by_their_score_outlives_its_evaluator_and_ends_with_a_final(
    tmp_path: Path, no_leaks
):
    proc = start_command(
        "zrl-launch",
        "--config",
        SMOKE,
        "--quiet",
        "--set",
        "run.max_env_frames=60000",
        "--set",
        "eval.interval_frames=10000",
        "--set",
        "eval.episodes=2",
        "--set",
        "run.best_by=eval",
        "--set",
        "eval.nice=0",  # its evaluations are under test here, not how little of the cores it takes
        cwd=tmp_path,
    )
    try:
        first = wait_until(lambda: list(tmp_path.glob("results/*/eval.csv")), 120, "eval.csv", proc)[0]
        run_dir = first.parent
        wait_until(lambda: len(csv_rows(first)) >= 1, 120, "a first evaluation", proc)
        killed = wait_until(_evaluator, 30, "the evaluator's process", proc)
        os.kill(killed.pid, signal.SIGKILL)
        killed_at = time.time()
        # the launcher never loads torch: what only torch can tell, a child of its fork server told it
        libtorch = [m.path for m in psutil.Process(proc.pid).memory_maps() if "libtorch" in m.path]
        out, err = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            proc.communicate(timeout=60)
    assert proc.returncode == 0, err[-3000:]
    assert libtorch == [], libtorch
    log = (run_dir / "zrl.log").read_text()
    assert "zrl-evaluator exited with code -9; restarted it" in log
    rows = csv_rows(run_dir / "eval.csv")
    # The last row is the final evaluation (eval.final): the learner's final checkpoint, after the roles stopped.
    *during, final = rows
    assert [r["final"] for r in rows] == ["0"] * len(during) + ["1"], rows
    final_ckpt = checkpoint.latest(run_dir / "checkpoints")
    assert int(final["policy_version"]) == checkpoint.load(final_ckpt)["policy_version"], final
    last_metrics = csv_rows(run_dir / "metrics.csv")[-1]
    ended = int(re.search(r"exit 0: ([\d,]+) env frames", log).group(1).replace(",", ""))  # the launch's last count
    assert int(final["env_frames"]) == ended >= int(last_metrics["env_frames"]) >= 60_000, final
    assert final["index"] == str(ended // 10_000), final  # the last multiple of the interval passed
    assert "killed zrl-evaluator" not in log  # it exits once its result is out
    assert f"final evaluation of {final_ckpt.name} at {int(final['env_frames']):,} env frames" in log
    assert f"final evaluation at {int(final['env_frames']):,} frames (deepmind, 2 episodes" in log
    assert float(final["wall_time"]) > float(during[-1]["wall_time"]) and -21 <= float(final["mean"]) <= 21
    frames = [int(r["env_frames"]) for r in rows]
    # asked each time the frames passed a multiple of 10,000: evaluations before the kill and after it (the kill
    # costs the one it was playing, and a request while the new evaluator connects)
    assert frames == sorted(frames) and len(during) >= 2, rows
    assert [float(r["wall_time"]) < killed_at for r in during].count(True) >= 1, rows
    assert [float(r["wall_time"]) > killed_at for r in during].count(True) >= 1, rows
    indices = [int(r["index"]) for r in during]  # the multiple of 10,000 a request answered: its weights came later
    assert indices == sorted(set(indices)) and all(10_000 * i <= f for i, f in zip(indices, frames)), rows
    for r in rows:
        assert r["protocol"] == "deepmind" and int(r["episodes"]) == 2
        assert -21 <= float(r["ci95_low"]) <= float(r["mean"]) <= float(r["ci95_high"]) <= 21
        assert r["mean_max_q"] == "" and r["human_normalised"] != ""  # V-trace has no Q-values; Pong has scores
        assert int(r["frames_played"]) > 2 * 700 and int(r["policy_version"]) > 0
    versions = [int(r["policy_version"]) for r in rows]
    assert versions == sorted(versions) and versions[0] < versions[-1]  # the latest weights each time
    # best.pt: the weights of the best evaluation (the first of the best means), model only, and zrl-eval plays it
    means = [float(r["mean"]) for r in rows]
    best_row = rows[means.index(max(means))]
    assert [int(r["best"]) for r in rows].count(1) >= 1 and best_row["best"] == "1"
    record = json.loads((run_dir / "checkpoints" / "best.json").read_text())
    assert record["by"] == "eval" and record["eval_mean"] == max(means) and record["protocol"] == "deepmind"
    assert record["policy_version"] == int(best_row["policy_version"])
    state = checkpoint.load(run_dir / "checkpoints" / checkpoint.BEST)
    assert state["policy_version"] == int(best_row["policy_version"]) and "optimizer" not in state
    assert state["evaluation"] == record
    last = csv_rows(run_dir / "metrics.csv")[-1]
    assert int(last["evaluations"]) >= 1 and int(last["eval_episodes"]) == 2 * int(last["evaluations"])
    report = evaluate.evaluate(str(run_dir), episodes=1, protocol="deepmind", seed=0, progress=lambda _: None)
    assert report["checkpoint"].endswith(checkpoint.BEST) and -21 <= report["score"]["mean"] <= 21
    scalars = tensorboard_scalars(run_dir)
    assert [step for step, _ in scalars["eval/mean"]] == frames
    assert [v for _, v in scalars["eval/mean"]] == pytest.approx(means)
    assert "eval/mean_max_q" not in scalars


@pytest.mark.e2e
def test_a_run_stops_in_order_once_an_evaluation_reaches_eval_stop_at_score(tmp_path: Path, no_leaks):
    """A budget the run would take hours over, and a score every Pong evaluation reaches (-21): the first
    evaluation stops the run, with exit 0, its reason said, its final checkpoint written and no final evaluation
    (eval.final = false)."""
    proc = start_command(
        "zrl-launch",
        "--config",
        SMOKE,
        "--set",
        "run.max_env_frames=50000000",
        "--set",
        "eval.interval_frames=4000",
        "--set",
        "eval.episodes=1",
        "--set",
        "eval.stop_at_score=-21",
        "--set",
        "eval.final=false",
        "--set",
        "eval.nice=0",
        cwd=tmp_path,
    )
    with reaped(proc):
        out, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, err[-3000:]
    (run_dir,) = (tmp_path / "results").iterdir()
    first, *_ = rows = csv_rows(run_dir / "eval.csv")
    assert float(first["mean"]) >= -21 and all(r["final"] == "0" for r in rows), rows
    assert f"stopping (evaluation score {float(first['mean']):.2f} reached eval.stop_at_score)" in out, out[-2000:]
    ended = int(csv_rows(run_dir / "metrics.csv")[-1]["env_frames"])
    assert int(first["env_frames"]) <= ended < 1_000_000, (first, ended)
    assert checkpoint.latest(run_dir / "checkpoints") is not None


@pytest.mark.unit
def test_an_evaluator_takes_best_pts_evaluation_as_its_bar_only_on_the_same_terms(tmp_path: Path):
    """A restarted or resumed evaluator must beat the evaluation best.pt holds, when it was made on the same terms
    (protocol, episodes, seed, action rule); a training best (run.best_by was "train"), other terms, no best.pt
    or a damaged one set no bar."""
    cfg = load(SMOKE, ["eval.interval_frames=1000", "run.best_by=eval"])
    terms = evaluator.evaluation_terms(cfg)
    assert terms == {"protocol": "deepmind", "episodes": 10, "seed": cfg.eval.seed, "greedy": False}
    best = tmp_path / checkpoint.BEST
    assert evaluator.best_so_far(tmp_path, terms) == -math.inf
    checkpoint.save(best, {"model": {}, "evaluation": {"by": "eval", "eval_mean": -3.5, **terms}})
    assert evaluator.best_so_far(tmp_path, terms) == -3.5
    assert evaluator.best_so_far(tmp_path, {**terms, "episodes": 100}) == -math.inf  # a resumed run's new terms
    assert evaluator.best_so_far(tmp_path, evaluator.evaluation_terms(load(SMOKE, ["eval.protocol=saber"]))) == (
        -math.inf
    )
    checkpoint.save(best, {"model": {}, "learner_step": 5})  # a training best
    assert evaluator.best_so_far(tmp_path, terms) == -math.inf
    checkpoint.save(best, {"model": {}, "evaluation": {"by": "eval", "eval_mean": "x", **terms}})
    assert evaluator.best_so_far(tmp_path, terms) == -math.inf
    best.write_bytes(best.read_bytes()[:-10])  # damaged: fails its hash
    assert evaluator.best_so_far(tmp_path, terms) == -math.inf


@pytest.mark.e2e
def test_ctrl_c_during_the_final_evaluation_stops_it_and_leaves_nothing(tmp_path: Path, no_leaks):
    # no evaluation during the run (its interval is past the budget), and a final one of 100 episodes: long enough
    proc = start_command(
        "zrl-launch",
        "--config",
        SMOKE,
        "--set",
        "run.max_env_frames=20000",
        "--set",
        "eval.interval_frames=1000000",
        "--set",
        "eval.episodes=100",
        cwd=tmp_path,
    )
    with reaped(proc):
        logs = lambda: [p for p in tmp_path.glob("results/*/zrl.log") if "final evaluation of" in p.read_text()]
        (log,) = wait_until(logs, 180, "the final evaluation's start", proc)
        wait_until(_evaluator, 60, "the final evaluator's process", proc)
        time.sleep(1.0)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err[-3000:]
    assert "final evaluation of ckpt_" in out and "(Ctrl-C skips it)" in out
    assert "the final evaluation was stopped by a signal" in log.read_text()
    eval_csv = log.with_name("eval.csv")
    assert not eval_csv.exists() or not csv_rows(eval_csv), "no evaluation finished"
