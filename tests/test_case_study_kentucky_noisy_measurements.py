"""Kentucky noisy measurements case study, executed as a notebook; its headline numbers checked."""

import numpy as np
import pytest

from notebook_helpers import execute_study

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def study():
    return execute_study("kentucky_noisy_measurements")


def test_notebook_shows_its_figures_inline(study):
    assert len(study.outputs("image/png")) >= 3  # RMSE, coverage, rank plots


def test_posterior_lives_on_the_fibre(study):
    r = study.results
    assert r["fibre_ok"]
    assert r["negative_lower_posterior"] == 0  # posterior intervals never reach below zero


def test_chains_mixed(study):
    assert study.results["max_rhat"] < 1.05


def test_coverage_near_nominal(study):
    r = study.results
    # n cells x releases intervals; binomial sd sqrt(0.09 / n) if they were independent; cells
    # share one release's noise, so allow 5 sd plus 0.03 for that dependence
    se = np.sqrt(0.09 / (r["cells"] * r["releases"]))
    assert abs(r["coverage_posterior"] - 0.9) < 5 * se + 0.03
    assert abs(r["coverage_gls"] - 0.9) < 5 * se + 0.03
