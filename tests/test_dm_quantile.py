"""The Dirichlet-multinomial's randomized quantile map (privinfer.pymc.dm_quantile): the tree's
uniforms are independent uniforms under the Dirichlet-multinomial, the cells are their exact
inverse, and uniforms pushed through the tree are Dirichlet-multinomial draws."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy import stats
from scipy.special import gammaln

from privinfer.pymc.dm_quantile import betabinom_quantile, seed, tree_cells, tree_uniforms

ALPHA = 1e-3   # each test's false-alarm rate (independent draws: KS and chi-square are exact)


def _dm_logpmf(x, n, alpha):
    A = alpha.sum()
    return (gammaln(n + 1) + gammaln(A) - gammaln(n + A)
            + (gammaln(x + alpha) - gammaln(alpha) - gammaln(x + 1)).sum(axis=-1))


def _work(d, n):
    return np.empty(n + 1), np.empty((d + 2, 3), dtype=np.int64)


@pytest.mark.parametrize("alpha, n", [
    (np.array([0.3, 2.0, 0.05, 5.0, 1.2, 0.7, 40.0]), 60),   # log-concave nodes and J-/U-shaped ones
    (np.array([3.0, 4.0, 2.5]), 2000),                         # large counts: the cut windows
])
def test_tree_uniforms_are_iid_uniform_and_their_cells_are_the_cells(alpha, n):
    # x ~ DirMult(n, alpha) (Dirichlet then multinomial) -> every internal node's U must be
    # U(0, 1) (KS each, at ALPHA / nodes) and the nodes' U independent (the U of the root and of
    # its left child: their Spearman correlation within 4.5 / sqrt(m) of 0, its sd under
    # independence being 1 / sqrt(m)); and the tree maps the U back to x exactly
    rng = np.random.default_rng(3)
    seed(3)   # the compiled kernels' u
    m = 4000
    d = alpha.size
    x = np.array([rng.multinomial(n, rng.dirichlet(alpha)) for _ in range(m)])
    sidx = np.arange(d, dtype=np.int64)
    buf, stk = _work(d, n)
    U = np.empty((m, d - 1))
    back = np.empty(d, dtype=np.int64)
    for j in range(m):
        tree_uniforms(x[j], sidx, d, alpha, U[j], buf, stk)
        back[:] = -1
        tree_cells(n, sidx, d, alpha, U[j], back, buf, stk)
        assert np.array_equal(back, x[j])
    for k in range(d - 1):
        assert stats.kstest(U[:, k], "uniform").pvalue > ALPHA / (d - 1)
    assert abs(stats.spearmanr(U[:, 0], U[:, 1]).statistic) < 4.5 / np.sqrt(m)


def test_uniforms_through_the_tree_are_dirichlet_multinomial_draws():
    # U iid uniform -> cells: their pmf against the enumerated DirMult(7, alpha) on all 462
    # compositions of 7 into 6 cells (chi-square, cells with expected count under 5 pooled); a
    # subset of positions (sidx) in a longer row: the other positions stay untouched
    rng = np.random.default_rng(11)
    alpha = np.array([0.4, 1.5, 0.2, 3.0, 0.9, 2.2])
    n, m = 7, 40000
    sidx = np.array([1, 2, 4, 5, 7, 8], dtype=np.int64)
    row_alpha = np.zeros(10)
    row_alpha[sidx] = alpha
    buf, stk = _work(10, n)
    out = np.full(10, -7, dtype=np.int64)
    comps = np.array([c for c in itertools.product(range(n + 1), repeat=6) if sum(c) == n])
    lookup = {tuple(c): k for k, c in enumerate(comps)}
    idx = np.empty(m, dtype=np.int64)
    for j in range(m):
        tree_cells(n, sidx, 6, row_alpha, rng.random(5), out, buf, stk)
        idx[j] = lookup[tuple(out[sidx])]
    assert np.all(np.delete(out, sidx) == -7)
    p = np.exp(_dm_logpmf(comps, n, alpha))
    assert abs(p.sum() - 1) < 1e-12
    counts = np.bincount(idx, minlength=p.size)
    exp = m * p
    big = exp >= 5
    obs = np.append(counts[big], counts[~big].sum())
    ex = np.append(exp[big], exp[~big].sum())
    assert stats.chisquare(obs, ex).pvalue > ALPHA
    # power: the same draws against the multinomial of the same mean fail
    pm = np.exp(gammaln(n + 1) + (comps * np.log(alpha / alpha.sum()) - gammaln(comps + 1)).sum(axis=1))
    exm = m * pm
    bigm = exm >= 5
    assert stats.chisquare(np.append(counts[bigm], counts[~bigm].sum()),
                           np.append(exm[bigm], exm[~bigm].sum())).pvalue < ALPHA


@pytest.mark.parametrize("n, a, b", [(30, 0.4, 0.6), (30, 2.0, 7.0), (500, 40.0, 60.0), (12, 0.05, 3.0)])
def test_betabinomial_quantile_is_the_exact_quantile(n, a, b):
    # the quantile of U under BetaBin(n, a, b) against SciPy's CDF at 200 points: the smallest k
    # with F(k) > U (values of U within 1e-12 of a CDF step skipped: rounding decides there)
    F = stats.betabinom(n, a, b).cdf(np.arange(n + 1))
    for U in np.random.default_rng(2).random(200):
        if np.min(np.abs(F - U)) < 1e-12:
            continue
        assert betabinom_quantile(n, a, b, U) == int(np.searchsorted(F, U, side="right"))
