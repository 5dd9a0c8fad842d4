# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Kentucky tracts: small-area counts from 2020-style noisy measurements
#
# Census tracts are the small areas of American demography: about 4,000 people each.  Their
# sex x 23 age groups table (table P12) has 46 cells per tract; in the Kentucky tracts below
# the median cell holds about 70 people and one cell in five fewer than 30.  The 2020 Census
# published such tables after adding discrete Gaussian noise to measurements at every
# geographic level (the *noisy measurement files*) and post-processing them with TopDown.  A data user who needs the number of women aged 65-66 in one tract, a
# tract's age pyramid, or a tract's share of people aged 65+ meets the noise where it matters
# most: in small cells, where the noise (sd 14 here) is as large as the count itself.
#
# This study measures a realistic Kentucky tract hierarchy the way the 2020 Census did, and
# compares three ways of turning the same noisy measurements into counts:
#
# * the **posterior** of the integer cells under a hierarchical model that pools tracts
#   within their county and counties within the state (`privinfer.census.hierarchy_model`,
#   sampled by plain `pm.sample()`), with 90% equal-tailed intervals;
# * **hierarchical GLS** (`privinfer.inference.gls_estimate`): the best linear unbiased
#   estimate given the measurements and the invariant, with Gaussian 90% intervals, and
#   delta-method intervals for ratios;
# * a **TopDown-style** point estimate of the same release
#   (`privinfer.inference.topdown_style_estimate`): the GLS point projected (Euclidean) onto
#   the non-negative counts that keep the published total, then rounded to integers that keep
#   it (largest remainders).  It has **no intervals**.  It is not the Bureau's TopDown, which
#   solves a weighted non-negative least-squares problem level by level from the state down
#   (state, then counties, then tracts) and rounds at each level; here one projection of all
#   cells onto the total stands for that post-processing.  Its errors show what forcing
#   non-negative integers does to the GLS point.
#
# They are compared on what a data user reads: error against the truth (RMSE) by cell size
# (<30, 30-99, >=100 people) and by level (tract cells, county cells = sums of tract cells,
# state cells), coverage and mean width of 90% intervals, intervals reaching below zero, and
# one derived quantity, every tract's share aged 65+.
#
# **Data.** `privinfer.census.synthetic_tracts("KY", rng=7)`: Kentucky's enumerated 2010
# county x sex x age counts (NHGIS file, read from `PRIVINFER_DATA`) split into tracts of
# about 4,000 people whose age profiles differ systematically (retirement tracts, family
# tracts, college tracts); the split keeps every county cell exactly.  The synthetic tracts
# are the truth against which the estimates are scored.
#
# **Design** (the 2020 structure): levels state, county and tract; in every unit of every
# level two queries, the unit's total and its sex x age table; zCDP budget rho = 0.0025 per
# level and query (sigma = 14.15 each; 6 measured level-query pairs, total rho = 0.015); the state's
# total published exactly (the invariant).  The budget is our choice, small enough that the
# noise matters in tract cells.
#
# **Settings.** Small (default; the tests and the documentation run it): the first four
# counties by FIPS code (Adair, Allen, Anderson, Ballard: 17 tracts, 782 cells); their union
# plays the state (its total is the invariant); 2 chains x 800 draws after 700 tuning steps.
# Full (`PRIVINFER_FULL=1` or `--full`): all 120 counties (1,083 tracts, 49,818 cells), 2 chains
# x 600 draws after 1,000 tuning steps; it holds the 1,200 draws of every cell in memory (about
# 0.5 GB) and was not run for this page.

# %%
import time

import arviz as az
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pymc as pm
import scipy.sparse as sp

from privinfer.case_studies._settings import full_mode, output_dir, save_results, show
from privinfer.census import (AGE_GROUPS, SEXES, derived_draws, derived_summary, frame_counts,
                              hierarchy_measurements, hierarchy_model, posterior_summary, synthetic_tracts,
                              unit_sums)
