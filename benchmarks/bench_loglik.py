"""Pointwise log-likelihood of the national county model: its cost against sampling.

All 3,221 counties of the 2010 Census Gazetteer, state totals kept, a generalized-Laplace (l1)
release at epsilon = 0.192 (Integer subspace DP, Sec. 6), and
:func:`privinfer.models.county_population_model`, sampled with plain ``pm.sample()`` (block
updates for ``x``, NUTS for the rest).  In one run it times

* ``pm.sample`` (model built, compiled and sampled), and
* ``pm.compute_log_likelihood`` on the posterior (the model rebuilt without transforms, one
  term per state: the release's noise is independent across states, correlated within one),

and prints both, their ratio (goal: log-likelihood under 10% of sampling), the size of the
log-likelihood group, the peak resident memory of this process before and after the
log-likelihood, and ``az.loo``'s estimate as a check that the values are usable.

Usage: ``python benchmarks/bench_loglik.py [--small] [--states K] [--draws D] [--tune T]``
(``--small``: the first 8 states, 300 tune + 300 draws).  Data: ``$PRIVINFER_DATA``.
"""

from __future__ import annotations

import argparse
import logging
import resource
import time

import arviz as az
import numpy as np
import pymc as pm

from privinfer.models import county_population_model

from bench_national_posterior import EPSILON, national_release


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far (MB; Linux reports kB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--small", action="store_true", help="first 8 states, fewer draws")
    ap.add_argument("--states", type=int, default=None, help="use the first K states (sorted codes)")
    ap.add_argument("--draws", type=int, default=None)
    ap.add_argument("--tune", type=int, default=None)
    ap.add_argument("--chains", type=int, default=2)
    args = ap.parse_args(argv)
    logging.getLogger("pymc").setLevel(logging.ERROR)
    inv, x, mech, y = national_release(8 if args.small and args.states is None else args.states)
    draws = args.draws or (300 if args.small else 1000)
    tune = args.tune or (300 if args.small else 500)
    print(f"{x.size} counties in {inv.partition.n_groups} states, GL(l1) release at epsilon = {EPSILON}, "
          f"state totals kept; {args.chains} chains x ({tune} tune + {draws} draws)")

    t0 = time.perf_counter()
    model = county_population_model(y, mech, inv)
    with model:
        idata = pm.sample(draws, tune=tune, chains=args.chains, cores=args.chains, random_seed=1,
                          progressbar=False, compute_convergence_checks=False)
    t_sample = time.perf_counter() - t0
    rss_sample = peak_rss_mb()

    t0 = time.perf_counter()
    pm.compute_log_likelihood(idata, model=model, progressbar=False)
    t_loglik = time.perf_counter() - t0
    rss_loglik = peak_rss_mb()

    ll = idata.log_likelihood["y"]
    xd = idata.posterior["x"].values
    # the stored terms sum to the mechanism's own likelihood (NumPy) at a few draws
    check = mech.logp(y, xd[0, :5])
    assert np.allclose(ll.values[0, :5].sum(axis=-1), check, rtol=1e-9), "pointwise terms do not sum to logp"
    finite = bool(np.all(np.isfinite(ll.values)))
    loo = az.loo(idata)
    print(f"pm.sample                 {t_sample:8.1f} s")
    print(f"pm.compute_log_likelihood {t_loglik:8.1f} s   ({ll.shape[-1]} terms x {ll.shape[0] * ll.shape[1]} draws, "
          f"{ll.values.nbytes / 1e6:.1f} MB)")
    ratio = t_loglik / t_sample
    print(f"ratio log-likelihood / sampling: {100 * ratio:.1f}%  (goal < 10%: {'met' if ratio < 0.10 else 'NOT met'})")
    print(f"peak RSS of this process: {rss_sample:.0f} MB after sampling, {rss_loglik:.0f} MB after the "
          "log-likelihood (sampling chains run in child processes when cores > 1)")
    print(f"az.loo: elpd_loo {loo.elpd_loo:.1f} (se {loo.se:.1f}), p_loo {loo.p_loo:.1f}, "
          f"max Pareto k {float(np.max(loo.pareto_k)):.2f}; every term finite: {finite}")


if __name__ == "__main__":
    main()
