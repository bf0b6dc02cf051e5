"""The core's messages between the roles and the launcher: episodes, the learner's and broker's flow control, the
replay index for checkpoints, a role's dying traceback, and evaluation."""

from typing import Annotated

import numpy as np
from msgspec import Meta

from zrl.protocol.framework import Array, Count, Message, Text


class Episode(Message, tag="episode"):
    """worker -> launcher: one finished episode."""

    worker_id: int
    pid: int  # the sender's, which the launcher checks against the worker it started
    env_index: int
    raw_return: float  # the whole episode's raw score (SABER's uncapped score)
    length_frames: int
    length_env_steps: int
    env_frames: int
    wall_time: float
    score_5min: float  # the raw score after 5 minutes of play (18,000 frames), SABER-style
    score_30min: float  # after 30 minutes (108,000 frames); the whole score for shorter episodes


class WeightsRequest(Message, tag="weights_request"):
    """worker -> learner: please send the latest weights."""

    worker_id: int


class Credit(Message, tag="credit"):
    """learner -> broker: room for this many more batches (credit-based flow control, so that batches
    never wait in socket buffers, where high-water marks do not reach)."""

    batches: int


class IndexRequest(Message, tag="index_request"):
    """learner -> broker (on the credits channel): send me your replay index, for the next checkpoint."""

    learner_step: int


class SaveReplay(Message, tag="save_replay"):
    """learner -> broker (on the credits channel): a checkpoint was written at this step; save the replays beside
    it (run.checkpoint_replay)."""

    learner_step: int


class ReplayIndex(Message, tag="replay_index", eq=False):
    """broker -> learner (on the batches channel): which units every replay holds, how often each was
    sampled, and the stored behaviour features of the units of elite and attentive replays."""

    replay: Annotated[np.ndarray, Array("int32", "N")]  # the [[replay]] table each unit belongs to
    worker_ids: Annotated[np.ndarray, Array("int32", "N")]
    env_index: Annotated[np.ndarray, Array("int32", "N")]
    first_frame: Annotated[np.ndarray, Array("int64", "N")]
    policy_versions: Annotated[np.ndarray, Array("int64", "N")]
    counts: Annotated[np.ndarray, Array("int64", "N")]
    sample_calls: Annotated[
        np.ndarray, Array("int64", "R")
    ]  # each replay's sample calls so far (elite lambda annealing)
    feature_rows: Annotated[np.ndarray, Array("int32", "G")]  # the units (rows of the arrays above) with features
    features: Annotated[np.ndarray, Array("float32", "G", "K", "F", empty_ok=True)]  # at the compared steps


class RoleError(Message, tag="role_error"):
    """role -> launcher (on the stats channel), as the role dies of an exception: its traceback, which the
    launcher logs, and shows when the failure stops the run."""

    role: Text
    pid: int
    traceback: Text  # at most the last TRACEBACK_CHARS characters


# Ape-X (algo apex_iqn): n-step transitions as frame numbers, sampled by priority.


class EvalRequest(Message, tag="eval_request"):
    """launcher -> evaluator: evaluate the learner's latest weights; evaluation ``index`` of the run (the multiple
    of eval.interval_frames passed), asked at ``env_frames`` frames played. With ``checkpoint``: the final
    evaluation (eval.final), of that checkpoint's weights, given to a fresh evaluator when the run's roles have
    stopped."""

    index: Count
    env_frames: Count
    checkpoint: Text = ""


class EvalResult(Message, tag="eval_result"):
    """evaluator -> launcher: evaluation ``index`` (asked at ``env_frames``) of the weights of ``policy_version``
        (learner step ``learner_step``), taken from the learner (or written to the final checkpoint) at ``weights_time``
    (unix seconds): ``episodes`` under ``protocol``, their mean raw score with
        a 95% bootstrap interval, and what else is known; NaN where a figure does not apply (no reference scores for
        the game; no Q-values for a policy agent). ``best`` 1: best.pt now holds these weights (run.best_by = eval)."""

    pid: int
    index: Count
    env_frames: Count
    weights_time: float
    learner_step: Count
    policy_version: Count
    protocol: Text
    episodes: Count
    mean: float
    ci95_low: float
    ci95_high: float
    median: float
    min: float
    max: float
    human_normalised: float
    mean_max_q: float
    frames_played: Count
    seconds: float
    best: Annotated[int, Meta(ge=0, le=1)]
    final: Annotated[int, Meta(ge=0, le=1)] = 0  # 1: the final evaluation, of the learner's final checkpoint
