"""Garbage at every PULL socket of a live run, V-trace and Ape-X (the broker's unrolls or transitions, its
credits and, for Ape-X, the learner's priorities; the learner's batches; the launcher's stats): random bytes, real messages with flipped bits, well-formed messages that no role of this
run could have sent. Each that does not fit the run is a counted protocol error (a flipped bit can still leave
a message that fits, and that one is taken as it would be from a worker); the run goes on, and no forged count
reaches its metrics or checkpoints."""

from __future__ import annotations

import signal
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
import zmq
from conftest import (
    REPO,
    batch_message,
    command,
    last_metric,
    metrics_rows,
    transitions_message,
    unroll_message,
    zrl_processes,
)

from zrl import checkpoint, protocol
from zrl.agents.apex_iqn.messages import PriorityUpdate, TransitionBatch
from zrl.namespace import private_prefix

SMOKE = REPO / "config" / "smoke.toml"
APEX_CARTPOLE = REPO / "config" / "apex_iqn_cartpole.toml"
CREDIT = protocol.Credit(batches=1).encode()  # a valid message, but on the stats channel it is no stats
MESSAGES = 12_000


def _forgeries(rng: np.random.Generator) -> list[bytes]:
    """Well-formed messages that do not fit the run (smoke: 2 workers x 2 envs, T = 10, Pong's 6 actions)."""
    m, t, a = 2, 10, 6

    def unroll(**change) -> bytes:
        return unroll_message(**{"num_envs": m, "length": t, "num_actions": a, "seq": 10**6, **change}).encode()

    def batch(**change) -> bytes:
        return batch_message(**{"size": 2, "length": t, "num_actions": a, "batch_id": 10**6, **change}).encode()

    bad_logits = np.zeros((m, t, a), np.float32)
    bad_logits[0, 0, 0] = np.nan
    return [
        unroll(worker_id=7),  # no such worker: indexing its ring would crash a careless broker
        unroll(actions=np.full((m, t), 99, np.int32)),
        unroll(first_frame=-5),
        unroll(env_frames=10**15),  # frames the worker's ring never held: it would end the run's budget
        unroll(behaviour_logits=bad_logits),
        unroll(num_envs=1),  # one env where the run has two
        protocol.Episode(
            worker_id=99,
            pid=1,
            env_index=0,
            raw_return=1e9,
            length_frames=1,
            length_env_steps=1,
            env_frames=10**15,
            wall_time=0.0,
            score_5min=0.0,
            score_30min=0.0,
        ).encode(),
        CREDIT,
        batch(worker_ids=np.array([0, 5], np.int32)),  # no such ring: a careless learner would index past its rings
        batch(env_index=np.array([0, 2], np.int32)),
        batch(actions=np.full((2, t), 6, np.int32)),
        batch(rewards=np.full((2, t), np.inf, np.float32)),
        protocol.ReplayIndex(
            replay=np.zeros(1, np.int32),
            worker_ids=np.zeros(1, np.int32),
            env_index=np.zeros(1, np.int32),
            first_frame=np.zeros(1, np.int64),
            policy_versions=np.zeros(1, np.int64),
            counts=np.zeros(1, np.int64),
            sample_calls=np.full(5, -1, np.int64),
            feature_rows=np.zeros(0, np.int32),
            features=np.zeros((0, 0, 0), np.float32),
        ).encode(),  # it would go into checkpoints
        batch(length=t + 1),  # unrolls of T + 1 steps
    ]


