"""What anything from a socket or a run folder must satisfy before the run uses it or prints it: numbers in a sane
range, weights finite, text free of control characters. A peer that any local user can run (a remote worker on
loopback), a damaged message or a folder from elsewhere is data: it is checked here, not trusted.

The ranges of experience (rewards, values, logits) are the broker's keys (config ``broker.max_abs_*``)."""

from __future__ import annotations

import unicodedata

import numpy as np


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
