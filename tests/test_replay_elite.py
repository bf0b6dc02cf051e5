"""Tests for zrl.replay.elite: hand-worked pools for every strategy, distances against slow numpy references."""

import numpy as np
import pytest
import torch

from zrl.replay import elite

pytestmark = pytest.mark.unit

# Pool A (m=8). Positions:        0    1    2    3    4    5    6    7
A_DIST = np.array([0.5, 0.1, 0.9, 0.1, 0.3, 0.7, 0.2, 0.3])
A_COUNT = np.array([2, 3, 0, 1, 0, 1, 2, 0])
# Stable distance order: [1, 3, 6, 4, 7, 0, 5, 2]; (count, distance, position) order: [4, 7, 2, 3, 5, 6, 0, 1].
# n=3 strata (sizes 3, 3, 2): [1, 3, 6] | [4, 7, 0] | [5, 2].
A_N3 = {
    1: [1, 3, 6],
    2: [1, 4, 5],
    3: [4, 7, 2],
    4: [3, 4, 2],  # stratum 2: 4 and 7 tie on count 0 and distance 0.3 -> lower position 4
}
A_N8 = {  # n == m: strata of one, so 2 and 4 are the distance order
    1: [1, 3, 6, 4, 7, 0, 5, 2],
    2: [1, 3, 6, 4, 7, 0, 5, 2],
    3: [4, 7, 2, 3, 5, 6, 0, 1],
    4: [1, 3, 6, 4, 7, 0, 5, 2],
}

# Pool B (m=6). Positions:        0    1    2    3    4    5
B_DIST = np.array([0.4, 0.4, 0.1, 0.8, 0.4, 0.6])
B_COUNT = np.array([1, 2, 3, 0, 0, 1])
# Stable distance order: [2, 0, 1, 4, 5, 3]; n=2 strata: [2, 0, 1] | [4, 5, 3].
# (count, distance, position) order: [4, 3, 0, 5, 1, 2].
B_N2 = {
    1: [2, 0],  # 0, 1 and 4 tie at 0.4 -> lowest position 0
    2: [2, 4],
    3: [4, 3],
    4: [0, 4],  # stratum 2: 4 and 3 both unsampled -> lower distance 4 beats lower position 3
}

# Pool C (m=3 < n=7): the strategy's whole-pool order, repeated cyclically.
C_DIST = np.array([0.3, 0.1, 0.3])
C_COUNT = np.array([0, 2, 1])
C_N7 = {
    1: [1, 0, 2, 1, 0, 2, 1],
    2: [1, 0, 2, 1, 0, 2, 1],
    3: [0, 2, 1, 0, 2, 1, 0],
    4: [0, 2, 1, 0, 2, 1, 0],
}


@pytest.mark.parametrize(
    "distances, counts, n, expected",
    [
        (A_DIST, A_COUNT, 3, A_N3),
        (A_DIST, A_COUNT, 8, A_N8),
        (B_DIST, B_COUNT, 2, B_N2),
        (C_DIST, C_COUNT, 7, C_N7),
    ],
    ids=["A-m8-n3", "A-m8-n8", "B-m6-n2", "C-m3-n7"],
)
@pytest.mark.parametrize("strategy", elite.STRATEGIES)
def test_select_hand_worked(strategy, distances, counts, n, expected):
    chosen = elite.select(strategy, distances, counts, n)
    assert chosen.dtype == np.int64
    np.testing.assert_array_equal(chosen, expected[strategy])


def test_select_single_candidate_repeats():
    for strategy in elite.STRATEGIES:
        np.testing.assert_array_equal(elite.select(strategy, np.array([0.5]), np.array([4]), 3), [0, 0, 0])


def test_select_edge_cases_and_errors():
    for strategy in elite.STRATEGIES:
        out = elite.select(strategy, A_DIST, A_COUNT, 0)
        assert out.shape == (0,) and out.dtype == np.int64
        assert elite.select(strategy, np.array([]), np.array([], dtype=np.int64), 0).shape == (0,)
        with pytest.raises(ValueError):
            elite.select(strategy, np.array([]), np.array([], dtype=np.int64), 1)
        with pytest.raises(ValueError):
            elite.select(strategy, A_DIST, A_COUNT[:-1], 2)
        with pytest.raises(ValueError):
            elite.select(strategy, A_DIST, A_COUNT, -1)
    for bad in (0, 5):
        with pytest.raises(ValueError, match="1, 2, 3, 4"):
            elite.select(bad, A_DIST, A_COUNT, 2)


