"""Effective samples per second for latent counts: LatticeMetropolis vs PyMC's Metropolis.

Model (same for every sampler): counties i = 1..n with a published state total,
x_i ~ Poisson(mu_i) iid given the total, release y = x + double-geometric noise (scale 2).
Samplers, each run in this process on the same model and data:

* ``LatticeMetropolis`` on x (moves along e_i - e_j, local acceptance ratios);
* PyMC ``Metropolis`` on x itself (the model's fibre indicator rejects every move that
  changes the total, so it cannot move: its ESS is reported as measured);
* PyMC ``Metropolis`` on free integer lattice coordinates z with x = x0 + B z -- the best a
  user can do with stock PyMC samplers.

Printed: seconds, median bulk ESS over cells, ESS/s, and the ratio of LatticeMetropolis's
ESS/s to each baseline.  At >= 500 cells the baselines run fewer draws (each of their draws
costs n whole-model evaluations); ESS/s stays comparable.  Run: ``python benchmarks/bench_lattice_metropolis.py [--sizes 16 100 1000]``
"""

from __future__ import annotations

import argparse
import logging
import time

import arviz as az
import numpy as np
import pymc as pm
import pytensor.tensor as pt

from privinfer import invariants as I
from privinfer.mechanisms.discrete import DoubleGeometric
from privinfer.pymc import lattice_latent, observe
from privinfer.pymc import LatticeMetropolis


def _data(n, rng):
    mu = rng.uniform(5, 50, n)
    x = rng.poisson(mu)
    mech = DoubleGeometric(n, scale=2.0)
    y = mech.release(x, rng=rng)
    return mu, x, mech, y


def _ess_per_s(idata, var, seconds):
    draws = idata.posterior[var].values  # (chain, draw, n)
    ess = np.nan_to_num(az.ess(idata, var_names=[var])[var].values, nan=0.0)
    changed = np.any(np.diff(draws, axis=1) != 0, axis=1).any(axis=0)  # per cell: ever moved
    ess = np.where(changed, ess, 0.0)  # a chain that never moves has no effective draws
    moved = float(np.mean(np.any(np.diff(draws, axis=1) != 0, axis=-1)))
    return float(np.median(ess)), float(np.median(ess)) / seconds, moved


def run(n, draws, tune, seed, baseline_draws=None):
    rng = np.random.default_rng(seed)
    mu, x, mech, y = _data(n, rng)
    inv = I.total(n)
    t = [int(x.sum())]
    out = {}
    kw = dict(draws=draws, tune=tune, chains=1, cores=1, random_seed=seed, progressbar=False,
              compute_convergence_checks=False)
    with pm.Model():
        xl = lattice_latent("x", inv, t, prior=pm.Poisson.dist(mu=mu))
        observe("y", mech, xl, observed=y)
        step = LatticeMetropolis([xl])
        t0 = time.perf_counter()
        idata = pm.sample(step=[step], **kw)
        out["LatticeMetropolis"] = (time.perf_counter() - t0,) + _ess_per_s(idata, "x", time.perf_counter() - t0)
    if baseline_draws:  # PyMC's Metropolis updates one coordinate per full logp evaluation
        kw.update(draws=baseline_draws, tune=max(baseline_draws // 2, 10))
    with pm.Model():
        xl = lattice_latent("x", inv, t, prior=pm.Poisson.dist(mu=mu))
        observe("y", mech, xl, observed=y)
        t0 = time.perf_counter()
        idata = pm.sample(step=[pm.Metropolis([xl])], **kw)
        out["Metropolis on x"] = (time.perf_counter() - t0,) + _ess_per_s(idata, "x", time.perf_counter() - t0)
    B = inv.lattice_basis()
    x0 = inv.feasible_point(t, integer=True, nonnegative=True)
    with pm.Model():
        z = pm.DiscreteUniform("z", -10**6, 10**6, shape=B.shape[1], initval=np.zeros(B.shape[1], dtype=int))
        xz = pm.Deterministic("x", pt.as_tensor_variable(x0) + pt.dot(pt.as_tensor_variable(B), z))
        pm.Potential("prior", pm.logp(pm.Poisson.dist(mu=mu), xz).sum())
        pm.Potential("lik", mech.logp(pt.as_tensor_variable(y), xz))
        t0 = time.perf_counter()
        idata = pm.sample(step=[pm.Metropolis([z])], **kw)
        out["Metropolis on z"] = (time.perf_counter() - t0,) + _ess_per_s(idata, "x", time.perf_counter() - t0)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[16, 100, 1000])
    ap.add_argument("--draws", type=int, default=500)
    ap.add_argument("--tune", type=int, default=300)
    ap.add_argument("--baseline-draws-large", type=int, default=100,
                    help="draws for the PyMC baselines at >= 500 cells (each draw costs n full logp evaluations)")
    args = ap.parse_args(argv)
    logging.getLogger("pymc").setLevel(logging.ERROR)
    print(f"{'cells':>6} {'sampler':>20} {'seconds':>8} {'median ESS':>11} {'ESS/s':>9} {'moved':>6} {'ratio':>9}")
    for n in args.sizes:
        res = run(n, args.draws, args.tune, seed=n,
                  baseline_draws=args.baseline_draws_large if n >= 500 else None)
        base = res["LatticeMetropolis"][2]
        for name, (sec, ess, eps, moved) in res.items():
            ratio = base / eps if eps > 0 else float("inf")
            print(f"{n:>6} {name:>20} {sec:>8.2f} {ess:>11.1f} {eps:>9.2f} {moved:>6.2f} {ratio:>9.1f}")


if __name__ == "__main__":
    main()
