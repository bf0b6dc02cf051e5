"""What anything from a socket or a run folder must satisfy before the run uses it or prints it: numbers in a sane
range, weights finite, text free of control characters. A peer that any local user can run (a remote worker on
loopback), a damaged message or a folder from elsewhere is data: it is checked here, not trusted.

The ranges of experience (rewards, values, logits) are the broker's keys (config ``broker.max_abs_*``)."""

from __future__ import annotations

import math
import unicodedata

import numpy as np

from zrl import protocol

# The largest episode return or score magnitude taken from a worker: far past any game's (Atari's largest human
# scores are below 1e8), near enough that a mean of 100 of them stays finite; an infinite one would hold best.pt
MAX_ABS_RETURN = 1e12


def out_of_range(name: str, values: np.ndarray, limit: float, key: str) -> str | None:
    """Why ``values`` (named ``name`` in the message) cannot be experience of this run, or None: a value that is
    not finite, or one whose magnitude passes ``limit`` (config ``key``)."""
    if values.size == 0:
        return None
    if not np.isfinite(values).all():
        return f"non-finite {name}"
    largest = float(np.abs(values).max())
    if largest > limit:
        return f"{name} out of range: |{largest:.3g}| > {key} = {limit:.3g}"
    return None


def within_unit(name: str, values: np.ndarray) -> str | None:
    """Why ``values`` (discounts) are not all in [0, 1], or None."""
    if values.size and not (np.isfinite(values).all() and values.min() >= 0 and values.max() <= 1):
        return f"{name} outside [0, 1]"
    return None


def finite(flat: np.ndarray) -> bool:
    """Whether every number of a weights vector is finite: a worker that acted on NaN weights would fill the
    replays with NaN logits and values."""
    return bool(np.isfinite(flat).all())


def printable(text: str, limit: int = 200, newlines: bool = False) -> str:
    """``text`` safe to print on a terminal or a log line: control characters (C0, C1, DEL; with ``newlines``,
    all but the newline), format characters (the bidirectional controls among them) and line separators escaped
    as ``\\xNN``/``\\uNNNN``, and cut to ``limit`` characters with a mark of how much was left out. A peer's
    name cannot clear the screen, forge a log line or read one way and be another."""
    out = []
    for ch in text[:limit]:
        if ch == "\n" and newlines:
            out.append(ch)
        elif unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp"):
            code = ord(ch)
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}")
        else:
            out.append(ch)
    if len(text) > limit:
        out.append(f"... ({len(text) - limit} more characters)")
    return "".join(out)


def episode_misfit(msg: protocol.Episode, envs_per_worker: int) -> str | None:
    """Why an Episode cannot be one this run's workers finished, or None: a return or score that is not finite
    or passes MAX_ABS_RETURN, lengths that are negative or more env steps than frames, an env index outside the
    worker's, a wall time that is not finite."""
    for name in ("raw_return", "score_5min", "score_30min"):
        value = getattr(msg, name)
        if not (math.isfinite(value) and abs(value) <= MAX_ABS_RETURN):
            return f"an episode's {name} of {value:.3g} (finite, at most {MAX_ABS_RETURN:.0e} either way, is taken)"
    if not 0 <= msg.length_env_steps <= msg.length_frames:
        return f"an episode of {msg.length_env_steps} env steps in {msg.length_frames} frames"
    if not 0 <= msg.env_index < envs_per_worker:
        return f"an episode of env {msg.env_index}, not one of a worker's {envs_per_worker}"
    if not math.isfinite(msg.wall_time):
        return "an episode with a wall time that is not finite"
    return None
