"""What a remote worker and the run's ingest say to each other (zrl-worker on another host, over CurveZMQ), and the
notices a role asks the launcher to log."""

from typing import Annotated

import numpy as np
from msgspec import Meta

from zrl.protocol.framework import Array, Count, Message, Text


class Join(Message, tag="join"):
    """remote worker -> ingest: admit me. ``run``: the run (its folder's name) the worker was started for, ""
    for whichever listens; ``envs_per_worker``: what it was told to step, 0 for the run's; ``host``: where it runs,
    for the run's log."""

    run: Text
    host: Text
    pid: Count
    envs_per_worker: Count
    zrl_version: Text


class Welcome(Message, tag="welcome"):
    """ingest -> remote worker: you are worker ``worker_id`` (its ``generation``-th worker, which had played
    ``env_frames`` in this launch) of run ``run``; ``config``: the run's resolved config (TOML), the one source of
    the worker's settings; ``env_spec``: what its envs must give (checked on the worker's host); weights are
    broadcast on ``weights_port`` of the gate's host."""

    run: Text
    worker_id: Count
    generation: Count
    env_frames: Count
    env_frames_start: Count
    weights_port: Count
    env_spec: Text
    config: Text


class Refused(Message, tag="refused"):
    """ingest -> remote worker: a message was refused, and why; ``final`` 1: do not join again (another run, a
    worker that cannot fit it), 0: join again (a slot may free up, the run may have restarted)."""

    reason: Text
    final: Annotated[int, Meta(ge=0, le=1)]


class Ack(Message, tag="ack"):
    """ingest -> remote worker, for each of its heartbeats: the session is alive, and ``live_workers`` share
    the learner's appetite now."""

    live_workers: Count


class Leave(Message, tag="leave"):
    """remote worker -> ingest: I am stopping; free my slot now rather than when my heartbeats stop."""

    reason: Text


class RemoteData(Message, tag="remote_data", eq=False):
    """remote worker -> ingest: the ``count`` ring slots the worker wrote since its last RemoteData (its own
    frame numbers from ``first_frame``), compressed with zstd (each slot's fields, field by field as the ring
    lays them out), then one ``message`` (an encoded Unroll or Transitions) that may name only frames sent in
    this session. ``seq`` numbers the session's RemoteData from 0."""

    seq: Count
    first_frame: Count
    count: Count
    frames: Annotated[np.ndarray, Array("uint8", "Z")]
    message: Annotated[np.ndarray, Array("uint8", "K")]


class Notice(Message, tag="notice"):
    """role -> launcher (on the stats channel): something the run's log and live line should say (a remote
    worker joined or left, a key was refused)."""

    role: Text
    pid: int
    text: Text
