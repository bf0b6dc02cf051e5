"""The test agent's messages: a worker's steps, and the broker's batches of them. (No ``from __future__ import
annotations``: a message's annotations are its wire spec, read as objects when the class is made.)"""

from typing import Annotated

import msgspec
import numpy as np

from zrl.protocol import Array, Count, Length, Message


class Steps(Message, tag="onestep_steps", eq=False):
    """worker -> broker: M envs' K steps; the observation at step k is ring frame ``first_frame + k`` (k = 0..K)."""

    worker_id: int
    seq: int
    policy_version: Count
    first_frame: Count
    env_frames: int
    num_envs: Annotated[Count, Length("M")]
    length: Annotated[Count, Length("K")]
    actions: Annotated[np.ndarray, Array("int32", "M", "K")]
    rewards: Annotated[np.ndarray, Array("float32", "M", "K")]
    discounts: Annotated[np.ndarray, Array("float32", "M", "K")]

    def renumbered(self, seq: int, offset: int, low: int, high: int) -> "Steps":
        first = self.first_frame + offset
        if not (low <= first and first + self.length < high):
            raise ValueError("names frames it has not sent")
        return msgspec.structs.replace(self, seq=seq, first_frame=first)


class StepBatch(Message, tag="onestep_batch", eq=False):
    """broker -> learner: B units of K steps, sorted by worker."""

    batch_id: int
    env_frames: int
    length: Annotated[Count, Length("K")]
    worker_ids: Annotated[np.ndarray, Array("int32", "B")]
    env_index: Annotated[np.ndarray, Array("int32", "B")]
    first_frame: Annotated[np.ndarray, Array("int64", "B")]
    policy_versions: Annotated[np.ndarray, Array("int64", "B")]
    actions: Annotated[np.ndarray, Array("int32", "B", "K")]
    rewards: Annotated[np.ndarray, Array("float32", "B", "K")]
    discounts: Annotated[np.ndarray, Array("float32", "B", "K")]