from privinfer.inference import gls_estimate, interval_coverage, topdown_style_estimate

FULL = full_mode()
OUT = output_dir("kentucky_tracts")
T_START = time.perf_counter()
N_COUNTIES = 120 if FULL else 4
CHAINS = 2
DRAWS, TUNE = (400, 200) if FULL else (800, 700)  # full: the benchmark's measured budget (its docstring)
RHO = 0.0025  # per level and query
QUERIES = {"total": (), "sex x age": ("sex", "age")}
LEVEL = 0.9

frame = synthetic_tracts("KY", rng=7)
keep = sorted(frame["county"].unique())[:N_COUNTIES]
frame = frame[frame["county"].isin(keep)].reset_index(drop=True)
x = frame_counts(frame)
mech = hierarchy_measurements(frame, geography=["county", "tract"], attributes=["sex", "age"],
                              queries=QUERIES, rho=RHO, invariant="total")
release = mech.publish(x, rng=2020)
tract_pop = frame.groupby("tract", sort=True)["count"].sum()
print(f"{frame['county'].nunique()} counties, {frame['tract'].nunique()} tracts, {x.size} cells; "
      f"tract population median {tract_pop.median():.0f} (range {tract_pop.min()}-{tract_pop.max()}); "
      f"cell median {np.median(x):.0f}, cells under 30: {np.mean(x < 30):.0%}")
print(f"sigmas {sorted(set(float(s) for s in mech.sigmas))}, total rho {mech.guarantee.rho:.4g}; "
      f"published total t = {int(release.t[0])}")

# %% [markdown]
# ## The three estimates of the same release
#
# GLS and its TopDown-style post-processing take milliseconds.  The posterior takes the
# sampler's time: `pm.sample()` assigns `WalkGibbs` to the tracts' age walks and their step
# scales (and, from `SMOOTH_LEVEL_UNITS` counties on, to the counties' own age walks: one step
# per walk), NUTS to the profiles, scales and overdispersion, and the pair-move lattice step
# (`MeasuredPairsGibbs`) to the integer cells, which keeps the published total in every draw.
# NUTS runs with `target_accept=0.95` (smaller leapfrog steps): when it also sampled the walks,
# at the default 0.8 one chain of this release had 172 divergent transitions in 800 draws and
# the chains disagreed (R-hat 1.3 on the state profile).

# %%
t0 = time.perf_counter()
gls = gls_estimate(release, level=LEVEL)
topdown = topdown_style_estimate(release, gls, rng=1)
t_gls = time.perf_counter() - t0

t0 = time.perf_counter()
model = hierarchy_model(release)
with model:
    idata = pm.sample(DRAWS, tune=TUNE, chains=CHAINS, cores=2, target_accept=0.95, random_seed=7,
                      progressbar=False, compute_convergence_checks=False)
t_sample = time.perf_counter() - t0
draws = idata.posterior["x"].values.reshape(-1, x.size)
t_total = int(release.t[0])
fibre_ok = bool(np.all(draws.sum(axis=1) == t_total) and np.all(draws >= 0))
print(f"GLS + TopDown-style: {t_gls:.2f} s; model and sampling: {t_sample:.0f} s "
      f"({CHAINS} chains x ({TUNE} tuning + {DRAWS} draws))")
print(f"every posterior draw non-negative with sum {t_total}: {fibre_ok}; "
      f"GLS sum {gls.x.sum():.3f}; TopDown-style sum {int(topdown.sum())}, min {int(topdown.min())}")

# %% [markdown]
# ## Convergence
#
# Max R-hat (rank-normalized split R-hat) and min bulk ESS over all cells and over all
# parameters of the model; the usual targets (Vehtari et al. 2021) are R-hat <= 1.01 and bulk
# ESS >= 400.  The line below says whether this run reached them.  With the small mode's few
# hundred draws per chain the cells' intervals rest on the ESS printed here, and the tests
# allow for it.

