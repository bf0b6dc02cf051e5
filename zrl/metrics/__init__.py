"""A run's metric files and what their columns say, by job:

- ``columns``: the columns of episodes.csv, metrics.csv (``METRIC_DOCS``, ``metric_columns``, ``agent_figures``),
  starts.csv and eval.csv, declared once.
- ``writing``: append-only files that a full disk delays rather than stops (``AppendFile``, ``CsvLog``,
  ``AppendHandler``), and a resumed file's torn last line (``drop_torn_tail``, ``first_row``).
- ``reading``: the CSV files read back, whole (``read_csv``) or as they grow (``LineFollower``, ``CsvFollower``),
  and a cell as a number (``number``).
- ``tensorboard``: the same figures as TensorBoard events (``TensorBoardLog``, ``ScalarWriter``, ``tensorboard_tag``,
  ``figure_roles``, ``episode_steps``).
- ``time_split``: what the time_* columns say (``SECTIONS``, ``SECTION_LABELS``, ``time_shares``,
  ``learner_wait_share``, ``bottleneck``).
"""
