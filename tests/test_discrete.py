"""Exact samplers and log-pmfs of the double geometric and discrete Gaussian (CKS 2020).

The laws themselves are checked by the registry GoF test (tests/gof_cases_integer.py);
here: the Bernoulli(exp(-gamma)) primitive, moments against the pmf, the Python-integer
fallback path, logp on PyTensor, and input errors.
"""

from fractions import Fraction

import numpy as np
import pytest

from privinfer.mechanisms.discrete import (
    DiscreteGaussian,
    DoubleGeometric,
    as_rational,
    bernoulli_exp_neg,
    discrete_gaussian_logpmf,
    double_geometric_logpmf,
    sample_discrete_gaussian,
    sample_discrete_laplace,
)


@pytest.mark.parametrize("num,den", [(0, 1), (1, 3), (1, 1), (7, 3), (25, 4)])
def test_bernoulli_exp_neg_mean(num, den):
    N = 200_000
    b = bernoulli_exp_neg(np.full(N, num), np.full(N, den), rng=1)
    p = np.exp(-num / den)
    # 5 binomial standard errors sqrt(p(1-p)/N) (+ tiny floor for p = 1)
    assert abs(b.mean() - p) <= 5 * np.sqrt(p * (1 - p) / N) + 1e-12


def test_bernoulli_exp_neg_python_integer_path():
    # numerators/denominators beyond int64 use exact Python integers; gamma = 1/2 here
    num = np.array([2**70] * 4000, dtype=object)
    den = np.array([2**71] * 4000, dtype=object)
    b = bernoulli_exp_neg(num, den, rng=2)
    p = np.exp(-0.5)
    assert abs(b.mean() - p) <= 5 * np.sqrt(p * (1 - p) / 4000)


def _moment_check(draws, k, pmf):
    """Mean and variance of draws vs the pmf on a wide window (5 standard errors)."""
    N = draws.size
    mu = np.sum(k * pmf)
    var = np.sum((k - mu) ** 2 * pmf)
    m4 = np.sum((k - mu) ** 4 * pmf)
    assert abs(draws.mean() - mu) <= 5 * np.sqrt(var / N)
    # sd of the sample variance is about sqrt((m4 - var^2) / N)
    assert abs(draws.var() - var) <= 5 * np.sqrt((m4 - var**2) / N)


@pytest.mark.parametrize("scale", [Fraction(125, 24), Fraction(1, 2), 3])
def test_discrete_laplace_moments(scale):
    z = sample_discrete_laplace(scale, (200, 1000), rng=3)
    assert z.dtype == np.int64 and z.shape == (200, 1000)
    k = np.arange(-2000, 2001)
    pmf = np.exp(double_geometric_logpmf(k, scale))
    assert abs(pmf.sum() - 1) < 1e-12  # normalized log-pmf
    _moment_check(z.ravel(), k, pmf)


@pytest.mark.parametrize("sigma", [0.3, 1.7, 40])
def test_discrete_gaussian_moments(sigma):
    z = sample_discrete_gaussian(sigma, 200_000, rng=4)
    k = np.arange(-2000, 2001)
    pmf = np.exp(discrete_gaussian_logpmf(k, sigma))
    assert abs(pmf.sum() - 1) < 1e-12
    _moment_check(z, k, pmf)


def test_large_rational_parameters_use_exact_fallback():
    # sigma^2 with a denominator near 2^60 exceeds the int64 fast path
    s2 = Fraction(9 * 2**60 + 1, 2**60)
    z = sample_discrete_gaussian(None, 3000, rng=5, sigma2=s2)
    k = np.arange(-200, 201)
    pmf = np.exp(discrete_gaussian_logpmf(k, float(s2) ** 0.5))
    _moment_check(z, k, pmf)


def test_as_rational_reads_decimals():
    assert as_rational(0.192, "eps") == Fraction(24, 125)
    assert as_rational(3, "s") == 3
    with pytest.raises(ValueError):
        as_rational(-1.0, "s")
    with pytest.raises(TypeError):
        as_rational("1", "s")


def test_mechanisms_release_and_logp():
    m = DoubleGeometric(3, epsilon=0.5, sensitivity=2)
    assert m.scale == Fraction(4)
    assert m.guarantee["epsilon"] == pytest.approx(0.5)
    x = np.array([[1, 2, 3], [4, 5, 6]])
    y = m.release(x, rng=0)
    assert y.shape == x.shape and y.dtype == np.int64
    lp = m.logp(y, x)
    want = np.sum(np.log(np.tanh(1 / 8)) - np.abs(y - x) / 4, axis=-1)
    np.testing.assert_allclose(lp, want)
    assert m.logp(np.array([1.5, 2, 3]), np.array([1, 2, 3])) == -np.inf

    g = DiscreteGaussian(3, 2.0, sensitivity=1)
    assert g.guarantee["rho"] == pytest.approx(1 / 8)
    y = g.release(x[0], rng=0)
    assert np.isfinite(g.logp(y, x[0]))


def test_logp_on_pytensor():
    import pytensor
    import pytensor.tensor as pt

    yv = pt.dvector("y")
    x = np.array([1.0, 2.0, 3.0])
    for m in (DoubleGeometric(3, scale=1.5), DiscreteGaussian(3, 1.3)):
        f = pytensor.function([yv], m.logp(yv, x))
        for y in (np.array([0.0, 4.0, 3.0]), np.array([1.0, 2.5, 3.0])):
            assert f(y) == pytest.approx(m.logp(y, x))


def test_input_errors():
    with pytest.raises(ValueError, match="exactly one"):
        DoubleGeometric(3)
    with pytest.raises(ValueError, match="exactly one"):
        DoubleGeometric(3, epsilon=1.0, scale=1.0)
    with pytest.raises(ValueError):
        DoubleGeometric(3, epsilon=0.0)
    with pytest.raises(ValueError):
        DiscreteGaussian(0, 1.0)
    with pytest.raises(ValueError, match="integer"):
        DoubleGeometric(2, epsilon=1.0).release(np.array([0.5, 1.0]))
    with pytest.raises(ValueError, match="shape"):
        DoubleGeometric(2, epsilon=1.0).release(np.array([1, 2, 3]))