# %%
rhat_cells = az.rhat(idata, var_names=["x"])["x"].values
ess_cells = az.ess(idata, var_names=["x"])["x"].values
params = [v for v in idata.posterior.data_vars if v != "x"]
rhat_params = {v: float(np.nanmax(az.rhat(idata, var_names=[v])[v].values)) for v in params}
ess_params = {v: float(np.nanmin(az.ess(idata, var_names=[v])[v].values)) for v in params}
stats = idata.sample_stats
convergence = {
    "cells_max_rhat": float(np.nanmax(rhat_cells)), "cells_min_ess": float(np.nanmin(ess_cells)),
    "cells_rhat_over_1_01": int(np.sum(rhat_cells > 1.01)),
    "params_max_rhat": max(rhat_params.values()), "params_min_ess": min(ess_params.values()),
    "divergences": int(stats["diverging"].values.sum()),
    "lattice_accept": float(stats["lattice_accept"].mean()),
}
convergence["targets_met"] = bool(max(convergence["cells_max_rhat"], convergence["params_max_rhat"]) <= 1.01
                                  and min(convergence["cells_min_ess"], convergence["params_min_ess"]) >= 400)
worst = sorted(rhat_params, key=lambda v: -rhat_params[v])[:3]
print(f"cells: max R-hat {convergence['cells_max_rhat']:.3f} ({convergence['cells_rhat_over_1_01']} of {x.size} "
      f"over 1.01), min bulk ESS {convergence['cells_min_ess']:.0f}")
print(f"parameters: max R-hat {convergence['params_max_rhat']:.3f}, min bulk ESS {convergence['params_min_ess']:.0f}; "
      "worst: " + ", ".join(f"{v} (R-hat {rhat_params[v]:.3f}, ESS {ess_params[v]:.0f})" for v in worst))
print(f"divergent NUTS transitions: {convergence['divergences']} of {CHAINS * DRAWS}; "
      f"lattice step acceptance {convergence['lattice_accept']:.2f}")
print("targets R-hat <= 1.01 and bulk ESS >= 400: "
      + ("met by every cell and parameter" if convergence["targets_met"] else
         "NOT met in this run (read the intervals with the ESS above in mind)"))

# %% [markdown]
# ## Error, coverage and width by level and cell size
#
# Tract cells are the released cells; county and state cells (sex x age within a county or
# the state) are sums of tract cells: for the posterior, sums of every draw; for GLS, the sums
# of its estimate with their exact GLS variances; for TopDown-style, sums of its integers.
# Bins are by the true count.  `neg. lower` counts 90% intervals whose lower end is below
# zero: a count that cannot be negative reported with a negative lower bound.

# %%
COMBOS = [(s, a) for s in SEXES for a in AGE_GROUPS]
BINS = [("<30", 0, 30), ("30-99", 30, 100), (">=100", 100, np.inf)]


def sex_age_weights(level):
    """(cells, units x 46) weights: one column per (sex, age) cell of every unit of ``level``."""
    return sp.hstack([unit_sums(release, level, sex=s, age=a) for s, a in COMBOS]).tocsc()


def gls_interval(W, chunk=256):
    """GLS estimates and 90% intervals of the sums W^T x (in chunks of columns)."""
    parts = [gls.interval(W[:, j:j + chunk]) for j in range(0, W.shape[1], chunk)]
    return tuple(np.concatenate([p[k] for p in parts]) for k in range(3))


levels = {"tract": {"truth": x, "gls": (gls.x, gls.lower, gls.upper), "topdown": topdown.astype(float),
                    "posterior": posterior_summary(draws, LEVEL)}}
for name in ("county", "state"):
    W = sex_age_weights(name)
    levels[name] = {"truth": np.asarray(W.T @ x, dtype=float), "gls": gls_interval(W),
                    "topdown": np.asarray(W.T @ topdown, dtype=float),
                    "posterior": posterior_summary(derived_draws(draws, W), LEVEL)}


