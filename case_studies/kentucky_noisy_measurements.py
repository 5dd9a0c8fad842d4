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
# # Kentucky noisy measurements: exact posterior vs GLS vs TopDown-style post-processing
#
# The 2020 Census published *noisy measurement files*: discrete Gaussian measurements of many
# linear queries of the confidential histogram, with the state population kept exactly.
# Here we simulate such a file for Kentucky's counties x sex x 23 age groups (table P12,
# 5,520 cells; truth: the 2010 SF1 values of the NHGIS demonstration file, read through
# `privinfer.datasets.load_nhgis_sex_by_age`) with
# `privinfer.mechanisms.county_sex_age_measurements`: measurements of the detailed cells,
# the county totals and the state sex x age table, the state total invariant.  We compare
#
# * the exact posterior of the integer counts (uniform prior on the non-negative fibre,
#   `privinfer.models.noisy_measurements_model`, lattice step with grid moves);
# * the Bureau's GLS estimate with 90% Gaussian intervals (`privinfer.inference.gls_estimate`);
# * TopDown-style post-processing of the GLS point (non-negative integers keeping the total);
#
# by error against the truth by cell size, 90% interval coverage and width, and negative
# lower bounds, over several releases.  The `_dp` columns of the NHGIS file are the Bureau's
# own TopDown output of the 2020-05-27 demonstration run (another budget and another noise
# draw): its error is plotted as a reference level only.
#
# **Budget** (zCDP rho per query; our choice, not the Bureau's): 0.0025 each for the detailed
# cells, the county totals and the state sex x age table (sigma = 14.15, total rho = 0.0075).
# For scale, the 2020 production run spent rho = 2.56 on all P.L. 94-171 person tables
# (Abowd et al. 2022, as quoted by Cho and Awan, Semi-DP, Sec. 6).  The small budget puts the
# detailed cells' noise (sd 14) at the order of the demonstration run's error on these cells.
#
# Settings: small (default, for CI: the 8 smallest counties, 2 releases) or full
# (`PRIVINFER_FULL=1` or `--full`: all 120 counties, 4 releases).

# %%
import time

import arviz as az
import matplotlib.pyplot as plt
import numpy as np
import pymc as pm

from privinfer import datasets
from privinfer.case_studies._settings import full_mode, output_dir, save_results, show
from privinfer.inference import gls_estimate, topdown_style_estimate
from privinfer.mechanisms import county_sex_age_measurements
from privinfer.models import noisy_measurements_model

FULL = full_mode()
OUT = output_dir("kentucky_noisy_measurements")
T_START = time.perf_counter()
RHO = {"rho_detailed": 0.0025, "rho_county": 0.0025, "rho_state_sex_age": 0.0025}
N_COUNTIES = 120 if FULL else 8
RELEASES = 4 if FULL else 2
DRAWS, TUNE = (3500, 500) if FULL else (800, 300)

data = datasets.load_nhgis_sex_by_age("KY")
keep = np.sort(np.argsort(data.sf.sum(axis=(1, 2)), kind="stable")[:N_COUNTIES])  # all, or the smallest
truth = data.sf[keep]
demo = data.dp[keep]
counties, sexes, ages = truth.shape
x = truth.reshape(-1)
mech = county_sex_age_measurements(counties, sexes, ages, **RHO)
print(f"{counties} counties, {x.size} cells, sigmas {[float(s) for s in mech.sigmas]}, rho = {mech.guarantee.rho:.4g}")

# %% [markdown]
# ## Releases, estimates and posteriors

# %%
BINS = [0, 30, 100, 300, 1000, 3000, np.inf]
LABELS = ["<30", "30-99", "100-299", "300-999", "1k-3k", ">=3k"]
size_bin = np.digitize(x, BINS[1:-1])
rows = []
fibre_ok = True  # every posterior draw on the fibre {x >= 0, sum x = state total}
idata_first = None
for r in range(RELEASES):
    release = mech.publish(x, rng=1000 + r)
    gls = gls_estimate(release, level=0.9)
    topdown = topdown_style_estimate(release, gls, rng=r)
    model = noisy_measurements_model(release, grid=np.arange(x.size).reshape(counties, sexes * ages), rng=r)
    with model:
        idata = pm.sample(draws=DRAWS, tune=TUNE, chains=2, cores=2 if FULL else 1, random_seed=r,
                          progressbar=False, compute_convergence_checks=False)
    post = idata.posterior["x"].values.reshape(-1, x.size)
    fibre_ok &= bool(np.all(post.sum(axis=1) == x.sum()) and np.all(post >= 0))
    idata_first = idata if idata_first is None else idata_first
    rhat = float(az.rhat(idata, var_names=["x"])["x"].max())
    lo, hi = np.quantile(post, [0.05, 0.95], axis=0)
    rows.append({"mean": post.mean(axis=0), "lo": lo, "hi": hi, "gls": gls, "topdown": topdown, "rhat": rhat})
    print(f"release {r}: max R-hat {rhat:.3f}")

# %% [markdown]
# ## Error against the truth by cell size

