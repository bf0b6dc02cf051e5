"""Rainbow-IQN Ape-X on the real pipeline: worker priorities reach the replay with their transitions, the
learner's priorities change it, and a Pong run with 2 workers writes its files and every episode's SABER
scores."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import REPO, apex_broker, assert_loadable, csv_rows, run_command, transitions_message

from shm.ring import Ring, RingSpec
from zrl import protocol
from zrl.agents.apex_iqn.actor import _first_priorities
from zrl.agents.apex_iqn.config import ApexConfig
from zrl.agents.apex_iqn.learner import apex_sgd_step
from zrl.agents.apex_iqn.messages import PriorityUpdate, Transitions
from zrl.algos.apex import NStepBuilder
from zrl.algos.iqn import NStep
from zrl.config import ModelConfig, load
from zrl.gather import TransitionGatherer
from zrl.models.iqn import build_iqn_model

PONG = REPO / "config" / "apex_iqn_pong.toml"


@pytest.mark.integration
def test_worker_priorities_arrive_with_their_transitions_and_learner_updates_change_the_tree():
    apex = ApexConfig(noisy=False, quantiles=8, target_quantiles=8, acting_quantiles=4, embedding_dim=16, n_step=3)
    torch.manual_seed(0)
    net = build_iqn_model(ModelConfig(kind="mlp", mlp_hidden=(16,)), apex, (4,), "float32", 2, 3)
    spec = RingSpec(64, {"frame": ((2, 4), "float32"), "episode_step": ((2,), "int32")})
    name = f"zrl_test_apex_{np.random.default_rng().integers(1 << 30)}"
    ring = Ring.create(name, spec)
    try:
        rng = np.random.default_rng(1)
        builder, found = NStepBuilder(2, 3), []
        frame = ring.write(frame=rng.normal(size=(2, 4)), episode_step=np.zeros(2, np.int32))
        for t in range(12):
            nxt = ring.write(frame=rng.normal(size=(2, 4)), episode_step=np.full(2, t + 1, np.int32))
            found.append(
                builder.step(
                    np.full(2, frame),
                    rng.integers(0, 3, 2),
                    rng.normal(size=2).astype(np.float32),
                    np.full(2, 0.99, np.float32),
                    np.zeros(2, bool),
                    np.full(2, nxt),
                )
            )
            frame = nxt
        cols = {k: np.concatenate([f[k] for f in found]) for k in found[0]}
        gatherer = TransitionGatherer([ring], 2, 256, (4,), "float32")
        priority = _first_priorities(net, gatherer, cols, apex, torch.Generator().manual_seed(2))
        n = len(priority)
        assert n == 2 * (12 - 2) and np.isfinite(priority).all() and (priority > 0).all()
        sent = Transitions(
            worker_id=0,
            seq=0,
            policy_version=0,
            env_frames=24,
            count=n,
            priority=priority,
            **{
                k: cols[k] for k in ("env_index", "frame", "action", "nstep_return", "bootstrap_discount", "next_frame")
            },
        )
        replay = apex_broker(100, 8, 1, 1, 2, 3, 3, 0.4, 10, 0)
        assert replay.insert(protocol.decode(sent.encode())) is None
        np.testing.assert_allclose(replay.replay.tree.priorities[:n], np.maximum(priority, 1e-6), rtol=1e-6)

        batch = protocol.decode(replay.sample_batch(1, 24, np.zeros(1, np.int64)).encode())
        obs, next_obs, ok = TransitionGatherer([ring], 2, 8, (4,), "float32").gather(batch)
        assert ok.all()
        target = build_iqn_model(ModelConfig(kind="mlp", mlp_hidden=(16,)), apex, (4,), "float32", 2, 3)
        step = apex_sgd_step(
            net,
            target,
            torch.optim.Adam(net.parameters(), 1e-3),
            obs,
            torch.from_numpy(batch.action.copy()),
            NStep(torch.from_numpy(batch.nstep_return.copy()), torch.from_numpy(batch.bootstrap_discount.copy())),
            next_obs,
            torch.from_numpy(batch.weights.copy()),
            apex,
            10.0,
        )
        before = replay.replay.tree.priorities[batch.slots].copy()
        update = PriorityUpdate(
            batch_id=1,
            size=8,
            slots=batch.slots,
            stamps=batch.stamps,
            priorities=step.priorities.astype(np.float32) + 5.0,
        )
        assert replay.reply(protocol.decode(update.encode())) is None
        after = replay.replay.tree.priorities[batch.slots]
        for slot, got in zip(batch.slots, after):  # a slot drawn twice holds one of its two new priorities
            given = (step.priorities + 5.0)[batch.slots == slot]
            assert np.isclose(given, got, rtol=1e-6).any(), (slot, got, given)
        assert not np.allclose(before, after)
    finally:
        ring.close()
        ring.unlink()


@pytest.mark.e2e
def test_pong_with_two_workers_writes_its_files_saber_scores_and_evaluations(tmp_path: Path, no_leaks):
    cfg = load(PONG)
    assert cfg.algo == "apex_iqn" and cfg.replay[0].type == "prioritized"
    small = (
        "--workers",
        "2",
        "--envs-per-worker",
        "2",
        "--set",
        "run.max_env_frames=16000",
        "--set",
        'replay=[{"type": "prioritized", "capacity": 6000}]',
        "--set",
        "apex.learn_start=1000",
        "--set",
        "apex.priority_batch=100",
        "--set",
        "apex.replay_ratio=0",
        "--set",
        "learner.batch_size=8",
        "--set",
        "learner.publish_every=5",
        "--set",
        "run.log_interval_s=1",
        "--quiet",
        # fewer quantiles: the files and scores are under test here, not IQN on Atari at full size
        "--set",
        "apex.quantiles=8",
        "--set",
        "apex.target_quantiles=8",
        "--set",
        "apex.acting_quantiles=8",
        # in colour at 64 x 48: the transitions of [3, H, W] frames through rings, gather and the IQN net (grey
        # 84 x 84 Ape-X Pong runs in tests/test_e2e.py's replay-checkpoint tests)
        "--set",
        "env.grayscale=false",
        "--set",
        "env.resolution=[64, 48]",
        # evaluation during training: SABER (auto, for a value-based agent) and the mean max-Q of held-out states
        "--set",
        "eval.interval_frames=8000",  # one at 8,000 frames, with 8,000 more to finish in; the budget's end asks none
        "--set",
        "eval.episodes=1",
        "--set",
        "eval.held_out_states=32",
        "--set",
        "eval.nice=0",
    )
    result = run_command("zrl-launch", "--config", PONG, *small, cwd=tmp_path, timeout=420)
    assert result.returncode == 0, result.stderr[-3000:]
    (run_dir,) = (tmp_path / "results").iterdir()
    assert {"config.toml", "episodes.csv", "metrics.csv", "checkpoints"} <= {p.name for p in run_dir.iterdir()}
    last = csv_rows(run_dir / "metrics.csv")[-1]
    assert int(last["learner_step"]) > 0 and int(last["worker_policy_version_max"]) > 0, last
    assert int(last["env_frames"]) >= 16000
    # the ages of the last batch's transitions in weights versions: its newest is the policy lag; the replay
    # holds transitions from several versions back
    lag, mean_age, max_age = (float(last[k]) for k in ("policy_lag", "sample_age_mean", "sample_age_max"))
    assert 0 <= lag <= mean_age <= max_age and max_age >= 1, last
    episodes = csv_rows(run_dir / "episodes.csv")
    assert episodes, "no episode finished"
    for e in episodes:  # Pong episodes here are shorter than 5 minutes: every cap holds the whole score
        scores = [float(e[k]) for k in ("score_5min", "score_30min", "raw_return")]
        assert all(math.isfinite(s) and -21 <= s <= 21 for s in scores), e
        assert scores[0] == scores[1] == scores[2], e
    assert_loadable(run_dir)
    stored = load(run_dir / "config.toml", (), stored=True)
    assert stored.env.resolution == (64, 48) and not stored.env.grayscale
    evaluations = csv_rows(run_dir / "eval.csv")
    assert [r["final"] for r in evaluations] == ["0", "1"], evaluations  # then the final checkpoint's (eval.final)
    for row in evaluations:
        assert row["protocol"] == "saber" and -21 <= float(row["mean"]) <= 21
        assert math.isfinite(float(row["mean_max_q"])), row
    with np.load(run_dir / "eval" / "held_out_states.npz") as kept:
        assert kept["states"].shape == (32, 4, 3, 64, 48) and kept["states"].any()


@pytest.mark.e2e
def test_replay_ratio_holds_env_steps_per_learner_step(tmp_path: Path, no_leaks):
    """apex.replay_ratio = 8 on CartPole, where the learner alone would run at about one step per two env
    steps: the workers and the broker hold it near 8 env steps per update past learn_start."""
    config = REPO / "config" / "apex_iqn_cartpole.toml"
    result = run_command(
        "zrl-launch",
        "--config",
        config,
        "--set",
        "run.max_env_frames=12000",
        "--set",
        "apex.replay_ratio=8",
        "--set",
        "run.log_interval_s=1",
        "--quiet",
        cwd=tmp_path,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    (run_dir,) = (tmp_path / "results").iterdir()
    learn_start = load(config).apex.learn_start
    last = csv_rows(run_dir / "metrics.csv")[-1]
    ratio = (int(last["env_frames"]) - learn_start) / int(last["learner_step"])
    assert 6.0 <= ratio <= 10.0, (ratio, last)


@pytest.mark.e2e
def test_the_c51_head_trains_on_the_pipeline_and_its_checkpoint_plays(tmp_path: Path, no_leaks):
    """apex.head = "c51" through workers, broker and learner on CartPole, then zrl-eval on its checkpoint."""
    config = REPO / "config" / "apex_iqn_cartpole.toml"
    result = run_command(
        "zrl-launch",
        "--config",
        config,
        "--set",
        "apex.head=c51",
        "--set",
        "apex.v_min=0",
        "--set",
        "apex.v_max=10",
        "--set",
        "run.max_env_frames=6000",
        "--quiet",
        cwd=tmp_path,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    (run_dir,) = (tmp_path / "results").iterdir()
    latest = assert_loadable(run_dir)
    state = torch.load(latest, weights_only=True)
    assert state["model"]["support"].tolist() == torch.linspace(0, 10, 51).tolist()
    assert int(csv_rows(run_dir / "metrics.csv")[-1]["learner_step"]) > 100
    episodes = csv_rows(run_dir / "episodes.csv")
    # The run's frames at an episode's end count the episode itself, the first ones (before any worker's
    # stats have come) too.
    assert all(int(e["env_frames"]) >= int(e["length_frames"]) > 0 for e in episodes), episodes[:3]
    played = run_command("zrl-eval", latest, "--episodes", "2", cwd=tmp_path, timeout=300)
    assert played.returncode == 0, played.stderr[-3000:]
    assert "score" in played.stdout


@pytest.mark.integration
def test_the_apex_broker_counts_worker_messages_lost_in_flight(tmp_path: Path, no_leaks):
    """The Ape-X broker counts a gap in a worker's message numbers as the V-trace broker does (it once reported
    seq_gaps = 0 whatever happened): real roles, one real worker, and one message numbered past the next."""
    import zmq

    from zrl import envs, transport
    from zrl.bench.roles import Pipeline

    cfg = load(REPO / "config" / "apex_iqn_cartpole.toml", ["workers.count=1", "apex.learn_start=40000"])
    with Pipeline(cfg, envs.probe(cfg.env), with_learner=False, workdir=tmp_path) as pipe:
        pipe.watch(120, until=lambda p: p.broker is not None and p.broker.unrolls_received > 0)
        ctx = zmq.Context()
        push = transport.socket(ctx, zmq.PUSH, hwm=10, connect=pipe.endpoints.unrolls)
        try:
            got = pipe.broker
            seq = 15_000  # 10,000 past every number the worker has sent or will send meanwhile
            push.send(transitions_message(seq=seq).encode())
            pipe.watch(30, until=lambda p: p.broker.seq_gaps > 0 and p.broker.time > got.time)
        finally:
            push.close()
            ctx.term()
        stats = pipe.broker
        assert stats.decode_errors == 0
        assert seq - 10**4 < stats.seq_gaps <= seq, stats


@pytest.mark.e2e
def test_an_apex_start_from_a_checkpoint_keeps_its_moments_and_takes_this_configs_hyperparameters(
    tmp_path: Path, no_leaks
):
    """--init-from with --init-optimizer on Ape-X: Adam's moments (and its step count) carry over, and the new
    config's eps and learning rate apply (the Ape-X learner once kept the checkpoint's), as for V-trace."""
    config = REPO / "config" / "apex_iqn_cartpole.toml"
    first = run_command(
        "zrl-launch", "--config", config, "--set", "run.max_env_frames=1500", "--quiet", cwd=tmp_path, timeout=300
    )
    assert first.returncode == 0, first.stderr[-3000:]
    (run_dir,) = (tmp_path / "results").iterdir()
    ckpt = checkpoint_latest(run_dir)
    before = torch.load(ckpt, weights_only=True)
    assert before["optimizer"]["param_groups"][0]["eps"] == load(config).learner.adam_eps
    second = run_command(
        "zrl-launch",
        "--config",
        config,
        "--init-from",
        ckpt,
        "--init-optimizer",
        "--set",
        "run.max_env_frames=1500",
        "--set",
        "learner.adam_eps=0.01",
        "--set",
        "learner.learning_rate=0.002",
        "--set",
        "learner.lr_end=0.002",
        "--quiet",
        cwd=tmp_path,
        timeout=300,
    )
    assert second.returncode == 0, second.stderr[-3000:]
    (new_dir,) = [d for d in (tmp_path / "results").iterdir() if d != run_dir]
    after = torch.load(checkpoint_latest(new_dir), weights_only=True)
    group = after["optimizer"]["param_groups"][0]
    assert (group["eps"], group["lr"]) == (0.01, 0.002), group
    adam_steps = int(after["optimizer"]["state"][0]["step"])
    assert adam_steps == before["learner_step"] + after["learner_step"] > before["learner_step"]


def checkpoint_latest(run_dir: Path) -> Path:
    from zrl import checkpoint

    latest = checkpoint.latest(run_dir / "checkpoints")
    assert latest is not None, f"no checkpoint in {run_dir}"
    return latest
