"""WalkGibbs and its kernels (privinfer.pymc.walk, privinfer.pymc.walk_kernel) against exact
answers: the stable log-gamma differences against exact sums, and every update's invariance
of its exact conditional, computed by quadrature on a one-dimensional case (K = 2 categories,
one increment per unit, one step scale).

Invariance tests: draw many independent states from the exact conditional (inverse cdf on a
fine grid), apply the kernel once to each, and test the results against the same
conditional with Kolmogorov-Smirnov at level 1e-3 (fixed seeds).  The cases are chosen
far from Gaussian (few people, strong overdispersion): each test checks that a normal sample
with the conditional's mean and sd fails the same test, so Gaussian proposals accepted
without the exact ratio would fail it too."""

import math

import numpy as np
import pytest
from scipy import stats
from scipy.special import gammaln

from privinfer._special import digamma_diff, lgamma_ratio, lgamma_ratio_scalar
from privinfer.pymc import walk_kernel as wk

ALPHA = 1e-3
CODE = np.array([0, 1, 0, 1])          # 2 sexes x 2 age groups: one increment per unit


# -- stable differences ----------------------------------------------------------------------

@pytest.mark.parametrize("a", [0.4, 3.0, 9.9, 10.0, 55.5, 2.0e3, 7.0e6, 3.0e10, 1.0e14])
def test_lgamma_ratio_equals_the_exact_sum_of_logs(a):
    # for integer x, log Gamma(a + x) - log Gamma(a) = sum_{j < x} log(a + j) exactly (fsum);
    # the series' truncation error is below 1e-10 for a >= 10, the direct difference exact below
    for x in (0, 1, 2, 9, 60, 400):
        exact = math.fsum(math.log(a + j) for j in range(x))
        tol = 1e-10 * max(1.0, abs(exact))
        assert abs(float(lgamma_ratio(a, x)) - exact) <= tol
        assert abs(lgamma_ratio_scalar(a, float(x)) - exact) <= tol
        assert abs(lgamma_ratio_scalar(a + x, float(-x)) + exact) <= tol
        # psi(a + x) - psi(a) = sum_{j < x} 1/(a + j)
        exact_d = math.fsum(1.0 / (a + j) for j in range(x))
        assert abs(float(digamma_diff(a, x)) - exact_d) <= 1e-10 * max(exact_d, 1e-300) + 1e-300


def test_differences_at_a_vanished_share_are_not_finite():
    # a = kappa * softmax underflowed to 0: log Gamma(x) - log Gamma(0) = -inf for x > 0 (the
    # cell has no mass), NaN at x = 0, psi likewise; the walk kernels flag such states by this
    a, x = np.array([0.0, 0.0]), np.array([3.0, 0.0])
    with np.errstate(all="ignore"):
        assert np.isneginf(lgamma_ratio(a, x)[0]) and np.isnan(lgamma_ratio(a, x)[1])
        d = digamma_diff(a, x)
    assert np.isposinf(d[0]) and np.isnan(d[1])


def test_digamma_difference_at_a_subnormal_share():
    # a = kappa * softmax barely above 0 (3e-310): 1/a overflows, so the recurrence would give
    # inf - inf; the difference is exactly 0 at x = 0 and beyond the largest double for x >= 1
    a = np.array([3.2e-310, 3.2e-310, 1e-300])
    x = np.array([0.0, 4.0, 2.0])
    with np.errstate(all="raise"):
        d = digamma_diff(a, x)
    assert d[0] == 0.0 and np.isposinf(d[1])
    assert d[2] == pytest.approx(1e300, rel=1e-12)        # 1/a - 1/(a + 2) - ... ~ 1/a, finite


def test_the_direct_difference_would_lose_digits_where_the_series_is_used():
    a, x = 3.0e10, 60
    exact = math.fsum(math.log(a + j) for j in range(x))
    assert abs(gammaln(a + x) - gammaln(a) - exact) > 1e-7          # why the series exists
    assert abs(float(lgamma_ratio(a, x)) - exact) < 1e-10 * exact


# -- one-dimensional exact conditionals -----------------------------------------------------

def _case(kappa=3.0, n=12, seed=0):
    rng = np.random.default_rng(seed)
    base = np.array([0.2, -0.3, 0.1, 0.4])
    X = rng.multinomial(n, np.full(4, 0.25)).astype(float)
    return X, base, kappa


def _unit_logl(X, base, kappa, eta):
    """log-likelihood of one unit as a function of its one increment (vectorized over eta)."""
    th = base[None, :] + np.where(CODE[None, :] == 1, eta[:, None], 0.0)
    return wk.unit_loglik(np.broadcast_to(X, th.shape), th, kappa)


def _grid_draws(logd, grid, n, rng):
    p = np.exp(logd - logd.max())
    cdf = np.cumsum(p)
    cdf /= cdf[-1]
    return np.interp(rng.random(n), cdf, grid), cdf


def _ks(sample, grid, cdf):
    return stats.kstest(sample, lambda v: np.interp(v, grid, cdf)).pvalue


def _assert_moved(out, lam0, corrected: bool):
    """The update is not the identity: an exact slice update moves (almost) every draw; a
    corrected one moves those whose proposal was accepted, here (quadratic surrogates of
    Dirichlet-multinomial cells of 3 to 60 people, far from Gaussian) well over half."""
    assert np.mean(np.abs(out - lam0) > 1e-12) > (0.5 if corrected else 0.9)


def _assert_far_from_gaussian(grid, cdf, n):
    """Power: the KS distance D between the conditional and the normal with its mean and sd is
    so large that a sample of ``n`` from that normal would be rejected at level ALPHA (its
    statistic sqrt(n) D, up to O(1) noise, exceeds the critical value by more than 1), so
    Gaussian proposals accepted without the exact ratio would fail the test."""
    pdf = np.diff(cdf, prepend=0.0)
    mean = (pdf * grid).sum()
    sd = np.sqrt((pdf * (grid - mean) ** 2).sum())
    D = np.max(np.abs(stats.norm.cdf(grid, mean, sd) - cdf))
    assert np.sqrt(n) * D > stats.kstwobign.isf(ALPHA) + 1.0


def test_pair_moves_leave_the_exact_conditional_invariant():
    # two sibling units with the same cells; the pair keeps eta_1 + eta_2 = 0 (centred) and
    # the mean raw increment m; the conditional of eta_1 = e is
    #   l(X1, e) + l(X2, -e) - ((m + e)^2 + (m - e)^2) / (2 sigma^2)
    # (all of unit 1's people in the second age group, all of unit 2's in the first: both
    # pull e up, the likelihood saturates, the prior bounds it -- a skewed conditional)
    X1, X2 = np.array([0.0, 5.0, 0.0, 4.0]), np.array([3.0, 0.0, 4.0, 0.0])
    base, kappa = _case()[1], 2.0
    sigma, m = np.array([2.0]), 0.3
    grid = np.linspace(-12, 12, 48001)
    logd = (_unit_logl(X1, base, kappa, grid) + _unit_logl(X2, base, kappa, -grid)
            - ((m + grid) ** 2 + (m - grid) ** 2) / (2 * sigma[0] ** 2))
    rng = np.random.default_rng(11)
    n = 20000
    e0, cdf = _grid_draws(logd, grid, n, rng)
    X = np.concatenate([np.tile(X1, (n, 1)), np.tile(X2, (n, 1))])
    B = np.tile(base, (2 * n, 1))
    eta = np.concatenate([e0, -e0])[:, None]
    delta = eta + m
    u, v = np.arange(n), np.arange(n, 2 * n)
    acc = wk.move_update(rng, X, B, eta, delta, [(u, 1.0), (v, -1.0)], sigma, kappa, CODE)
    assert 0.2 < acc.mean() < 1.0                                       # it moves
    assert np.allclose(eta[u] + eta[v], 0.0) and np.allclose(delta[u] + delta[v], 2 * m)
    assert _ks(eta[u, 0], grid, cdf) > ALPHA
    _assert_far_from_gaussian(grid, cdf, n)


