r"""The Student-t walk (privinfer.pymc.walk_kernel, walk_carry, unit_gauss with ``mix``) against
exact answers: the raw increments :math:`\delta_{u,k} \mid \lambda_u \sim N(0, \sigma_k^2
\lambda_u)`, :math:`\lambda_u \sim \mathrm{InvGamma}(\nu/2, \nu/2)`, so every kernel's prior
term :math:`\delta_{u,k}^2/(2\sigma_k^2)` becomes :math:`\delta_{u,k}^2/(2\sigma_k^2\lambda_u)`.

As in test_walk_gibbs: draw many independent states from the exact conditional (inverse cdf on
a fine grid, the density written from the model's parts with SciPy's densities), apply the
kernel once to each and test the results against the same conditional with Kolmogorov-Smirnov
at level ALPHA = 1e-3 (fixed seeds, independent samples, so the false-alarm rate is ALPHA).
Every invariance test has power: the same kernel with ``mix`` left out (all multipliers 1), or with the
multipliers swapped between the units, starts from the same exact draws and fails the same
test, so a kernel that ignored ``mix`` (or applied it to the wrong unit) would fail."""

import numpy as np
import pytest
from scipy import stats

from privinfer.pymc import walk_kernel as wk
from privinfer.pymc.unit_gauss import transport
from privinfer.pymc.walk_carry import carried_update
from test_walk_carry import CODE as CARRY_CODE
from test_walk_carry import KAPPA as CARRY_KAPPA
from test_walk_carry import M as CARRY_M
from test_walk_carry import SIGMA as CARRY_SIGMA
from test_walk_carry import (SYSTEMS, _chi2_pvalue, _draws_of, _enumerated, _grid, _log_target, _marginal_cdf,
                             _replicated)
from test_unit_gauss import _systems as _unit_gauss_systems
from test_walk_gibbs import ALPHA, CODE, _assert_far_from_gaussian, _assert_moved, _case, _grid_draws, _ks, _unit_logl


# -- the multipliers' conditional --------------------------------------------------------------

def test_mix_draw_is_the_exact_conditional():
    # one unit with K - 1 = 3 raw increments, the step scales given: lambda | delta, sigma has
    # density prop. to InvGamma(lambda; nu/2, scale nu/2) prod_k N(delta_k; 0, sigma_k^2 lambda),
    # here on a grid in t = log lambda (times the Jacobian e^t); 20,000 draws (one call, one row
    # per draw) against it; power: the draw with another dof (a different conditional,
    # InvGamma(2, 3.7) against InvGamma(3.5, 5.2)) fails the same test
    rng = np.random.default_rng(31)
    nu = 4.0
    delta = np.array([0.5, -1.2, 0.8])
    sigma = np.array([0.5, 1.0, 0.4])
    grid = np.linspace(-6.0, 10.0, 32001)
    lam = np.exp(grid)
    logd = (stats.invgamma.logpdf(lam, 0.5 * nu, scale=0.5 * nu) + grid
            + stats.norm.logpdf(delta[None, :], 0.0, sigma[None, :] * np.sqrt(lam)[:, None]).sum(axis=1))
    p = np.exp(logd - logd.max())
    cdf = np.cumsum(p) / p.sum()
    n = 20000
    draws = wk.mix_draw(rng, np.tile(delta, (n, 1)), sigma, nu)
    assert draws.shape == (n,) and np.all(draws > 0)
    assert _ks(np.log(draws), grid, cdf) > ALPHA
    wrong = wk.mix_draw(rng, np.tile(delta, (n, 1)), sigma, 1.0)
    assert _ks(np.log(wrong), grid, cdf) < ALPHA                        # the test has power
    # and it tells the increments' scale apart: the draw given sigma / 2 (q four times larger)
    assert _ks(np.log(wk.mix_draw(rng, np.tile(delta, (n, 1)), sigma / 2, nu)), grid, cdf) < ALPHA


# -- the group means -------------------------------------------------------------------------

