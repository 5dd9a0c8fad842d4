"""Projected / extended Gaussian and Laplace mechanisms (Subspace DP full paper, Sec. 3.3)."""

import numpy as np
import pytest
from scipy import integrate, stats

from privinfer import accounting
from privinfer import invariants as I
from privinfer.mechanisms import (
    ExtendedGaussian,
    ExtendedLaplace,
    ProjectedGaussian,
    ProjectedLaplace,
    null_sensitivity,
    projected_laplace_row_marginal_logp,
)

INV = I.margins((3, 4), [(0,), (1,)])  # n = 12, rank 6
X = np.arange(12, dtype=float) * 3.0 + 1.0


def _all_mechs(inv=INV):
    return [
        ProjectedGaussian(inv, 1.0, 1e-5, 1.0),
        ExtendedGaussian(inv, 1.0, 1e-5, query=np.eye(inv.n)),
        ProjectedLaplace(inv, 1.0, 2.0),
        ExtendedLaplace(inv, 1.0, query=np.eye(inv.n)),
    ]


@pytest.mark.parametrize("mech", _all_mechs(), ids=lambda m: type(m).__name__)
def test_invariant_kept_on_every_draw(mech):
    ys = mech.release(np.tile(X, (500, 1)), rng=11)
    assert ys.shape == (500, 12)
    assert np.all(INV.satisfied_by(ys, INV.of(X)))
    # large counts: the tolerance is relative to the scale of x
    big = X * 1e7
    yb = mech.release(np.tile(big, (50, 1)), rng=12)
    assert np.all(INV.satisfied_by(yb, INV.of(big)))
    # the numpy likelihood is finite on every draw (projected Laplace with 6 rows: augmented form)
    if isinstance(mech, ProjectedLaplace):
        assert np.all(np.isfinite(mech.augmented_logp(ys[:20], X, np.zeros((20, 6)))))
    else:
        assert np.all(np.isfinite(mech.logp(ys[:20], X)))


@pytest.mark.parametrize("mech", _all_mechs(), ids=lambda m: type(m).__name__)
def test_unbiased_and_mse(mech):
    N = 20000
    e = mech.release(np.tile(X, (N, 1)), rng=21) - X
    # unbiasedness (Cor. 21): per-coordinate mean within 5 standard errors sqrt(Var e_i / N),
    # Var e_i = diag of sigma^2 P_N (Gaussian) or 2 b^2 P_N (Laplace, Cov g = 2b^2 I)
    scale2 = mech.sigma**2 if hasattr(mech, "sigma") else 2 * mech.scale**2
    if isinstance(mech, ExtendedLaplace):
        var = scale2 * np.sum(mech.null_basis**2, axis=1)
    else:
        var = scale2 * np.diag(INV.project_null(np.eye(12)))
    assert np.all(np.abs(e.mean(0)) < 5 * np.sqrt(var / N))
    # MSE = (n - r) sigma^2 (Cor. 14 / 15) or (n - r) 2 b^2: within 5 standard errors of the
    # mean of ||e||^2, whose sd is estimated from the draws
    sq = np.sum(e**2, axis=1)
    assert mech.mean_squared_error == pytest.approx((12 - 6) * scale2)
    assert abs(sq.mean() - mech.mean_squared_error) < 5 * sq.std() / np.sqrt(N)


def test_error_formulas_cor14_cor15():
    eps, delta, sens = 0.7, 1e-8, 1.0
    c = accounting.gaussian_constant(eps, delta)
    pg = ProjectedGaussian(INV, eps, delta, sens)
    assert pg.mean_squared_error == pytest.approx((12 - 6) * c**2 * sens**2)
    # Delta_2(Q_N^T A) for A = I (add-remove): max_j ||Q_N^T e_j||, computed directly here
    Q = INV.null_basis()
    d2 = np.max(np.linalg.norm(Q, axis=1))
    eg = ExtendedGaussian(INV, eps, delta, query=np.eye(12))
    assert eg.sigma == pytest.approx(c * d2)
    assert eg.mean_squared_error == pytest.approx((12 - 6) * c**2 * d2**2)
    assert eg.mean_squared_error <= pg.mean_squared_error
    # replace-one neighbours: max_{j != l} ||Q^T (e_j - e_l)||
    pairs = max(np.linalg.norm(Q[j] - Q[l]) for j in range(12) for l in range(12) if j != l)
    assert null_sensitivity(INV, np.eye(12), 2, "replace") == pytest.approx(pairs)
    d1 = np.max(np.abs(Q).sum(axis=1))
    assert ExtendedLaplace(INV, 2.0, query=np.eye(12)).scale == pytest.approx(d1 / 2.0)


