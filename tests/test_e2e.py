"""The real zrl-launch on real ALE Pong: to its budget, and stopped by Ctrl-C in the middle."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import psutil
import pytest
import torch
from conftest import REPO, assert_loadable, command, csv_rows, reaped, refused, run_command, tensorboard_scalars
from test_launch_refusals import BAD_INPUT

from zrl import checkpoint, config
from zrl.cli.launch import launch_main
from zrl.machine import cpu_description

pytestmark = pytest.mark.e2e

SMOKE = REPO / "config" / "smoke.toml"
RUN_FILES = ["config.toml", "episodes.csv", "metrics.csv", "zrl.log", "starts.csv", "checkpoints"]


def _refused(*args) -> str:
    """zrl-launch ``args`` refused in this process (conftest.refused)."""
    return refused(launch_main, *args)


def _run_dir(cwd: Path) -> Path:
    runs = list((cwd / "results").iterdir())
    assert len(runs) == 1, runs
    assert runs[0].name.startswith("ALE-Pong-v5_")
    return runs[0]


def test_smoke_run_to_budget(tmp_path, no_leaks):
    result = run_command("zrl-launch", "--config", SMOKE, "--workers", 2, cwd=tmp_path, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    run_dir = _run_dir(tmp_path)
    for name in RUN_FILES:
        assert (run_dir / name).exists(), name
    metrics = csv_rows(run_dir / "metrics.csv")
    last = metrics[-1]
    assert int(last["learner_step"]) > 0
    assert int(last["worker_policy_version_max"]) > 0, "workers never received new weights"
    assert int(last["env_frames"]) >= 60_000
    # Credit-based flow keeps batches fresh: few units lost to ring overwrites, a small policy lag.
    trained = int(last["learner_step"]) * 4
    assert int(last["units_dropped_torn"]) <= 0.05 * trained, last
    assert max(float(r["policy_lag"]) for r in metrics if r["policy_lag"]) <= 12, metrics
    assert float(last["entropy_cost"]) == config.load(SMOKE).learner.entropy_cost  # the weight its steps used
    episodes = csv_rows(run_dir / "episodes.csv")
    assert episodes, "no episode finished"
    assert all(-21 <= float(e["raw_return"]) <= 21 for e in episodes)  # raw Pong scores, not clipped sums
    assert {e["worker_id"] for e in episodes} <= {"0", "1"}
    assert "learner steps" in result.stdout and "exit 0" in result.stdout
    assert_loadable(run_dir)
    # TensorBoard events beside the CSV files: the return per episode and every metrics.csv figure, at frames.
    scalars = tensorboard_scalars(run_dir)
    assert [v for _, v in scalars["episodes/raw_return"]] == [float(e["raw_return"]) for e in episodes]
    steps = [s for s, _ in scalars["learner/learner_step"]]
    assert steps == sorted(set(steps)) and steps[-1] == int(last["env_frames"])
    assert scalars["learner/learner_step"][-1][1] == int(last["learner_step"])
    assert {"run/frames_per_s", "learner/total_loss", "time_share/workers/env_step", "broker/replay_size_0"} <= set(
        scalars
    )


def test_a_run_stops_in_order_once_its_last_100_episodes_reach_run_stop_at_return(tmp_path, no_leaks):
    """CartPole, whose random policy scores about 22, with run.stop_at_return = 60: the run stops with exit 0 as
    soon as its last 100 training episodes average 60, says so, writes its final checkpoint, and has played
    fewer frames than its budget; the episode that ended it is the first at which the 100-episode mean reached
    60. (CartPole's config reaches 500 within its 100k steps on every seed measured.)"""
    cartpole = REPO / "config" / "cartpole.toml"
    result = run_command(
        "zrl-launch", "--config", cartpole, "--set", "run.stop_at_return=60", cwd=tmp_path, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    (run_dir,) = (tmp_path / "results").iterdir()
    returns = [float(e["raw_return"]) for e in csv_rows(run_dir / "episodes.csv")]
    means = [sum(returns[k - 100 : k]) / 100 for k in range(100, len(returns) + 1)]
    first = next(k for k, m in enumerate(means) if m >= 60)
    assert len(means) - first <= 40, (first, len(means))  # episodes ending as the stop went round
    said = re.search(r"stopping \(the last 100 episodes' mean return (\S+) reached run.stop_at_return\)", result.stdout)
    assert said and said[1] in {f"{m:.2f}" for m in means[first:]}, result.stdout[-2000:]
    assert int(csv_rows(run_dir / "metrics.csv")[-1]["env_frames"]) < config.load(cartpole).run.max_env_frames
    assert checkpoint.latest(run_dir / "checkpoints") is not None


def test_eight_workers_on_two_cores_still_train_and_the_run_names_a_better_split(tmp_path, no_leaks):
    """Oversubscription works, only slower: 8 workers x 4 envs pinned to 2 cores run to their budget, and the run
    says (on screen and in zrl.log) that fewer, larger workers would train faster here."""
    two = sorted(os.sched_getaffinity(0))[:2]
    result = run_command(
        "zrl-launch",
        "--config",
        SMOKE,
        "--workers",
        8,
        "--envs-per-worker",
        4,
        "--set",
        "run.max_env_frames=20000",
        cwd=tmp_path,
        timeout=300,
        preexec_fn=lambda: os.sched_setaffinity(0, two),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    cores = len(two)
    hint = f"--workers {cores} --envs-per-worker 8"
    assert hint in result.stdout and "nice 10" in result.stdout, result.stdout[:2000]
    run_dir = _run_dir(tmp_path)
    assert hint in (run_dir / "zrl.log").read_text()
    last = csv_rows(run_dir / "metrics.csv")[-1]
    assert int(last["env_frames"]) >= 20_000 and int(last["learner_step"]) > 0


def _interrupt(
    tmp_path: Path,
    config: Path,
    signum: int,
    min_steps: int = 2,
    extra: tuple = (),
    group: bool = False,
    delay_s: float = 0.0,
) -> tuple[int, str, str]:
    """Start an endless run, wait until the learner has stepped, then ``delay_s`` more, send ``signum`` (to the
    launcher, or with ``group`` to its whole process group: the launcher, its fork server and its roles);
    (exit code, out, err)."""
    proc = subprocess.Popen(
        command("zrl-launch", "--config", config, "--set", "run.max_env_frames=100000000", *extra),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=group,
    )
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            time.sleep(0.5)
            runs = list((tmp_path / "results").glob("*/metrics.csv"))
            rows = csv_rows(runs[0]) if runs else []
            if rows and rows[-1]["learner_step"] and int(rows[-1]["learner_step"]) > min_steps:
                break
        else:
            pytest.fail("the learner never stepped")
        time.sleep(delay_s)
        if group:
            os.killpg(proc.pid, signum)
        else:
            proc.send_signal(signum)
        out, err = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, out, err


ELITE_MIX = (
    '[{"type": "queue", "capacity": 1, "sample_ratio": 0.5}, {"type": "custom", "capacity": 64, '
    '"sample_ratio": 0.5, "dist_function": "ln_norm", "sample_strategy": "elite_sampling", '
    '"lambda_batch_multiplier": 6, "alfa_annealing_factor": 2.0, "elite_sampling_strategy": "strategy3"}]'
)


@pytest.mark.background
def test_pong_with_queue_and_elite_replay_reports_its_figures(tmp_path, no_leaks):
    """The reference platform's elite command, brought over with --replay, on real Pong with LASER on."""
    result = run_command(
        "zrl-launch",
        "--config",
        SMOKE,
        "--replay",
        ELITE_MIX,
        "--set",
        "vtrace.laser=true",
        "--set",
        "run.max_env_frames=40000",
        "--quiet",
        cwd=tmp_path,
        timeout=240,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    (run_dir,) = (tmp_path / "results").iterdir()
    assert '[[replay]]\ntype = "elite"' in (run_dir / "config.toml").read_text()
    rows = [r for r in csv_rows(run_dir / "metrics.csv") if r["learner_step"] and int(r["learner_step"]) > 0]
    assert rows, "the learner never trained"
    scored = [r for r in rows if r["elite_distance_pool"] and float(r["elite_lambda"]) > 0]
    assert scored, "no elite pool was scored"
    last = scored[-1]
    assert 1.0 <= float(last["elite_lambda"]) <= 6.0
    assert (
        float(last["elite_distance_min"]) <= float(last["elite_distance_chosen"]) <= float(last["elite_distance_max"])
    )
    assert all(0.0 <= float(r["laser_masked_fraction"]) <= 1.0 for r in rows)
    assert all(float(r["sample_age_max"]) >= float(r["sample_age_mean"]) >= 0.0 for r in rows)
    timed = [r for r in rows if r["broker_prepare_s"] and r["learner_wait_fraction"]]
    assert timed and all(float(r["broker_prepare_s"]) > 0 for r in timed)
    assert all(0.0 <= float(r["learner_wait_fraction"]) <= 1.0 for r in timed)
    queue_size, elite_size = (int(n) for n in rows[-1]["replay_sizes"].split())
    assert elite_size == 64  # filled; the queue hands its units out
    index = checkpoint.load(checkpoint.latest(run_dir / "checkpoints"))["replay_index"]
    elite_rows = index["replay"] == 1
    assert int(elite_rows.sum()) == 64 and int(index["counts"][elite_rows].sum()) > 0
    assert tuple(index["features"].shape) == (64, 10, 512)  # T = 10: every step compared (the default), F = 512


def test_sigterm_stops_in_order_with_exit_143(tmp_path, no_leaks):
    code, _, err = _interrupt(tmp_path, REPO / "config" / "cartpole.toml", signal.SIGTERM)
    assert code == 143, err[-3000:]
    (run_dir,) = (tmp_path / "results").iterdir()
    assert checkpoint.load(checkpoint.latest(run_dir / "checkpoints"))["learner_step"] > 0


def test_sigterm_to_the_process_group_stops_in_order_with_exit_143(tmp_path, no_leaks):
    """As kill %1, timeout or a batch scheduler sends it: the fork server ignores it and the roles stop in order,
    so the run ends as with a SIGTERM to the launcher alone, final checkpoint and all."""
    code, _, err = _interrupt(tmp_path, REPO / "config" / "cartpole.toml", signal.SIGTERM, group=True)
    assert code == 143, err[-3000:]
    assert "exited with code" not in err, err[-3000:]
    (run_dir,) = (tmp_path / "results").iterdir()
    final = checkpoint.load(checkpoint.latest(run_dir / "checkpoints"))
    assert final["learner_step"] > 0 and f"ckpt_{final['learner_step']:09d}" in (run_dir / "zrl.log").read_text()


def test_the_installed_command_refuses_bad_input_with_exit_2_and_one_line(tmp_path, no_leaks):
    """The real zrl-launch, as a user runs it, on the first bad input below: exit 2, one line on stderr naming
    the key, no traceback, nothing made. The others run in the test process: tests/test_launch_refusals.py."""
    args, expected = BAD_INPUT[0]
    result = run_command("zrl-launch", "--config", SMOKE, *args, cwd=tmp_path, timeout=120)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert expected in result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.count("\n") <= 2, result.stderr
    assert not (tmp_path / "results").exists()


CARTPOLE = REPO / "config" / "cartpole.toml"


def test_resume_continues_the_same_run(tmp_path, no_leaks):
    """100 learner steps with a checkpoint after each, Ctrl-C 0 to 1 s later (so that it lands during or next to a
    write): exit 130, "interrupted" on screen, no temp file left, and the newest checkpoint loads into the run's
    model with finite weights. Resume, more steps: the run starts from that checkpoint, and counters and the CSV
    files run on without a gap, a duplicate or a step back.
    (test_launcher_killed_while_checkpointing... SIGKILLs such a run; tests/test_checkpoint.py a lone writer.)"""
    import random

    delay_s = random.uniform(0.0, 1.0)
    code, out, err = _interrupt(
        tmp_path,
        CARTPOLE,
        signal.SIGINT,
        min_steps=100,
        extra=("--set", "run.checkpoint_every_steps=1", "--set", "run.log_interval_s=0.5"),
        delay_s=delay_s,
    )
    assert code == 130, err[-3000:]
    assert "interrupted" in out, out[-3000:]
    (run_dir,) = (tmp_path / "results").iterdir()
    folder = run_dir / "checkpoints"
    assert not list(folder.glob(".*.tmp-*")), f"an orderly stop left a temp file (Ctrl-C {delay_s:.2f} s late)"
    stopped_path = assert_loadable(run_dir)
    stopped = checkpoint.load(stopped_path)
    good = next(state for _, state, _ in checkpoint.newest_good(folder) if state is not None)
    assert stopped["learner_step"] >= 100 and good["learner_step"] == stopped["learner_step"], delay_s
    budget = stopped["env_frames"] + 30_000
    result = run_command(
        "zrl-launch",
        "--resume",
        "auto",
        "--config",
        CARTPOLE,
        "--set",
        f"run.max_env_frames={budget}",
        "--set",
        "run.log_interval_s=0.5",
        cwd=tmp_path,
        timeout=240,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "resuming" in result.stdout and [p.name for p in (tmp_path / "results").iterdir()] == [run_dir.name]
    resumed = re.findall(r"resuming \S+ from (\S+):", (run_dir / "zrl.log").read_text())
    assert [Path(path).name for path in resumed] == [stopped_path.name], resumed
    assert not list(folder.glob(".*.tmp-*"))
    final = checkpoint.load(checkpoint.latest(run_dir / "checkpoints"))
    assert final["learner_step"] > stopped["learner_step"] and final["env_frames"] > stopped["env_frames"]
    assert final["policy_version"] > stopped["policy_version"]
    episodes = [int(r["episode"]) for r in csv_rows(run_dir / "episodes.csv")]
    assert episodes == list(range(1, len(episodes) + 1))
    metrics = csv_rows(run_dir / "metrics.csv")
    steps = [int(r["learner_step"]) for r in metrics if r["learner_step"]]
    assert steps == sorted(steps) and steps[-1] > stopped["learner_step"]
    frames = [int(r["env_frames"]) for r in metrics]
    assert min(frames[len(frames) // 2 :]) > 0 and max(frames) >= budget
    assert frames == sorted(frames)  # the env frame count never goes back across the restart
    assert sum(1 for line in (run_dir / "metrics.csv").read_text().splitlines() if line.startswith("wall_time")) == 1
    starts = csv_rows(run_dir / "starts.csv")  # a row per start, each naming its machine and its frames so far
    assert len(starts) == 2 and all(r["cpu"] == cpu_description() and int(r["cores"]) >= 1 for r in starts)
    assert int(starts[0]["env_frames"]) == 0 and int(starts[1]["env_frames"]) >= stopped["env_frames"], starts
    assert f"machine: {cpu_description()}" in (run_dir / "zrl.log").read_text()
    assert (run_dir / "checkpoints" / "best.pt").is_file()
    checkpoint.load(run_dir / "checkpoints" / "best.pt")
    # The TensorBoard curves run on across the restart in a second event file: no step repeats or goes back.
    assert len(list(run_dir.glob("events.out.tfevents.*"))) == 2
    scalars = tensorboard_scalars(run_dir)
    for tag, points in scalars.items():
        tag_steps = [step for step, _ in points]
        assert tag_steps == sorted(set(tag_steps)), f"{tag}: {tag_steps}"
    assert scalars["learner/learner_step"][-1] == (frames[-1], float(steps[-1]))
    assert len(scalars["episodes/raw_return"]) == len(episodes)


# One worker of 2 envs in lockstep with the learner; a learner step trains B x T x frame skip = 2 x 5 x 4 frames.
DETERMINISTIC = (
    "--set",
    "run.deterministic=true",
    "--set",
    "workers.count=1",
    "--set",
    "learner.batch_size=2",
    "--set",
    "learner.unroll_length=5",
    "--set",
    "learner.lr_decay_steps=1000",
    "--set",
    "run.log_interval_s=0.5",
    "--quiet",
)
FRAMES_PER_LEARNER_STEP = 2 * 5 * 4


def _final_state(cwd: Path) -> dict:
    (run_dir,) = (cwd / "results").iterdir()
    return checkpoint.load(checkpoint.latest(run_dir / "checkpoints"))


def test_deterministic_resume_gives_the_weights_of_an_uninterrupted_run(tmp_path, no_leaks):
    """Deterministic single-worker Pong: Ctrl-C at some step past 5; then N straight learner steps (100, or 50
    past the Ctrl-C where a fast machine took it later); N / 2 steps to a budget, then resumed to N; the
    interrupted run resumed to N. All three end with the same weights, bit for bit."""
    budget = lambda steps: ("--set", f"run.max_env_frames={steps * FRAMES_PER_LEARNER_STEP}")  # noqa: E731
    straight, stopped, interrupted = (tmp_path / name for name in ("straight", "stopped", "interrupted"))
    for cwd in (straight, stopped, interrupted):
        cwd.mkdir()
    # the Ctrl-C lands some time after step 5, which a fast machine's lockstep run may take past 100 steps
    code, _, err = _interrupt(interrupted, SMOKE, signal.SIGINT, min_steps=5, extra=DETERMINISTIC)
    assert code == 130, err[-3000:]
    cut = _final_state(interrupted)["learner_step"]
    steps = max(100, 2 * ((cut + 50) // 2))  # even: its half is a whole number of steps
    (run_dir,) = (interrupted / "results").iterdir()
    reported = int(csv_rows(run_dir / "metrics.csv")[-1]["learner_step"])
    assert cut >= reported > 5, (cut, reported)  # the Ctrl-C's checkpoint holds every step the run reported
    done = run_command("zrl-launch", "--config", SMOKE, *DETERMINISTIC, *budget(steps), cwd=straight, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    first = run_command("zrl-launch", "--config", SMOKE, *DETERMINISTIC, *budget(steps // 2), cwd=stopped, timeout=240)
    assert first.returncode == 0, first.stderr[-3000:]
    halfway = _final_state(stopped)
    assert halfway["learner_step"] == steps // 2
    for cwd in (stopped, interrupted):
        again = run_command(
            "zrl-launch", "--resume", "auto", "--config", SMOKE, *budget(steps), "--quiet", cwd=cwd, timeout=240
        )
        assert again.returncode == 0, again.stderr[-3000:]
    want = _final_state(straight)
    assert want["learner_step"] == steps
    for cwd, note in ((stopped, f"stopped at {steps // 2}"), (interrupted, f"interrupted at {cut}")):
        got = _final_state(cwd)
        assert got["learner_step"] == steps and got["policy_version"] == want["policy_version"], note
        assert torch.equal(got["trained_actions"], want["trained_actions"]), note
        for name, tensor in want["model"].items():
            assert torch.equal(got["model"][name], tensor), f"{name} differs ({note})"
        for (_, mine), (_, theirs) in zip(
            sorted(got["optimizer"]["state"].items()), sorted(want["optimizer"]["state"].items())
        ):
            assert all(torch.equal(mine[k], theirs[k]) for k in theirs), note
    # and the second half did train: the weights moved after the stopped run's budget
    assert any(not torch.equal(halfway["model"][n], t) for n, t in want["model"].items())


def _damaged(run_dir: Path, how: str) -> Path:
    path = checkpoint.latest(run_dir / "checkpoints")
    data = bytearray(path.read_bytes())
    if how == "bitflip":
        data[len(data) // 2] ^= 1
    elif how == "truncate":
        data = data[: len(data) // 3]
    path.write_bytes(bytes(data))
    return path


def test_resume_falls_back_past_a_bad_checkpoint_and_refuses_unsafe_changes(tmp_path, monkeypatch, no_leaks):
    """A CartPole run over TCP on loopback trains and sends its workers weights; with its newest checkpoint
    damaged, an unsafe change on resume is refused, and the resumed run skips that checkpoint and sets it aside.
    --init-from starts a new run from a good checkpoint and refuses a damaged, missing or foreign one."""
    result = run_command(
        "zrl-launch",
        "--config",
        CARTPOLE,
        "--set",
        'transport.kind="tcp"',
        "--set",
        "run.max_env_frames=20000",
        "--set",
        "run.checkpoint_every_steps=10",
        "--quiet",
        cwd=tmp_path,
        timeout=180,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    (run_dir,) = (tmp_path / "results").iterdir()
    assert 'kind = "tcp"' in (run_dir / "config.toml").read_text()
    last = csv_rows(run_dir / "metrics.csv")[-1]
    assert int(last["learner_step"]) > 0 and int(last["worker_policy_version_max"]) > 0
    bad = _damaged(run_dir, "bitflip")
    monkeypatch.chdir(tmp_path)
    assert "learner.batch_size: cannot change when resuming" in _refused(
        "--resume", run_dir, "--set", "learner.batch_size=8"
    )
    resumed = run_command(
        "zrl-launch", "--resume", run_dir, "--set", "run.max_env_frames=30000", "--quiet", cwd=tmp_path, timeout=180
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"skipped a checkpoint that cannot be used: {bad}: SHA-256 mismatch" in (run_dir / "zrl.log").read_text()
    bad = bad.with_name(bad.name + ".bad")  # set aside, so that it is never picked again
    assert bad.is_file() and checkpoint.latest(run_dir / "checkpoints") != bad
    # --init-from: a new run from the weights; a damaged or foreign checkpoint is refused in one line
    good = checkpoint.latest(run_dir / "checkpoints")
    fresh = run_command(
        "zrl-launch",
        "--config",
        CARTPOLE,
        "--init-from",
        good,
        "--set",
        "run.max_env_frames=8000",
        "--quiet",
        cwd=tmp_path,
        timeout=180,
    )
    assert fresh.returncode == 0, fresh.stderr[-3000:]
    assert len(list((tmp_path / "results").iterdir())) == 2
    for path, reason in [
        (bad, "SHA-256 mismatch"),
        (tmp_path / "nope.pt", "no such checkpoint file"),
        (good, "trained on CartPole-v1, not ALE/Pong-v5 (wrong game)"),
    ]:
        assert reason in _refused("--config", SMOKE, "--init-from", path)
    assert "not a zrl run folder" in _refused("--resume", tmp_path / "nowhere")
    assert len(list((tmp_path / "results").iterdir())) == 2  # the refusals made no run folder


def _wait_for_step(run_dir_glob: Path, above: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        time.sleep(0.2)
        runs = list(run_dir_glob.glob("*/metrics.csv"))
        rows = csv_rows(runs[0]) if runs else []
        steps = [int(r["learner_step"]) for r in rows if r["learner_step"]]
        if steps and steps[-1] > above:
            return
    pytest.fail("the learner never stepped")


KILLS = 3


def test_launcher_killed_while_checkpointing_always_leaves_a_loadable_checkpoint(tmp_path, no_leaks):
    """A checkpoint after every learner step, so a kill lands during or next to a write; 3 SIGKILLs of the
    launcher, each followed by --resume: a loadable checkpoint always exists and no temp file is taken.
    (test_resume_continues_the_same_run gives such a run Ctrl-C; tests/test_checkpoint.py kills a checkpoint
    writer at random moments too, at the file level.)"""
    import random

    signum = signal.SIGKILL
    rng = random.Random(int(signum))
    args = [
        "--set",
        "run.checkpoint_every_steps=1",
        "--set",
        "run.log_interval_s=0.2",
        "--set",
        "run.max_env_frames=100000000",
        "--quiet",
    ]
    results = tmp_path / "results"
    last_step = 0
    for i in range(KILLS):
        first = command("zrl-launch", "--config", CARTPOLE, *args)
        again = command("zrl-launch", "--resume", "auto", "--config", CARTPOLE, *args)
        proc = subprocess.Popen(
            first if i == 0 else again, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )
        try:
            _wait_for_step(results, last_step)
            time.sleep(rng.uniform(0.0, 1.0))
            proc.send_signal(signum)
            proc.wait(60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        deadline = time.monotonic() + 30  # after a SIGKILL the roles stop on their own (parent-death signal)
        from conftest import zrl_processes

        while zrl_processes() and time.monotonic() < deadline:
            time.sleep(0.2)
        (run_dir,) = results.iterdir()
        folder = run_dir / "checkpoints"
        good = next(state for _, state, _ in checkpoint.newest_good(folder) if state is not None)
        assert good["learner_step"] >= last_step
        last_step = good["learner_step"]
    # the last resume runs to a budget and cleans up after all the kills
    done = run_command(
        "zrl-launch",
        "--resume",
        "auto",
        "--config",
        CARTPOLE,
        "--set",
        f"run.max_env_frames={good['env_frames'] + 20_000}",
        "--quiet",
        cwd=tmp_path,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert not list((run_dir / "checkpoints").glob(".*.tmp-*"))
    import re

    resumed = re.findall(r"resuming \S+ from (\S+):", (run_dir / "zrl.log").read_text())
    assert len(resumed) == KILLS and all(re.search(r"/ckpt_\d{9}\.pt$", path) for path in resumed), resumed
    frames = [int(r["env_frames"]) for r in csv_rows(run_dir / "metrics.csv")]
    assert frames == sorted(frames)  # the env frame count never goes back across the restarts


APEX_CARTPOLE = REPO / "config" / "apex_iqn_cartpole.toml"


def test_resume_keeps_the_replay_its_transitions_priorities_and_counts(tmp_path, no_leaks):
    """run.checkpoint_replay on an Ape-X run: Ctrl-C, then resume at once to the budget already played (the resumed
    run stops as it starts, and its broker saves what it restored): the replay's transitions, stamps and counts, and
    the rings' heads, are what the stopped run saved, and so are its priorities and generator unless the broker drew
    a batch before the stop reached it. A second resume trains on, never waits for its replay to fill again."""
    from zrl.replay_checkpoint import load_state, newest, replay_folder

    replay = ("--set", "run.checkpoint_replay=true", "--set", "apex.learn_start=1000")
    code, _, err = _interrupt(
        tmp_path,
        APEX_CARTPOLE,
        signal.SIGINT,
        min_steps=60,
        extra=(*replay, "--set", "run.checkpoint_every_steps=20", "--set", "run.log_interval_s=0.5"),
    )
    assert code == 130, err[-3000:]
    (run_dir,) = (tmp_path / "results").iterdir()
    saved_path, saved = newest(replay_folder(run_dir))
    before = load_state(saved_path)
    assert (before["replay.priorities"] > 0).sum() > 1000 and int(before["batches"]) > 60
    frames = checkpoint.load(checkpoint.latest(run_dir / "checkpoints"))["env_frames"]

    def resume(budget: int) -> subprocess.CompletedProcess:
        return run_command(
            "zrl-launch", "--resume", str(run_dir), *replay, "--set", f"run.max_env_frames={budget}",
            "--set", "run.log_interval_s=0.5", cwd=tmp_path, timeout=240,
        )  # fmt: skip

    again = resume(frames)
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"the replays start from {saved_path.name}" in again.stdout, again.stdout
    log = (run_dir / "zrl.log").read_text()
    assert f"zrl-broker: the replays start with {int((before['replay.priorities'] > 0).sum())} units" in log
    after_path, after = newest(replay_folder(run_dir))
    assert after_path != saved_path and [r["head"] for r in after["rings"]] == [r["head"] for r in saved["rings"]]
    restored = load_state(after_path)
    assert restored.keys() == before.keys()
    # The resumed learner asks for a batch as it starts, and the broker may draw one or two before the stop reaches
    # it: then its count and generator moved on, and the learner's replies (or an eviction scan) may have moved
    # priorities and their counters. Everything else, the transitions above all, is as the stopped run saved it.
    drawn = int(restored["batches"]) - int(before["batches"])
    assert 0 <= drawn <= 2, drawn
    moved = {"batches", "rng", "replay.priorities", "replay.evicted", "replay.stale_updates"} if drawn else set()
    for key in before.keys() - moved:
        assert np.array_equal(restored[key], before[key]), key

    stepped = checkpoint.load(checkpoint.latest(run_dir / "checkpoints"))["learner_step"]
    log = (run_dir / "zrl.log").read_text()
    more = resume(frames + 3000)
    assert more.returncode == 0, more.stderr[-3000:]
    resumed_log = (run_dir / "zrl.log").read_text()[len(log) :]
    fills = re.findall(r"filling replays ([\d,]+)/([\d,]+) units", resumed_log)
    assert all(held == target for held, target in fills), fills  # full from the start: nothing to refill
    assert checkpoint.load(checkpoint.latest(run_dir / "checkpoints"))["learner_step"] > stepped


def test_a_restart_of_the_roles_keeps_the_replay(tmp_path, no_leaks):
    """run.checkpoint_replay on an Ape-X run whose learner is SIGKILLed: the broker, stopping in order, saves its
    replay, and the new broker of the restarted roles starts with it (the frames are still in the rings) rather
    than filling it again."""

    proc = subprocess.Popen(
        command(
            "zrl-launch", "--config", APEX_CARTPOLE, "--set", "run.max_env_frames=100000000",
            "--set", "run.checkpoint_replay=true", "--set", "apex.learn_start=1000",
            "--set", "run.checkpoint_every_steps=20", "--set", "run.log_interval_s=0.5", "--quiet",
        ),
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    with reaped(proc):
        deadline = time.monotonic() + 180
        while not any(int(r["learner_step"] or 0) > 40 for r in _metrics(tmp_path)):
            assert time.monotonic() < deadline and proc.poll() is None, "the learner never stepped"
            time.sleep(0.5)
        (learner,) = [
            p for p in psutil.Process(proc.pid).children(recursive=True) if p.cmdline()[0].startswith("zrl-learner")
        ]
        learner.kill()
        (run_dir,) = (tmp_path / "results").iterdir()
        while "restarted the run's roles" not in (run_dir / "zrl.log").read_text() or not any(
            int(r["role_restarts"] or 0) == 1 and int(r["learner_step"] or 0) > 0 for r in _metrics(tmp_path)[-1:]
        ):
            assert time.monotonic() < deadline + 60 and proc.poll() is None, "no restart"
            time.sleep(0.5)
        time.sleep(3)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-3000:]
    log = (run_dir / "zrl.log").read_text()
    after = log[log.index("restarted the run's roles") :]
    assert "zrl-broker: the replays start with" in after, after[-3000:]
    fills = re.findall(r"filling replays ([\d,]+)/([\d,]+) units", after)
    assert all(held == target for held, target in fills), fills


def _metrics(tmp_path: Path) -> list[dict]:
    found = list((tmp_path / "results").glob("*/metrics.csv"))
    return csv_rows(found[0]) if found else []
