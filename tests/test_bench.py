"""zrl-bench: every mode runs for a moment on real ALE Pong, real rings, sockets and processes, and writes
every field its JSON promises. Speed is never asserted here; perf/ records it."""

from __future__ import annotations

import csv
import json

import pytest
from conftest import REPO, refused, run_command

from zrl.config import ReplayConfig

SMOKE = REPO / "config" / "smoke.toml"
# a few seconds of zrl-launch: 4 s of warm-up once its workers report (the learner is stepping by then), 2 s measured
SHORT_PIPELINE = ("--config", SMOKE, "--seconds", 2, "--warmup", 4, "--workers", 1)
TINY = ["--config", SMOKE, "--seconds", "0.5"]
MACHINE = {"date", "cpu", "cores", "logical_cpus", "ram_gib", "gpu", "platform", "versions", "command"}


def _bench(tmp_path, *args, timeout: float = 300) -> dict:
    out = tmp_path / "bench.json"
    done = run_command("zrl-bench", *args, "--json", out, cwd=tmp_path, timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"wrote {out}" in done.stdout
    doc = json.loads(out.read_text())
    assert MACHINE <= set(doc["machine"]) and doc["machine"]["cores"] >= 1
    assert {"torch", "numpy", "ale-py", "pyzmq"} <= set(doc["machine"]["versions"])
    assert doc["machine"]["command"].startswith("zrl-bench ")
    doc["stdout"] = done.stdout
    return doc


def _positive(*values) -> None:
    for value in values:
        assert isinstance(value, (int, float)) and value > 0, values


@pytest.mark.e2e
def test_env_mode_measures_the_ceiling_and_the_peers_it_can(tmp_path, no_leaks):
    doc = _bench(tmp_path, "env", *TINY, "--workers", 2, "--envs-per-worker", 2)
    ceiling = doc["result"]["ceiling"]
    assert (ceiling["processes"], ceiling["envs_per_process"]) == (2, 2)
    _positive(ceiling["steps_per_s"], ceiling["frames_per_s"], ceiling["frames_per_s_per_core"])
    assert ceiling["frames_per_s"] == pytest.approx(4 * ceiling["steps_per_s"], rel=1e-3)  # frame skip 4
    peers = {p["peer"] for p in doc["result"]["peers"]}
    assert "ale-py AtariVectorEnv" in peers  # ale-py is a requirement; the others are optional extras
    for peer in doc["result"]["peers"]:
        _positive(peer["steps_per_s"], peer["frames_per_s"])
    named = len(peers) + len(doc["result"]["not_installed"])
    assert named == 3, doc["result"]  # every peer is either measured or said to be missing


@pytest.mark.e2e
def test_sampling_mode_gives_a_ratio_to_the_ceiling_for_every_grid_point(tmp_path, no_leaks):
    doc = _bench(tmp_path, "sampling", *TINY, "--workers", "1,2", "--envs-per-worker", 2, "--warmup", 0.5)
    rows = doc["result"]["rows"]
    assert [(r["workers"], r["envs_per_worker"]) for r in rows] == [(1, 2), (2, 2)]
    for row in rows:
        _positive(row["frames_per_s"], row["ceiling_frames_per_s"], row["ratio_to_ceiling"])
        assert row["ratio_to_ceiling"] == pytest.approx(row["frames_per_s"] / row["ceiling_frames_per_s"], rel=1e-3)
        assert row["policy"] == "uniform" and row["broker_unrolls_received"] > 0 and row["broker_decode_errors"] == 0
    assert "ratio_to_ceiling" in doc["stdout"]


@pytest.mark.e2e
def test_transport_mode_measures_every_hop_and_the_remote_path_beside_the_ring(tmp_path, no_leaks):
    """zrl-bench transport --remote: the ring, the queue, index messages, weights, and the remote path without and
    with CurveZMQ (--remote adds it to the same report, so one run checks both)."""
    result = _bench(tmp_path, "transport", *TINY, "--remote")["result"]
    assert result["ring"]["torn"] == 0 and result["ring"]["slots"] > 0
    _positive(result["ring"]["gb_per_s"], result["queue"]["gb_per_s"], result["queue"]["ring_over_queue"])
    index = result["index_messages"]
    _positive(index["messages_per_s"], index["round_trip_us_median"], index["round_trip_us_p99"])
    assert index["decode_errors"] == 0 and index["message_bytes"] > 0
    _positive(result["weights"]["latency_ms_median"], result["weights"]["message_mb"])
    assert {t["target"] for t in result["targets"]} == {
        "ring_gb_per_s",
        "index_messages_per_s",
        "queue_slower_than_ring",
    }
    remote = result["remote"]
    assert [p["curve"] for p in remote["paths"]] == [False, True]
    for path in remote["paths"]:
        _positive(path["frames_per_s"], path["ingest_cpu_us_per_frame"], path["sender_cpu_us_per_frame"])
        _positive(path["ratio_to_shm"], path["bytes_per_frame"])
        assert path["refused"] == 0 and path["forwarded_unrolls"] > 0
        assert path["bytes_per_frame"] < path["raw_bytes_per_frame"] / 5  # Pong's frames, compressed


@pytest.mark.e2e
def test_learner_mode_compares_the_fed_learner_with_a_bare_loop(tmp_path, no_leaks):
    result = _bench(tmp_path, "learner", *TINY, "--capacity", 16)["result"]
    _positive(result["fed_steps_per_s"], result["bare_steps_per_s"], result["ratio_to_bare"])
    assert (result["batch_size"], result["unroll_length"], result["replay_capacity"]) == (4, 10, 16)
    assert result["fed_samples_per_s"] == pytest.approx(result["fed_steps_per_s"] * 40, rel=1e-2)
    assert result["targets"][0]["target"] == "learner_ratio_to_bare"


@pytest.mark.e2e
def test_elite_mode_times_elite_and_attentive_batches_against_the_learner_step(tmp_path, no_leaks):
    result = _bench(
        tmp_path, "elite", "--config", SMOKE, "--capacity", 32, "--set", "model.feature_size=16", "--repeats", 2
    )["result"]
    assert [r["sampler"] for r in result["rows"]] == ["elite", "attentive"]
    _positive(result["learner_step_s"], *(r["prepare_s"] for r in result["rows"]))
    assert result["feature_size"] == 16 and result["capacity"] == 32
    assert result["feature_steps"] == ReplayConfig().feature_steps == 0  # all steps, as the reference


@pytest.mark.e2e
def test_pipeline_observers_runs_each_watcher_in_turn_and_a_page_reads_the_dashboard(tmp_path, no_leaks):
    doc = _bench(
        tmp_path,
        "pipeline",
        "--observers",
        "--rounds",
        1,
        *("--config", SMOKE, "--seconds", 2, "--warmup", 6, "--workers", 1),
        "--envs-per-worker",
        2,
    )
    result = doc["result"]
    assert [r["observer"] for r in result["rows"]] == ["tensorboard", "dashboard", "none"]  # round 1's order
    for row in result["rows"]:
        _positive(row["learner_steps_per_s"], row["frames_per_s"])
    dashboard = next(r for r in result["rows"] if r["observer"] == "dashboard")
    assert dashboard["page_updates"] >= 3  # the client read the page's stream while the run went
    none = next(s for s in result["summary"] if s["observer"] == "none")
    assert none["learner_ratio"] == 1.0 and "learner_ratio_range" in doc["stdout"]


@pytest.mark.e2e
def test_pipeline_remote_runs_a_zrl_worker_beside_a_local_one_in_turn(tmp_path, no_leaks):
    doc = _bench(tmp_path, "pipeline", "--remote", "--rounds", 1, *SHORT_PIPELINE, "--envs-per-worker", 2)
    result = doc["result"]
    assert [r["workers"] for r in result["rows"]] == ["1 local + 1 remote", "2 local"]  # round 1's order
    for row in result["rows"]:
        _positive(row["learner_steps_per_s"], row["frames_per_s"])
    remote = next(r for r in result["rows"] if r["workers"] == "1 local + 1 remote")
    assert remote["joined"] is True
    local = next(s for s in result["summary"] if s["workers"] == "2 local")
    assert local["learner_ratio"] == 1.0 and "the 2 local run beside it" in doc["stdout"]


@pytest.mark.e2e
def test_pipeline_replay_checkpoint_runs_without_and_with_the_replays_saved_and_sizes_them(tmp_path, no_leaks):
    apex = REPO / "config" / "apex_iqn_cartpole.toml"  # a prioritized replay: the smoke run's queue holds little
    doc = _bench(
        tmp_path,
        "pipeline",
        "--replay-checkpoint",
        *("--rounds", 1, "--config", apex, "--seconds", 2, "--warmup", 4, "--set", "apex.learn_start=100"),
    )
    result = doc["result"]
    assert [r["replay_checkpoint"] for r in result["rows"]] == ["on", "off"]  # round 1's order
    for row in result["rows"]:
        _positive(row["learner_steps_per_s"], row["frames_per_s"])
        assert 0 <= row["learner_wait"] <= 1
    on = next(r for r in result["rows"] if r["replay_checkpoint"] == "on")
    assert on["replay_saves"] >= 1 and on["replay_frames"] > 0 and on["mb_per_million_frames"] > 0, on
    assert "mb_per_million_frames" in doc["stdout"]


@pytest.mark.e2e
def test_pipeline_evaluation_runs_without_and_with_an_evaluator_and_counts_its_evaluations(tmp_path, no_leaks):
    doc = _bench(
        tmp_path,
        "pipeline",
        "--evaluation",
        # at the nice value the mode runs beside the config's: two ways, not three (CI's time); CartPole's
        # untrained episodes are tens of steps, so that evaluations finish in any run's seconds
        *("--rounds", 1, "--config", CARTPOLE, "--seconds", 4, "--warmup", 4, "--set", "eval.nice=5"),
        *("--set", "eval.episodes=1"),
    )
    result = doc["result"]
    assert result["eval_interval_frames"] == 5000
    assert [r["evaluation"] for r in result["rows"]] == ["on, nice 5", "off"]  # round 1's order
    for row in result["rows"]:
        _positive(row["learner_steps_per_s"], row["frames_per_s"])
    on = next(r for r in result["rows"] if r["evaluation"] == "on, nice 5")
    assert on["evaluations"] >= 1 and on["eval_episodes"] == on["evaluations"] and on["eval_seconds"] > 0, on
    assert on["evaluator_restarts"] == 0, on
    assert [s["evaluation"] for s in result["summary"]] == ["off", "on, nice 5"]
    assert result["summary"][0]["learner_ratio"] == 1.0 and "eval_seconds" in doc["stdout"]


@pytest.mark.e2e
def test_pipeline_mode_breaks_the_time_down_by_role_and_names_the_bottleneck(tmp_path, no_leaks):
    doc = _bench(tmp_path, "pipeline", *SHORT_PIPELINE, "--envs-per-worker", 2)
    result = doc["result"]
    _positive(result["frames_per_s"], result["window_s"])
    per = result["seconds_per_second"]
    for section in (
        "env_step",
        "inference",
        "ring_write",
        "send",
        "broker_insert",
        "broker_sample",
        "learner_gather",
        "learner_step",
        "learner_publish",
        "learner_wait",
        "weights_wait",
    ):
        assert section in per and per[section] >= 0
    assert per["env_step"] > 0 and per["learner_step"] > 0
    assert result["bottleneck"]["role"].split()[0] in {"learner", "broker", "workers"}
    assert "bottleneck:" in doc["stdout"]
    lim = result["limit"]  # the machine's limit from the unit costs, measured in the same run
    _positive(
        lim["env_step_core_ms"],
        lim["inference_core_ms_per_obs"],
        lim["learner_core_ms_per_sample"],
        lim["learner_gflop_per_step"],
        lim["matmul_gflop_per_s"],
        lim["limit_trained_steps_per_s"],
    )
    per_sample = lim["fresh_share"] * (lim["env_step_core_ms"] + lim["inference_core_ms_per_obs"])
    per_sample += lim["learner_core_ms_per_sample"]
    assert (
        abs(lim["limit_trained_steps_per_s"] - lim["cores"] * 1e3 / per_sample)
        <= 0.01 * lim["limit_trained_steps_per_s"]
    )
    samples = result["learner_steps_per_s"] * 4 * 10  # smoke.toml's batch of 4 x 10
    assert abs(lim["trained_steps_per_s"] - samples) <= 0.01 * samples + 0.1
    assert {t["target"] for t in result["targets"]} == {"pipeline_ratio_to_limit", "learner_ratio_to_matmul"}
    assert "env steps trained on per second" in doc["stdout"] and "GFLOP" in doc["stdout"]


@pytest.mark.e2e
def test_suggest_runs_its_grid_and_names_the_best(tmp_path, no_leaks):
    doc = _bench(
        tmp_path,
        "--suggest",
        *SHORT_PIPELINE,
        "--envs-per-worker",
        "1,2",
    )
    rows = doc["result"]["rows"]
    assert [(r["workers"], r["envs_per_worker"]) for r in rows] == [(1, 1), (1, 2)]
    best = doc["result"]["best"]
    assert (best["workers"], best["envs_per_worker"]) in {(1, 1), (1, 2)}
    assert f"--workers {best['workers']} --envs-per-worker {best['envs_per_worker']}" in doc["stdout"]


@pytest.mark.integration
@pytest.mark.parametrize(
    "args, expected",
    [
        ((), "give one of MODE"),
        (("nope",), "No such command 'nope'"),
        (("env", "--suggest"), "No such option '--suggest'"),
        (("env", "--remote"), "No such option '--remote'"),  # each mode takes only its own options
        (("elite", "--seconds", "1"), "No such option '--seconds'"),
        (("transport", "--workers", "2"), "No such option '--workers'"),
        (("env", "--workers", "two"), "--workers 'two': expected a positive integer"),
        (("env", "--workers", "1,2"), "env: --workers takes one number, not a list"),
        (("sampling", "--workers", "two"), "--workers 'two': expected a positive integer or a comma list"),
        (("sampling", "--envs-per-worker", "0"), "every value must be at least 1"),
        (("env", "--seconds", "0"), "--seconds must be > 0"),
        (("env", "--seconds", "x"), "Invalid value for '--seconds'"),
        (("elite", "--lambda", "0.5"), "--lambda must be >= 1"),
        (("pipeline", "--rounds", "0"), "--rounds must be >= 1"),
        (("pipeline", "--remote", "--observers"), "give one of --remote, --observers"),
        (("env", "--set", 'env.id="ALE/Nope-v5"'), "env.id"),
        (("learning", "--config", SMOKE), "learning needs a budget"),
        (("learning", "--runs", "no/such/run"), "not a zrl run folder"),
        (("learning", "--seconds", "10", "--seeds", "1,x"), "--seeds '1,x'"),
        (("learning", "--seconds", "10", "--workers", "1,2"), "takes one number"),
    ],
)
def test_bench_mistakes_exit_2_in_one_line(tmp_path, monkeypatch, args, expected):
    """zrl-bench's command in this process (click's CliRunner): exit code 2, one line naming the mistake, no
    traceback (an exception would fail the test), nothing written. The installed command's own refusal is
    test_the_zrl_bench_command_refuses_a_mistake_in_one_line."""
    from zrl.cli.bench import bench_main

    monkeypatch.chdir(tmp_path)
    assert expected in refused(bench_main, *args)
    assert not any(tmp_path.iterdir())


@pytest.mark.e2e
def test_the_zrl_bench_command_refuses_a_mistake_in_one_line(tmp_path, no_leaks):
    done = run_command("zrl-bench", "sampling", "--workers", "two", cwd=tmp_path, timeout=120)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        "zrl-bench: error: --workers 'two': expected a positive integer or a comma list such as 1,2,4"
    ]
    done = run_command("zrl-bench", "env", "--remote", cwd=tmp_path, timeout=120)  # an option env does not take
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "No such option '--remote'" in done.stderr, done.stderr


