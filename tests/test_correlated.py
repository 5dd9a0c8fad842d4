"""Correlated Gaussian mechanism under invariants (Subspace DP full paper, Alg. 3) and its MVEE."""

import numpy as np
import pytest
from scipy import stats

from privinfer import accounting
from privinfer import invariants as I
from privinfer.mechanisms import CorrelatedGaussian, base_decomposition, mvee_symmetric


def test_mvee_known_shapes():
    # cross-polytope conv(+-e_i): the unit ball; square conv(+-1,+-1): the disc of radius sqrt2
    np.testing.assert_allclose(mvee_symmetric(np.eye(3)), np.eye(3), atol=1e-6)
    np.testing.assert_allclose(mvee_symmetric(np.array([[1.0, 1], [1, -1]])), np.sqrt(2) * np.eye(2), atol=1e-6)
    # an axis-aligned box [-a, a] x [-b, b]: MVEE has semi-axes sqrt2 a, sqrt2 b
    F = mvee_symmetric(np.array([[2.0, 2.0], [0.5, -0.5]]))
    np.testing.assert_allclose(F, np.diag([2 * np.sqrt(2), 0.5 * np.sqrt(2)]), atol=1e-6)


def test_mvee_certificate_and_john():
    rng = np.random.default_rng(0)
    P = rng.standard_normal((4, 25))
    F, u = mvee_symmetric(P, tol=1e-9, return_weights=True)
    m = 4
    M = (P * u) @ P.T
    g = np.sum(P * np.linalg.solve(M, P), axis=0)
    # Kiefer-Wolfowitz: u optimal iff max_j g_j <= m; the algorithm stops at tolerance 1e-9
    assert g.max() <= m * (1 + 1e-8)
    np.testing.assert_allclose(F @ F.T, m * M * max(1.0, g.max() / m), rtol=1e-9)
    # containment: every +-p_j inside E = F B_2
    inside = np.sum(P * np.linalg.solve(F @ F.T, P), axis=0)
    assert np.all(inside <= 1 + 1e-12)
    # John's theorem for symmetric bodies: E / sqrt(m) is inside K, i.e. the support function
    # of E/sqrt(m), ||F w||/sqrt(m), is at most that of K, max_j |p_j . w|
    W = rng.standard_normal((2000, 4))
    assert np.all(np.linalg.norm(W @ F, axis=1) / np.sqrt(m) <= np.max(np.abs(W @ P), axis=1) * (1 + 1e-6))


def test_base_decomposition_is_orthogonal_partition():
    rng = np.random.default_rng(1)
    for m in (1, 2, 5, 8):
        A = rng.standard_normal((m, 3 * m))
        pieces = base_decomposition(A)
        U = np.hstack(pieces)
        np.testing.assert_allclose(U.T @ U, np.eye(m), atol=1e-10)
        assert len(pieces) <= 1 + int(np.ceil(np.log2(m))) if m > 1 else len(pieces) == 1


def _prefix_mech(n=6, relation="add-remove"):
    A = np.tril(np.ones((n, n)))  # prefix sums of a histogram
    inv = I.Invariant(np.r_[np.zeros(n - 1), 1.0][None, :])  # the last prefix sum (the total) is exact
    return CorrelatedGaussian(A, inv, 0.9, 1e-6, relation=relation), A, inv


@pytest.mark.parametrize("relation", ["add-remove", "replace"])
def test_privacy_certificate(relation):
    # (eps, delta): a_j^T Sigma^{-1} a_j <= 1/c^2 for every neighbouring difference a_j (add-remove:
    # columns of A_N; replace: their pairwise differences) -- the Gaussian mechanism of Lemma 13
    # in whitened coordinates
    mech, A, inv = _prefix_mech(relation=relation)
    AN = inv.null_basis().T @ A
    diffs = AN if relation == "add-remove" else np.hstack(
        [AN[:, [j]] - AN[:, [l]] for j in range(AN.shape[1]) for l in range(AN.shape[1]) if j != l])
    S = mech.null_covariance
    c = accounting.gaussian_constant(0.9, 1e-6)
    assert np.max(np.sum(diffs * np.linalg.solve(S, diffs), axis=0)) <= (1 + 1e-9) / c**2


def test_release_invariant_unbiased_and_error():
    mech, A, inv = _prefix_mech()
    h = np.array([3.0, 0, 5, 1, 2, 7])
    x = mech.answer(h)
    N = 20000
    ys = mech.release(np.tile(x, (N, 1)), rng=3)
    assert np.all(inv.satisfied_by(ys, inv.of(x)))
    e = ys - x
    Sigma = mech.covariance
    assert np.all(np.abs(e.mean(0)) < 5 * np.sqrt(np.diag(Sigma) / N) + 1e-12)
    # E||e||^2 = tr Sigma; Var ||e||^2 = 2 tr(Sigma^2): 5 standard errors
    sq = np.sum(e**2, axis=1)
    assert mech.mean_squared_error == pytest.approx(np.trace(Sigma))
    assert abs(sq.mean() - mech.mean_squared_error) < 5 * np.sqrt(2 * np.trace(Sigma @ Sigma) / N)
    # prefix sums: the correlated mechanism beats the extended Gaussian (Cor. 15) here
    assert mech.mean_squared_error < mech.extended_gaussian_error


def test_logp_matches_scipy_and_pytensor():
    import pytensor
    import pytensor.tensor as pt

    mech, A, inv = _prefix_mech()
    x = mech.answer(np.ones(6))
    y = mech.release(x, rng=4)
    Q = inv.null_basis()
    ref = stats.multivariate_normal(np.zeros(5), mech.null_covariance).logpdf(Q.T @ (y - x))
    assert mech.logp(y, x) == pytest.approx(ref, rel=1e-10)
    bad = y.copy()
    bad[-1] += 1.0
    assert mech.logp(bad, x) == -np.inf
    Y, X = pt.dvector(), pt.dvector()
    f = pytensor.function([Y, X], mech.logp(Y, X))
    assert float(f(y, x)) == pytest.approx(mech.logp(y, x), rel=1e-10)


def test_bad_input():
    inv = I.total(3)
    with pytest.raises(ValueError, match="rows"):
        CorrelatedGaussian(np.eye(4), inv, 1.0, 1e-5)
    with pytest.raises(ValueError, match="rank"):
        CorrelatedGaussian(np.ones((3, 2)), inv, 1.0, 1e-5)
    with pytest.raises(ValueError, match="epsilon"):
        CorrelatedGaussian(np.eye(3), inv, 0.0, 1e-5)
    with pytest.raises(ValueError, match="delta"):
        CorrelatedGaussian(np.eye(3), inv, 1.0, 2.0)
    with pytest.raises(ValueError, match="relation"):
        CorrelatedGaussian(np.eye(3), inv, 1.0, 1e-5, relation="swap")