def _apex_forgeries() -> list[bytes]:
    """Well-formed Ape-X messages that do not fit the run (apex_iqn_cartpole: 2 workers x 1 env, CartPole's 2
    actions, a replay of 50,000 slots, batches of 32)."""
    n, b = 4, 2

    def transitions(**change) -> bytes:
        return transitions_message(**{"frames": range(n), "seq": 10**6, **change}).encode()

    def batch(**change) -> bytes:
        fields = dict(
            batch_id=10**6,
            env_frames=0,
            size=b,
            worker_ids=np.zeros(b, np.int32),
            env_index=np.zeros(b, np.int32),
            frame=np.zeros(b, np.int64),
            action=np.zeros(b, np.int32),
            nstep_return=np.zeros(b, np.float32),
            bootstrap_discount=np.ones(b, np.float32),
            next_frame=np.full(b, 3, np.int64),
            slots=np.zeros(b, np.int64),
            stamps=np.zeros(b, np.int64),
            weights=np.ones(b, np.float32),
            policy_version=np.zeros(b, np.int64),
        )
        fields.update(change)
        return TransitionBatch(**fields).encode()

    def update(**change) -> bytes:
        fields = dict(
            batch_id=1,
            size=b,
            slots=np.zeros(b, np.int64),
            stamps=np.zeros(b, np.int64),
            priorities=np.ones(b, np.float32),
        )
        fields.update(change)
        return PriorityUpdate(**fields).encode()

    return [
        transitions(worker_id=7),  # no such worker or ring
        transitions(env_index=np.full(n, 3, np.int32)),
        transitions(action=np.full(n, 9, np.int32)),
        transitions(frame=np.full(n, -4, np.int64)),
        transitions(next_frame=np.arange(n, dtype=np.int64) + 50),  # s_(t+n) more than n frames on
        transitions(nstep_return=np.full(n, np.nan, np.float32)),
        transitions(env_frames=10**15),
        batch(worker_ids=np.array([0, 5], np.int32)),
        batch(action=np.full(b, 2, np.int32)),
        batch(slots=np.full(b, 10**7, np.int64)),
        batch(weights=np.full(b, np.inf, np.float32)),  # would poison the network
        batch(
            size=40,
            **{
                k: np.zeros(40, d)
                for k, d in (
                    ("worker_ids", np.int32),
                    ("env_index", np.int32),
                    ("frame", np.int64),
                    ("action", np.int32),
                    ("nstep_return", np.float32),
                    ("bootstrap_discount", np.float32),
                    ("next_frame", np.int64),
                    ("slots", np.int64),
                    ("stamps", np.int64),
                    ("weights", np.float32),
                    ("policy_version", np.int64),
                )
            },
        ),
        update(slots=np.full(b, 10**7, np.int64)),
        update(priorities=np.full(b, np.nan, np.float32)),
        update(priorities=np.full(b, -1.0, np.float32)),
        protocol.Episode(
            worker_id=99,
            pid=1,
            env_index=0,
            raw_return=1e9,
            length_frames=1,
            length_env_steps=1,
            env_frames=10**15,
            wall_time=0.0,
            score_5min=0.0,
            score_30min=0.0,
        ).encode(),
        CREDIT,
    ]


def _fuzz_a_live_run(
    tmp_path: Path, config: Path, sockets: tuple[str, ...], forgeries: list[bytes], roles: int, *settings: str
) -> None:
    """Start zrl-launch on ``config``, wait for the learner to step, send MESSAGES of garbage spread over the run's
    PULL ``sockets``, and hold the run to counting them while it trains on, then stop it with Ctrl-C."""
    args = [
        item for key in ("run.max_env_frames=100000000", "run.log_interval_s=0.5", *settings) for item in ("--set", key)
    ]
    proc = subprocess.Popen(
        command("zrl-launch", "--config", config, *args, "--quiet"),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    ctx = zmq.Context()
    socks = []
    try:
        deadline = time.monotonic() + 120
        while last_metric(tmp_path, "learner_step") < 3:
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "the learner never stepped"
            time.sleep(0.3)
        (private,) = Path(tempfile.gettempdir()).glob(f"{private_prefix()}{proc.pid}-*")
        assert private.stat().st_mode & 0o777 == 0o700  # the run's private socket folder: its owner's alone
        assert sorted(sockets) == sorted(p.name for p in private.iterdir() if p.name in sockets)
        for name in sockets:
            sock = ctx.socket(zmq.PUSH)
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.SNDHWM, 100_000)
            sock.connect(f"ipc://{private / name}")
            socks.append(sock)
        rng = np.random.default_rng(5)
        seeds = [
            *forgeries,
            protocol.WorkerStats(
                worker_id=0,
                pid=1,
                time=0.0,
                env_frames=0,
                env_steps=0,
                unrolls_sent=0,
                policy_version=0,
                weight_updates=0,
                step_time_s=0.0,
                inference_time_s=0.0,
                ring_write_time_s=0.0,
                send_time_s=0.0,
                weights_wait_time_s=0.0,
            ).encode(),
        ]
        step_before = last_metric(tmp_path, "learner_step")
        for i in range(MESSAGES):
            kind = i % 3
            if kind == 0:  # random bytes, sometimes msgpack-looking
                data = rng.integers(0, 256, int(rng.integers(0, 300)), dtype=np.uint8).tobytes()
                if rng.random() < 0.3:
                    data = b"\x8f" + data
            elif kind == 1:  # a real or forged message with flipped bits
                buf = bytearray(seeds[int(rng.integers(0, len(seeds)))])
                for _ in range(int(rng.integers(1, 4))):
                    buf[int(rng.integers(0, len(buf)))] ^= 1 << int(rng.integers(0, 8))
                data = bytes(buf)
            else:  # a forgery, untouched
                data = seeds[int(rng.integers(0, len(seeds) - 1))]
            target = i % len(socks)
            if data == CREDIT and sockets[target] == "credits":  # a valid credit there: give it to the stats socket
                target = sockets.index("stats")
            socks[target].send(data)
            if i % 500 == 0:
                time.sleep(0.01)
        # The learner's batches PULL fair-queues the forger with the broker, so it takes one forged message per
        # real batch, that is per step: on a slow machine its count rises at the learner's step rate.
        deadline = time.monotonic() + 90
        while (
            last_metric(tmp_path, "learner_step") < step_before + 5
            or last_metric(tmp_path, "decode_errors") < 1000
            or last_metric(tmp_path, "stats_decode_errors") < 1000
            or last_metric(tmp_path, "learner_decode_errors") < 500
        ):
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            assert time.monotonic() < deadline, (
                f"training stopped, or the errors were not counted: {metrics_rows(tmp_path)[-1]}"
            )
            time.sleep(0.3)
        rows = metrics_rows(tmp_path)
        assert int(rows[-1]["worker_restarts"]) == 0 and len(zrl_processes()) == roles
        assert max(int(float(r["env_frames"])) for r in rows) < 10**12  # forged frame counts were not taken
        assert all(np.isfinite(float(r["total_loss"])) for r in rows if r.get("total_loss"))  # nothing poisoned it
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=90)
        assert proc.returncode == 130, err[-3000:]
        (run_dir,) = (tmp_path / "results").iterdir()
        final = next(state for _, state, _ in checkpoint.newest_good(run_dir / "checkpoints") if state is not None)
        assert final["env_frames"] < 10**12  # nor by the broker and learner, into the checkpoint a resume reads
    finally:
        for sock in socks:
            sock.close()
        ctx.term()
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.e2e
def test_garbage_at_every_pull_socket_is_counted_and_the_run_goes_on(tmp_path, no_leaks):
    _fuzz_a_live_run(
        tmp_path, SMOKE, ("unrolls", "credits", "stats", "batches"), _forgeries(np.random.default_rng(5)), 4
    )


