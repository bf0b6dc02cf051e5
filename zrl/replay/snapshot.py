"""A replay's content as flat numpy arrays and back: what ``run.checkpoint_replay`` saves with a checkpoint and a
resumed broker loads, so that units, priorities, sample counts and stored features go on where they were.

Every replay class has ``state() -> dict[str, np.ndarray]`` and ``load_state(state)`` (units as columns:
zrl/replay/store.py's ``units_state``); these helpers turn scalars and random generators into arrays (numbers, or a JSON string for a generator's state: nothing that needs
pickle) and check what comes back. A state that does not fit (another capacity, unroll length or action count)
raises SnapshotMismatch, which the broker reports as a note: its replays then refill, as they did before."""

from __future__ import annotations

import json

import numpy as np


class SnapshotMismatch(ValueError):
    """A saved replay state that does not fit the replay it is loaded into."""


def prefixed(prefix: str, state: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {f"{prefix}.{key}": value for key, value in state.items()}


def section(prefix: str, state: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The entries of ``state`` under ``prefix`` (as ``prefixed`` wrote them), without it."""
    head = prefix + "."
    return {key[len(head) :]: value for key, value in state.items() if key.startswith(head)}


def scalar(state: dict[str, np.ndarray], key: str) -> int | float | bool:
    value = state[key]
    if value.shape != ():
        raise SnapshotMismatch(f"{key} should be one number, got shape {value.shape}")
    return value.item()


def rng_state(rng: np.random.Generator) -> np.ndarray:
    """The generator's state as a 0-d str array (JSON)."""
    return np.array(json.dumps(rng.bit_generator.state))


def set_rng_state(rng: np.random.Generator, value: np.ndarray) -> None:
    rng.bit_generator.state = json.loads(str(value))


def fill(target: np.ndarray, where: np.ndarray, values: np.ndarray, name: str) -> None:
    """``target[where] = values``, after checking that the rows fit (same trailing shape, slots inside):
    ``target`` ``[capacity, *row]``, ``where`` ``[n]`` integer slots, ``values`` ``[n, *row]``."""
    if values.shape[1:] != target.shape[1:] or len(values) != len(where):
        raise SnapshotMismatch(f"{name}: saved rows of shape {values.shape}, this replay's are {target.shape[1:]}")
    if len(where) and not (0 <= where.min() and where.max() < len(target)):
        raise SnapshotMismatch(f"{name}: a slot outside this replay's {len(target)}")
    target[where] = values


def same_shape(saved: np.ndarray, current: np.ndarray, name: str) -> np.ndarray:
    """``saved``, converted to ``current``'s dtype, when it has ``current``'s shape."""
    if saved.shape != current.shape:
        raise SnapshotMismatch(f"{name}: saved shape {saved.shape}, this replay's {current.shape}")
    return saved.astype(current.dtype, copy=True)
