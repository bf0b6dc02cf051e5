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
# n=3: windows of floor(8 / 3) = 2: [1, 3] | [6, 4] | [7, 0], and [5, 2] is left out.
A_N3 = {
    1: [1, 3, 6],
    2: [1, 6, 7],  # every 2nd of the distance order
    3: [4, 7, 2],
    4: [3, 4, 7],  # the least sampled of each window
}
A_N8 = {  # n == m: windows of one, so 2 and 4 are the distance order
    1: [1, 3, 6, 4, 7, 0, 5, 2],
    2: [1, 3, 6, 4, 7, 0, 5, 2],
    3: [4, 7, 2, 3, 5, 6, 0, 1],
    4: [1, 3, 6, 4, 7, 0, 5, 2],
}

# Pool B (m=6). Positions:        0    1    2    3    4    5
B_DIST = np.array([0.4, 0.4, 0.1, 0.8, 0.4, 0.6])
B_COUNT = np.array([1, 2, 3, 0, 0, 1])
# Stable distance order: [2, 0, 1, 4, 5, 3]; n=2 windows of 3: [2, 0, 1] | [4, 5, 3].
# (count, distance, position) order: [4, 3, 0, 5, 1, 2].
B_N2 = {
    1: [2, 0],  # 0, 1 and 4 tie at 0.4 -> lowest position 0
    2: [2, 4],
    3: [4, 3],
    4: [0, 4],  # window 2: 4 and 3 both unsampled -> lower distance 4 beats lower position 3
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


# ---- the reference's selection, written out from its definition --------------------------------------------


def reference_pick(strategy, bucket, distance, count, n):
    """The reference platform's pick from a drawn bucket of unit ids (repeats allowed), written from its
    definition: the distinct ids, in the order they were first drawn, are sorted by distance (a stable sort,
    so ties keep draw order); w = floor(m / n) over the m distinct ids.
    1: walk the sorted ids, taking each as often as it was drawn, until n are taken.
    2: take the ids at sorted positions 0, w, 2w, ... until n are taken.
    3: for count levels j from the lowest up, take the sorted ids whose count is j, until n are taken.
    4: walk the sorted ids in windows of w; at each window's end take its least counted id (the first such
       in the window), until n are taken.
    """
    drawn = {}
    for unit in bucket:
        drawn[unit] = drawn.get(unit, 0) + 1
    ids = sorted(drawn, key=lambda u: distance[u])
    m, taken = len(ids), []
    w = m // n
    if strategy == 1:
        for unit in ids:
            for _ in range(drawn[unit]):
                if len(taken) < n:
                    taken.append(unit)
    elif strategy == 2:
        for i, unit in enumerate(ids):
            if i % w == 0 and len(taken) < n:
                taken.append(unit)
    elif strategy == 3:
        j = min(count[u] for u in ids)
        while len(taken) < n:
            for unit in ids:
                if count[unit] == j and len(taken) < n:
                    taken.append(unit)
            j += 1
    else:
        best = None
        for i, unit in enumerate(ids):
            if best is None or count[unit] < count[best]:
                best = unit
            if i % w == w - 1:
                if len(taken) < n:
                    taken.append(best)
                best = None
    return taken


def _slow_distance(kind, stored, current, p=2.0):
    """One unit's distance from the definitions: the p-norm of the flattened difference; 1 - the cosine of
    the flattened [K, F] matrices (the reference sorts the cosine itself: zrl's documented fix); the sum
    over steps of KL(softmax(current) || softmax(stored))."""
    x, y = stored.reshape(-1).astype(np.float64), current.reshape(-1).astype(np.float64)
    if kind == "ln_norm":
        return float(np.sum(np.abs(x - y) ** p) ** (1.0 / p))
    if kind == "cos_dist":
        return 1.0 - float(x @ y / max(np.linalg.norm(x) * np.linalg.norm(y), 1e-6))
    total = 0.0
    for s_k, c_k in zip(stored.astype(np.float64), current.astype(np.float64)):
        tgt = np.exp(c_k - c_k.max()) / np.exp(c_k - c_k.max()).sum()
        beh = np.exp(s_k - s_k.max()) / np.exp(s_k - s_k.max()).sum()
        total += float(np.sum(tgt * np.log(tgt / beh)))
    return total


def _case(seed, units, n, bucket_size, replace):
    """Stored and current features [K=3, F=4] per unit, with some units copies of others (exact ties), sample
    counts from 1 to 3 (many ties), and one drawn bucket."""
    rng = np.random.default_rng(seed)
    stored = rng.normal(size=(units, 3, 4)).astype(np.float32)
    current = rng.normal(size=(units, 3, 4)).astype(np.float32)
    for dup in rng.choice(units, size=units // 4, replace=False):
        src = int(rng.integers(units))
        stored[dup], current[dup] = stored[src], current[src]
    counts = rng.integers(1, 4, size=units)
    bucket = rng.choice(units, size=bucket_size, replace=replace)
    return stored, current, counts, bucket


@pytest.mark.parametrize("kind", elite.DISTANCES)
@pytest.mark.parametrize("strategy", elite.STRATEGIES)
def test_select_matches_the_written_out_reference(strategy, kind):
    """zrl's distance and select on the distinct candidates, in draw order, against the reference's pick from
    the bucket as drawn: seeded buckets with repeats (the reference draws with replacement), exact distance
    ties and count ties, and lambda from 1 to 6."""
    compared = 0
    for seed in range(40):
        n = int(np.random.default_rng(1000 + seed).integers(1, 9))
        lam = int(np.random.default_rng(2000 + seed).integers(1, 7))
        replace = seed % 2 == 0
        units = 3 * lam * n if not replace else max(lam * n, 4)
        stored, current, counts, bucket = _case(seed, units, n, lam * n, replace)
        distinct = np.array(list(dict.fromkeys(bucket.tolist())))
        if len(distinct) < n:
            continue  # the reference divides by zero (2, 4) or repeats units (1): zrl's m < n rule is tested below
        if strategy == 1 and len(distinct) < len(bucket):
            continue  # with repeats the reference takes a unit once per draw; zrl's pool has no repeats
        distance = {int(u): _slow_distance(kind, stored[u], current[u]) for u in distinct}
        ours = elite.feature_distance(torch.from_numpy(stored[distinct]), torch.from_numpy(current[distinct]), kind)
        np.testing.assert_allclose(ours.numpy(), [distance[int(u)] for u in distinct], rtol=1e-5, atol=1e-5)
        picked = distinct[elite.select(strategy, ours.numpy(), counts[distinct], n)]
        assert picked.tolist() == reference_pick(strategy, bucket.tolist(), distance, counts, n), (seed, n, lam)
        compared += 1
    assert compared >= 15


def test_windows_leave_out_the_tail_as_the_reference_does():
    """m = 11, n = 4: w = 2, so strategies 2 and 4 never take the last 3 of the distance order."""
    distances = np.arange(11, dtype=np.float64)[::-1].copy()  # position 10 is closest
    counts = np.array([0, 0, 0, 5, 5, 5, 5, 5, 5, 5, 5])
    np.testing.assert_array_equal(elite.select(2, distances, counts, 4), [10, 8, 6, 4])
    np.testing.assert_array_equal(elite.select(4, distances, counts, 4), [10, 8, 6, 4])  # 0-2 are left out


# ---- distances -------------------------------------------------------------------------------------------


def _ref_ln_norm(a, b, p):
    a, b = np.broadcast_arrays(a, b)
    return np.array([np.sum(np.abs(a[i] - b[i]) ** p) ** (1.0 / p) for i in range(a.shape[0])])


def _ref_cos_dist(a, b):
    a, b = np.broadcast_arrays(a, b)
    return np.array([_slow_distance("cos_dist", a[i], b[i]) for i in range(a.shape[0])])


def _ref_kl_div(a, b):
    a, b = np.broadcast_arrays(a, b)
    return np.array([_slow_distance("kl_div", a[i], b[i]) for i in range(a.shape[0])])


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


def test_kl_div_puts_the_current_policy_first():
    """KL(current || stored), the reference's kl_divergence(target, behaviour): not symmetric, so the order shows."""
    stored = torch.tensor([[[0.0, 0.0, 0.0]]])
    current = torch.tensor([[[3.0, 0.0, 0.0]]])
    p = torch.softmax(current[0, 0], 0)
    q = torch.softmax(stored[0, 0], 0)
    forward = float((p * (p / q).log()).sum())
    backward = float((q * (q / p).log()).sum())
    assert abs(forward - backward) > 0.1
    assert float(elite.feature_distance(stored, current, "kl_div")[0]) == pytest.approx(forward, rel=1e-5)


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
    # lambda0 = 4 over alfa * decay_steps = 0.5 * 1000 = 500 calls; each call lowers lambda before it uses it
    assert elite.annealed_lambda(0, 4.0, 0.5, 1000) == pytest.approx(4.0 - 3.0 / 500)
    assert elite.annealed_lambda(249, 4.0, 0.5, 1000) == pytest.approx(2.5)
    assert elite.annealed_lambda(498, 4.0, 0.5, 1000) == pytest.approx(1.006)
    assert elite.annealed_lambda(520, 4.0, 0.5, 1000) == 1.0
    assert elite.annealed_lambda(10_000, 4.0, 0.5, 1000) == 1.0
    assert elite.annealed_lambda(10, 1.0, 0.5, 1000) == 1.0
    assert elite.annealed_lambda(123, 3.0, 0.0, 1000) == 3.0
    assert elite.annealed_lambda(123, 3.0, 1.0, 0) == 3.0
    with pytest.raises(ValueError):
        elite.annealed_lambda(0, 0.5, 1.0, 100)


@pytest.mark.parametrize(
    "lam0, alfa, steps, n", [(6.0, 2.0, 37, 16), (6.0, 2.0, 1000, 16), (4.0, 1.0, 333, 8), (3.0, 0.7, 91, 5)]
)
def test_annealed_lambda_is_the_reference_running_decrement_exactly(lam0, alfa, steps, n):
    """The reference keeps lambda in a variable that each sample call lowers by (lambda0 - 1) / (steps * alfa)
    before it draws int(lambda * n) candidates, and sets to 1 once it falls below 1: the same floats here, as the
    replay keeps them running and as annealed_lambda rebuilds them for a resumed run."""
    lam, factor = lam0, (lam0 - 1) / (steps * alfa)
    running, decrement = lam0, elite.lambda_decrement(lam0, alfa, steps)
    horizon = int(steps * alfa) + 20
    for call in range(horizon):
        lam -= factor
        if lam < 1:
            lam = 1
        running = elite.next_lambda(running, decrement)
        assert running == lam, call
        if call % 7 == 0 or call > horizon - 25:
            assert elite.annealed_lambda(call, lam0, alfa, steps) == lam, call
        assert elite.pool_size(running, n, 10**6) == max(n, int(lam * n)), call
    assert lam == 1


def test_a_resumed_replay_goes_on_with_the_lambda_its_calls_left():
    """FeatureReplay.resume(k) (a resumed run's sample calls) and then one call: the lambda of call k, the same
    float a replay that made those k calls itself holds."""
    from zrl.replay.sampled import FeatureReplay

    def replay():
        return FeatureReplay(
            "elite", 64, 4, 1, np.random.default_rng(0), unroll_length=5, feature_size=3, scorer=None,
            lambda_batch_multiplier=6.0, alfa_annealing_factor=2.0, decay_steps=50,
        )  # fmt: skip

    ran, resumed = replay(), replay()
    for _ in range(37):
        ran.sample(lambda w, f: np.ones(len(w), bool))  # an empty store: lambda moves, nothing is drawn
    resumed.resume(37)
    assert (resumed.sample_calls, resumed.lam) == (ran.sample_calls, ran.lam)
    assert resumed.lam == elite.annealed_lambda(36, 6.0, 2.0, 50)
    ran.sample(lambda w, f: np.ones(len(w), bool))
    resumed.sample(lambda w, f: np.ones(len(w), bool))
    assert resumed.lam == ran.lam == elite.annealed_lambda(37, 6.0, 2.0, 50)


def test_pool_size():
    assert elite.pool_size(1.0, 8, 100) == 8
    assert elite.pool_size(2.5, 8, 100) == 20
    assert elite.pool_size(2.5, 8, 10) == 10
    assert elite.pool_size(1.1, 3, 100) == 3
    assert elite.pool_size(2.3, 100, 1000) == 229  # 2.3 * 100 is 229.99999999999997; the reference's int() gives 229
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