@pytest.mark.e2e
def test_garbage_at_every_pull_socket_of_an_apex_run_is_counted_and_the_run_goes_on(tmp_path, no_leaks):
    """The Ape-X roles' PULL sockets: the broker's transitions (on the unrolls endpoint), credits and the
    learner's priorities, the learner's batches, the launcher's stats."""
    _fuzz_a_live_run(
        tmp_path,
        APEX_CARTPOLE,
        ("unrolls", "credits", "priorities", "stats", "batches"),
        _apex_forgeries(),
        4,
        "apex.learn_start=200",
    )


@pytest.mark.integration
def test_a_message_over_the_byte_bound_is_refused_and_other_senders_go_on(tmp_path):
    """Every zrl socket bounds a message's bytes (zmq.MAXMSGSIZE), not only their count: a sender of one
    larger than the schema's limit is cut off before the message is held; a well-behaved sender goes on."""
    from zrl import transport

    ctx = zmq.Context()
    endpoint = f"ipc://{tmp_path}/pull"
    pull = transport.socket(ctx, zmq.PULL, hwm=10, bind=endpoint)
    big, small = ctx.socket(zmq.PUSH), ctx.socket(zmq.PUSH)
    try:
        for sock in (big, small):
            sock.setsockopt(zmq.LINGER, 0)
            sock.connect(endpoint)
        big.send(b"\0" * (protocol.MAX_MESSAGE_BYTES + transport.MESSAGE_SLACK_BYTES + 1))
        time.sleep(0.5)
        small.send(b"fits")
        got = [transport.recv(pull, 2000)]
        while (more := transport.recv(pull, 200)) is not None:
            got.append(more)
        assert got == [b"fits"], [len(g) if g else g for g in got]
    finally:
        for sock in (pull, big, small):
            sock.close()
        ctx.term()


@pytest.mark.integration
def test_the_largest_network_preflight_allows_has_weights_a_socket_carries(tmp_path):
    """launch.check_weights_fit's bound and the sockets' byte bound agree: the weights of the largest network
    the preflight lets through arrive over a real zrl PUB/SUB pair, and one parameter more is refused."""
    from zrl import launch, transport

    most = (protocol.MAX_MESSAGE_BYTES - protocol.WEIGHTS_HEADER_BYTES) // 4
    launch.check_weights_fit(most)
    with pytest.raises(launch.ConfigError, match=r"model: the network has 16,777,209 parameters"):
        launch.check_weights_fit(most + 1)
    ctx = zmq.Context()
    endpoint = f"ipc://{tmp_path}/weights"
    pub = transport.socket(ctx, zmq.PUB, hwm=2, bind=endpoint)
    sub = transport.socket(ctx, zmq.SUB, hwm=2, connect=endpoint)
    try:
        flat = np.arange(most, dtype=np.float32)
        frame = protocol.encode_weights(3, 7, flat)
        got = None
        for _ in range(50):  # a SUB misses what is published before it has joined
            pub.send(frame)
            if (got := transport.recv(sub, 100)) is not None:
                break
        assert got is not None
        version, step, back = protocol.decode_weights(got)
        assert (version, step, back.size, float(back[-1])) == (3, 7, most, float(most - 1))
    finally:
        for sock in (pub, sub):
            sock.close()
        ctx.term()
