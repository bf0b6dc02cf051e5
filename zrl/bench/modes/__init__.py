"""zrl-bench's modes. Each measures one hop of the pipeline beside the ceiling it is judged against, taken on
the same machine in the same invocation, and returns its figures; the command prints them as tables.

Targets (ratios, so that a shared, noisy machine still gives a meaningful answer) are checked here and
reported with the figures; they never fail a test.

- ``harness``: the targets, a scratch folder, config edits, and the real zrl-launch run stopped after its seconds;
- ``data_path``: env (the ceiling and its peers), sampling (workers, rings and broker) and transport (each hop);
- ``learner``: the learner fed by the broker against a bare loop, and elite batches against a learner step;
- ``pipeline``: the whole pipeline, its bottleneck and the machine's limit, and suggest's grid;
- ``compare``: the pipeline run two or three ways in turn (observers, remote, replay checkpoints, evaluation).
"""
