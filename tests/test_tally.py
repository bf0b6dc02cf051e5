"""The launcher's tally on made-up stats messages: counts, rates, the best.json rule, a resumed run's counters
and the live line."""

from __future__ import annotations

import csv
import json

import msgspec
import pytest
from conftest import broker_stats_message, learner_stats_message

from zrl import config, protocol
from zrl.agents import get as get_agent
from zrl.launch.tally import RATIO_ROWS, Tally, progress_line, stop_reason
from zrl.metrics.columns import METRIC_DOCS, agent_figures, metric_columns
from zrl.roles.learner import STEP_METRICS

pytestmark = pytest.mark.unit


def worker_stats(worker_id: int, env_frames: int) -> protocol.WorkerStats:
    return protocol.WorkerStats(
        worker_id=worker_id,
        pid=100 + worker_id,
        time=0.0,
        env_frames=env_frames,
        env_steps=env_frames // 4,
        unrolls_sent=0,
        policy_version=3,
        weight_updates=1,
        step_time_s=1.0,
        inference_time_s=0.5,
        ring_write_time_s=0.0,
        send_time_s=0.0,
        weights_wait_time_s=0.25,
    )


def episode(worker_id: int, raw_return: float, env_frames: int) -> protocol.Episode:
    return protocol.Episode(
        worker_id=worker_id,
        pid=100 + worker_id,
        env_index=0,
        raw_return=raw_return,
        length_frames=400,
        length_env_steps=100,
        env_frames=env_frames,
        wall_time=1.5,
        score_5min=raw_return,
        score_30min=raw_return,
    )


def test_an_episode_is_counted_at_the_runs_frames_and_stats_are_kept():
    t = Tally(frames_start=1000)
    assert t.take(worker_stats(0, 500)) is None and t.take(worker_stats(1, 300)) is None
    row = t.take(episode(1, -20.0, 400))  # worker 1 at 400 of its own frames, worker 0's last report 500
    assert row["episode"] == 1 and row["env_frames"] == 1000 + 500 + 400 and row["worker_id"] == 1
    assert t.env_frames == 1800 and t.episodes == 1 and t.mean_return() == -20.0
    metrics = t.metrics_row(10.0, 0.0, 0.0)
    assert metrics["env_frames"] == 1800 and metrics["worker_weights_wait_s"] == 0.5
    assert metrics["time_env_step_s"] == 2.0 and "learner_step" not in metrics


def test_a_worker_gone_silent_counts_in_no_worker_figure_but_its_frames_stay(monkeypatch):
    """A departed worker (a remote one that left, say) must not hold worker_policy_version_min back."""
    clock = [100.0]
    monkeypatch.setattr("zrl.launch.tally.time.monotonic", lambda: clock[0])
    t = Tally(live_window_s=5.0)
    t.take(_with(worker_stats(0, 500), policy_version=40))
    t.take(_with(worker_stats(1, 300), policy_version=10))
    row = t.metrics_row(1.0, 0.0, 0.0)
    assert (row["worker_policy_version_min"], row["worker_policy_version_max"]) == (10, 40)
    clock[0] = 104.0
    t.take(_with(worker_stats(0, 900), policy_version=60))  # worker 1 last heard 4 s ago: still live
    assert t.metrics_row(2.0, 0.0, 0.0)["worker_policy_version_min"] == 10
    clock[0] = 106.0  # worker 1 silent for 6 s
    row = t.metrics_row(3.0, 0.0, 0.0)
    assert (row["worker_policy_version_min"], row["worker_policy_version_max"]) == (60, 60)
    assert row["env_frames"] == 900 + 300  # its frames still count
    clock[0] = 120.0  # nobody heard from lately: the last reports stand rather than nothing
    assert t.metrics_row(4.0, 0.0, 0.0)["worker_policy_version_min"] == 10


def _with(message, **fields):
    import msgspec

    return msgspec.structs.replace(message, **fields)


def test_rates_are_per_second_since_the_last_call():
    t = Tally()
    assert t.rates(10.0) == (0.0, 0.0)  # the start
    t.take(worker_stats(0, 2000))
    assert t.rates(12.0) == (1000.0, 0.0)  # no learner yet: no samples rate
    assert t.rates(12.0) == (0.0, 0.0)