def test_select_at_lambda_one_is_a_permutation_of_the_pool():
    rng = np.random.default_rng(0)
    for n in (1, 2, 5, 16):
        m = elite.pool_size(1.0, n, available=100)
        assert m == n
        distances = rng.integers(0, 3, size=m).astype(np.float64)  # plenty of ties
        counts = rng.integers(0, 3, size=m)
        for strategy in elite.STRATEGIES:
            chosen = elite.select(strategy, distances, counts, n)
            np.testing.assert_array_equal(np.sort(chosen), np.arange(n))


def test_select_strata_match_array_split():
    """Strategies 2 and 4 against a direct np.array_split of the distance order, on random pools."""
    rng = np.random.default_rng(1)
    for _ in range(50):
        m = int(rng.integers(1, 30))
        n = int(rng.integers(1, m + 1))
        distances = rng.integers(0, 5, size=m).astype(np.float64)
        counts = rng.integers(0, 4, size=m)
        order = sorted(range(m), key=lambda i: (distances[i], i))
        strata = np.array_split(np.array(order), n)
        np.testing.assert_array_equal(elite.select(2, distances, counts, n), [s[0] for s in strata])
        expect4 = [min(s, key=lambda i: (counts[i], distances[i], i)) for s in strata]
        np.testing.assert_array_equal(elite.select(4, distances, counts, n), expect4)
        expect3 = sorted(range(m), key=lambda i: (counts[i], distances[i], i))[:n]
        np.testing.assert_array_equal(elite.select(3, distances, counts, n), expect3)


# ---- distances -------------------------------------------------------------------------------------------


def _ref_ln_norm(a, b, p):
    a, b = np.broadcast_arrays(a, b)
    return np.array([np.sum(np.abs(a[i] - b[i]) ** p) ** (1.0 / p) for i in range(a.shape[0])])


def _ref_cos_dist(a, b):
    a, b = np.broadcast_arrays(a, b)
    out = []
    for i in range(a.shape[0]):
        total = 0.0
        for k in range(a.shape[1]):
            x, y = a[i, k], b[i, k]
            cos = np.dot(x, y) / max(np.linalg.norm(x) * np.linalg.norm(y), 1e-8)
            total += 1.0 - cos
        out.append(total / a.shape[1])
    return np.array(out)


def _ref_kl_div(a, b):
    a, b = np.broadcast_arrays(a, b)
    out = []
    for i in range(a.shape[0]):
        total = 0.0
        for k in range(a.shape[1]):
            p = np.exp(a[i, k] - a[i, k].max())
            p /= p.sum()
            q = np.exp(b[i, k] - b[i, k].max())
            q /= q.sum()
            total += np.sum(p * np.log(p / q))
        out.append(total)
    return np.array(out)


def _features(seed, shape):
    return np.random.default_rng(seed).normal(size=shape)


SHAPE_PAIRS = [((5, 3, 7), (5, 3, 7)), ((5, 3, 7), (1, 1, 7)), ((1, 1, 7), (5, 3, 7))]


@pytest.mark.parametrize("shape_a, shape_b", SHAPE_PAIRS, ids=["full", "b-broadcast", "a-broadcast"])
@pytest.mark.parametrize(
    "kind, p", [("ln_norm", 1.0), ("ln_norm", 2.0), ("ln_norm", 3.0), ("cos_dist", 2.0), ("kl_div", 2.0)]
)
def test_distance_matches_reference(kind, p, shape_a, shape_b):
    a, b = _features(2, shape_a), _features(3, shape_b)
    out = elite.feature_distance(torch.from_numpy(a), torch.from_numpy(b), kind, p=p)
    assert out.shape == (5,) and out.dtype == torch.float32
    ref = {
        "ln_norm": lambda: _ref_ln_norm(a, b, p),
        "cos_dist": lambda: _ref_cos_dist(a, b),
        "kl_div": lambda: _ref_kl_div(a, b),
    }[kind]()
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-5, atol=1e-5)


def test_cos_dist_identical_opposite_and_zero():
    a = torch.from_numpy(_features(4, (5, 3, 7)))
    np.testing.assert_allclose(elite.feature_distance(a, a, "cos_dist").numpy(), 0.0, atol=1e-6)
    np.testing.assert_allclose(elite.feature_distance(a, -a, "cos_dist").numpy(), 2.0, atol=1e-6)
    zero = torch.zeros(2, 3, 7)
    out = elite.feature_distance(zero, zero, "cos_dist")
    assert torch.isfinite(out).all()


