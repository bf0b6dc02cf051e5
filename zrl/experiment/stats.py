"""Aggregate scores over runs and games the way rliable does (Agarwal et al. 2021, "Deep Reinforcement Learning at
the Edge of the Statistical Precipice"): the interquartile mean and the mean, with stratified-bootstrap confidence
intervals, and performance profiles.

A config's scores are a matrix [runs, games]. The stratified bootstrap resamples the runs of each game with
replacement, independently per game, and recomputes the aggregate; the interval is the percentile interval of
those replicates. Written here with numpy rather than taken from the ``rliable`` package, which brings arch,
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


def stratified_bootstrap(scores: np.ndarray, reps: int, rng: np.random.Generator) -> np.ndarray:
    """``reps`` resampled copies of the [runs, games] matrix, [reps, runs, games]: each game's column is drawn
    from that game's runs with replacement, independently of the other games."""
    scores = np.asarray(scores, dtype=np.float64)
    if scores.ndim != 2 or not scores.size:
        raise ValueError(f"scores must be a non-empty [runs, games] matrix, got shape {scores.shape}")
    runs, games = scores.shape
    picks = rng.integers(0, runs, size=(reps, runs, games))
    return np.take_along_axis(np.broadcast_to(scores, (reps, runs, games)), picks, axis=1)


def interval(
    scores: np.ndarray, aggregate, reps: int = 5000, confidence: float = 0.95, seed: int = 0
) -> tuple[float, float, float]:
    """(point estimate, low, high): the aggregate of ``scores`` and the percentile interval of its stratified
    bootstrap replicates."""
    scores = np.asarray(scores, dtype=np.float64)
    rng = np.random.default_rng(seed)
    replicates = np.array([aggregate(m) for m in stratified_bootstrap(scores, reps, rng)])
    tail = (1.0 - confidence) / 2.0 * 100.0
    low, high = np.percentile(replicates, [tail, 100.0 - tail])
    return aggregate(scores), float(low), float(high)


def profile(scores: np.ndarray, taus: np.ndarray) -> np.ndarray:
    """Performance profile: for each tau, the share of runs scoring above it, averaged over games ([taus])."""
    scores = np.asarray(scores, dtype=np.float64)
    return (scores[None, :, :] > np.asarray(taus)[:, None, None]).mean(axis=1).mean(axis=1)


def profile_band(
    scores: np.ndarray, taus: np.ndarray, reps: int = 2000, confidence: float = 0.95, seed: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The profile and the pointwise percentile interval of its stratified bootstrap replicates."""
    rng = np.random.default_rng(seed)
    boots = stratified_bootstrap(scores, reps, rng)
    curves = (boots[:, None, :, :] > np.asarray(taus)[None, :, None, None]).mean(axis=2).mean(axis=2)
    tail = (1.0 - confidence) / 2.0 * 100.0
    low, high = np.percentile(curves, [tail, 100.0 - tail], axis=0)
    return profile(scores, taus), low, high
