"""The hierarchical posterior (``privinfer.census.hierarchy_model``) against hierarchical GLS on
Kentucky tracts.

Data: ``privinfer.census.synthetic_tracts("KY", rng=7)`` (real 2010 county x sex x age counts
split into about 1,083 tracts; 49,818 cells), measured as the 2020 Census does (state, county
and tract levels; queries total and sex x age; rho 0.0025 per level and query; state total
invariant); ``--counties N`` keeps the first N counties (a quicker run).  One release; in the
same run, the free baseline (hierarchical GLS, ``gls_estimate``) and the posterior of plain
``pm.sample()`` (NUTS for the profiles, scales and concentration; ``MeasuredPairsGibbs`` for
the cells).  Printed:

* times (model build, sampling) and peak resident memory of this process and its chains;
* RMSE against the true cells, posterior mean / GLS, on all cells and on cells under 30;
* 90% coverage and mean width of both, on all cells, cells under 30, the tracts' shares
  aged 65+ (posterior quantiles vs GLS delta-method intervals) and the counties' people aged
  65+ (a sum over ages within a county: GLS intervals of the sum); GLS negative lower bounds;
  beside the posterior's coverage of cells, what a calibrated posterior would give its integer
  intervals (their posterior mass, above 0.9 for small counts: a Poisson(2) posterior's 90%
  interval [0, 5] holds 0.98, a Poisson(5)'s [2, 9] 0.93) and the randomized coverage, exactly
  0.9 under calibration (``privinfer.inference.interval_coverage``);
* convergence: max R-hat and min bulk ESS over all cells and over the parameters, the lattice
  step's acceptance and move rates; beside them, the same diagnostics of exactly independent
  draws of the same size (the floor no sampler can beat: over 49,818 cells, 2 x 300 independent
  draws give a max R-hat near 1.026 and a min ESS near 220, so the goal's R-hat <= 1.01 over all
  cells needs about 2 x 700 effectively independent draws; measured with the default settings,
  ``--draws 1600``: max R-hat 1.010 and min bulk ESS 387 in 2,113 s of sampling, 1.021 and 187
  over the first 800 draws per chain, 1.052 and 40 over the first 400, and 1.041-1.052 and
  37-83 over any later window of 400: the short run's tail is the chains' steady state, whose
  slowest cells, two tracts' people 65+, give 0.12 effective draws per draw); and the draws per
  chain, and the time, the goal would take at the run's measured rates (``print_goal_draws``);
* where the chains are slow: the five cells of largest R-hat (tract, sex, age, R-hat, bulk ESS,
  posterior mean), how the cells with R-hat above 1.05 spread over the tracts, and the bulk ESS
  of the tracts' shares aged 65+ and under 18 (the directions a sampler finds hardest: a whole
  age range of a tract against the rest).

``--save PATH`` writes the posterior (InferenceData) to netCDF, for diagnosis after the run.
``--chain-seed S`` runs other chains on the same data and release (the chains' diagnostics vary
between runs as much as between settings; compare settings over several chain seeds).

Goals: RMSE <= 0.65 x GLS on cells under 30 and <= 0.88 x GLS on all cells; coverage 0.88-0.92;
R-hat <= 1.01, ESS >= 400; under 10 minutes on 2 cores, under 4 GB.

``--table counties``: the real 2010 county x sex x age table of Kentucky (120 counties, 5,520
cells; ``privinfer.datasets.load_nhgis_sex_by_age``) measured the same way at the state and
county levels (the design of ``bench_noisy_measurements.py``: detailed cells, county totals,
state sex x age, rho 0.0025 each, plus the state total); small cells are those under 100
(goal: RMSE <= 0.85 x GLS there, coverage 0.88-0.92).

``--walk-steps gibbs|nuts``: the tract walk by ``WalkGibbs`` or by NUTS (partly non-centred); default
``auto``, the model's choice (``WalkGibbs`` from ``privinfer.census.GIBBS_UNITS`` tracts on).

``--cell-effects``: ``hierarchy_model(cell_effects=True)``, independent log-normal effects of the
cells beside the Dirichlet-multinomial (whose overdispersion is then fixed, 0.001), sampled by
``CellEffectsGibbs``.

``--walk-tails NU [--walk-tails-by unit|increment]``: ``hierarchy_model(walk_tails=NU)``, Student-t
tract walks (a prior variance multiplier per tract, or per tract and increment; the walk's scales
then by the unit transport); the run prints the multipliers' posterior means.  All tracts, 2 x
(200 + 400), NU 4: per tract, the cells' max R-hat 1.625 and min bulk ESS 3 (campus tracts take
multipliers near 2,500, freeing their walk at every age), RMSE 0.646 / 0.378 of GLS, the shares
65+ covered 0.900; per increment, 1.894 and 3 (the campus tracts' ages 15-17), the shares 65+ min
ESS 17 against 10; 1,660-1,790 s, the unit transport twice the transport's cost per iteration.
Off by default.

``--quantile-carry C``: ``hierarchy_model(quantile_carry=C)``, the tracts' cells with a GLS estimate
under ``C`` moved in the walk's carried update by the Dirichlet-multinomial's quantile map (default
``privinfer.census.QUANTILE_CARRY``, 20; 0: every cell translated).  All tracts, 2 x (200 + 400),
default chain seed and seed 11, 20 against 0: cells max R-hat 1.054 / 1.081 against 1.083 / 1.086,
min bulk ESS 34 / 25 against 20 / 21, cells above R-hat 1.05: 2 / 7 against 16 / 16; the
zero-touching shares 65+ min ESS 45 / 39 against 10 / 13; RMSE and coverage unchanged; 1,162 s
(seed 11) against 1,007 s, a tract-walk iteration 0.91 s against 0.84 s.  50 against 20: 1.045 /
1.108, min ESS 39 / 13, above 1.05: 0 / 23 (the 772-person tract 21111008800 on seed 11); 1,277 s
against 1,162 s on seed 11, both alone: better on one seed, worse on the other, and dearer.

``--collapse F``: ``WalkGibbs``'s collapsed move of the pairs of tracts both under ``F`` of the
median size (default ``privinfer.pymc.walk.COLLAPSE_SMALL``, ``inf``: every pair of a matching by
size; 0: off; 0.5: the earlier default; the measurements are written beside that constant).

``--alone F``: ``WalkGibbs``'s move of a tract against several of its siblings (``privinfer.pymc.walk_alone``)
for the tracts under ``F`` of the median size in counties of three or more tracts (default
``privinfer.pymc.walk.ALONE_SMALL``; 0: off).

``--cousins F``: ``WalkGibbs``'s move of a tract's profile alone, its county's walk taking up the change
and a cousin tract's county giving it back (``privinfer.pymc.walk_cousin``), for the tracts under ``F``
of the median size (default ``privinfer.pymc.walk.COUSINS_SMALL``; 0: off).

``--carry-directions K``: ``WalkGibbs(carry_directions=K)`` for every walk (an integer, or ``all``;
default ``privinfer.pymc.walk.CARRY_DIRECTIONS``), the increments per pair of the carried update
(1, 8 and all measured with ``--collapse 100``: written beside that constant).

The line "cells by their tract's size" gives the cells' worst R-hat and ESS per class of tract
size.  In six runs of the default budget (two chain seeds; ``--quantile-carry`` 0, 20 and 50;
each tract's learned slowest direction added to the carried update) the slowest cells were each
time in the 35 tracts of under half the median size, the smallest or second smallest of their
county: min bulk ESS 9-39 there, 33-70 in the tracts of 0.5 to 1 times the median, 67-140 in the
larger ones.  The tail's size varies by chain seed as much as by any of these changes (1.045 to
1.108 for the same model), so a change to the sampler needs two seeds or more to be judged.

The lines "bulk ESS of the county profiles less the state's" and "slowest cells against their
county's profile" look one level up (``print_slow_profiles``).  Today's default sampler (the
collapsed move compiled), all tracts, default chain seed, 714 s: the five slowest cells (ESS
56-57) are old-age or child cells of tracts of 1,800-2,300 people whose ages depart far from
their county's (shares 65+ of 1.5-4.3% against 11-17%, two of them campuses, or 29% against
17%); for four of them the 20-draw means correlate 0.70-0.83 with their county's departure at
the same sex and age (ESS 39-113).  On the first 40 counties (``--counties 40``) both chain
seeds put the slowest cells (ESS 20) in Murray's campus tract 21035000600 (70% aged 18-24), its
old-age cells correlated 0.83-0.90 with its county's departure there (ESS 17-33).  Such a
tract's old-age cells are set by its profile more than by their measurements, and its profile
cannot move alone: the tracts' walks are centred within their county, so every move of the
tract's walk moves a sibling's profile the other way (the pair moves, the carried update, the
collapsed move) or every sibling's with it (the county's walk), and the siblings' cells, which
their measurements pin, hold it back.  What did not help there (first 40 counties, 2 x (200 +
400)): the county walk's carried update on every direction (chain seed 7: cells min ESS 69
against 10; chain seed 11: 11 against 20; 1.2-1.3 times the time), on every county (8
directions: 20 against 10 on seed 7, 1.17 times the time; every direction as well: 51, 1.9
times), and BLAS held to one thread per chain (the same chain, bit for bit, in 166 s against
170 s).

Run: ``python benchmarks/bench_hierarchy_model.py [--table tracts|counties] [--counties N] [--draws 500]
[--tune 500] [--mode NUMBA] [--walk-steps auto|gibbs|nuts] [--save PATH]``

The full tracts' budget is ``--tune 200 --draws 400 --mode NUMBA``: 925-986 s and 2.0 GB on 2
cores with today's default model (the counties' walks on), 6 pair-move sweeps per iteration and
the compiled per-row walk terms (1,086 s before them; 977 s with 3 sweeps, the cells' median bulk
ESS 334 against 482 of 800); the model without the counties' walks took 585 s (769 s on a
slower machine, on which the default model takes 1,364-1,390 s).  On a machine where it
took 652 s, the factored scale surrogate, the inverse-gamma rejection draw of the scales and the
batched Cholesky factors brought it to 614-643 s (two runs; the walks' steps 6% cheaper per
iteration on one state).  Carrying the counties of up to 8 tracts (``CARRY_ROWS``) along their
walk: 577 s against 549 s with 4 on one chain seed (``--chain-seed 11``) on a machine that was
faster that day, the cells' max R-hat 1.060 against 1.083 (1.061 against 1.158 on the default
chain seed).
The cells' pair moves proposing along the prior as well as the measurements: on one chain seed
on a slower day, 675 s against 698 s, the moves made 0.77 against 0.55, cells with R-hat above
1.01 2,262 against 2,819 (median ESS 524 against 483; max R-hat 1.059 against 1.060); on the
default chain seed 2,163 against 2,704 (1.063 against 1.061).
Four times the draws (``--tune 200 --draws 1600``, default chain seed, other jobs beside it for its
first 25 minutes): 2,316 s, the cells' max R-hat 1.020 and min bulk ESS 109 (50 cells above
1.01; independent draws of that size: 1.006 / 2,226), the parameters' 1.027 / 102, the tracts'
shares 65+ min bulk ESS 70 (median 942); the slowest cells are again those of the 780-person
tract 21111008800, so R-hat <= 1.01 and ESS >= 400 in every cell need several times more still.
The draws held in memory then take the peak to 5.2 GB.
The carried update's matching by size with a third pattern (``walk_kernel.sized_pairs``: the
smallest tract of a county paired two times in three with the second or third smallest), on a
machine where the default run took 1,001-1,101 s: cells max R-hat 1.083 / 1.086 against 1.133 /
1.105 (default chain seed / ``--chain-seed 11``), min bulk ESS 20 / 21 against 10 / 15, the
tracts' shares 65+ min bulk ESS 10 / 12 against 9 / 20; the slowest cells are still in the
smallest tracts (780 and 801 people in Jefferson County).
Where the slow tail is (the line "bulk ESS of the tract shares 65+ by their 65+ cells' expected
number at 0", from the draws alone): on the default chain seed, the 83 tracts with an expected 0.1
or more of their 65+ cells at 0 had shares 65+ of median bulk ESS 124 and 73 (0.1-0.5, 0.5 or
more) against 261 for the other 1,000 (Spearman correlation of a tract's share ESS with that
expected number -0.69, with its size 0.47); all 15 slowest shares were of tracts under 10% aged
65+ against their county's 10-17%, young tracts, campuses among them (18-24 share up to 0.70).
Three changes aimed at them, each left out (numbers in ``walk_carry.carry_directions``, the
``walk_carry`` module docstring and ``walk.CARRY_SMALL``): ramp directions in the carried update
(1,081 s; cells max R-hat 1.159), two more carried matchings of the units under half the median
size (1,117 s and 1,213 s on two chain seeds; max R-hat 1.093 and 1.099), a carry damped for small
expected counts (1,076 s; 1.099), against 1,001 s and 1.083 (1.086 on seed 11) without.  Each
moved the slowest cell to another young tract and left the tail within the runs' spread.
One round of the walks' pair moves instead of 2 took as long (588 s: the time saved was within
the runs' spread) and mixed worse (cells with R-hat above 1.01: 3,684 against 2,819; the county
profiles' median ESS 225 against 342).
Cells under 30 are covered 0.940 by their integer intervals, whose posterior mass is 0.920: the
randomized coverage is 0.923 (all cells 0.909), so most of their over-coverage is discreteness.
The chains reach their stationary range within about 100 iterations (window means of the step
scales, the overdispersion, the county scales and every cell, against their final posterior
sds), and NUTS's mass matrix adapts by iteration 125, so a longer warm-up buys nothing: 700 + 300
took 1,033 s for the same RMSE, coverage and tail diagnostics, while 200 + 400 puts the time
into draws (median cell ESS 343 against 260 of 300 + 300).
"""

