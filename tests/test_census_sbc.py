"""Simulation-based calibration (Talts et al. 2018) of privinfer.census.hierarchy_model on a
small hierarchy (2 counties x 2 tracts x sex x 4 age groups: every level, the smooth age
departures of the tracts and of the counties (``smooth_levels="all"``) and the learned
overdispersion are in play), fitted by plain pm.sample() with both walks sampled by WalkGibbs
(``walk_steps="gibbs"``: one step per walk, the counties' walk over their tracts' rows; NUTS
for the other parameters, MeasuredPairsGibbs for the cells).  The default at this size, NUTS
for the tracts' walk and no county walk, passed the same calibration before WalkGibbs existed;
WalkGibbs is the newer sampler, so it is the one checked here.

The generative story is the model's own prior given the published total t: the
hyperparameters from their priors; the tract totals uniform over the compositions of t into
the tracts (the flat prior on unit totals restricted to sum x = t: summing the
Dirichlet-multinomials over the cells of each tract leaves a constant, so the totals are
uniform); each tract's cells Dirichlet-multinomial given its total; then one release of the
measurements.  Under a correct posterior sampler, the rank of the true value among
(thinned) posterior draws is uniform."""

import logging
import os

import arviz as az
import numpy as np
import pandas as pd
import pymc as pm
import pytensor
import pytest
from scipy import stats

from privinfer.census import hierarchy_measurements, hierarchy_model
from privinfer.pymc.registry import model_registry

pytestmark = pytest.mark.slow

TOTAL = 400
AGES = ("0-17", "18-44", "45-64", "65+")
QUERIES = {"total": (), "sex x age": ("sex", "age")}


def _frame(counts):
    rows = [{"county": f"c{c}", "tract": f"c{c}t{t}", "sex": s, "age": a}
            for c in range(2) for t in range(2) for s in ("f", "m") for a in AGES]
    f = pd.DataFrame(rows)
    f["count"] = counts
    return f


def _prior_draw(model, hyper, rng):
    """Hyperparameters from their priors (PyMC's own random graph) and the cells given t."""
    values = pm.draw(hyper, random_seed=rng)
    info = model_registry(model)["lattice"]["x"]
    alpha = pytensor.function(hyper, info.prior.alpha, on_unused_input="ignore")(*values)
    grid = info.prior.grid                                   # (tracts, cells per tract)
    # tract totals uniform over the compositions of TOTAL (stars and bars)
    bars = np.sort(rng.choice(TOTAL + grid.shape[0] - 1, grid.shape[0] - 1, replace=False))
    sizes = np.diff(np.concatenate([[-1], bars, [TOTAL + grid.shape[0] - 1]])) - 1
    x = np.zeros(grid.size, np.int64)
    for u, cells in enumerate(grid):
        x[cells] = rng.multinomial(sizes[u], rng.dirichlet(alpha[cells]))
    return dict(zip([v.name for v in hyper], values)), x


def _fractional_rank(draws, truth, rng):
    """Jittered fractional rank of ``truth`` among ~independent draws: uniform on (0, 1)
    under calibration, ties (integer cells) broken uniformly at random."""
    ess = float(az.ess(draws))
    kept = draws[:: max(1, int(np.ceil(len(draws) / max(ess, 1.0))))]  # thin (Talts et al., Sec. 5.1)
    below, ties = int(np.sum(kept < truth)), int(np.sum(kept == truth))
    return (below + rng.integers(0, ties + 1) + rng.random()) / (len(kept) + 1)


def test_hierarchy_model_is_calibrated():
    logging.getLogger("pymc").setLevel(logging.ERROR)
    reps, bins = int(os.environ.get("SBC_REPS", 50)), 5
    rng = np.random.default_rng(20261125)
    mech = hierarchy_measurements(_frame(np.full(32, TOTAL // 32)), geography=["county", "tract"],
                                  attributes=["sex", "age"], queries=QUERIES, rho=0.5)
    template = hierarchy_model(mech.publish(np.full(32, TOTAL // 32), rng=0), walk_steps="gibbs", smooth_levels="all")
    hyper = [v for v in template.free_RVs if v.name != "x"]
    old = [i for i, (s, a) in enumerate(zip(_frame(0)["sex"], _frame(0)["age"])) if a == "65+"]
    tract0 = np.flatnonzero(_frame(0)["tract"] == "c0t0")
    stats_of = {
        "cell c0t0|f|0-17": lambda x, p: x[..., 0],
        "tract c0t0 total": lambda x, p: x[..., tract0].sum(-1),
        "people 65+": lambda x, p: x[..., old].sum(-1),
        "overdispersion": lambda x, p: p["overdispersion"],
        "step_scale_age[1]": lambda x, p: p["step_scale_age"][..., 1],
    }
    ranks = {k: [] for k in stats_of}
    for rep in range(reps):
        truth_p, x = _prior_draw(template, hyper, rng)
        rel = mech.publish(x, rng=rng)
        with hierarchy_model(rel, walk_steps="gibbs", smooth_levels="all"):
            idata = pm.sample(250, tune=250, chains=1, cores=1, random_seed=rep, progressbar=False,
                              compute_convergence_checks=False)
        post = idata.posterior
        xd = post["x"].values[0]
        assert np.all(xd.sum(-1) == TOTAL) and xd.min() >= 0
        pd_ = {k: post[k].values[0] for k in ("overdispersion", "step_scale_age")}
        for k, f in stats_of.items():
            ranks[k].append(_fractional_rank(f(xd, pd_), f(x, truth_p), rng))
    # chi-square of uniform ranks per statistic (expected 10 per bin); five statistics, so
    # Bonferroni: each at alpha = 0.01 / 5
    pvals = {k: stats.chisquare(np.bincount(np.minimum((np.array(r) * bins).astype(int), bins - 1),
                                            minlength=bins)).pvalue for k, r in ranks.items()}
    assert min(pvals.values()) > 0.01 / len(pvals), f"SBC ranks not uniform: p-values {pvals}"
