"""The compiled collapsed move (privinfer.pymc.collapse_kernel): its cell proposal is a normalized
law that its draws follow, exact for two cells; its Gaussian algebra (Woodbury, 2 x 2 blocks)
gives the reference's mode and precision; pairs whose rows it cannot take go to the reference."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import scipy.sparse as sp
from scipy import stats
from scipy.special import gammaln

from privinfer.pymc.collapse_kernel import WINDOW_NATS, _cells, _seed, collapsed_mode, compiled_collapsed_update
from privinfer.pymc.walk_collapse import (MAX_NEWTON, MAX_STEP, NU, TOL, V_FLOOR, _Pair, collapse_rows,
                                          collapsed_update)
from privinfer.pymc.walk_kernel import walk_offsets

ALPHA = 1e-3   # the chi-square's false-alarm rate: independent draws, so it is exact


def _compositions(N, d):
    for cut in itertools.combinations(range(N + d - 1), d - 1):
        b = (-1,) + cut + (N + d - 1,)
        yield np.array([b[i + 1] - b[i] - 1 for i in range(d)], dtype=np.int64)


def _weights(seed, d, N):
    rng = np.random.default_rng(seed)
    return (rng.uniform(0.5, 5.0, d), rng.normal(0.0, 0.4, d), rng.uniform(0.0, 0.05, d),
            rng.integers(0, N + 1, d).astype(np.int64))


def _log_weight(alpha, b, W, x):
    return float(np.sum(gammaln(x + alpha) - gammaln(x + 1.0) + b * x - W * x * x))


@pytest.mark.parametrize("nats", [WINDOW_NATS, 3.0], ids=["windows", "narrow windows"])
def test_the_cells_proposal_is_a_normalized_law_that_its_draws_follow(nats):
    # d = 4 cells summing to N = 12 (455 compositions): the scored log q sums to 1 over them
    # (each factor is normalized over the values that keep the later cells feasible, so exactly,
    # up to round-off), each draw's own log q is its score, and 20,000 draws follow exp(log q)
    # (chi-square over the compositions expected 5 times or more, the rest pooled); narrow
    # windows (3 nats) cut the support and must keep all three
    d, N = 4, 12
    alpha, b, W, start = _weights(5, d, N)
    comps = list(_compositions(N, d))
    lq = np.array([_cells(alpha, b, W, N, start, nats, x.copy(), False) for x in comps])
    assert abs(np.exp(lq).sum() - 1.0) < 1e-10
    if nats < WINDOW_NATS:
        assert np.isinf(lq).any()       # the narrow windows do cut
    _seed(9)
    n = 20000
    index = {tuple(x): k for k, x in enumerate(comps)}
    counts = np.zeros(len(comps))
    for _ in range(n):
        x = np.empty(d, dtype=np.int64)
        lq_draw = _cells(alpha, b, W, N, start, nats, x, True)
        k = index[tuple(x)]
        assert lq_draw == pytest.approx(lq[k], abs=1e-12)
        counts[k] += 1
    expected = n * np.exp(lq)
    big = expected >= 5
    f_obs, f_exp = counts[big], expected[big]
    if expected[~big].sum() > 0:
        f_obs, f_exp = np.r_[f_obs, counts[~big].sum()], np.r_[f_exp, expected[~big].sum()]
    assert counts[expected == 0].sum() == 0            # no draw outside the support
    assert stats.chisquare(f_obs, f_exp).pvalue > ALPHA


def test_for_two_cells_the_proposal_is_the_exact_conditional_law():
    # the last two cells are drawn exactly: for d = 2 the proposal is the weights' law given the
    # sum, exp(l_1(x_1) + l_2(N - x_1)), on the windows' support (round-off: 1e-12); the windows
    # drop only points whose weight is 25 nats below a cell's mode (their mass here about 4e-8)
    N = 30
    alpha, b, W, start = _weights(6, 2, N)
    comps = list(_compositions(N, 2))
    lq = np.array([_cells(alpha, b, W, N, start, WINDOW_NATS, x.copy(), False) for x in comps])
    lw = np.array([_log_weight(alpha, b, W, x) for x in comps])
    exact = np.exp(lw - lw.max())
    exact /= exact.sum()
    q = np.exp(lq)
    inside = np.isfinite(lq)
    assert np.max(np.abs(q[inside] - exact[inside] / exact[inside].sum())) < 1e-12
    assert exact[~inside].sum() < 1e-6


def _problem(seed, U=4, d=6, order=2):
    """A sibling group of ``U`` units of ``d`` cells: every cell measured, every unit's total, and
    every category over the units (a row holding one cell of each: the county's sex x age)."""
    rng = np.random.default_rng(seed)
    grid = np.arange(U * d).reshape(U, d)
    rows = [[c] for c in range(U * d)] + [list(grid[u]) for u in range(U)] + [list(grid[:, i]) for i in range(d)]
    B = sp.lil_matrix((len(rows), U * d))
    for r, cells in enumerate(rows):
        B[r, cells] = 1.0
    B = sp.csc_matrix(B)
    x = rng.poisson(rng.uniform(3.0, 40.0, U * d)).astype(np.int64)
    sigma = rng.uniform(2.0, 6.0, len(rows))
    res = rng.normal(0.0, sigma)                         # y - Bx at the current cells
    w = 0.5 / sigma**2
    K1 = d - 1
    A = walk_offsets(np.eye(K1), np.arange(d), order=order, spacing=None).T
    eta = rng.normal(0.0, 0.05, (U, K1))
    eta -= eta.mean(axis=0)
    delta = eta + rng.normal(0.0, 0.02, K1)
    prec = np.tile(1.0 / rng.uniform(0.02, 0.2, K1) ** 2, (U, 1))
    base = rng.normal(0.0, 0.3, (U, d))
    table = collapse_rows(grid, B.indptr.astype(np.int64), B.indices.astype(np.int64), B.shape[0])
    return dict(grid=grid, B=B, x=x, res=res, w=w, A=A, eta=eta, delta=delta, prec=prec, base=base, table=table)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_compiled_mode_and_precision_are_the_references(seed):
    # the same Gauss-Newton iterations from 0, the reference with the rows' covariance S formed
    # and factorized, the kernel through Woodbury's identity and M's 2 x 2 blocks: the same
    # numbers up to round-off (both stop at the same decrement; 1e-8 is far above the solves'
    # round-off and far below any change of the iterations)
    pb = _problem(seed)
    common = dict(grid=pb["grid"], table=pb["table"], A=pb["A"], base=pb["base"], eta=pb["eta"],
                  delta=pb["delta"], prec=pb["prec"], kappa=40.0, w=pb["w"])
    for u, v in ((0, 1), (2, 3), (3, 0)):
        t_ref, H_ref = _Pair(u, v, pb["x"], pb["res"], **common).mode()
        t, H = collapsed_mode(u, v, pb["x"], pb["res"], v_floor=V_FLOOR, max_newton=MAX_NEWTON, max_step=MAX_STEP,
                              tol=TOL, **common)
        assert np.abs(t_ref).max() > 1e-3               # the mode is away from the start
        np.testing.assert_allclose(t, t_ref, rtol=1e-8, atol=1e-10)
        np.testing.assert_allclose(H, H_ref, rtol=1e-8, atol=1e-8 * np.abs(H_ref).max())


def test_a_pair_whose_rows_pair_a_cell_with_two_goes_to_the_reference():
    # an extra row holds the first unit's cell 0 and the second's cell 1 beside the category rows
    # (cell 0 with cell 0): M is no longer a sum of 2 x 2 blocks, the kernel stops at that pair,
    # and collapsed_update moves it by the reference instead (its bookkeeping kept)
    pb = _problem(4, U=2, d=4)
    grid = pb["grid"]
    B = sp.vstack([pb["B"], sp.csr_matrix(([1.0, 1.0], ([0, 0], [grid[0, 0], grid[1, 1]])),
                                          shape=(1, pb["B"].shape[1]))]).tocsc()
    res = np.r_[pb["res"], 1.5]
    w = np.r_[pb["w"], 0.05]
    table = collapse_rows(grid, B.indptr.astype(np.int64), B.indices.astype(np.int64), B.shape[0])
    common = dict(grid=grid, table=table, A=pb["A"], base=pb["base"], eta=pb["eta"], delta=pb["delta"],
                  prec=pb["prec"], kappa=40.0, w=w)
    assert collapsed_mode(0, 1, pb["x"], res, v_floor=V_FLOOR, max_newton=MAX_NEWTON, max_step=MAX_STEP, tol=TOL,
                          **common) is None
    x = pb["x"].copy()
    acc, stop = compiled_collapsed_update(np.random.default_rng(1), x, res.copy(), np.array([0]), np.array([1]), 0,
                                          nu=NU, v_floor=V_FLOOR, max_newton=MAX_NEWTON, max_step=MAX_STEP, tol=TOL,
                                          **common)
    assert (acc, stop) == (0, 0) and np.array_equal(x, pb["x"])
    rng = np.random.default_rng(2)
    y = res + B @ pb["x"]
    accepted = 0
    for _ in range(20):
        a, n = collapsed_update(rng, x, res, (np.array([0]), np.array([1])), grid=grid, code=np.arange(4),
                                base=pb["base"], eta=pb["eta"], delta=pb["delta"], sigma=1.0 / np.sqrt(pb["prec"][0]),
                                kappa=40.0, w=w, table=table, walk_order=2)
        accepted += a
    assert accepted > 0
    assert np.allclose(res, y - B @ x)
    assert np.array_equal(x[grid].sum(axis=1), pb["x"][grid].sum(axis=1))