from __future__ import annotations

import argparse
import resource
import time

import arviz as az
import numpy as np
import pandas as pd
import pymc as pm
from scipy import stats

from privinfer.census import (AGE_GROUPS, QUANTILE_CARRY, derived_draws, derived_summary, frame_counts,
                              hierarchy_measurements, hierarchy_model, posterior_summary, synthetic_tracts,
                              unit_convergence, unit_sums)
from privinfer.datasets import load_nhgis_sex_by_age
from privinfer.inference import gls_estimate, interval_coverage
from privinfer.pymc import MeasuredPairsGibbs
from privinfer.pymc import walk as walk_module
from privinfer.pymc.measured import SWEEPS

ATTRIBUTES = ["sex", "age"]
QUERIES = {"total": (), "sex x age": ("sex", "age")}
OLD = [a for a in AGE_GROUPS if a[:2].isdigit() and int(a[:2]) >= 65]
YOUNG = [a for a in AGE_GROUPS if a.startswith("Under") or int(a.split()[0]) < 18]


def peak_mb() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return max(own, kids) / 1024.0


def coverage(truth, lo, hi):
    return float(np.mean((truth >= lo) & (truth <= hi)))


def kentucky_frame(table: str, seed: int, counties: int = 0):
    """The cells as a frame and its geography: the synthetic tracts (``"tracts"``) or the real
    county x sex x age table of the 2010 SF1 (``"counties"``: state and county levels)."""
    if table == "tracts":
        frame, geography = synthetic_tracts("KY", rng=seed), ["county", "tract"]
    else:
        data = load_nhgis_sex_by_age("KY")
        c, s, a = np.meshgrid(data.geoid, ["male", "female"], AGE_GROUPS, indexing="ij")
        frame = pd.DataFrame({"county": c.ravel(), "sex": s.ravel(), "age": a.ravel(), "count": data.sf.ravel()})
        geography = ["county"]
    if counties:
        keep = sorted(frame["county"].unique())[:counties]
        frame = frame[frame["county"].isin(keep)].reset_index(drop=True)
    return frame, geography


