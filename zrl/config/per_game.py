"""zrl's settings for one game and agent: ``zrl/config/games/<algo>/<game>.toml``, read under the run file (after
the defaults, before the run file, ``--set`` and the options) unless ``run.game_settings`` is false. The defaults
are for any Atari game; what only one game needs lives in its file, with its reason."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from zrl.config.schema import Config

GAMES = Path(__file__).with_name("games")
_ALE_V5 = re.compile(r"^ALE/(?P<game>[A-Za-z0-9]+)-v5$")
_ALE_V4 = re.compile(r"^(?P<game>[A-Z][A-Za-z0-9]*?)(NoFrameskip)?-v[04]$")


def atari_game(env_id: str) -> str | None:
    """The snake-case game name of an Atari-shaped id (``ALE/Pong-v5``, ``PongNoFrameskip-v4`` and ``Pong-v4`` all
    give ``pong``; ``ALE/MontezumaRevenge-v5`` gives ``montezuma_revenge``), None for any other id. The shape
    alone: whether ale-py has the game is ``zrl.envs.atari_rom``'s question."""
    match = _ALE_V5.match(env_id) or _ALE_V4.match(env_id)
    if match is None:
        return None
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", match.group("game")).lower()


def game_file(algo: str, env_id: str) -> Path | None:
    """The file of zrl's settings for this agent on this game, None where zrl has none."""
    game = atari_game(env_id)
    if game is None or not re.fullmatch(r"[a-z0-9_]+", algo):
        return None
    path = GAMES / algo / f"{game}.toml"
    return path if path.is_file() else None


def game_note(cfg: Config) -> str | None:
    """The line a new run says when it takes zrl's settings for its game: the keys whose value the
    run took from the file (a run file, --set or option that gave the same value is not told apart); None when
    none did."""
    path = game_file(cfg.algo, cfg.env.id) if cfg.run.game_settings else None
    if path is None:
        return None
    with path.open("rb") as fh:
        table = tomllib.load(fh)
    keys = [
        f"{section}.{key}"
        for section, body in table.items()
        for key, value in body.items()
        if getattr(getattr(cfg, section), key) == value
    ]
    if not keys:
        return None
    return (
        f"this run takes zrl's settings for {cfg.algo} on {cfg.env.id} ({', '.join(keys)}: {path}); "
        "--set run.game_settings=false for the defaults alone"
    )
