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
# # Delinquent children: an integer release that keeps the margins, and the association behind it
#
# The Federal Committee on Statistical Methodology (2005) published a fictitious 4 x 4 table
# of delinquent children by county (Alpha, Beta, Gamma, Delta) and education of the
# household head (Low, Medium, High, Very High), used by the integer subspace DP paper
# (Dharangutte, Gao, Gong, Yu 2023, Sec. 5 and App. E.3) as a sensitive table whose row and
# column totals must be published exactly.
#
# 1. **Release.**  The generalized Laplace mechanism (Def. 9) adds integer noise `e` with
#    `p(e) ∝ exp(-eps ||e||)` (l1 or l2) on the lattice `{e in Z^16 : row and column sums of e
#    are 0}` (dimension 9), so the released table is integer and keeps every margin.
# 2. **Convergence of the curator's sampler.**  The noise is drawn by a Gibbs-within-
#    Metropolis chain (Algorithm 1); L-lag couplings (Biswas, Jacob and Vanetti 2019; the
#    paper's Algorithms 2-3) give an estimated upper bound on the total variation distance
#    between the chain after t sweeps and the target (the paper's Fig. 1 and Fig. 6).
# 3. **Analysis.**  An analyst who sees the release, the margins and the (public) mechanism
#    fits the reference log-linear model `privinfer.models.contingency_table_model`: the
#    posterior of the table and of the log odds ratios (the association between county and
#    education), with the integer cells sampled on the fibre of the margins.
# 4. **Calibration.**  Coverage of the posterior intervals of the true cells over repeated
#    releases.
#
# The paper's privacy loss did not survive our copy's text extraction; we use eps = 0.5 (the
# value of `privinfer demo`), sensitivity 1 per unit of the norm.

# %%
import time

import arviz as az
import matplotlib.pyplot as plt
import numpy as np
import pymc as pm
from scipy import stats

from privinfer import datasets
from privinfer import invariants as I
from privinfer.case_studies._settings import full_mode, output_dir, save_results, show
from privinfer.mechanisms import GeneralizedLaplace
from privinfer.models import contingency_table_model
from privinfer.workflow import Release, fit
from privinfer.lattice import iterations_to_threshold, sample_meeting_times, tv_upper_bound

FULL = full_mode()
OUT = output_dir("delinquent_children")
T_START = time.perf_counter()
rng = np.random.default_rng(2005)

EPS = 0.5
N_COUPLED = 200 if FULL else 50  # coupled chain pairs per lag (the paper uses 200)
N_RELEASES = 4000 if FULL else 600  # independent releases for the law / unbiasedness checks
LONG_FACTOR = 4 if FULL else 3  # reference chains run this many times the certified burn-in
N_REPLICATES = 20 if FULL else 3  # releases refitted for the coverage study
DRAWS, TUNE, CHAINS = (2000, 1500, 4) if FULL else (600, 600, 2)
# the main fit's draws per chain: its R-hat is checked against 1.05.  For stationary chains,
# split R-hat - 1 is about 2 chi2_3 / (3 ESS) (four half-chains); with 9 log odds ratios and
# ESS about a sixth of the draws per chain, 2000 draws x 2 chains (ESS about 330) make R-hat >
# 1.05 about a 1-in-5,000 event; 600 x 2 (ESS about 100) would give it odds near 1 in 3
MAIN_DRAWS = DRAWS if FULL else 2000
print(f"mode: {'full' if FULL else 'small'}; figures in {OUT}")

truth = datasets.delinquent_children()
shape = truth.shape
x = truth.ravel()
inv0 = I.margins(shape, [(0,), (1,)])
t = np.round(inv0.of(x)).astype(np.int64)
inv = inv0.with_t(t)
print("true table (rows: counties, columns: education of household head)")
print(truth)
print(f"row totals {truth.sum(1)}, column totals {truth.sum(0)}; lattice dimension {inv.n - inv.rank}")