def test_single_moves_leave_the_exact_conditional_invariant():
    # no centring: the conditional of one unit's increment e is l(X, e) - e^2 / (2 sigma^2)
    X1, base, kappa = np.array([0.0, 5.0, 0.0, 4.0]), _case()[1], 2.0    # skewed, as above
    sigma = np.array([2.0])
    grid = np.linspace(-9, 9, 36001)
    logd = _unit_logl(X1, base, kappa, grid) - grid**2 / (2 * sigma[0] ** 2)
    rng = np.random.default_rng(12)
    n = 20000
    e0, cdf = _grid_draws(logd, grid, n, rng)
    eta = e0[:, None].copy()
    delta = eta.copy()
    acc = wk.move_update(rng, np.tile(X1, (n, 1)), np.tile(base, (n, 1)), eta, delta,
                         [(np.arange(n), 1.0)], sigma, kappa, CODE)
    assert 0.2 < acc.mean() < 1.0
    assert np.array_equal(eta, delta)
    assert _ks(eta[:, 0], grid, cdf) > ALPHA
    _assert_far_from_gaussian(grid, cdf, n)


@pytest.mark.parametrize("dof", [1, 2])
def test_scale_draw_is_the_exact_conditional(dof):
    # sigma | delta has density prop. to chi_dof(sigma / s) prod_u N(delta_u; 0, sigma^2)
    # (dof 1: the half-normal, 2: the Rayleigh), written with SciPy's densities
    rng = np.random.default_rng(5)
    s, U = 0.3, 7
    delta = rng.normal(0, 0.2, size=(U, 1))
    grid = np.linspace(1e-4, 3.0, 60001)
    prior = stats.halfnorm(scale=s) if dof == 1 else stats.rayleigh(scale=s)
    logd = prior.logpdf(grid) + stats.norm.logpdf(delta, 0, grid[None, :]).sum(axis=0)
    p = np.exp(logd - logd.max())
    cdf = np.cumsum(p) / p.sum()
    draws = np.array([wk.scale_draw(rng, delta, s, dof)[0] for _ in range(4000)])
    assert _ks(draws, grid, cdf) > ALPHA
    wrong = np.array([wk.scale_draw(rng, delta, 2 * s, dof)[0] for _ in range(4000)])
    assert _ks(wrong, grid, cdf) < ALPHA                                # the test has power
    other = np.array([wk.scale_draw(rng, delta, s, 3 - dof)[0] for _ in range(4000)])
    assert _ks(other, grid, cdf) < ALPHA                                # and tells the priors apart


@pytest.mark.parametrize("dof, several_rows, steps, corrected", [(1, False, 40, False), (2, False, 40, False),
                                                              (2, True, 40, False), (1, False, 1, False),
                                                              (2, True, 40, True), (1, False, 1, True),
                                                              (2, True, 40, "reference")])
def test_noncentred_scale_update_leaves_the_exact_conditional_invariant(dof, several_rows, steps, corrected):
    # three units in one sibling group, standardized increments eps fixed; lambda = log sigma
    # has the conditional -e^{2 lambda}/(2 s^2) + dof lambda + sum_u l(X_u, e^lambda * eps_c_u)
    # (the scaled-chi prior with dof degrees of freedom and the log transform's Jacobian);
    # several_rows: unit 0 owns a fourth row of cells too (members), its l the sum over both;
    # steps 1: the slice's interval one width (2) and no stepping out; corrected: slice sampling
    # on the quadratic surrogate, each proposal corrected to the exact target (delayed acceptance)
    rng = np.random.default_rng(8)
    s = 0.5
    rows = 4 if several_rows else 3
    Xs = [_case(kappa=2.5, n=10, seed=k)[0] for k in range(rows)]
    base, kappa = _case()[1], 2.5
    X = np.stack(Xs)
    B = np.stack([base, base, base, base[::-1]][:rows])
    members = np.array([0, 1, 2, 0]) if several_rows else None
    groups = np.zeros(3, dtype=np.int64)
    eps = np.array([[1.2], [-0.4], [0.7]])
    eps_c = eps - eps.mean()
    grid = np.linspace(-9, 2.5, 46001)
    sg = np.exp(grid)
    logd = -sg**2 / (2 * s * s) + dof * grid
    for r in range(rows):
        logd = logd + _unit_logl(X[r], B[r], kappa, sg * eps_c[r % 3, 0])
    n = 2500
    lam0, cdf = _grid_draws(logd, grid, n, rng)
    out = np.empty(n)
    for j in range(n):
        sigma = np.array([np.exp(lam0[j])])
        new_sigma, new_delta, evals, acc = wk.scale_update_noncentred(
            rng, X, B, eps * sigma, groups, sigma, kappa, CODE, s, prior_dof=dof, members=members, steps=steps,
            width=2.0 if steps == 1 else wk.SLICE_WIDTH, corrected=bool(corrected),
            reference=np.array([-1.0]) if corrected == "reference" else None)
        assert np.allclose(new_delta, eps * new_sigma)                  # eps is kept
        moved = not np.isclose(new_sigma[0], sigma[0], rtol=1e-12, atol=0)
        assert acc == (moved if corrected else 1)                        # a refused proposal keeps the point
        assert evals == 2 if corrected else evals >= 2                   # corrected: the start and the proposal
        out[j] = np.log(new_sigma[0])
    _assert_moved(out, lam0, corrected)
    assert _ks(out, grid, cdf) > ALPHA
    _assert_far_from_gaussian(grid, cdf, n)


@pytest.mark.parametrize("steps, width", [(1, 0.2), (1, 4.0), (2, 0.2), (40, 0.2), (40, 4.0)])
def test_slice_coordinate_leaves_its_target_invariant_whatever_the_stepping_out(steps, width):
    # the log of a Gamma(2) variable (density e^{2v - e^v}, skewed, sd 0.8) as the second
    # coordinate of a point whose first coordinate the update must keep; exact draws, one update
    # each, KS against the exact cdf.  Widths far below the slice (0.2) with few or no steps
    # out are where a wrong interval rule shows; steps 2 makes the random split of Neal's
    # limit (one step out, left or right) matter.
    rng = np.random.default_rng(21)
    n = 4000
    lam0 = np.log(rng.gamma(2.0, size=n))
    out = np.empty(n)
    evals = 0
    for j in range(n):
        new, f, e = wk.slice_coordinate(rng, lambda t: 2 * t[1] - np.exp(t[1]), np.array([0.3, lam0[j]]), 1,
                                        2 * lam0[j] - np.exp(lam0[j]), width, steps)
        assert new[0] == 0.3 and np.isclose(f, 2 * new[1] - np.exp(new[1]))
        out[j], evals = new[1], evals + e
    assert stats.kstest(np.exp(out), stats.gamma(2.0).cdf).pvalue > ALPHA
    assert np.mean(out != lam0) > 0.99
    if steps == 1:
        assert np.all(np.abs(out - lam0) < width)           # no stepping out: never beyond one width
        if width > 1:
            assert evals / n < 3.5                         # a wide interval shrinks in few evaluations


@pytest.mark.parametrize("steps", [1, 40])
def test_corrected_slice_update_leaves_the_target_invariant_whatever_the_surrogate(steps):
    # target: the log of a Gamma(2) variable (density e^{2v - e^v}, skewed, sd 0.8); surrogate:
    # a normal log density centred 0.7 off the target's mode with sd 0.5 (a poor fit).  Exact
    # draws, one update each: the corrected update passes the KS test against the exact law;
    # slice sampling the surrogate alone (its proposals taken without the test) fails it
    # (power); one target evaluation at the start and one for the coordinate
    rng = np.random.default_rng(23)
    n = 4000
    target = lambda t: 2 * t[0] - np.exp(t[0])                          # noqa: E731
    surrogate = lambda t: -0.5 * ((t[0] - np.log(2.0) - 0.7) / 0.5) ** 2  # noqa: E731
    lam0 = np.log(rng.gamma(2.0, size=n))
    out, raw = np.empty(n), np.empty(n)
    accepted = 0
    for j in range(n):
        new, evals, acc = wk.update_log_scales_corrected(rng, target, surrogate, np.array([lam0[j]]), 1.0, steps)
        assert evals == 2 and acc == (new[0] != lam0[j])               # a refusal keeps the point
        out[j], accepted = new[0], accepted + acc
        raw[j] = wk.slice_coordinate(rng, surrogate, np.array([lam0[j]]), 0, surrogate(np.array([lam0[j]])), 1.0,
                                     steps)[0][0]
    assert stats.kstest(np.exp(out), stats.gamma(2.0).cdf).pvalue > ALPHA
    assert stats.kstest(np.exp(raw), stats.gamma(2.0).cdf).pvalue < ALPHA
    assert 0.3 < accepted / n < 0.95                                    # refusals happen; moves too


