"""Tulap, the Lemma 36 canonical noise construction, and the canonical-noise mechanisms."""

import math

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from scipy import integrate, stats

from privinfer.mechanisms import (
    CanonicalNoise,
    CanonicalNoiseMechanism,
    GaussianCanonicalMechanism,
    GaussianCanonicalNoise,
    SemiPrivateTwoByTwo,
    Tulap,
    TulapMechanism,
    eps_delta_tradeoff,
    gaussian_tradeoff,
    tulap_q,
)

# KS tests: one alpha for every sampler check in this file (several run; 1e-3 each keeps the
# family-wise false alarm rate small).
KS_ALPHA = 1e-3
PARAMS = [(0.0, 1.0, 0.0), (0.0, 0.5, 0.1), (2.3, 2.0, 0.01), (-1.7, 0.2, 0.0), (0.0, 0.1, 0.3)]


def _tulap(m, eps, delta):
    return Tulap.from_privacy(eps, delta, m=m)


def _off_half(x):
    """Move grid points off the half-integer discontinuities of the density."""
    return x + 0.00317


@pytest.mark.parametrize("m,eps,delta", PARAMS)
def test_cdf_equals_integral_of_density(m, eps, delta):
    T = _tulap(m, eps, delta)
    # start K cells below m: the untruncated mass there is b^K/(1+b) <= e^-40 (K eps >= 40)
    K = math.ceil(40 / eps)
    for x in [m - 3.2, m - 0.9, m - 0.5, m, m + 0.25, m + 1.7, m + 4.4]:
        if not (T.lower <= x <= T.upper):
            continue
        # integrate cell by cell between the density's jumps at m + k + 1/2
        edges = [m + k + 0.5 for k in range(-K - 1, 200) if m - K - 0.5 <= m + k + 0.5 < x] + [x]
        if np.isfinite(T.lower):  # the truncation point is a further jump
            edges = sorted(set(edges) | {T.lower})
        val = sum(integrate.quad(T.pdf, a, b, epsabs=1e-15)[0] for a, b in zip(edges[:-1], edges[1:]))
        assert abs(val - T.cdf(x)) < 1e-12, (x, val, T.cdf(x))


@pytest.mark.parametrize("m,eps,delta", PARAMS)
def test_cdf_basic_properties(m, eps, delta):
    T = _tulap(m, eps, delta)
    r = 40 / eps  # untruncated tail mass beyond m +- r is below e^-39
    x = np.linspace(m - r, m + r, 6001)
    F = T.cdf(x)
    assert np.all(np.diff(F) >= -1e-15)
    assert F[0] < 1e-15 and F[-1] > 1 - 1e-15
    np.testing.assert_allclose(T.cdf(m - (x - m)), 1 - F, atol=1e-14)  # symmetric about m
    np.testing.assert_allclose(T.sf(x), 1 - F, atol=1e-14)
    u = np.linspace(1e-6, 1 - 1e-6, 1001)
    np.testing.assert_allclose(T.cdf(T.ppf(u)), u, atol=1e-12)
    if delta > 0:
        assert abs(T.cdf(T.lower)) < 1e-15 and abs(T.cdf(T.upper) - 1) < 1e-15
        assert np.all(np.isneginf(T.logpdf(np.array([T.lower - 1e-9, T.upper + 1e-9]))))


def test_closed_form_values():
    # b = e^-eps: F0(-1/2) = b/(1+b), F0(-3/2) = b^2/(1+b) (derived in _tulap0_cdf's docstring)
    b = math.exp(-1.0)
    T = Tulap(0.0, b, 0.0)
    assert T.cdf(-0.5) == pytest.approx(b / (1 + b), abs=1e-15)
    assert T.cdf(-1.5) == pytest.approx(b**2 / (1 + b), abs=1e-15)
    assert T.pdf(0.2) == pytest.approx((1 - b) / (1 + b), abs=1e-15)
    assert T.pdf(-2.2) == pytest.approx((1 - b) / (1 + b) * b**2, abs=1e-15)


@pytest.mark.parametrize("eps,delta", [(1.0, 0.05), (0.3, 0.2), (2.0, 1e-3)])
def test_truncation_q_matches_fixed_point(eps, delta):
    """With q = 2 delta b/(1-b+2 delta b), F(-1/2) is the fixed point (1-delta)/(1+e^eps) of f."""
    q = tulap_q(eps, delta)
    b = math.exp(-eps)
    assert q == pytest.approx(2 * delta * b / (1 - b + 2 * delta * b))
    T = Tulap.from_privacy(eps, delta)
    assert T.cdf(-0.5) == pytest.approx((1 - delta) / (1 + math.exp(eps)), rel=1e-12)
    assert T.delta == pytest.approx(delta, rel=1e-12)