def _carry_count(value: str):
    """``--carry-directions``: 'all' or an integer."""
    return "all" if value == "all" else int(value)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--table", choices=("tracts", "counties"), default="tracts",
                    help="synthetic tracts (default) or the real county x sex x age table")
    ap.add_argument("--counties", type=int, default=0, help="keep the first N counties (0: all)")
    ap.add_argument("--draws", type=int, default=500)
    ap.add_argument("--tune", type=int, default=500)
    ap.add_argument("--chains", type=int, default=2)
    ap.add_argument("--seed", type=int, default=7, help="seed of the data and the release (and of the chains, "
                    "unless --chain-seed)")
    ap.add_argument("--chain-seed", type=int, default=None,
                    help="seed of the chains alone (default --seed): other chains on the same data and release")
    ap.add_argument("--sweeps", type=float, default=SWEEPS, help="pair-move sweeps per iteration")
    ap.add_argument("--overdispersion", type=float, default=None,
                    help="fix the cells' overdispersion phi (default: the model's, learned without cell effects)")
    ap.add_argument("--walk-steps", choices=("auto", "gibbs", "nuts"), default="auto",
                    help="hierarchy_model(walk_steps=...): WalkGibbs or NUTS for the tract walk")
    ap.add_argument("--cell-effects", action="store_true",
                    help="hierarchy_model(cell_effects=True): log-normal effects of the cells")
    ap.add_argument("--smooth-levels", choices=("auto", "lowest", "all"), default="auto",
                    help="hierarchy_model(smooth_levels=...): 'all' gives the counties a walk of their own, 'lowest' "
                         "only the tracts, 'auto' (the model's default) 'all' from 10 counties on")
    ap.add_argument("--walk-tails", type=float, default=None,
                    help="hierarchy_model(walk_tails=nu): Student-t tract walks with nu degrees of freedom")
    ap.add_argument("--walk-tails-by", choices=("unit", "increment"), default="unit",
                    help="hierarchy_model(walk_tails_by=...): one variance multiplier per tract or per tract and increment")
    ap.add_argument("--quantile-carry", type=float, default=QUANTILE_CARRY,
                    help="hierarchy_model(quantile_carry=...): cells estimated under this count carried by their "
                         "quantiles (0: none)")
    ap.add_argument("--collapse", type=float, default=None,
                    help="WalkGibbs's collapsed move: pairs of tracts both under this fraction of the median size "
                         "(default privinfer.pymc.walk.COLLAPSE_SMALL, inf: every pair; 0: off)")
    ap.add_argument("--alone", type=float, default=None,
                    help="WalkGibbs's move of a tract against several of its siblings: the tracts under this fraction "
                         "of the median size in counties of three or more (default privinfer.pymc.walk.ALONE_SMALL; "
                         "0: off)")
    ap.add_argument("--cousins", type=float, default=None,
                    help="WalkGibbs's move of a tract alone, its county's walk taking up the change and a cousin's "
                         "county giving it back: the tracts under this fraction of the median size (default "
                         "privinfer.pymc.walk.COUSINS_SMALL; 0: off)")
    ap.add_argument("--no-ellipses", action="store_true",
                    help="WalkGibbs without the elliptical slice updates of a pair's whole move (default "
                         "privinfer.pymc.walk.ELLIPSES)")
    ap.add_argument("--ellipses", type=int, default=None,
                    help="WalkGibbs(ellipses=N): matchings of sibling pairs whose whole move follows the carried "
                         "update by an elliptical slice (default privinfer.pymc.walk.ELLIPSES)")
    ap.add_argument("--scale-surrogate", choices=("true", "block", "false"), default=None,
                    help="WalkGibbs(scale_surrogate=...): the scales' corrections per scale, one for the whole move, "
                         "or none (default privinfer.pymc.walk.SCALE_SURROGATE)")
    ap.add_argument("--walk-rounds", type=int, default=None,
                    help="WalkGibbs(rounds=...): matchings of the pair moves of the increments per iteration "
                         "(default 2)")
    ap.add_argument("--max-treedepth", type=int, default=None,
                    help="NUTS's max_treedepth for the profiles, scales and concentration (default PyMC's, 10)")
    ap.add_argument("--carry-directions", default=None, type=_carry_count,
                    help="WalkGibbs(carry_directions=...): increments per pair in the carried update, an integer "
                         "or 'all' (default privinfer.pymc.walk.CARRY_DIRECTIONS)")
    ap.add_argument("--mode", default=None, help="PyTensor compile mode of the model's functions (e.g. NUMBA)")
    ap.add_argument("--save", default=None, help="write the posterior (InferenceData, netCDF) to this path")
    args = ap.parse_args(argv)

    frame, geography = kentucky_frame(args.table, args.seed, args.counties)
    mech = hierarchy_measurements(frame, geography=geography, attributes=ATTRIBUTES,
                                  queries=QUERIES, rho=0.0025)
    x = frame_counts(frame)
    rel = mech.publish(x, rng=args.seed + 1)
    print(f"Kentucky {args.table}: {frame[geography[-1]].nunique()} {geography[-1]} units in "
          f"{frame['county'].nunique()} counties, {mech.n} cells; {mech.matrix.shape[0]} measurements")

    t0 = time.perf_counter()
    est = gls_estimate(rel)
    t_gls = time.perf_counter() - t0

    t0 = time.perf_counter()
    model = hierarchy_model(rel, overdispersion="auto" if args.overdispersion is None else args.overdispersion,
                            walk_steps=args.walk_steps, cell_effects=args.cell_effects,
                            smooth_levels=args.smooth_levels, walk_tails=args.walk_tails,
                            walk_tails_by=args.walk_tails_by, quantile_carry=args.quantile_carry or None)
    t_build = time.perf_counter() - t0
    if args.collapse is not None:
        walk_module.COLLAPSE_SMALL = args.collapse   # read when pm.sample() builds the WalkGibbs steps
    if args.alone is not None:
        walk_module.ALONE_SMALL = args.alone
    if args.cousins is not None:
        walk_module.COUSINS_SMALL = args.cousins
    if args.scale_surrogate is not None:
        walk_module.SCALE_SURROGATE = {"true": True, "block": "block", "false": False}[args.scale_surrogate]
    if args.no_ellipses or args.ellipses is not None:
        walk_module.ELLIPSES = False if args.no_ellipses else args.ellipses
    t0 = time.perf_counter()
    with model:
        steps = [MeasuredPairsGibbs([model["x"]], sweeps=args.sweeps)]  # the step pm.sample() assigns
        walk_kwargs = {} if args.walk_rounds is None else {"rounds": args.walk_rounds}
        if args.carry_directions is not None:
            walk_kwargs["carry_directions"] = None if args.carry_directions == "all" else args.carry_directions
        if walk_kwargs:                         # every walk's WalkGibbs, with these settings
            steps.append(walk_module.WalkGibbs(**walk_kwargs))
        idata = pm.sample(args.draws, tune=args.tune, chains=args.chains, cores=min(args.chains, 2), step=steps,
                          random_seed=args.seed if args.chain_seed is None else args.chain_seed,
                          progressbar=False, compute_convergence_checks=False,
                          compile_kwargs=None if args.mode is None else {"mode": args.mode},
                          **({} if args.max_treedepth is None else {"nuts": {"max_treedepth": args.max_treedepth}}))
    t_sample = time.perf_counter() - t0
    draws = idata.posterior["x"].values.reshape(-1, mech.n)

    cut = 30 if args.table == "tracts" else 100    # the goals' small cells
    small = x < cut
    pm_mean = draws.mean(0)
    rmse = lambda e, m=slice(None): float(np.sqrt(np.mean((e[m] - x[m]) ** 2)))  # noqa: E731
    print(f"times: GLS {t_gls:.1f} s, model build {t_build:.1f} s, sampling {t_sample:.0f} s "
          f"({args.chains} chains x ({args.tune} + {args.draws}), mode {args.mode or 'default'}); "
          f"peak memory {peak_mb():.0f} MB")
    print(f"{'':24s}{'GLS':>10s}{'posterior':>11s}{'ratio':>8s}")
    for name, m in (("RMSE, all cells", slice(None)), (f"RMSE, cells under {cut}", small)):
        g, p = rmse(est.x, m), rmse(pm_mean, m)
        print(f"{name:24s}{g:10.2f}{p:11.2f}{p / g:8.3f}")

    A, B = unit_sums(rel, geography[-1], age=OLD), unit_sums(rel, geography[-1])
    share_true = (x @ A) / (x @ B)
    share = derived_summary(idata, A, B, warn=False)    # the shares' summary and their R-hat and ESS below
    s_mean, s_lo, s_hi = (share[c].to_numpy() for c in ("mean", "lower", "upper"))
    g_share, g_lo, g_hi = est.ratio_interval(A, B)
    print("90% coverage (mean width); the posterior's integer intervals also with their posterior mass (the "
          "coverage if calibrated) and their randomized coverage (0.9 if calibrated):")
    for name, m in (("all cells", slice(None)), (f"cells under {cut}", small)):
        cov = interval_coverage(draws[:, m], x[m], 0.9)
        print(f"  {name:22s} GLS {coverage(x[m], est.lower[m], est.upper[m]):.3f} "
              f"({np.mean(est.upper[m] - est.lower[m]):.1f})   posterior {cov.closed:.3f} ({cov.width:.1f}), "
              f"if calibrated {cov.expected:.3f}, randomized {cov.randomized:.3f}")
    print(f"  {geography[-1] + ' share 65+':22s} GLS {coverage(share_true, g_lo, g_hi):.3f} "
          f"({np.mean(g_hi - g_lo):.4f})"
          f"   posterior {coverage(share_true, s_lo, s_hi):.3f} ({np.mean(s_hi - s_lo):.4f})")
    print(f"  RMSE of the share 65+: GLS {np.sqrt(np.mean((g_share - share_true) ** 2)):.4f}, "
          f"posterior {np.sqrt(np.mean((s_mean - share_true) ** 2)):.4f}")
    if len(geography) > 1:      # a sum over ages within a middle-level unit: its people aged 65+
        Ac = unit_sums(rel, geography[0], age=OLD)
        c_true, (c_gls, c_lo, c_hi) = x @ Ac, est.interval(Ac)
        c_mean, c_plo, c_phi = posterior_summary(derived_draws(draws, Ac))
        print(f"  {geography[0] + ' people 65+':22s} GLS {coverage(c_true, c_lo, c_hi):.3f} ({np.mean(c_hi - c_lo):.1f})"
              f"   posterior {coverage(c_true, c_plo, c_phi):.3f} ({np.mean(c_phi - c_plo):.1f}); RMSE GLS "
              f"{np.sqrt(np.mean((c_gls - c_true) ** 2)):.1f}, posterior {np.sqrt(np.mean((c_mean - c_true) ** 2)):.1f}")
    print(f"GLS intervals with a negative lower bound: {int(np.sum(est.lower < 0))}; posterior: 0 (x >= 0)")

    rhat_x = az.rhat(idata, var_names=["x"])["x"].values
    ess_x = az.ess(idata, var_names=["x"])["x"].values
    params = [v for v in idata.posterior.data_vars if v not in ("x", "cell_effect")]
    rh_by = {v: float(az.rhat(idata, var_names=[v])[v].max()) for v in params}
    worst = sorted(rh_by.items(), key=lambda kv: -kv[1])[:3]
    print("worst parameters (max R-hat): " + ", ".join(f"{k} {v:.3f}" for k, v in worst))
    rh_p = max(rh_by.values())
    ess_p = min(float(az.ess(idata, var_names=[v])[v].min()) for v in params)
    ss = idata.sample_stats
    kappa = np.asarray(idata.posterior["concentration"]).ravel() if "concentration" in idata.posterior else [np.nan]
    young = derived_summary(idata, unit_sums(rel, geography[-1], age=YOUNG), B, warn=False)
    print(f"bulk ESS of {len(share_true)} {geography[-1]} shares 65+: min {np.nanmin(share['ess_bulk']):.0f}, median "
          f"{np.nanmedian(share['ess_bulk']):.0f} (max R-hat {np.nanmax(share['r_hat']):.3f}, above 1.01: "
          f"{int(np.sum(share['r_hat'] > 1.01))}); shares under 18: min {np.nanmin(young['ess_bulk']):.0f}, median "
          f"{np.nanmedian(young['ess_bulk']):.0f} (max R-hat {np.nanmax(young['r_hat']):.3f}); of the cells: median "
          f"{np.nanmedian(ess_x):.0f}")
    print(f"convergence: cells max R-hat {np.nanmax(rhat_x):.3f}, min bulk ESS {np.nanmin(ess_x):.0f} "
          f"(cells with R-hat > 1.01: {int(np.sum(rhat_x > 1.01))}); parameters max R-hat {rh_p:.3f}, "
          f"min ESS {ess_p:.0f}; lattice acceptance {float(ss['lattice_accept'].mean()):.2f}, "
          f"moved {float(ss['lattice_moved'].mean()):.2f}; NUTS tree depth "
          f"{float(ss['tree_depth'].mean()):.1f}; concentration {np.median(kappa):.1f}"
          + (f"; walk acceptance {float(ss['walk_accept'].mean()):.2f}" if "walk_accept" in ss else "")
          + (f", carried-update evaluations per iteration {float(ss['walk_carry_evals'].mean()):.0f}"
             if "walk_carry_evals" in ss else "")
          + (f", scale-update evaluations per iteration {float(ss['walk_scale_evals'].mean()):.0f}"
             f" (proposals accepted {float(ss['walk_scale_accept'].mean()):.2f})" if "walk_scale_evals" in ss else "")
          + (f", collapsed moves accepted {float(np.nanmean(ss['walk_collapse_accept'])):.2f}"
             if "walk_collapse_accept" in ss and np.isfinite(ss['walk_collapse_accept']).any() else "")
          + (f", moves of a tract against its siblings: evaluations per iteration "
             f"{float(ss['walk_alone_evals'].mean()):.0f}" if "walk_alone_evals" in ss else "")
          + (f", moves of a tract against a cousin: evaluations per iteration "
             f"{float(ss['walk_cousin_evals'].mean()):.0f}" if "walk_cousin_evals" in ss else ""))
    for name in [v for v in idata.posterior.data_vars if v.startswith("step_scale")]:
        ess_s = az.ess(idata, var_names=[name])[name].values
        print(f"{name}: bulk ESS min {np.min(ess_s):.0f}, median {np.median(ess_s):.0f}; last two "
              f"{', '.join(f'{v:.0f}' for v in ess_s[-2:])}")
    if "cell_effect" in idata.posterior:
        rh_e = az.rhat(idata, var_names=["cell_effect"])["cell_effect"].values
        ess_e = az.ess(idata, var_names=["cell_effect"])["cell_effect"].values
        print(f"cell effects: scale omega {float(np.median(idata.posterior['cell_effect_scale'])):.3f} (median); "
              f"the effects' max R-hat {np.nanmax(rh_e):.3f}, min bulk ESS {np.nanmin(ess_e):.0f}")
    print_worst_cells(frame, geography, ATTRIBUTES, rhat_x, ess_x, pm_mean)
    print_slow_by_size(idata, rel, geography)
    print_slow_profiles(idata, frame, geography, ATTRIBUTES, ess_x)
    print_slow_by_zeros(draws, A, share["ess_bulk"].to_numpy(), geography[-1])
    print_mix(idata, share["ess_bulk"].to_numpy())
    print_goal_draws(ess_x, args.chains, args.draws, t_sample / (args.tune + args.draws))
    iid = independent_floor(args.chains, args.draws, mech.n, args.seed)
    print(f"independent draws of the same size ({args.chains} x {args.draws}, {mech.n} cells), the best any sampler "
          f"could print: cells max R-hat {iid[0]:.3f}, min bulk ESS {iid[1]:.0f}, cells with R-hat > 1.01: {iid[2]}")
    if args.save:
        idata.to_netcdf(args.save)