@pytest.mark.parametrize("steps", [1, 40])
def test_block_corrected_update_leaves_a_correlated_target_invariant(steps):
    # target: t0 the log of a Gamma(2) variable (skewed) and t1 | t0 ~ N(0.8 t0, 0.5^2), so the
    # order of the scan matters; surrogate: independent normals, t0's centred 0.7 off its mode
    # (a poor fit).  Exact draws, one block update each (both coordinates on the surrogate, then
    # one test): t0's law and the residual t1 - 0.8 t0 (N(0, 0.25), independent of t0) pass KS
    # and a correlation test (|r| sqrt(n) ~ N(0, 1) under the law: bound 4, a two-sided
    # 6e-5 level); the scan without its test fails (power); two target evaluations each, and
    # the whole move accepted or refused
    rng = np.random.default_rng(29)
    n = 4000
    target = lambda t: 2 * t[0] - np.exp(t[0]) - 0.5 * ((t[1] - 0.8 * t[0]) / 0.5) ** 2          # noqa: E731
    surrogate = lambda t: -0.5 * ((t[0] - np.log(2.0) - 0.7) / 0.5) ** 2 - 0.5 * t[1] ** 2     # noqa: E731
    t0 = np.log(rng.gamma(2.0, size=n))
    start = np.stack([t0, 0.8 * t0 + 0.5 * rng.standard_normal(n)], axis=1)
    out, raw = np.empty((n, 2)), np.empty((n, 2))
    accepted = 0
    for j in range(n):
        new, evals, acc = wk.update_log_scales_corrected(rng, target, surrogate, start[j], 1.0, steps, block=True)
        assert evals == 2 and acc in (0, 2) and (acc == 2) == bool(np.any(new != start[j]))
        out[j], accepted = new, accepted + (acc == 2)
        t, f = start[j], surrogate(start[j])
        for k in rng.permutation(2):
            t, f, _ = wk.slice_coordinate(rng, surrogate, t, k, f, 1.0, steps)
        raw[j] = t
    for draws, passes in ((out, True), (raw, False)):
        resid = draws[:, 1] - 0.8 * draws[:, 0]
        p = min(stats.kstest(np.exp(draws[:, 0]), stats.gamma(2.0).cdf).pvalue,
                stats.kstest(resid, stats.norm(0.0, 0.5).cdf).pvalue)
        assert (p > ALPHA / 2) == passes
        if passes:
            assert abs(np.corrcoef(draws[:, 0], resid)[0, 1]) * np.sqrt(n) < 4.0
    assert 0.1 < accepted / n < 0.95                                    # refusals happen; moves too
    with pytest.raises(ValueError, match="^corrected must be False, True or 'block'$"):
        wk.scale_update_transport(rng, np.ones((1, 2)), np.zeros((1, 2)), np.zeros((1, 1)), np.zeros(1, dtype=np.int64),
                                  np.array([0.5]), 4.0, np.array([0, 1]), 0.5, corrected="blocks")


def test_scale_updates_refuse_a_bad_reference():
    X = np.stack([_case(n=n, seed=k)[0] for k, n in enumerate((6, 40, 15))])
    B = np.tile(_case()[1], (3, 1))
    groups = np.zeros(3, dtype=np.int64)
    delta = np.array([[0.2], [-0.1], [0.3]])
    for update in (wk.scale_update_transport, wk.scale_update_unit_transport, wk.scale_update_noncentred):
        for bad in (np.array([0.0, 1.0]), np.array([np.nan])):
            with pytest.raises(ValueError, match=r"^reference must be 1 finite log scales$"):
                update(np.random.default_rng(0), X, B, delta, groups, np.array([0.5]), 40.0, CODE, 0.5,
                       corrected=True, reference=bad)


def test_partly_non_centred_scale_update_leaves_the_exact_conditional_invariant():
    # coordinates eps_u = delta_u / sigma^{w_u} held fixed (w differs by unit); the density of
    # lambda = log sigma, written from the model's parts: HalfNormal(sigma; s) * sigma (log
    # transform) * prod_u N(eps_u sigma^{w_u}; 0, sigma^2) sigma^{w_u} (Jacobian of eps -> delta)
    # * prod_u L_u(centred delta)
    rng = np.random.default_rng(9)
    s = 0.5
    X = np.stack([_case(kappa=2.5, n=10, seed=k)[0] for k in range(3)])
    base, kappa = _case()[1], 2.5
    B = np.tile(base, (3, 1))
    groups = np.zeros(3, dtype=np.int64)
    eps = np.array([[1.2], [-0.4], [0.7]])
    w = np.array([[0.1], [0.9], [0.5]])
    grid = np.linspace(-9, 2.5, 46001)
    sg = np.exp(grid)
    d = eps[:, 0][None, :] * sg[:, None] ** w[:, 0][None, :]            # (grid, units)
    logd = stats.halfnorm.logpdf(sg, scale=s) + grid
    logd = logd + (stats.norm.logpdf(d, 0, sg[:, None]) + w[:, 0][None, :] * grid[:, None]).sum(axis=1)
    dc = d - d.mean(axis=1, keepdims=True)
    for u in range(3):
        logd = logd + _unit_logl(X[u], base, kappa, dc[:, u])
    n = 2500
    lam0, cdf = _grid_draws(logd, grid, n, rng)
    out = np.empty(n)
    for j in range(n):
        sigma = np.array([np.exp(lam0[j])])
        new_sigma, new_delta, _, _ = wk.scale_update_noncentred(rng, X, B, eps * sigma ** w, groups, sigma, kappa,
                                                                CODE, s, exponents=w)
        assert np.allclose(new_delta, eps * new_sigma ** w)               # the coordinates are kept
        out[j] = np.log(new_sigma[0])
    assert _ks(out, grid, cdf) > ALPHA
    # power: the fully non-centred update holds other coordinates fixed, so it samples another
    # conditional and fails the same test
    other = np.array([np.log(wk.scale_update_noncentred(rng, X, B, eps * np.exp(l) ** w, groups, np.exp([l]), kappa,
                                                        CODE, s)[0][0]) for l in lam0])
    assert _ks(other, grid, cdf) < ALPHA


def _transport_state(lam, X, B, kappa, code, grouped, xi, nu, order=1):
    """The transport update's coordinates written out (its docstring) for one sibling group of
    all units (or none), at log scales ``lam`` ``(n, K-1)`` on a grid: returns the centred
    increments ``(n, U, K-1)``, the raw ones and the log Jacobian ``(n,)``."""
    K1 = lam.shape[1]
    e = wk.empirical_increments(X, B, code, order)
    _, Q = wk.unit_score_info(X, B + wk.walk_offsets(e, code, order), kappa, code, K1 + 1, order)
    U = X.shape[0]
    Q = np.broadcast_to(Q.mean(axis=0), Q.shape)                       # the units' mean information
    if grouped:
        e = e - e.mean(axis=0)
    P = Q[None] + np.eye(K1)[None, None] * np.exp(-2 * lam)[:, None, None, :]      # (n, U, K1, K1)
    R = np.linalg.cholesky(P)
    eta = (np.einsum("uk,nukl->nul", e, Q[None] @ np.linalg.inv(P))
           + np.einsum("uk,nukl->nul", xi, np.linalg.inv(R)))
    logdet = np.log(np.diagonal(R, axis1=2, axis2=3)).sum(axis=2)                   # (n, U)
    if grouped:
        jac = -(U - 1) * logdet[:, 0] + lam.sum(axis=1)
        return eta, eta + nu[None, None, :] * np.exp(lam)[:, None, :], jac
    return eta, eta, -logdet.sum(axis=1)