def test_refresh_group_means_draws_the_weighted_conditional_of_the_common_shift():
    # a group of three units with multipliers (0.25, 1, 4) and centred increments eta_u: the raw
    # increments are delta_u = eta_u + c, and with the cells seeing eta only, c has the density
    # prop. to prod_u N(eta_u + c; 0, sigma^2 lambda_u), i.e. per increment
    #   c ~ N(-sum_u (eta_u / lambda_u) / W, sigma^2 / W),   W = sum_u 1 / lambda_u
    # (completing the square): here W = 5.25, means -0.69 and 0.24, sds 0.31 and 0.65.  n copies
    # of the group at once (each from its own current mean, which the draw must not depend on);
    # the standardized draws are N(0, 1) exactly: KS against it, both increments.  Power: the
    # unweighted law N(0, sigma^2 / 3) (sds 0.40 and 0.87) fails the same test.
    rng = np.random.default_rng(32)
    n, J = 6000, 3
    sigma = np.array([0.7, 1.5])
    lam = np.array([0.25, 1.0, 4.0])
    groups = np.repeat(np.arange(n), J)
    mix = np.tile(lam, n)
    eta = np.broadcast_to(np.array([[1.0, -0.5], [-0.2, 0.8], [-0.8, -0.3]]), (n, J, 2))     # centred
    delta = (eta + rng.normal(0.0, 3.0, (n, 1, 2))).reshape(n * J, 2)          # any current mean
    new = wk.refresh_group_means(rng, delta, groups, sigma, mix=mix)
    # the centred increments are kept (to rounding), every unit of a group gets the same shift
    np.testing.assert_allclose(wk.centred(new, groups), eta.reshape(n * J, 2), rtol=0, atol=1e-12)
    c = (new - eta.reshape(n * J, 2)).reshape(n, J, 2)
    np.testing.assert_allclose(c, np.broadcast_to(c[:, :1], c.shape), rtol=0, atol=1e-12)
    c = c[:, 0]
    W = (1.0 / lam).sum()
    mean = -(eta / lam[None, :, None]).sum(axis=1) / W
    for k in range(2):
        assert stats.kstest((c[:, k] - mean[:, k]) / (sigma[k] / np.sqrt(W)), "norm").pvalue > ALPHA
        assert stats.kstest(c[:, k] / (sigma[k] / np.sqrt(J)), "norm").pvalue < ALPHA        # power
    # all multipliers 1: the unweighted law again (the centred eta sum to 0)
    c1 = (wk.refresh_group_means(rng, delta, groups, sigma, mix=np.ones(n * J)) - eta.reshape(n * J, 2))[::J]
    for k in range(2):
        assert stats.kstest(c1[:, k] / (sigma[k] / np.sqrt(J)), "norm").pvalue > ALPHA


# -- the step scales' exact draw --------------------------------------------------------------

@pytest.mark.parametrize("dof", [1, 2])
def test_scale_draw_with_mixed_variances_is_the_exact_conditional(dof):
    # sigma | delta has density prop. to chi_dof(sigma / s) prod_u N(delta_u; 0, sigma^2 lambda_u)
    # with unequal multipliers (0.2 to 10), written with SciPy's densities; 4,000 draws in one call
    # (one column of the same seven increments per draw: the columns' scales are independent
    # GIG draws).  Power: the draw without mix (b = sum delta^2 instead of sum delta^2 / lambda)
    # and the draw with the multipliers reversed fail the same test
    rng = np.random.default_rng(33)
    s, U, n = 0.3, 7, 4000
    lam = np.array([0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 0.3])
    delta = rng.normal(0.0, 0.2 * np.sqrt(lam))[:, None]
    grid = np.linspace(1e-4, 3.0, 60001)
    prior = stats.halfnorm(scale=s) if dof == 1 else stats.rayleigh(scale=s)
    logd = prior.logpdf(grid) + stats.norm.logpdf(delta, 0, grid[None, :] * np.sqrt(lam)[:, None]).sum(axis=0)
    p = np.exp(logd - logd.max())
    cdf = np.cumsum(p) / p.sum()
    cols = np.tile(delta, (1, n))
    draws = wk.scale_draw(rng, cols, s, dof, mix=lam)
    assert draws.shape == (n,)
    assert _ks(draws, grid, cdf) > ALPHA
    assert _ks(wk.scale_draw(rng, cols, s, dof), grid, cdf) < ALPHA                     # the test has power
    assert _ks(wk.scale_draw(rng, cols, s, dof, mix=lam[::-1]), grid, cdf) < ALPHA      # and reads lambda by unit


# -- pair moves --------------------------------------------------------------------------------

