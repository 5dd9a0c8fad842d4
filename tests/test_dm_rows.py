"""The compiled per-row Dirichlet-multinomial terms against their definitions, written out with
SciPy and explicit matrices (the module docstring's formulas)."""

import numpy as np
import pytest
from scipy.special import gammaln, softmax

from privinfer.pymc.dm_rows import rows_loglik, rows_quadratic, rows_score_info, rows_score_tails, scatter_rows


def _system(seed, R=9, K=5, m=2):
    rng = np.random.default_rng(seed)
    code = np.tile(np.arange(K), m)
    X = rng.poisson(15.0, (R, code.size)).astype(float)
    X[0] = 0.0                                    # a row of zeros: N = 0, no information
    theta = rng.normal(0.0, 1.5, (R, code.size))
    return X, theta, code, K


def _offsets(eta, code, order, h):
    """The walk's offsets of the cells (``walk_kernel.walk_offsets`` written out)."""
    steps = eta if order == 1 else np.cumsum(eta, axis=1) * h
    r = np.concatenate([np.zeros((eta.shape[0], 1)), np.cumsum(steps, axis=1)], axis=1)
    return r[:, code]


@pytest.mark.parametrize("kappa", [0.7, 40.0, 1e9])
def test_loglik_is_the_dirichlet_multinomial_sum(kappa):
    X, theta, _, _ = _system(0)
    a = kappa * softmax(theta, axis=1)
    # Direct difference of log-gammas: at kappa = 1e9 it loses about 1e-5 absolute (the reason
    # for the series the kernel uses), so the tolerance there is relative to the terms' size.
    ref = (gammaln(a + X) - gammaln(a)).sum(axis=1)
    scale = np.abs(gammaln(a + X)).sum(axis=1) + 1.0
    assert np.all(np.abs(rows_loglik(X, theta, kappa) - ref) <= 1e-13 * scale + 1e-10)


@pytest.mark.parametrize("order, spaced", [(1, False), (2, False), (2, True)])
def test_score_is_the_gradient_and_information_the_stated_matrix(order, spaced):
    X, theta, code, K = _system(1)
    rng = np.random.default_rng(2)
    h = rng.uniform(0.5, 2.5, K - 1) if spaced else np.ones(K - 1)
    kappa = 30.0
    eta = rng.normal(0.0, 0.2, (X.shape[0], K - 1))
    th = theta + _offsets(eta, code, order, h)
    g, info = rows_score_info(X, th, kappa, code, K, order, h if spaced else None)
    # central differences of the log likelihood in every increment: error O(step^2) ~ 1e-8
    step = 1e-4
    fd = np.empty_like(g)
    for k in range(K - 1):
        e = np.zeros(K - 1)
        e[k] = step
        up = rows_loglik(X, theta + _offsets(eta + e, code, order, h), kappa)
        down = rows_loglik(X, theta + _offsets(eta - e, code, order, h), kappa)
        fd[:, k] = (up - down) / (2 * step)
    assert np.allclose(g, fd, rtol=1e-6, atol=1e-6)
    # information: n_eff (T_max(k,l) - T_k T_l) in category space, then M^T I M
    P = softmax(th, axis=1) @ np.eye(K)[code]
    T = np.cumsum(P[:, ::-1], axis=1)[:, ::-1][:, 1:]
    N = X.sum(axis=1)
    n_eff = N * (1 + kappa) / (N + kappa)
    ref = n_eff[:, None, None] * (np.minimum(T[:, :, None], T[:, None, :]) - T[:, :, None] * T[:, None, :])
    if order == 2:
        M = np.diag(h) @ np.tril(np.ones((K - 1, K - 1)))
        ref = np.einsum("ka,rkl,lb->rab", M, ref, M)
    assert np.allclose(info, ref, rtol=1e-12, atol=1e-12)
    assert np.all(info[0] == 0.0)          # the row of zeros has no information


def test_non_finite_rows_stay_non_finite():
    X, theta, code, K = _system(3)
    theta[2, 1] = np.inf
    theta[4, 3] = np.nan
    ll = rows_loglik(X, theta, 5.0)
    g, info = rows_score_info(X, theta, 5.0, code, K)
    assert np.isnan(ll[[2, 4]]).all() and np.isfinite(np.delete(ll, [2, 4])).all()
    assert not np.isfinite(g[[2, 4]]).all(axis=1).any()


def test_broadcast_counts_and_scatter():
    X, theta, _, _ = _system(4)
    row = np.broadcast_to(X[1], theta.shape)
    assert np.array_equal(rows_loglik(row, theta, 3.0), rows_loglik(np.array(row), theta, 3.0))
    rng = np.random.default_rng(5)
    at = rng.integers(0, 6, 40)
    v = rng.normal(size=(40, 3, 2))
    ref = np.zeros((7, 3, 2))
    np.add.at(ref, at, v)
    assert np.allclose(scatter_rows(v, at, 7), ref, rtol=0, atol=1e-12)


@pytest.mark.parametrize("order, spaced, grouped", [(1, False, False), (2, False, False), (2, True, False),
                                                    (2, True, True)])
def test_factored_quadratic_is_the_expansion_with_the_stated_information(order, spaced, grouped):
    # rows_quadratic against sum_r g_r.d_r - d_r' I_r d_r / 2 written with rows_score_info's dense
    # score and information at the same point: the same sums in another order, so equal to
    # rounding (terms of size ~1e3, relative tolerance 1e-10)
    X, theta, code, K = _system(3, R=12)
    rng = np.random.default_rng(4)
    h = rng.uniform(0.5, 2.5, K - 1) if spaced else None
    at = rng.normal(0.0, 0.3, (X.shape[0], K - 1))
    th = theta + _offsets(at, code, order, np.ones(K - 1) if h is None else h)
    g, info = rows_score_info(X, th, 30.0, code, K, order, h)
    g2, n_eff, tails = rows_score_tails(X, th, 30.0, code, K, order, h)
    assert np.array_equal(g, g2)
    members = rng.integers(0, 4, X.shape[0]) if grouped else None
    U = 4 if grouped else X.shape[0]
    for _ in range(3):
        eta = rng.normal(0.0, 0.5, (U, K - 1))
        d = (eta if members is None else eta[members]) - at
        dense = float(np.sum(g * d) - 0.5 * np.einsum("rk,rkl,rl->", d, info, d))
        got = rows_quadratic(eta, at, g2, n_eff, tails, order, h, members)
        assert abs(got - dense) <= 1e-10 * (abs(dense) + np.abs(g * d).sum() + 1.0)