# %% [markdown]
# ## 1. L-lag couplings: how many sweeps the curator's chain needs
#
# For each norm we let `certify_burn_in` choose a lag `L0` (95% quantile of pilot meeting
# times at L = 1, so that the bound is sharp), then sample meeting times at `L0 / 2`, `L0`
# and `2 L0` and plot the estimated bound
# `TV(pi_t, pi) <= E[max(0, ceil((tau - L - t) / L))]` against t.  The sweeps needed for a
# bound of 0.01 should not depend much on L once L is large enough (the paper's
# observation, "stable at various choices of L").
#
# **Checked by the tests**: the estimated bound is non-increasing in t for every lag and
# reaches 0.01; and the certified burn-in is long enough *in fact*: N independent releases
# after the certified burn-in T and N after `LONG_FACTOR x T` sweeps (a proxy for the exact
# law) have the same distribution in every cell (two-sample Kolmogorov-Smirnov, Bonferroni over the 16 cells and
# the two norms at family-wise level 0.001).  A TV distance of 0.01 is far below what the test
# can detect (at level 0.001/32 the critical distance is `sqrt(ln(2/alpha)/2) sqrt(2/N)`, about
# 2.35 sqrt(2/N) ≈ 0.14 at N = 600), so the test fails only if the certificate is badly wrong.
# (With 50 coupled pairs the estimated bound moves in steps of 1/50, so "at most 0.01" means
# that every pair had met.)

# %%
mechs = {norm: GeneralizedLaplace(inv, EPS, norm=norm, n_coupling_replicates=N_COUPLED, tv_threshold=0.01)
         for norm in ("l1", "l2")}