def scores(truth, est, mask):
    """RMSE, coverage, mean width and negative lower bounds on the cells of ``mask``."""
    out = {"n": int(mask.sum()), "rmse": {}, "coverage": {}, "width": {}, "negative_lower": {}}
    for key in ("posterior", "gls", "topdown"):
        point = est[key] if key == "topdown" else est[key][0]
        out["rmse"][key] = float(np.sqrt(np.mean((point[mask] - truth[mask]) ** 2))) if mask.any() else np.nan
    for key in ("posterior", "gls"):
        _, lo, hi = est[key]
        inside = (lo[mask] <= truth[mask]) & (truth[mask] <= hi[mask])
        out["coverage"][key] = float(np.mean(inside)) if mask.any() else np.nan
        out["width"][key] = float(np.mean(hi[mask] - lo[mask])) if mask.any() else np.nan
        out["negative_lower"][key] = int(np.sum(lo[mask] < 0))
    return out


table = {}
for name, est in levels.items():
    truth = est["truth"]
    table[name] = {label: scores(truth, est, (truth >= a) & (truth < b)) for label, a, b in BINS}
    table[name]["all"] = scores(truth, est, np.ones(truth.size, dtype=bool))

rows = []
for name, by_bin in table.items():
    for label, s in by_bin.items():
        if s["n"] == 0:  # e.g. no county cell under 30
            continue
        rows.append({"level": name, "true size": label, "cells": s["n"],
                     "RMSE post.": s["rmse"]["posterior"], "RMSE GLS": s["rmse"]["gls"],
                     "RMSE TopDown": s["rmse"]["topdown"],
                     "cover post.": s["coverage"]["posterior"], "cover GLS": s["coverage"]["gls"],
                     "width post.": s["width"]["posterior"], "width GLS": s["width"]["gls"],
                     "neg. lower post.": s["negative_lower"]["posterior"],
                     "neg. lower GLS": s["negative_lower"]["gls"]})
summary = pd.DataFrame(rows)
print("90% intervals; TopDown-style has no intervals (point estimates only)")
print(summary.to_string(index=False, float_format=lambda v: f"{v:.3g}"))
summary.to_csv(OUT / "comparison.csv", index=False)

# %% [markdown]
# Coverage of the tract cells, and how uncertain that number is: the cells of one tract share
# its estimated profile, so their misses are not independent.  The spread of the coverage
# from tract to tract gives a standard error that allows for it.

# %%
tract_code = pd.factorize(frame["tract"], sort=True)[0]
cover_tract = {}
for key in ("posterior", "gls"):
    _, lo, hi = levels["tract"][key]
    per_tract = pd.Series((lo <= x) & (x <= hi)).groupby(tract_code).mean()
    cover_tract[key] = {"coverage": float(per_tract.mean()),
                        "cluster_se": float(per_tract.std(ddof=1) / np.sqrt(per_tract.size))}
    print(f"{key:9s} tract-cell coverage {cover_tract[key]['coverage']:.3f}, standard error over "
          f"{per_tract.size} tracts {cover_tract[key]['cluster_se']:.3f} (independent cells: "
          f"{np.sqrt(0.09 / x.size):.3f})")

# %% [markdown]
# The posterior's intervals of tract cells have integer ends, so they hold more than 90% of
# their own posterior mass when counts are small (a Poisson(2) posterior's 90% interval [0, 5]
# holds 0.98): a *calibrated* posterior over-covers small cells.  The randomized coverage
# (`privinfer.inference.interval_coverage`; Czado, Gneiting and Held 2009) counts a true value
# at an interval's end by the fraction of that end's atom that lies inside the central 90%; it
# is exactly 0.9 under calibration, whatever the counts' size, and so reads like GLS's coverage.

