"""TopDown-style baseline: exact projection, exact integer invariants, and its known bias."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import linprog

from privinfer import invariants as I
from privinfer.datasets import spatiotemporal_invariant, synthetic_spatiotemporal
from privinfer.mechanisms import Mechanism
from privinfer.mechanisms.discrete import double_geometric_logpmf
from privinfer.mechanisms.topdown import (
    NonTransparentMechanismError,
    TopDownBaseline,
    controlled_rounding,
    largest_remainder_rounding,
    nonnegative_projection,
    simplex_projection_groups,
)


def assert_is_projection(z, m, inv, t):
    """Variational inequality: z is the projection of m onto the polytope P = {p >= 0, C p = t}
    iff z in P and (m - z).(p - z) <= 0 for all p in P; the max over P of the linear function
    (m - z).p is a linear program, so one LP checks it exactly (tolerance: floating point)."""
    C = inv.matrix.toarray() if hasattr(inv.matrix, "toarray") else inv.matrix
    assert np.all(z >= 0)
    assert np.allclose(C @ z, t, atol=1e-8 * max(1, np.abs(t).max()))
    g = m - z
    res = linprog(-g, A_eq=C, b_eq=t, bounds=(0, None), method="highs")
    assert res.status == 0
    scale = max(1.0, np.abs(m).max(), np.abs(t).max())
    assert -res.fun - g @ z <= 1e-7 * scale * z.size


# ------------------------------------------------------------------- projection
def test_simplex_projection_small_cases():
    # by hand: project (3, 1) onto {z >= 0, z1 + z2 = 2}: (2, 0); onto sum 6: (4, 2)
    codes = np.zeros(2, dtype=int)
    assert np.allclose(simplex_projection_groups([3.0, 1.0], codes, [2.0]), [2.0, 0.0])
    assert np.allclose(simplex_projection_groups([3.0, 1.0], codes, [6.0]), [4.0, 2.0])
    assert np.allclose(simplex_projection_groups([3.0, 1.0], codes, [0.0]), [0.0, 0.0])
    with pytest.raises(I.InfeasibleInvariantError):
        simplex_projection_groups([1.0, 1.0], codes, [-1.0])


def test_projection_is_exact_groups_and_general():
    rng = np.random.default_rng(11)
    labels = np.repeat(np.arange(4), [1, 3, 5, 7])
    inv = I.groups(labels)
    general = I.Invariant(inv.matrix.toarray())  # same constraints, general (dual Newton) path
    assert general.structure == "general"
    for _ in range(10):
        m = rng.normal(1.0, 4.0, labels.size)
        t = rng.integers(0, 12, 4).astype(float)
        z1 = nonnegative_projection(m, inv, t)
        z2 = nonnegative_projection(m, general, t)
        assert_is_projection(z1, m, inv, t)
        assert_is_projection(z2, m, general, t)
        assert np.allclose(z1, z2, atol=1e-8)


def test_projection_margins_and_intersecting():
    rng = np.random.default_rng(5)
    inv = I.margins((4, 5), [(0,), (1,)])  # rank-deficient: 9 rows, rank 8
    x = rng.poisson(1.0, 20)
    t = inv.of(x)
    for _ in range(5):
        m = x + rng.normal(0, 3.0, 20)
        assert_is_projection(nonnegative_projection(m, inv, t), m, inv, t)
    # intersecting subsets (counting invariant)
    cnt = I.counting([[0, 1, 2], [2, 3, 4], [4, 5, 0], [1, 3, 5]], 6)
    x = np.array([0, 2, 1, 0, 5, 1])
    for _ in range(5):
        m = x + rng.normal(0, 2.0, 6)
        assert_is_projection(nonnegative_projection(m, cnt, cnt.of(x)), m, cnt, cnt.of(x))


def test_projection_infeasible_raises():
    cnt = I.counting([[0, 1], [1, 2], [0, 1, 2]], 3)
    with pytest.raises(I.InfeasibleInvariantError):
        nonnegative_projection(np.zeros(3), cnt, np.array([-1.0, 1.0, 0.0]))


# ------------------------------------------------------------------- rounding
def test_largest_remainder_rounding():
    z = np.array([0.4, 1.6, 2.0, 0.5, 0.5, 3.0])
    codes = np.array([0, 0, 0, 1, 1, 1])
    x = largest_remainder_rounding(z, codes, [4, 4], rng=0)
    assert x[:3].tolist() == [0, 2, 2]  # deficit 4 - 3 = 1 goes to the 0.6 remainder
    assert x[3:].sum() == 4 and sorted(x[3:5].tolist()) == [0, 1] and x[5] == 3
    # the tie between the two halves is split fairly: each wins about half the time
    wins = sum(largest_remainder_rounding(z, codes, [4, 4], rng=s)[3] for s in range(400))
    assert abs(wins - 200) < 5 * np.sqrt(400 * 0.25)  # 5 binomial standard deviations


def test_controlled_rounding_keeps_margins_and_is_floor_or_ceiling():
    rng = np.random.default_rng(2)
    inv = I.margins((5, 6), [(0,), (1,)])
    for _ in range(5):
        x = rng.poisson(2.0, 30)
        t = inv.of(x)
        z = nonnegative_projection(x + rng.normal(0, 2.0, 30), inv, t)
        y = controlled_rounding(z, inv, t)
        assert y.dtype == np.int64 and np.all(y >= 0)
        assert np.array_equal(inv.integer_matrix() @ y, t.astype(np.int64))
        assert np.all((y == np.floor(z + 1e-9)) | (y == np.ceil(z - 1e-9)))


# ------------------------------------------------------------------- the mechanism
@pytest.mark.parametrize("noise", ["discrete_gaussian", "double_geometric"])
def test_release_keeps_invariant_nonnegative_integer(noise):
    cases = [
        (I.total(6), np.array([0, 0, 1, 4, 30, 200])),
        (I.groups(np.array([0, 0, 1, 1, 1, 2])), np.array([0, 3, 0, 0, 9, 4])),
        (I.margins((3, 4), [(0,), (1,)]), np.array([0, 1, 0, 5, 2, 0, 0, 1, 7, 3, 0, 0])),
        (I.counting([[0, 1, 2], [2, 3, 4], [4, 5, 0]], 6), np.array([0, 2, 1, 0, 5, 1])),
    ]
    for inv, x in cases:
        mech = TopDownBaseline(inv, noise, scale=2.0)
        assert isinstance(mech, Mechanism) and mech.integer and mech.n == x.size and mech.invariant is inv
        ys = mech.release(np.tile(x, (2, 25, 1)), rng=3)
        assert ys.shape == (2, 25, x.size) and ys.dtype == np.int64
        assert np.all(ys >= 0)
        C = inv.integer_matrix()
        assert np.all(ys.reshape(-1, x.size) @ C.T == C @ x)  # exact, in integers
        assert not np.all(ys == x)  # noise was added


def test_release_spatiotemporal_design():
    x = synthetic_spatiotemporal(rng=4, groups=4, hours=6, buildings=3)
    inv = spatiotemporal_invariant(shape=x.shape)
    y = TopDownBaseline(inv, "discrete_gaussian", scale=1.5).release(x.ravel(), rng=8)
    C = inv.integer_matrix()
    assert np.array_equal(C @ y, C @ x.ravel()) and y.min() >= 0


def test_logp_raises_and_guarantee():
    mech = TopDownBaseline(I.total(3), "double_geometric", scale=2)
    with pytest.raises(NonTransparentMechanismError, match="no exact likelihood"):
        mech.logp(np.array([1, 1, 1]), np.array([1, 1, 1]))
    assert issubclass(NonTransparentMechanismError, NotImplementedError)
    assert mech.transparent is False
    assert mech.guarantee["epsilon"] == pytest.approx(0.5)
    g = TopDownBaseline(I.total(3), "discrete_gaussian", scale=2).guarantee
    assert g["rho"] == pytest.approx(1 / 8)  # Delta^2 / (2 sigma^2)


def test_bad_input():
    with pytest.raises(ValueError, match="noise must be one of"):
        TopDownBaseline(I.total(3), "laplace", scale=1)
    with pytest.raises(ValueError, match="scale is required"):
        TopDownBaseline(I.total(3))
    with pytest.raises(ValueError, match="integer constraint matrix"):
        TopDownBaseline(I.Invariant([[0.5, 1.0, 1.0]]), scale=1)
    mech = TopDownBaseline(I.total(3), scale=1)
    with pytest.raises(ValueError, match="non-negative counts"):
        mech.release(np.array([1, -1, 2]))
    with pytest.raises(ValueError, match="integer values"):
        mech.release(np.array([1.5, 1, 2]))
    with pytest.raises(ValueError, match="shape"):
        mech.release(np.array([1, 2]))


# ------------------------------------------------------------------- bias near zero
def _exact_zero_cell_mean(b, total):
    """E[y_0] for x = (0, total) with the total invariant and double geometric noise of scale b.

    Projection of (m0, m1) onto {z >= 0, z0 + z1 = total} is z0 = clip((m0 - m1 + total)/2, 0,
    total) = clip(D/2, 0, total) with D = e0 - e1.  When D is odd both remainders are 1/2 and
    the unit goes to either cell with probability 1/2, so E[y0 | D] = z0 exactly.  D's pmf is
    the convolution of two double geometric pmfs (window |k| <= 400: tail mass < e^{-400/b})."""
    k = np.arange(-400, 401)
    p = np.exp(double_geometric_logpmf(k, b))
    pd = np.convolve(p, p)  # support -800..800
    d = np.arange(-800, 801)
    return float(np.sum(pd * np.clip(d / 2.0, 0, total)))


@pytest.mark.slow
def test_bias_at_zero_cell_matches_exact_value():
    b, total, N = 2.0, 10, 6000
    mech = TopDownBaseline(I.total(2), "double_geometric", scale=b)
    y0 = mech.release(np.tile([0, total], (N, 1)), rng=20261121)[:, 0]
    exact = _exact_zero_cell_mean(b, total)
    se = y0.std(ddof=1) / np.sqrt(N)
    # the bias exists: the exact mean is far above 0 and the sample mean is > 0 by 5 SE
    assert exact > 0.5
    assert y0.mean() > 5 * se
    # and it is the bias the exact computation predicts (5 standard errors)
    assert abs(y0.mean() - exact) < 5 * se
    # far from zero the same mechanism is unbiased: x = (50, 50) never clips (P < 1e-10)
    y = mech.release(np.tile([50, 50], (N, 1)), rng=7)[:, 0]
    assert abs(y.mean() - 50) < 5 * y.std(ddof=1) / np.sqrt(N)


@pytest.mark.slow
def test_bias_discrete_gaussian_county_like():
    # counties with one empty county; the state total is kept.  Zero cells can only move up,
    # and the large county pays for it: its mean error is negative.
    x = np.array([0, 2, 40, 900])
    N = 3000
    ys = TopDownBaseline(I.total(4), "discrete_gaussian", scale=3.0).release(np.tile(x, (N, 1)), rng=99)
    err = ys - x
    se = err.std(axis=0, ddof=1) / np.sqrt(N)
    assert err[:, 0].mean() > 5 * se[0]  # zero cell: positive bias, 5 SE
    assert err[:, 3].mean() < -5 * se[3]  # large cell: negative bias, 5 SE
    assert np.all(ys.sum(axis=1) == x.sum())
