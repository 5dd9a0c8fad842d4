"""Semi-DP Gaussian and optimal K-norm mechanisms (Cho and Awan, Sec. 4-5)."""

import itertools

import numpy as np
import pytest
from scipy import integrate, special, stats

from privinfer import invariants as I
from privinfer.mechanisms import (
    KNorm,
    SemiDPGaussian,
    one_way_margins_l2_sensitivity,
    one_way_margins_sensitivity_space,
)


def _margins_ok(D, shape):
    T = D.reshape((-1,) + tuple(shape))
    return np.all(T.sum(axis=-1) == 0, axis=-1) & np.all(T.sum(axis=-2) == 0, axis=-1)


def test_example7_and_example8():
    S = one_way_margins_sensitivity_space((2, 2), a=3)
    assert {tuple(v) for v in S} == {(1, -1, -1, 1), (-1, 1, 1, -1)}  # Example 7
    mu = 0.5
    g = SemiDPGaussian(S, mu)
    P8 = np.array([[1, -1, -1, 1], [-1, 1, 1, -1], [-1, 1, 1, -1], [1, -1, -1, 1]]) / 4  # Example 8
    np.testing.assert_allclose(g.projection_matrix, P8, atol=1e-12)
    assert g.sigma == pytest.approx(2 / mu)  # Delta_2(S_Semi) = 2
    g2 = SemiDPGaussian(I.margins((2, 2), [(0,), (1,)]), mu, sensitivity=2.0)
    np.testing.assert_allclose(g2.projection_matrix, P8, atol=1e-12)
    assert g.guarantee.definition == "Semi-DP (mu-GDP)" and g.guarantee["mu"] == mu


def test_sensitivity_space_3x3_matches_brute_force():
    # every integer margin-preserving D with ||D||_1 <= 2a = 6 (entries in -2..2 suffice)
    S = one_way_margins_sensitivity_space((3, 3), a=3)
    grid = np.array(list(itertools.product(range(-2, 3), repeat=9)), dtype=np.int64)
    keep = _margins_ok(grid, (3, 3)) & (np.abs(grid).sum(1) <= 6) & np.any(grid != 0, axis=1)
    assert {tuple(v) for v in S} == {tuple(v) for v in grid[keep]}
    # a = 2: only the 2x2 swaps, l2 norm 2 (Prop. 32); a = 3 adds 3-cycles of norm sqrt(6)
    S2 = one_way_margins_sensitivity_space((3, 3), a=2)
    assert np.allclose(np.linalg.norm(S2, axis=1), 2.0)
    assert np.max(np.linalg.norm(S, axis=1)) == pytest.approx(np.sqrt(6))
    assert one_way_margins_l2_sensitivity((3, 3), 3) == pytest.approx(np.sqrt(6))
    assert one_way_margins_l2_sensitivity((2, 7), 3) == pytest.approx(2.0)


@pytest.mark.slow
def test_figure2_semidp_gaussian_beats_group_privacy():
    # Sec. 5.2, Figure 2: k x k tables, n = 500, Model I (uniform) and II (linear), a(t) = 3,
    # 30 replicates of the L2 cost ||M(X) - phi(X)||_2.  Ours: N(0, (Delta_2/mu)^2 P) on the
    # (k-1)^2-dim null space of the margins; naive: N(0, (3 sqrt2/mu)^2 I_{k^2}).
    mu, reps = 1.0, 30
    rng = np.random.default_rng(2024)
    for k in [2, 3, 5, 10]:
        inv = I.margins((k, k), [(0,), (1,)])
        for model in ("I", "II"):
            w = np.ones(k * k) if model == "I" else np.arange(1, k * k + 1.0)
            x = rng.multinomial(500, w / w.sum()).astype(float)
            for delta2 in (2.0, one_way_margins_l2_sensitivity((k, k), 3)):
                ours = SemiDPGaussian(inv, mu, sensitivity=delta2, a=3)
                ys = ours.release(np.tile(x, (reps, 1)), rng=rng)
                assert np.all(inv.satisfied_by(ys, inv.of(x)))
                cost_ours = np.linalg.norm(ys - x, axis=1)
                cost_naive = np.linalg.norm((3 * np.sqrt(2) / mu) * rng.standard_normal((reps, k * k)), axis=1)
                # E||N||_2 = sigma sqrt2 Gamma((d+1)/2)/Gamma(d/2) for N ~ N(0, sigma^2 I_d);
                # the replicate mean is within 5 standard errors of it
                for cost, sig, d in ((cost_ours, delta2 / mu, (k - 1) ** 2), (cost_naive, 3 * np.sqrt(2) / mu, k * k)):
                    mean = sig * np.sqrt(2) * np.exp(special.gammaln((d + 1) / 2) - special.gammaln(d / 2))
                    sd = np.sqrt(sig**2 * d - mean**2)
                    assert abs(cost.mean() - mean) < 5 * sd / np.sqrt(reps)
                assert cost_ours.mean() < cost_naive.mean()


def test_semidp_gaussian_from_vectors_derives_invariant():
    S = one_way_margins_sensitivity_space((2, 3), a=3)
    g = SemiDPGaussian(S, 2.0)
    assert g.sensitivity == pytest.approx(2.0)
    inv = g.invariant
    assert inv.null_dim == 2  # (r-1)(c-1)
    x = np.arange(6.0)
    ys = g.release(np.tile(x, (100, 1)), rng=3)
    margins = I.margins((2, 3), [(0,), (1,)])
    assert np.all(margins.satisfied_by(ys, margins.of(x)))
    # exact logp: N(0, sigma^2 I_s) in orthonormal coordinates of span(S)
    B = inv.null_basis()
    assert g.logp(ys[0], x) == pytest.approx(stats.norm(0, g.sigma).logpdf(B.T @ (ys[0] - x)).sum(), rel=1e-10)


