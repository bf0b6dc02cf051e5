"""Aggregate scores over runs and games the way rliable does (Agarwal et al. 2021, "Deep Reinforcement Learning at
the Edge of the Statistical Precipice"): the interquartile mean and the mean, with stratified-bootstrap confidence
intervals, and performance profiles.

A config's scores are one array of run scores per game (a [runs, games] matrix when every game has as many runs).
The stratified bootstrap resamples the runs of each game with replacement, independently per game, and recomputes
the aggregate over all of them; the interval is the percentile interval of those replicates. Written here with numpy rather than taken from the ``rliable`` package, which brings arch,
statsmodels, pandas and seaborn for these few lines; ``tests/test_experiment.py`` checks the bootstrap against the
distribution enumerated by hand on a small case.
"""

from __future__ import annotations

import numpy as np

__all__ = ["iqm", "mean", "stratified_bootstrap", "interval", "profile", "profile_band"]


def iqm(scores: np.ndarray) -> float:
    """Interquartile mean of all entries: the mean of what is left when floor(n/4) are cut from each end of the
    sorted scores (scipy.stats.trim_mean(x, 0.25), rliable's IQM)."""
    flat = np.sort(np.asarray(scores, dtype=np.float64).reshape(-1))
    if not len(flat):
        raise ValueError("no scores")
    cut = int(0.25 * len(flat))
    return float(flat[cut : len(flat) - cut].mean())


def mean(scores: np.ndarray) -> float:
    flat = np.asarray(scores, dtype=np.float64).reshape(-1)
    if not len(flat):
        raise ValueError("no scores")
    return float(flat.mean())


Scores = list  # one 1-D array of run scores per game; games may have different numbers of runs


def _columns(scores) -> list[np.ndarray]:
    """Per-game columns from a [runs, games] matrix or a list of 1-D arrays (one per game, any lengths)."""
    if isinstance(scores, np.ndarray):
        if scores.ndim != 2 or not scores.size:
            raise ValueError(f"scores must be a non-empty [runs, games] matrix, got shape {scores.shape}")
        return [np.asarray(c, dtype=np.float64) for c in scores.T]
    columns = [np.asarray(c, dtype=np.float64).reshape(-1) for c in scores]
    if not columns or any(not len(c) for c in columns):
        raise ValueError("every game needs at least one run's score")
    return columns


def stratified_bootstrap(scores, reps: int, rng: np.random.Generator) -> list[np.ndarray]:
    """``reps`` resampled copies of each game's runs, [reps, runs of that game] per game: each game's runs are
    drawn from that game's own runs with replacement, independently of the other games."""
    return [c[rng.integers(0, len(c), size=(reps, len(c)))] for c in _columns(scores)]


def interval(
    scores, aggregate, reps: int = 5000, confidence: float = 0.95, seed: int = 0
) -> tuple[float, float, float]:
    """(point estimate, low, high): ``aggregate`` of all runs of all games together, and the percentile interval of
    its stratified bootstrap replicates."""
    columns = _columns(scores)
    boots = stratified_bootstrap(columns, reps, np.random.default_rng(seed))
    replicates = np.array([aggregate(np.concatenate([b[i] for b in boots])) for i in range(reps)])
    tail = (1.0 - confidence) / 2.0 * 100.0
    low, high = np.percentile(replicates, [tail, 100.0 - tail])
    return aggregate(np.concatenate(columns)), float(low), float(high)


def profile(scores, taus: np.ndarray) -> np.ndarray:
    """Performance profile: for each tau, the share of each game's runs scoring above it, averaged over games."""
    taus = np.asarray(taus)
    return np.mean([(c[None, :] > taus[:, None]).mean(axis=1) for c in _columns(scores)], axis=0)


def profile_band(
    scores, taus: np.ndarray, reps: int = 2000, confidence: float = 0.95, seed: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The profile and the pointwise percentile interval of its stratified bootstrap replicates."""
    taus = np.asarray(taus)
    boots = stratified_bootstrap(scores, reps, np.random.default_rng(seed))
    curves = np.mean([(b[:, None, :] > taus[None, :, None]).mean(axis=2) for b in boots], axis=0)  # [reps, taus]
    tail = (1.0 - confidence) / 2.0 * 100.0
    low, high = np.percentile(curves, [tail, 100.0 - tail], axis=0)
    return profile(scores, taus), low, high
