"""Pair moves for measured cells (privinfer.lattice.measured) against exact answers.

The target on a tiny problem -- 2 units x 2 cells, total 7 invariant, every cell, unit total
and the total measured with discrete Gaussian noise, a Dirichlet-multinomial prior per unit --
is enumerated over its whole fibre (120 points) and compared with the kernel's draws.
"""

import itertools

import numpy as np
import pytest
import scipy.sparse as sp
from scipy import special, stats

from gof import pooled_chi2_pvalue
from privinfer.lattice import SPREAD, MeasuredPairs, measured_pair_sweeps, rounded_normal_logmass

TOTAL = 7
UNIT = np.array([0, 0, 1, 1])
# rows: the four cells, the two unit totals, the total
B = sp.csr_matrix(np.array([[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1],
                            [1, 1, 0, 0], [0, 0, 1, 1], [1, 1, 1, 1]], dtype=float))
SIGMA = np.array([1.5, 1.5, 1.1, 2.0, 2.0, 2.5, 3.0])
Y = np.array([3.0, 0.0, 2.0, 1.0, 2.0, 4.0, 7.0])
ALPHA = np.array([0.7, 1.8, 2.5, 0.4])
# partner families: the cells of a unit, the same cell of the two units, the invariant's group
FAMILIES = [(UNIT, 1.0), (np.array([0, 1, 0, 1]), 1.0), (np.zeros(4, dtype=np.int64), 1.0)]


def fibre():
    return np.array([x for x in itertools.product(range(TOTAL + 1), repeat=4) if sum(x) == TOTAL])


def measured_law(X, b, y, sigma, alpha=None, unit=None):
    """The target over the points ``X``, written out independently of the kernel: Gaussian
    measurement terms of the rows of ``b`` and, with ``alpha``, the Dirichlet-multinomial log pmf
    of each unit of ``unit`` given its total (the totals flat)."""
    logp = -np.sum((y - X @ np.asarray(b).T) ** 2 / (2 * sigma**2), axis=1)
    if alpha is not None:
        for u in np.unique(unit):
            cells = unit == u
            a, xu = alpha[cells], X[:, cells]
            N, k = xu.sum(1), a.sum()
            logp += (special.gammaln(N + 1) + special.gammaln(k) - special.gammaln(N + k)
                     + np.sum(special.gammaln(xu + a) - special.gammaln(a) - special.gammaln(xu + 1), axis=1))
    p = np.exp(logp - logp.max())
    return p / p.sum()


def exact_law(prior=True):
    """The tiny problem's target over its fibre (:func:`measured_law`)."""
    X = fibre()
    return X, measured_law(X, B.toarray(), Y, SIGMA, ALPHA if prior else None, UNIT)


def moved_exact_draws(rng, X, p, y, pairs, alpha, n=20_000, sweeps=1):
    """``n`` exact draws from the law ``p`` over the points ``X``, each moved by ``sweeps``
    sweeps of the kernel, every moved state checked to keep its fibre (the sums of its point,
    no negative cell) and its residuals: the Pearson chi-square p-value of the moved draws
    against ``p`` (cells pooled to expected count >= 5) and the fraction of proposed moves made."""
    where = index_of(X)
    counts, moved, proposed = np.zeros(len(X)), 0, 0
    for k in rng.choice(len(X), size=n, p=p):
        x, u, c = measured_pair_sweeps(rng, X[k].astype(np.int64).copy(), y, pairs, alpha=alpha, sweeps=sweeps)
        assert x.sum() == X[k].sum() and x.min() >= 0
        np.testing.assert_allclose(u, y - pairs.B @ x)
        counts[where[tuple(x)]] += 1
        moved, proposed = moved + c.moved, proposed + c.proposed
    return pooled_chi2_pvalue(counts, n * p), moved / proposed


def index_of(X):
    return {tuple(x): k for k, x in enumerate(X)}


def test_rounded_normal_mass_is_exact():
    # against differences of scipy's log normal CDF (accurate in both tails), from the centre
    # to 30 standard deviations out, and the masses sum to one over the integers
    for c, s in [(0.3, 0.7), (-4.2, 2.5), (10.5, 0.2)]:
        v = np.arange(np.floor(c - 30 * s), np.ceil(c + 30 * s) + 1)
        a, b = (v - 0.5 - c) / s, (v + 0.5 - c) / s
        with np.errstate(divide="ignore"):  # the far tails underflow to -inf (then skipped)
            ref = np.where(b <= 0, special.log_ndtr(b) + np.log1p(-np.exp(special.log_ndtr(a) - special.log_ndtr(b))),
                           special.log_ndtr(-a) + np.log1p(-np.exp(special.log_ndtr(-b) - special.log_ndtr(-a))))
        got = rounded_normal_logmass(v, c, s)
        finite = np.isfinite(ref)
        np.testing.assert_allclose(got[finite], ref[finite], rtol=1e-9)
        assert abs(np.exp(got).sum() - 1.0) < 1e-12