def test_theorem22_projection_equals_conditioning():
    # Thm 22: x + P_N g has the law of x + g | C g = 0.  Gaussian conditioning of N(0, s^2 I) on
    # C g = 0 (C of full row rank) gives covariance s^2 (I - C^T (C C^T)^{-1} C).
    C = np.array([[1.0, 1, 1, 0, 0], [0, 1, -1, 2, 1]])
    inv = I.Invariant(C)
    s = 1.5
    mech = ProjectedGaussian(inv, sigma=s)
    cond = s**2 * (np.eye(5) - C.T @ np.linalg.solve(C @ C.T, C))
    np.testing.assert_allclose(mech.covariance, cond, atol=1e-12)
    N = 40000
    e = mech.release(np.zeros((N, 5)), rng=31)
    emp = e.T @ e / N
    # entrywise standard error of a sample covariance: sqrt((S_ii S_jj + S_ij^2)/N); 5 SE
    se = np.sqrt((np.outer(np.diag(cond), np.diag(cond)) + cond**2) / N)
    assert np.all(np.abs(emp - cond) < 5 * se + 1e-12)
    # the degenerate Gaussian density equals the conditional density of N(0, s^2 I) given C g = 0:
    # in null coordinates w = Q^T e it is N(0, s^2 I_{n-r})
    Q = inv.null_basis()
    y = mech.release(np.zeros(5), rng=32)
    assert mech.logp(y, np.zeros(5)) == pytest.approx(stats.norm(0, s).logpdf(Q.T @ y).sum(), rel=1e-10)


def test_logp_off_support_is_minus_inf():
    one_row = I.total(12)
    for mech in _all_mechs()[:2] + [ExtendedLaplace(INV, scale=1.0), ProjectedLaplace(one_row, scale=1.0)]:
        y = mech.release(X, rng=41)
        bad = y.copy()
        bad[0] += 0.1
        assert mech.logp(bad, X) == -np.inf


def test_extended_laplace_logp_explicit():
    mech = ExtendedLaplace(INV, scale=0.7)
    y = mech.release(X, rng=51)
    w = INV.null_basis().T @ (y - X)
    assert mech.logp(y, X) == pytest.approx(stats.laplace(0, 0.7).logpdf(w).sum(), rel=1e-10)


def test_projected_laplace_marginal_equals_integrated_augmentation():
    # one-row invariant with unequal weights; the exact marginal must equal the 1-d integral of
    # exp(augmented_logp) over the latent row coordinate (numerical quadrature as reference)
    inv = I.Invariant([[1.0, 2.0, -1.0, 0.5]])
    mech = ProjectedLaplace(inv, scale=0.9)
    u = inv.row_basis()[:, 0]
    x = np.array([3.0, 1.0, 4.0, 1.0])
    for seed in range(4):
        y = mech.release(x, rng=seed)
        d = y - x
        f = lambda r: np.exp(mech.augmented_logp(y, x, np.array([r])))  # noqa: E731
        bps = sorted(-d[u != 0] / u[u != 0])
        val, err = integrate.quad(f, bps[0] - 60, bps[-1] + 60, points=bps, limit=500, epsabs=0, epsrel=1e-11)
        assert mech.logp(y, x) == pytest.approx(np.log(val), abs=1e-7)
    # direct function on a hand example: n = 2, u = (1, 1)/sqrt2, d = (a, -a)/... p(d) has closed form
    # S(rho) = |a + rho/sqrt2| + |-a + rho/sqrt2| = max(2|a|, sqrt2 |rho|); integral = 4|a| e^{-2|a|/b}/sqrt2 + 2 b e^{-2|a|/b}/sqrt2
    a, b = 0.8, 1.3
    uu = np.array([1.0, 1.0]) / np.sqrt(2)
    want = np.log((2 * np.sqrt(2) * a + np.sqrt(2) * b) * np.exp(-2 * a / b) / (2 * b) ** 2)
    assert projected_laplace_row_marginal_logp(np.array([a, -a]), uu, b) == pytest.approx(want, rel=1e-12)