def test_kl_div_identical_is_zero_and_nonnegative():
    a = torch.from_numpy(_features(5, (5, 3, 7)))
    b = torch.from_numpy(_features(6, (5, 3, 7)))
    np.testing.assert_allclose(elite.feature_distance(a, a, "kl_div").numpy(), 0.0, atol=1e-6)
    assert (elite.feature_distance(a, b, "kl_div") >= 0).all()
    assert (elite.feature_distance(b, a, "kl_div") >= 0).all()


def test_distance_half_precision_inputs_compute_in_float32():
    a = torch.from_numpy(_features(7, (5, 3, 7)))
    b = torch.from_numpy(_features(8, (5, 3, 7)))
    for kind in elite.DISTANCES:
        full = elite.feature_distance(a.to(torch.bfloat16).float(), b.to(torch.bfloat16).float(), kind)
        half = elite.feature_distance(a.to(torch.bfloat16), b.to(torch.bfloat16), kind)
        assert half.dtype == torch.float32
        torch.testing.assert_close(half, full)


def test_distance_errors():
    a = torch.zeros(2, 3, 4)
    with pytest.raises(ValueError, match="ln_norm"):
        elite.feature_distance(a, a, "l2")
    with pytest.raises(ValueError):
        elite.feature_distance(a, a, "ln_norm", p=0.5)
    with pytest.raises(ValueError):
        elite.feature_distance(torch.zeros(3, 4), torch.zeros(3, 4), "ln_norm")
    assert elite.DISTANCES == ("ln_norm", "cos_dist", "kl_div")


# ---- annealing, pool, insertion ----------------------------------------------------------------------------


def test_annealed_lambda():
    # lambda0 = 4 over alfa * decay_steps = 0.5 * 1000 = 500 calls
    assert elite.annealed_lambda(0, 4.0, 0.5, 1000) == 4.0
    assert elite.annealed_lambda(250, 4.0, 0.5, 1000) == pytest.approx(2.5)
    assert elite.annealed_lambda(500, 4.0, 0.5, 1000) == pytest.approx(1.0)
    assert elite.annealed_lambda(10_000, 4.0, 0.5, 1000) == 1.0
    assert elite.annealed_lambda(10, 1.0, 0.5, 1000) == 1.0
    assert elite.annealed_lambda(123, 3.0, 0.0, 1000) == 3.0
    assert elite.annealed_lambda(123, 3.0, 1.0, 0) == 3.0
    with pytest.raises(ValueError):
        elite.annealed_lambda(0, 0.5, 1.0, 100)


def test_pool_size():
    assert elite.pool_size(1.0, 8, 100) == 8
    assert elite.pool_size(2.5, 8, 100) == 20
    assert elite.pool_size(2.5, 8, 10) == 10
    assert elite.pool_size(1.1, 3, 100) == 3
    assert elite.pool_size(2.3, 100, 1000) == 230  # 2.3 * 100 is 229.99999999999997 in floats
    assert elite.pool_size(1.0, 8, 5) == 5
    assert elite.pool_size(0.5, 8, 100) == 8


def test_draw_pool():
    population = np.arange(100, 150, dtype=np.int64)
    a = elite.draw_pool(np.random.default_rng(9), population, 20)
    b = elite.draw_pool(np.random.default_rng(9), population, 20)
    np.testing.assert_array_equal(a, b)
    assert len(a) == 20 and len(np.unique(a)) == 20 and np.isin(a, population).all()
    everything = elite.draw_pool(np.random.default_rng(9), population, 500)
    np.testing.assert_array_equal(np.sort(everything), population)
    assert len(elite.draw_pool(np.random.default_rng(9), population, 0)) == 0


def test_draw_pool_is_roughly_uniform():
    rng = np.random.default_rng(10)
    population = np.arange(10)
    hits = np.zeros(10)
    for _ in range(2000):
        hits[elite.draw_pool(rng, population, 3)] += 1
    assert np.all(np.abs(hits - 600) < 100)


def test_insertion_victims():
    distances = np.array([0.2, 0.9, 0.5, 0.9, 0.1])
    np.testing.assert_array_equal(elite.insertion_victims(distances, 3), [1, 3, 2])
    np.testing.assert_array_equal(elite.insertion_victims(distances, 5), [1, 3, 2, 0, 4])
    out = elite.insertion_victims(distances, 0)
    assert out.shape == (0,) and out.dtype == np.int64
    with pytest.raises(ValueError):
        elite.insertion_victims(distances, 6)