def test_log_target_matches_the_written_out_law():
    pairs = MeasuredPairs(B, SIGMA, FAMILIES, unit=UNIT)
    X, p = exact_law()
    lt = np.array([pairs.log_target(x, Y, ALPHA) for x in X])
    q = np.exp(lt - lt.max())
    np.testing.assert_allclose(q / q.sum(), p, rtol=1e-10)


@pytest.mark.parametrize("prior", [True, False])
def test_kernel_leaves_the_target_invariant(prior):
    # exact draws from the target, each moved by 2 sweeps of the kernel: if the kernel keeps the
    # target, the moved states are independent exact draws again.  Pearson chi-square over the
    # fibre points (cells pooled to expected count >= 5), level 0.001: fails by chance once in
    # a thousand seeds, and catches a wrong acceptance ratio (the moved law drifts toward the
    # kernel's own stationary law).
    X, p = exact_law(prior)
    pairs = MeasuredPairs(B, SIGMA, FAMILIES, unit=UNIT if prior else None)
    pvalue, _ = moved_exact_draws(np.random.default_rng(11), X, p, Y, pairs, ALPHA if prior else None, sweeps=2)
    assert pvalue > 1e-3


def test_one_long_chain_reaches_the_target_from_a_corner():
    # irreducibility and convergence: one chain from all mass in one cell; the long-run
    # frequency of each cell value vs the exact marginal, |z| with the batch-means standard
    # error (50 batches), Bonferroni over the (cell, value) pairs at family-wise level 0.001
    rng = np.random.default_rng(5)
    X, p = exact_law()
    pairs = MeasuredPairs(B, SIGMA, FAMILIES, unit=UNIT)
    x = np.array([TOTAL, 0, 0, 0], dtype=np.int64)
    draws = []
    u = None
    for _ in range(40_000):
        x, u, _ = measured_pair_sweeps(rng, x, Y, pairs, alpha=ALPHA, u=u, sweeps=1)
        draws.append(x.copy())
    draws = np.array(draws[1000:])
    tests = []
    for cell in range(4):
        for v in range(TOTAL + 1):
            exact = p[X[:, cell] == v].sum()
            if exact < 0.01:
                continue
            ind = (draws[:, cell] == v).astype(float)
            batches = ind[: len(ind) // 50 * 50].reshape(50, -1).mean(1)
            se = batches.std(ddof=1) / np.sqrt(50)
            tests.append((ind.mean() - exact) / se)
    z_crit = stats.norm.isf(0.001 / (2 * len(tests)))
    assert np.max(np.abs(tests)) < z_crit, (np.max(np.abs(tests)), z_crit)


def test_loosely_measured_cells_move_by_their_prior_along_the_line():
    # one unit of three cells (9 people), each cell measured with sd 200: along a line the
    # measurement's Gaussian alone has sd 1.3 x 200 / sqrt(2) = 184, so one of its proposals
    # lands in [0, 9] with probability under 10 / (184 sqrt(2 pi)) = 0.022 and under 3% of the
    # moves would be made (0.8% before the prior entered the proposal); the beta-binomial's
    # Gaussian along the line (module docstring) puts them where the prior is (0.60 made).  The
    # moves must still keep the target: exact draws moved by one sweep pass the chi-square test
    # against the enumerated law (as above, level 0.001).
    sigma, y, alpha = np.full(3, 200.0), np.array([5.0, -40.0, 100.0]), np.array([4.0, 2.0, 6.0])
    pairs = MeasuredPairs(sp.csr_matrix(np.eye(3)), sigma, [(np.zeros(3, dtype=np.int64), 1.0)],
                          unit=np.zeros(3, dtype=np.int64))
    X = np.array([x for x in itertools.product(range(10), repeat=3) if sum(x) == 9])
    p = measured_law(X, np.eye(3), y, sigma, alpha, np.zeros(3, dtype=np.int64))
    pvalue, moved = moved_exact_draws(np.random.default_rng(21), X, p, y, pairs, alpha)
    assert pvalue > 1e-3
    assert moved > 0.3


def test_loosely_measured_cells_of_two_units_move_by_their_prior():
    # the same cell of two units (2 cells each) swapped along x_0 + x_2 = 6 and x_1 + x_3 = 5,
    # each cell measured with sd 200: the measurement's Gaussian alone would move under 3% of
    # the pairs (previous test); each cell's negative binomial given the rest of its unit
    # (module docstring) centres the proposal (0.47 made).  The unit totals move, so the
    # flat-total Dirichlet-multinomial's normalizers enter the exact law; chi-square as above.
    sigma, y, alpha = np.full(4, 200.0), np.array([50.0, -30.0, 0.0, 80.0]), np.array([4.0, 2.0, 3.0, 5.0])
    unit = np.array([0, 0, 1, 1])
    pairs = MeasuredPairs(sp.csr_matrix(np.eye(4)), sigma, [(np.array([0, 1, 0, 1]), 1.0)], unit=unit)
    X = np.array([(a, c, 6 - a, 5 - c) for a in range(7) for c in range(6)])
    pvalue, moved = moved_exact_draws(np.random.default_rng(22), X, measured_law(X, np.eye(4), y, sigma, alpha, unit),
                                      y, pairs, alpha)
    assert pvalue > 1e-3
    assert moved > 0.2


def test_moves_keep_the_fibre_and_residuals_exactly():
    rng = np.random.default_rng(3)
    pairs = MeasuredPairs(B, SIGMA, FAMILIES, unit=UNIT)
    x = np.array([2, 2, 2, 1], dtype=np.int64)
    x, u, counts = measured_pair_sweeps(rng, x, Y, pairs, alpha=ALPHA, sweeps=500)
    assert x.sum() == TOTAL and x.min() >= 0
    np.testing.assert_allclose(u, Y - B @ x, atol=1e-9)
    assert counts.proposed == 2000 and 0 < counts.moved <= counts.accepted <= counts.proposed


def test_seeded_runs_reproduce():
    pairs = MeasuredPairs(B, SIGMA, FAMILIES, unit=UNIT)
    runs = []
    for _ in range(2):
        x = np.array([2, 2, 2, 1], dtype=np.int64)
        runs.append(measured_pair_sweeps(np.random.default_rng(9), x, Y, pairs, alpha=ALPHA, sweeps=50)[0])
    np.testing.assert_array_equal(*runs)


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="sigma"):
        MeasuredPairs(B, -SIGMA, FAMILIES)
    with pytest.raises(ValueError, match="family"):
        MeasuredPairs(B, SIGMA, [])
    with pytest.raises(ValueError, match="weights"):
        MeasuredPairs(B, SIGMA, [(UNIT, 0.0)])
    with pytest.raises(ValueError, match="one group code per cell"):
        MeasuredPairs(B, SIGMA, [(UNIT[:3], 1.0)])
    pairs = MeasuredPairs(B, SIGMA, FAMILIES, unit=UNIT)
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="int64"):
        measured_pair_sweeps(rng, np.array([2.0, 2, 2, 1]), Y, pairs, alpha=ALPHA)
    with pytest.raises(ValueError, match="alpha"):
        measured_pair_sweeps(rng, np.array([2, 2, 2, 1]), Y, pairs, alpha=-ALPHA)
    with pytest.raises(ValueError, match="spread"):
        measured_pair_sweeps(rng, np.array([2, 2, 2, 1]), Y, pairs, alpha=ALPHA, spread=0.0)
    assert SPREAD > 0