def test_pair_moves_with_mixed_variances_leave_the_exact_conditional_invariant():
    # test_walk_gibbs's skewed pair case with unequal multipliers lambda_1 = 1.5, lambda_2 = 6:
    # the pair keeps eta_1 + eta_2 = 0 and the mean raw increment m; the conditional of eta_1 = e
    #   l(X1, e) + l(X2, -e) - (m + e)^2 / (2 sigma^2 lambda_1) - (m - e)^2 / (2 sigma^2 lambda_2)
    # n pairs stacked (units 0..n-1 the first of each pair, n..2n-1 the second), so mix has 2n
    # entries.  Power: the same draws moved without mix, or with the multipliers swapped between
    # the pair's units, target other conditionals (their KS distances D from this one, on the
    # grid, have sqrt(n) D = 42 and 5.4, beyond the critical 1.95); and the conditional is far
    # from Gaussian (sqrt(n) D = 5.3 from the normal of its mean and sd)
    X1, X2 = np.array([0.0, 5.0, 0.0, 4.0]), np.array([3.0, 0.0, 4.0, 0.0])
    base, kappa = _case()[1], 2.0
    sigma, m = np.array([2.0]), 0.3
    lam1, lam2 = 1.5, 6.0
    grid = np.linspace(-12, 12, 48001)
    logd = (_unit_logl(X1, base, kappa, grid) + _unit_logl(X2, base, kappa, -grid)
            - (m + grid) ** 2 / (2 * sigma[0] ** 2 * lam1) - (m - grid) ** 2 / (2 * sigma[0] ** 2 * lam2))
    rng = np.random.default_rng(34)
    n = 20000
    e0, cdf = _grid_draws(logd, grid, n, rng)
    X = np.concatenate([np.tile(X1, (n, 1)), np.tile(X2, (n, 1))])
    B = np.tile(base, (2 * n, 1))
    u, v = np.arange(n), np.arange(n, 2 * n)
    mix = np.r_[np.full(n, lam1), np.full(n, lam2)]

    def moved(mix):
        eta = np.concatenate([e0, -e0])[:, None]
        delta = eta + m
        acc = wk.move_update(rng, X, B, eta, delta, [(u, 1.0), (v, -1.0)], sigma, kappa, CODE, mix=mix)
        assert 0.2 < acc.mean() < 1.0                                   # it moves
        assert np.allclose(eta[u] + eta[v], 0.0) and np.allclose(delta[u] + delta[v], 2 * m)
        np.testing.assert_allclose(delta - eta, m, rtol=0, atol=1e-12)
        return eta[u, 0]

    assert _ks(moved(mix), grid, cdf) > ALPHA
    _assert_far_from_gaussian(grid, cdf, n)
    assert _ks(moved(None), grid, cdf) < ALPHA
    assert _ks(moved(mix[::-1]), grid, cdf) < ALPHA


# -- the unit transport's scale update -----------------------------------------------------------

def _unit_fits(X, B, kappa, code, members, U):
    """Every unit's information ``Q_u`` and information-weighted fit ``b_u`` summed over its rows
    (``members``), each row's at its empirical increments (test_walk_gibbs's
    ``_unit_transport_delta``, one increment): ``(U, 1, 1)`` and ``(U, 1)``."""
    Q, b = np.zeros((U, 1, 1)), np.zeros((U, 1))
    for r in range(X.shape[0]):
        e = wk.empirical_increments(X[r:r + 1], B[r:r + 1], code)
        _, I = wk.unit_score_info(X[r:r + 1], B[r:r + 1] + wk.walk_offsets(e, code), kappa, code, 2)
        Q[members[r]] += I[0]
        b[members[r]] += I[0] @ e[0]
    return Q, b


def _unit_transport_delta_mix(lam, Q, b, c, xi, mix):
    """test_walk_gibbs's ``_unit_transport_delta`` with unit ``u``'s prior precision
    ``diag(sigma^{-2}) / mix[u]``: ``P_u = c_u Q_u + diag(e^{-2 lam}) / mix[u] = R_u R_u^T`` and
    ``delta_u = P_u^{-1} c_u b_u + xi_u R_u^{-1}`` at log scales ``lam`` ``(n, K-1)``
    (``Q``, ``b``: :func:`_unit_fits`).  Returns ``(n, U, K-1)`` and the log Jacobian of
    ``xi -> delta``, ``-sum_u log|R_u|`` ``(n,)``."""
    n, K1 = lam.shape
    U = xi.shape[0]
    delta = np.empty((n, U, K1))
    jac = np.zeros(n)
    for u in range(U):
        P = c[u] * Q[u][None] + np.eye(K1)[None] * (np.exp(-2 * lam) / mix[u])[:, None, :]     # (n, K1, K1)
        R = np.linalg.cholesky(P)
        delta[:, u] = (np.linalg.solve(P, np.broadcast_to(c[u] * b[u], (n, K1))[..., None])[..., 0]
                       + np.einsum("k,nkl->nl", xi[u], np.linalg.inv(R)))
        jac -= np.log(np.diagonal(R, axis1=1, axis2=2)).sum(axis=1)
    return delta, jac


