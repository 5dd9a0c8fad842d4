"""Framework-free posterior lattice kernels against exact enumeration (no PyMC)."""

import numpy as np
from scipy import stats
from scipy.special import gammaln, logsumexp, xlogy

from privinfer import invariants as I
from privinfer.lattice import (
    CellSum,
    LatticeMoves,
    LocalLogDensity,
    PairMoves,
    direction_gibbs,
    init_state,
    multi_direction_jump,
    nonzero_double_geometric,
    sweep,
)


def poisson_density(mu):
    """Independent Poisson(mu_i) counts (restricted to a fibre by the moves): one separable
    CellSum term, log p(v) = v log mu - mu - log v! (scipy's ``poisson.logpmf`` written out:
    the same values at a fraction of its per-call overhead, checked below)."""
    mu = np.asarray(mu, float)
    return LocalLogDensity([CellSum(lambda idx, v: xlogy(v, mu[idx]) - mu[idx] - gammaln(v + 1.0))])


def test_poisson_density_is_the_poisson_logpmf():
    mu = np.array([1.0, 2.5, 0.7, 3.0])
    v = np.arange(12)[:, None] + np.zeros(4, dtype=np.int64)
    np.testing.assert_allclose(poisson_density(mu).terms[0].cell(np.arange(4), v),
                               stats.poisson.logpmf(v, mu), rtol=1e-12, atol=1e-12)


def _exact(points, mu):
    lw = stats.poisson.logpmf(points, mu).sum(axis=1)
    return np.exp(lw - logsumexp(lw))


def _compositions(total, n):
    if n == 1:
        return [[total]]
    return [[k] + rest for k in range(total + 1) for rest in _compositions(total - k, n - 1)]


def _chi2_pvalue(samples, points, p):
    index = {tuple(v): i for i, v in enumerate(points.tolist())}
    counts = np.bincount([index[tuple(s)] for s in samples.tolist()], minlength=len(points))
    e = p * len(samples)
    keep = e >= 5
    obs = np.append(counts[keep], counts[~keep].sum())
    exp = np.append(e[keep], e[~keep].sum())
    return stats.chisquare(obs, exp).pvalue


def _run(kernel, x0, moves, density, n_iter, thin, rng):
    """One chain from x0; ``kernel(rng, state) -> state``; every ``thin``-th state's x."""
    st = init_state(np.asarray(x0), moves, density)
    out = []
    for it in range(n_iter):
        st = kernel(rng, st)
        if it % thin == 0:
            out.append(st.e[0].copy())
    return np.array(out)


def test_sweep_and_multi_jump_sample_the_exact_law():
    # 4 cells, total 7: 120 fibre points.  Thinning by 5 sweeps (each with a multi jump)
    # leaves draws whose lag-1 autocorrelation is negligible here; chi-square at alpha 1e-3.
    mu = np.array([1.0, 2.5, 0.7, 3.0])
    inv = I.total(4)
    basis = LatticeMoves.from_matrix(inv.lattice_basis())
    moves = PairMoves(np.zeros(4))
    target = poisson_density(mu)
    pts = np.array(_compositions(7, 4))
    p = _exact(pts, mu)

    def kernel(rng, st):
        st, _ = sweep(rng, st, moves, target, 1.0, "random", lower=0, nonzero=True)
        st, _ = multi_direction_jump(rng, st, basis, target, 0.4, lower=0)
        return st

    draws = _run(kernel, [7, 0, 0, 0], moves, target, 20000, 5, np.random.default_rng(0))
    assert np.all(draws.sum(axis=1) == 7) and np.all(draws >= 0)
    assert _chi2_pvalue(draws, pts, p) > 1e-3


def test_direction_gibbs_samples_the_exact_law_on_a_table():
    # 2 x 3 table, fixed margins (rows 4, 3; columns 2, 3, 2): heat-bath moves along the
    # 2 x 2 basis plus multi-direction jumps; chi-square at alpha 1e-3 after thinning by 3
    inv = I.margins((2, 3), [(0,), (1,)])
    x0 = np.array([2, 1, 1, 0, 2, 1])
    t = inv.of(x0)
    B = LatticeMoves.from_matrix(inv.lattice_basis())
    mu = np.array([1.0, 2.0, 0.5, 1.5, 1.0, 2.0])
    target = poisson_density(mu)
    # enumerate the fibre
    pts = []
    for a in range(3):
        for b in range(4):
            c = 4 - a - b
            if 0 <= c <= 2:
                row2 = np.array([2 - a, 3 - b, 2 - c])
                if np.all(row2 >= 0):
                    pts.append([a, b, c, *row2])
    pts = np.array(pts)
    assert np.all(inv.of(pts) == t)
    p = _exact(pts, mu)

    def kernel(rng, st):
        for j in range(B.k):
            idx, vals = B.move(j)
            st, info = direction_gibbs(rng, st, idx, vals, target, lower=0)
            assert info["exact"]
        st, _ = multi_direction_jump(rng, st, B, target, 0.3, lower=0)
        return st

    draws = _run(kernel, x0, B, target, 15000, 3, np.random.default_rng(1))
    assert np.all(inv.of(draws) == t)
    assert _chi2_pvalue(draws, pts, p) > 1e-3


def test_nonzero_double_geometric_law():
    # P(k) = (1-a)/(2a) a^{|k|} for k != 0; chi-square at alpha 1e-3 on |k| <= 6 (+ tail)
    a = 0.45
    k = nonzero_double_geometric(np.random.default_rng(2), a, (40000,))
    assert not np.any(k == 0)
    ks = np.arange(-6, 7)
    ks = ks[ks != 0]
    pk = (1 - a) / (2 * a) * a ** np.abs(ks)
    obs = np.array([(k == v).sum() for v in ks] + [(np.abs(k) > 6).sum()])
    exp = np.append(pk, 1 - pk.sum()) * len(k)
    assert stats.chisquare(obs, exp).pvalue > 1e-3


def test_batched_pair_sweep_samples_the_exact_law_on_groups():
    # two groups (3 + 2 cells) with totals 5 and 3; batched disjoint transfers only (pairs
    # connect each group's non-negative fibre); chi-square at alpha 1e-3, thinning by 4
    codes = np.array([0, 1, 0, 1, 0])
    inv = I.groups(codes)
    mu = np.array([1.0, 2.0, 3.0, 0.5, 1.5])
    target = poisson_density(mu)
    pts = np.array([[a, c, b, 3 - c, 5 - a - b] for a in range(6) for b in range(6 - a) for c in range(4)])
    assert np.all(inv.of(pts) == [5, 3])
    p = _exact(pts, mu)

    pm = PairMoves(codes)

    def kernel(rng, st):
        st, _ = sweep(rng, st, pm, target, 1.0, lower=0, nonzero=True, matchings=2)
        return st

    draws = _run(kernel, [5, 3, 0, 0, 0], pm, target, 20000, 4, np.random.default_rng(3))
    assert np.all(inv.of(draws) == [5, 3])
    assert _chi2_pvalue(draws, pts, p) > 1e-3