def _transport_logd(lam, X, B, kappa, code, grouped, xi, nu, s0, order=1, dof=1):
    eta, delta, jac = _transport_state(lam, X, B, kappa, code, grouped, xi, nu, order)
    sg = np.exp(lam)
    # the scales' prior: a scaled chi with dof degrees of freedom (1 half-normal, 2 Rayleigh)
    logd = (stats.chi.logpdf(sg, dof, scale=s0).sum(axis=1) + lam.sum(axis=1) + jac
            + stats.norm.logpdf(delta, 0, sg[:, None, :]).sum(axis=(1, 2)))
    for u in range(X.shape[0]):
        th = B[u][None, :] + wk.walk_offsets(eta[:, u], code, order)
        logd = logd + wk.unit_loglik(np.broadcast_to(X[u], th.shape), th, kappa)
    return logd


@pytest.mark.parametrize("grouped, steps, corrected", [(True, 40, False), (False, 40, False), (True, 1, False),
                                                       (True, 40, True), (False, 1, True), (True, 40, "reference")])
def test_transport_scale_update_leaves_the_exact_conditional_invariant(grouped, steps, corrected):
    # coordinates (xi, nu) held fixed; the density of lambda = log sigma from the model's parts:
    # HalfNormal(sigma; s0) * sigma (log transform) * prod_u N(delta_u; 0, sigma^2) * the
    # Jacobian of (xi, nu) -> (eta, mean) * prod_u L_u(eta_u)
    rng = np.random.default_rng(11)
    s0 = 0.5
    # cells informative enough (kappa 40: up to 20 effective people per unit) that holding
    # delta / sigma fixed instead is a detectably different conditional (the power check)
    X = np.stack([_case(n=n, seed=k)[0] for k, n in enumerate((6, 40, 15))])
    base, kappa = _case()[1], 40.0
    B = np.tile(base, (3, 1))
    groups = np.zeros(3, dtype=np.int64) if grouped else None
    xi = np.array([[0.9], [-1.3], [0.4]])
    xi = xi - xi.mean() if grouped else xi
    nu = np.array([0.6])
    grid = np.linspace(-7, 2.5, 38001)
    logd = _transport_logd(grid[:, None], X, B, kappa, CODE, grouped, xi, nu, s0)
    n = 2500
    lam0, cdf = _grid_draws(logd, grid, n, rng)
    _assert_invariant_against_noncentred(
        rng, wk.scale_update_transport,
        lambda l: _transport_state(np.array([[l]]), X, B, kappa, CODE, grouped, xi, nu)[1][0],
        lam0, grid, cdf, steps, (X, B, groups, kappa, CODE, s0), None, corrected)


def _assert_invariant_against_noncentred(rng, update, delta_at, lam0, grid, cdf, steps, case, members,
                                         corrected=False):
    """One ``update`` of every exact draw ``lam0`` of a log scale, from the raw increments
    ``delta_at(lam)`` of the update's fixed coordinates: the coordinates are kept, the draws
    move and pass the KS test against ``cdf``; power: the non-centred update from the same
    states (it holds delta / sigma fixed instead, a different conditional) fails it.  ``case``:
    ``(X, B, groups, kappa, code, s0)``; ``corrected``: the update's delayed-acceptance form
    (``"reference"``: with the expansions at the increments of the fixed log scale -1, which
    no draw depends on)."""
    X, B, groups, kappa, code, s0 = case
    width = 2.0 if steps == 1 else wk.SLICE_WIDTH
    ref = np.array([-1.0]) if corrected == "reference" else None
    out = np.empty(lam0.size)
    for j, l in enumerate(lam0):
        new_sigma, new_delta, _, _ = update(rng, X, B, delta_at(l), groups, np.exp([l]), kappa, code, s0,
                                            steps=steps, width=width, corrected=bool(corrected), reference=ref,
                                            **({} if members is None else {"members": members}))
        assert np.allclose(new_delta, delta_at(np.log(new_sigma[0])))     # the coordinates are kept
        out[j] = np.log(new_sigma[0])
    _assert_moved(out, lam0, corrected)
    assert _ks(out, grid, cdf) > ALPHA
    other = np.array([np.log(wk.scale_update_noncentred(rng, X, B, delta_at(l), groups, np.exp([l]), kappa, code, s0,
                                                        members=members)[0][0]) for l in lam0])
    assert _ks(other, grid, cdf) < ALPHA


@pytest.mark.parametrize("order, dof, corrected", [(1, 1, False), (2, 1, False), (2, 2, False), (2, 2, True),
                                                   (2, 2, "block"), (1, 1, "block")])
def test_transport_scale_update_moves_two_scales_jointly_and_exactly(order, dof, corrected):
    # two increments per unit (three age groups), one sibling group: the update slice samples
    # both log scales in turn, so it leaves their joint conditional (2-D quadrature) invariant;
    # KS tests of both margins (level ALPHA / 2 each); order 2: the increments of a second-order
    # walk (their cumulative sums are the steps between age groups); dof 2: the Rayleigh prior
    rng = np.random.default_rng(12)
    code = np.array([0, 1, 2, 0, 1, 2])
    s0, kappa = 0.5, 4.0
    X = np.stack([rng.multinomial(n, np.full(6, 1 / 6)).astype(float) for n in (9, 30, 14)])
    B = np.tile(np.array([0.1, -0.2, 0.3, 0.0, 0.2, -0.1]), (3, 1))
    xi = np.array([[0.8, -0.5], [-1.1, 0.9], [0.3, -0.4]])
    xi = xi - xi.mean(axis=0)
    nu = np.array([0.5, -0.7])
    g = np.linspace(-6, 2.0, 801)
    L0, L1 = np.meshgrid(g, g, indexing="ij")
    lam = np.stack([L0.ravel(), L1.ravel()], axis=1)
    logd = _transport_logd(lam, X, B, kappa, code, True, xi, nu, s0, order, dof)
    p = np.exp(logd - logd.max())
    p /= p.sum()
    n = 2000
    h = g[1] - g[0]
    pick = rng.choice(p.size, size=n, p=p)
    lam0 = lam[pick] + (rng.random((n, 2)) - 0.5) * h                 # uniform within the cell
    groups = np.zeros(3, dtype=np.int64)
    out = np.empty((n, 2))
    for j in range(n):
        sigma = np.exp(lam0[j])
        start = _transport_state(lam0[j][None], X, B, kappa, code, True, xi, nu, order)[1][0]
        out[j] = np.log(wk.scale_update_transport(rng, X, B, start, groups, sigma, kappa, code, s0, order=order,
                                                  prior_dof=dof, corrected=corrected)[0])
    for k in range(2):
        marg = p.reshape(g.size, g.size).sum(axis=1 - k)
        edges = np.r_[g - h / 2, g[-1] + h / 2]
        cdf = np.r_[0.0, np.cumsum(marg)]
        assert stats.kstest(out[:, k], lambda v: np.interp(v, edges, cdf)).pvalue > ALPHA / 2
        # the draws moved: the update is not the identity
        assert np.mean(np.abs(out[:, k] - lam0[:, k]) > 1e-12) > (0.5 if corrected else 0.9)


def _unit_transport_delta(lam, X, B, kappa, code, members, c, xi, order=1):
    """The unit transport's raw increments written out unit by unit (its docstring) at log
    scales ``lam`` ``(n, K-1)``: each unit's information and information-weighted fit summed
    over its rows (``members``) and times ``c``, then ``delta_u = m_u + xi_u R_u^{-1}``.
    Returns ``(n, U, K-1)`` and the log Jacobian ``(n,)``."""
    K1 = lam.shape[1]
    U = xi.shape[0]
    delta = np.empty((lam.shape[0], U, K1))
    jac = np.zeros(lam.shape[0])
    for u in range(U):
        Q, b = np.zeros((K1, K1)), np.zeros(K1)
        for r in np.flatnonzero(members == u):
            e = wk.empirical_increments(X[r:r + 1], B[r:r + 1], code, order)
            _, I = wk.unit_score_info(X[r:r + 1], B[r:r + 1] + wk.walk_offsets(e, code, order), kappa, code,
                                      K1 + 1, order)
            Q, b = Q + I[0], b + I[0] @ e[0]
        for j, lv in enumerate(lam):
            P = c[u] * Q + np.diag(np.exp(-2 * lv))
            R = np.linalg.cholesky(P)
            delta[j, u] = np.linalg.solve(P, c[u] * b) + xi[u] @ np.linalg.inv(R)
            jac[j] -= np.log(np.diag(R)).sum()
    return delta, jac