# %%
randomized = {}
for label, lo_b, hi_b in BINS + [("all", 0, np.inf)]:
    m = (x >= lo_b) & (x < hi_b)
    if m.any():
        cov = interval_coverage(draws[:, m], x[m], LEVEL)
        randomized[label] = {"n": cov.n, "covered": cov.closed, "mass": cov.expected, "randomized": cov.randomized}
        print(f"tract cells {label:6s} ({cov.n:6d}): covered {cov.closed:.3f}, posterior mass of the intervals "
              f"{cov.expected:.3f}, randomized coverage {cov.randomized:.3f}")

# %%
fig, axes = plt.subplots(1, 2, figsize=(8.5, 3.4))
pos = np.arange(len(BINS))
for k, (key, lab) in enumerate([("posterior", "posterior"), ("gls", "GLS"), ("topdown", "TopDown-style")]):
    axes[0].bar(pos + 0.27 * (k - 1), [table["tract"][b]["rmse"][key] for b, _, _ in BINS], width=0.27,
                label=lab + (" mean" if key == "posterior" else ""))
    if key != "topdown":  # TopDown-style has no intervals
        axes[1].plot(pos, [table["tract"][b]["coverage"][key] for b, _, _ in BINS], "o-", label=lab)
axes[1].plot(pos, [randomized[b]["randomized"] if b in randomized else np.nan for b, _, _ in BINS], "o--",
             color="C0", alpha=0.6, label="posterior, randomized")
axes[0].set_xticks(pos, [b for b, _, _ in BINS])
axes[0].set_xlabel("true tract cell (people)")
axes[0].set_ylabel("RMSE (people)")
axes[0].legend(fontsize=8)
axes[1].axhline(LEVEL, color="k", lw=0.8)
axes[1].set_xticks(pos, [b for b, _, _ in BINS])
axes[1].set_ylim(0.5, 1.02)
axes[1].set_xlabel("true tract cell (people)")
axes[1].set_ylabel("coverage of 90% intervals")
axes[1].legend(fontsize=8, loc="lower right")
fig.suptitle("Tract sex x age cells: error and coverage by cell size", fontsize=10)
fig.tight_layout()
show(fig, OUT / "error_by_cell_size.png")

# %% [markdown]
# ## One tract's age pyramid
#
# The tract with the fewest people in these counties (most of its cells are small): men to the
# left, women to the right; grey bars the truth, blue the posterior 90% interval (dot: its
# mean), orange the GLS 90% interval (dot: the estimate), red crosses the TopDown-style counts.
# A GLS interval that reaches below zero crosses the centre line into the other sex's side:
# that part of it is a negative number of people.

# %%
pick = int(np.argmin(tract_pop.to_numpy()))
tract_id = str(tract_pop.index[pick])
cells = np.flatnonzero(frame["tract"].to_numpy() == tract_id)
sub = frame.iloc[cells]
p_mean, p_lo, p_hi = (v[cells] for v in levels["tract"]["posterior"])
g_x, g_lo, g_hi = (v[cells] for v in levels["tract"]["gls"])
fig, ax = plt.subplots(figsize=(7.5, 6.2))
ages = np.arange(len(AGE_GROUPS))
for s, sign in (("male", -1), ("female", 1)):
    m = (sub["sex"] == s).to_numpy()
    a = sub["age"].cat.codes.to_numpy()[m]
    ax.barh(a, sign * x[cells][m], height=0.8, color="0.82", label="truth" if s == "male" else None)
    ax.hlines(a + 0.18, sign * p_lo[m], sign * p_hi[m], color="tab:blue", lw=2.5,
              label="posterior 90%" if s == "male" else None)
    ax.plot(sign * p_mean[m], a + 0.18, "o", color="tab:blue", ms=3)
    ax.hlines(a - 0.18, sign * g_lo[m], sign * g_hi[m], color="tab:orange", lw=1.5,
              label="GLS 90%" if s == "male" else None)
    ax.plot(sign * g_x[m], a - 0.18, "o", color="tab:orange", ms=3)
    ax.plot(sign * topdown[cells][m], a, "x", color="tab:red", ms=5, label="TopDown-style" if s == "male" else None)
