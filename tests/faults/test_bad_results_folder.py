"""A results folder that cannot be written, or a disk without room for the checkpoints, is a clear error before
anything starts; a checkpoint that cannot be written mid-run leaves the earlier ones as they were."""

from __future__ import annotations

import resource
import shutil
import signal
import time

import psutil
import pytest
from conftest import REPO, metrics_rows, reaped, run_command, start_command, wait_until, zrl_segments

from zrl import checkpoint

pytestmark = pytest.mark.e2e

SMOKE = REPO / "config" / "smoke.toml"
CARTPOLE = REPO / "config" / "cartpole.toml"


def test_an_unwritable_results_folder_is_refused_at_start(tmp_path, no_leaks):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the results folder should be\n")
    before = zrl_segments()
    done = run_command(
        "zrl-launch", "--config", SMOKE, "--set", f'run.results_dir="{blocker}/results"', cwd=tmp_path, timeout=120
    )
    assert done.returncode == 2, done.stderr
    assert f"run.results_dir: cannot create {blocker}/results (Not a directory)" in done.stderr
    assert "--set run.results_dir=PATH" in done.stderr and "Traceback" not in done.stderr
    assert zrl_segments() == before and blocker.read_text().startswith("a file")


def test_a_disk_without_room_for_the_checkpoints_is_refused_at_start(tmp_path, no_leaks):
    """Each checkpoint of the smoke run's Atari network takes more than 1 MB: keeping more of them than the disk
    has megabytes free cannot fit, and the launcher says so before it makes a run folder."""
    keep = shutil.disk_usage(tmp_path).free // 1_000_000 + 1
    done = run_command(
        "zrl-launch", "--config", SMOKE, "--set", f"run.keep_checkpoints={keep}", cwd=tmp_path, timeout=120
    )
    assert done.returncode == 2, done.stderr
    assert "run.results_dir: results has" in done.stderr and "MB free, and this run's checkpoints need" in done.stderr
    assert "Traceback" not in done.stderr and done.stderr.count("\n") <= 2, done.stderr
    assert not (tmp_path / "results").exists()  # nothing made: neither a run folder nor the results folder


FILE_LIMIT = 1_000_000  # bytes a process may write to one file: the logs fit, a checkpoint (about 4 MB) does not


def _limit_file_size() -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_LIMIT, FILE_LIMIT))  # writes past it fail with EFBIG


def test_checkpoints_that_cannot_be_written_leave_the_earlier_ones_and_training_goes_on(tmp_path, no_leaks):
    """A run leaves checkpoints; its resume runs where no file may grow past 1 MB (RLIMIT_FSIZE, the kernel's
    own refusal, as a full disk refuses): every checkpoint write fails. Training goes on to the budget, each
    failure is said on stderr, and the earlier checkpoints stay byte for byte, with no partial file beside."""
    wide = ["--set", "model.mlp_hidden=[512, 512]", "--set", "run.checkpoint_every_steps=20"]
    first = run_command(
        "zrl-launch",
        "--config",
        CARTPOLE,
        *wide,
        "--set",
        "run.max_env_frames=20000",
        "--quiet",
        cwd=tmp_path,
        timeout=300,
    )
    assert first.returncode == 0, first.stderr[-3000:]
    (run_dir,) = (tmp_path / "results").iterdir()
    folder = run_dir / "checkpoints"
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    latest = checkpoint.latest(folder)
    assert latest is not None and latest.stat().st_size > 2 * FILE_LIMIT
    step_before = checkpoint.load(latest)["learner_step"]

    resumed = run_command(
        "zrl-launch",
        "--resume",
        run_dir,
        "--set",
        "run.max_env_frames=40000",
        "--quiet",
        cwd=tmp_path,
        timeout=300,
        preexec_fn=_limit_file_size,
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "failed (File too large); the previous checkpoints are untouched, training goes on" in resumed.stderr
    assert "Traceback" not in resumed.stderr, resumed.stderr[-3000:]
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
    assert checkpoint.latest(folder) == latest and checkpoint.load(latest)["learner_step"] == step_before
    assert int(metrics_rows(tmp_path)[-1]["env_frames"]) >= 40000
    steps = int(metrics_rows(tmp_path)[-1]["learner_step"])  # each step trains on 640 frames
    assert steps > step_before + 10
    assert resumed.stderr.count("failed (File too large)") >= 1 + (steps // 20 - step_before // 20)  # and the last


def test_a_disk_that_refuses_the_logs_mid_run_delays_their_lines_and_the_run_goes_on(tmp_path, no_leaks):
    """Mid-run, the launcher's files may not grow (RLIMIT_FSIZE set on the running launcher at their current size:
    the kernel refuses its writes to metrics.csv, episodes.csv and zrl.log as a full disk would). The run goes on;
    each file's trouble is said once on stderr; once writes work again, every metrics row of the outage is on disk,
    in order, and zrl.log has no logging error in it."""
    proc = start_command(
        "zrl-launch",
        *("--config", str(SMOKE), "--set", "run.max_env_frames=100000000", "--set", "run.log_interval_s=0.25"),
        "--quiet",
        cwd=tmp_path,
    )
    with reaped(proc):
        wait_until(lambda: len(metrics_rows(tmp_path)) >= 4, 120, "the first metrics rows", proc)
        (run_dir,) = (tmp_path / "results").iterdir()
        files = [run_dir / name for name in ("metrics.csv", "episodes.csv", "zrl.log")]
        launcher = psutil.Process(proc.pid)
        _, hard = launcher.rlimit(psutil.RLIMIT_FSIZE)
        launcher.rlimit(psutil.RLIMIT_FSIZE, (min(f.stat().st_size for f in files), hard))
        rows_before = len(metrics_rows(tmp_path))
        time.sleep(3)
        assert len(metrics_rows(tmp_path)) == rows_before  # refused: nothing reached metrics.csv meanwhile
        assert proc.poll() is None, proc.communicate()[1][-3000:]  # and the run goes on
        launcher.rlimit(psutil.RLIMIT_FSIZE, (hard, hard))
        time.sleep(2)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-3000:]
    folder = run_dir.relative_to(tmp_path)
    assert err.count(f"cannot write {folder / 'metrics.csv'}") == 1, err[-3000:]
    assert err.count(f"{folder / 'metrics.csv'} is written again, nothing was lost") == 1, err[-3000:]
    assert err.count(f"cannot write {folder / 'zrl.log'}") == 1, err[-3000:]
    assert err.count("TensorBoard events cannot be written") <= 1 and "Traceback" not in err, err[-3000:]
    elapsed = [float(r["elapsed_s"]) for r in metrics_rows(tmp_path)]
    assert len(elapsed) > rows_before + 10 and elapsed == sorted(elapsed)
    assert max(b - a for a, b in zip(elapsed, elapsed[1:])) < 1.5  # a row every 0.25 s: none of the outage's lost
    log = (run_dir / "zrl.log").read_text()
    assert "Logging error" not in log and "Logging error" not in err