def _unit_transport_logd(lam, X, B, kappa, code, members, groups, xi, s0, order=1):
    U = xi.shape[0]
    c = np.ones(U) if groups is None else 1.0 - 1.0 / np.bincount(groups)[groups]
    delta, jac = _unit_transport_delta(lam, X, B, kappa, code, members, c, xi, order)
    sg = np.exp(lam)
    logd = (stats.halfnorm.logpdf(sg, scale=s0).sum(axis=1) + lam.sum(axis=1) + jac
            + stats.norm.logpdf(delta, 0, sg[:, None, :]).sum(axis=(1, 2)))
    eta = delta if groups is None else delta - delta.mean(axis=1, keepdims=True)
    for r in range(X.shape[0]):
        th = B[r][None, :] + wk.walk_offsets(eta[:, members[r]], code, order)
        logd = logd + wk.unit_loglik(np.broadcast_to(X[r], th.shape), th, kappa)
    return logd, c


@pytest.mark.parametrize("grouped, steps, corrected", [(True, 40, False), (False, 40, False), (True, 1, False),
                                                       (True, 40, True), (False, 40, "reference")])
def test_unit_transport_scale_update_leaves_the_exact_conditional_invariant(grouped, steps, corrected):
    # five rows of cells with different base profiles, 3 to 60 people, so that the units'
    # information differs: grouped, two units of three and two rows; not, three units of three,
    # one and one rows; the
    # coordinates xi held fixed; the density of lambda = log sigma from the model's parts:
    # HalfNormal(sigma; s0) * sigma (log transform) * prod_u N(delta_u; 0, sigma^2) * the
    # Jacobian of xi -> delta * prod_rows L_r(centred delta of the row's unit)
    rng = np.random.default_rng(13)
    s0, kappa = 0.5, 40.0
    sizes = (30, 3, 60, 12, 8)
    X = np.stack([_case(n=n, seed=k)[0] for k, n in enumerate(sizes)])
    base = _case()[1]
    B = np.stack([base, base[::-1], base + np.array([0.5, 0, -0.5, 0]), base, base[[1, 0, 3, 2]]])
    members = np.array([0, 0, 1, 0, 1]) if grouped else np.array([0, 0, 1, 0, 2])
    U = 2 if grouped else 3
    groups = np.zeros(U, dtype=np.int64) if grouped else None
    xi = np.array([[0.9], [-1.3], [0.4]])[:U]
    grid = np.linspace(-7, 2.5, 19001)
    logd, c = _unit_transport_logd(grid[:, None], X, B, kappa, CODE, members, groups, xi, s0)
    n = 2000
    lam0, cdf = _grid_draws(logd, grid, n, rng)
    _assert_invariant_against_noncentred(
        rng, wk.scale_update_unit_transport,
        lambda l: _unit_transport_delta(np.array([[l]]), X, B, kappa, CODE, members, c, xi)[0][0],
        lam0, grid, cdf, steps, (X, B, groups, kappa, CODE, s0), members, corrected)


def test_sibling_pairs_is_a_matching_within_groups():
    rng = np.random.default_rng(0)
    groups = np.array([0, 0, 0, 1, 1, 2, 2, 2, 2, 3])
    u, v = wk.sibling_pairs(rng, groups)
    both = np.r_[u, v]
    assert both.size == np.unique(both).size                            # disjoint
    assert np.array_equal(groups[u], groups[v])
    assert u.size == 1 + 1 + 2 + 0                                      # floor(size / 2) per group


def _size_ranks(groups, sizes):
    """Each unit's rank in size within its group (ties by index)."""
    rank = np.empty(groups.size, dtype=np.int64)
    for g in np.unique(groups):
        idx = np.flatnonzero(groups == g)
        rank[idx[np.argsort(sizes[idx], kind="stable")]] = np.arange(idx.size)
    return rank


def test_sized_pairs_match_neighbours_in_size_within_groups():
    # each group's units sorted by size are paired by one of three patterns, uniformly per group:
    # ranks (0, 1), (2, 3), ...; (1, 2), (3, 4), ... with an even group's ends then paired
    # together; (0, 2), (1, 3), (4, 6), ... (a last block of two together, of three (0, 2)).
    # Over 400 draws each pattern of each group comes up (P(one never in 400) = (2/3)^400), every
    # pair is two units at most two places apart in the sorted order (or an even group's ends),
    # and a group of two is always paired
    rng = np.random.default_rng(1)
    groups = np.array([0, 0, 0, 0, 0, 1, 1, 1, 2, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 5, 5])
    sizes = np.array([800.0, 6000, 5000, 1800, 4000, 300, 200, 250, 10, 5, 5, 7, 1, 3, 9, 6, 1, 5, 2, 4, 3])
    rank = _size_ranks(groups, sizes)
    n = np.bincount(groups)
    seen = {}
    for _ in range(400):
        u, v = wk.sized_pairs(rng, groups, sizes)
        both = np.r_[u, v]
        assert both.size == np.unique(both).size and np.array_equal(groups[u], groups[v])
        gap = np.abs(rank[v] - rank[u])
        assert np.all((gap == 1) | (gap == 2) | ((gap == n[groups[u]] - 1) & (n[groups[u]] % 2 == 0)))
        assert 3 in groups[u]                                       # a group of two is always paired
        for g in (0, 1, 4, 5):
            sel = groups[u] == g
            seen.setdefault(g, set()).add(tuple(sorted(zip(np.minimum(rank[u], rank[v])[sel],
                                                           np.maximum(rank[u], rank[v])[sel]))))
    assert seen == {0: {((0, 1), (2, 3)), ((1, 2), (3, 4)), ((0, 2), (1, 3))},
                    1: {((0, 1),), ((1, 2),), ((0, 2),)},
                    4: {((0, 1), (2, 3)), ((0, 3), (1, 2)), ((0, 2), (1, 3))},
                    5: {((0, 1), (2, 3), (4, 5)), ((0, 5), (1, 2), (3, 4)), ((0, 2), (1, 3), (4, 5))}}
    with pytest.raises(ValueError, match="sizes"):
        wk.sized_pairs(rng, groups, sizes[:-1])


def test_carried_pairs_of_small_units_get_every_direction():
    # sizes (U = 6, one group, median 3000): the carried update's pairs are near neighbours in
    # size (:func:`sized_pairs`), and a pair of two units under CARRY_SMALL x the median
    # (1,950) gets every one of the 6 directions, the others per_pair = 2; with carry_units, the
    # pairs are among those units, by size among them, and the median is theirs (2,250: 1,900 is
    # then not small, and no pair gets every direction)
    import dataclasses

    import pymc as pm

    from privinfer.pymc import register_walk
    from privinfer.pymc.walk import CARRY_SMALL, carried_pairs

    sizes = np.array([800.0, 6000, 1900, 2600, 3400, 9000])
    U, d = sizes.size, 4
    with pm.Model():
        scales = pm.HalfNormal("s", 1.0, shape=(3,))
        inc = pm.Normal("d", 0.0, 1.0, shape=(U, 3))
        latent = pm.Normal("x", 0.0, 1.0, shape=(U * d,))
        info = register_walk(scales=scales, increments=inc, prior_scale=1.0, base=np.zeros((U, d)), kappa=1.0,
                             weights=np.zeros((U, 3)), latent=latent, grid=np.arange(U * d).reshape(U, d),
                             code=np.arange(d), groups=np.zeros(U, dtype=np.int64), carry=np.full(U * d, 0.5),
                             order=2, sizes=sizes)
    rng = np.random.default_rng(0)
    chosen = np.array([True, False, True, True, False, True])
    for units, median, all_counts in ((None, 3000.0, {0, 1}), (chosen, 2250.0, {0})):
        walk = dataclasses.replace(info, carry_units=units)
        keep = np.ones(U, dtype=bool) if units is None else units
        rank = _size_ranks(np.where(keep, 0, 1), sizes)               # ranks in size among the carried
        n = int(keep.sum())
        got_all = set()
        for _ in range(40):
            (u, v), k = carried_pairs(rng, walk, U, 6, per_pair=2)
            np.testing.assert_array_equal(k, np.where(np.maximum(sizes[u], sizes[v]) < CARRY_SMALL * median, 6, 2))
            gap = np.abs(rank[u] - rank[v])
            assert np.all(keep[u] & keep[v]) and np.all((gap == 1) | (gap == 2) | (gap == n - 1)) and u.size == n // 2
            got_all.add(int(np.sum(k == 6)))
        assert got_all == all_counts       # (800, 1900) is a pair one time in three (each (2/3)^40 to miss)
    (u, v), k = carried_pairs(rng, dataclasses.replace(info, sizes=None), U, 6, per_pair=2)
    assert k == 2 and u.size == U // 2


