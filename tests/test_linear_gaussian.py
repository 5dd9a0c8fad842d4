"""LinearGaussian: y = B x + N(0, Sigma) (Common Mechanism paper, Def. 2.3, Lemma 2.4)."""

import numpy as np
import pytest
from scipy import integrate, stats

from privinfer.mechanisms import LinearGaussian


def _spd(rng, m):
    G = rng.standard_normal((m, m))
    return G @ G.T + m * np.eye(m)


@pytest.fixture
def mech():
    rng = np.random.default_rng(3)
    B = rng.integers(-2, 3, size=(4, 3)).astype(float)
    return LinearGaussian(B, _spd(rng, 4))


def test_shapes_input_and_output_lengths_differ(mech):
    assert mech.n == 3 and mech.m == 4
    y = mech.release(np.ones(3), rng=0)
    assert y.shape == (4,)
    ys = mech.release(np.ones((5, 2, 3)), rng=0)
    assert ys.shape == (5, 2, 4)


def test_logp_matches_scipy_density(mech):
    rng = np.random.default_rng(1)
    x = rng.normal(size=3) * 5
    ys = mech.release(np.tile(x, (6, 1)), rng=rng)
    ref = stats.multivariate_normal(mech.B @ x, mech.Sigma).logpdf(ys)
    np.testing.assert_allclose(mech.logp(ys, x), ref, rtol=1e-12, atol=1e-10)
    assert mech.logp_constant_dropped == ""


def test_logp_symbolic_matches_numpy(mech):
    import pytensor
    import pytensor.tensor as pt

    rng = np.random.default_rng(2)
    x0 = rng.normal(size=3)
    y0 = mech.release(x0, rng=rng)
    yv, xv = pt.dvector("y"), pt.dvector("x")
    f = pytensor.function([yv, xv], mech.logp(yv, xv))
    np.testing.assert_allclose(f(y0, x0), mech.logp(y0, x0), rtol=1e-12)