def _unit_transport_logd_mix(lam, X, B, kappa, code, members, groups, xi, s0, mix):
    """The density of ``lam = log sigma`` given the unit transport's coordinates ``xi``, from the
    model's parts: HalfNormal(sigma; s0) * sigma (log transform) * prod_u N(delta_u; 0, sigma^2
    lambda_u) * the Jacobian of xi -> delta * prod_rows L_r(centred delta of the row's unit).
    Returns it and the map ``lam -> delta`` ``(n, U, K-1)``."""
    U = xi.shape[0]
    c = np.ones(U) if groups is None else 1.0 - 1.0 / np.bincount(groups)[groups]
    Q, b = _unit_fits(X, B, kappa, code, members, U)

    def delta_at(lv):
        return _unit_transport_delta_mix(lv, Q, b, c, xi, mix)

    delta, jac = delta_at(lam)
    sg = np.exp(lam)
    logd = (stats.halfnorm.logpdf(sg, scale=s0).sum(axis=1) + lam.sum(axis=1) + jac
            + stats.norm.logpdf(delta, 0, sg[:, None, :] * np.sqrt(mix)[None, :, None]).sum(axis=(1, 2)))
    eta = delta if groups is None else delta - delta.mean(axis=1, keepdims=True)
    for r in range(X.shape[0]):
        th = B[r][None, :] + wk.walk_offsets(eta[:, members[r]], code)
        logd = logd + wk.unit_loglik(np.broadcast_to(X[r], th.shape), th, kappa)
    return logd, lambda lv: delta_at(np.array([[lv]]))[0][0]


@pytest.mark.parametrize("grouped, corrected", [(True, False), (False, False), (True, True)])
def test_unit_transport_scale_update_with_mixed_variances_leaves_the_exact_conditional_invariant(grouped, corrected):
    # test_walk_gibbs's unit transport case (five rows of 3 to 60 people; grouped: two units of
    # three and two rows, one sibling group; not: three units of three, one and one rows) with
    # unequal multipliers, which enter both the prior N(delta_u; 0, sigma^2 lambda_u) and the map
    # (unit u's prior precision e^{-2 lambda} / lambda_u in P_u); the coordinates xi held fixed,
    # the density of lambda = log sigma on a grid (_unit_transport_logd_mix); corrected: slice
    # sampling on the quadratic surrogate, each proposal corrected to the exact target.  Power:
    # the update without mix from the same states (another prior, another map) fails the test
    rng = np.random.default_rng(35)
    s0, kappa = 0.5, 40.0
    sizes = (30, 3, 60, 12, 8)
    X = np.stack([_case(n=n, seed=k)[0] for k, n in enumerate(sizes)])
    base = _case()[1]
    B = np.stack([base, base[::-1], base + np.array([0.5, 0, -0.5, 0]), base, base[[1, 0, 3, 2]]])
    members = np.array([0, 0, 1, 0, 1]) if grouped else np.array([0, 0, 1, 0, 2])
    U = 2 if grouped else 3
    groups = np.zeros(U, dtype=np.int64) if grouped else None
    mix = np.array([0.2, 5.0, 0.1])[:U]
    xi = np.array([[0.9], [-1.3], [0.4]])[:U]
    grid = np.linspace(-7, 3.5, 21001)
    logd, delta_at = _unit_transport_logd_mix(grid[:, None], X, B, kappa, CODE, members, groups, xi, s0, mix)
    n = 2000
    lam0, cdf = _grid_draws(logd, grid, n, rng)

    def update(lv, mix):
        return wk.scale_update_unit_transport(rng, X, B, delta_at(lv), groups, np.exp([lv]), kappa, CODE, s0,
                                              members=members, corrected=corrected, mix=mix)

    out = np.empty(n)
    for j, lv in enumerate(lam0):
        new_sigma, new_delta, _, _ = update(lv, mix)
        np.testing.assert_allclose(new_delta, delta_at(np.log(new_sigma[0])), rtol=1e-9, atol=1e-12)  # xi kept
        out[j] = np.log(new_sigma[0])
    _assert_moved(out, lam0, corrected)
    assert _ks(out, grid, cdf) > ALPHA
    other = np.array([np.log(update(lv, None)[0][0]) for lv in lam0])
    assert _ks(other, grid, cdf) < ALPHA


