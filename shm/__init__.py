"""Shared-memory building blocks: named segments and single-writer rings.

Depends only on numpy and the standard library (no RL code).
"""

from .ring import LAYOUT_VERSION, Ring, RingSpec
from .segment import (
    MAX_NAME_LEN,
    NotOwnerError,
    Segment,
    SegmentExistsError,
    SegmentName,
    SegmentNotFoundError,
    owned_segments,
    parse_segment_name,
    pid_alive,
    pid_max,
    segment_name,
    sweep,
)

__all__ = [
    "LAYOUT_VERSION",
    "MAX_NAME_LEN",
    "NotOwnerError",
    "Ring",
    "RingSpec",
    "Segment",
    "SegmentExistsError",
    "SegmentName",
    "SegmentNotFoundError",
    "owned_segments",
    "parse_segment_name",
    "pid_alive",
    "pid_max",
    "segment_name",
    "sweep",
]
