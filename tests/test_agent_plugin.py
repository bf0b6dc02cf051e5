"""An agent kept outside zrl (tests/onestep_agent) runs end to end through the real roles: the plug-in claim."""

from __future__ import annotations

import pytest
from conftest import csv_rows, run_command, tensorboard_scalars

from zrl.dashboard import RunView

pytestmark = pytest.mark.e2e

ONESTEP_RUN = """algo = "onestep"

[run]
max_env_frames = 8000
log_interval_s = 1.0
checkpoint_every_steps = 0

[env]
id = "CartPole-v1"
frame_stack = 1
clip_rewards = false

[model]
kind = "mlp"
mlp_hidden = [32, 32]
feature_size = 32

[workers]
count = 2
envs_per_worker = 2

[learner]
batch_size = 8
learning_rate = 0.001
torch_threads = 1

[onestep]
steps = 5
fill = 24

[[replay]]
type = "queue"
capacity = 64
sample_ratio = 1.0
"""


def test_an_agent_outside_zrl_runs_end_to_end_through_the_real_roles(onestep, tmp_path, no_leaks):
    """An agent defined only under tests/, with its own messages, config section, replay-fill rule, and learner and
    broker figures, trains CartPole through the real launcher, worker, broker and learner processes: its figures
    reach metrics.csv, TensorBoard and the dashboard's data, and zrl changes nowhere for it."""
    (tmp_path / "onestep.toml").write_text(ONESTEP_RUN)
    done = run_command("zrl-launch", "--config", "onestep.toml", "--quiet", cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    (run_dir,) = (tmp_path / "results").iterdir()
    rows = csv_rows(run_dir / "metrics.csv")
    assert {"onestep_advantage", "onestep_held"} <= set(rows[0]) and "pg_loss" not in rows[0]
    assert max(float(r["learner_step"] or 0) for r in rows) > 10
    assert any(float(r["onestep_advantage"] or 0) > 0 for r in rows)
    assert any(float(r["onestep_held"] or 0) > 0 for r in rows)
    assert "[onestep]\nsteps = 5\nfill = 24" in (run_dir / "config.toml").read_text()
    assert "training starts once they hold 24 units" in (run_dir / "zrl.log").read_text()  # its fill rule
    tags = tensorboard_scalars(run_dir)
    assert "learner/onestep_advantage" in tags and "broker/onestep_held" in tags
    shown = {f["name"]: f for f in RunView(run_dir).state()["agent_figures"]}
    assert shown["onestep_advantage"]["doc"] == onestep.learner_figures["onestep_advantage"]
    assert shown["onestep_advantage"]["value"] is not None and "elite_lambda" not in shown