def test_cost_matrix_rho_and_personalized(mech):
    K = mech.B.T @ np.linalg.inv(mech.Sigma) @ mech.B
    np.testing.assert_allclose(mech.cost_matrix, K, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(mech.personalized_rho, np.diag(K) / 2, rtol=1e-12)
    assert mech.rho == pytest.approx(np.max(np.diag(K)) / 2, rel=1e-12)
    assert mech.mu == pytest.approx(np.sqrt(np.max(np.diag(K))), rel=1e-12)
    g = mech.guarantee
    assert g.definition == "rho-zCDP" and g["rho"] == pytest.approx(mech.rho)


def test_example_3_3_both_mechanisms_are_half_zcdp():
    # Example 3.3: "Both mechanisms satisfy rho-zCDP with rho = 1/2".
    Ma = LinearGaussian([[1, 1], [1, 0], [0, 1]], 2.0)
    Mb = LinearGaussian(np.eye(2), [[4 / 3, -2 / 3], [-2 / 3, 4 / 3]])
    assert Ma.rho == pytest.approx(0.5, rel=1e-12)
    assert Mb.rho == pytest.approx(0.5, rel=1e-12)


def test_delta_curve_is_the_privacy_loss_hockey_stick():
    """Lemma 2.4 against an independent computation: for neighbours x, x + e_i the privacy
    loss L = log p(y|x) - log p(y|x+e_i) under y ~ M(x) is N(c/2, c) with c = K_ii, and
    delta(eps) = E[(1 - exp(eps - L))_+] -- integrated numerically here."""
    M = LinearGaussian([[1, 1, 0], [0, 1, 1]], [[1.0, 0.3], [0.3, 2.0]])
    c = np.diag(M.cost_matrix)
    # check the law of L by direct evaluation at one point: L is affine in y
    rng = np.random.default_rng(5)
    x = np.array([3.0, 1.0, 2.0])
    i = int(np.argmax(c))
    ys = M.release(np.tile(x, (40000, 1)), rng=rng)
    L = M.logp(ys, x) - M.logp(ys, x + np.eye(3)[i])
    # mean c/2 and variance c: tolerance 5 standard errors (sd sqrt(c)/sqrt(N); var sd ~ c sqrt(2/N))
    assert abs(L.mean() - c[i] / 2) < 5 * np.sqrt(c[i] / len(L))
    assert abs(L.var() - c[i]) < 5 * c[i] * np.sqrt(2 / len(L))
    for eps in (0.1, 0.5, 1.0, 3.0):
        f = lambda t: (1 - np.exp(eps - t)) * stats.norm.pdf(t, c[i] / 2, np.sqrt(c[i]))
        ref, _ = integrate.quad(f, eps, np.inf, epsabs=1e-14, epsrel=1e-12)
        assert M.delta(eps) == pytest.approx(ref, rel=1e-8, abs=1e-14)
        per = M.personalized_delta(eps)
        for j in range(3):
            fj = lambda t: (1 - np.exp(eps - t)) * stats.norm.pdf(t, c[j] / 2, np.sqrt(c[j]))
            assert per[j] == pytest.approx(integrate.quad(fj, eps, np.inf, epsabs=1e-14)[0], rel=1e-8, abs=1e-14)
    assert M.delta(M.epsilon(1e-6)) == pytest.approx(1e-6, rel=1e-6)


def test_release_mean_and_covariance(mech):
    N = 20000
    x = np.array([10.0, -4.0, 2.5])
    ys = mech.release(np.tile(x, (N, 1)), rng=11)
    S = mech.Sigma
    sd = np.sqrt(np.diag(S))
    # 5 standard errors of the sample mean (sd / sqrt(N)) and of each sample covariance
    # entry (sqrt((S_ii S_jj + S_ij^2) / N))
    assert np.all(np.abs(ys.mean(0) - mech.B @ x) < 5 * sd / np.sqrt(N))
    se_cov = np.sqrt((np.outer(np.diag(S), np.diag(S)) + S**2) / N)
    assert np.all(np.abs(np.cov(ys.T) - S) < 5 * se_cov)


def test_scalar_and_vector_sigma():
    B = np.arange(6.0).reshape(2, 3)
    np.testing.assert_array_equal(LinearGaussian(B, 2.0).Sigma, 2.0 * np.eye(2))
    np.testing.assert_array_equal(LinearGaussian(B, [1.0, 3.0]).Sigma, np.diag([1.0, 3.0]))
    assert LinearGaussian([1.0, 1.0, 1.0], 1.0).m == 1  # a 1-D B is one query


def test_joint_adds_cost_matrices(mech):
    other = LinearGaussian(np.eye(3), [1.0, 2.0, 4.0])
    J = LinearGaussian.joint(mech, other)
    assert (J.m, J.n) == (mech.m + 3, 3)
    np.testing.assert_allclose(J.cost_matrix, mech.cost_matrix + other.cost_matrix, rtol=1e-12)


def test_empty_mechanism_releases_nothing_and_costs_nothing():
    M = LinearGaussian(np.zeros((0, 4)), np.zeros((0, 0)))
    assert M.m == 0 and M.n == 4 and M.rho == 0.0 and M.delta(1.0) == 0.0
    assert M.release(np.ones((3, 4)), rng=0).shape == (3, 0)
    assert M.logp(np.zeros(0), np.ones(4)) == 0.0


@pytest.mark.parametrize(
    "B, Sigma, match",
    [
        (np.eye(2), [[1.0, 1.0], [1.0, 1.0]], "singular"),
        (np.eye(2), [[1.0, 0.0], [0.0, 0.0]], "singular"),
        (np.eye(2), [[1.0, 2.0], [2.0, 1.0]], "not positive semidefinite"),
        (np.eye(2), [[1.0, 0.5], [0.0, 1.0]], "symmetric"),
        (np.eye(2), np.eye(3), r"shape \(2, 2\)"),
        (np.eye(2), [1.0, 2.0, 3.0], "length m=2"),
        (np.ones((2, 2, 2)), np.eye(2), "2-D query matrix"),
        ([[1.0, np.nan]], 1.0, "non-finite"),
        (np.eye(2), [[np.inf, 0], [0, 1]], "non-finite"),
        (np.eye(2), -1.0, "not positive semidefinite"),
    ],
)
def test_bad_input_raises_clear_errors(B, Sigma, match):
    with pytest.raises(ValueError, match=match):
        LinearGaussian(B, Sigma)


def test_bad_data_shapes(mech):
    with pytest.raises(ValueError, match=r"x must have shape \(\.\.\., 3\)"):
        mech.release(np.ones(4), rng=0)
    with pytest.raises(ValueError, match=r"y must have shape \(\.\.\., 4\)"):
        mech.logp(np.ones(3), np.ones(3))
    with pytest.raises(ValueError, match="different lengths"):
        LinearGaussian.joint(mech, LinearGaussian(np.eye(2), 1.0))