@pytest.mark.e2e
def test_a_killed_learner_bench_leaves_no_role_suspended(tmp_path, no_leaks):
    """zrl-bench learner suspends the fed learner while the bare loop runs. SIGKILLed then, the bench cannot
    resume it; its watchdog does, so the learner acts on its parent-death signal and every role exits."""
    import signal
    import subprocess
    import time

    import psutil
    from conftest import command, zrl_processes, zrl_segments

    from zrl.launch import sweep_stale

    proc = subprocess.Popen(
        command("zrl-bench", "learner", "--config", SMOKE, "--seconds", "40", "--capacity", "16"),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 240
        for line in proc.stdout:  # the progress lines
            if "round 1 of" in line:
                break
            assert time.monotonic() < deadline, "no round began"
        time.sleep(3)  # inside the first bare segment (20 s): the learner is stopped
        learner = [p for p in zrl_processes() if "zrl-learner" in " ".join(p.info["cmdline"] or [])]
        assert learner and learner[0].status() == "stopped"
        children = psutil.Process(proc.pid).children(recursive=True)  # roles, the bare loop, the watchdog
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        _, alive = psutil.wait_procs(children, timeout=30)
        assert not alive, [(p.pid, p.name()) for p in alive]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    deadline = time.monotonic() + 5  # its reaper unlinks the killed bench's rings and socket folder
    while [s for s in zrl_segments() if f"_{proc.pid}_" in s] and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [s for s in zrl_segments() if f"_{proc.pid}_" in s]
    sweep_stale()  # the bench's own scratch folder (not its wiring's): the next zrl-launch or zrl-bench sweeps it


CARTPOLE = REPO / "config" / "cartpole.toml"


@pytest.mark.e2e
@pytest.mark.background
def test_learning_mode_trains_each_seed_and_draws_the_curve_beside_the_reference(tmp_path, no_leaks):
    """The real zrl-launch on CartPole for 15,000 env frames, two seeds one after the other: the JSON holds each
    run's 100-episode mean after every episode (against frames and minutes) and the command that made it, and
    the PNG is drawn. Then --runs reads the same folders again without training, and gives the same curves."""
    png = tmp_path / "curve.png"
    doc = _bench(
        tmp_path,
        "learning",
        "--config",
        CARTPOLE,
        "--frames",
        15000,
        "--seeds",
        "3,4",
        "--png",
        png,
        "--results-dir",
        tmp_path / "runs",
        timeout=600,
    )
    result = doc["result"]
    assert [c["seed"] for c in result["curves"]] == [3, 4] and result["env"] == "CartPole-v1"
    assert result["references"] == []  # the stored reference is Pong's
    for curve in result["curves"]:
        assert "run.seed=" + str(curve["seed"]) in curve["command"] and "run.max_env_frames=15000" in curve["command"]
        points = curve["points"]  # columns
        assert curve["episodes"] == len(points["episode"]) >= 100 and curve["env_frames"] >= 15000
        frames, minutes, means = points["env_frames"], points["minutes"], points["mean_return_100"]
        assert frames == sorted(frames) and minutes == sorted(minutes) and minutes[0] >= 0
        with open(f"{curve['run']}/episodes.csv") as fh:  # the mean is over the last 100 raw returns to end
            ended = sorted(csv.DictReader(fh), key=lambda row: float(row["wall_time"]))
        returns = [float(row["raw_return"]) for row in ended]
        assert means[-1] == pytest.approx(sum(returns[-100:]) / 100, abs=1e-3)
        assert means[0] == pytest.approx(returns[0], abs=1e-3)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20_000
    assert f"wrote {png}" in doc["stdout"] and "seed 3" in doc["stdout"]

    again = _bench(tmp_path, "learning", *[a for c in result["curves"] for a in ("--runs", c["run"])])
    assert again["result"]["env"] == "CartPole-v1" and again["result"]["references"] == []  # from the runs' configs
    assert [c["points"] for c in again["result"]["curves"]] == [c["points"] for c in result["curves"]]
    assert [c["seed"] for c in again["result"]["curves"]] == [3, 4]


@pytest.mark.unit
def test_the_pong_reference_curve_is_kept_with_its_source():
    from zrl.bench.learning import _reference_at, references

    (ref,) = references("ALE/Pong-v5")
    assert "ppo_atari_envpool.py" in ref["source"] and "seed 1" in ref["source"]
    assert [p["minutes"] for p in ref["points"]] == sorted(p["minutes"] for p in ref["points"])
    assert ref["points"][-1] == {"env_frames": 5_200_000, "minutes": 62, "mean_return": 12.1}
    assert _reference_at(ref, 62) == pytest.approx(12.1) and _reference_at(ref, 10) is None
    assert _reference_at(ref, 40.5) == pytest.approx((-6.8 + -1.0) / 2)


@pytest.mark.unit
def test_a_learning_json_reads_back_to_the_points_it_was_written_from():
    from zrl.bench.learning import for_json, from_json

    points = [
        {"episode": i, "env_frames": 1000 * i, "minutes": 0.5 * i, "mean_return_100": -21.0 + i} for i in (1, 2, 3)
    ]
    result = {"env": "ALE/Pong-v5", "curves": [{"label": "seed 1", "episodes": 3, "points": points}]}
    written = json.loads(json.dumps(for_json(result)))
    assert written["curves"][0]["points"]["env_frames"] == [1000, 2000, 3000]
    assert from_json(written) == result