# %%
def rmse_by_bin(est):
    err = np.array([np.asarray(e, dtype=float) - x for e in est])
    return np.array([np.sqrt(np.mean(err[:, size_bin == b] ** 2)) if np.any(size_bin == b) else np.nan
                     for b in range(len(LABELS))])


rm_post = rmse_by_bin([r["mean"] for r in rows])
rm_gls = rmse_by_bin([r["gls"].x for r in rows])
rm_td = rmse_by_bin([r["topdown"] for r in rows])
rm_demo = rmse_by_bin([demo.reshape(-1)])
fig, ax = plt.subplots(figsize=(7, 4))
pos = np.arange(len(LABELS))
for k, (lab, v) in enumerate([("posterior mean", rm_post), ("GLS", rm_gls), ("TopDown-style", rm_td),
                              ("Bureau demo run (reference)", rm_demo)]):
    ax.bar(pos + 0.2 * (k - 1.5), v, width=0.2, label=lab)
ax.set_xticks(pos, LABELS)
ax.set_xlabel("true cell size")
ax.set_ylabel("RMSE")
ax.legend()
fig.tight_layout()
show(fig, OUT / "rmse_by_size.png")
print("RMSE by size bin (cells; posterior, GLS, TopDown-style, demo):")
for b, lab in enumerate(LABELS):
    print(f"  {lab:>8} ({int(np.sum(size_bin == b)):4d}): {rm_post[b]:7.2f} {rm_gls[b]:7.2f} {rm_td[b]:7.2f} "
          f"{rm_demo[b]:7.2f}")

# %% [markdown]
# ## 90% intervals: coverage, width, negative lower bounds

# %%
def coverage_by_bin(inside):
    return np.array([np.mean(inside[size_bin == b]) if np.any(size_bin == b) else np.nan for b in range(len(LABELS))])


cov_p = np.mean([coverage_by_bin((r["lo"] <= x) & (x <= r["hi"])) for r in rows], axis=0)
cov_g = np.mean([coverage_by_bin((r["gls"].lower <= x) & (x <= r["gls"].upper)) for r in rows], axis=0)
wid_p = np.mean([np.mean(r["hi"] - r["lo"]) for r in rows])
wid_g = np.mean([np.mean(r["gls"].upper - r["gls"].lower) for r in rows])
neg_g = np.mean([r["gls"].negative_lower.sum() for r in rows])
neg_p = np.mean([np.sum(r["lo"] < 0) for r in rows])
fig, ax = plt.subplots(figsize=(7, 4))
ax.plot(pos, cov_p, "o-", label=f"posterior (mean width {wid_p:.1f})")
ax.plot(pos, cov_g, "s-", label=f"GLS (mean width {wid_g:.1f})")
ax.axhline(0.9, color="k", lw=0.8)
ax.set_xticks(pos, LABELS)
ax.set_xlabel("true cell size")
ax.set_ylabel("coverage of 90% intervals")
ax.legend()
fig.tight_layout()
show(fig, OUT / "coverage_by_size.png")
all_p = np.mean([np.mean((r["lo"] <= x) & (x <= r["hi"])) for r in rows])
all_g = np.mean([np.mean((r["gls"].lower <= x) & (x <= r["gls"].upper)) for r in rows])
print(f"coverage all cells: posterior {all_p:.3f}, GLS {all_g:.3f}; "
      f"intervals below zero per release: GLS {neg_g:.1f}, posterior {neg_p:.1f}")

# %% [markdown]
# ## Mixing of the lattice sampler
#
# Rank plots (Vehtari et al. 2021) of the three smallest and the three largest cells of the
# first release: each chain's ranks among all draws are uniform when the chains mix.

# %%
order = np.argsort(x, kind="stable")
cells = [int(c) for c in np.r_[order[:3], order[-3:]]]
axes = az.plot_rank(idata_first, var_names=["x"], coords={"x_dim_0": cells}, kind="bars",
                    figsize=(10, 5))
fig = np.ravel(axes)[0].figure
fig.suptitle("rank plots: 3 smallest and 3 largest cells (release 0)", fontsize=10)
fig.tight_layout()
show(fig, OUT / "rank_plots.png")

# %% [markdown]
# ## Headline numbers
#
# Saved to `results.json`, where the tests check them: the posterior intervals never reach
# below zero (the posterior lives on the non-negative integers), every draw keeps the state
# total, and the coverage of both kinds of interval is near 90%.

# %%
results = {
    "cells": int(x.size), "releases": RELEASES, "fibre_ok": fibre_ok,
    "max_rhat": max(r["rhat"] for r in rows),
    "coverage_posterior": all_p, "coverage_gls": all_g,
    "negative_lower_posterior": neg_p, "negative_lower_gls": neg_g,
    "width_posterior": wid_p, "width_gls": wid_g,
    "rmse_posterior": rm_post, "rmse_gls": rm_gls, "rmse_topdown": rm_td, "bins": LABELS,
}
save_results(OUT, results)
print(f"done in {time.perf_counter() - T_START:.0f} s")