# -- the non-centred scale update ---------------------------------------------------------------

def test_noncentred_scale_update_with_mixed_variances_leaves_the_exact_conditional_invariant():
    # test_walk_gibbs's partly non-centred case (exponents w_u differ by unit: with w = 1 for all,
    # delta_u^2 / (2 sigma^2 lambda_u) = eps_u^2 / (2 lambda_u) would not depend on sigma and mix
    # would drop out of the target) with multipliers (0.2, 5, 1): coordinates eps_u = delta_u /
    # sigma^{w_u} held fixed; the density of lambda = log sigma from the model's parts:
    # HalfNormal(sigma; s) * sigma * prod_u N(eps_u sigma^{w_u}; 0, sigma^2 lambda_u) sigma^{w_u}
    # * prod_u L_u(centred delta).  Power: the same update without mix fails the test
    rng = np.random.default_rng(36)
    s = 0.5
    X = np.stack([_case(kappa=2.5, n=10, seed=k)[0] for k in range(3)])
    base, kappa = _case()[1], 2.5
    B = np.tile(base, (3, 1))
    groups = np.zeros(3, dtype=np.int64)
    eps = np.array([[1.2], [-0.4], [0.7]])
    w = np.array([[0.1], [0.9], [0.5]])
    mix = np.array([0.2, 5.0, 1.0])
    grid = np.linspace(-9, 3.5, 50001)
    sg = np.exp(grid)
    d = eps[:, 0][None, :] * sg[:, None] ** w[:, 0][None, :]            # (grid, units)
    logd = stats.halfnorm.logpdf(sg, scale=s) + grid
    logd = logd + (stats.norm.logpdf(d, 0, sg[:, None] * np.sqrt(mix)[None, :])
                   + w[:, 0][None, :] * grid[:, None]).sum(axis=1)
    dc = d - d.mean(axis=1, keepdims=True)
    for u in range(3):
        logd = logd + _unit_logl(X[u], base, kappa, dc[:, u])
    n = 2500
    lam0, cdf = _grid_draws(logd, grid, n, rng)

    def update(lv, mix):
        sigma = np.array([np.exp(lv)])
        return wk.scale_update_noncentred(rng, X, B, eps * sigma ** w, groups, sigma, kappa, CODE, s, exponents=w,
                                          mix=mix)

    out = np.empty(n)
    for j, lv in enumerate(lam0):
        new_sigma, new_delta, _, _ = update(lv, mix)
        assert np.allclose(new_delta, eps * new_sigma ** w)               # the coordinates are kept
        out[j] = np.log(new_sigma[0])
    _assert_moved(out, lam0, False)
    assert _ks(out, grid, cdf) > ALPHA
    other = np.array([np.log(update(lv, None)[0][0]) for lv in lam0])
    assert _ks(other, grid, cdf) < ALPHA


# -- the carried update ---------------------------------------------------------------------------

def _mix_log_target(sysm, s, x, lam):
    """test_walk_carry's log pi(s, x) of the tiny two-unit system with the pair's prior
    -((M + s)^2 + (M - s)^2) / (2 SIGMA^2) replaced by the mixed one
    -(M + s)^2 / (2 SIGMA^2 lam[0]) - (M - s)^2 / (2 SIGMA^2 lam[1]) (unit 0's raw increment is
    M + s, unit 1's M - s), vectorized over the grid ``s``."""
    M, S = CARRY_M, CARRY_SIGMA
    equal = -((M + s) ** 2 + (M - s) ** 2) / (2 * S**2)
    mixed = -(M + s) ** 2 / (2 * S**2 * lam[0]) - (M - s) ** 2 / (2 * S**2 * lam[1])
    return _log_target(sysm, s, x) - equal + mixed


