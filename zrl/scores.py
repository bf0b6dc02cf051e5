"""Reference scores of the 57 Atari games: a uniformly random policy, the human "gamer" of DeepMind's
benchmarks, and the human world record used by SABER.

Source of the 55 games with all three: Hafner et al. 2021, "Mastering Atari with Discrete World Models"
(ICLR 2021), Appendix K, Table K.1 ("Random", "Gamer", "Record"; the random and gamer scores are DeepMind's,
Mnih et al. 2015 and Badia et al. 2020, and the records are Toromanoff et al. 2019's, the SABER paper),
rounded to whole points there. Defender and Surround, which that table leaves out: random and human from
Badia et al. 2020 ("Agent57", the random and human scores in its appendix); no world record is given for them, so their
record-normalised score is left empty.

Keys are ale-py rom ids (``pong``, ``space_invaders``).
"""

from __future__ import annotations

SOURCE = (
    "Hafner et al. 2021, Mastering Atari with Discrete World Models, Table K.1 (random, gamer, record; "
    "records from Toromanoff et al. 2019, SABER); Defender and Surround from Badia et al. 2020 (Agent57)"
)

# rom id: (random, human, human world record or None)
SCORES: dict[str, tuple[float, float, float | None]] = {
    "alien": (229, 7128, 251916),
    "amidar": (6, 1720, 104159),
    "assault": (222, 742, 8647),
    "asterix": (210, 8503, 1000000),
    "asteroids": (719, 47389, 10506650),
    "atlantis": (12850, 29028, 10604840),
    "bank_heist": (14, 753, 82058),
    "battle_zone": (2360, 37188, 801000),
    "beam_rider": (364, 16926, 999999),
    "berzerk": (124, 2630, 1057940),
    "bowling": (23, 161, 300),
    "boxing": (0, 12, 100),
    "breakout": (2, 30, 864),
    "centipede": (2091, 12017, 1301709),
    "chopper_command": (811, 7388, 999999),
    "crazy_climber": (10780, 35829, 219900),
    "defender": (2874.5, 18688.9, None),  # Badia et al. 2020; no world record in the table
    "demon_attack": (152, 1971, 1556345),
    "double_dunk": (-19, -16, 22),
    "enduro": (0, 860, 9500),
    "fishing_derby": (-92, -39, 71),
    "freeway": (0, 30, 38),
    "frostbite": (65, 4335, 454830),
    "gopher": (258, 2412, 355040),
    "gravitar": (173, 3351, 162850),
    "hero": (1027, 30826, 1000000),
    "ice_hockey": (-11, 1, 36),
    "jamesbond": (7, 303, 45550),
    "kangaroo": (52, 3035, 1424600),
    "krull": (1598, 2666, 104100),
    "kung_fu_master": (258, 22736, 1000000),
    "montezuma_revenge": (0, 4753, 1219200),
    "ms_pacman": (307, 6952, 290090),
    "name_this_game": (2292, 8049, 25220),
    "phoenix": (761, 7243, 4014440),
    "pitfall": (-229, 6464, 114000),
    "pong": (-21, 15, 21),
    "private_eye": (25, 69571, 101800),
    "qbert": (164, 13455, 2400000),
    "riverraid": (1338, 17118, 1000000),
    "road_runner": (12, 7845, 2038100),
    "robotank": (2, 12, 76),
    "seaquest": (68, 42055, 999999),
    "skiing": (-17098, -4337, -3272),
    "solaris": (1236, 12327, 111420),
    "space_invaders": (148, 1669, 621535),
    "star_gunner": (664, 10250, 77400),
    "surround": (-10.0, 6.5, None),  # Badia et al. 2020; no world record in the table
    "tennis": (-24, -8, 21),
    "time_pilot": (3568, 5229, 65300),
    "tutankham": (11, 168, 5384),
    "up_n_down": (533, 11693, 82840),
    "venture": (0, 1188, 38900),
    "video_pinball": (16257, 17668, 89218328),
    "wizard_of_wor": (564, 4756, 395300),
    "yars_revenge": (3093, 54577, 15000105),
    "zaxxon": (32, 9173, 83700),
}


def human_normalised(rom: str, score: float) -> float | None:
    """(score - random) / (human - random); None for a game without reference scores."""
    if rom not in SCORES:
        return None
    random, human, _ = SCORES[rom]
    return (score - random) / (human - random)


def record_normalised(rom: str, score: float) -> float | None:
    """SABER's normalisation by the human world record: (score - random) / (record - random)."""
    if rom not in SCORES:
        return None
    random, _, record = SCORES[rom]
    if record is None:
        return None
    return (score - random) / (record - random)


SABER_5_MIN_FRAMES = 5 * 60 * 60  # 5 minutes of play at 60 emulator frames per second
SABER_30_MIN_FRAMES = 30 * 60 * 60


class SaberEpisodes:
    """Training-time SABER scores of M envs' episodes: the raw return after 5 minutes of play, after 30
    minutes, and uncapped (what the episode scored in all). An episode shorter than a cap scores its whole
    return at that cap."""

    def __init__(self, num_envs: int) -> None:
        import numpy as np

        self._np = np
        self.returns = np.zeros(num_envs)
        self.frames = np.zeros(num_envs, np.int64)
        self.at_5 = np.full(num_envs, np.nan)
        self.at_30 = np.full(num_envs, np.nan)

    def step(self, raw_rewards, frames_per_step: int, game_over) -> list[tuple[int, float, float, float, int]]:
        """Add one env step of every env; returns ``(env, score_5min, score_30min, score, frames)`` for each
        episode that ended with it."""
        np = self._np
        before = self.frames.copy()
        self.frames += frames_per_step
        # A cap crossed within this step: the return so far, before this step's reward counts past it.
        for cap, at in ((SABER_5_MIN_FRAMES, self.at_5), (SABER_30_MIN_FRAMES, self.at_30)):
            crossed = (before < cap) & (self.frames >= cap) & np.isnan(at)
            at[crossed] = self.returns[crossed] + np.asarray(raw_rewards)[crossed] * (self.frames[crossed] == cap)
        self.returns += np.asarray(raw_rewards, np.float64)
        ended = []
        for env in np.flatnonzero(np.asarray(game_over)):
            total = float(self.returns[env])
            score_5 = total if np.isnan(self.at_5[env]) else float(self.at_5[env])
            score_30 = total if np.isnan(self.at_30[env]) else float(self.at_30[env])
            ended.append((int(env), score_5, score_30, total, int(self.frames[env])))
            self.returns[env], self.frames[env], self.at_5[env], self.at_30[env] = 0.0, 0, np.nan, np.nan
        return ended