ax.axvline(0, color="k", lw=0.8)
ax.set_yticks(ages, AGE_GROUPS, fontsize=7)
lim = np.nanmax(np.abs(np.r_[g_lo, g_hi, p_hi, x[cells]])) * 1.05
ax.set_xlim(-lim, lim)
ticks = ax.get_xticks()
ax.set_xticks(ticks, [f"{abs(t):.0f}" for t in ticks])
ax.set_xlim(-lim, lim)
ax.set_xlabel("people (men left, women right)")
ax.set_title(f"tract {tract_id} ({int(x[cells].sum())} people)", fontsize=10)
ax.legend(fontsize=8, loc="lower right")
fig.tight_layout()
show(fig, OUT / "tract_pyramid.png")
print(f"tract {tract_id}: {int(np.sum(x[cells] < 30))} of {cells.size} cells under 30; GLS intervals below zero: "
      f"{int(np.sum(g_lo < 0))}; posterior intervals below zero: {int(np.sum(p_lo < 0))}")

# %% [markdown]
# ## A derived quantity: each tract's share aged 65+
#
# Shares are what planners use (services for the elderly, school places).  The posterior gives
# the share's draws directly, `(x @ A) / (x @ B)` with `A` selecting a tract's cells aged 65+
# and `B` all its cells (`privinfer.census.unit_sums`; `derived_summary` summarizes them with
# each share's own R-hat and ESS); GLS gives the ratio of its estimates with a delta-method
# interval from the exact GLS covariance of the two sums (`ratio_interval`); TopDown-style gives
# the ratio of its integers.  A share moves with its tract's whole age profile, the posterior's
# slowest direction, so it mixes more slowly than the cells: its convergence is printed apart.

# %%
OLD = [a for a in AGE_GROUPS if a[:2].isdigit() and int(a[:2]) >= 65]
A, B = unit_sums(release, "tract", age=OLD), unit_sums(release, "tract")
share_true = (x @ A) / (x @ B)
share_post = derived_summary(idata, A, B, level=LEVEL, warn=False)   # with each share's R-hat and ESS
s_mean, s_lo, s_hi = (share_post[c].to_numpy() for c in ("mean", "lower", "upper"))
g_share, g_lo, g_hi = gls.ratio_interval(A, B)
td_share = (topdown @ A) / (topdown @ B)
share = {"tracts": int(share_true.size), "rmse": {}, "coverage": {}, "width": {},
         "posterior_max_rhat": float(np.nanmax(share_post["r_hat"])),
         "posterior_min_ess": float(np.nanmin(share_post["ess_bulk"])),
         "posterior_rhat_over_1_01": int(np.sum(share_post["r_hat"] > 1.01))}
for key, (pt, lo, hi) in {"posterior": (s_mean, s_lo, s_hi), "gls": (g_share, g_lo, g_hi),
                          "topdown": (td_share, None, None)}.items():
    share["rmse"][key] = float(np.sqrt(np.mean((pt - share_true) ** 2)))
    if lo is not None:
        share["coverage"][key] = float(np.mean((lo <= share_true) & (share_true <= hi)))
        share["width"][key] = float(np.mean(hi - lo))
print(f"share aged 65+ over {share['tracts']} tracts (true shares {share_true.min():.1%}-{share_true.max():.1%}):")
print(f"  RMSE (percentage points): posterior {100 * share['rmse']['posterior']:.2f}, GLS "
      f"{100 * share['rmse']['gls']:.2f}, TopDown-style {100 * share['rmse']['topdown']:.2f}")
print(f"  90% coverage (mean width, points): posterior {share['coverage']['posterior']:.2f} "
      f"({100 * share['width']['posterior']:.2f}), GLS delta method {share['coverage']['gls']:.2f} "
      f"({100 * share['width']['gls']:.2f}); TopDown-style: no intervals")