@pytest.mark.parametrize("seed", range(4))
def test_moving_rows_leave_out_exactly_the_sums_a_block_keeping_move_cannot_change(seed):
    from privinfer.lattice import MeasurementRows
    rng = np.random.default_rng(seed)
    n, m = 24, 30
    blocks = rng.permutation(n)[:20].reshape(5, 4)          # 4 cells outside every block
    Bd = (rng.random((m, n)) < 0.3).astype(float)
    Bd[0] = 1.0                                             # the total
    for r in range(1, 6):                                   # sums of whole blocks (and one block plus a loose cell)
        Bd[r] = 0.0
        Bd[r, blocks[rng.choice(5, size=2, replace=False)].ravel()] = 1.0
    Bd[5, np.setdiff1d(np.arange(n), blocks)[0]] = 1.0
    rows = MeasurementRows(sp.csr_matrix(Bd), np.ones(m))
    row_ptr, kept = rows.moving_rows(blocks)
    block_of = np.full(n, -1)
    block_of[blocks.ravel()] = np.repeat(np.arange(5), 4)
    for c in range(n):
        want = [r for r in np.flatnonzero(Bd[:, c]) if block_of[c] < 0 or not Bd[r, blocks[block_of[c]]].all()]
        np.testing.assert_array_equal(kept[row_ptr[c]:row_ptr[c + 1]], want)
    # a move keeping every block's total: the left-out sums do not change, so residuals updated
    # through the kept rows alone stay exact
    x = rng.integers(0, 9, n)
    y = rng.normal(0, 5, m).round()
    res = rows.residuals(x, y)
    x2 = x.copy()
    for b in blocks:
        x2[b] += rng.multinomial(6, np.ones(4) / 4) - rng.multinomial(6, np.ones(4) / 4)
    for c in range(n):
        res[kept[row_ptr[c]:row_ptr[c + 1]]] -= x2[c] - x[c]
    np.testing.assert_array_equal(res, rows.residuals(x2, y))
    with pytest.raises(ValueError, match="disjoint"):
        rows.moving_rows(np.array([[0, 1], [1, 2]]))
    with pytest.raises(ValueError, match="cell indices"):
        rows.moving_rows(np.array([[0, n]]))
