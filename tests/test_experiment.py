"""zrl-sweep and zrl-report: the statistics against cases worked by hand, sweep files that are wrong, and real
sweeps of tiny CartPole runs (each a real zrl-launch): the index, a failed run, Ctrl-C and --resume, the report."""

from __future__ import annotations

import itertools
import json
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO, command, refused, run_command

from zrl import scores
from zrl.config import ConfigError
from zrl.experiment import report, stats, sweep, sweep_plan
from zrl.machine import cpu_description

# ---- statistics -------------------------------------------------------------------------------------------------


@pytest.mark.unit
def test_iqm_cuts_a_quarter_from_each_end():
    assert stats.iqm(np.arange(1, 9)) == 4.5  # 3, 4, 5, 6
    assert stats.iqm(np.array([[1.0], [100.0], [2.0], [3.0]])) == 2.5  # 2, 3: the outlier is cut
    assert stats.iqm(np.array([5.0, 1.0, 9.0])) == 5.0  # floor(3/4) = 0 cut: the mean
    assert stats.mean(np.array([[1.0, 2.0], [3.0, 6.0]])) == 3.0
    with pytest.raises(ValueError):
        stats.iqm(np.array([]))


@pytest.mark.unit
def test_stratified_bootstrap_matches_the_distribution_enumerated_by_hand():
    """Two runs of two games: each game's column is one of 4 equally likely resamples, independently, so the
    mean takes each of 16 combinations with probability 1/16. A bootstrap that resampled whole runs (rows) would
    give only 4 outcomes."""
    scores = np.array([[0.0, 10.0], [1.0, 30.0]])
    exact: dict[float, float] = {}
    for col0 in itertools.product(scores[:, 0], repeat=2):
        for col1 in itertools.product(scores[:, 1], repeat=2):
            m = round((sum(col0) + sum(col1)) / 4, 6)
            exact[m] = exact.get(m, 0.0) + 1 / 16
    boots = stats.stratified_bootstrap(scores, 40_000, np.random.default_rng(0))
    assert [b.shape for b in boots] == [(40_000, 2), (40_000, 2)]
    means = np.round((boots[0].sum(axis=1) + boots[1].sum(axis=1)) / 4, 6)
    values, counts = np.unique(means, return_counts=True)
    assert set(values) == set(exact)
    for v, c in zip(values, counts):
        assert abs(c / len(means) - exact[v]) < 0.01, (v, c / len(means), exact[v])
    assert len(exact) > 4


@pytest.mark.unit
def test_games_with_different_numbers_of_runs_keep_every_run():
    """Game A has 3 runs, game B one: every replicate holds 3 + 1 scores, B's always its one run."""
    boots = stats.stratified_bootstrap([np.array([1.0, 2.0, 3.0]), np.array([10.0])], 1000, np.random.default_rng(1))
    assert boots[0].shape == (1000, 3) and (boots[1] == 10.0).all()
    point, low, high = stats.interval([np.array([1.0, 2.0, 3.0]), np.array([10.0])], stats.mean, reps=2000)
    assert point == 4.0 and (3 * 1.0 + 10) / 4 <= low < point < high <= (3 * 3.0 + 10) / 4
    np.testing.assert_allclose(stats.profile([np.array([1.0, 3.0]), np.array([5.0])], np.array([2.0])), [0.75])


@pytest.mark.unit
def test_interval_is_the_percentile_interval_of_the_replicates():
    # one game, runs 2 and 4: the mean of a resample is 2 (1/4), 3 (1/2) or 4 (1/4)
    point, low, high = stats.interval(np.array([[2.0], [4.0]]), stats.mean, reps=4000)
    assert (point, low, high) == (3.0, 2.0, 4.0)
    # identical runs: no spread
    assert stats.interval(np.full((5, 2), 7.0), stats.iqm, reps=500) == (7.0, 7.0, 7.0)


