"""The error a user's mistake becomes, and the two ways a rule names it. Layer 0: imports only the standard
library, so that the config package and each agent's own config section (``zrl/agents/<name>/config.py``) raise
the same error without importing each other."""

from __future__ import annotations

import difflib
import typing


class ConfigError(ValueError):
    """A configuration mistake; the message is meant for the user as is (the file, the key, what is valid).
    ``key`` is the dotted key it is about, when one is (the loader looks up which file or option set it)."""

    def __init__(self, message: str, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key


def fail(key: str, message: str) -> typing.NoReturn:
    """Raise the ConfigError for one dotted key; the loader puts the file or option in front of it."""
    raise ConfigError(f"{key}: {message}", key)


def choice(key: str, value: str, valid: tuple[str, ...]) -> None:
    """Fail unless ``value`` is one of ``valid``, with the closest valid name as a hint."""
    if value not in valid:
        hint = difflib.get_close_matches(value, valid, n=1)
        extra = f" (did you mean {hint[0]!r}?)" if hint else ""
        fail(key, f"{value!r} is not one of {', '.join(valid)}{extra}")