def print_worst_cells(frame, geography, attributes, rhat, ess, mean, k: int = 5):
    """Where the slowest cells are: the ``k`` cells of largest R-hat with their unit, attributes,
    posterior mean and bulk ESS, and how the cells with R-hat above 1.05 spread over the lowest
    level's units (a few atypical units, or everywhere)."""
    unit = frame[geography[-1]].to_numpy()
    order = np.argsort(-np.nan_to_num(rhat, nan=-np.inf))[:k]
    print("worst cells (R-hat, bulk ESS, posterior mean): " + "; ".join(
        f"{geography[-1]} {unit[i]} " + " ".join(str(frame[a].iat[i]) for a in attributes)
        + f" {rhat[i]:.3f} {ess[i]:.0f} {mean[i]:.1f}" for i in order))
    slow = rhat > 1.05
    units, counts = np.unique(unit[slow], return_counts=True)
    top = ", ".join(f"{u} {c}" for u, c in sorted(zip(units, counts), key=lambda uc: -uc[1])[:5])
    print(f"cells with R-hat > 1.05: {int(slow.sum())} in {units.size} of {np.unique(unit).size} "
          f"{geography[-1]} units" + (f" (most: {top})" if units.size else ""))


def print_slow_by_size(idata, rel, geography, cuts=(0.5, 1.0)):
    """The cells' max R-hat and min bulk ESS per class of their lowest-level unit's size (its
    posterior mean total over the median unit's, split at ``cuts``), and over the units that are
    the smallest of their parent (``privinfer.census.unit_convergence``).  On all Kentucky tracts
    (2 x (200 + 400)) the slowest cells were in the 35 tracts of under half the median (772 to
    1,930 people) in each of 6 runs (two chain seeds; quantile_carry 20 and 50; without lumps;
    with learned directions), each time the smallest or the second smallest tract of its county:
    there the min bulk ESS was 9-39, against 33-70 for the tracts of 0.5 to 1 times the median
    and 67-140 for the larger ones."""
    conv = unit_convergence(idata, rel, geography[-1])
    size = conv["relative_size"].to_numpy()
    edges = (0.0, *cuts, np.inf)
    classes = [(f"{lo:g} to {hi:g}" if np.isfinite(hi) else f"{lo:g} or more", (size >= lo) & (size < hi))
               for lo, hi in zip(edges[:-1], edges[1:])]
    if len(geography) > 1:
        classes.append((f"the smallest of their {geography[-2]}", conv["smallest_of_parent"].to_numpy()))
    print(f"cells by their {geography[-1]}'s size (total over the median {geography[-1]}'s): " + "; ".join(
        f"{name}: {int(m.sum())} {geography[-1]} units, max R-hat {np.nanmax(conv['r_hat_max'][m]):.3f}, min bulk "
        f"ESS {np.nanmin(conv['ess_bulk_min'][m]):.0f}" for name, m in classes if m.any()))


