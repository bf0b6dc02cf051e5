"""Learning: V-trace through the whole pipeline (real workers, rings, broker, learner, weights back)
solves CartPole-v1 within a fixed budget of environment steps.

Budget: config/cartpole.toml's run.max_env_frames (100,000 env steps; CartPole has one frame per
step), seeds 0, 1 and 2. Assertion: the mean raw return of the last 20 finished episodes is at least 475
on each (the maximum is 500; a random policy's is about 22). The test asserts the return the policy
reached, never a time.
"""

from __future__ import annotations

import csv
import json

import pytest

from conftest import REPO, run_command
from zrl import checkpoint, config

CARTPOLE = REPO / "config" / "cartpole.toml"
BUDGET_ENV_STEPS = 100_000


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_vtrace_solves_cartpole_within_budget(tmp_path, no_leaks, seed):
    cfg = config.load(CARTPOLE)
    assert cfg.run.max_env_frames == BUDGET_ENV_STEPS
    result = run_command("zrl-launch", "--config", CARTPOLE, "--set", f"run.seed={seed}", "--quiet", cwd=tmp_path,
                         timeout=600)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    (run_dir,) = (tmp_path / "results").iterdir()
    with open(run_dir / "episodes.csv") as fh:
        episodes = list(csv.DictReader(fh))
    returns = [float(e["raw_return"]) for e in episodes]
    assert len(returns) >= 20
    last_20 = sum(returns[-20:]) / 20
    assert last_20 >= 475, f"seed {seed}: mean return of the last 20 episodes is {last_20:.1f} after {BUDGET_ENV_STEPS:,} env steps"


APEX_CARTPOLE = REPO / "config" / "apex_iqn_cartpole.toml"
APEX_BUDGET_ENV_STEPS = 100_000


def test_apex_iqn_solves_cartpole_within_budget(tmp_path, no_leaks):
    """Rainbow-IQN Ape-X through the whole pipeline (2 workers' transitions with their own priorities, the
    prioritized broker, the IQN learner, priorities and weights back), MLP torso, seed 0, 100,000 env steps;
    then zrl-eval plays the run's last checkpoint greedily: its mean return over 20 episodes is at least 400.

    The policy is judged by its checkpoint, not by the training episodes: Ape-X workers explore by design
    (worker 0 acts at random one step in ten), so a policy that holds CartPole to 500 trains with episodes
    that fall short of it (one CI run's last 20 averaged 366). The training returns must still rise well above a
    random policy's 22. About 4 minutes on two cores."""
    cfg = config.load(APEX_CARTPOLE)
    assert cfg.algo == "apex_iqn" and cfg.run.max_env_frames == APEX_BUDGET_ENV_STEPS and cfg.run.seed == 0
    result = run_command("zrl-launch", "--config", APEX_CARTPOLE, "--quiet", cwd=tmp_path, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    (run_dir,) = (tmp_path / "results").iterdir()
    with open(run_dir / "episodes.csv") as fh:
        returns = [float(e["raw_return"]) for e in csv.DictReader(fh)]
    assert len(returns) >= 20
    last_20 = sum(returns[-20:]) / 20
    assert last_20 >= 200, f"mean return of the last 20 training episodes is {last_20:.1f}"
    last = checkpoint.latest(run_dir / "checkpoints")
    played = run_command("zrl-eval", last, "--episodes", "20", "--workers", "2", "--quiet", cwd=tmp_path, timeout=300)
    assert played.returncode == 0, played.stderr[-3000:]
    (report,) = (run_dir / "eval").glob("deepmind_*.json")
    score = json.loads(report.read_text())["score"]["mean"]
    assert score >= 400, f"{last.name} scores {score:.1f} over 20 greedy episodes after {APEX_BUDGET_ENV_STEPS:,} env steps"


PONG_BUDGET_FRAMES = 2_500_000


def test_the_default_agent_starts_learning_pong_within_a_frame_budget(tmp_path, no_leaks):
    """The plain zrl-launch (the README's first command: V-trace, Pong, every default) for 2.5M env frames,
    seed 0, about 4 minutes on two cores (at 1.5M frames one CI run had 0.984 of uniform). Pong's return barely moves this early (it leaves -20 after about 3M
    frames, see perf/results/learning/), but learning shows: the policy's entropy falls off the uniform
    policy's log(6), averaged over the last third of the logged rows (a row holds one step's losses). On the
    run that set the defaults it was 0.93-0.95 of uniform from 1M frames on; the old defaults (batches of 32
    at 0.8 steps/s) had made a few hundred steps by then, their entropy at uniform (issue "1 of 7"). The value
    loss is only checked to stay finite: it is too noisy this early to assert a fall (10 to 4 in one run, 8.5
    to 7.7 in another)."""
    import math

    result = run_command("zrl-launch", "--set", f"run.max_env_frames={PONG_BUDGET_FRAMES}", "--set", "run.seed=0",
                         "--set", "run.log_interval_s=2.0", "--quiet", cwd=tmp_path, timeout=1200)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    (run_dir,) = (tmp_path / "results").iterdir()
    with open(run_dir / "metrics.csv") as fh:
        rows = [r for r in csv.DictReader(fh) if r["entropy_loss"] not in ("", "nan")]
    assert len(rows) >= 30, f"only {len(rows)} rows of learner figures"
    samples = cfg_samples_per_step()
    third = len(rows) // 3
    uniform = math.log(6)  # Pong's minimal action set

    def entropy(part):  # mean policy entropy per sample, as a fraction of the uniform policy's
        return sum(-float(r["entropy_loss"]) / samples for r in part) / len(part) / uniform

    last = rows[-third:]
    assert entropy(last) < 0.97, f"entropy still {entropy(last):.3f} of uniform after {PONG_BUDGET_FRAMES:,} frames"
    assert all(math.isfinite(float(r["baseline_loss"])) and math.isfinite(float(r["grad_norm"])) for r in rows)


def cfg_samples_per_step() -> int:
    """T x B of the default config: the losses in metrics.csv are sums over them."""
    cfg = config.load(None)
    return cfg.learner.batch_size * cfg.learner.unroll_length