def test_projected_laplace_augmentation_two_rows():
    # C = [[1,1,0,0],[0,0,1,1]]: the noise splits into two independent one-row blocks, so p(y|x)
    # is the product of two exact 1-row marginals.  The augmented density is integrated over
    # r = R^T R0 rho, R0 = the block basis (a rotation of the row basis: unit Jacobian, and
    # R R^T R0 = R0), where it factorizes into two 1-d integrals done by quadrature.
    inv = I.Invariant([[1.0, 1, 0, 0], [0, 0, 1, 1]])
    mech = ProjectedLaplace(inv, scale=1.1)
    x = np.zeros(4)
    y = mech.release(x, rng=61)
    assert mech.marginal_method == "quadrature"  # a general matrix: no partition is declared
    u = np.array([1.0, 1.0]) / np.sqrt(2)
    want = projected_laplace_row_marginal_logp(y[:2], u, 1.1) + projected_laplace_row_marginal_logp(y[2:], u, 1.1)
    R = inv.row_basis()
    R0 = np.array([[1, 0], [1, 0], [0, 1], [0, 1]]) / np.sqrt(2)
    assert abs(np.linalg.det(R.T @ R0)) == pytest.approx(1.0)
    # check factorization of the augmented density at a few rho, then integrate each factor
    for rho in ([0.3, -1.2], [2.0, 0.5]):
        r = R.T @ R0 @ np.array(rho)
        full = mech.augmented_logp(y, x, r)
        parts = [np.sum(stats.laplace(0, 1.1).logpdf(y[2 * k : 2 * k + 2] + u * rho[k])) for k in range(2)]
        assert full == pytest.approx(sum(parts), rel=1e-12)
    total = 0.0
    for k in range(2):
        f = lambda t, k=k: np.exp(np.sum(stats.laplace(0, 1.1).logpdf(y[2 * k : 2 * k + 2] + u * t)))  # noqa: E731
        val, _ = integrate.quad(f, -60, 60, points=sorted(-y[2 * k : 2 * k + 2] / u), limit=200, epsrel=1e-11)
        total += np.log(val)
    assert total == pytest.approx(want, abs=1e-7)
    # logp integrates one row coordinate exactly and the other by quadrature (relative
    # tolerance 1e-10, truncation 1e-12): within 1e-8 of the exact product in log space
    assert mech.logp(y, x) == pytest.approx(want, abs=1e-8)
    assert mech.augmentation_dim == 2


def test_pytensor_logp_matches_numpy():
    import pytensor
    import pytensor.tensor as pt

    Y, Xs, Rs = pt.dvector(), pt.dvector(), pt.dvector()
    for mech in _all_mechs():
        y = mech.release(X, rng=71)
        if isinstance(mech, ProjectedLaplace):
            r = np.array([0.3, -0.2, 0.5, 0.1, 0.0, 1.0])
            f = pytensor.function([Y, Xs, Rs], mech.augmented_logp(Y, Xs, Rs))
            assert float(f(y, X, r)) == pytest.approx(mech.augmented_logp(y, X, r), rel=1e-10)
            continue
        f = pytensor.function([Y, Xs], mech.logp(Y, Xs))
        assert float(f(y, X)) == pytest.approx(mech.logp(y, X), rel=1e-10)


def test_guarantees_name_the_definition():
    pg, eg, pl, el = _all_mechs()
    assert pg.guarantee.definition == "(eps, delta)-induced subspace DP"
    assert pl.guarantee.definition == "(eps, 0)-induced subspace DP"
    assert pg.guarantee["delta"] == 1e-5 and pl.guarantee["epsilon"] == 1.0
    assert "Cor. 15" in eg.guarantee.reference and "Cor. 18" in el.guarantee.reference
    assert pg.invariant is INV


@pytest.mark.parametrize(
    "make, exc, match",
    [
        (lambda: ProjectedGaussian(INV, 0.0, 1e-5, 1.0), ValueError, "epsilon"),
        (lambda: ProjectedGaussian(INV, 1.0, 1.5, 1.0), ValueError, "delta"),
        (lambda: ProjectedGaussian(INV, 1.0, 1e-5, -1.0), ValueError, "sensitivity"),
        (lambda: ProjectedLaplace(INV, -1.0, 1.0), ValueError, "epsilon"),
        (lambda: ExtendedLaplace(INV, 1.0, 0.0), ValueError, "sensitivity"),
        (lambda: ExtendedGaussian(INV, 1.0, 1e-5, query=np.eye(5)), ValueError, "rows"),
        (lambda: ProjectedGaussian(np.eye(3), sigma=1.0), TypeError, "Invariant"),
        (lambda: ProjectedGaussian(I.Invariant(np.eye(3)), sigma=1.0), ValueError, "full rank"),
    ],
)
def test_bad_construction(make, exc, match):
    with pytest.raises(exc, match=match):
        make()


