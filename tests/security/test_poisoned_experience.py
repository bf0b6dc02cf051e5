"""Issue 38, item 1: experience a worker sends cannot wreck the model.

A remote worker slot on loopback takes any local user's client. Here one joins a real CartPole run and sends
unrolls whose rewards are 1e30, well-formed in every other way. The broker refuses each one and says why, the
learner keeps stepping on the local worker's experience, and its checkpoints hold finite weights. With the
broker's range opened up (broker.max_abs_reward), the learner is the last guard: it skips each step whose loss is
not finite, and after learner.max_nonfinite_steps in a row goes back to its latest checkpoint."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import numpy as np
import pytest
import zmq
from conftest import REPO, assert_loadable, command, metrics_rows, unroll_message, wait_for_checkpoint, wait_until
from remote_client import Client, M, T, connect_words, keyed_dealer, remote_data

from zrl import protocol

pytestmark = pytest.mark.e2e

POISONED = 40


def _poisoned_run(tmp_path: Path, *sets: str, until) -> tuple[str, str]:
    """A CartPole run with a remote slot, a first checkpoint, then POISONED unrolls of rewards 1e30 sent into the
    slot; Ctrl-C once ``until(metrics rows)`` holds. (stdout, zrl.log)."""
    options = ["workers.count=1", "workers.remote=1", f"workers.envs_per_worker={M}", f"learner.unroll_length={T}",
               "run.max_env_frames=100000000", "run.checkpoint_every_steps=5", "run.log_interval_s=0.5", *sets]  # fmt: skip
    proc = subprocess.Popen(
        command("zrl-launch", "--config", REPO / "config" / "cartpole.toml", *(f"--set={s}" for s in options)),
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    ctx = zmq.Context()
    try:
        words = connect_words(tmp_path)
        wait_for_checkpoint(tmp_path)
        client = Client(keyed_dealer(ctx, words["connect"], words["keys"]))  # the run's key for this host
        welcome = client.join(run=words["run"])
        assert isinstance(welcome, protocol.Welcome), welcome
        huge = np.full((M, T), 1e30, np.float32)
        for seq in range(POISONED):
            message = unroll_message(
                num_envs=M, length=T, num_actions=2, worker_id=welcome.worker_id, first_frame=seq * T, rewards=huge
            )
            first, count = (0, T + 1) if seq == 0 else (seq * T + 1, T)
            sent = remote_data(seq, first, count, seq * T, worker_id=welcome.worker_id, message=message.encode())
            assert client.send(sent), seq
        wait_until(lambda: until(metrics_rows(tmp_path)), 120, "the run to deal with the poisoned unrolls")
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=90)
    finally:
        ctx.destroy(linger=0)
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, err[-3000:]
    (run_dir,) = (tmp_path / "results").iterdir()
    assert_loadable(run_dir)  # the last checkpoint, written as the run stopped, holds finite weights
    return out, (run_dir / "zrl.log").read_text()


def test_the_broker_refuses_rewards_of_1e30_and_the_model_stays_finite_and_learning(tmp_path, no_leaks):
    steps = []

    def refused_and_stepped_on(rows) -> bool:
        if rows and int(rows[-1]["decode_errors"] or 0) >= POISONED:
            steps.append(int(rows[-1]["learner_step"]))
            return steps[-1] > steps[0] + 20  # and the learner went on stepping
        return False

    out, log = _poisoned_run(tmp_path, until=refused_and_stepped_on)
    assert "zrl-broker: refused a message from worker 1: rewards out of range: |1e+30| > broker.max_abs_reward" in log
    assert "refused a message from worker 1" in out  # said on the terminal too
    assert "(10 refused so far" in log and "(100 refused so far" not in log  # said at the 1st and 10th, not each
    rows = metrics_rows(tmp_path)
    assert all(np.isfinite(float(r["total_loss"])) for r in rows if r["total_loss"])
    assert int(rows[-1]["nonfinite_steps"]) == 0


def test_past_the_broker_the_learner_skips_non_finite_steps_and_goes_back_to_its_checkpoint(tmp_path, no_leaks):
    out, log = _poisoned_run(
        tmp_path, "broker.max_abs_reward=1e38", "learner.max_nonfinite_steps=3",
        until=lambda rows: rows and int(rows[-1]["nonfinite_steps"] or 0) >= 6,
    )  # fmt: skip
    assert "zrl-learner: skipped learner step" in log and "the weights stay" in log
    assert "zrl-learner: restored the model and optimiser from ckpt_" in log
    assert "after 3 non-finite steps in a row" in out