@pytest.mark.unit
def test_performance_profile_by_hand():
    scores = np.array([[1.0, 5.0], [3.0, 7.0]])  # game 1: 1, 3; game 2: 5, 7
    taus = np.array([0.0, 2.0, 4.0, 6.0, 8.0])
    np.testing.assert_allclose(stats.profile(scores, taus), [1.0, 0.75, 0.5, 0.25, 0.0])
    curve, low, high = stats.profile_band(scores, taus, reps=500)
    np.testing.assert_allclose(curve, [1.0, 0.75, 0.5, 0.25, 0.0])
    assert (low <= curve).all() and (curve <= high).all()
    assert low[1] == 0.5 and high[1] == 1.0  # tau 2: game 1 contributes 0, 1/2 or 1


# ---- sweep files ------------------------------------------------------------------------------------------------

CARTPOLE = REPO / "config" / "cartpole.toml"


def _sweep_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "sweep.toml"
    path.write_text(text)
    return path


@pytest.mark.unit
def test_a_sweep_is_variants_by_grid_points_by_seeds_seed_by_seed(tmp_path):
    path = _sweep_file(
        tmp_path,
        f"""
[sweep]
config = "{CARTPOLE}"
seeds = [3, 4]
set = {{ "run.max_env_frames" = 5000 }}

[grid]
"learner.learning_rate" = [0.001, 0.0005]

[[variant]]
name = "uni"

[[variant]]
name = "queue"
replay = '[{{"type": "queue", "capacity": 1, "sample_ratio": 1}}]'
""",
    )
    planned = sweep_plan.load(path)
    keys = [r.key for r in planned.runs]
    assert keys[:4] == [
        "uni-learning_rate=0.001/seed3",
        "uni-learning_rate=0.0005/seed3",
        "queue-learning_rate=0.001/seed3",
        "queue-learning_rate=0.0005/seed3",
    ]
    assert len(keys) == 8 and keys[4].endswith("seed4")
    queue = planned.runs[2]
    assert queue.grid == {"learner.learning_rate": 0.001} and queue.max_env_frames == 5000
    assert "learner.learning_rate=0.001" in queue.sets and any(s.startswith("replay=") for s in queue.sets)
    assert [sweep._command(r, tmp_path).count(f"run.seed={r.seed}") for r in planned.runs] == [1] * 8
    chosen = [r.key for r in sweep._selected(planned, ["queue-*/seed4", "uni-learning_rate=0.001"])]
    assert chosen == [
        "uni-learning_rate=0.001/seed3",
        "uni-learning_rate=0.001/seed4",
        "queue-learning_rate=0.001/seed4",
        "queue-learning_rate=0.0005/seed4",
    ]


@pytest.mark.unit
def test_dotted_keys_may_be_written_bare(tmp_path):
    """TOML nests ``run.max_env_frames = 5000`` unquoted; the sweep reads it as the dotted key."""
    path = _sweep_file(
        tmp_path,
        f'[sweep]\nconfig = "{CARTPOLE}"\nset = {{ run.max_env_frames = 5000 }}\n[grid]\nlearner.learning_rate = [0.001]\n',
    )
    (run,) = sweep_plan.load(path).runs
    assert run.max_env_frames == 5000 and run.grid == {"learner.learning_rate": 0.001}