def print_slow_profiles(idata, frame, geography, attributes, ess, k: int = 5, batch: int = 20, sizes=(1, 2, 5, 9)):
    """Where the slowest cells' slow mode is, one level up: the middle level's log profiles less
    the top level's (a county's departure from the state at each sex x age: its walk over the ages
    and its sex contrasts), their bulk ESS by the unit's number of lowest units (classes from
    ``sizes``), and for the ``k`` slowest cells the ESS of their own unit's departure at their sex
    and age and the correlation of the two chains' ``batch``-draw means of the cell and of that
    departure (near 0 when the cell's slow mode is its own; under independence its sd is about
    1/sqrt(batches), 0.22 at 2 x 400 draws).  On all Kentucky tracts (default chain seed) the five
    slowest cells were old-age or child cells of small tracts whose means correlated 0.57-0.81
    with their county's departure, whose ESS was 41-168; on the first 40 counties, two chain
    seeds, the slowest were the old-age cells of Murray's campus tract 21035000600 (70% aged
    18-24), its share 65+ locked to its county's departure at 70+ (correlation of the batch means
    0.86, both with lag-one autocorrelation 0.83): a small tract's profile cannot move alone (its
    siblings' walks are centred, so the county's profile is the mean of its tracts'), and the
    moves that move it shift a sibling's or every sibling's profile as well."""
    post = idata.posterior
    mid, top = geography[0], "state"
    if len(geography) < 2 or f"log_profile_{mid}" not in post or f"log_profile_{top}" not in post:
        return
    dep = post[f"log_profile_{mid}"] - post[f"log_profile_{top}"]
    dep_ess = az.ess(dep.to_dataset(name="d"))["d"]
    n_low = frame.groupby(mid)[geography[-1]].nunique()
    unit_ess = dep_ess.min("combination").to_series()
    low = n_low.reindex(unit_ess.index.astype(type(n_low.index[0]))).to_numpy()
    edges = (*sizes, np.inf)
    parts = []
    for lo, hi in zip(edges[:-1], edges[1:]):
        m = (low >= lo) & (low < hi)
        if m.any():
            span = f"{lo:g}" if hi == lo + 1 else (f"{lo:g} or more" if not np.isfinite(hi) else f"{lo:g}-{hi - 1:g}")
            parts.append(f"{span} {geography[-1]}{'' if span == '1' else 's'}: {int(m.sum())} {mid} units, min "
                         f"{unit_ess.to_numpy()[m].min():.0f}, median {np.median(unit_ess.to_numpy()[m]):.0f}")
    print(f"bulk ESS of the {mid} profiles less the {top}'s (each {mid}'s slowest sex x age), by its number of "
          f"{geography[-1]}s: " + "; ".join(parts))
    x = post["x"]
    combo = frame[list(attributes)].astype(str).agg("|".join, axis=1).to_numpy()
    unit = frame[mid].astype(str).to_numpy()
    nb = x.sizes["draw"] // batch

    def means(a):
        return np.asarray(a, dtype=float)[:, :nb * batch].reshape(a.shape[0], nb, batch).mean(2).ravel()
    out = []
    for i in np.argsort(np.nan_to_num(ess, nan=np.inf))[:k]:
        d = dep.sel({mid: unit[i], "combination": combo[i]}).values
        r = np.corrcoef(means(x.values[:, :, i]), means(d))[0, 1]
        out.append(f"{frame[geography[-1]].iat[i]} {combo[i].replace('|', ' ')}: ESS {ess[i]:.0f}, its {mid}'s "
                   f"{dep_ess.sel({mid: unit[i], 'combination': combo[i]}).item():.0f}, correlation {r:.2f}")
    print(f"slowest cells against their {mid}'s profile at their sex and age (bulk ESS of each, correlation of "
          f"{batch}-draw means): " + "; ".join(out))


