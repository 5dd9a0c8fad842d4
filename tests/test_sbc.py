"""Simulation-based calibration (Talts et al. 2018) of a hierarchical model with an integer
latent under a total invariant, sampled with NUTS (rate) + LatticeMetropolis (counts)."""

import logging

import arviz as az
import numpy as np
import pymc as pm
import pytest
from scipy import stats

from privinfer import invariants as I
from privinfer.mechanisms import GeneralizedLaplace
from privinfer.pymc import lattice_latent, observe
from privinfer.pymc import LatticeMetropolis


def _noise_mechanism(inv):
    """Generalized Laplace (l1) on the lattice of the state-total invariant."""
    return GeneralizedLaplace(inv, epsilon=0.5, norm="l1")


@pytest.mark.slow
def test_sbc_poisson_lognormal_counties_state_total():
    logging.getLogger("pymc").setLevel(logging.ERROR)
    n, reps, bins = 4, 100, 10
    inv = I.total(n)
    mech = _noise_mechanism(inv)
    rng = np.random.default_rng(2026)
    fractional_ranks = []
    for rep in range(reps):
        # generative story: theta ~ N(log 8, 0.5); x_i | theta ~ Poisson(e^theta) iid;
        # t = sum x published exactly; y = release of x (keeps t)
        theta = rng.normal(np.log(8.0), 0.5)
        x = rng.poisson(np.exp(theta), n)
        y = mech.release(x, rng=rng)
        with pm.Model():
            th = pm.Normal("theta", np.log(8.0), 0.5)
            xl = lattice_latent("x", inv, [x.sum()], prior=pm.Poisson.dist(mu=pm.math.exp(th) * np.ones(n)))
            observe("y", mech, xl, observed=y)
            idata = pm.sample(400, tune=300, step=[LatticeMetropolis([xl]), pm.NUTS([th])], chains=1,
                              cores=1, random_seed=rep, progressbar=False, compute_convergence_checks=False)
        draws = idata.posterior["theta"].values.ravel()
        assert np.all(idata.posterior["x"].values.sum(-1) == x.sum())
        # thin to roughly independent draws (Talts et al. 2018, Sec. 5.1)
        ess = float(az.ess(draws))
        step = max(1, int(np.ceil(len(draws) / max(ess, 1.0))))
        kept = draws[::step]
        rank = int(np.sum(kept < theta))
        # jittered fractional rank: exactly Uniform(0,1) under calibration whatever len(kept)
        fractional_ranks.append((rank + rng.random()) / (len(kept) + 1))
    counts = np.bincount(np.minimum((np.array(fractional_ranks) * bins).astype(int), bins - 1), minlength=bins)
    # chi-square test of uniform ranks at alpha = 0.01 (expected 10 per bin)
    p = stats.chisquare(counts).pvalue
    assert p > 0.01, f"SBC rank histogram not uniform: counts {counts}, p = {p:.3g}"
