"""Issue 38, item 2: what a remote peer sends is checked like the unit fields, and nothing it names reaches the
console or zrl.log raw. A hand-made remote worker on a real ingest (tests/test_remote.py's harness)."""

from __future__ import annotations

import math
import os

import pytest
import zmq
from conftest import REPO, learner_stats_message
from remote_client import M
from test_remote import ingest_running

from zrl import envs, protocol
from zrl.config import load
from zrl.launch.wiring import Wiring
from zrl.roles.reporting import StatsOut

pytestmark = pytest.mark.integration

FORGED_HOST = "evil\x1b[2J\r\nFAKE 2026-11-30 12:00:00 INFO run stopped\u202e"


def _episode(**fields) -> protocol.Episode:
    values = dict(worker_id=1, pid=1, env_index=0, raw_return=21.0, length_frames=400, length_env_steps=100,
                  env_frames=0, wall_time=1.5, score_5min=21.0, score_30min=21.0)  # fmt: skip
    return protocol.Episode(**{**values, **fields})


def _raw(text: str) -> bool:
    return any(ch in text for ch in "\x1b\r\n\u202e")


def test_a_peers_host_name_and_leave_reason_reach_the_log_escaped(no_leaks):
    with ingest_running() as h:
        client = h.client()
        joined = client.ask(protocol.Join(run="run_a", host=FORGED_HOST, pid=1, envs_per_worker=M, zrl_version="\x07"))
        assert isinstance(joined, protocol.Welcome), joined
        client.send(protocol.Leave(reason="bye\r\n2026-11-30 ERROR forged\x1b[31m"))
        h.ingest_stats(lambda s: s.remote_joins == 1 and s.remote_workers == 0)
        notices = [s.text for s in h.stats if isinstance(s, protocol.Notice)]
        assert len(notices) == 2 and not any(_raw(text) for text in notices), notices
        assert "evil\\x1b[2J\\x0d\\x0aFAKE 2026-11-30" in notices[0] and "zrl \\x07" in notices[0]
        assert "left (bye\\x0d\\x0a2026-11-30 ERROR forged\\x1b[31m)" in notices[1]


EPISODES_OUT_OF_RANGE = {
    "raw_return of inf": {"raw_return": math.inf},
    "score_30min of nan": {"score_30min": math.nan},
    "raw_return of -1e+13": {"raw_return": -1e13},
    "500 env steps in 400 frames": {"length_env_steps": 500},
    f"env {M}, not one of a worker's {M}": {"env_index": M},
    "wall time that is not finite": {"wall_time": math.inf},
}


def test_an_episode_out_of_range_from_a_peer_is_refused_and_not_passed_on(no_leaks):
    with ingest_running() as h:
        client = h.client()
        for why, fields in EPISODES_OUT_OF_RANGE.items():
            assert isinstance(client.join(), protocol.Welcome), why  # a refusal ends the session, as for frames
            refused = client.ask(_episode(**fields))
            assert isinstance(refused, protocol.Refused) and why in refused.reason, refused
        assert isinstance(client.join(), protocol.Welcome)
        client.send(_episode())  # a sane one goes through
        h.ingest_stats(lambda s: s.remote_refused == len(EPISODES_OUT_OF_RANGE))
        h.ingest_stats(lambda s: any(isinstance(m, protocol.Episode) for m in h.stats), timeout=5)
        episodes = [m for m in h.stats if isinstance(m, protocol.Episode)]
        assert [e.raw_return for e in episodes] == [21.0], episodes


def test_the_gate_gives_weights_only_to_a_worker_that_joined(no_leaks):
    with ingest_running() as h:
        stranger = h.client()
        answer = stranger.ask(protocol.WeightsRequest(worker_id=1))
        assert isinstance(answer, protocol.Refused) and "has not joined" in answer.reason, answer
        worker = h.client()
        assert isinstance(worker.join(), protocol.Welcome)
        assert worker.ask(protocol.WeightsRequest(worker_id=1), timeout_ms=1000) is None  # not refused: it waits
        # for the learner's first weights (the harness serves none); tests/test_remote_e2e.py's real zrl-worker
        # gets its weights this way


def test_a_stats_message_without_the_runs_token_is_dropped_whatever_pid_it_names(no_leaks):
    """With transport.plaintext, any local user can connect to the run's stats socket on loopback TCP. A LearnerStats
    naming the learner's pid and a checkpoint outside the run (best.pt would be copied from it) is dropped and
    counted; only the token, which only the launcher's own roles hold, lets a message through."""
    cfg = load(REPO / "config" / "cartpole.toml", ['transport.kind="tcp"', "transport.plaintext=true"])
    wiring = Wiring(cfg, envs.probe(cfg.env))
    ctx = zmq.Context()
    try:
        wiring.open()
        forged = learner_stats_message(pid=os.getpid(), checkpoint_path="/tmp/elsewhere/ckpt_000000001.pt").encode()
        stranger = ctx.socket(zmq.PUSH)
        stranger.setsockopt(zmq.LINGER, 0)
        stranger.connect(wiring.endpoints.stats)
        stranger.send(forged)
        stranger.send_multipart([b"0" * 16, forged])
        role = StatsOut.connect(ctx, wiring.roles, hwm=10)
        role.send(b"from a role")
        got = [data for _ in range(20) if (data := wiring.take_stats(100)) is not None]
        assert got == [b"from a role"] and wiring.stats_forged == 2, (got, wiring.stats_forged)
        role.close()
        stranger.close()
    finally:
        ctx.destroy(linger=0)
        wiring.close()
