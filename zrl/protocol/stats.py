"""The roles' reports to the launcher, about once a second: each field marked :class:`Stat` is a column of
metrics.csv (the launcher's tally and the CSV header are made from these declarations)."""

from typing import Annotated

import numpy as np

from zrl.protocol.framework import Array, Count, Figures, Message, Stat, Text


class WorkerStats(Message, tag="worker_stats"):
    """worker -> launcher, about once a second; doubles as heartbeat. Its figures are cumulative since the
    worker started; metrics.csv sums or bounds them over the workers (their latest reports)."""

    worker_id: int
    pid: int
    time: float
    env_frames: int
    env_steps: int
    unrolls_sent: int
    policy_version: Annotated[
        int,
        Stat("the oldest weights version a worker acts with", column="worker_policy_version_min", combine="min"),
        Stat("the newest weights version a worker acts with", column="worker_policy_version_max", combine="max"),
    ]
    weight_updates: int
    step_time_s: Annotated[float, Stat("seconds stepping the envs", column="time_env_step_s", combine="sum")]
    inference_time_s: Annotated[float, Stat("seconds of policy inference", column="time_inference_s", combine="sum")]
    ring_write_time_s: Annotated[
        float, Stat("seconds writing frames into the rings", column="time_ring_write_s", combine="sum")
    ]
    send_time_s: Annotated[float, Stat("seconds sending unroll messages", column="time_send_s", combine="sum")]
    weights_wait_time_s: Annotated[
        float,
        Stat("seconds waiting for weights", column="worker_weights_wait_s", combine="sum"),
        Stat("seconds waiting for weights", column="time_weights_wait_s", combine="sum"),
    ]


class BrokerStats(Message, tag="broker_stats", eq=False):
    """broker -> launcher, about once a second: its counts (cumulative) and its replays' state."""

    pid: int
    time: float
    unrolls_received: Annotated[int, Stat("units (Ape-X: transitions) received from the workers and inserted")]
    unrolls_dropped_stale: Annotated[
        int, Stat("units (Ape-X: transitions) dropped because their ring had overwritten their frames")
    ]
    unrolls_dropped_full: Annotated[int, Stat("fresh units a full queue dropped (replay.discard says which)")]
    seq_gaps: Annotated[int, Stat("worker messages that never arrived (gaps in their numbering)")]
    decode_errors: Annotated[
        int, Stat("messages the broker refused: malformed, of the wrong kind, or not fitting this run")
    ]
    batches_sent: int
    replay_size: Annotated[int, Stat("units held by the fullest replay")]
    ready_batches: Annotated[int, Stat("batches sent that the learner has not taken yet")]
    replay_sizes: Annotated[
        np.ndarray, Array("int64", "R"), Stat("units held by each [[replay]] table, space-separated")
    ]
    prepare_time_s: Annotated[
        float, Stat("seconds making batches, feature passes included", column="time_broker_sample_s")
    ]
    feature_time_s: Annotated[float, Stat("seconds in the feature forward passes", column="time_broker_features_s")]
    insert_time_s: Annotated[
        float, Stat("seconds decoding unroll messages and inserting their units", column="time_broker_insert_s")
    ]
    replay_saves: Annotated[int, Stat("replay checkpoints written (run.checkpoint_replay)")] = 0
    replay_save_s: Annotated[float, Stat("seconds the last replay checkpoint took, in the broker's writer thread")] = (
        0.0
    )
    replay_bytes: Annotated[int, Stat("bytes the kept replay checkpoints take on disk")] = 0
    figures: Figures = {}  # the agent's broker part's own figures (Agent.broker_figures)


class LearnerStats(Message, tag="learner_stats"):
    """learner -> launcher, every log interval and at the end: its counts (cumulative) and its last step's
    figures: those every agent's step reports (``step=True``) and the agent's own (``figures``)."""

    pid: int
    time: float
    learner_step: Annotated[int, Stat("optimiser steps taken")]
    policy_version: Annotated[int, Stat("the version of the weights the learner last published")]
    samples: int
    env_frames_trained: int
    # the env frames the workers had played when the broker made the last batch trained on: the count frames
    # trained are set against, from the same message, so the replay ratio does not lag one report behind the other
    env_frames: int
    units_dropped_torn: Annotated[int, Stat("units dropped because their frames were overwritten as they were read")]
    total_loss: Annotated[float, Stat("the last step's loss", step=True)]
    learning_rate: Annotated[float, Stat("the optimiser's learning rate")]
    grad_norm: Annotated[float, Stat("the gradient norm before clipping", step=True)]
    policy_lag: Annotated[
        float,
        Stat(
            "mean age in policy versions of the last batch's fresh (queue) units; Ape-X: its newest transition's",
            step=True,
        ),
    ]
    sample_age_mean: Annotated[float, Stat("mean age in policy versions of every unit of the last batch", step=True)]
    sample_age_max: Annotated[float, Stat("the oldest unit's age in that batch", step=True)]
    step_time_s: Annotated[float, Stat("seconds of forward, backward and optimiser", column="time_learner_step_s")]
    gather_time_s: Annotated[float, Stat("seconds gathering frames", column="time_learner_gather_s")]
    wait_time_s: Annotated[float, Stat("seconds waiting for a batch", column="time_learner_wait_s")]
    publish_time_s: Annotated[
        float, Stat("seconds flattening, encoding and sending new weights", column="time_learner_publish_s")
    ]
    decode_errors: Annotated[
        int,
        Stat(
            "batches and weights requests refused: malformed, or not fitting this run", column="learner_decode_errors"
        ),
    ]
    checkpoint_path: Text  # "" when no checkpoint was written
    nonfinite_steps: Annotated[
        int, Stat("learner steps skipped: their loss or gradient norm was not finite (learner.max_nonfinite_steps)")
    ] = 0
    figures: Figures = {}  # the agent's own step figures (Agent.learner_figures)


class IngestStats(Message, tag="ingest_stats"):
    """ingest -> launcher, about once a second: the remote workers' traffic (cumulative)."""

    pid: int
    time: float
    remote_workers: Annotated[Count, Stat("remote workers joined and heard from in the last seconds")]
    remote_joins: Annotated[Count, Stat("times a remote worker joined (rejoins included)")]
    remote_frames: Annotated[Count, Stat("env observation frames received from remote workers")]
    remote_bytes: Annotated[Count, Stat("bytes received from remote workers, compressed frames and messages")]
    remote_raw_bytes: Annotated[Count, Stat("those frames' bytes after decompression")]
    remote_refused: Annotated[
        Count, Stat("remote messages refused: malformed, forged, out of order, from no session or another run")
    ]
    remote_auth_refused: Annotated[Count, Stat("connections refused by CurveZMQ: a key not (or no longer) authorized")]
    ingest_busy_s: Annotated[float, Stat("seconds the ingest spent checking, decompressing, writing and forwarding")]


# Evaluation during training (eval.interval_frames): the launcher asks, the evaluator (zrl/roles/evaluator.py)
# plays and reports on the stats channel.


class EvaluatorStats(Message, tag="evaluator_stats"):
    """evaluator -> launcher, about once a second, also while it plays: its heartbeat and counts (cumulative, in
    this evaluator's life: the launcher's tally carries them over its restarts)."""

    pid: int
    time: float
    evaluations: Annotated[Count, Stat("evaluations the evaluator finished (eval.interval_frames)")]
    episodes: Annotated[Count, Stat("episodes it played for them", column="eval_episodes")]
    skipped: Annotated[
        Count, Stat("evaluations asked for and passed over for a newer one while one played", column="eval_skipped")
    ]
