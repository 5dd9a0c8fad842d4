"""National county posterior: block updates (plain ``pm.sample()``) against local lattice moves.

All 3,221 counties of the 2010 Census Gazetteer (50 states, DC and Puerto Rico's municipios),
state totals kept, a generalized-Laplace (l1) release at epsilon = 0.192 (Integer subspace DP,
Sec. 6), and :func:`privinfer.models.county_population_model` (hierarchical log-normal--Poisson).
Two ways to sample the same model, 2 chains on 2 cores each:

* **baseline** -- ``pm.sample(step=lattice_steps(model, step_class=LatticeMetropolis))``: local
  within-state pair moves (the sampler before block updates), 300 tune + 300 draws;
* **block** -- plain ``pm.sample()``: PyMC assigns ``LatticeBlockGibbs`` to ``x`` (exact
  per-state draws given the state total, tree FFBS + Metropolis--Hastings) and NUTS to the
  rest, 500 tune + 1,000 draws.

Printed: wall time (model built, compiled and sampled), min bulk ESS and max R-hat over every
county's ``x``, the worst county's ESS per second for both and their ratio, the block
acceptance rate, and a check that every draw keeps every state total.
Goals: max R-hat <= 1.01, min bulk ESS >= 400, wall < 2 minutes, ratio >= 30.

Usage: ``python benchmarks/bench_national_posterior.py [--quick] [--states K]``
(``--quick``: the first 8 states, fewer draws).  Data: ``$PRIVINFER_DATA``.
"""

from __future__ import annotations

import argparse
import logging
import time

import arviz as az
import numpy as np
import pymc as pm

from privinfer.datasets import load_gazetteer_counties
from privinfer.mechanisms import GeneralizedLaplace
from privinfer.models import county_population_model
from privinfer.pymc import LatticeMetropolis, lattice_steps

EPSILON = 0.192


def run(y, mech, inv, *, block: bool, draws: int, tune: int, seed: int):
    t0 = time.perf_counter()
    model = county_population_model(y, mech, inv)
    with model:
        step = None if block else lattice_steps(model, step_class=LatticeMetropolis)
        idata = pm.sample(draws, tune=tune, step=step, chains=2, cores=2, random_seed=seed,
                          progressbar=False, compute_convergence_checks=False)
    wall = time.perf_counter() - t0
    x = idata.posterior["x"]
    draws_x = x.values.reshape(-1, x.shape[-1])
    assert np.all(inv.of(draws_x) == inv.t), "a draw broke a state total"
    summ = az.summary(idata, var_names=["x"], kind="diagnostics")
    ess = float(summ["ess_bulk"].min())
    rhat = float(summ["r_hat"].max())
    acc = float(idata.sample_stats["lattice_block_accept"].mean()) if block else float("nan")
    return wall, ess, rhat, acc


def national_release(states=None):
    """The national county table (the first ``states`` states by sorted code; all when
    ``None``), its state-total invariant, the true counts, the GL(l1) mechanism at
    ``EPSILON`` and one release of it (fixed seed)."""
    g = load_gazetteer_counties()
    if states is not None:
        g = g.subset(g.states()[:states])
    inv = g.invariant()
    x = np.asarray(g.pop10, dtype=np.int64)
    mech = GeneralizedLaplace(inv, epsilon=EPSILON)
    return inv, x, mech, mech.release(x, rng=np.random.default_rng(20100401))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="first 8 states, fewer draws")
    ap.add_argument("--states", type=int, default=None, help="use the first K states (sorted codes)")
    args = ap.parse_args(argv)
    logging.getLogger("pymc").setLevel(logging.ERROR)
    inv, x, mech, y = national_release(8 if args.quick and args.states is None else args.states)
    assert mech.exact
    print(f"{x.size} counties in {inv.partition.n_groups} states, GL(l1) release at epsilon = {EPSILON}, "
          "state totals kept")
    base_d, base_t = (150, 150) if args.quick else (300, 300)
    blk_d, blk_t = (500, 300) if args.quick else (1000, 500)
    wb, eb, rb, _ = run(y, mech, inv, block=False, draws=base_d, tune=base_t, seed=1)
    print(f"baseline  lattice_steps(LatticeMetropolis), 2 x ({base_t} tune + {base_d} draws): wall {wb:6.1f} s, "
          f"min ESS {eb:7.1f}, max R-hat {rb:.3f}, worst-county ESS/s {eb / wb:7.3f}")
    wk, ek, rk, acc = run(y, mech, inv, block=True, draws=blk_d, tune=blk_t, seed=2)
    print(f"block     plain pm.sample() (LatticeBlockGibbs), 2 x ({blk_t} tune + {blk_d} draws): wall {wk:6.1f} s, "
          f"min ESS {ek:7.1f}, max R-hat {rk:.3f}, worst-county ESS/s {ek / wk:7.3f}, block acceptance {acc:.4f}")
    print(f"ratio of worst-county ESS/s, block / baseline: {(ek / wk) / (eb / wb):.1f}  (goal >= 30)")
    print(f"goals: max R-hat <= 1.01: {rk <= 1.01}; min ESS >= 400: {ek >= 400}; wall < 120 s: {wk < 120}")


if __name__ == "__main__":
    main()
