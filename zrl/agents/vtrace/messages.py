"""V-trace's messages (IMPACT's too): a worker's unrolls, and the broker's batches of them for the learner."""

from typing import Annotated

import msgspec
import numpy as np

from zrl.protocol.framework import Array, Count, Length, Message


class Unroll(Message, tag="unroll", eq=False):
    """worker -> broker: M envs' unrolls of length T sharing ring slots.

    The observation at time t (t = 0..T) is ring frame ``first_frame + t``.
    ``features`` may be an empty ``[0, 0, 0]`` array meaning "not sent".
    """

    worker_id: int
    seq: int
    policy_version: int
    first_frame: int
    num_envs: Annotated[Count, Length("M")]
    length: Annotated[Count, Length("T")]
    env_frames: int
    actions: Annotated[np.ndarray, Array("int32", "M", "T")]
    rewards: Annotated[np.ndarray, Array("float32", "M", "T")]
    discounts: Annotated[np.ndarray, Array("float32", "M", "T")]
    behaviour_logits: Annotated[np.ndarray, Array("float32", "M", "T", "A")]
    behaviour_values: Annotated[np.ndarray, Array("float32", "M", "T")]
    features: Annotated[np.ndarray, Array("float32", "M", "T", "F", empty_ok=True)]

    def renumbered(self, seq: int, offset: int, low: int, high: int) -> "Unroll":
        """This unroll as the run's ingest forwards a remote worker's: numbered ``seq`` in its slot, its frames
        moved by ``offset`` into the slot's ring; a ValueError unless they lie in ``[low, high)``, the frames
        the worker has sent."""
        first = self.first_frame + offset
        if not (low <= first and first + self.length < high):
            raise ValueError("names frames it has not sent")
        return msgspec.structs.replace(self, seq=seq, first_frame=first)


class Batch(Message, tag="batch", eq=False):
    """broker -> learner: B units of length T."""

    batch_id: int
    length: Annotated[Count, Length("T")]
    env_frames: int  # env frames the workers had produced when the batch was made (the run's, since its start)
    worker_ids: Annotated[np.ndarray, Array("int32", "B")]
    env_index: Annotated[np.ndarray, Array("int32", "B")]
    first_frame: Annotated[np.ndarray, Array("int64", "B")]
    policy_versions: Annotated[np.ndarray, Array("int64", "B")]
    actions: Annotated[np.ndarray, Array("int32", "B", "T")]
    rewards: Annotated[np.ndarray, Array("float32", "B", "T")]
    discounts: Annotated[np.ndarray, Array("float32", "B", "T")]
    behaviour_logits: Annotated[np.ndarray, Array("float32", "B", "T", "A")]
    behaviour_values: Annotated[np.ndarray, Array("float32", "B", "T")]
    replay_index: Annotated[np.ndarray, Array("int32", "B")]  # which [[replay]] table each unit came from