def test_best_needs_a_full_hundred_episodes_and_a_better_mean():
    t = Tally(best_return=-10.0)
    for _ in range(99):
        t.take(episode(0, 0.0, 0))
    assert t.best_record("a.pt") is None
    t.take(episode(0, 0.0, 0))
    record = t.best_record("a.pt")
    assert record["mean_return_100"] == 0.0 and record["checkpoint"] == "a.pt" and record["episodes"] == 100
    t.best_return = 0.0
    assert t.best_record("b.pt") is None


def test_the_run_stops_at_its_return_once_a_full_hundred_episodes_reach_it():
    cfg = config.load(None, ["run.stop_at_return=18"])
    t = Tally()
    for _ in range(99):
        t.take(episode(0, 21.0, 0))
    assert stop_reason(cfg, t, None, 10.0) is None  # 99 episodes are not a mean of 100
    t.take(episode(0, 18.0, 0))
    assert stop_reason(cfg, t, None, 10.0) == "the last 100 episodes' mean return 20.97 reached run.stop_at_return"
    for _ in range(10):  # ten 21s leave the window: (89 x 21 + 18 - 10 x 21) / 100
        t.take(episode(0, -21.0, 0))
    assert t.mean_return() == pytest.approx(16.77) and stop_reason(cfg, t, None, 10.0) is None
    assert stop_reason(config.load(None, []), t, None, 10.0) is None  # inf: never
    assert stop_reason(config.load(None, ["run.max_seconds=5"]), t, None, 10.0) == "time limit reached"


def test_a_resumed_run_continues_its_counters(tmp_path):
    with open(tmp_path / "episodes.csv", "w", newline="") as fh:
        out = csv.DictWriter(fh, ["episode", "raw_return", "env_frames"])
        out.writeheader()
        out.writerows({"episode": i, "raw_return": i, "env_frames": 100 * i} for i in range(1, 151))
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "best.json").write_text(json.dumps({"mean_return_100": 42.5}))
    t = Tally(frames_start=10_000)
    t.seed(tmp_path)
    assert t.episodes == 150 and len(t.returns) == 100 and t.returns[0] == 51.0
    assert list(t.scores_5min) == list(t.returns)  # older files without capped scores: the raw ones
    assert t.frames_start == 15_000 and t.best_return == 42.5


def test_the_live_line_shows_the_replays_filling_before_the_first_step():
    t = Tally()
    t.take(worker_stats(0, 4000))
    line = progress_line(t, 3725.0, 1234.0, [10, 20])
    assert line.startswith("frames 4,000 | 1,234 f/s | learner 0 steps") and line.endswith("| 1:02:05")
    assert t.summary(0) == (
        "exit 0: 4,000 env frames, 0 learner steps, 0 episodes, mean return(100) nan, worker weights version 3"
    )


def test_every_role_figure_is_one_declaration_the_tally_writes():
    """A role's figure is declared once, as a protocol.Stat on its stats message's field: that gives its
    metrics.csv column, how the workers' reports combine, what it means, and whether the agent's learner step
    reports it; an agent's own figures are its declaration. Once every role has reported, a row fills every column
    its reports carry, and no figure the agent does not declare becomes one."""
    vtrace = get_agent("vtrace")
    t = Tally(figures=tuple(agent_figures(vtrace)))
    t.take(worker_stats(0, 500))
    t.take(msgspec.structs.replace(worker_stats(1, 300), policy_version=7))
    t.take(broker_stats_message())
    t.take(learner_stats_message(figures={"pg_loss": 0.25, "forged": 1.0}))
    t.take(
        protocol.IngestStats(
            pid=9,
            time=1.0,
            remote_workers=1,
            remote_joins=2,
            remote_frames=300,
            remote_bytes=40,
            remote_raw_bytes=500,
            remote_refused=6,
            remote_auth_refused=7,
            ingest_busy_s=0.25,
        )
    )
    t.take(protocol.EvaluatorStats(pid=10, time=1.0, evaluations=2, episodes=20, skipped=1))
    row = t.metrics_row(10.0, 1.0, 2.0)
    carried = {"pg_loss", "elite_lambda", "elite_distance_pool", "elite_distance_min"}  # of the agent's figures
    missing = set(agent_figures(vtrace)) - carried
    # the replay ratio needs two rows (its own test below)
    assert set(row) | {"replay_ratio"} == set(metric_columns(vtrace)) - missing
    assert (row["pg_loss"], row["elite_lambda"]) == (0.25, 5.5) and "forged" not in row
    assert (row["evaluations"], row["eval_episodes"], row["eval_skipped"]) == (2, 20, 1)
    assert (row["remote_workers"], row["remote_refused"], row["remote_auth_refused"]) == (1, 6, 7)
    assert (row["worker_policy_version_min"], row["worker_policy_version_max"]) == (3, 7)
    assert row["time_weights_wait_s"] == row["worker_weights_wait_s"] == 0.5 and row["time_env_step_s"] == 2.0
    assert (row["learner_decode_errors"], row["decode_errors"]) == (3, 4)
    assert row["replay_sizes"] == "16 0" and row["time_broker_sample_s"] == 1.5 and row["time_learner_wait_s"] == 2.0
    assert row["total_loss"] == 0.5 and row["learner_wait_fraction"] == 2.0 / 8.5
    for message in (
        protocol.WorkerStats,
        protocol.BrokerStats,
        protocol.LearnerStats,
        protocol.IngestStats,
        protocol.EvaluatorStats,
    ):
        for _, stat in message.STATS:
            assert stat.column in metric_columns(vtrace) and METRIC_DOCS[stat.column] == stat.doc != ""
    assert STEP_METRICS == tuple(field for field, stat in protocol.LearnerStats.STATS if stat.step)
    assert {"total_loss", "grad_norm", "policy_lag", "sample_age_max"} <= set(STEP_METRICS)
    assert "learning_rate" not in STEP_METRICS