def test_bad_x():
    mech = ProjectedGaussian(INV, sigma=1.0)
    with pytest.raises(ValueError, match="shape"):
        mech.release(np.ones(11))
    with pytest.raises(ValueError, match="non-finite"):
        mech.release(np.r_[np.ones(11), np.inf])


def _brute_force_logp_rank2(mech, y, x, L=30.0):
    """log of p(v) = int_{R^2} prod_i Lap(v_i + (R rho)_i; b) drho by nested adaptive quadrature
    of the plain Laplace product (no closed form), in the invariant's own row basis R.

    Inner integral with the kinks of the integrand as breakpoints (epsrel 1e-11), outer
    epsrel 1e-9; the box |rho_j| <= L = 30 leaves out at most e^{S*/b} 2 pi b^2 Gamma(2, L/b)
    (S* <= |v|_1 < 8 here, b <= 1.1), below 1e-8 of the integral.  So the result is within
    about 1e-8 of the exact log density (QUADPACK's error estimate is returned too)."""
    R = mech.invariant.row_basis()
    v = np.asarray(y, dtype=float) - x
    b = mech.scale
    c = -v.size * np.log(2 * b)

    def inner(r1):
        w = v + R[:, 0] * r1
        nz = np.abs(R[:, 1]) > 1e-14
        pts = sorted(p for p in -w[nz] / R[nz, 1] if -L < p < L)
        f = lambda r2: np.exp(c - np.sum(np.abs(w + R[:, 1] * r2)) / b)  # noqa: E731
        return integrate.quad(f, -L, L, points=pts, limit=400, epsabs=0, epsrel=1e-11)[0]

    val, err = integrate.quad(inner, -L, L, limit=400, epsabs=0, epsrel=1e-9)
    return np.log(val), err / val


def test_projected_laplace_partition_logp_is_exact_against_brute_force():
    # groups {0, 2}, {1, 3, 4}: rank 2, the integral factorizes into one closed form per group
    inv = I.groups([0, 1, 0, 1, 1])
    mech = ProjectedLaplace(inv, scale=1.1)
    assert mech.marginal_method == "partition"
    x = np.array([3.0, 1.0, 4.0, 1.0, 5.0])
    y = mech.release(x, rng=4)
    want, rel_err = _brute_force_logp_rank2(mech, y, x)
    assert rel_err < 1e-8
    # tolerance: brute-force error ~1e-8 (docstring of the helper); the closed form is exact
    assert mech.logp(y, x) == pytest.approx(want, abs=1e-7)
    # a total is a partition with one group: the same as the one-row closed form
    tot = ProjectedLaplace(I.total(4), scale=0.9)
    yt = tot.release(np.zeros(4), rng=5)
    u = np.full(4, 0.5)
    assert tot.logp(yt, np.zeros(4)) == pytest.approx(projected_laplace_row_marginal_logp(yt, u, 0.9), rel=1e-13)
    # stacks, and -inf off the invariant
    Y = np.stack([y, y + np.array([1.0, 0, 0, 0, 0])])
    out = mech.logp(Y, x)
    assert out[0] == pytest.approx(mech.logp(y, x), rel=1e-13) and out[1] == -np.inf


def test_projected_laplace_rank2_quadrature_against_brute_force():
    # overlapping rows: no partition, rank 2 -> quadrature (tolerance 1e-10 per the docstring)
    inv = I.Invariant([[1.0, 1, 1, 0, 0], [0, 1, 1, 1, 1]])
    mech = ProjectedLaplace(inv, scale=0.8)
    assert mech.marginal_method == "quadrature"
    x = np.zeros(5)
    y = mech.release(x, rng=3)
    want, rel_err = _brute_force_logp_rank2(mech, y, x)
    assert rel_err < 1e-8
    assert mech.logp(y, x) == pytest.approx(want, abs=1e-7)


def test_projected_laplace_high_rank_points_to_the_augmentation():
    inv = I.Invariant([[1.0, 1, 0, 0, 0, 1], [0, 1, 1, 0, 0, 0], [0, 0, 1, 1, 0, 0]])
    mech = ProjectedLaplace(inv, scale=1.0)
    y = mech.release(np.zeros(6), rng=1)
    with pytest.raises(NotImplementedError, match="m.augmentation"):
        mech.logp(y, np.zeros(6))
    assert mech.augmentation.dim == 3
