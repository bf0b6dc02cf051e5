"""The sum tree against a flat numpy array, its stratified sampling against the priorities, and the
importance weights and beta annealing at their endpoints."""

from __future__ import annotations

import numpy as np
import pytest

from zrl.replay.sumtree import SumTree, annealed_beta, importance_weights

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("capacity", [1, 2, 7, 64, 1000])
def test_random_updates_and_queries_match_a_flat_array(capacity):
    rng = np.random.default_rng(capacity)
    tree, flat = SumTree(capacity), np.zeros(capacity)
    for _ in range(200):
        slots = rng.integers(0, capacity, int(rng.integers(1, 50)))
        priorities = rng.random(slots.size) * rng.choice([0.0, 1.0, 100.0], slots.size)
        tree.update(slots, priorities)
        flat[slots] = priorities  # numpy's rule too: the last of a repeated slot counts
        assert tree.total == pytest.approx(flat.sum(), rel=1e-12, abs=1e-12)
        np.testing.assert_array_equal(tree.priorities, flat)
        if flat.sum() > 0:
            values = rng.random(20) * flat.sum()
            expected = np.searchsorted(np.cumsum(flat), values, side="right")
            found = tree.find(values)
            # On an exact boundary either neighbour is right; off it, the slot is the flat array's.
            np.testing.assert_array_equal(found, np.minimum(expected, capacity - 1))
            assert (flat[found] > 0).all()


def test_inner_nodes_hold_the_sums_of_their_children():
    tree = SumTree(13)
    tree.update(np.arange(13), np.arange(13) + 1.0)
    inner = np.arange(1, tree.size)
    np.testing.assert_allclose(tree.nodes[inner], tree.nodes[2 * inner] + tree.nodes[2 * inner + 1])
    assert tree.total == sum(range(1, 14))


def test_stratified_sampling_frequencies_converge_to_the_priorities():
    """Chi-square goodness of fit, 200,000 draws over 50 slots (some of priority 0, never drawn): the test
    fails at p < 0.001, which a correct sampler does once in a thousand seeds; this seed is fixed."""
    rng = np.random.default_rng(0)
    capacity = 50
    priorities = rng.random(capacity) ** 3
    priorities[[3, 17, 40]] = 0.0
    tree = SumTree(capacity)
    tree.update(np.arange(capacity), priorities)
    counts = np.zeros(capacity)
    for _ in range(2000):
        slots, probabilities = tree.sample(100, rng)
        np.testing.assert_allclose(probabilities, priorities[slots] / priorities.sum())
        np.add.at(counts, slots, 1)
    assert counts[[3, 17, 40]].sum() == 0
    live = priorities > 0
    expected = priorities[live] / priorities.sum() * counts.sum()
    chi2 = float(((counts[live] - expected) ** 2 / expected).sum())
    df = int(live.sum()) - 1
    z = 3.0902  # the standard normal's 0.999 quantile; Wilson-Hilferty gives chi-square's from it
    critical = df * (1 - 2 / (9 * df) + z * (2 / (9 * df)) ** 0.5) ** 3
    assert chi2 < critical, (chi2, critical)


def test_bad_updates_are_refused():
    tree = SumTree(4)
    with pytest.raises(IndexError):
        tree.update([4], [1.0])
    with pytest.raises(ValueError):
        tree.update([0], [np.nan])
    with pytest.raises(ValueError):
        tree.update([0], [-1.0])
    with pytest.raises(ValueError, match="nothing to sample"):
        tree.sample(2, np.random.default_rng(0))


def test_importance_weights_at_the_endpoints_of_beta():
    p = np.array([0.5, 0.25, 0.125, 0.125])
    np.testing.assert_allclose(importance_weights(p, 4, 0.0), np.ones(4))  # beta 0: no correction
    # beta 1: w = 1 / (N P), divided by the largest; the rarest transitions weigh most.
    np.testing.assert_allclose(importance_weights(p, 4, 1.0), [0.25, 0.5, 1.0, 1.0])
    w = importance_weights(p, 4, 0.4)
    np.testing.assert_allclose(w, (4 * p) ** -0.4 / ((4 * 0.125) ** -0.4), rtol=1e-6)
    assert w.max() == 1.0


def test_beta_anneals_linearly_from_its_start_to_one():
    assert annealed_beta(0, 0.4, 1000) == 0.4
    assert annealed_beta(500, 0.4, 1000) == pytest.approx(0.7)
    assert annealed_beta(1000, 0.4, 1000) == 1.0
    assert annealed_beta(10**9, 0.4, 1000) == 1.0
    assert annealed_beta(5, 0.4, 0) == 1.0
