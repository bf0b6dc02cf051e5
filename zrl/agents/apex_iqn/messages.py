"""Ape-X's messages: a worker's n-step transitions with their first priorities, the broker's prioritized
batches, and the learner's new priorities."""

from typing import Annotated

import msgspec
import numpy as np

from zrl.protocol.framework import Array, Count, Length, Message


class Transitions(Message, tag="transitions", eq=False):
    """worker -> broker: ``count`` n-step transitions whose frames are in the worker's ring (s_t at ``frame``,
    s_{t+n} at ``next_frame``), with their initial priorities (loss ** omega; negative: not known)."""

    worker_id: Count
    seq: Count
    policy_version: Count
    env_frames: Count
    count: Annotated[Count, Length("N")]
    env_index: Annotated[np.ndarray, Array("int32", "N")]
    frame: Annotated[np.ndarray, Array("int64", "N")]
    action: Annotated[np.ndarray, Array("int32", "N")]
    nstep_return: Annotated[np.ndarray, Array("float32", "N")]
    bootstrap_discount: Annotated[np.ndarray, Array("float32", "N")]
    next_frame: Annotated[np.ndarray, Array("int64", "N")]
    priority: Annotated[np.ndarray, Array("float32", "N")]

    def renumbered(self, seq: int, offset: int, low: int, high: int) -> "Transitions":
        """These transitions as the run's ingest forwards a remote worker's: numbered ``seq`` in its slot, their
        frames moved by ``offset`` into the slot's ring; a ValueError unless they lie in ``[low, high)``, the
        frames the worker has sent."""
        frame, next_frame = self.frame + offset, self.next_frame + offset
        if self.count and not (low <= frame.min() and next_frame.max() < high and (next_frame >= frame).all()):
            raise ValueError("names frames it has not sent")
        return msgspec.structs.replace(self, seq=seq, frame=frame, next_frame=next_frame)


class TransitionBatch(Message, tag="transition_batch", eq=False):
    """broker -> learner: ``size`` transitions drawn by priority, with their importance weights, and the
    slots and stamps the learner's new priorities must name."""

    batch_id: Count
    env_frames: Count
    size: Annotated[Count, Length("B")]
    worker_ids: Annotated[np.ndarray, Array("int32", "B")]
    env_index: Annotated[np.ndarray, Array("int32", "B")]
    frame: Annotated[np.ndarray, Array("int64", "B")]
    action: Annotated[np.ndarray, Array("int32", "B")]
    nstep_return: Annotated[np.ndarray, Array("float32", "B")]
    bootstrap_discount: Annotated[np.ndarray, Array("float32", "B")]
    next_frame: Annotated[np.ndarray, Array("int64", "B")]
    slots: Annotated[np.ndarray, Array("int64", "B")]
    stamps: Annotated[np.ndarray, Array("int64", "B")]
    weights: Annotated[np.ndarray, Array("float32", "B")]
    policy_version: Annotated[np.ndarray, Array("int64", "B")]  # the weights version each transition was played with


class PriorityUpdate(Message, tag="priority_update", eq=False):
    """learner -> broker (on its own channel): the new priorities of a batch's transitions."""

    batch_id: Count
    size: Annotated[Count, Length("B")]
    slots: Annotated[np.ndarray, Array("int64", "B")]
    stamps: Annotated[np.ndarray, Array("int64", "B")]
    priorities: Annotated[np.ndarray, Array("float32", "B")]


# Remote workers (zrl-worker on another host) and the ingest role (zrl/roles/ingest.py), on the ingest's gate: a
# ROUTER on tcp, with CurveZMQ beyond loopback. A remote worker's messages name no ring and no slot: the ingest
# knows which slot a connection holds.