def test_knorm_volume_gauge_and_normalization():
    # cross-polytope conv(+-e1, +-e2): volume 2, gauge = l1 norm
    k = KNorm(np.eye(2), 1.5)
    assert k.volume == pytest.approx(2.0)
    z = np.array([[0.3, -0.4], [1.0, 2.0]])
    np.testing.assert_allclose(k.norm(z @ k.basis.T @ k.basis), np.abs(z).sum(1), rtol=1e-12)
    # square conv(+-1, +-1): volume 4, gauge = l_inf
    sq = KNorm(np.array([[1.0, 1.0], [1.0, -1.0]]), 0.7)
    assert sq.volume == pytest.approx(4.0)
    # the density integrates to one: in polar coordinates of span(S),
    # int exp(logp) = exp(-log_norm) int_0^{2pi} int_0^inf e^{-eps rho g(theta)} rho drho dtheta
    #              = exp(-log_norm) int_0^{2pi} dtheta / (eps g(theta))^2,
    # with g(theta) the gauge of the unit vector at angle theta (1-d quadrature; no use of the
    # polytope volume).  Also for a random polygon spanning a plane of R^3.
    rng = np.random.default_rng(1)
    plane = np.linalg.qr(rng.standard_normal((3, 2)))[0]
    for mech in (sq, KNorm(rng.standard_normal((5, 2)) @ plane.T, 1.3)):
        def f(theta, mech=mech):
            v = (np.cos(theta) * mech.basis[:, 0] + np.sin(theta) * mech.basis[:, 1])
            return np.exp(mech.logp(v, np.zeros(mech.n)) + mech.epsilon * mech.norm(v @ mech.basis)) / (
                mech.epsilon * mech.norm(v @ mech.basis)) ** 2
        val, _ = integrate.quad(f, 0, 2 * np.pi, limit=400, epsrel=1e-10)
        assert val == pytest.approx(1.0, rel=1e-7)
    # s = 1 (2x2 table): the K-norm law is Laplace along v/|v| with scale |v|/eps = 2/eps
    S = one_way_margins_sensitivity_space((2, 2))
    eps = 0.8
    k1 = KNorm(S, eps)
    e = k1.release(np.zeros((20000, 4)), rng=5)
    zc = e @ np.array([1, -1, -1, 1]) / 2.0
    # E|z| = 2/eps; sd(|z|) = 2/eps: 5 standard errors
    assert abs(np.abs(zc).mean() - 2 / eps) < 5 * (2 / eps) / np.sqrt(20000)
    assert k1.logp(e[0], np.zeros(4)) == pytest.approx(stats.laplace(0, 2 / eps).logpdf(zc[0]), rel=1e-10)


def test_knorm_3x3_margins_exact_and_in_box():
    S = one_way_margins_sensitivity_space((3, 3), a=3)
    k = KNorm(S, 1.0, a=3, invariant=I.margins((3, 3), [(0,), (1,)]))
    assert k.s == 4
    # the box contains K: every vertex of K (the points +-S) lies in the box
    Z = S @ k.basis
    assert np.all(np.abs(Z) <= k.box + 1e-12)
    # gauge of every sensitivity vector <= 1 (Delta_K = 1, Prop. 30), = 1 for the extreme ones
    g = k.norm(Z)
    assert np.all(g <= 1 + 1e-9) and np.isclose(g.max(), 1.0)
    u = k.sample_uniform_K(2000, np.random.default_rng(7))
    assert np.all(k.in_K(u))
    x = np.arange(9.0) * 10
    ys = k.release(np.tile(x, (200, 1)), rng=8)
    assert np.all(k.invariant.satisfied_by(ys, k.invariant.of(x)))
    assert np.all(np.isfinite(k.logp(ys, x)))
    bad = ys[0].copy()
    bad[0] += 0.5
    assert k.logp(bad, x) == -np.inf


def test_pytensor_logp_semidp():
    import pytensor
    import pytensor.tensor as pt

    Y, X = pt.dvector(), pt.dvector()
    S = one_way_margins_sensitivity_space((3, 3), a=3)
    x = np.arange(9.0)
    for mech in (SemiDPGaussian(S, 1.0), KNorm(S, 1.0)):
        y = mech.release(x, rng=9)
        f = pytensor.function([Y, X], mech.logp(Y, X))
        assert float(f(y, x)) == pytest.approx(mech.logp(y, x), rel=1e-10)


@pytest.mark.parametrize(
    "make, exc, match",
    [
        (lambda: SemiDPGaussian(np.eye(2), 0.0), ValueError, "mu"),
        (lambda: KNorm(np.eye(2), -1.0), ValueError, "epsilon"),
        (lambda: SemiDPGaussian(np.zeros((2, 3)), 1.0), ValueError, "zero"),
        (lambda: SemiDPGaussian(I.total(3), 1.0), ValueError, "sensitivity"),
        (lambda: SemiDPGaussian(np.eye(3), 1.0, invariant=I.total(3)), ValueError, "C v = 0"),
        (lambda: SemiDPGaussian(np.eye(2), 1.0, sensitivity=0.5), ValueError, "smaller"),
        (lambda: one_way_margins_sensitivity_space((3, 3), a=4), ValueError, "a must"),
    ],
)
def test_bad_input(make, exc, match):
    with pytest.raises(exc, match=match):
        make()
