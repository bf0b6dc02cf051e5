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


def _batch(queue: QueueReplay, n: int) -> list[int]:
    """One batch of n units, sent: the last batch settles first, as the broker does."""
    queue.settle()
    return [u.first_frame for u in queue.take(n)]


def test_with_uses_each_unit_comes_back_at_the_end_of_the_queue_until_spent():
    """IMPACT's circular buffer: a unit handed out rejoins the back of the queue once its batch has gone, and
    is handed out ``uses`` times in all; a batch never holds one unit twice."""
    queue = QueueReplay(8, uses=3)
    for i in range(4):
        queue.add(_unit(i))
    batches = [_batch(queue, 3) for _ in range(4)]
    assert batches == [[0, 1, 2], [3, 0, 1], [2, 3, 0], [1, 2, 3]]
    assert _batch(queue, 3) == [] and len(queue) == 0
    assert all(len(set(b)) == len(b) for b in batches)


def test_fractional_uses_give_the_floor_and_the_ceiling_in_turn():
    queue = QueueReplay(100, uses=1.5)
    for i in range(10):
        queue.add(_unit(i))
    handed = []
    while True:
        batch = _batch(queue, 4)
        if not batch:
            break
        handed += batch
    assert len(handed) == 15 and {handed.count(i) for i in range(10)} == {1, 2}


def test_a_batch_put_back_keeps_its_units_uses_and_a_dropped_unit_is_gone():
    queue = QueueReplay(8, uses=2)
    for i in range(4):
        queue.add(_unit(i))
    taken = queue.take(2)
    queue.put_back(taken)  # the batch could not go: nothing was used
    assert _batch(queue, 4) == [0, 1, 2, 3]
    taken = queue.take(0)
    queue.settle()  # every unit has one use left, at the back in order
    taken = queue.take(3)
    queue.drop(taken[1:2])  # unit 1's frames were gone
    assert [u.first_frame for u in taken] == [0, 1, 2]
    queue.settle()
    assert _batch(queue, 4) == [3] and _batch(queue, 4) == []


def test_a_snapshot_keeps_the_uses_left_and_the_last_batchs_units_that_come_back():
    queue = QueueReplay(8, uses=3)
    for i in range(3):
        queue.add(_unit(i))
    assert _batch(queue, 2) == [0, 1]
    state = queue.state()
    assert state["first_frame"].tolist() == [2, 0, 1] and state["uses_left"].tolist() == [3, 2, 2]
    again = QueueReplay(8, uses=3)
    again.load_state(state)
    assert [_batch(again, 3) for _ in range(3)] == [[2, 0, 1], [2, 0, 1], [2]]
    old = {k: v for k, v in state.items() if k != "uses_left"}  # a snapshot from before reuse: once each
    once = QueueReplay(8)
    once.load_state(old)
    assert _batch(once, 3) == [2, 0, 1] and _batch(once, 3) == []


@pytest.mark.parametrize("uses", [0.5, 0, float("inf"), float("nan")])
def test_uses_below_one_are_refused(uses):
    with pytest.raises(ValueError, match="uses"):
        QueueReplay(4, uses=uses)


def test_the_broker_hands_each_queued_unit_sample_ratio_x_replay_ratio_times():
    cfg = load(
        None,
        [
            "learner.replay_ratio=6",
            'replay=[{"type":"queue","capacity":64,"sample_ratio":0.5},{"type":"uniform","capacity":100,"sample_ratio":0.5}]',
        ],
    )
    queue = make_replays(cfg, 4, None, 0)[0]
    assert isinstance(queue, QueueReplay) and queue.uses == 3


def test_units_coming_back_from_their_batch_respect_the_capacity_and_the_discard_rule():
    for discard, kept in [("keep_latest", [4, 0, 1]), ("keep_oldest", [2, 3, 4])]:
        queue = QueueReplay(3, discard, uses=2)
        for i in range(3):
            queue.add(_unit(i))
        queue.take(2)  # units 0 and 1 are out with their batch
        queue.add(_unit(3))
        queue.add(_unit(4))
        queue.settle()
        assert len(queue) == 3 and _kept(queue) == kept and queue.dropped_full == 2, discard