@pytest.mark.unit
@pytest.mark.parametrize(
    "body, expected",
    [
        ("[sweep]\nseeds = [1]\nparalel = 2\n", ["sweep.paralel: unknown key", "parallel"]),
        ("[sweep]\nseeds = [1]\n[grids]\n", ["grids: unknown key"]),
        ("[sweep]\nseeds = []\n", ["sweep.seeds", "non-empty list of integers"]),
        ("[sweep]\nseeds = [1, 'two']\n", ["sweep.seeds", "integers"]),
        ("[sweep]\nseeds = [1.5]\n", ["sweep.seeds", "integers"]),
        ("[sweep]\nseeds = [1, 1]\n", ["sweep.seeds", "repeated"]),
        ("[sweep]\nseeds = [1]\n[grid]\n'learner.learning_rate' = []\n", ["grid.learner.learning_rate", "non-empty"]),
        ("[sweep]\nparallel = 0\n", ["sweep.parallel"]),
        ("[[variant]]\nname = 'a'\n[[variant]]\nname = 'a'\n", ["variant[1].name", "used twice"]),
        ("[[variant]]\nname = 'a'\n[[variant]]\nrplay = '[]'\n", ["variant[1].rplay: unknown key"]),
        ("[sweep]\nset = { 'learner.batch_sise' = 4 }\n", ["run: ", "learner.batch_sise"]),
        ("[sweep]\nconfig = 'nowhere.toml'\n", ["sweep.config", "no such run file"]),
        ("[sweep\n", ["not valid TOML"]),
        ("[[variant]]\nname = '../x'\n", ["variant[0].name", "letters, digits"]),
        ("[[variant]]\nname = 'a'\n[[variant]]\nname = 'b'\nconfig = 'nowhere.toml'\n", ["variant[1].config"]),
    ],
)
def test_sweep_file_mistakes_are_named(tmp_path, body, expected):
    path = _sweep_file(tmp_path, body)
    with pytest.raises(ConfigError) as err:
        sweep_plan.load(path)
    assert str(path) in str(err.value)
    for part in expected:
        assert part in str(err.value), (part, str(err.value))


