"""Learning: V-trace through the whole pipeline (real workers, rings, broker, learner, weights back)
solves CartPole-v1 within a fixed budget of environment steps.

Budget: config/cartpole.toml's run.max_env_frames (500,000 env steps; CartPole has one frame per
step), seed 0. Assertion: the mean raw return of the last 20 finished episodes is at least 400
(the maximum is 500). The test asserts the return the policy reached, never a time.
"""

from __future__ import annotations

import csv

from conftest import REPO, run_command
from zrl import config

CARTPOLE = REPO / "config" / "cartpole.toml"
BUDGET_ENV_STEPS = 500_000


def test_vtrace_solves_cartpole_within_budget(tmp_path, no_leaks):
    cfg = config.load(CARTPOLE)
    assert cfg.run.max_env_frames == BUDGET_ENV_STEPS and cfg.run.seed == 0
    result = run_command("zrl-launch", "--config", CARTPOLE, "--quiet", cwd=tmp_path, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    (run_dir,) = (tmp_path / "results").iterdir()
    with open(run_dir / "episodes.csv") as fh:
        episodes = list(csv.DictReader(fh))
    returns = [float(e["raw_return"]) for e in episodes]
    assert len(returns) >= 20
    last_20 = sum(returns[-20:]) / 20
    assert last_20 >= 400, f"mean return of the last 20 episodes is {last_20:.1f} after {BUDGET_ENV_STEPS:,} env steps"


APEX_CARTPOLE = REPO / "config" / "apex_iqn_cartpole.toml"
APEX_BUDGET_ENV_STEPS = 100_000


def test_apex_iqn_solves_cartpole_within_budget(tmp_path, no_leaks):
    """Rainbow-IQN Ape-X through the whole pipeline (2 workers' transitions with their own priorities, the
    prioritized broker, the IQN learner, priorities and weights back), MLP torso, seed 0: the mean raw return
    of the last 20 episodes within 100,000 env steps is at least 400. About 4 minutes on two cores."""
    cfg = config.load(APEX_CARTPOLE)
    assert cfg.algo == "apex_iqn" and cfg.run.max_env_frames == APEX_BUDGET_ENV_STEPS and cfg.run.seed == 0
    result = run_command("zrl-launch", "--config", APEX_CARTPOLE, "--quiet", cwd=tmp_path, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    (run_dir,) = (tmp_path / "results").iterdir()
    with open(run_dir / "episodes.csv") as fh:
        returns = [float(e["raw_return"]) for e in csv.DictReader(fh)]
    assert len(returns) >= 20
    last_20 = sum(returns[-20:]) / 20
    assert last_20 >= 400, f"mean return of the last 20 episodes is {last_20:.1f} after {APEX_BUDGET_ENV_STEPS:,} env steps"
