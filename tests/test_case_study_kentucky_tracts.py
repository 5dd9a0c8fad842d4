"""Kentucky tracts case study, executed as a notebook; what it must deliver checked.

Every bound below is derived from the study's own inputs (the true cells, the GLS standard
errors, the numbers of cells and tracts, the effective sample sizes) -- never from a result of
an earlier run.
"""

import numpy as np
import pytest
from scipy import stats

from notebook_helpers import execute_study

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def study():
    return execute_study("kentucky_tracts")


def printed(study) -> str:
    return "".join(o.get("text", "") for c in study.notebook.cells if c.cell_type == "code"
                   for o in c.get("outputs", []) if o.get("output_type") == "stream")


def tract_cells(r):
    return np.asarray(r["tract_cells"]["truth"], dtype=float), np.asarray(r["tract_cells"]["gls_se"], dtype=float)


def test_notebook_shows_its_figures_inline(study):
    # error and coverage by cell size, one tract's age pyramid, the tracts' shares aged 65+
    assert len(study.outputs("image/png")) == 3


def test_every_estimate_keeps_the_invariant(study):
    r = study.results
    assert r["fibre_ok"]  # every posterior draw: non-negative, summing to the published total
    assert r["posterior_draws"] == r["chains"] * r["draws"]
    assert r["gls_total_error"] <= 1e-6 * r["total"]  # GLS imposes the total up to rounding
    assert r["topdown_keeps_total"] and r["topdown_nonnegative_integers"]


def test_posterior_intervals_never_reach_below_zero(study):
    for level, by_bin in study.results["table"].items():
        assert by_bin["all"]["negative_lower"]["posterior"] == 0, level


def test_gls_negative_lower_bounds_as_many_as_its_error_law_implies(study):
    r = study.results
    x, se = tract_cells(r)
    z = stats.norm.ppf(0.5 + r["level"] / 2)
    # GLS of a cell is x + e with e ~ N(0, se^2) (a linear map of discrete Gaussian noise: mean
    # 0, the exact variance se^2), so its lower end x + e - z se is below zero with probability
    # Phi(z - x / se).  The count over cells is a sum of such indicators: nearly independent
    # (each tract cell has its own measurement; the county and state measurements it shares
    # add little), so 5 sd of the independent sum, plus 1 for the normal approximation.
    p = stats.norm.cdf(z - x / se)
    expected, sd = p.sum(), np.sqrt(np.sum(p * (1 - p)))
    observed = r["table"]["tract"]["all"]["negative_lower"]["gls"]
    assert observed > 0
    assert abs(observed - expected) <= 5 * sd + 1, (observed, expected, sd)


def test_tract_cell_coverage_near_nominal(study):
    r = study.results
    level, n = r["level"], r["cells"]
    # binomial sd of the coverage of n independent intervals; the cells of one tract share its
    # estimated profile, so the study also gives the sd from the spread over tracts: take the
    # larger.  GLS intervals are exact Gaussian frequentist intervals: 4 sd.  The posterior's
    # ends are quantiles of draws with effective size ESS: each tail's estimated probability
    # has sd sqrt(0.05 * 0.95 / ESS), allowed once more, at the smallest ESS over the cells.
    binom = np.sqrt(level * (1 - level) / n)
    tail = (1 - level) / 2
    mc = 2 * np.sqrt(tail * (1 - tail) / r["convergence"]["cells_min_ess"])
    for key, allowance in (("gls", 0.0), ("posterior", mc)):
        c = r["tract_coverage"][key]
        assert abs(c["coverage"] - level) <= 4 * max(binom, c["cluster_se"]) + allowance, (key, c)