print(f"  the shares' own convergence: max R-hat {share['posterior_max_rhat']:.3f} "
      f"({share['posterior_rhat_over_1_01']} of {share['tracts']} above 1.01), min bulk ESS "
      f"{share['posterior_min_ess']:.0f}")

order = np.argsort(share_true)
fig, ax = plt.subplots(figsize=(7.5, 3.6))
k = np.arange(order.size)
ax.vlines(k - 0.15, 100 * s_lo[order], 100 * s_hi[order], color="tab:blue", lw=2.5, label="posterior 90%")
ax.vlines(k + 0.15, 100 * g_lo[order], 100 * g_hi[order], color="tab:orange", lw=1.5, label="GLS 90% (delta)")
ax.plot(k, 100 * td_share[order], "x", color="tab:red", label="TopDown-style")
ax.plot(k, 100 * share_true[order], "_", color="k", ms=12, mew=2, label="truth")
ax.set_xlabel("tracts, by true share aged 65+")
ax.set_ylabel("share aged 65+ (%)")
ax.legend(fontsize=8)
fig.tight_layout()
show(fig, OUT / "share_65_plus.png")

# %% [markdown]
# ## What a data user takes from this
#
# * **Small cells.**  GLS is unbiased but its error does not shrink with the count: a cell of
#   5 people gets the same +-20 interval as a cell of 500, often reaching below zero.  Forcing
#   non-negative integers (TopDown-style) removes the negative values but gives no interval and
#   pushes small cells up, the total being fixed.  The posterior knows that counts are
#   non-negative integers and borrows strength from the tract's county and from the smooth age
#   profile of the tract itself (neighbouring age groups move together), which is where its
#   gain in the table above comes from.
# * **Sums.**  County and state cells are sums of many tract cells, measured again at their own
#   level: there the three estimates are close, and GLS's Gaussian intervals are adequate.
# * **Ratios.**  A tract's share aged 65+ is a ratio of sums of thousands of people: all three
#   have errors of the order of a percentage point (printed above); compare the posterior's
#   and the delta method's coverage and width there before preferring one.
# * **Honesty about the sampler.**  The posterior's intervals are only as good as its chains:
#   the convergence line above says whether the usual targets were met in this run.

# %% [markdown]
# ## Headline numbers
#
# Saved to `results.json`, where the tests judge them: every draw keeps the invariant, the
# coverage of the intervals against its binomial band, the posterior's gain over GLS on small
# cells against the gain that non-negativity alone brings, and the intervals reaching below
# zero (GLS's expected number follows from its Gaussian errors; the posterior's must be none).
# The tract cells' true values and GLS standard errors are saved too, so the tests can derive
# their own bounds from them.

# %%
results = {
    "mode": "full" if FULL else "small", "counties": int(frame["county"].nunique()),
    "tracts": int(frame["tract"].nunique()), "cells": int(x.size), "cell_median": float(np.median(x)),
    "rho_per_query": RHO, "rho_total": float(mech.guarantee.rho), "level": LEVEL,
    "chains": CHAINS, "draws": DRAWS, "tune": TUNE, "posterior_draws": int(draws.shape[0]),
    "total": t_total, "fibre_ok": fibre_ok,
    "gls_total_error": float(abs(gls.x.sum() - t_total)),
    "topdown_keeps_total": bool(int(topdown.sum()) == t_total),
    "topdown_nonnegative_integers": bool(np.all(topdown >= 0) and np.issubdtype(np.asarray(topdown).dtype, np.integer)),
    "table": table, "tract_coverage": cover_tract, "tract_randomized_coverage": randomized,
    "share_65_plus": share, "convergence": convergence,
    "tract_cells": {"truth": x, "gls_se": gls.se},
    "pyramid_tract": tract_id, "seconds_sampling": t_sample,
}
save_results(OUT, results)
print(f"done in {time.perf_counter() - T_START:.0f} s")