def print_slow_by_zeros(draws, A, ess, level: str, cuts=(0.1, 0.5)):
    """The bulk ESS of the units' shares 65+ by how often their 65+ cells sit at zero: for each
    unit, the posterior expected number of its 65+ cells that are 0 (the sum of their posterior
    probabilities of 0, from the draws alone), in the classes split at ``cuts``.  On all Kentucky
    tracts the slowest shares are those of young tracts (campuses among them: a share 65+ of
    1.5-10% against their county's 10-17%) whose old cells touch zero, more than those of small
    tracts."""
    zeros = np.asarray(A.T @ np.mean(draws == 0, axis=0)).ravel()
    edges = (-np.inf, *cuts, np.inf)
    parts = []
    for lo, hi in zip(edges[:-1], edges[1:]):
        m = (zeros >= lo) & (zeros < hi)
        if m.any():
            name = f"under {hi}" if lo == -np.inf else (f"{lo} or more" if hi == np.inf else f"{lo} to {hi}")
            parts.append(f"{name}: {int(m.sum())} {level}s, median {np.nanmedian(ess[m]):.0f}, min {np.nanmin(ess[m]):.0f}")
    print(f"bulk ESS of the {level} shares 65+ by their 65+ cells' expected number at 0: " + "; ".join(parts))