def _mix_exact(sysm, lam):
    """Enumerated target: the fibre of cells summing to T, the grid of s, the weights (fibre x
    grid) and the fibre points' marginal pmf (test_walk_carry's ``_exact``)."""
    grid = np.linspace(-8, 8, 16001)
    fibre, wts, px = _enumerated(_grid(sysm).size, sysm["T"], grid, lambda g, x: _mix_log_target(sysm, g, x, lam))
    return fibre, grid, wts, px


def test_carried_update_with_mixed_variances_leaves_the_joint_posterior_invariant():
    # test_walk_carry's tiny posterior of (s, x) (two sibling units, two cells each, every cell,
    # unit total and category sum measured) with multipliers (0.3, 4) for the pair's units: exact
    # draws -> one carried update (mix tiled over the n copies, units 2i and 2i + 1) -> still
    # exact: s's marginal by KS against the enumerated one, the cells' pmf by chi-square.  Power:
    # the same draws updated without mix, or with the multipliers swapped, fail the KS test
    # (the prior's mode of s is -0.17 with the mix, 0 without it and +0.17 with it swapped)
    lam = np.array([0.3, 4.0])
    sysm = SYSTEMS["rows"]
    rng = np.random.default_rng(37)
    n = 20000
    fibre, grid, wts, px = _mix_exact(sysm, lam)
    idx, s = _draws_of(n, rng, grid, wts, px)
    cdf = _marginal_cdf(wts, px)
    c = _grid(sysm).size

    def updated(mix):
        st = _replicated(fibre[idx], s, sysm)
        x_before = st["cells"].copy()
        carried_update(rng, st["cells"], st["res"], st["pairs"], grid=st["grid"], code=CARRY_CODE, base=st["base"],
                       eta=st["eta"], delta=st["delta"], sigma=np.array([CARRY_SIGMA]), kappa=CARRY_KAPPA,
                       carry=st["carry"], row_ptr=st["B"].indptr.astype(np.int64),
                       rows=st["B"].indices.astype(np.int64), w=st["w"], widths=0.5, steps=40, members=st["members"],
                       mix=None if mix is None else np.tile(mix, n))
        # exact bookkeeping: the pair keeps its sums, the residuals follow the cells, the rows their totals
        assert np.allclose(st["eta"].reshape(n, 2).sum(axis=1), 0.0)
        assert np.allclose(st["delta"].reshape(n, 2).sum(axis=1), 2 * CARRY_M)
        assert np.allclose(st["res"], st["y"] - st["B"] @ st["cells"].astype(float))
        cells = st["cells"].reshape(n, c)
        assert np.array_equal(cells.reshape(n, c // 2, 2).sum(axis=2), x_before.reshape(n, c // 2, 2).sum(axis=2))
        assert cells.min() >= 0
        assert (cells != x_before.reshape(n, c)).any(axis=1).mean() > 0.3          # the cells follow
        return st["eta"].reshape(n, 2)[:, 0], cells

    s_new, cells = updated(lam)
    assert np.mean(np.abs(s_new - s)) > 0.1
    assert stats.kstest(s_new, lambda v: np.interp(v, grid, cdf)).pvalue > ALPHA
    lookup = {tuple(p): k for k, p in enumerate(fibre)}
    assert _chi2_pvalue(np.array([lookup[tuple(r)] for r in cells]), px, n) > ALPHA
    for wrong in (None, lam[::-1]):
        s_wrong, _ = updated(wrong)
        assert stats.kstest(s_wrong, lambda v: np.interp(v, grid, cdf)).pvalue < ALPHA


# -- per-unit precisions of the compiled maps ---------------------------------------------------

def test_transport_takes_one_row_of_precisions_or_one_per_unit():
    # precision (U, k) is checked against NumPy's dense solves in test_unit_gauss; here (1, k)
    # is the same as (k,), the rows of a (U, k) are used, and any other shape is an error
    Q, b, xi, p = _unit_gauss_systems(rank=2, per_unit=True)
    got, _ = transport(Q, b, xi, p)
    one, one_logdet = transport(Q, b, xi, p[:1])
    flat, flat_logdet = transport(Q, b, xi, p[0])
    assert np.array_equal(one, flat) and one_logdet == flat_logdet
    assert not np.allclose(one, got)                               # the rows of p are used
    for bad in (p[:2], p[:, :-1], p[None]):
        with pytest.raises(ValueError, match="transport needs"):
            transport(Q, b, xi, bad)


# -- refusals ------------------------------------------------------------------------------------

def test_bad_multipliers_and_the_shared_transport_are_refused():
    msg = r"^mix must hold 3 finite positive variance multipliers, one per unit"
    assert wk.checked_mix(None, 3) is None
    good = wk.checked_mix([1, 2, 3], 3)
    assert good.dtype == float and good.tolist() == [1.0, 2.0, 3.0]
    bads = ([1.0, 1.0], np.ones(4), np.ones((3, 2)), [1.0, 0.0, 1.0], [1.0, -2.0, 1.0], [1.0, np.nan, 1.0],
            [1.0, np.inf, 1.0])
    for bad in bads:
        with pytest.raises(ValueError, match=msg):
            wk.checked_mix(bad, 3)
    # prior_precisions: 1 / (sigma_k^2 lambda_u), (U, K-1)
    sigma = np.array([0.5, 2.0])
    np.testing.assert_allclose(wk.prior_precisions(sigma, np.array([1.0, 4.0, 0.5]), 3),
                               [[4.0, 0.25], [1.0, 0.0625], [8.0, 0.5]], rtol=1e-15)
    np.testing.assert_allclose(wk.prior_precisions(sigma, None, 3), [[4.0, 0.25]] * 3, rtol=1e-15)
    np.testing.assert_allclose(wk.prior_precisions(sigma), [4.0, 0.25], rtol=1e-15)
    # every kernel checks its mix (one per unit) before using it
    rng = np.random.default_rng(0)
    X = np.stack([_case(n=n, seed=k)[0] for k, n in enumerate((6, 40, 15))])
    B = np.tile(_case()[1], (3, 1))
    groups = np.zeros(3, dtype=np.int64)
    delta = np.array([[0.2], [-0.1], [0.3]])
    sg = np.array([0.5])
    for bad in bads:
        with pytest.raises(ValueError, match=msg):
            wk.scale_draw(rng, delta, 0.5, 1, mix=bad)
        with pytest.raises(ValueError, match=msg):
            wk.refresh_group_means(rng, delta, groups, sg, mix=bad)
        with pytest.raises(ValueError, match=msg):
            wk.move_update(rng, X, B, wk.centred(delta, groups), delta.copy(), [(np.array([0]), 1.0),
                                                                                (np.array([1]), -1.0)],
                           sg, 40.0, CODE, mix=bad)
        for update in (wk.scale_update_unit_transport, wk.scale_update_noncentred):
            with pytest.raises(ValueError, match=msg):
                update(rng, X, B, delta, groups, sg, 40.0, CODE, 0.5, mix=bad)
    # the shared transport's orthonormal contrasts need equal variances within a group
    with pytest.raises(ValueError, match="scale_update_unit_transport"):
        wk.scale_update_transport(rng, X, B, delta, groups, sg, 40.0, CODE, 0.5, mix=np.ones(3))
    with pytest.raises(ValueError, match="scale_update_unit_transport"):
        wk.scale_update_transport(rng, X, B, delta, groups, sg, 40.0, CODE, 0.5, mix=np.array([1.0, 2.0, 3.0]))
    for dof in (0.0, -1.0, np.nan, np.inf):
        with pytest.raises(ValueError, match="^dof must be a finite number > 0$"):
            wk.mix_draw(rng, delta, sg, dof)


# -- one multiplier per unit and increment --------------------------------------------------------

def test_mix_draw_per_increment_is_each_increment_s_exact_conditional():
    # lambda_uk | delta_uk, sigma_k has density prop. to InvGamma(lambda; nu/2, nu/2)
    # N(delta_uk; 0, sigma_k^2 lambda): each entry its own conditional, on a grid in log lambda
    # (the Jacobian e^t); 20,000 rows of the same three increments, KS per column.  Power: the
    # per-unit draw (one lambda from all three increments, InvGamma((nu + 3)/2, ...)) fails
    # against column 0's conditional
    rng = np.random.default_rng(41)
    nu, n = 4.0, 20000
    delta = np.array([0.5, -1.2, 0.1])
    sigma = np.array([0.5, 1.0, 0.4])
    grid = np.linspace(-6.0, 10.0, 32001)
    lam = np.exp(grid)
    draws = wk.mix_draw(rng, np.tile(delta, (n, 1)), sigma, nu, per_increment=True)
    assert draws.shape == (n, 3) and np.all(draws > 0)
    cdfs = []
    for k in range(3):
        logd = (stats.invgamma.logpdf(lam, 0.5 * nu, scale=0.5 * nu) + grid
                + stats.norm.logpdf(delta[k], 0.0, sigma[k] * np.sqrt(lam)))
        p = np.exp(logd - logd.max())
        cdfs.append(np.cumsum(p) / p.sum())
        assert _ks(np.log(draws[:, k]), grid, cdfs[k]) > ALPHA
    unit = wk.mix_draw(rng, np.tile(delta, (n, 1)), sigma, nu)
    assert _ks(np.log(unit), grid, cdfs[0]) < ALPHA


def test_refresh_group_means_with_a_multiplier_per_increment_weighs_each_column_by_its_own():
    # per increment k: c_k ~ N(-sum_u (eta_uk / lambda_uk) / W_k, sigma_k^2 / W_k), W_k =
    # sum_u 1 / lambda_uk (the per-unit formula, column by column); here the two columns'
    # multipliers are each other's reverse.  Power: column 1 standardized with column 0's
    # weights fails
    rng = np.random.default_rng(42)
    n, J = 6000, 3
    sigma = np.array([0.7, 1.5])
    lam = np.array([[0.25, 4.0], [1.0, 1.0], [4.0, 0.25]])
    groups = np.repeat(np.arange(n), J)
    eta = np.broadcast_to(np.array([[1.0, -0.5], [-0.2, 0.8], [-0.8, -0.3]]), (n, J, 2))
    delta = (eta + rng.normal(0.0, 3.0, (n, 1, 2))).reshape(n * J, 2)
    new = wk.refresh_group_means(rng, delta, groups, sigma, mix=np.tile(lam, (n, 1)))
    np.testing.assert_allclose(wk.centred(new, groups), eta.reshape(n * J, 2), rtol=0, atol=1e-12)
    c = (new - eta.reshape(n * J, 2)).reshape(n, J, 2)[:, 0]
    W = (1.0 / lam).sum(axis=0)
    mean = -(eta[0] / lam).sum(axis=0) / W
    for k in range(2):
        assert stats.kstest((c[:, k] - mean[k]) / (sigma[k] / np.sqrt(W[k])), "norm").pvalue > ALPHA
    wrong = -(eta[0, :, 1] / lam[:, 0]).sum() / W[0]
    assert stats.kstest((c[:, 1] - wrong) / (sigma[1] / np.sqrt(W[0])), "norm").pvalue < ALPHA


def test_a_multiplier_per_increment_with_equal_columns_is_the_per_unit_multiplier():
    # (U, K-1) multipliers whose columns are all lambda_u enter every kernel exactly as the (U,)
    # ones: the same random stream gives the same draws (the per-unit kernels' exactness is
    # tested above, the elementwise formulas column by column in the two tests before)
    lam = np.array([0.4, 2.5, 1.3])
    full = np.tile(lam[:, None], (1, 2))
    X = np.stack([_case(n=n, seed=k)[0] for k, n in enumerate((6, 40, 15))])
    B = np.tile(_case()[1], (3, 1))
    groups = np.zeros(3, dtype=np.int64)
    delta = np.array([[0.2, -0.3], [-0.1, 0.4], [0.3, 0.1]])
    sg = np.array([0.5, 0.8])
    code = np.array([0, 1, 2, 2])

    def same(f):
        a, b = f(lam, np.random.default_rng(5)), f(full, np.random.default_rng(5))
        for x, y in zip(a if isinstance(a, tuple) else (a,), b if isinstance(b, tuple) else (b,)):
            np.testing.assert_allclose(x, y, rtol=1e-12, atol=1e-14)

    same(lambda m, r: wk.scale_draw(r, delta, 0.5, 2, mix=m))
    same(lambda m, r: wk.refresh_group_means(r, delta, groups, sg, mix=m))
    same(lambda m, r: wk.prior_precisions(sg, m, 3))

    def move(m, r):
        eta, d = wk.centred(delta, groups), delta.copy()
        acc = wk.move_update(r, X, B, eta, d, [(np.array([0]), 1.0), (np.array([2]), -1.0)], sg, 40.0, code, mix=m)
        return acc, d
    same(move)
    for update in (wk.scale_update_unit_transport, wk.scale_update_noncentred):
        same(lambda m, r: update(r, X, B, delta, groups, sg, 40.0, code, 0.5, mix=m)[:2])
