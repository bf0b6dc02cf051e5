"""The queue replay's discard strategies (replay.discard, the reference platform's discarding_strategy): each one
fills a queue past its capacity and keeps what it promises."""

from __future__ import annotations

import numpy as np
import pytest

from zrl.agents.vtrace.broker import make_replays
from zrl.config import ConfigError, load
from zrl.replay.queue import QueueReplay
from zrl.replay.store import Unit

pytestmark = pytest.mark.unit

T, A = 3, 2


def _unit(i: int) -> Unit:
    return Unit(
        0,
        0,
        i,
        i,
        np.zeros(T, np.int32),
        np.zeros(T, np.float32),
        np.ones(T, np.float32),
        np.zeros((T, A), np.float32),
        np.zeros(T, np.float32),
    )


def _filled(discard: str, capacity: int, count: int) -> QueueReplay:
    queue = QueueReplay(capacity, discard)
    for i in range(count):
        queue.add(_unit(i))
    return queue


def _kept(queue: QueueReplay) -> list[int]:
    return [u.first_frame for u in queue.units()]


def test_keep_latest_drops_the_oldest_unroll():
    queue = _filled("keep_latest", 4, 10)
    assert _kept(queue) == [6, 7, 8, 9] and queue.dropped_full == 6


def test_keep_oldest_drops_every_new_unroll_while_full_and_takes_them_again_once_drained():
    queue = _filled("keep_oldest", 4, 10)
    assert _kept(queue) == [0, 1, 2, 3] and queue.dropped_full == 6
    assert [u.first_frame for u in queue.take(2)] == [0, 1]
    queue.add(_unit(10))
    queue.add(_unit(11))
    queue.add(_unit(12))
    assert _kept(queue) == [2, 3, 10, 11] and queue.dropped_full == 7


def test_alternating_drops_the_oldest_and_the_new_unroll_by_turns():
    queue = _filled("alternating", 4, 10)
    # 4 drops the oldest (0), 5 is dropped, 6 drops the oldest (1), 7 is dropped, 8 drops 2, 9 is dropped
    assert _kept(queue) == [3, 4, 6, 8] and queue.dropped_full == 6


@pytest.mark.parametrize("discard", ["keep_latest", "keep_oldest", "alternating"])
def test_no_strategy_drops_anything_below_capacity(discard):
    queue = _filled(discard, 4, 4)
    assert _kept(queue) == [0, 1, 2, 3] and queue.dropped_full == 0


def test_alternating_goes_on_with_its_turn_after_a_snapshot():
    queue = _filled("alternating", 4, 5)  # one drop: the oldest; the new unroll's turn is next
    again = QueueReplay(4, "alternating")
    again.load_state(queue.state())
    again.add(_unit(5))
    assert _kept(again) == [1, 2, 3, 4]


def test_the_broker_builds_its_queue_with_the_configured_strategy():
    cfg = load(None, ['replay=[{"type": "queue", "capacity": 64, "sample_ratio": 1.0, "discard": "keep_oldest"}]'])
    (queue,) = make_replays(cfg, 4, None, 0)
    assert isinstance(queue, QueueReplay) and queue.discard == "keep_oldest"


def test_an_unknown_strategy_or_one_on_another_replay_type_is_a_config_error():
    with pytest.raises(ConfigError, match=r"replay\[0\].discard.*keep_latest.*keep_oldest.*alternating"):
        load(None, ['replay=[{"type": "queue", "capacity": 64, "sample_ratio": 1.0, "discard": "newest"}]'])
    with pytest.raises(ConfigError, match=r"replay\[0\].*discard"):
        load(None, ['replay=[{"type": "uniform", "capacity": 64, "sample_ratio": 1.0, "discard": "keep_oldest"}]'])
