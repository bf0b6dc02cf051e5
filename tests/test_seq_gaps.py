"""The broker loop's count of worker messages lost in flight (a pure counter; tests/test_apex.py checks it in a
running Ape-X broker)."""

from __future__ import annotations

import pytest

from zrl.roles.inbound import SeqGaps

pytestmark = pytest.mark.unit


def test_sequence_gaps_are_counted_per_worker_and_a_restart_is_no_gap():
    """The broker loop's count of worker messages lost in flight, for every agent (tests/test_apex.py checks it
    in a running Ape-X broker)."""
    gaps = SeqGaps()
    for worker, seq in ((0, 0), (0, 1), (1, 0), (0, 4), (0, 5), (1, 3), (1, 0), (1, 1)):
        gaps.see(worker, seq)
    assert gaps.count == 2 + 2  # worker 0 skipped 2 and 3, worker 1 skipped 1 and 2; its restart at 0 is none