def test_randomized_coverage_of_tract_cells_near_nominal(study):
    r = study.results
    level = r["level"]
    rnd = r["tract_randomized_coverage"]
    tail = (1 - level) / 2
    mc = 2 * np.sqrt(tail * (1 - tail) / r["convergence"]["cells_min_ess"])
    # every cell's randomized indicator lies in [0, 1] with mean `level` under calibration, so
    # over n cells its mean has at most the binomial sd; the cells of one tract are correlated,
    # by the factor the closed coverage's spread over tracts shows (at least 1): 4 sd, plus
    # the Monte Carlo allowance of the interval ends (test above)
    inflate = max(1.0, r["tract_coverage"]["posterior"]["cluster_se"] / np.sqrt(level * (1 - level) / r["cells"]))
    for label in ("all", "<30"):
        c = rnd[label]
        sd = inflate * np.sqrt(level * (1 - level) / c["n"])
        assert abs(c["randomized"] - level) <= 4 * sd + mc, (label, c, sd, mc)
        # the randomized interval keeps a part of each end's atom: never above the closed one
        assert c["randomized"] <= c["covered"] + 1e-12 and c["mass"] >= level - mc
    assert rnd["all"]["n"] == r["cells"]


def test_gls_coverage_of_county_and_state_cells(study):
    # sums of tract cells: GLS's intervals use their exact variances, so the binomial band holds
    # at every level (4 sd; the sums' errors are nearly independent across sex x age cells)
    r = study.results
    for level in ("county", "state"):
        s = r["table"][level]["all"]
        sd = np.sqrt(r["level"] * (1 - r["level"]) / s["n"])
        assert abs(s["coverage"]["gls"] - r["level"]) <= 4 * sd, (level, s["coverage"])


def test_posterior_beats_gls_on_small_cells_at_least_by_what_non_negativity_gives(study):
    r = study.results
    x, se = tract_cells(r)
    small = x < 30
    assert small.sum() == r["table"]["tract"]["<30"]["n"]
    # Non-negativity alone: max(g, 0) is never farther from a count x >= 0 than g, cell by cell,
    # and strictly closer whenever g < 0.  Its RMSE ratio to GLS on these cells, under GLS's own
    # error law g = x + N(0, se^2) (independent cells), is simulated here; the posterior, which
    # knows non-negativity and pools the tracts, must do at least as well as the 99.9% quantile
    # of that ratio, which itself lies below 1.
    rng = np.random.default_rng(20200)
    g = x[small] + se[small] * rng.standard_normal((4000, int(small.sum())))
    ratio = np.sqrt(np.mean((np.maximum(g, 0) - x[small]) ** 2, axis=1) / np.mean((g - x[small]) ** 2, axis=1))
    bound = float(np.quantile(ratio, 0.999))
    assert bound < 1
    rm = r["table"]["tract"]["<30"]["rmse"]
    assert rm["posterior"] < bound * rm["gls"], (rm, bound)


def test_share_aged_65_plus_coverage(study):
    r = study.results
    share = r["share_65_plus"]
    k, level = share["tracts"], r["level"]
    # one share per tract, k tracts: binomial band, 4 sd (the delta method is accurate at tract
    # sizes of thousands); the posterior's ends again get the Monte Carlo allowance, at the
    # shares' own smallest ESS (a share mixes more slowly than its cells)
    sd = np.sqrt(level * (1 - level) / k)
    tail = (1 - level) / 2
    mc = 2 * np.sqrt(tail * (1 - tail) / share["posterior_min_ess"])
    assert abs(share["coverage"]["gls"] - level) <= 4 * sd
    assert abs(share["coverage"]["posterior"] - level) <= 4 * sd + mc
    assert set(share["coverage"]) == {"posterior", "gls"}  # TopDown-style: a point, no interval


def test_convergence_is_reported_as_seen(study):
    c = study.results["convergence"]
    met = (max(c["cells_max_rhat"], c["params_max_rhat"]) <= 1.01
           and min(c["cells_min_ess"], c["params_min_ess"]) >= 400)
    assert c["targets_met"] == met
    text = printed(study)
    assert ("met by every cell and parameter" in text) == met
    assert ("NOT met in this run" in text) == (not met)


def test_cell_chains_agree(study):
    r = study.results
    c = r["convergence"]
    # the cells' chains agree by the lenient rule (R-hat < 1.05 for every cell), and NUTS
    # diverged in at most 1% of the draws (divergences mean regions the chains did not explore)
    assert c["cells_max_rhat"] < 1.05
    assert c["divergences"] <= 0.01 * r["chains"] * r["draws"]
