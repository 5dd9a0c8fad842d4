"""Fisher's noncentral hypergeometric distribution: pmf, cdf, sampler, bad input."""

import numpy as np
import pytest
from scipy import stats

from privinfer.distributions import FisherNoncentralHypergeometric, check_margins

CHI2_ALPHA = 1e-3  # per chi-square GoF test (a handful run)
SETTINGS = [(10, 12, 9, 1.0), (10, 12, 9, 3.5), (5, 20, 14, 0.2), (30, 7, 25, 1.7), (3, 3, 3, 50.0), (0, 6, 2, 2.0)]


def _brute_force_pmf(n1, n2, m, w):
    """Independent binomial rows conditioned on the column total (the model the pmf comes from).

    theta2 = 0.4 and theta1 chosen so that odds1/odds2 = w; P(x11 = x | x11 + x21 = m) by
    enumerating the product of the two binomial pmfs.
    """
    theta2 = 0.4
    odds1 = w * theta2 / (1 - theta2)
    theta1 = odds1 / (1 + odds1)
    xs = np.arange(0, n1 + 1)
    joint = stats.binom.pmf(xs, n1, theta1) * stats.binom.pmf(m - xs, n2, theta2)
    return xs, joint / joint.sum()


@pytest.mark.parametrize("n1,n2,m,w", SETTINGS)
def test_pmf_matches_conditioned_binomials(n1, n2, m, w):
    d = FisherNoncentralHypergeometric(n1, n2, m, w)
    xs, p = _brute_force_pmf(n1, n2, m, w)
    np.testing.assert_allclose(d.pmf(xs), p, atol=1e-13)
    assert d.support[0] == max(0, m - n2) and d.support[-1] == min(n1, m)


@pytest.mark.parametrize("n1,n2,m,w", SETTINGS)
def test_pmf_matches_scipy(n1, n2, m, w):
    d = FisherNoncentralHypergeometric(n1, n2, m, w)
    ref = stats.nchypergeom_fisher(n1 + n2, n1, m, w)
    x = np.arange(-2, n1 + 3)
    np.testing.assert_allclose(d.pmf(x), ref.pmf(x), atol=1e-12)
    np.testing.assert_allclose(d.cdf(x), ref.cdf(x), atol=1e-12)
    np.testing.assert_allclose(d.sf(x), ref.sf(x), atol=1e-12)
    assert d.mean() == pytest.approx(ref.mean(), abs=1e-9)
    assert d.var() == pytest.approx(ref.var(), abs=1e-9)


def test_central_case_is_hypergeometric():
    d = FisherNoncentralHypergeometric(13, 9, 11, 1.0)
    x = np.arange(0, 14)
    np.testing.assert_allclose(d.pmf(x), stats.hypergeom(22, 13, 11).pmf(x), atol=1e-14)


def test_cdf_sf_ppf_consistency_and_non_integers():
    d = FisherNoncentralHypergeometric(10, 12, 9, 2.0)
    x = np.arange(-1, 12)
    np.testing.assert_allclose(d.cdf(x) + d.sf(x), 1.0, atol=1e-14)
    assert d.pmf(3.5) == 0.0 and d.cdf(3.5) == pytest.approx(d.cdf(3))
    u = np.array([1e-9, 0.2, 0.5, 0.9, 1 - 1e-12])
    q = d.ppf(u)
    assert np.all(d.cdf(q) >= u) and np.all(d.cdf(q - 1) < u)


def test_extreme_odds_ratio_is_stable():
    hi = FisherNoncentralHypergeometric(10, 12, 9, log_odds_ratio=60.0)
    lo = FisherNoncentralHypergeometric(10, 12, 9, log_odds_ratio=-60.0)
    assert hi.pmf(9) == pytest.approx(1.0) and lo.pmf(0) == pytest.approx(1.0)
    assert np.all(np.isfinite(hi.logpmf(hi.support)))


@pytest.mark.parametrize("n1,n2,m,w", SETTINGS[:5])
def test_sampler_goodness_of_fit(n1, n2, m, w):
    d = FisherNoncentralHypergeometric(n1, n2, m, w)
    n = 20000
    draws = d.sample(n, rng=np.random.default_rng(7))
    assert draws.dtype == np.int64 and draws.min() >= d.lower and draws.max() <= d.upper
    counts = np.bincount(draws - d.lower, minlength=len(d.support)).astype(float)
    exp = d.pmf(d.support) * n
    # pool cells with expectation < 5 into their neighbour (chi-square validity)
    keep = exp >= 5
    obs_p = np.append(counts[keep], counts[~keep].sum())
    exp_p = np.append(exp[keep], exp[~keep].sum())
    if exp_p[-1] < 5:
        obs_p[-2] += obs_p[-1]
        exp_p[-2] += exp_p[-1]
        obs_p, exp_p = obs_p[:-1], exp_p[:-1]
    assert len(exp_p) >= 2
    assert stats.chisquare(obs_p, exp_p).pvalue > CHI2_ALPHA


def test_margins_validation():
    assert check_margins([10, 12, 9, 13]) == (10, 12, 9, 13)
    assert check_margins(np.array([3.0, 4.0, 2.0, 5.0])) == (3, 4, 2, 5)
    with pytest.raises(ValueError, match="inconsistent margins"):
        check_margins([10, 12, 9, 14])
    with pytest.raises(ValueError, match="negative"):
        check_margins([-1, 12, 9, 2])
    with pytest.raises(ValueError, match="non-integer"):
        check_margins([1.5, 2, 1, 2.5])
    with pytest.raises(ValueError, match="shape"):
        check_margins([1, 2, 3])
    with pytest.raises(ValueError, match="odds_ratio"):
        FisherNoncentralHypergeometric(3, 4, 2, 0.0)
    with pytest.raises(ValueError, match="odds_ratio"):
        FisherNoncentralHypergeometric(3, 4, 2, -2.0)
    with pytest.raises(ValueError, match="exceeds"):
        FisherNoncentralHypergeometric(3, 4, 8, 1.0)
    with pytest.raises(ValueError, match="exactly one"):
        FisherNoncentralHypergeometric(3, 4, 2)
