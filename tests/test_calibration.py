"""Coverage of equal-tailed intervals of counts (privinfer.inference.interval_coverage)."""

import numpy as np
import pytest
from scipy import stats

from privinfer.inference import interval_coverage

M, S = 5000, 2000


def _poisson_case(seed, draw_mean_factor=1.0, dispersion=None):
    rng = np.random.default_rng(seed)
    mu = rng.uniform(1.0, 8.0, M)
    truth = rng.poisson(mu)
    if dispersion is None:
        draws = rng.poisson(mu * draw_mean_factor, (S, M))
    else:   # negative binomial draws, mean mu, variance mu + mu^2 / dispersion: too wide
        draws = rng.negative_binomial(dispersion, dispersion / (dispersion + mu), (S, M))
    return mu, truth, draws


def test_calibrated_counts_over_cover_closed_and_hit_the_level_randomized():
    mu, truth, draws = _poisson_case(1)
    cov = interval_coverage(draws, truth, 0.9)
    # each quantity's randomized indicator lies in [0, 1] with mean 0.9 under calibration, so
    # its average over M independent quantities has sd <= sqrt(0.9 * 0.1 / M) = 0.0042; the
    # draws' own error in F (sd <= sqrt(0.25 / S) = 0.011 per quantity, independent across
    # quantities) adds at most about 0.011 / sqrt(M) * (1 / the atom's mass ~ 0.1) = 0.0016:
    # 4 sd of the sum, 0.018
    assert abs(cov.randomized - 0.9) < 0.018
    # the closed interval's exact posterior mass, from SciPy's Poisson cdf at the exact quantiles
    lo, hi = stats.poisson.ppf(0.05, mu), stats.poisson.ppf(0.95, mu)
    exact_mass = float(np.mean(stats.poisson.cdf(hi, mu) - stats.poisson.cdf(lo - 1, mu)))
    assert exact_mass > 0.93                      # the over-coverage the module is about
    # the draws' estimate of that mass: per quantity sd <= 0.011 (above), averaged: 0.0002,
    # plus quantiles at a neighbouring integer when F sits within that error of 0.05 or 0.95
    # (a few percent of the quantities, each changing the mass by an atom <= 0.2): 0.01
    assert abs(cov.expected - exact_mass) < 0.01
    # the closed coverage is a mean of M Bernoulli(mass) indicators: sd <= 0.0042, 4 sd
    assert abs(cov.closed - cov.expected) < 0.017
    assert cov.n == M


def test_miscalibrated_counts_are_seen():
    # draws too wide (negative binomial, variance mu + mu^2 / 2): the randomized coverage rises
    # well above 0.9; draws too narrow (a posterior centred 40% too high): it falls below
    _, truth, wide = _poisson_case(2, dispersion=2.0)
    assert interval_coverage(wide, truth).randomized > 0.95
    _, truth, shifted = _poisson_case(3, draw_mean_factor=1.4)
    assert interval_coverage(shifted, truth).randomized < 0.85


def test_continuous_draws_agree_with_the_plain_coverage():
    rng = np.random.default_rng(4)
    draws, truth = rng.normal(size=(S, M)), rng.normal(size=M)
    cov = interval_coverage(draws, truth, 0.8, block=700)
    lo, hi = np.quantile(draws, [0.1, 0.9], axis=0)
    plain = float(np.mean((truth >= lo) & (truth <= hi)))
    # no ties: the randomized interval is the closed one, except for a truth equal to a draw
    assert cov.randomized == pytest.approx(cov.closed, abs=1e-12)
    # 4 sd of a mean of M Bernoulli(0.8) indicators: 4 sqrt(0.16 / M) = 0.023; the inverted-cdf
    # and interpolated quantiles differ by less than one draw's spacing
    assert abs(cov.closed - 0.8) < 0.023 and abs(cov.closed - plain) < 0.005
    assert cov.expected == pytest.approx(0.8, abs=2.0 / S)


@pytest.mark.parametrize("args, match", [
    ((np.zeros(5), np.zeros(5)), "draws must be"),
    ((np.zeros((10, 3)), np.zeros(4)), "draws must be"),
    ((np.zeros((1, 3)), np.zeros(3)), "at least 2 draws"),
    ((np.zeros((10, 3)), np.zeros(3), 1.0), "level"),
])
def test_bad_input(args, match):
    with pytest.raises(ValueError, match=match):
        interval_coverage(*args)