curves, needed, tv_results = {}, {}, {}
for norm, mech in mechs.items():
    t0 = time.perf_counter()
    cert = mech.certify_burn_in(rng)
    L0 = cert.lag
    curves[norm], needed[norm] = {}, {}
    tv_results[norm] = {"lag": cert.lag, "certified_burn_in": cert.burn_in, "by_lag": {}}
    for L in sorted({max(1, L0 // 2), L0, 2 * L0}):
        tau = cert.meeting_times if L == L0 else sample_meeting_times(
            rng, mech.moves, mech.target, L, N_COUPLED, jump_scale=mech.jump_scale, order=mech.order)
        ts = np.arange(0, int(tau.max()) + 1)
        bound = tv_upper_bound(tau, L, ts)
        curves[norm][L] = (ts, bound)
        needed[norm][L] = iterations_to_threshold(tau, L, 0.01)
        tv_results[norm]["by_lag"][L] = {"non_increasing": bool(np.all(np.diff(bound) <= 0)),
                                         "final_bound": float(bound[-1]), "sweeps_to_0.01": needed[norm][L]}
    print(f"{norm}: certified burn-in {cert.burn_in} sweeps at lag {L0}; sweeps for TV bound <= 0.01 by lag: "
          + ", ".join(f"L={L}: {k}" for L, k in needed[norm].items())
          + f"  ({time.perf_counter() - t0:.1f} s)")

fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
for ax, (norm, cs) in zip(axes, curves.items()):
    for L, (ts, b) in cs.items():
        ax.plot(ts, b, label=f"L = {L} (TV <= 0.01 after {needed[norm][L]} sweeps)")
    ax.axhline(0.01, color="k", ls=":", lw=0.8)
    ax.set_yscale("symlog", linthresh=0.01)
    ax.set_ylim(0, 2.5)
    ax.set_xlabel("sweeps t")
    ax.set_ylabel("estimated upper bound on TV(chain at t, target)")
    ax.set_title(f"generalized Laplace, {norm} norm, eps = {EPS} ({N_COUPLED} coupled pairs per lag)", fontsize=10)
    ax.legend(fontsize=8)
fig.tight_layout()
show(fig, OUT / "tv_bounds.png")

# %% [markdown]
# ## 2. Releases: margins kept, unbiased, and the certified burn-in checked
#
# **Checked by the tests** for both norms: every release is an integer table with exactly the
# published margins; every cell's mean noise over N releases is within the Bonferroni bound
# (family-wise 0.001 over 16 cells x 2 norms) of zero, in units of its standard error
# `sd/sqrt(N)`; and the Kolmogorov-Smirnov comparison of section 1 passes.

# %%
z_bonf = stats.norm.isf(0.001 / (2 * 16 * 2))
ks_alpha = 0.001 / (16 * 2)
noise, release_results = {}, {}
for norm, mech in mechs.items():
    T = mech.burn_in()
    X = np.tile(x, (N_RELEASES, 1))
    y = mech.release(X, rng=rng)
    e = y - x
    noise[norm] = e
    z = e.mean(0) / (e.std(0, ddof=1) / np.sqrt(N_RELEASES))
    ref = GeneralizedLaplace(inv, EPS, norm=norm, burn_in=LONG_FACTOR * T).sample_noise(N_RELEASES, rng=rng)
    p = np.array([stats.ks_2samp(e[:, j], ref[:, j]).pvalue for j in range(16)])
    release_results[norm] = {
        "releases": N_RELEASES, "integer": y.dtype.kind == "i",
        "broken_margins": int(np.sum(np.any(inv.of(y) != t, axis=-1))),  # releases off the margins
        "reference_off_lattice": int(np.sum(np.any(inv0.of(ref) != 0, axis=-1))),
        "max_abs_z": float(np.abs(z).max()), "ks_min_p": float(p.min()), "burn_in": T,
        "noise_sd": float(e.std(0).mean()),
    }
    print(f"{norm}: {N_RELEASES} releases keep the margins; per-cell noise sd {e.std(0).mean():.2f}, "
          f"max |z| of the mean {np.abs(z).max():.2f} (bound {z_bonf:.2f}); KS vs {LONG_FACTOR}T-sweep chains: "
          f"min p {p.min():.3f} (bound {ks_alpha:.1e})")

one = noise["l1"][0].reshape(shape)
print("one l1 noise table (the paper's Table 1 analogue; zero row and column sums):")
print(one)

fig, ax = plt.subplots(figsize=(11, 4))
labels = [f"{c[:2]}/{e_[:4]}" for c in datasets.DELINQUENT_COUNTIES for e_ in datasets.DELINQUENT_EDUCATION]
for k, (norm, e) in enumerate(noise.items()):
    ax.boxplot(e, positions=np.arange(16) * 3 + k, widths=0.8, showfliers=False,
               boxprops=dict(color=f"C{k}"), medianprops=dict(color=f"C{k}"),
               whiskerprops=dict(color=f"C{k}"), capprops=dict(color=f"C{k}"))
    ax.plot([], [], color=f"C{k}", label=f"{norm} norm")
ax.axhline(0, color="k", lw=0.8)
ax.set_xticks(np.arange(16) * 3 + 0.5)
ax.set_xticklabels(labels, rotation=60, fontsize=8)
ax.set_xlabel("cell (county / education)")
ax.set_ylabel("noise (released - true)")
ax.set_title(f"Generalized Laplace noise per cell over {N_RELEASES} releases (eps = {EPS}); margins kept exactly",
             fontsize=10)
ax.set_ylim(top=ax.get_ylim()[1] + 0.25 * np.ptp(ax.get_ylim()))  # head room: the legend above the boxes
ax.legend(ncol=2, loc="upper center", fontsize=9)
fig.tight_layout()
show(fig, OUT / "release_noise.png")

# %% [markdown]
# ## 3. The association, from one release
#
# `contingency_table_model`: cell probabilities `p = softmax(alpha_i + beta_j + gamma_ij)` with
# corner constraints, `x | p ~ Multinomial(135, p)` restricted to the published margins, and
# the exact generalized Laplace likelihood of the release.  `gamma_ij` is the log odds ratio of
# cell (i, j) against Alpha and Low education.  The integer table is sampled by
# `LatticeMetropolis` (moves that keep both margins), the log-linear terms by NUTS; `privinfer.fit`
# builds the model from the `Release` (values, mechanism, margins, table shape) and samples it.
#
# For reference we print the log odds ratios of the true table itself,
# `log(x_ij x_00 / (x_i0 x_0j))` (all its cells are positive): the posterior describes the
# super-population association, so these are a guide, not a target to be covered.

# %%
def fit_table(y, seed, draws=DRAWS):
    release = Release(y, mechs["l1"], t=t, shape=shape)  # checks that y keeps the published margins
    return fit(release, "contingency", draws=draws, tune=TUNE, chains=CHAINS, cores=1, seed=seed,
               progressbar=False).idata


def cell_draws(idata):
    return idata.posterior["x"].values.reshape(-1, x.size)


t0 = time.perf_counter()
y_one = x + noise["l1"][0]
idata = fit_table(y_one, int(rng.integers(2**31)), draws=MAIN_DRAWS)
fit_seconds = time.perf_counter() - t0
xd = cell_draws(idata)
# every posterior draw should keep the margins and be non-negative
draws_off_fibre = int(np.sum(np.any(inv.of(xd) != t, axis=-1) | np.any(xd < 0, axis=-1)))
g = idata.posterior["log_odds_ratio"].values.reshape(-1, 3, 3)
rhat = float(az.rhat(idata, var_names=["log_odds_ratio"]).to_array().max())
ss = idata.sample_stats
acc = float(ss["lattice_accept"].mean()) if "lattice_accept" in ss else float("nan")
print(f"fit: {fit_seconds:.0f} s, max R-hat(log odds ratios) {rhat:.3f}, lattice acceptance {acc:.2f}")
true_lor = np.log(truth[1:, 1:] * truth[0, 0] / np.outer(truth[1:, 0], truth[0, 1:]))
glo, gmean, ghi = np.quantile(g, 0.05, axis=0), g.mean(0), np.quantile(g, 0.95, axis=0)
print("log odds ratio vs (Alpha, Low): posterior mean [90% interval]  (true table's value)")
for i in range(3):
    for j in range(3):
        print(f"  {datasets.DELINQUENT_COUNTIES[i + 1]:6s} x {datasets.DELINQUENT_EDUCATION[j + 1]:9s}: "
              f"{gmean[i, j]:+.2f} [{glo[i, j]:+.2f}, {ghi[i, j]:+.2f}]  ({true_lor[i, j]:+.2f})")
# The table's association is strong (Alpha: Low-education heavy); the posterior should see it:
# at least one log odds ratio's 90% interval excludes 0 (checked by the tests: it is the point
# of the analysis).
excl = int(np.sum((glo > 0) | (ghi < 0)))
print(f"{excl} of 9 log odds ratios have 90% intervals excluding 0")

fig, axes = plt.subplots(1, 2, figsize=(13, 4.5))
ax = axes[0]
lo, hi = np.quantile(xd, [0.05, 0.95], axis=0)
pos = np.arange(16)
ax.vlines(pos, lo, hi, color="tab:blue", lw=4, alpha=0.5, label="90% posterior interval")
ax.plot(pos, xd.mean(0), "o", color="tab:blue", ms=4, label="posterior mean")
ax.plot(pos, y_one, "x", color="tab:orange", ms=7, label="release")
ax.plot(pos, x, "_", color="k", ms=14, mew=2, label="true cell")
ax.set_xticks(pos)
ax.set_xticklabels(labels, rotation=60, fontsize=8)
ax.set_ylabel("children")
ax.set_title("cells: truth, release and posterior", fontsize=10)
ax.legend(fontsize=8)
ax = axes[1]
names = [f"{c} x {e_}" for c in datasets.DELINQUENT_COUNTIES[1:] for e_ in datasets.DELINQUENT_EDUCATION[1:]]
pos = np.arange(9)
ax.hlines(pos, glo.ravel(), ghi.ravel(), color="tab:green", lw=4, alpha=0.6, label="90% posterior interval")
ax.plot(gmean.ravel(), pos, "o", color="tab:green", label="posterior mean")
ax.plot(true_lor.ravel(), pos, "k|", ms=12, mew=2, label="true table's log odds ratio")
ax.axvline(0, color="k", lw=0.8)
ax.set_yticks(pos)
ax.set_yticklabels(names, fontsize=8)
ax.set_xlabel("log odds ratio vs (Alpha, Low)")
ax.set_title("association: posterior from one release", fontsize=10)
ax.set_ylim(-0.7, 10.2)  # head room: the legend above the intervals
ax.legend(fontsize=8, ncol=3, loc="upper center")
fig.tight_layout()
show(fig, OUT / "posterior.png")

# %% [markdown]
# The same log odds ratios chain by chain (`az.plot_forest`), with 90% highest-density
# intervals and each chain's bulk effective sample size: the chains agree (the R-hat printed
# above), and every chain holds on the order of a hundred effective draws.

# %%
lor = idata.posterior[["log_odds_ratio"]]
lor = lor.assign_coords({lor["log_odds_ratio"].dims[2]: list(datasets.DELINQUENT_COUNTIES[1:]),
                         lor["log_odds_ratio"].dims[3]: list(datasets.DELINQUENT_EDUCATION[1:])})
axes = az.plot_forest(lor, var_names=["log_odds_ratio"], hdi_prob=0.9, ess=True, figsize=(10, 6), textsize=9)
fig = np.ravel(axes)[0].figure
axes[0].axvline(0, color="k", lw=0.8)
fig.suptitle("log odds ratios vs (Alpha, Low) by chain: 90% HDI and bulk ESS", fontsize=10)
fig.tight_layout()
show(fig, OUT / "log_odds_forest.png")

# %% [markdown]
# **Posterior predictive check.**  `pm.sample_posterior_predictive` draws a fresh release
# from each (thinned) posterior draw with the curator's own sampler: replicated releases are
# integer tables with exactly the published margins (checked by the tests), and the observed
# release should look like one of them.  `az.plot_ppc` compares the distribution of the 16
# released cells with that of the replicated releases.

# %%
PPC_DRAWS = 100  # posterior draws per chain used for the replicated releases
model = contingency_table_model(Release(y_one, mechs["l1"], t=t, shape=shape))
thin = idata.sel(draw=slice(None, None, max(1, MAIN_DRAWS // PPC_DRAWS)))
t0 = time.perf_counter()
# a seed of its own: the study's generator keeps the stream of the releases that follow
ppc = pm.sample_posterior_predictive(thin, model=model, random_seed=20050, progressbar=False)
y_rep = ppc.posterior_predictive["y"].values.reshape(-1, x.size)  # the model's observed release is "y"
ppc_off_margins = int(np.sum(np.any(inv.of(y_rep) != t, axis=-1)))
print(f"{y_rep.shape[0]} replicated releases in {time.perf_counter() - t0:.1f} s; "
      f"{ppc_off_margins} off the published margins; integer: {y_rep.dtype.kind == 'i'}")
ax = az.plot_ppc(ppc, kind="cumulative", num_pp_samples=100, figsize=(7, 4), textsize=9)
fig = np.ravel(ax)[0].figure
np.ravel(ax)[0].set_xlabel("released cell value (children)")
np.ravel(ax)[0].set_title("posterior predictive check: empirical CDF of the 16 released cells", fontsize=10)
fig.tight_layout()
show(fig, OUT / "ppc.png")

# %% [markdown]
# ## 4. Coverage over repeated releases
#
# The true table is fixed; each replicate is a fresh l1 release and a fresh fit.  We count
# the true cells inside their central 90% posterior intervals.  Within one table the 16
# coverage events are dependent (the margins tie the cells: only 9 are free), so we count
# `9 x replicates` effective independent trials; the tests check that the covered fraction is
# at least the 0.1% quantile of Binomial(9 R, 0.9) / (9 R) (one-sided: intervals that are too
# wide are conservative, not wrong).  The release of section 3 is the first replicate.

# %%
covered, widths = [], []
replicate_releases_off_margins, replicate_draws_off_fibre = 0, draws_off_fibre
for r in range(N_REPLICATES):
    if r == 0:
        d_r = xd
    else:
        y_r = mechs["l1"].release(x, rng=rng)
        replicate_releases_off_margins += int(np.any(inv.of(y_r) != t))
        d_r = cell_draws(fit_table(y_r, int(rng.integers(2**31))))
        replicate_draws_off_fibre += int(np.sum(np.any(inv.of(d_r) != t, axis=-1) | np.any(d_r < 0, axis=-1)))
    lo, hi = np.quantile(d_r, [0.05, 0.95], axis=0)
    covered.append((x >= lo) & (x <= hi))
    widths.append(hi - lo)
covered = np.array(covered)
n_eff = 9 * N_REPLICATES
frac = covered.mean()
need = stats.binom.ppf(0.001, n_eff, 0.9) / n_eff
print(f"90% intervals cover {covered.sum()}/{covered.size} true cells ({frac:.3f}) over {N_REPLICATES} releases; "
      f"required >= {need:.3f}; mean interval width {np.mean(widths):.1f} children")

# %% [markdown]
# ## Headline numbers
#
# Saved to `results.json`, where the tests check the claims above.

# %%
print("Headline numbers")
for norm in mechs:
    print(f"  {norm}: burn-in {mechs[norm].burn_in()} sweeps (lag {mechs[norm].certificate.lag}); "
          f"noise sd per cell {noise[norm].std(0).mean():.2f}")
print(f"  posterior: {excl}/9 log odds ratios exclude 0; 90% coverage {frac:.3f} over {N_REPLICATES} releases")
results = {
    "cells": x.size, "lattice_dimension": inv.n - inv.rank,
    "tv": tv_results, "releases": release_results,
    "fit": {"draws_off_fibre": draws_off_fibre, "max_rhat_log_odds_ratio": rhat, "lattice_accept": acc,
            "excluding_zero_90": excl, "log_odds_ratio_mean": gmean, "log_odds_ratio_lower": glo,
            "log_odds_ratio_upper": ghi},
    "ppc": {"releases": y_rep.shape[0], "integer": y_rep.dtype.kind == "i", "off_margins": ppc_off_margins},
    "coverage": {"replicates": N_REPLICATES, "free_cells": inv.n - inv.rank, "covered_90": int(covered.sum()),
                 "intervals": covered.size, "fraction_90": frac,
                 "releases_off_margins": replicate_releases_off_margins, "draws_off_fibre": replicate_draws_off_fibre},
}
save_results(OUT, results)
print(f"total time {time.perf_counter() - T_START:.0f} s")
