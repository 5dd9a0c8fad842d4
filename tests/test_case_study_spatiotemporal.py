"""Spatio-temporal case study, executed as a notebook; its headline numbers checked."""

import numpy as np
import pytest
from scipy import stats

from notebook_helpers import execute_study

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def study():
    return execute_study("spatiotemporal")


@pytest.fixture(scope="module")
def r(study):
    return study.results


def test_notebook_shows_its_figures_inline(study):
    # release vs data, error sd, posterior coverage, rank plots, hour effects
    assert len(study.outputs("image/png")) == 5


# ---- Part 1: the paper's design ----

def test_design_has_740_constraints(r):
    # (24 + 14 - 1) x 20 = 740: each building's two margins share its daily total
    assert tuple(r["shape"]) == (14, 24, 20)
    assert r["cells"] == 6720 and r["constraint_rank"] == 740


def test_releases_keep_every_total(r):
    # to rounding: 1e-9 of the largest count
    assert r["release_max_violation"] < 1e-9 * max(1.0, r["max_count"])


def test_error_sd_mean_square_is_exact(r):
    # n s^2 = ||P_N g||^2 ~ chi^2_{n-r} exactly: the mean of s^2 over R releases has mean
    # (n - r)/n and standard error sqrt(2 (n - r)) / n / sqrt(R); within 5 of them
    n, k = r["cells"], r["cells"] - r["constraint_rank"]
    s = np.asarray(r["error_sd"])
    assert len(s) == r["releases"]
    se = np.sqrt(2.0 * k) / n / np.sqrt(len(s))
    assert abs(np.mean(s**2) - k / n) < 5 * se, f"mean s^2 {np.mean(s**2):.5f} vs (n-r)/n {k / n:.5f} (SE {se:.5f})"


def test_error_sd_has_the_chi_square_law(r):
    # a Kolmogorov-Smirnov test of n s^2 against chi^2_{n-r} does not reject at the 0.001 level
    n, k = r["cells"], r["cells"] - r["constraint_rank"]
    s = np.asarray(r["error_sd"])
    p = stats.kstest(n * s**2, stats.chi2(k).cdf).pvalue
    assert p > 1e-3, f"n s^2 not chi^2_(n-r) (KS p = {p:.1e})"


def test_median_error_sd_is_the_theoretical_median(r):
    # the median error sd is within 5 standard errors of the median (1.2533 sd(s) / sqrt(R),
    # the sample median of R normals) of theory sqrt(chi2_{n-r}.median / n); by the delta
    # method sd(s) = sd(s^2) / (2 E s) = sqrt(2 (n - r)) / n / (2 sqrt((n - r)/n))
    n, k = r["cells"], r["cells"] - r["constraint_rank"]
    s = np.asarray(r["error_sd"])
    theory = np.sqrt(stats.chi2.ppf(0.5, k) / n)
    sd_s = np.sqrt(2.0 * k) / n / (2.0 * np.sqrt(k / n))
    assert abs(np.median(s) - theory) < 5 * 1.2533 * sd_s / np.sqrt(len(s))


# ---- Part 2: posterior inference ----

def test_small_releases_and_posterior_draws_keep_the_invariant(r):
    # relative to the largest count: rounding of the release (1e-9) and of the affine latent (1e-8)
    assert r["small_release_max_violation"] < 1e-9
    assert r["posterior_max_violation"] < 1e-8


def test_chains_mixed(r):
    assert r["max_rhat"] < 1.05
    assert r["max_divergent_share"] <= 0.01


def test_posterior_coverage_near_nominal(r):
    # cells of one fit are tied by the margins: count the n - r free dimensions per fit as the
    # independent checks, so the pooled coverage over F fits has standard error about
    # sqrt(0.9 x 0.1 / ((n - r) F)); within 4 of them
    assert len(r["coverage_by_fit"]) == r["fits"]
    se = np.sqrt(0.9 * 0.1 / (r["fits"] * r["small_free_dimensions"]))
    assert abs(r["coverage"] - 0.9) < 4 * se, f"posterior coverage {r['coverage']:.3f} outside 0.9 +- {4 * se:.3f}"