@pytest.mark.parametrize("eps,delta", [(1.0, 0.0), (0.5, 0.1), (2.0, 0.01), (0.1, 0.0), (3.0, 0.3)])
def test_lemma36_construction_is_tulap(eps, delta):
    T = Tulap.from_privacy(eps, delta)
    C = CanonicalNoise(eps_delta_tradeoff(eps, delta))
    x = _off_half(np.linspace(-20, 20, 4001))
    np.testing.assert_allclose(C.cdf(x), T.cdf(x), atol=1e-13)
    np.testing.assert_allclose(C.pdf(x), T.pdf(x), atol=1e-13)
    u = np.linspace(1e-4, 1 - 1e-4, 999)
    np.testing.assert_allclose(C.ppf(u), T.ppf(u), atol=1e-9)


def _tradeoff_of(noise, a):
    """T(F, F(. - 1))(alpha) = F(F^{-1}(1 - alpha) - 1): type II error of the best level-alpha test."""
    return noise.cdf(noise.ppf(1 - a) - 1.0)


@pytest.mark.parametrize(
    "noise,f",
    [
        (Tulap.from_privacy(1.0), eps_delta_tradeoff(1.0)),
        (Tulap.from_privacy(0.7, 0.05), eps_delta_tradeoff(0.7, 0.05)),
        (CanonicalNoise(gaussian_tradeoff(1.0)), gaussian_tradeoff(1.0)),
        (CanonicalNoise(gaussian_tradeoff(0.4)), gaussian_tradeoff(0.4)),
        (GaussianCanonicalNoise(1.5), gaussian_tradeoff(1.5)),
    ],
    ids=["tulap", "tulap-delta", "lemma36-gdp1", "lemma36-gdp0.4", "gaussian"],
)
def test_canonical_noise_tradeoff_equals_f(noise, f):
    """Def. 35 property 2: the tradeoff between N and N + 1 is exactly f; property 4: symmetry."""
    a = np.linspace(1e-3, 1 - 1e-3, 499)
    np.testing.assert_allclose(_tradeoff_of(noise, a), f(a), atol=1e-10)
    x = np.linspace(-5, 5, 101)
    np.testing.assert_allclose(noise.cdf(-x), 1 - noise.cdf(x), atol=1e-14)


def test_lemma36_gaussian_density_integrates_to_cdf():
    C = CanonicalNoise(gaussian_tradeoff(1.0))
    for x in [-3.3, -1.2, 0.3, 2.6]:
        pts = [k + 0.5 for k in range(-40, 40) if -40 < k + 0.5 < x]
        val, _ = integrate.quad(C.pdf, -40, x, points=pts, limit=500, epsabs=1e-13)
        assert abs(val - C.cdf(x)) < 1e-9


@pytest.mark.parametrize("m,eps,delta", PARAMS)
def test_sampler_matches_cdf(m, eps, delta):
    T = _tulap(m, eps, delta)
    draws = T.sample(20000, rng=np.random.default_rng(11))
    assert np.all((draws >= T.lower) & (draws <= T.upper))
    assert stats.kstest(draws, T.cdf).pvalue > KS_ALPHA


def test_untruncated_sampler_moments():
    # Var(G1 - G2 + U) = 2 b/(1-b)^2 + 1/12; 5 standard errors of the sample variance
    b = math.exp(-0.8)
    T = Tulap(0.0, b, 0.0)
    n = 40000
    d = T.sample(n, rng=np.random.default_rng(3))
    var = 2 * b / (1 - b) ** 2 + 1 / 12
    # sd of the sample variance ~ sqrt((mu4 - var^2)/n); mu4 estimated from the sample
    se = math.sqrt((np.mean(d**4) - var**2) / n)
    assert abs(d.var() - var) < 5 * se
    assert abs(d.mean()) < 5 * math.sqrt(var / n)


@pytest.mark.parametrize("tradeoff", [gaussian_tradeoff(0.8), eps_delta_tradeoff(1.2, 0.02)], ids=["gdp", "epsdelta"])
def test_lemma36_sampler_matches_cdf(tradeoff):
    C = CanonicalNoise(tradeoff)
    draws = C.sample(20000, rng=np.random.default_rng(5))
    assert stats.kstest(draws, C.cdf).pvalue > KS_ALPHA


