"""Intersecting counting constraints case study, executed as a notebook; its headline numbers checked."""

import pytest
from scipy import stats

from notebook_helpers import execute_study

pytestmark = pytest.mark.slow

NORMS = 2


@pytest.fixture(scope="module")
def study():
    return execute_study("intersecting_constraints")


def test_notebook_shows_its_figures_inline(study):
    # TV bounds, release noise, posterior, traces, forest of the counts over releases
    assert len(study.outputs("image/png")) == 5


def test_short_basis_spans_the_lattice(study):
    r = study.results
    assert r["basis_in_kernel"]  # C B = 0 exactly
    assert r["rank"] == 3
    assert r["lattice_dimension"] == r["records"] - r["rank"] == 11


def test_coupling_bound_is_certified(study):
    tv = study.results["tv"]
    assert set(tv) == {"l1", "l2"}
    for norm, cert in tv.items():
        assert cert["non_increasing"], norm
        assert cert["bound_at_burn_in"] <= 0.01, norm  # the certificate's threshold


def test_releases_keep_the_subset_totals(study):
    for norm, r in study.results["releases"].items():
        assert r["integer"], norm
        assert r["broken_totals"] == 0, norm


def test_releases_are_unbiased(study):
    n = study.results["records"]
    # every record's mean noise over N releases in units of its SE sd / sqrt(N): Bonferroni over
    # 14 records x 2 norms at family-wise level 0.001 (two-sided, normal approximation)
    z_bonf = stats.norm.isf(0.001 / (2 * n * NORMS))
    for norm, r in study.results["releases"].items():
        assert r["max_abs_z"] <= z_bonf, (norm, r["max_abs_z"])


def test_posterior_lives_on_the_fibre(study):
    p = study.results["posterior"]
    assert p["releases_off_totals"] == 0
    assert p["draws_off_fibre"] == 0  # every draw keeps the three totals and is non-negative


def test_chains_mixed(study):
    p = study.results["posterior"]
    assert len(p["rhat_mu_sigma"]) == p["replicates"]
    assert max(p["rhat_mu_sigma"]) < 1.05  # mu and sigma, in every fit


def test_posterior_intervals_cover_the_truth(study):
    p = study.results["posterior"]
    # 11 free coordinates per release: the 14 coverage events of one release are tied by the
    # three totals, so count 11 effective trials; the covered fraction must reach the 0.1%
    # quantile of Binomial(11 R, 0.9) / (11 R) (one-sided: too wide is conservative, not wrong)
    n_eff = p["free_coordinates"] * p["replicates"]
    assert p["free_coordinates"] == 11
    assert p["fraction_90"] >= stats.binom.ppf(0.001, n_eff, 0.9) / n_eff
