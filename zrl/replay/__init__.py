"""Replays: the broker's index of unrolls (no frames), with each replay's insert and sample rule."""