def test_logp_numpy_and_pytensor_agree():
    x = np.array([-3.3, -0.6, 0.0, 0.4, 1.2, 2.9, 7.5])
    for noise in [Tulap.from_privacy(1.0, 0.1, m=0.3), Tulap.from_privacy(0.5), GaussianCanonicalNoise(2.0)]:
        xs = pt.dvector("x")
        f = pytensor.function([xs], noise.logp(xs))
        np.testing.assert_allclose(f(x), noise.logp(x), rtol=1e-12)
    with pytest.raises(TypeError, match="NumPy only"):
        CanonicalNoise(gaussian_tradeoff(1.0)).logp(pt.dvector("x"))


def test_bad_parameters():
    with pytest.raises(ValueError, match="epsilon"):
        Tulap.from_privacy(0.0)
    with pytest.raises(ValueError, match="epsilon"):
        Tulap.from_privacy(-1.0)
    with pytest.raises(ValueError, match="delta"):
        Tulap.from_privacy(1.0, 1.0)
    with pytest.raises(ValueError, match="delta"):
        Tulap.from_privacy(1.0, -0.1)
    with pytest.raises(ValueError, match="b must"):
        Tulap(0.0, 1.0, 0.0)
    with pytest.raises(ValueError, match="q must"):
        Tulap(0.0, 0.5, 1.0)
    with pytest.raises(ValueError, match="mu"):
        gaussian_tradeoff(0.0)
    with pytest.raises(TypeError, match="TradeoffFunction"):
        CanonicalNoise(lambda a: a)


# -- mechanisms ------------------------------------------------------------------------------
def test_tulap_mechanism_release_and_logp():
    mech = TulapMechanism(3, epsilon=1.0, delta=0.05, sensitivity=2.0)
    x = np.array([[1.0, 5.0, 9.0]] * 4000)
    y = mech.release(x, rng=1)
    assert y.shape == x.shape and mech.invariant is None
    # noise / sensitivity is Tulap: KS on each coordinate
    e = (y - x) / 2.0
    for j in range(3):
        assert stats.kstest(e[:, j], mech.noise.cdf).pvalue > KS_ALPHA
    ynum = y[0]
    assert mech.logp(ynum, x[0]) == pytest.approx(np.sum(mech.noise.logpdf((ynum - x[0]) / 2.0)) - 3 * math.log(2.0))
    g = mech.guarantee
    assert g["epsilon"] == pytest.approx(1.0) and g["delta"] == pytest.approx(0.05)
    with pytest.raises(ValueError, match="shape"):
        mech.release(np.zeros(2))


def test_gaussian_and_generic_mechanisms():
    gm = GaussianCanonicalMechanism(2, mu=0.5)
    assert gm.guarantee["mu"] == 0.5
    y = gm.release(np.zeros((20000, 2)), rng=2)
    assert stats.kstest(y[:, 0], stats.norm(scale=2.0).cdf).pvalue > KS_ALPHA
    cm = CanonicalNoiseMechanism(1, gaussian_tradeoff(1.0))
    yv = cm.release(np.zeros(1), rng=0)
    assert np.isfinite(cm.logp(yv, np.zeros(1)))


def test_semi_private_two_by_two_keeps_margins_exactly():
    mech = SemiPrivateTwoByTwo(Tulap.from_privacy(1.0, 0.01))
    x = np.array([[7, 3, 2, 8], [0, 5, 4, 1], [10, 10, 10, 10]], dtype=float)
    y = mech.release(np.repeat(x, 500, axis=0), rng=4)
    xs = np.repeat(x, 500, axis=0)
    # margins (row and column totals) reproduced on every release
    for A in ([1, 1, 0, 0], [0, 0, 1, 1], [1, 0, 1, 0], [0, 1, 0, 1]):
        A = np.array(A, dtype=float)
        np.testing.assert_allclose(y @ A, xs @ A, rtol=0, atol=1e-12)
    assert np.all(mech.invariant.satisfied_by(y, mech.invariant.of(xs[0])) | (np.arange(len(y)) >= 500))
    # logp: noise density on the line, -inf off it
    d = y[0, 0] - xs[0, 0]
    assert mech.logp(y[0], xs[0]) == pytest.approx(float(mech.noise.logpdf(d)) - math.log(2))
    assert mech.logp(y[0] + np.array([0.1, 0, 0, 0]), xs[0]) == -np.inf
    yt, xt = pt.dvector("y"), pt.dvector("x")
    f = pytensor.function([yt, xt], mech.logp(yt, xt))
    assert f(y[0], xs[0]) == pytest.approx(mech.logp(y[0], xs[0]))
    assert f(y[0] + np.array([0.1, 0, 0, 0]), xs[0]) == -np.inf
    assert mech.guarantee["a_t"] == 3
    with pytest.raises(ValueError, match="a_t"):
        SemiPrivateTwoByTwo(Tulap.from_privacy(1.0), a_t=4)
    with pytest.raises(ValueError, match="shape"):
        mech.release(np.zeros(3))
