"""``config/defaults.toml``, generated from the schema: every key with its default and the description its
declaration carries (``python -m zrl.config > config/defaults.toml``; a test holds the file to this output)."""

from __future__ import annotations

import typing
from dataclasses import asdict

import tomli_w

from zrl.config.checks import REPLAY_KEYS
from zrl.config.loading import to_dict
from zrl.config.replay import ReplayConfig
from zrl.config.schema import TOP_KEYS, Config, sections

MAX_DESCRIPTION = 200  # characters: what a key does, its unit and its values; the why belongs in the README


def descriptions(cls: type) -> dict[str, str]:
    """Each key of a section (or of Config) and its declared description; a key declared without one, or with one
    longer than MAX_DESCRIPTION, is a TypeError, so that no key goes undocumented and help stays short."""
    out = {}
    for name, hint in typing.get_type_hints(cls, include_extras=True).items():
        metas = [m for m in getattr(hint, "__metadata__", ()) if getattr(m, "description", None)]
        if metas:
            out[name] = metas[0].description
            if len(out[name]) > MAX_DESCRIPTION:
                raise TypeError(
                    f"{cls.__name__}.{name}: its description has {len(out[name])} characters, at most "
                    f"{MAX_DESCRIPTION}; move the why to the README"
                )
        elif typing.get_origin(hint) is typing.Annotated or name in TOP_KEYS:
            raise TypeError(f"{cls.__name__}.{name} is declared without a description")
    return out


def _line(key: str, value: typing.Any) -> str:
    return tomli_w.dumps({key: value}).rstrip("\n")


def defaults_toml() -> str:
    """config/defaults.toml: every key with its default and its one-line documentation."""
    data = to_dict(Config())
    lines = [
        "# zrl defaults: every config key, its default and what it means.",
        "# Run files override only what differs. Precedence: command-line options > --set section.key=value",
        "# > the run file > these defaults. Generated from zrl/config/ (python -m zrl.config > config/defaults.toml).",
    ]
    top = descriptions(Config)
    for key in TOP_KEYS:
        lines += ["", f"# {top[key]}", _line(key, data[key])]
    for name, cls in sections().items():
        docs = descriptions(cls)
        lines.append(f"\n[{name}]")
        for key, value in data[name].items():
            lines += [f"# {docs[key]}", _line(key, value)]
    replay_docs = descriptions(ReplayConfig)
    lines += [
        "\n# Replays, one [[replay]] table each. Every unroll goes into every replay; a batch takes",
        "# batch_size * sample_ratio unrolls from each. The default: half of every batch fresh from a queue (each",
        "# unit twice through it, at learner.replay_ratio 4), half drawn from a uniform replay of the last 1,000.",
        "# Plain on-policy IMPALA is one queue with learner.replay_ratio = 0.",
        "# --replay also takes the reference platform's JSON list (standard = uniform; custom = elite or attentive).",
    ]
    for rep in data["replay"]:
        lines.append("[[replay]]")
        for key, value in rep.items():
            lines += [f"# {replay_docs[key]}", _line(key, value)]
    lines.append("\n# The other replay keys and their defaults, e.g. for an elite replay:\n# [[replay]]")
    for key, value in asdict(ReplayConfig()).items():
        if key == "type":
            lines.append('# type = "elite"')
        elif key not in REPLAY_KEYS["queue"]:
            lines += [f"# {_line(key, value)}", f"#   {replay_docs[key]}"]
    return "\n".join(lines) + "\n"
