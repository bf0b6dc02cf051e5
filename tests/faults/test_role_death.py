"""Roles that die or hang in the middle of a run: workers are replaced, a crash loop stops the run with its
traceback; a dead or hung learner or broker has the run's roles restarted from the last checkpoint
(run.restart_policy = "resume", up to run.max_restarts), or stops the run in order with a loadable checkpoint and a
way to go on ("stop")."""

from __future__ import annotations

import contextlib
import csv
import os
import random
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from conftest import REPO, command, metrics_rows, zrl_processes

from zrl import checkpoint

pytestmark = pytest.mark.e2e

HERE = Path(__file__).resolve().parent
SMOKE = REPO / "config" / "smoke.toml"
CARTPOLE = REPO / "config" / "cartpole.toml"
APEX_CARTPOLE = REPO / "config" / "apex_iqn_cartpole.toml"


def _launch(
    tmp_path: Path, *args: str, path: tuple[Path, ...] = (), env: dict[str, str] | None = None
) -> subprocess.Popen:
    paths = [str(p) for p in (*path, HERE)]
    env = {
        **os.environ,
        **(env or {}),
        "PYTHONPATH": os.pathsep.join(filter(None, [*paths, os.environ.get("PYTHONPATH")])),
    }
    return subprocess.Popen(
        command("zrl-launch", *args), cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _wait(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    pytest.fail(f"timed out waiting for {what}")


def _learner_step(tmp_path: Path) -> int:
    steps = [int(r["learner_step"]) for r in metrics_rows(tmp_path) if r["learner_step"]]
    return steps[-1] if steps else -1


def _env_frames(tmp_path: Path) -> int:
    rows = metrics_rows(tmp_path)
    return int(rows[-1]["env_frames"]) if rows else 0


def _restarts(tmp_path: Path) -> int:
    rows = metrics_rows(tmp_path)
    return int(rows[-1]["worker_restarts"]) if rows else 0


def _env_frames(tmp_path: Path) -> int:
    rows = metrics_rows(tmp_path)
    return int(rows[-1]["env_frames"]) if rows else 0


def _episodes(tmp_path: Path) -> list[dict]:
    """The rows of the run's episodes.csv so far ([] before it exists)."""
    found = list((tmp_path / "results").glob("*/episodes.csv"))
    if not found:
        return []
    with open(found[0]) as fh:
        return list(csv.DictReader(fh))


def _episodes_since(tmp_path: Path, worker_id: int, wall_time: float) -> int:
    """How many episodes worker ``worker_id`` has finished since ``wall_time``."""
    return sum(
        1
        for row in _episodes(tmp_path)
        if row.get("worker_id") == str(worker_id) and float(row["wall_time"]) > wall_time
    )


def _episode_workers(tmp_path: Path) -> set[int]:
    """Ids of the workers that have finished an episode."""
    return {int(row["worker_id"]) for row in _episodes(tmp_path) if row.get("worker_id", "").isdigit()}


def _role(launcher: subprocess.Popen, title: str) -> psutil.Process | None:
    """The role process of this launcher's run (not of another run on the same machine) with that title."""
    try:
        children = psutil.Process(launcher.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return None
    for proc in children:
        try:
            if " ".join(proc.cmdline()).startswith(title):
                return proc
        except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
            continue
    return None


def _kill(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait()


@contextlib.contextmanager
def _launched(tmp_path: Path, *args: str, **kwargs) -> Iterator[subprocess.Popen]:
    """zrl-launch started as _launch does, and killed on the way out if a wait failed before it ended."""
    proc = _launch(tmp_path, *args, **kwargs)
    try:
        yield proc
    finally:
        _kill(proc)


def _finish(proc: subprocess.Popen, timeout: float = 120) -> tuple[int, str, str]:
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        _kill(proc)
    return proc.returncode, out, err


def _train_on_then_interrupt(tmp_path: Path, proc: subprocess.Popen, steps: int) -> tuple[int, str, str]:
    """Wait for the learner to take more than ``steps`` more steps, then Ctrl-C the run and wait for its end."""
    before = _learner_step(tmp_path)
    _wait(lambda: _learner_step(tmp_path) > before + steps, 120, "training to go on")
    proc.send_signal(signal.SIGINT)
    return _finish(proc, 120)


def _stopped_in_order(tmp_path: Path, role: str, err: str) -> dict:
    """Check that the run said which role died and how to go on; the state of its newest loadable checkpoint."""
    (run_dir,) = (tmp_path / "results").iterdir()
    assert f"{role} exited with code -9; the run stopped" in err
    assert f"continue with: zrl-launch --resume {run_dir.relative_to(tmp_path)}" in err
    return next(state for _, state, _ in checkpoint.newest_good(run_dir / "checkpoints") if state is not None)


KILL_AT_FRAMES = (20_000, 45_000, 70_000, 95_000)  # of 150,000: spaced by the run's frames, not by the clock, so
KILLS = len(KILL_AT_FRAMES)  # that on a fast machine too the last restart comes well before the budget


def test_sigkilled_workers_are_replaced_and_never_mix_their_frames_into_old_descriptors(tmp_path, no_leaks):
    """SIGKILL a random worker 4 times (at 20k, 45k, 70k and 95k of its 150k frames) during a run of an env whose
    observations carry their env instance, a counter and the action that led to them (zrl_fault_envs:ZrlIdentity-v0; a
    restarted worker makes new instances in the same ring), with a uniform replay that keeps sampling the dead workers'
    descriptors while new frames fill the rings. 4 restarts are counted and logged, the learner step and the frame count
    never go back, and the run still reaches its frame budget. Every unit the learner trains on holds T+1 consecutive
    frames of one instance, and the actions its descriptor carries are the ones those frames record, before and after
    the restarts; units of the new instances are trained on too."""
    audit = tmp_path / "audit"
    audit.mkdir()
    rng = random.Random(3)
    killed = []
    with _launched(
        tmp_path,
        "--config",
        CARTPOLE,
        "--set",
        'env.id="zrl_fault_envs:ZrlIdentity-v0"',
        "--workers",
        "2",
        "--envs-per-worker",
        "2",
        "--set",
        "run.max_env_frames=150000",
        "--replay",
        '[{"type": "queue", "capacity": 64, "sample_ratio": 0.5},'
        ' {"type": "uniform", "capacity": 300, "sample_ratio": 0.5}]',  # old descriptors live on in it
        "--set",
        "workers.max_restarts=10",
        "--set",
        "run.log_interval_s=0.5",
        "--quiet",
        path=(HERE / "audit",),
        env={"ZRL_AUDIT_FRAMES": str(audit)},
    ) as proc:
        _wait(lambda: _learner_step(tmp_path) > 2, 120, "the learner's first steps")
        for at in KILL_AT_FRAMES:
            _wait(lambda at=at: _env_frames(tmp_path) >= at, 120, f"{at:,} env frames")
            victim = None

            def pick() -> bool:
                nonlocal victim
                alive = [p for p in (_role(proc, f"zrl-worker-{i}") for i in range(2)) if p and p.pid not in killed]
                victim = rng.choice(alive) if len(alive) == 2 else None
                return victim is not None

            _wait(pick, 60, "both workers to be running")
            victim.send_signal(signal.SIGKILL)
            killed.append(victim.pid)
        code, out, err = _finish(proc, 240)
    assert code == 0, err[-3000:]
    rows = metrics_rows(tmp_path)
    assert int(rows[-1]["worker_restarts"]) == KILLS, rows[-1]
    steps = [int(r["learner_step"]) for r in rows if r["learner_step"]]
    assert steps == sorted(steps) and steps[-1] > 2
    frames = [int(r["env_frames"]) for r in rows]
    assert frames == sorted(frames) and frames[-1] >= 150_000  # a restarted worker's counts go on
    (run_dir,) = (tmp_path / "results").iterdir()
    log = (run_dir / "zrl.log").read_text()
    assert log.count("exited with code -9; restarted it with the current weights") == KILLS
    checked = wrong = 0
    batches_by_instances: list[set[str]] = [set()]
    wrong_units = "".join(f.read_text() for f in audit.glob("*.wrong"))
    for line in "".join(f.read_text() for f in audit.glob("*.txt")).splitlines():
        units, bad, *instances = line.split()
        checked, wrong = checked + int(units), wrong + int(bad)
        batches_by_instances.append(set(instances))
    assert checked > 1000 and wrong == 0, (checked, wrong, wrong_units[:2000])
    instances = set().union(*batches_by_instances)
    assert len(instances) > 2 * 2, f"no unit of a restarted worker was trained on: {len(instances)} env instances"


def test_a_crash_loop_stops_the_run_with_the_traceback(tmp_path, no_leaks):
    """An env that raises at step 5: the worker is restarted workers.max_restarts times, then the run stops
    with exit code 1 and the env's traceback."""
    proc = _launch(
        tmp_path,
        "--config",
        CARTPOLE,
        "--set",
        'env.id="zrl_fault_envs:ZrlCrashAtStep5-v0"',
        "--workers",
        "1",
        "--set",
        "workers.max_restarts=2",
        "--quiet",
    )
    code, out, err = _finish(proc, 240)
    assert code == 1, err[-3000:]
    assert "zrl-worker-0 exited with code 1" in err and "more than workers.max_restarts = 2 restarts" in err
    assert "RuntimeError: injected fault at step 5" in err and "zrl-worker-0's traceback:" in err
    (run_dir,) = (tmp_path / "results").iterdir()
    log = (run_dir / "zrl.log").read_text()
    assert log.count("restarted it with the current weights") == 2
    assert log.count("injected fault at step 5") >= 3  # every crash's traceback is logged


def test_a_hung_worker_is_killed_and_replaced(tmp_path, no_leaks):
    """SIGSTOP a worker: within the heartbeat timeout it is declared hung, killed and replaced."""
    with _launched(
        tmp_path,
        "--config",
        SMOKE,
        "--set",
        "run.max_env_frames=100000000",
        "--set",
        "run.heartbeat_timeout_s=4",
        "--set",
        "run.log_interval_s=0.5",
        "--quiet",
    ) as proc:
        _wait(lambda: _learner_step(tmp_path) > 2, 120, "the learner's first steps")
        # A worker that has finished an episode, so it was running (not still starting, which has its own
        # grace before it counts as hung).
        _wait(lambda: _episode_workers(tmp_path), 120, "a first episode")
        title = f"zrl-worker-{min(_episode_workers(tmp_path))}"
        victim = _role(proc, title)
        victim.send_signal(signal.SIGSTOP)
        stopped_at = time.monotonic()
        _wait(lambda: not victim.is_running() or victim.status() == psutil.STATUS_ZOMBIE, 30, "the hung worker's end")
        detected = time.monotonic() - stopped_at
        _wait(lambda: _role(proc, title) is not None and _role(proc, title).pid != victim.pid, 30, f"a new {title}")
        code, out, err = _train_on_then_interrupt(tmp_path, proc, 2)
    assert code == 130, err[-3000:]
    assert detected < 4 + 5, detected  # the timeout, plus the launcher's poll and the kill
    (run_dir,) = (tmp_path / "results").iterdir()
    assert f"{title} sent nothing for" in (run_dir / "zrl.log").read_text()
    assert int(metrics_rows(tmp_path)[-1]["worker_restarts"]) == 1


def test_a_worker_stuck_in_its_env_is_killed_and_replaced_and_says_where(tmp_path, no_leaks):
    """An infinite loop inside a user's env.step (zrl_fault_envs:ZrlHangOnce-v0): the worker stops sending
    heartbeats, is declared hung within the timeout, prints where it is stuck (SIGUSR1 before the kill), and
    its replacement trains on."""
    flag = tmp_path / "hung"
    with _launched(
        tmp_path,
        "--config",
        CARTPOLE,
        "--workers",
        "2",
        "--envs-per-worker",
        "2",
        "--set",
        'env.id="zrl_fault_envs:ZrlHangOnce-v0"',
        "--set",
        "run.max_env_frames=100000000",
        "--set",
        "run.heartbeat_timeout_s=8",
        "--set",
        "run.log_interval_s=0.5",
        "--quiet",
        env={"ZRL_HANG_FLAG": str(flag)},
    ) as proc:
        _wait(flag.exists, 120, "a worker's env to hang")
        hung_at = time.monotonic()
        _wait(lambda: _restarts(tmp_path) == 1, 30, "the hung worker's replacement")
        detected = time.monotonic() - hung_at
        code, out, err = _train_on_then_interrupt(tmp_path, proc, 5)
    assert code == 130, err[-3000:]
    assert detected < 8 + 5 + 1, detected  # the timeout, the launcher's poll, the kill and a metrics row
    (run_dir,) = (tmp_path / "results").iterdir()
    assert "sent nothing for" in (run_dir / "zrl.log").read_text()
    assert "most recent call first" in err and "_stuck_in_env_step" in err, err[-3000:]  # where it hung
    assert int(metrics_rows(tmp_path)[-1]["worker_restarts"]) == 1


def test_an_apex_run_replaces_a_killed_worker_and_stops_in_order_when_its_learner_dies(tmp_path, no_leaks):
    """The Ape-X roles under the same supervision: a SIGKILLed worker is replaced, its replacement plays whole
    episodes and the learner trains on; under run.restart_policy = "stop" a SIGKILLed learner stops the run within
    seconds with exit code 1, what died, how to go on, and a loadable checkpoint that holds the target network
    (the suite's one dead learner under "stop": the launcher supervises every agent's learner alike)."""
    with _launched(
        tmp_path,
        "--config",
        APEX_CARTPOLE,
        "--set",
        'run.restart_policy="stop"',
        "--set",
        "run.max_env_frames=100000000",
        "--set",
        "apex.learn_start=200",
        "--set",
        "run.checkpoint_every_steps=20",
        "--set",
        "run.log_interval_s=0.5",
        "--quiet",
    ) as proc:
        _wait(lambda: _learner_step(tmp_path) > 25, 120, "a first checkpoint")
        victim = _role(proc, "zrl-worker-1")
        victim.send_signal(signal.SIGKILL)
        killed_at = time.time()
        _wait(lambda: (w := _role(proc, "zrl-worker-1")) is not None and w.pid != victim.pid, 30, "a new zrl-worker-1")
        _wait(lambda: _restarts(tmp_path) == 1, 30, "the restart in metrics.csv")
        frames, before = _env_frames(tmp_path), _learner_step(tmp_path)
        _wait(
            lambda: _learner_step(tmp_path) > before + 40 and _env_frames(tmp_path) > frames, 120, "training to go on"
        )
        _wait(lambda: _episodes_since(tmp_path, 1, killed_at) >= 2, 120, "episodes of the new zrl-worker-1")
        _role(proc, "zrl-learner").send_signal(signal.SIGKILL)
        learner_killed_at = time.monotonic()
        code, out, err = _finish(proc, 120)
        took = time.monotonic() - learner_killed_at
    assert code == 1, err[-3000:]
    assert took < 30, took
    assert not zrl_processes() or all(p.status() == psutil.STATUS_ZOMBIE for p in zrl_processes())
    rows = metrics_rows(tmp_path)
    assert int(rows[-1]["worker_restarts"]) == 1
    steps = [int(r["learner_step"]) for r in rows if r["learner_step"]]
    assert steps == sorted(steps)
    good = _stopped_in_order(tmp_path, "zrl-learner", err)
    assert good["learner_step"] >= 20 and good["target"].keys() == good["model"].keys()


def test_a_dead_broker_stops_the_run_in_order(tmp_path, no_leaks):
    """Under run.restart_policy = "stop", SIGKILL the broker: the run stops within seconds with exit code 1, says
    what died and how to resume, and leaves a loadable checkpoint (a dead learner: the Ape-X test above)."""
    role = "zrl-broker"
    with _launched(
        tmp_path,
        "--config",
        SMOKE,
        "--set",
        'run.restart_policy="stop"',
        "--set",
        "run.max_env_frames=100000000",
        "--set",
        "run.checkpoint_every_steps=5",
        "--set",
        "run.log_interval_s=0.5",
        "--quiet",
    ) as proc:
        _wait(lambda: _learner_step(tmp_path) > 6, 120, "a first checkpoint")
        _role(proc, role).send_signal(signal.SIGKILL)
        killed_at = time.monotonic()
        code, out, err = _finish(proc, 120)
        took = time.monotonic() - killed_at
    assert code == 1, err[-3000:]
    assert took < 30, took
    good = _stopped_in_order(tmp_path, role, err)
    assert good["learner_step"] >= 5
    assert not zrl_processes() or all(p.status() == psutil.STATUS_ZOMBIE for p in zrl_processes())


def _restarted(tmp_path: Path, proc: subprocess.Popen, role: str, old_pid: int, restarts: int) -> float:
    """Wait for the run's roles to be restarted (``restarts`` counted in metrics.csv, a new ``role``) and for the
    new learner to train 10 steps past the checkpoint it started from; how long that took."""
    began = time.monotonic()
    _wait(lambda: int((metrics_rows(tmp_path) or [{}])[-1].get("role_restarts") or 0) == restarts, 60, "the restart")
    _wait(lambda: (p := _role(proc, role)) is not None and p.pid != old_pid, 30, f"a new {role}")
    (run_dir,) = (tmp_path / "results").iterdir()
    line = (run_dir / "zrl.log").read_text().split("restarted the run's roles from ckpt_")[restarts]
    step = int(line[: line.index(".pt")])
    _wait(lambda: _learner_step(tmp_path) > step + 10, 120, "the new learner to train on")
    return time.monotonic() - began


def test_a_dead_or_hung_learner_or_broker_has_the_runs_roles_restarted_until_a_crash_loop(tmp_path, no_leaks):
    """run.restart_policy = "resume": SIGKILL the learner, then SIGSTOP the broker (hung past the heartbeat timeout):
    each time the launcher restarts the run's roles from the newest checkpoint, in the same folder, and training
    goes on past it, while frames played and episodes keep counting. A third loss is more than
    run.max_restarts = 2: the run stops with exit code 1 and says so."""
    with _launched(
        tmp_path,
        "--config",
        SMOKE,
        "--set",
        "run.max_env_frames=100000000",
        "--set",
        "run.checkpoint_every_steps=5",
        "--set",
        "run.heartbeat_timeout_s=4",
        "--set",
        "run.max_restarts=2",
        "--set",
        "run.log_interval_s=0.5",
        "--quiet",
    ) as proc:
        _wait(lambda: _learner_step(tmp_path) > 6, 120, "a first checkpoint")
        learner = _role(proc, "zrl-learner")
        frames_before = _env_frames(tmp_path)
        learner.send_signal(signal.SIGKILL)
        took_dead = _restarted(tmp_path, proc, "zrl-learner", learner.pid, 1)
        broker = _role(proc, "zrl-broker")
        broker.send_signal(signal.SIGSTOP)
        took_hung = _restarted(tmp_path, proc, "zrl-broker", broker.pid, 2)
        _role(proc, "zrl-learner").send_signal(signal.SIGKILL)
        code, out, err = _finish(proc, 120)
    assert code == 1, err[-3000:]
    assert "zrl-learner exited with code -9; that is more than run.max_restarts = 2 restarts" in err, err[-3000:]
    print(
        f"back to training 10 steps past the checkpoint: {took_dead:.1f} s after SIGKILL of the learner, "
        f"{took_hung:.1f} s after SIGSTOP of the broker (heartbeat timeout 4 s)"
    )
    (run_dir,) = (tmp_path / "results").iterdir()
    log = (run_dir / "zrl.log").read_text()
    assert "zrl-learner exited with code -9; restarted the run's roles from ckpt_" in log
    assert "zrl-broker sent nothing for" in log and "restart 2 of 2 allowed" in log
    rows = metrics_rows(tmp_path)
    frames = [int(r["env_frames"]) for r in rows]
    counted = [int(r["episodes"]) for r in rows]
    assert frames == sorted(frames) and counted == sorted(counted)  # the counts go on across the restarts
    assert frames[-1] > frames_before  # and the restarted workers played on
    assert int(rows[-1]["role_restarts"]) == 2
