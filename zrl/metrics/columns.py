"""The columns of a run's CSV files, declared once: episodes.csv's, metrics.csv's (the launcher's own figures, the
roles' from their stats messages, an agent's own), starts.csv's and eval.csv's."""

from __future__ import annotations

from typing import Any

from zrl import protocol

EPISODE_COLUMNS = (
    "episode",
    "raw_return",
    "score_5min",
    "score_30min",
    "length_frames",
    "length_env_steps",
    "env_frames",
    "wall_time",
    "worker_id",
    "env_index",
)

STATS_MESSAGES = (
    protocol.LearnerStats,
    protocol.WorkerStats,
    protocol.BrokerStats,
    protocol.IngestStats,
    protocol.EvaluatorStats,
)
"""The roles' reports whose fields marked ``protocol.Stat`` are columns of metrics.csv: the declaration gives each
column's name, how the launcher combines the workers' reports, and what it means (``METRIC_DOCS``)."""

METRIC_DOCS = {stat.column: stat.doc for message in STATS_MESSAGES for _, stat in message.STATS}
"""The columns every run's metrics.csv has, from the roles' reports, and what each means; an agent adds its own
(``agent_figures``)."""


def agent_figures(agent: Any) -> dict[str, str]:
    """The metrics.csv columns an agent adds, its learner's figures then its broker's, and what each means."""
    return {**agent.learner_figures, **agent.broker_figures}


def metric_columns(agent: Any) -> tuple[str, ...]:
    """metrics.csv's header for a run of ``agent`` (an ``zrl.agents.Agent``): the launcher's own figures, the roles'
    (their Stat fields, then the agent's figures; the time_* columns last: seconds each named section has taken
    since this launch began, summed over the workers) and the interval's time shares."""
    return (
        "wall_time",
        "elapsed_s",
        "env_frames",
        "frames_per_s",
        "samples_per_s",
        *(column for column in METRIC_DOCS if not column.startswith("time_")),
        *agent_figures(agent),
        "learner_wait_fraction",
        "learner_step_s",
        "broker_prepare_s",
        "broker_feature_s",
        "replay_ratio",
        "replay_ratio_target",
        "episodes",
        "mean_return_100",
        "worker_restarts",
        "role_restarts",
        "stats_decode_errors",
        *(column for column in METRIC_DOCS if column.startswith("time_")),
    )


# starts.csv: one row each time a launcher starts the run (resumes included), so that its wall times name their machine
START_COLUMNS = ("wall_time", "env_frames", "cpu", "cores", "ram_gib", "zrl")

EVAL_COLUMNS = (
    "wall_time",
    "elapsed_s",
    "env_frames",
    "index",
    "learner_step",
    "policy_version",
    "protocol",
    "episodes",
    "mean",
    "ci95_low",
    "ci95_high",
    "median",
    "min",
    "max",
    "human_normalised",
    "mean_max_q",
    "frames_played",
    "seconds",
    "best",
    "final",
)
"""eval.csv: one row per evaluation during training (eval.interval_frames): when the weights it played were taken
from the learner (wall_time, the launch's elapsed_s, and the run's env_frames then), which request it answered
(index: the multiple of eval.interval_frames passed), the weights (learner_step, policy_version), and its
scores: the mean raw score over its episodes with a 95% bootstrap interval, median, min, max, the human-normalised
mean (empty for a game without reference scores), the mean max-Q over the held-out states (value-based agents;
empty otherwise), the frames it played, its seconds, best (1: best.pt holds these weights) and final (1: the
evaluation of the learner's final checkpoint after the run's end, eval.final; its index is the last multiple passed)."""
EVAL_SCALARS = ("mean", "ci95_low", "ci95_high", "human_normalised", "mean_max_q")