def print_mix(idata, ess):
    """With ``--walk-tails``: the tracts' variance multipliers (posterior means: median, 90th
    percentile, max; their R-hat and bulk ESS) and the Spearman correlation of a tract's
    multiplier with its share 65+'s bulk ESS (negative: the tracts the t tails let bend are the
    slow ones)."""
    for name in [v for v in idata.posterior.data_vars if v.startswith("step_mix")]:
        lam = idata.posterior[name]
        mean = lam.mean(("chain", "draw")).values
        rh, es = az.rhat(idata, var_names=[name])[name].values, az.ess(idata, var_names=[name])[name].values
        per_unit = mean if mean.ndim == 1 else mean.max(axis=1)        # per increment: each tract's largest
        rho = stats.spearmanr(per_unit, ess, nan_policy="omit").statistic
        print(f"{name}: posterior means median {np.median(mean):.2f}, 90th percentile {np.quantile(mean, 0.9):.2f}, "
              f"max {mean.max():.2f}; max R-hat {np.nanmax(rh):.3f}, min bulk ESS {np.nanmin(es):.0f}; Spearman with "
              f"the share 65+'s bulk ESS {rho:.2f}")


def print_goal_draws(ess, chains: int, draws: int, per_iteration: float):
    """The draws per chain the convergence goal would take at this run's measured rates: each
    cell's bulk ESS per draw (ESS over ``chains x draws``) at the slowest cell, the 0.1% and 1%
    quantiles; for min ESS 400, ``400 / (chains x rate)`` draws per chain; for max R-hat 1.01
    over 49,818 cells, about 700 independent draws per chain (module docstring), so ``700 /
    rate``, an upper estimate for the slow quantiles (the R-hat of fewer cells has a smaller
    extreme); and the sampling time the larger takes at this run's seconds per iteration
    (tuning left out).  A projection from one run: the slowest rate is itself a noisy extreme."""
    rate = np.asarray(ess, dtype=float).ravel() / (chains * draws)
    rate = rate[np.isfinite(rate)]
    q = {"slowest cell": rate.min(), "0.1% quantile": np.quantile(rate, 0.001), "1% quantile": np.quantile(rate, 0.01)}
    print("the goal's draws per chain at the measured ESS per draw (for min ESS 400 / for max R-hat 1.01; the "
          f"sampling time of the larger at {per_iteration:.2f} s per iteration): " + "; ".join(
              f"{k} {r:.3f}: {400 / (chains * r):.0f} / {700 / r:.0f} draws ({700 / r * per_iteration:.0f} s)"
              for k, r in q.items()))


def independent_floor(chains: int, draws: int, n: int, seed: int):
    """Max R-hat, min bulk ESS and the number of R-hats above 1.01 over ``n`` cells for exactly
    independent normal draws, ``chains x draws``: the sampling noise of the diagnostics themselves,
    which no sampler can beat (the extremes over many cells grow with ``n``).  In blocks of cells,
    so memory stays near 100 MB."""
    rng = np.random.default_rng(seed)
    rmax, emin, above = 0.0, np.inf, 0
    for lo in range(0, n, 5000):
        k = min(5000, n - lo)
        ds = az.convert_to_dataset({"z": rng.standard_normal((chains, draws, k))})
        r, e = az.rhat(ds)["z"].values, az.ess(ds)["z"].values
        rmax, emin, above = max(rmax, float(r.max())), min(emin, float(e.min())), above + int(np.sum(r > 1.01))
    return rmax, emin, above


if __name__ == "__main__":
    main()