def test_a_restarted_evaluators_counts_go_on_from_those_before_it():
    t = Tally()

    def report(pid: int, evaluations: int, episodes: int, skipped: int) -> dict:
        stats = protocol.EvaluatorStats(pid=pid, time=0.0, evaluations=evaluations, episodes=episodes, skipped=skipped)
        t.take(stats)
        row = t.metrics_row(1.0, 0.0, 0.0)
        return {k: row[k] for k in ("evaluations", "eval_episodes", "eval_skipped")}

    assert report(7, 1, 10, 0) == {"evaluations": 1, "eval_episodes": 10, "eval_skipped": 0}
    assert report(7, 2, 20, 1) == {"evaluations": 2, "eval_episodes": 20, "eval_skipped": 1}
    # killed and restarted: the new one counts from 0, the run's columns go on
    assert report(8, 0, 0, 0) == {"evaluations": 2, "eval_episodes": 20, "eval_skipped": 1}
    assert report(8, 1, 10, 2) == {"evaluations": 3, "eval_episodes": 30, "eval_skipped": 3}
    assert report(9, 1, 10, 0) == {"evaluations": 4, "eval_episodes": 40, "eval_skipped": 3}


def test_the_replay_ratio_achieved_is_frames_trained_per_frame_played_over_the_last_rows():
    t = Tally(replay_ratio_target=4.0)
    row = t.metrics_row(1.0, 0.0, 0.0)
    assert row["replay_ratio_target"] == 4.0 and "replay_ratio" not in row  # no learner yet
    played = trained = 0
    for i in range(RATIO_ROWS + 5):
        played += 1000
        trained += 3000 if i < 5 else 4000  # three times while filling, then four
        if i % 3 == 0:  # the workers' own reports come when they come: a row's may be two rows old
            t.take(worker_stats(0, played))
        t.take(learner_stats_message(learner_step=i + 1, env_frames_trained=trained, env_frames=played))
        row = t.metrics_row(float(i), 0.0, 0.0)
    assert row["replay_ratio"] == pytest.approx(4.0)  # the filling rows have left the window
    # Restarted from a checkpoint of step 10: its first report, before any batch, carries the checkpoint's counts,
    # and the batches after it count the 50,000 frames the workers played since the checkpoint.
    t.restarted()
    at_checkpoint = (10_000, 37_000)
    t.take(learner_stats_message(learner_step=10, env_frames=at_checkpoint[0], env_frames_trained=at_checkpoint[1]))
    assert "replay_ratio" not in t.metrics_row(99.0, 0.0, 0.0)
    for step in (11, 12, 13):
        played, trained = played + 1000, trained + 4000
        t.take(learner_stats_message(learner_step=step, env_frames=played + 50_000, env_frames_trained=trained))
        row = t.metrics_row(100.0 + step, 0.0, 0.0)
    assert row["replay_ratio"] == pytest.approx(4.0)  # from the restarted learner's batches alone
    assert {"replay_ratio", "replay_ratio_target"} <= set(metric_columns(get_agent("apex_iqn")))
