"""The shared machinery of zrl-translate: a reference option, and the Translation a reference's builder fills
in (the zrl keys its flags give, where each came from, the notes for stderr)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from zrl.config import ConfigError


@dataclass(frozen=True)
class Option:
    """One reference option: its flag (its other spelling too), how its text is read, its default as the
    reference gives it, where it lives in zrl (a key, or a command's option; "" for nowhere) and one line on
    any difference (for an option with no home: why)."""

    flag: str
    kind: str  # str, int, float, bool (ebv: any non-empty text is true), int01 (0/1 or a word), flag, json
    default: Any
    home: str
    note: str = ""
    alias: str = ""


_FALSE_WORDS = ("false", "0", "no", "off")


class Translation:
    """The zrl keys a reference command line gives (dotted key -> value, and the flag each came from), the
    [[replay]] tables, and the notes for stderr."""

    def __init__(self, reference: str, given: dict[str, str], options: tuple[Option, ...]) -> None:
        self.reference, self.given, self.options = reference, given, options
        self.values: dict[str, Any] = {}
        self.sources: dict[str, tuple[str, ...]] = {}
        self.replays: list[dict[str, Any]] = []
        self.notes: list[str] = []
        self.used: set[str] = set()  # the flags some key or note took
        self.why: dict[str, str] = {}  # keys set by what the reference hard-wires, not by a flag
        self.only_given = False  # continuing or testing: the reference took the rest from the checkpoint
        self.kept: set[str] = set()  # keys the run file holds even where it holds only the flags given

    def value(self, flag: str) -> Any:
        """The flag's value as the reference reads it: given, or its default."""
        option = _option(self.options, flag)
        text = self.given.get(option.flag)
        return option.default if text is None else _read(option, text, self.notes)

    def source(self, key: str) -> str:
        """The flags a key came from, as given or as the reference's default, and why where it is no flag's."""
        parts = []
        for flag in self.sources[key]:
            text = self.given.get(flag)
            default = _option(self.options, flag).default
            parts.append(f"{flag} (default {default})" if text is None else f"{flag} {text}" if text else f"{flag}=")
        if key in self.why:
            parts.append(self.why[key])
        return ", ".join(parts)

    def put(self, key: str, value: Any, *flags: str, why: str = "", keep: bool = False) -> None:
        self.values[key] = value
        if keep:
            self.kept.add(key)
        self.sources[key] = flags
        if why:
            self.why[key] = why
        self.used.update(flags)

    def note(self, flag: str, why: str) -> None:
        """Say on stderr what became of a given flag that no key takes."""
        if flag in self.given:
            self.notes.append(f"{flag} {self.given[flag]}".rstrip() + f": {why}")  # a store_true flag has no text
            self.used.add(flag)

    def unplaced(self) -> None:
        """A note for every given flag that neither a key nor a note took: nothing is dropped silently."""
        for flag in self.given:
            if flag not in self.used:
                option = _option(self.options, flag)
                home = f" ({option.home})" if option.home else ""
                self.note(flag, (option.note or "no zrl key takes it") + home)


def _option(options: tuple[Option, ...], flag: str) -> Option:
    for option in options:
        if flag in (option.flag, option.alias):
            return option
    raise KeyError(flag)


def _read(option: Option, text: str, notes: list[str]) -> Any:
    """An option's text as its reference reads it (ConfigError naming it when it cannot)."""
    try:
        if option.kind == "int":
            return int(text)
        if option.kind == "float":
            return float(text)
        if option.kind == "flag":
            return True
        if option.kind == "int01":  # 0 or 1 in later versions; the README's version read true/false with bool()
            if text.strip().lower() in ("true", "false"):
                meant = text.strip().lower() == "true"
                if not meant:
                    notes.append(
                        f"{option.flag} {text}: the README's version read any text as true; taken as 0, as meant"
                    )
                return int(meant)
            return int(text)
        if option.kind == "bool":
            if text.strip().lower() in _FALSE_WORDS:  # the reference's bool("False") is True: zrl takes the word
                notes.append(
                    f"{option.flag} {text}: the reference reads any non-empty text as true; taken as false, as meant"
                )
                return False
            return text != ""
    except ValueError:
        raise ConfigError(
            f"{option.flag}: {text!r} is not {'an integer' if option.kind == 'int' else 'a number'}"
        ) from None
    return text
