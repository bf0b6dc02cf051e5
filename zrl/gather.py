"""Gather: turn a Batch's frame numbers into stacked observations, with one copy out of the rings.

For unit b the learner needs observations t = 0..T, each a stack of S frames ending at frame
``first_frame[b] + t``. It reads frames ``first_frame[b] - (S-1) .. first_frame[b] + T`` (T+S of them)
from the unit's ring column straight into a preallocated ``[B, T+S, *frame_shape]`` buffer, and then
builds the stacks as a strided view. A frame k places back in a stack is blanked unless
``k <= episode_step`` of the stack's newest frame, which is how episode starts are handled (the worker
blanks its own stacks the same way when it acts).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import NamedTuple, Protocol

import numpy as np
import torch

from shm.ring import Ring


class Units(Protocol):
    """What a gather reads of a batch: each unit's worker (its ring), env (its column) and first frame, ``[B]``
    each (a V-trace Batch; a view of a TransitionBatch)."""

    @property
    def worker_ids(self) -> np.ndarray: ...

    @property
    def env_index(self) -> np.ndarray: ...

    @property
    def first_frame(self) -> np.ndarray: ...


class Transitions(Protocol):
    """What a transition gather reads of a batch: each transition's worker, env, the frame of s_t and of s_{t+n},
    and the discount of its bootstrap, ``[B]`` each (Ape-X's TransitionBatch)."""

    @property
    def worker_ids(self) -> np.ndarray: ...

    @property
    def env_index(self) -> np.ndarray: ...

    @property
    def frame(self) -> np.ndarray: ...

    @property
    def next_frame(self) -> np.ndarray: ...

    @property
    def bootstrap_discount(self) -> np.ndarray: ...


class Gatherer:
    def __init__(
        self,
        rings: list[Ring],
        stack: int,
        unroll_length: int,
        max_batch: int,
        frame_shape: tuple[int, ...],
        frame_dtype: str,
        pin_memory: bool = False,
    ) -> None:
        self.rings = rings
        self.stack = stack
        self.window = unroll_length + stack
        self.frame_shape = tuple(frame_shape)
        dtype = torch.from_numpy(np.zeros(0, np.dtype(frame_dtype))).dtype
        self._frames_t = torch.empty((max_batch, self.window, *self.frame_shape), dtype=dtype, pin_memory=pin_memory)
        self._steps_t = torch.empty((max_batch, self.window), dtype=torch.int32, pin_memory=pin_memory)
        self.frames = self._frames_t.numpy()
        self.episode_steps = self._steps_t.numpy()
        self._offsets = np.arange(self.window, dtype=np.int64) - (stack - 1)

    def gather(self, batch: Units) -> tuple[torch.Tensor, torch.Tensor, np.ndarray]:
        """Frames ``[B, T+S, *shape]``, episode steps ``[B, T+S]`` (views of the buffers) and ok ``[B]``.

        A unit is not ok when any of its frames was overwritten while or before it was read; its rows
        then hold garbage and must be dropped. Batches arrive sorted by worker (see the broker).
        """
        b_total = len(batch.worker_ids)
        ok = np.zeros(b_total, bool)
        frame_numbers = np.maximum(batch.first_frame[:, None] + self._offsets, 0)
        workers = batch.worker_ids
        starts = np.flatnonzero(np.r_[True, workers[1:] != workers[:-1]])
        ends = np.r_[starts[1:], b_total]
        for lo, hi in zip(starts, ends):
            ring = self.rings[int(workers[lo])]
            out = {
                "frame": self.frames[lo:hi].reshape(-1, *self.frame_shape),
                "episode_step": self.episode_steps[lo:hi].reshape(-1),
            }
            columns = np.repeat(batch.env_index[lo:hi], self.window)
            read_ok = ring.read(frame_numbers[lo:hi].reshape(-1), out, column=columns)
            ok[lo:hi] = read_ok.reshape(hi - lo, self.window).all(axis=1)
        return self._frames_t[:b_total], self._steps_t[:b_total], ok


def stack_observations(
    frames: torch.Tensor, episode_steps: torch.Tensor, stack: int, at: np.ndarray | None = None
) -> torch.Tensor:
    """``[B, T+S, *shape]`` frames to batch-major stacked observations ``[B, T+1, S, *shape]`` (one new
    contiguous tensor; the model reads it as ``[B*(T+1), S, *shape]`` without another copy), or only the
    observations ``at`` (indices into 0..T): ``[B, len(at), S, *shape]``."""
    b = frames.shape[0]
    shape = frames.shape[2:]
    windows = frames.unfold(1, stack, 1).movedim(-1, 2)  # [B, T+1, S, *shape], a view
    newest = episode_steps[:, stack - 1 :].long()  # [B, T+1]
    if at is not None:
        index = torch.from_numpy(np.asarray(at, np.int64)).to(frames.device)
        windows, newest = windows[:, index], newest[:, index]
    steps = windows.shape[1]
    keep = kept_frames(newest, stack).to(frames.dtype)
    return windows * keep.view(b, steps, stack, *([1] * len(shape)))


def kept_frames(newest: torch.Tensor, stack: int) -> torch.Tensor:
    """Which frames of each stack are kept (oldest first, ``[..., S]`` bool), from the episode step of each
    stack's newest frame ``[...]``: a frame k places back is kept when ``k <= newest``, blanked otherwise."""
    back = torch.arange(stack - 1, -1, -1, device=newest.device)  # places back from the newest frame
    return back <= newest.unsqueeze(-1)


class Unrolls(NamedTuple):
    """Units' frames as the gatherer reads them, ``[B, T+S, *shape]``, and their episode steps ``[B, T+S]``: what
    a model's ``forward_unrolls`` takes instead of the ``[B, T+1, S, *shape]`` stacks."""

    frames: torch.Tensor
    episode_steps: torch.Tensor


class ActingStack:
    """The worker's own stacks ``[M, S, *shape]``, blanked at episode starts exactly as
    :func:`stack_observations` rebuilds them at the learner, plus each env's step within its episode."""

    def __init__(self, num_envs: int, stack: int, frame_shape: tuple[int, ...], frame_dtype: str) -> None:
        self.array = np.zeros((num_envs, stack, *frame_shape), np.dtype(frame_dtype))
        self.episode_step = np.zeros(num_envs, np.int32)

    def reset(self, frames: np.ndarray) -> None:
        self.array[:] = 0
        self.array[:, -1] = frames
        self.episode_step[:] = 0

    def push(self, frames: np.ndarray, new_episode: np.ndarray) -> None:
        np.add(self.episode_step, 1, out=self.episode_step)
        self.episode_step[new_episode] = 0
        self.array[:, :-1] = self.array[:, 1:]
        self.array[:, -1] = frames
        self.array[new_episode, :-1] = 0


class TransitionGatherer:
    """The two stacks of each n-step transition of a ``TransitionBatch``: s_t ending at ``frame`` and
    s_{t+n} ending at ``next_frame``, each S frames with episode starts blanked, read straight from the
    rings into buffers of their own."""

    def __init__(
        self,
        rings: list[Ring],
        stack: int,
        max_batch: int,
        frame_shape: tuple[int, ...],
        frame_dtype: str,
        pin_memory: bool = False,
    ) -> None:
        self.stack = stack
        self._now = Gatherer(rings, stack, 0, max_batch, frame_shape, frame_dtype, pin_memory)
        self._next = Gatherer(rings, stack, 0, max_batch, frame_shape, frame_dtype, pin_memory)

    def gather(self, batch: Transitions) -> tuple[torch.Tensor, torch.Tensor, np.ndarray]:
        """``obs [B, S, *shape]``, ``next_obs [B, S, *shape]`` and ok ``[B]``: False where a frame of s_t was
        overwritten, or one of s_{t+n} that the target needs (its bootstrap discount is not 0)."""
        now = SimpleNamespace(worker_ids=batch.worker_ids, env_index=batch.env_index, first_frame=batch.frame)
        later = SimpleNamespace(worker_ids=batch.worker_ids, env_index=batch.env_index, first_frame=batch.next_frame)
        frames, steps, ok = self._now.gather(now)
        next_frames, next_steps, next_ok = self._next.gather(later)
        obs = stack_observations(frames, steps, self.stack)[:, 0]
        next_obs = stack_observations(next_frames, next_steps, self.stack)[:, 0]
        return obs, next_obs, ok & (next_ok | (batch.bootstrap_discount == 0))