def test_empirical_increments_fit_the_category_totals():
    X = np.array([[10.0, 30.0, 20.0, 40.0]])
    base = np.zeros((1, 4))
    eta = wk.empirical_increments(X, base, CODE)
    assert np.isclose(eta[0, 0], np.log(70.5 / 30.5))


def test_walk_gibbs_refuses_what_it_cannot_sample():
    import pymc as pm

    from census_helpers import random_frame
    from privinfer.census import hierarchy_measurements, hierarchy_model
    from privinfer.pymc import WalkGibbs

    f = random_frame(3, counties=3, max_tracts=2)
    mech = hierarchy_measurements(f, geography=["county", "tract"], attributes=["sex", "age"],
                                  queries={"total": (), "sex_age": ("sex", "age")}, rho=0.05)
    rel = mech.publish(f["count"], rng=3)
    model = hierarchy_model(rel, smooth="age", walk_steps="gibbs")
    with model:
        with pytest.raises(ValueError, match="together"):
            WalkGibbs(vars=[model["step_scale_age"]])
        for bad in (0, 1.5):
            with pytest.raises(ValueError, match="^slice_steps must be an integer >= 1$"):
                WalkGibbs(slice_steps=bad)
        with pytest.raises(ValueError, match="^scale_surrogate must be None, True, False or 'block'$"):
            WalkGibbs(scale_surrogate="yes")
        model["noncentering_age"].set_value(np.full(model["noncentering_age"].get_value().shape, 0.5))
        with pytest.raises(ValueError, match="centred"):
            WalkGibbs()
    with hierarchy_model(rel, smooth="age", walk_steps="nuts"):
        with pytest.raises(ValueError, match="a walk registered"):
            WalkGibbs()
    from privinfer.pymc.registry import model_registry

    model = hierarchy_model(rel, smooth="age", walk_steps="gibbs")
    info = model_registry(model)["lattice"]["x"]
    info.releases.append(info.releases[0])          # observed twice: no one measurement file
    with model:
        with pytest.raises(ValueError, match="^WalkGibbs .carried update. needs 'x' observed through exactly one"):
            WalkGibbs()


def test_register_walk_refuses_bad_carry_fractions():
    import pymc as pm

    from privinfer.pymc import register_walk

    with pm.Model():
        scales = pm.HalfNormal("s", 1.0, shape=(2,))
        inc = pm.Normal("d", 0.0, 1.0, shape=(2, 2))
        latent = pm.Normal("x", 0.0, 1.0, shape=(6,))
        kw = dict(scales=scales, increments=inc, prior_scale=1.0, base=np.zeros((2, 3)), kappa=1.0,
                  weights=np.zeros((2, 2)), latent=latent, grid=np.arange(6).reshape(2, 3), code=np.arange(3))
        with pytest.raises(ValueError, match="carry"):
            register_walk(**kw, carry=np.full(5, 0.5))
        with pytest.raises(ValueError, match="carry"):
            register_walk(**kw, carry=np.full(6, 1.5))
        with pytest.raises(ValueError, match="carry_units needs carry"):
            register_walk(**kw, carry_units=np.array([True, False]))
        with pytest.raises(ValueError, match="carry_units must be 2 booleans"):
            register_walk(**kw, carry=np.full(6, 0.5), carry_units=np.array([1, 0]))
        with pytest.raises(ValueError, match="^sizes needs carry fractions"):
            register_walk(**kw, sizes=np.array([3.0, 4.0]))
        for bad in (np.array([3.0, 0.0]), np.array([3.0, np.nan]), np.ones(3)):
            with pytest.raises(ValueError, match="^sizes must be 2 finite positive numbers, one per unit$"):
                register_walk(**kw, carry=np.full(6, 0.5), sizes=bad)
        with pytest.raises(ValueError, match="^lump needs carry fractions"):
            register_walk(**kw, lump=np.ones(6, dtype=bool))
        for bad in (np.ones(5, dtype=bool), np.ones(6)):
            with pytest.raises(ValueError, match="^lump must be 6 booleans, one per cell$"):
                register_walk(**kw, carry=np.full(6, 0.5), lump=bad)


def test_register_walk_refuses_bad_members():
    # a walk of 2 units over 3 rows of cells: every row needs its unit, every unit a row (such a
    # walk may have a carried update); a variable belongs to one walk
    import pymc as pm

    from privinfer.pymc import register_walk

    with pm.Model():
        scales = pm.HalfNormal("s", 1.0, shape=(2,))
        inc = pm.Normal("d", 0.0, 1.0, shape=(2, 2))
        latent = pm.Normal("x", 0.0, 1.0, shape=(9,))
        kw = dict(scales=scales, increments=inc, prior_scale=1.0, base=np.zeros((3, 3)), kappa=1.0,
                  weights=np.zeros((2, 2)), latent=latent, grid=np.arange(9).reshape(3, 3), code=np.arange(3))
        with pytest.raises(ValueError, match="3 rows for 2 units"):
            register_walk(**kw)
        for bad in ([0, 1], [0, 0, 0], [0, 1, 2], [0.0, 1.0, 1.0], [-1, 0, 1]):
            with pytest.raises(ValueError, match="members must give every row"):
                register_walk(**kw, members=np.array(bad))
        info = register_walk(**kw, members=np.array([1, 0, 1]), carry=np.full(9, 0.5))
        assert info.members.tolist() == [1, 0, 1] and info.carry.shape == (9,)
        with pytest.raises(ValueError, match="already belongs"):
            register_walk(**kw, members=np.array([1, 0, 1]))


def test_scale_prior_reads_the_step_scales_prior_from_the_model():
    # WalkGibbs's exact draws are written for a scaled chi prior (1 or 2 degrees of freedom);
    # the prior is read from the model's own variable, any other is refused, and a prior_scale
    # that disagrees with the variable's is an error rather than a silently different posterior
    import pymc as pm

    from privinfer.pymc import register_walk
    from privinfer.pymc.walk import scale_prior

    with pm.Model():
        assert scale_prior(pm.HalfNormal("h", 0.3, shape=(2,))) == (1, pytest.approx(0.3, rel=1e-12))
        assert scale_prior(pm.Weibull("r", alpha=2.0, beta=0.3 * np.sqrt(2), shape=(2,))) == (
            2, pytest.approx(0.3, rel=1e-12))
        for bad in (pm.Exponential("e", 1.0, shape=(2,)), pm.Weibull("w", alpha=1.5, beta=1.0, shape=(2,)),
                    pm.HalfNormal("v", sigma=np.array([0.3, 0.4]), shape=(2,))):
            with pytest.raises(ValueError, match="step scales"):
                scale_prior(bad)
        free = pm.HalfNormal("free_scale", 1.0)
        with pytest.raises(ValueError, match="constant"):
            scale_prior(pm.HalfNormal("hyper", sigma=free, shape=(2,)))
        inc = pm.Normal("d", 0.0, 1.0, shape=(2, 2))
        latent = pm.Normal("x", 0.0, 1.0, shape=(6,))
        kw = dict(increments=inc, base=np.zeros((2, 3)), kappa=1.0, weights=np.zeros((2, 2)), latent=latent,
                  grid=np.arange(6).reshape(2, 3), code=np.arange(3))
        with pytest.raises(ValueError, match="prior_scale=0.5 differs"):
            register_walk(scales=pm.Weibull("s", alpha=2.0, beta=0.3 * np.sqrt(2), shape=(2,)), prior_scale=0.5, **kw)
        info = register_walk(scales=pm.Weibull("s2", alpha=2.0, beta=0.3 * np.sqrt(2), shape=(2,)), prior_scale=0.3,
                             **kw)
        assert (info.prior_dof, info.prior_scale) == (2, pytest.approx(0.3, rel=1e-12))


