"""zrl-translate: a reference platform's command line as a zrl run file.

Two references, their options read from their own option files (docs/reference_options.md has every one, with
its source line):

- ``ebv``: the elite-replay platform (parralplex/elite_buffer_vtrace), ``main.py`` flags with its
  ``--replay_parameters`` list;
- ``rainbow``: Rainbow-IQN Ape-X (valeoai/rainbow-iqn-apex), ``launch_learner.py`` / ``launch_actor.py`` flags.

A translation is the run the reference would make: every option it has, given or left at its default, becomes
the zrl key that does the same, where zrl's default differs (the run file names the flag each key came from).
An option with no equivalent is named on stderr with the reason when it is given, never dropped silently; an
option the reference does not have is a usage error. ``OPTIONS[reference]`` is the table the README's
translation tables are written from (``python -m zrl.translate --table ebv``).

One module per reference (``ebv``, ``rainbow``: its options and the builder that turns them into zrl keys), and
``translation`` for what they share (an option, and the translation a builder fills in).
"""

from __future__ import annotations

import argparse
import difflib
from collections.abc import Callable
from typing import Any

import tomli_w

from zrl.config import ConfigError, load
from zrl.config.schema import sections as config_sections
from zrl.translate import ebv, rainbow
from zrl.translate.translation import Option, Translation

NAMES = {"ebv": ebv.NAME, "rainbow": rainbow.NAME}
OPTIONS: dict[str, tuple[Option, ...]] = {"ebv": ebv.OPTIONS, "rainbow": rainbow.OPTIONS}
BUILDERS: dict[str, Callable[[Translation], None]] = {"ebv": ebv.build, "rainbow": rainbow.build}


def parse(reference: str, argv: list[str]) -> dict[str, str]:
    """The reference's flags given in ``argv`` (``--flag value`` or ``--flag=value``; a store_true flag alone),
    by their main spelling; ConfigError naming an option the reference does not have, with the closest one."""
    if reference not in OPTIONS:
        raise ConfigError(f"--from: {reference!r} is not one of {', '.join(OPTIONS)}")
    parser = argparse.ArgumentParser(prog=reference, add_help=False, allow_abbrev=False, exit_on_error=False)
    for option in OPTIONS[reference]:
        names = [option.flag] + ([option.alias] if option.alias else [])
        if option.kind == "flag":
            parser.add_argument(*names, dest=option.flag, action="store_const", const="")
        else:
            parser.add_argument(*names, dest=option.flag, action="append", default=None)
    while argv and not argv[0].startswith("-"):  # "python main.py ...": the words before the first flag
        argv = argv[1:]
    try:
        known, extra = parser.parse_known_args(argv)
    except argparse.ArgumentError as err:
        raise ConfigError(f"{NAMES[reference]}: {err}") from None
    if extra:
        flags = [o.flag for o in OPTIONS[reference]]
        word = extra[0].split("=", 1)[0]
        if word in ("--out", "--from", "-h", "--help"):
            raise ConfigError(f"{word} is zrl-translate's own option: give it before --")
        hint = difflib.get_close_matches(word, flags, n=1)
        raise ConfigError(
            f"{word!r} is not an option of {NAMES[reference]}" + (f" (did you mean {hint[0]}?)" if hint else "")
        )
    given = {}
    for flag, values in vars(known).items():
        if values is None:
            continue
        given[flag] = values if isinstance(values, str) else values[-1]  # the last one wins, as in argparse
    return given


def translate(reference: str, argv: list[str]) -> tuple[str, list[str]]:
    """The run file (TOML text) for a reference command line, and the notes for stderr. The run file is loaded
    as zrl-launch would load it: a translation zrl would refuse is a ConfigError, with the reason."""
    given = parse(reference, argv)
    tr = Translation(reference, given, OPTIONS[reference])
    BUILDERS[reference](tr)
    # zrl's settings for one game must not lie under a reference's, which are the same for every game
    tr.put("run.game_settings", False, why="its settings are the same for every game", keep=True)
    tr.unplaced()
    text = render(tr)
    try:
        load_text(text)
    except ConfigError as err:  # say it by the flags the key came from, not by the scratch file
        reason = str(err).split(": ", 1)[1] if ": " in str(err) else str(err)
        key = err.key or ""
        flags = f" (from {tr.source(key)})" if key in tr.sources and (tr.sources[key] or key in tr.why) else ""
        if tr.values.get("run.deterministic"):
            flags += "; --reproducible is zrl's run.deterministic, which needs one worker and one queue replay"
        raise ConfigError(f"the translation is not a run zrl can make{flags}: {reason}") from None
    return text, tr.notes


def render(tr: Translation) -> str:
    """The run file: the top keys, then each section with the keys whose value differs from zrl's default (or
    whose flag was given), each after a comment naming the reference flags it came from."""
    defaults = _flat_defaults()
    lines = [f"# zrl run file translated from {NAMES[tr.reference]}'s command line by zrl-translate."]
    sections: dict[str, list[str]] = {}
    for key, value in tr.values.items():
        section, _, name = key.rpartition(".")
        given = any(f in tr.given for f in tr.sources[key]) or key in tr.kept
        if (defaults.get(key, object()) == value or tr.only_given) and not given:
            continue
        comment = [f"# {tr.source(key)}"] if tr.sources[key] or key in tr.why else []
        entry = [*comment, tomli_w.dumps({name: value}).rstrip("\n")]
        sections.setdefault(section, []).extend(entry)
    if "" in sections:  # the top keys (algo)
        lines += ["", *sections.pop("")]
    for section in config_sections():
        if section in sections:
            lines += ["", f"[{section}]", *sections[section]]
    for rep in tr.replays:
        ordered = {k: rep[k] for k in ("type", "capacity", "sample_ratio") if k in rep} | rep
        lines += ["", "[[replay]]", tomli_w.dumps(ordered).rstrip("\n")]
    return "\n".join(lines) + "\n"


def _flat_defaults() -> dict[str, Any]:
    from zrl.config import Config, to_dict

    data = to_dict(Config())  # the defaults alone: a translation reads no game's settings
    flat = {}
    for section, values in data.items():
        if isinstance(values, dict):
            flat.update({f"{section}.{k}": v for k, v in values.items()})
        elif section != "replay":
            flat[section] = values
    return flat


def load_text(text: str):
    """Load a run file's text as zrl-launch --config would (through a file: the loader names it)."""
    import os
    import tempfile

    fd, path = tempfile.mkstemp(prefix="zrl-translate-", suffix=".toml")
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        return load(path, ())
    finally:
        os.unlink(path)


def table(reference: str) -> str:
    """The README's translation table of one reference: every option, its zrl home, the reference default,
    zrl's default there, and the difference."""
    defaults = _flat_defaults()
    out = ["| reference option | zrl | reference default | zrl default | difference |", "|---|---|---|---|---|"]
    for o in OPTIONS[reference]:
        key = o.home.split(" ")[0].rstrip(",")
        zrl_default = defaults.get(key, "")
        shown = "" if zrl_default == "" else f"`{_toml_value(zrl_default)}`"
        default = "" if o.default is None else f"`{o.default}`"
        home = f"`{o.home}`" if o.home else "(none)"
        flag = o.flag + (f" / {o.alias}" if o.alias else "")
        out.append(f"| `{flag}` | {home} | {default} | {shown} | {o.note} |")
    return "\n".join(out)


def _toml_value(value: Any) -> str:
    if isinstance(value, (list, tuple)):  # inline, one table row
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return tomli_w.dumps({"x": value})[4:].strip()