@pytest.mark.integration
def test_a_bad_sweep_file_exits_2_before_any_run(tmp_path, monkeypatch):
    """The real zrl-sweep on a bad sweep file; its other refusals, and zrl-report's, through their click commands in
    this process (CliRunner; an exception would fail the test): exit code 2, the reason, nothing made."""

    from zrl.cli.report import report_main
    from zrl.cli.sweep import sweep_main

    path = _sweep_file(tmp_path, f'[sweep]\nconfig = "{CARTPOLE}"\nseeds = ["a"]\n')
    out = tmp_path / "out"
    proc = run_command("zrl-sweep", path, "--out", out, cwd=tmp_path, timeout=60)
    assert proc.returncode == 2
    assert "zrl-sweep: error:" in proc.stderr and "sweep.seeds" in proc.stderr and "Traceback" not in proc.stderr
    assert not out.exists()
    monkeypatch.chdir(tmp_path)
    for args, reason in [
        (["--resume", tmp_path, "--out", out], "--resume DIR continues in DIR"),
        (["--resume", tmp_path], "not a sweep folder"),
        ([path, "--retry-failed"], "--retry-failed goes with --resume DIR"),
    ]:
        assert reason in refused(sweep_main, *args)
    assert "not a zrl run folder" in refused(report_main, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sweep.toml"]


# ---- reports on run folders whose contents a test controls -------------------------------------------------


def _fake_run(folder: Path, env: str, seed: int, returns: list[float], frames_per_episode: int = 1000) -> Path:
    """A run folder with the files zrl-report reads: config.toml, episodes.csv, metrics.csv."""
    folder.mkdir(parents=True)
    (folder / "config.toml").write_text(f'[env]\nid = "{env}"\n\n[run]\nseed = {seed}\n')
    lines = ["episode,worker,env_frames,raw_return,wall_time"]
    for i, r in enumerate(returns):
        lines.append(f"{i + 1},0,{(i + 1) * frames_per_episode},{r},{1000.0 + i}")
    (folder / "episodes.csv").write_text("\n".join(lines) + "\n")
    total = len(returns) * frames_per_episode
    (folder / "metrics.csv").write_text(
        f"wall_time,elapsed_s,env_frames,learner_step\n1000.0,0.0,0,0\n{1000.0 + len(returns)},{len(returns)},{total},10\n"
    )
    return folder


@pytest.mark.unit
def test_report_normalises_over_games_and_refuses_games_it_cannot_normalise(tmp_path):
    # Breakout: random 2, human 30 (zrl.scores); Pong: random -21, human 15
    for seed, (b, p) in enumerate([(16.0, -3.0), (30.0, 15.0)], start=1):
        _fake_run(tmp_path / "arm" / f"breakout-elite/seed{seed}" / "run", "ALE/Breakout-v5", seed, [b] * 120)
        _fake_run(tmp_path / "arm" / f"pong-elite/seed{seed}" / "run", "ALE/Pong-v5", seed, [p] * 120)
    _fake_run(tmp_path / "arm" / "breakout-elite/seed3" / "run", "ALE/Breakout-v5", 3, [23.0] * 120)
    runs = [str(p) for p in sorted(tmp_path.glob("arm/*/seed*/run"))]
    built = report.build(runs, reps=500)
    assert built["normalised"] and built["arms"] == ["elite"]
    agg = built["aggregates"]["elite"]
    b_hns = [scores.human_normalised("breakout", s) for s in (16.0, 30.0, 23.0)]
    p_hns = [scores.human_normalised("pong", s) for s in (-3.0, 15.0)]
    assert agg["mean"][0] == pytest.approx(np.mean(b_hns + p_hns))  # every run, 3 of one game and 2 of the other
    assert agg["runs_per_game"] == [3, 2]
    text = report.markdown(built)
    assert "| elite | 3, 2 |" in text and "human-normalised" in text
    _fake_run(tmp_path / "cart" / "seed1" / "run", "CartPole-v1", 1, [20.0] * 10)
    with pytest.raises(ConfigError, match="CartPole-v1 has no reference score"):
        report.build([*runs, str(tmp_path / "cart" / "seed1" / "run")], reps=100)
    with pytest.raises(ConfigError, match="not a zrl run folder"):
        report.build([str(tmp_path)], reps=100)


@pytest.mark.unit
def test_arms_leave_out_the_game():
    assert report._without_game("breakout-elite", "breakout") == "elite"
    assert report._without_game("SpaceInvaders-elite", "space_invaders") == "elite"
    assert report._without_game("space_invaders_elite", "space_invaders") == "elite"
    assert report._without_game("elite", "pong") == "elite"
    row = {"variant": "elite", "grid": {"env.id": "ALE/Breakout-v5", "learner.learning_rate": 0.0003}}
    assert report._sweep_arm(row, "breakout") == "elite-learning_rate=0.0003"
    assert report._sweep_arm({"variant": "", "grid": {"env.id": "ALE/Pong-v5"}, "label": "x"}, "pong") == "x"


@pytest.mark.unit
def test_report_reads_every_run_at_the_common_frame_budget(tmp_path):
    """The longer run is read where the shorter one ended, not at its own end."""
    short = _fake_run(tmp_path / "a" / "seed1" / "run", "CartPole-v1", 1, [10.0] * 100)
    long = _fake_run(tmp_path / "a" / "seed2" / "run", "CartPole-v1", 2, [10.0] * 100 + [500.0] * 100)
    built = report.build([str(short), str(long)], reps=200)
    assert built["budgets"]["CartPole-v1"] == 100_000
    assert [r["score"] for r in built["runs"]] == [10.0, 10.0]
    assert not built["normalised"] and built["arms"] == ["a"]
    # --frames: each run read at the budget given, which every run must have reached
    built = report.build([str(long)], reps=200, frames=150_000)
    assert built["budgets"]["CartPole-v1"] == 150_000 and built["runs"][0]["score"] == 255.0  # 50 and 50 episodes
    assert built["minutes"]["CartPole-v1"] == pytest.approx(149 / 60, abs=1e-3)  # its 150th episode ended at 149 s
    assert "given with --frames" in report.markdown(built)
    with pytest.raises(ConfigError, match=r"--frames 150,000: 1 run stopped short of it: .*seed1/run \(100,000\)"):
        report.build([str(short), str(long)], reps=200, frames=150_000)
    from zrl.cli.report import report_main

    assert "stopped short" in refused(report_main, str(short), "--frames", "150000")
    # the minutes are those in which the fastest run reached the budget, not the shortest run's end
    fast = _fake_run(tmp_path / "a" / "seed3" / "run", "CartPole-v1", 3, [10.0] * 100, frames_per_episode=2000)
    built = report.build([str(short), str(fast)], reps=200)
    assert built["budgets"]["CartPole-v1"] == 100_000  # both ran 100 s; the fast one was at 100,000 frames at 49 s
    assert built["minutes"]["CartPole-v1"] == pytest.approx(49 / 60, abs=1e-3)


@pytest.mark.unit
def test_report_names_each_runs_machine_and_says_when_minutes_compare_machines(tmp_path):
    """starts.csv, a row per start of a run: a run resumed on another CPU names both; a game whose runs ran on
    several CPUs, or do not say, gets a note that its minutes do not compare the arms alone."""
    runs = [_fake_run(tmp_path / "a" / f"seed{seed}" / "run", "CartPole-v1", seed, [10.0] * 100) for seed in (1, 2, 3)]
    header = "wall_time,env_frames,cpu,cores,ram_gib,zrl\n"
    (runs[0] / "starts.csv").write_text(
        header + "1.0,0,CPU A (AVX2),2,24.0,0.1.0\n2.0,50000,CPU A (AVX2),2,24.0,0.1.0\n"
    )
    (runs[1] / "starts.csv").write_text(
        header + "1.0,0,CPU A (AVX2),2,24.0,0.1.0\n2.0,50000,CPU B (AVX-512),2,24.0,0.1.0\n"
    )
    built = report.build([str(r) for r in runs], reps=100)
    assert [r["machines"] for r in built["runs"]] == [["CPU A (AVX2)"], ["CPU A (AVX2)", "CPU B (AVX-512)"], []]
    text = report.markdown(built)
    assert "CartPole-v1: its runs ran on 2 CPUs (CPU A (AVX2); CPU B (AVX-512))" in text
    assert "CartPole-v1: 1 of 3 runs do not say which machine they ran on" in text
    assert "| 100 | CPU A (AVX2) + CPU B (AVX-512) |" in text and text.count("| 100 | - |") == 1
    (runs[1] / "starts.csv").write_text(header + "1.0,0,CPU A (AVX2),2,24.0,0.1.0\n")
    text = report.markdown(report.build([str(r) for r in runs[:2]], reps=100))
    assert "CPUs" not in text and "do not say" not in text
    # a run folder is untrusted: a name that would break the table, or run on for pages, is made one short cell
    (runs[2] / "starts.csv").write_text(
        header + f'1.0,0,"A\n| fake | <b>row</b>",2,24.0,0.1.0\n2.0,9,{"x" * 500},2,1,0\n'
    )
    machines = report.build([str(runs[2])], reps=100)["runs"][0]["machines"]
    assert machines[0] == "A / fake / (b)row(/b)" and len(machines[1]) == 120


@pytest.mark.unit
def test_left_out_runs_are_listed_by_arm_unless_another_sweep_given_has_them_done(tmp_path):
    """Sweeps of one suite, each run with --only: a run done in one is not left out because another holds it
    pending (even where the suite's settings changed in between), a run done in two counts once, and the rest
    come one line per arm and status, the most telling, each seed once."""
    first, second, third, fourth = (tmp_path / name for name in ("first", "second", "third", "fourth"))
    done = _fake_run(first / "a" / "seed1" / "run", "CartPole-v1", 1, [10.0] * 100)

    def index(out: Path, statuses: dict, sets=()) -> None:
        runs = [
            {
                "label": key.split("/")[0],
                "seed": int(key[-1]),
                "status": status,
                "variant": key.split("/")[0],
                "grid": {},
                "sets": list(sets),
            }
            | ({"folder": str(done)} if status == "done" else {})
            for key, status in statuses.items()
        ]
        out.mkdir(parents=True, exist_ok=True)
        (out / "index.json").write_text(json.dumps({"runs": runs}))

    index(first, {"a/seed1": "done", "a/seed2": "stopped", "b/seed1": "pending", "b/seed2": "pending"})
    index(second, {"b/seed2": "pending", "a/seed1": "pending", "a/seed2": "failed", "b/seed1": "pending"})
    index(third, {"a/seed1": "done", "c/seed1": "pending"})
    index(fourth, {"a/seed1": "pending", "b/seed1": "pending", "c/seed1": "stopped"}, sets=["learner.replay_ratio=0"])
    built = report.build([str(first), str(second), str(third), str(fourth)], reps=100)
    assert len(built["runs"]) == 1  # a/seed1, done in the first and the third, counts once
    expected = [
        "a/seed2 (failed)",
        "b/seeds 1, 2 (pending)",
        "c/seed1 (stopped)",  # pending in one sweep, stopped in a later one of the suite: the run once
        "a/seed1 (done twice, the first sweep's kept)",
    ]
    assert built["left_out"] == expected
    assert "Left out: " + "; ".join(expected) + "." in report.markdown(built)


@pytest.mark.unit
def test_retry_failed_makes_each_selected_failed_run_pending_in_a_new_folder_and_leaves_the_others():
    """--retry-failed (sweep._retry) on several failed runs: each one --only selects starts afresh (no folder, no
    exit code, no log tail), and is said; done, stopped and unselected failed runs stay as they were. The real
    sweep test retries one."""
    from zrl.experiment import sweep

    plan = [("a", 1, "done"), ("b", 1, "failed"), ("b", 2, "failed"), ("c", 1, "stopped"), ("d", 1, "failed")]
    runs = [
        sweep_plan.Run(label, label, {}, seed, None, [], status, f"/runs/{label}{seed}", 0 if status == "done" else 1)
        for label, seed, status in plan
    ]
    for run in runs:
        run.started, run.ended, run.log_tail = 1.0, 2.0, ["last line"]
    said: list[str] = []
    sweep._retry(sweep_plan.Sweep(Path("suite.toml"), [1, 2], 1, runs), ["a", "b", "c"], said.append)
    assert [r.status for r in runs] == ["done", "pending", "pending", "stopped", "failed"]
    assert [r.folder for r in runs] == ["/runs/a1", None, None, "/runs/c1", "/runs/d1"]
    assert [(r.exit_code, r.started, r.log_tail) for r in runs[1:3]] == [(None, None, [])] * 2
    assert runs[4].log_tail == ["last line"] and runs[4].exit_code == 1
    assert said == [f"zrl-sweep: b/seed{s}: failed with exit code 1; starting it again" for s in (1, 2)]


# ---- real sweeps ----------------------------------------------------------------------------------------------


def _tiny(tmp_path: Path, frames: int, extra: str = "") -> Path:
    return _sweep_file(
        tmp_path,
        f"""
[sweep]
config = "{CARTPOLE}"
seeds = [1]
set = {{ "run.max_env_frames" = {frames}, "workers.count" = 1, "run.log_interval_s" = 0.5, "run.checkpoint_every_steps" = 20 }}

[[variant]]
name = "uniform"

[[variant]]
name = "elite"
replay = '[{{"type": "custom", "capacity": 200, "sample_ratio": 0.5, "dist_function": "ln_norm", "sample_strategy": "elite_sampling", "lambda_batch_multiplier": 3}}, {{"type": "queue", "capacity": 1, "sample_ratio": 0.5}}]'
{extra}
""",
    )


@pytest.mark.e2e
@pytest.mark.background
def test_a_sweep_runs_every_run_and_the_report_aggregates_them(tmp_path, no_leaks):
    """One seed of three variants, one of which cannot start: the index, zrl-report on the sweep, --retry-failed.
    Several seeds' order and commands: test_a_sweep_is_variants_by_grid_points_by_seeds_seed_by_seed; their
    aggregation: the statistics' and the report's tests above."""
    path = _tiny(
        tmp_path,
        6000,
        '\n[[variant]]\nname = "broken"\nset = { "env.id" = "NoSuchGame-v0", "model.kind" = "mlp" }\n',
    )
    out = tmp_path / "out"
    proc = run_command("zrl-sweep", path, "--out", out, cwd=tmp_path, timeout=400)
    assert proc.returncode == 1, proc.stderr  # the broken variant failed; the others ran
    index = json.loads((out / "index.json").read_text())
    status = {f"{r['label']}/seed{r['seed']}": r["status"] for r in index["runs"]}
    assert status == {"uniform/seed1": "done", "elite/seed1": "done", "broken/seed1": "failed"}
    broken = next(r for r in index["runs"] if r["label"] == "broken")
    assert broken["exit_code"] not in (0, None) and any("NoSuchGame" in line for line in broken["log_tail"])
    assert "FAILED" in proc.stderr
    for row in index["runs"]:
        if row["status"] == "done":
            assert Path(row["folder"], "episodes.csv").is_file() and row["folder"].startswith(str(out))
    rep = run_command("zrl-report", out, "--out", tmp_path / "rep" / "tiny", "--reps", "500", cwd=tmp_path, timeout=120)
    assert rep.returncode == 0, rep.stderr
    assert "| elite | 1 |" in rep.stdout and "| uniform | 1 |" in rep.stdout
    assert "Left out: broken/seed1 (failed)." in rep.stdout
    assert rep.stdout.count(f"| {cpu_description()} |") == 2 and "CPUs" not in rep.stdout  # starts.csv
    for suffix in (".md", ".json", "_curves.png", "_profile.png"):
        written = tmp_path / "rep" / f"tiny{suffix}"
        assert written.is_file() and written.stat().st_size > 500, written
    assert (tmp_path / "rep" / "tiny_curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # --retry-failed starts the failed runs again; the done ones stay
    again = run_command("zrl-sweep", "--resume", out, "--retry-failed", cwd=tmp_path, timeout=120)
    assert again.returncode == 1 and again.stderr.count("starting it again") == 1, again.stderr
    rows = json.loads((out / "index.json").read_text())["runs"]
    assert [r["status"] for r in rows] == ["done", "done", "failed"]
    assert [r["ended"] for r in rows if r["status"] == "done"] == [
        r["ended"] for r in index["runs"] if r["status"] == "done"
    ]
    assert (out / "broken" / "seed1" / "launch.log").read_text().count("$ zrl-launch") == 2


@pytest.mark.e2e
def test_ctrl_c_stops_the_sweep_in_order_and_resume_finishes_it(tmp_path, no_leaks):
    path = _tiny(tmp_path, 60_000)  # stopped on the way: the first checkpoint comes 20 learner steps in
    out = tmp_path / "out"
    proc = subprocess.Popen(command("zrl-sweep", path, "--out", out), cwd=tmp_path, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        folder = None
        while time.monotonic() < deadline and folder is None:  # the first run is going and has a checkpoint
            rows = json.loads((out / "index.json").read_text())["runs"] if (out / "index.json").is_file() else []
            first = rows[0] if rows else {}
            if first.get("status") == "running" and first.get("folder"):
                if list(Path(first["folder"], "checkpoints").glob("ckpt_*.pt")):
                    folder = first["folder"]
            time.sleep(0.2)
        assert folder, "the first run never wrote a checkpoint"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    rows = json.loads((out / "index.json").read_text())["runs"]
    assert [r["status"] for r in rows] == ["stopped", "pending"], err
    assert rows[0]["exit_code"] == 130 and rows[0]["folder"] == folder
    # the stopped run only: a pending run's start is test_a_sweep_runs_every_run_and_the_report_aggregates_them's
    resumed = run_command("zrl-sweep", "--resume", out, "--only", "uniform/seed1", cwd=tmp_path, timeout=400)
    assert resumed.returncode == 0, resumed.stderr
    assert "uniform/seed1: resumed" in resumed.stderr
    rows = json.loads((out / "index.json").read_text())["runs"]
    assert [r["status"] for r in rows] == ["done", "pending"]
    assert rows[0]["folder"] == folder  # continued in its own folder
    assert "--resume" in Path(out, "uniform", "seed1", "launch.log").read_text()