@pytest.mark.parametrize("spacing", [None, (0.5, 1.0, 1.5)])
def test_second_order_score_and_information_are_the_chain_rule_of_the_first_order_ones(spacing):
    # order 2: the steps between categories are diag(h) cumsum(eta) = eta M^T (M = diag(h) C, C
    # lower-triangular ones, h the spacing, 1 without); the gradient is M^T g (checked against
    # central differences of the exact log-likelihood) and the information M^T I M
    rng = np.random.default_rng(3)
    code = np.array([0, 1, 2, 3, 0, 1, 2, 3])
    X = rng.multinomial(60, np.full(8, 1 / 8)).astype(float)[None]
    B = rng.normal(0, 0.3, (1, 8))
    eta = rng.normal(0, 0.2, (1, 3))
    kappa = 25.0
    g2, I2 = wk.unit_score_info(X, B + wk.walk_offsets(eta, code, 2, spacing), kappa, code, 4, 2, spacing)
    g1, I1 = wk.unit_score_info(X, B + wk.walk_offsets(eta, code, 2, spacing), kappa, code, 4)
    M = np.diag(np.ones(3) if spacing is None else spacing) @ np.tril(np.ones((3, 3)))
    np.testing.assert_allclose(g2[0], M.T @ g1[0], rtol=1e-12)
    np.testing.assert_allclose(I2[0], M.T @ I1[0] @ M, rtol=1e-12)
    h = 1e-6
    fd = [(wk.unit_loglik(X, B + wk.walk_offsets(eta + h * e, code, 2, spacing), kappa)[0]
           - wk.unit_loglik(X, B + wk.walk_offsets(eta - h * e, code, 2, spacing), kappa)[0]) / (2 * h)
          for e in np.eye(3)]
    np.testing.assert_allclose(g2[0], fd, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(wk.walk_offsets(eta, code, 2, spacing), wk.walk_offsets(eta @ M.T, code))
    e2 = wk.empirical_increments(X, B, code, 2, spacing)
    np.testing.assert_allclose(e2 @ M.T, wk.empirical_increments(X, B, code), atol=1e-12)


@pytest.mark.parametrize("spacing", [None, (0.6, 1.4)])
def test_second_order_pair_moves_leave_the_exact_conditional_invariant(spacing):
    # three age groups, a second-order walk (with unequal spacing too): two siblings' increments
    # (2-D) move by +-Delta; the conditional of the first unit's centred increments on a 2-D grid;
    # KS of both margins
    code = np.array([0, 1, 2, 0, 1, 2])
    X1 = np.array([1.0, 6.0, 0.0, 2.0, 5.0, 1.0])
    X2 = np.array([4.0, 0.0, 3.0, 5.0, 1.0, 2.0])
    base = np.array([0.1, -0.2, 0.3, 0.0, 0.2, -0.1])
    kappa, sigma, m = 3.0, np.array([1.0, 0.7]), np.array([0.2, -0.1])
    g = np.linspace(-6, 6, 601)
    E0, E1 = np.meshgrid(g, g, indexing="ij")
    e = np.stack([E0.ravel(), E1.ravel()], axis=1)
    logd = (wk.unit_loglik(np.broadcast_to(X1, (e.shape[0], 6)), base + wk.walk_offsets(e, code, 2, spacing), kappa)
            + wk.unit_loglik(np.broadcast_to(X2, (e.shape[0], 6)), base + wk.walk_offsets(-e, code, 2, spacing),
                             kappa)
            - (((m + e) ** 2 + (m - e) ** 2) / (2 * sigma**2)).sum(axis=1))
    p = np.exp(logd - logd.max())
    p /= p.sum()
    rng = np.random.default_rng(13)
    n = 8000
    h = g[1] - g[0]
    e0 = e[rng.choice(p.size, size=n, p=p)] + (rng.random((n, 2)) - 0.5) * h
    X = np.concatenate([np.tile(X1, (n, 1)), np.tile(X2, (n, 1))])
    eta = np.concatenate([e0, -e0])
    delta = eta + m
    u, v = np.arange(n), np.arange(n, 2 * n)
    acc = wk.move_update(rng, X, np.tile(base, (2 * n, 1)), eta, delta, [(u, 1.0), (v, -1.0)], sigma, kappa, code, 2,
                         spacing)
    assert 0.2 < acc.mean() < 1.0
    for k in range(2):
        marg = p.reshape(g.size, g.size).sum(axis=1 - k)
        edges = np.r_[g - h / 2, g[-1] + h / 2]
        cdf = np.r_[0.0, np.cumsum(marg)]
        assert stats.kstest(eta[u, k], lambda v: np.interp(v, edges, cdf)).pvalue > ALPHA / 2


def test_scoring_steps_that_overshoot_into_non_finite_values_are_halved():
    # log p(D) = log D - D (mode 1), not finite for D <= 0 as the walk's score is not where the
    # category shares underflow.  Newton's step D -> 2D - D^2 (error e -> e^2) overshoots the
    # domain from D >= 2 (from 3 it lands at -3, from 5 at -15); halved, it lands inside, and
    # from there the error squares each step.  The loop stops once the Newton decrement
    # (1 - D)^2 of a step is below NEWTON_TOL, so the error after it is below NEWTON_TOL.
    # Without backtracking the moves from 3 and 5 are lost (flagged).
    def score(D, rows):
        with np.errstate(divide="ignore"):
            inside = D > 0
            return np.where(inside, 1.0 / D - 1.0, np.nan), np.where(inside, 1.0 / D**2, np.nan)[..., None]

    D, Q, L, ok = wk._newton(score, np.array([[3.0], [5.0], [0.5], [1.2]]), wk.MAX_NEWTON)
    assert ok.all()
    assert np.all(np.abs(D[:, 0] - 1.0) < wk.NEWTON_TOL)
    assert np.allclose(L[:, 0, 0], 1.0 / D[:, 0])


def test_proposals_into_non_finite_values_are_rejected_quietly():
    # a target like the walk's when a proposal underflows a category share: log 0 = -inf for
    # D > 0 (NumPy's divide-by-zero), so every such proposal must be rejected, the others kept
    # with their exact ratio, and no floating-point error raised (the caller's errstate is
    # strict here)
    rng = np.random.default_rng(3)
    n = 400

    def target(D, moves=None):           # elementwise: the moves given alone are rows of D
        return np.log(np.where(D[:, 0] > 0, 0.0, 1.0)) - 0.5 * D[:, 0] ** 2

    def score(D, rows):
        return -D, np.ones((rows.size, 1, 1))

    with np.errstate(all="raise"):
        step, accept = wk.laplace_mh(rng, target, score, np.zeros((n, 1)))
    assert np.all(step[accept, 0] <= 0) and np.all(step[~accept, 0] == 0)
    assert 0.2 < accept.mean() < 0.8                    # about half the proposals are negative


@pytest.mark.parametrize("order, spacing", [(1, None), (2, None), (2, (0.5, 1.0, 2.0, 0.7, 1.1, 0.7))])
def test_increments_from_steps_inverts_slopes(order, spacing):
    eta = np.random.default_rng(5).normal(size=(4, 6))
    assert np.allclose(wk.increments_from_steps(wk.slopes(eta, order, spacing), order, spacing), eta)
    assert np.allclose(wk.slopes(wk.increments_from_steps(eta, order, spacing), order, spacing), eta)


# -- units of several rows (a county's walk over its tracts) ---------------------------------

def test_pair_moves_of_units_owning_several_rows_leave_the_exact_conditional_invariant():
    # unit 1 owns two rows of cells with their own base profiles (two tracts of one county),
    # unit 2 one row; the pair keeps eta_1 + eta_2 = 0 and the mean m; the conditional of e is
    #   l(X1a, b_a, e) + l(X1b, b_b, e) + l(X2, b, -e) - ((m + e)^2 + (m - e)^2) / (2 sigma^2)
    X1a, X1b, X2 = np.array([0.0, 3.0, 0.0, 2.0]), np.array([0.0, 1.0, 0.0, 1.0]), np.array([3.0, 0.0, 4.0, 0.0])
    base = _case()[1]
    b_a, b_b = base, base[::-1].copy()
    kappa, sigma, m = 2.0, np.array([2.0]), 0.3
    grid = np.linspace(-12, 12, 48001)
    logd = (_unit_logl(X1a, b_a, kappa, grid) + _unit_logl(X1b, b_b, kappa, grid) + _unit_logl(X2, base, kappa, -grid)
            - ((m + grid) ** 2 + (m - grid) ** 2) / (2 * sigma[0] ** 2))
    rng = np.random.default_rng(17)
    n = 20000
    e0, cdf = _grid_draws(logd, grid, n, rng)
    # rows: pair j's unit j owns rows j and n + j, unit n + j owns row 2n + j
    X = np.concatenate([np.tile(X1a, (n, 1)), np.tile(X1b, (n, 1)), np.tile(X2, (n, 1))])
    B = np.concatenate([np.tile(b_a, (n, 1)), np.tile(b_b, (n, 1)), np.tile(base, (n, 1))])
    members = np.concatenate([np.arange(n), np.arange(n), np.arange(n, 2 * n)])
    order = rng.permutation(3 * n)                                     # rows in any order
    eta = np.concatenate([e0, -e0])[:, None]
    delta = eta + m
    u, v = np.arange(n), np.arange(n, 2 * n)
    acc = wk.move_update(rng, X[order], B[order], eta, delta, [(u, 1.0), (v, -1.0)], sigma, kappa, CODE,
                         members=members[order])
    assert 0.2 < acc.mean() < 1.0
    assert np.allclose(eta[u] + eta[v], 0.0) and np.allclose(delta[u] + delta[v], 2 * m)
    assert _ks(eta[u, 0], grid, cdf) > ALPHA
    _assert_far_from_gaussian(grid, cdf, n)
    # power: the same moves with unit 1's second row ignored target another conditional
    eta_w = np.concatenate([e0, -e0])[:, None]
    keep = (order < n) | (order >= 2 * n)
    wk.move_update(rng, X[order][keep], B[order][keep], eta_w, eta_w + m, [(u, 1.0), (v, -1.0)], sigma, kappa, CODE,
                   members=members[order][keep])
    assert _ks(eta_w[u, 0], grid, cdf) < ALPHA


def test_mode_moves_go_to_the_mode_of_the_exact_conditional():
    # WalkGibbs's first warm-up iteration: every move to the maximum of its conditional (here the
    # skewed pair conditional of test_pair_moves_leave_the_exact_conditional_invariant, found on
    # the grid), from far-off starts, whatever the current state
    X1, X2 = np.array([0.0, 5.0, 0.0, 4.0]), np.array([3.0, 0.0, 4.0, 0.0])
    base, kappa = _case()[1], 50.0
    sigma, m = np.array([2.0]), 0.3
    grid = np.linspace(-12, 12, 240001)
    logd = (_unit_logl(X1, base, kappa, grid) + _unit_logl(X2, base, kappa, -grid)
            - ((m + grid) ** 2 + (m - grid) ** 2) / (2 * sigma[0] ** 2))
    e0 = np.array([-3.0, 0.0, 0.5, 4.0])
    n = e0.size
    eta = np.concatenate([e0, -e0])[:, None]
    delta = eta + m
    u, v = np.arange(n), np.arange(n, 2 * n)
    X = np.concatenate([np.tile(X1, (n, 1)), np.tile(X2, (n, 1))])
    ok = wk.move_update(np.random.default_rng(0), X, np.tile(base, (2 * n, 1)), eta, delta, [(u, 1.0), (v, -1.0)],
                        sigma, kappa, CODE, mode=True)
    assert ok.all()
    # the scoring stops at a Newton decrement below NEWTON_TOL: within about sqrt(NEWTON_TOL)
    # conditional sds of the mode
    sd = 1.0 / np.sqrt(-np.gradient(np.gradient(logd, grid), grid)[np.argmax(logd)])
    np.testing.assert_allclose(eta[u, 0], grid[np.argmax(logd)], atol=np.sqrt(wk.NEWTON_TOL) * sd + 1e-4)
    np.testing.assert_allclose(eta[u] + eta[v], 0.0)


def test_unit_rows_finds_every_row_of_the_moved_units():
    members = np.array([2, 0, 2, 1, 0])
    rows, at = wk.unit_rows(np.array([2, 1]), members, 3)
    assert rows.tolist() == [0, 2, 3] and at.tolist() == [0, 0, 1]
    rows, at = wk.unit_rows(np.array([2, 1]), None, 3)
    assert rows.tolist() == [2, 1] and at is None


def test_scale_update_default_follows_the_walk_s_registration():
    # "transport" (the default) resolves per walk: rows = units keep the transport; a walk whose
    # units span several rows gets the per-unit transport, unless it was registered with
    # non-centring exponents, which only the non-centred update uses (asking for a transport
    # with exponents is an error, never a silent drop of the exponents)
    import dataclasses

    from privinfer.pymc.registry import WalkInfo
    from privinfer.pymc.walk import resolve_scale_update

    plain = WalkInfo(scales="s", increments="d", prior_scale=1.0, base=None, kappa=None, weights=None, latent="x",
                     grid=np.arange(6).reshape(2, 3), code=np.arange(3))
    members = dataclasses.replace(plain, members=np.array([0, 1]))
    both = dataclasses.replace(members, exponents=np.ones((2, 2)))
    exps = dataclasses.replace(plain, exponents=np.ones((2, 2)))
    assert [resolve_scale_update("transport", i) for i in (plain, members, both)] == [
        "transport", "unit_transport", "noncentred"]
    assert [resolve_scale_update("noncentred", i) for i in (plain, members, both, exps)] == ["noncentred"] * 4
    assert resolve_scale_update("unit_transport", members) == "unit_transport"
    for info, asked in ((exps, "transport"), (both, "unit_transport"), (exps, "unit_transport")):
        with pytest.raises(ValueError, match="exponents apply to scale_update='noncentred' only"):
            resolve_scale_update(asked, info)
    with pytest.raises(ValueError, match="scale_update must be"):
        resolve_scale_update("centred", plain)


@pytest.mark.parametrize("p, a, b", [(-3.0, 11.1, 0.3), (-0.5, 100.0, 0.01), (-3.0, 1000.0, 50.0), (1.5, 2.0, 3.0),
                                     (-540.5, 11.1, 5.0)])
def test_gig_draw_has_the_generalized_inverse_gaussian_law(p, a, b):
    # against SciPy's sampler of the same law (two-sample KS, 20,000 draws each; SciPy's cdf
    # does not converge at p = -540.5): rejection with acceptance about 0.66 (first case), 0.3,
    # about 0 (the fallback to SciPy after GIG_ROUNDS), p >= 0 (SciPy alone) and the Kentucky
    # tracts' scale (1,083 units), where it accepts nearly always
    rng = np.random.default_rng(11)
    draws = np.concatenate([wk.gig_draw(rng, p, a, np.full(20, b)) for _ in range(1000)])
    ref = stats.geninvgauss.rvs(p, np.sqrt(a * b), scale=np.sqrt(b / a), size=20000, random_state=rng)
    assert stats.ks_2samp(draws, ref).pvalue > ALPHA
    if p == -3.0 and a == 11.1:     # power: the proposal alone, IG(-p, b/2), is told apart
        proposal = 0.5 * b / rng.gamma(-p, size=20000)
        assert stats.ks_2samp(proposal, ref).pvalue < ALPHA
