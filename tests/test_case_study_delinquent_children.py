"""Delinquent children case study, executed as a notebook; its headline numbers checked."""

import pytest
from scipy import stats

from notebook_helpers import execute_study

pytestmark = pytest.mark.slow

CELLS, NORMS = 16, 2


@pytest.fixture(scope="module")
def study():
    return execute_study("delinquent_children")


def test_notebook_shows_its_figures_inline(study):
    # TV bounds, release noise, posterior, log odds ratio forest, posterior predictive check
    assert len(study.outputs("image/png")) == 5


def test_coupling_bounds_decrease_to_zero(study):
    tv = study.results["tv"]
    assert set(tv) == {"l1", "l2"}
    for norm, cert in tv.items():
        assert len(cert["by_lag"]) >= 2, norm  # L0 / 2, L0 and 2 L0 (fewer only when L0 = 1)
        for lag, b in cert["by_lag"].items():
            assert b["non_increasing"], (norm, lag)
            # at the largest meeting time every coupled pair has met: the bound is 0 <= 0.01
            assert b["final_bound"] == 0, (norm, lag)


def test_releases_keep_the_margins(study):
    for norm, r in study.results["releases"].items():
        assert r["integer"], norm
        assert r["broken_margins"] == 0, norm
        assert r["reference_off_lattice"] == 0, norm  # the long reference chains too


def test_releases_are_unbiased(study):
    # every cell's mean noise over N releases in units of its SE sd / sqrt(N): Bonferroni over
    # 16 cells x 2 norms at family-wise level 0.001 (two-sided, normal approximation)
    z_bonf = stats.norm.isf(0.001 / (2 * CELLS * NORMS))
    for norm, r in study.results["releases"].items():
        assert r["max_abs_z"] <= z_bonf, (norm, r["max_abs_z"])


def test_certified_burn_in_reaches_the_law(study):
    # releases after the certified burn-in T vs noise after LONG_FACTOR x T sweeps, cell by cell:
    # two-sample Kolmogorov-Smirnov, Bonferroni over 16 cells x 2 norms at family-wise 0.001.
    # A TV distance of 0.01 is far below what the test detects (critical KS distance
    # sqrt(ln(2/alpha)/2) sqrt(2/N), about 0.14 at N = 600): it fails only if the certificate
    # is badly wrong
    ks_alpha = 0.001 / (CELLS * NORMS)
    for norm, r in study.results["releases"].items():
        assert r["ks_min_p"] > ks_alpha, (norm, r["ks_min_p"])


def test_posterior_lives_on_the_fibre(study):
    r = study.results
    assert r["fit"]["draws_off_fibre"] == 0  # every draw keeps both margins and is non-negative
    assert r["coverage"]["releases_off_margins"] == 0
    assert r["coverage"]["draws_off_fibre"] == 0  # over every replicate's fit


def test_chains_mixed(study):
    assert study.results["fit"]["max_rhat_log_odds_ratio"] < 1.05


def test_posterior_sees_the_association(study):
    # the table's association is strong: at least one log odds ratio's 90% interval excludes 0
    assert study.results["fit"]["excluding_zero_90"] >= 1


def test_predictive_releases_keep_the_margins(study):
    ppc = study.results["ppc"]
    assert ppc["releases"] >= 100
    assert ppc["integer"]
    assert ppc["off_margins"] == 0


def test_posterior_intervals_cover_the_truth(study):
    c = study.results["coverage"]
    # the 16 coverage events of one table are tied by the margins (only 9 cells are free): count
    # 9 x replicates effective independent trials; the covered fraction must reach the 0.1%
    # quantile of Binomial(9 R, 0.9) / (9 R) (one-sided: too wide is conservative, not wrong)
    n_eff = c["free_cells"] * c["replicates"]
    assert c["free_cells"] == 9
    assert c["fraction_90"] >= stats.binom.ppf(0.001, n_eff, 0.9) / n_eff
