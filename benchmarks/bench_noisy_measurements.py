"""Kentucky noisy measurements: the exact posterior against GLS and TopDown-style estimates.

Data: Kentucky's 120 counties x 2 sexes x 23 age groups (5,520 cells, table P12 of the 2010
SF1 via the NHGIS demonstration file; ``privinfer.datasets.load_nhgis_sex_by_age``).  One
release of :func:`privinfer.mechanisms.county_sex_age_measurements` (detailed cells, county
totals, state sex x age; the state total invariant) with the budget below, then

* the posterior of ``x`` under a uniform prior on the fibre (``privinfer.models.
  noisy_measurements_model`` with the county x sex-age grid moves), sampled by PyMC with the
  lattice step, 2 chains on 2 cores;
* GLS with 90% Gaussian intervals (``privinfer.inference.gls_estimate``);
* TopDown-style post-processing of the GLS point (``topdown_style_estimate``).

Printed: sampling time, max R-hat, min and median bulk ESS; RMSE against the truth of the
posterior mean, GLS and TopDown-style, and the ratios posterior/GLS and posterior/TopDown,
overall and for cells under 100 people; 90% interval coverage and mean width (posterior
equal-tailed intervals vs GLS), and the number of GLS intervals reaching below zero.
Goals: max R-hat <= 1.01, min bulk ESS >= 400 in under 5 minutes on 2 cores.

Budget (zCDP rho per query; ours, not the Bureau's): 0.0025 each for the detailed cells,
the county totals and the state sex x age table (sigma = 14.15 each, total rho = 0.0075).
For scale: the 2020 production run spent rho = 2.56 on all P.L. 94-171 person tables
(Abowd et al. 2022, as quoted by Cho and Awan, Semi-DP, Sec. 6); the small budget here puts
the detailed cells' noise (sd 14) at the order of the 2020-05-27 demonstration run's error on
these cells (mean absolute error 41), where the choice of estimator matters.

Run: ``python benchmarks/bench_noisy_measurements.py [--quick] [--draws N] [--tune N] [--seed S]``
(``--quick``: 150 draws after 100 tuning iterations, a sanity run that does not meet the goals).
"""

from __future__ import annotations

import argparse
import logging
import time

import arviz as az
import numpy as np
import pymc as pm

from privinfer.datasets import load_nhgis_sex_by_age
from privinfer.inference import gls_estimate, topdown_style_estimate
from privinfer.mechanisms import county_sex_age_measurements
from privinfer.models import noisy_measurements_model

RHO = {"rho_detailed": 0.0025, "rho_county": 0.0025, "rho_state_sex_age": 0.0025}


def _rmse(a, x, mask=None):
    d = (np.asarray(a, dtype=float) - x) if mask is None else (np.asarray(a, dtype=float) - x)[mask]
    return float(np.sqrt(np.mean(d * d)))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a short sanity run")
    ap.add_argument("--draws", type=int, default=3500)
    ap.add_argument("--tune", type=int, default=500)
    ap.add_argument("--seed", type=int, default=20240611)
    args = ap.parse_args(argv)
    draws, tune = (150, 100) if args.quick else (args.draws, args.tune)
    logging.getLogger("pymc").setLevel(logging.ERROR)

    data = load_nhgis_sex_by_age("KY")
    x = data.sf.reshape(-1)
    counties, sexes, ages = data.shape
    mech = county_sex_age_measurements(counties, sexes, ages, **RHO)
    release = mech.publish(x, rng=args.seed)
    print(f"Kentucky: {x.size} cells, {mech.m} measurements, sigmas {[float(s) for s in mech.sigmas]}, "
          f"rho = {mech.guarantee.rho:.4g}; (eps, 1e-10) = ({mech.guarantee.to_approx_dp(1e-10).epsilon:.3g}, 1e-10)")

    t0 = time.perf_counter()
    gls = gls_estimate(release, level=0.9)
    t_gls = time.perf_counter() - t0
    topdown = topdown_style_estimate(release, gls, rng=args.seed)

    grid = np.arange(x.size).reshape(counties, sexes * ages)
    model = noisy_measurements_model(release, grid=grid, rng=args.seed)
    t0 = time.perf_counter()
    with model:
        idata = pm.sample(draws=draws, tune=tune, chains=2, cores=2, random_seed=args.seed, progressbar=False,
                          compute_convergence_checks=False)
    t_mcmc = time.perf_counter() - t0
    summ = az.summary(idata, var_names=["x"], kind="diagnostics")
    post = idata.posterior["x"].values.reshape(-1, x.size)
    mean = post.mean(axis=0)
    lo, hi = np.quantile(post, [0.05, 0.95], axis=0)

    print(f"GLS: {t_gls:.2f} s; posterior: {draws} draws x 2 chains after {tune} tuning in {t_mcmc:.1f} s")
    print(f"max R-hat {summ['r_hat'].max():.3f}, min bulk ESS {summ['ess_bulk'].min():.0f}, "
          f"median bulk ESS {summ['ess_bulk'].median():.0f}, "
          f"acceptance {float(idata.sample_stats['lattice_accept'].mean()):.2f}")
    small = x < 100
    for label, mask in (("all cells", None), (f"cells < 100 ({int(small.sum())})", small)):
        rp, rg, rt = _rmse(mean, x, mask), _rmse(gls.x, x, mask), _rmse(topdown, x, mask)
        print(f"RMSE {label}: posterior {rp:.2f}, GLS {rg:.2f}, TopDown-style {rt:.2f}; "
              f"ratio posterior/GLS {rp / rg:.3f}, posterior/TopDown {rp / rt:.3f}")
    for label, mask in (("all cells", np.ones(x.size, bool)), ("cells < 100", small)):
        cov_p = np.mean((lo <= x) & (x <= hi) & mask) / mask.mean()
        cov_g = np.mean((gls.lower <= x) & (x <= gls.upper) & mask) / mask.mean()
        print(f"90% coverage {label}: posterior {cov_p:.3f} (mean width {np.mean((hi - lo)[mask]):.1f}), "
              f"GLS {cov_g:.3f} (mean width {np.mean((gls.upper - gls.lower)[mask]):.1f})")
    print(f"GLS intervals below zero: {int(gls.negative_lower.sum())}; posterior lower bounds below zero: "
          f"{int(np.sum(lo < 0))}")


if __name__ == "__main__":
    main()
