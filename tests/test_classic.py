"""Classic Gaussian and Laplace mechanisms (Subspace DP full paper, Lemmas 13 and 16)."""

import numpy as np
import pytest
from scipy import stats

from privinfer import accounting
from privinfer.mechanisms import Gaussian, Laplace


def test_gaussian_calibration_and_moments():
    eps, delta, sens = 0.8, 1e-6, 2.0
    m = Gaussian(3, eps, delta, sens)
    assert m.sigma == pytest.approx(sens * (1 + np.sqrt(1 + np.log(1 / delta))) / eps)
    x = np.array([10.0, -3.0, 0.5])
    N = 20000
    y = m.release(np.tile(x, (N, 1)), rng=1)
    e = y - x
    # mean: 5 standard errors sigma/sqrt(N); variance: s^2 has sd sigma^2 sqrt(2/(N-1))
    assert np.all(np.abs(e.mean(0)) < 5 * m.sigma / np.sqrt(N))
    assert np.all(np.abs(e.var(0, ddof=1) - m.sigma**2) < 5 * m.sigma**2 * np.sqrt(2 / (N - 1)))


def test_laplace_calibration_and_moments():
    m = Laplace(2, 0.5, 3.0)
    b = 6.0
    assert m.scale == pytest.approx(b)
    N = 20000
    e = m.release(np.zeros((N, 2)), rng=2)
    # E|e| = b and Var|e| = b^2 for Laplace(b): 5 standard errors b/sqrt(N)
    assert np.all(np.abs(np.abs(e).mean(0) - b) < 5 * b / np.sqrt(N))
    assert np.all(np.abs(e.mean(0)) < 5 * np.sqrt(2) * b / np.sqrt(N))


def test_logp_matches_scipy_and_pytensor():
    import pytensor
    import pytensor.tensor as pt

    x = np.array([1.0, 2.0, 3.0])
    for mech, ref in [
        (Gaussian(3, sigma=1.7), lambda e: stats.norm(0, 1.7).logpdf(e).sum(-1)),
        (Laplace(3, scale=0.6), lambda e: stats.laplace(0, 0.6).logpdf(e).sum(-1)),
    ]:
        y = mech.release(x, rng=3)
        assert mech.logp(y, x) == pytest.approx(ref(y - x), rel=1e-12)
        ys = mech.release(np.tile(x, (5, 1)), rng=4)
        np.testing.assert_allclose(mech.logp(ys, x), ref(ys - x), rtol=1e-12)
        Y, X = pt.dvector(), pt.dvector()
        f = pytensor.function([Y, X], mech.logp(Y, X))
        assert float(f(y, x)) == pytest.approx(mech.logp(y, x), rel=1e-12)


def test_guarantee_and_rng():
    m = Gaussian(2, 1.0, 1e-5, 1.0)
    assert m.guarantee.definition == "(eps, delta)-DP"
    assert m.guarantee["epsilon"] == 1.0
    assert m.invariant is None
    a = m.release([0.0, 0.0], rng=5)
    b = m.release([0.0, 0.0], rng=np.random.default_rng(5))
    np.testing.assert_array_equal(a, b)
    assert Laplace(2, 1.0, 1.0).guarantee["epsilon"] == 1.0
    assert accounting.gaussian_sigma(1.0, 1e-5, 1.0) == pytest.approx(m.sigma)


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: Gaussian(3, 0.0, 1e-5, 1.0), "epsilon"),
        (lambda: Gaussian(3, -1.0, 1e-5, 1.0), "epsilon"),
        (lambda: Gaussian(3, 1.0, 1.0, 1.0), "delta"),
        (lambda: Gaussian(3, 1.0, 0.0, 1.0), "delta"),
        (lambda: Gaussian(3, 1.0, 1e-5, 0.0), "sensitivity"),
        (lambda: Gaussian(3, 1.0, 1e-5, 1.0, sigma=1.0), "either"),
        (lambda: Gaussian(0, sigma=1.0), "n"),
        (lambda: Laplace(3, 0.0, 1.0), "epsilon"),
        (lambda: Laplace(3, 1.0, -2.0), "sensitivity"),
        (lambda: Laplace(3, scale=0.0), "scale"),
    ],
)
def test_bad_parameters(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_bad_x():
    m = Laplace(3, scale=1.0)
    with pytest.raises(ValueError, match="shape"):
        m.release([1.0, 2.0])
    with pytest.raises(ValueError, match="non-finite"):
        m.release([1.0, np.nan, 2.0])
