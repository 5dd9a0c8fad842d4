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
# # Intersecting counting constraints: 14 records, three overlapping subsets
#
# The integer subspace DP paper (Dharangutte, Gao, Gong, Yu 2023, Sec. 5 and App. E.2,
# Figs. 3-5) privatizes 14 integer counts while keeping three *overlapping* subset totals
# exactly.  Unlike margins of a table, such constraints have no obvious short moves: the
# noise must live on the lattice `{e in Z^14 : C e = 0}` of the 3 x 14 incidence matrix C,
# found through the Smith normal form and reduced to a short basis.
#
# The paper's figure with the subsets and counts is not in our copy, so we use
# `privinfer.datasets.intersecting_counting_example()`: every region of the three-set Venn
# diagram is occupied (records 9 and 10 are in all three subsets, records 11-13 in none);
# `rank C = 3`, so the lattice has dimension 11.  The paper's privacy loss is also lost in
# extraction (it was chosen "on the smaller end" of meaningful values so that the noise is
# dispersed); we use eps = 0.5 (sensitivity 1 per unit of the norm).
#
# 1. generalized Laplace releases (l1 and l2) that keep the three subset totals, with the
#    curator's sampler certified by L-lag couplings (the paper's Fig. 4);
# 2. the invariants hold in every release and the noise is unbiased record by record (Fig. 5);
# 3. an analyst's posterior for the 14 counts from one release, written directly with the
#    PyMC glue: `lattice_latent` for the integer counts on `{x >= 0 : C x = t}`, the exact
#    likelihood through `observe`, and `LatticeMetropolis` to sample; its intervals' coverage
#    over repeated releases.

# %%
import time

import arviz as az
import matplotlib.pyplot as plt
import numpy as np
import pymc as pm
import pytensor.tensor as pt
from scipy import stats

from privinfer import datasets
from privinfer import invariants as I
from privinfer.case_studies._settings import full_mode, output_dir, save_results, show
from privinfer.mechanisms import GeneralizedLaplace
from privinfer.pymc import lattice_latent, observe
from privinfer.lattice import tv_upper_bound
from privinfer.pymc import LatticeMetropolis
from privinfer.workflow import fit, make_release

FULL = full_mode()
OUT = output_dir("intersecting_constraints")
T_START = time.perf_counter()
rng = np.random.default_rng(14)

EPS = 0.5
N_COUPLED = 200 if FULL else 50
N_RELEASES = 4000 if FULL else 1000
N_REPLICATES = 20 if FULL else 4
DRAWS, TUNE, CHAINS = (2000, 1500, 4) if FULL else (600, 600, 2)
print(f"mode: {'full' if FULL else 'small'}; figures in {OUT}")

x, subsets = datasets.intersecting_counting_example()
n = x.size
inv0 = I.counting(subsets, n)
C = inv0.integer_matrix()
C = C.toarray() if hasattr(C, "toarray") else np.asarray(C)
t = C @ x
inv = inv0.with_t(t)
B = inv.lattice_basis()
print(f"{n} records; subsets {[list(s) for s in subsets]}; totals t = {t}")
print(f"rank C = {inv.rank}; lattice dimension {B.shape[1]}; short basis: max |entry| {np.abs(B).max()}, "
      f"{np.count_nonzero(B, axis=0).mean():.1f} non-zeros per vector")
basis_in_kernel = bool(np.all(C @ B == 0))  # every basis vector keeps the three totals

# %% [markdown]
# ## 1. The curator's sampler and its TV bound
#
# `GeneralizedLaplace` certifies its burn-in with L-lag couplings (`certify_burn_in`): the
# number of sweeps after which the estimated bound on `TV(chain, target)` is at most 0.01.
# **Checked by the tests**: the bound is non-increasing in t and the certified burn-in
# reaches it.

# %%
mechs = {norm: GeneralizedLaplace(inv, EPS, norm=norm, n_coupling_replicates=N_COUPLED, tv_threshold=0.01)
         for norm in ("l1", "l2")}
tv_results = {}
fig, ax = plt.subplots(figsize=(7, 4.2))
for norm, mech in mechs.items():
    t0 = time.perf_counter()
    cert = mech.certify_burn_in(rng)
    ts = np.arange(0, int(cert.meeting_times.max()) + 1)
    bound = tv_upper_bound(cert.meeting_times, cert.lag, ts)
    tv_results[norm] = {"lag": cert.lag, "certified_burn_in": cert.burn_in,
                        "non_increasing": bool(np.all(np.diff(bound) <= 0)),
                        "bound_at_burn_in": float(cert.tv_bound(cert.burn_in))}
    ax.plot(ts, bound, label=f"{norm} norm: lag {cert.lag}, TV <= 0.01 after {cert.burn_in} sweeps")
    print(f"{norm}: lag {cert.lag}, certified burn-in {cert.burn_in} sweeps "
          f"(median meeting time {np.median(cert.meeting_times):.0f}); {time.perf_counter() - t0:.1f} s")
ax.axhline(0.01, color="k", ls=":", lw=0.8)
ax.set_yscale("symlog", linthresh=0.01)
ax.set_ylim(0, 2.5)
ax.set_xlabel("sweeps t")
ax.set_ylabel("estimated upper bound on TV(chain at t, target)")
ax.set_title(f"Intersecting constraints: L-lag coupling bounds ({N_COUPLED} pairs, eps = {EPS})", fontsize=10)
ax.legend(fontsize=8)
fig.tight_layout()
show(fig, OUT / "tv_bounds.png")

# %% [markdown]
# ## 2. Releases keep the subset totals and are unbiased
#
# **Checked by the tests** for both norms: every one of N releases is an integer vector with
# `C y = t` exactly, and every record's mean noise is within the Bonferroni bound (family-wise
# 0.001 over 14 records x 2 norms) of zero in units of its standard error `sd / sqrt(N)`.  The
# records in more subsets are more constrained, so their noise is smaller: we print the noise
# sd by the number of subsets a record belongs to.

# %%
z_bonf = stats.norm.isf(0.001 / (2 * n * 2))
membership = C.sum(axis=0)
noise, release_results = {}, {}
for norm, mech in mechs.items():
    y = mech.release(np.tile(x, (N_RELEASES, 1)), rng=rng)
    e = y - x
    noise[norm] = e
    z = e.mean(0) / (e.std(0, ddof=1) / np.sqrt(N_RELEASES))
    sd = e.std(0)
    release_results[norm] = {
        "releases": N_RELEASES, "integer": y.dtype.kind == "i",
        "broken_totals": int(np.sum(np.any(y @ C.T != t, axis=1))),  # releases off a subset total
        "max_abs_z": float(np.abs(z).max()),
        "noise_sd_by_membership": [float(sd[membership == k].mean()) for k in range(4)],
    }
    print(f"{norm}: {N_RELEASES} releases keep all three totals; max |z| of the mean noise {np.abs(z).max():.2f} "
          f"(bound {z_bonf:.2f}); noise sd by number of subsets: "
          + ", ".join(f"{k}: {sd[membership == k].mean():.2f}" for k in range(4)))

fig, ax = plt.subplots(figsize=(10, 4))
for k, (norm, e) in enumerate(noise.items()):
    ax.boxplot(e, positions=np.arange(n) * 3 + k, widths=0.8, showfliers=False,
               boxprops=dict(color=f"C{k}"), medianprops=dict(color=f"C{k}"),
               whiskerprops=dict(color=f"C{k}"), capprops=dict(color=f"C{k}"))
    ax.plot([], [], color=f"C{k}", label=f"{norm} norm")
ax.axhline(0, color="k", lw=0.8)
ax.set_xticks(np.arange(n) * 3 + 0.5)
ax.set_xticklabels([f"{i}\n({membership[i]} set{'s' if membership[i] != 1 else ''})" for i in range(n)], fontsize=8)
ax.set_xlabel("record (number of subsets it belongs to)")
ax.set_ylabel("noise (released - true)")
ax.set_title(f"Generalized Laplace noise over {N_RELEASES} releases (eps = {EPS}); subset totals kept exactly",
             fontsize=10)
ax.set_ylim(top=ax.get_ylim()[1] + 0.25 * np.ptp(ax.get_ylim()))  # head room: the legend above the boxes
ax.legend(ncol=2, loc="upper center", fontsize=8)
fig.tight_layout()
show(fig, OUT / "release_noise.png")

# %% [markdown]
# ## 3. Posterior of the counts from one release
#
# The model, written directly with the glue:
#
# `mu ~ N(log mean(y), 2)`, `sigma ~ HalfNormal(1)`, `z_i ~ N(0, 1)`,
# `x_i ~ Poisson(exp(mu + sigma z_i))` restricted to `{x in Z^14, x >= 0 : C x = t}`
# (`lattice_latent`; the published totals are data), and `y ~ generalized Laplace(x)`
# (`observe`: the exact likelihood up to its x-free normalizing constant).  The counts are
# sampled by `LatticeMetropolis` (moves along the short lattice basis, local acceptance
# ratios), the continuous parameters by NUTS.  `make_release` draws each release and checks
# its totals; `privinfer.fit` samples the model below, built from the `Release`.
#
# **Checked by the tests**: every release and every draw keeps the three totals, and every
# draw is non-negative; R-hat of `mu, sigma` below 1.05 in every fit; and over R releases the
# fraction of true counts inside their 90% intervals is at least the 0.1% quantile of
# Binomial(11 R, 0.9) / (11 R) (11 free coordinates per release: the 14 coverage events within
# one release are tied by the three totals, so we count 11 effective trials).

# %%
def poisson_model(release):
    y = release.y
    with pm.Model() as model:
        mu = pm.Normal("mu", np.log(max(y.mean(), 1.0)), 2.0)
        sigma = pm.HalfNormal("sigma", 1.0)
        z = pm.Normal("z", 0.0, 1.0, shape=n)
        xv = lattice_latent("x", release.invariant, release.t, prior=pm.Poisson.dist(mu=pt.exp(mu + sigma * z)))
        observe("y", release.mechanism, xv, observed=y)
    return model


def fit_counts(release, seed):
    return fit(release, poisson_model, draws=DRAWS, tune=TUNE, chains=CHAINS, cores=1, seed=seed,
               progressbar=False, step=lambda model: [LatticeMetropolis([model["x"]])]).idata


covered, summaries, fits = [], [], []
releases_off_totals, draws_off_fibre = 0, 0
t0 = time.perf_counter()
for r in range(N_REPLICATES):
    release = make_release(x, mechs["l1"], rng=rng)
    y_r = release.y
    releases_off_totals += int(np.any(C @ y_r != t))
    idata = fit_counts(release, int(rng.integers(2**31)))
    fits.append(idata)
    xd = idata.posterior["x"].values.reshape(-1, n)
    draws_off_fibre += int(np.sum(np.any(xd @ C.T != t, axis=1) | np.any(xd < 0, axis=1)))
    rhat = float(az.rhat(idata, var_names=["mu", "sigma"]).to_array().max())
    lo, hi = np.quantile(xd, [0.05, 0.95], axis=0)
    covered.append((x >= lo) & (x <= hi))
    summaries.append((y_r, xd.mean(0), lo, hi, rhat))
    if r == 0:
        first_seconds = time.perf_counter() - t0
covered = np.array(covered)
n_eff = 11 * N_REPLICATES
frac = covered.mean()
need = stats.binom.ppf(0.001, n_eff, 0.9) / n_eff
print(f"first fit {first_seconds:.0f} s; R-hat(mu, sigma) per fit: {[round(s[4], 3) for s in summaries]}")
print(f"90% intervals cover {covered.sum()}/{covered.size} true counts ({frac:.3f}) over {N_REPLICATES} releases; "
      f"required >= {need:.3f}")
rmse_rel = np.sqrt(np.mean([(s[0] - x) ** 2 for s in summaries]))
rmse_post = np.sqrt(np.mean([(s[1] - x) ** 2 for s in summaries]))
print(f"RMSE over releases: release {rmse_rel:.2f}, posterior mean {rmse_post:.2f}")

y_r, mean, lo, hi, _ = summaries[0]
fig, ax = plt.subplots(figsize=(9, 4))
pos = np.arange(n)
ax.vlines(pos, lo, hi, color="tab:blue", lw=4, alpha=0.5, label="90% posterior interval")
ax.plot(pos, mean, "o", color="tab:blue", ms=4, label="posterior mean")
ax.plot(pos, y_r, "x", color="tab:orange", ms=7, label=f"release (l1, eps = {EPS})")
ax.plot(pos, x, "_", color="k", ms=14, mew=2, label="true count")
ax.set_xticks(pos)
ax.set_xticklabels([f"{i}\n({membership[i]} set{'s' if membership[i] != 1 else ''})" for i in range(n)], fontsize=8)
ax.set_xlabel("record (number of subsets it belongs to)")
ax.set_ylabel("count")
ax.set_title("Posterior of the 14 counts given one release and the three subset totals", fontsize=10)
ax.set_ylim(top=ax.get_ylim()[1] + 0.25 * np.ptp(ax.get_ylim()))  # head room: the legend above the intervals
ax.legend(fontsize=8, ncol=4, loc="upper center")
fig.tight_layout()
show(fig, OUT / "posterior.png")

# %% [markdown]
# ### The chains, and the posteriors from every release
#
# Trace plots of the first fit (`az.plot_trace`): the hyperparameters, and the counts of a
# record in all three subsets (9) and of one in none (11): the integer counts move along the
# short lattice basis (every move keeps the three totals), and the chains overlap.  Grey ticks
# mark NUTS divergences (their number per fit is printed below).  Then the 90% highest-density
# intervals of the 14 counts from each of the R releases (`az.plot_forest`), with the true
# counts: each release moves the intervals, and the truth stays inside most of them.

# %%
# the fits label the cells "cell 1".."cell 14"; the figures above number the records 0..13
cell_dim = fits[0].posterior["x"].dims[-1]
by_record = [az.InferenceData(posterior=f.posterior.assign_coords({cell_dim: np.arange(n)}),
                              sample_stats=f.sample_stats) for f in fits]
axes = az.plot_trace(by_record[0], var_names=["mu", "sigma", "x"], coords={cell_dim: [9, 11]}, compact=False,
                     figsize=(10, 7))
fig = np.ravel(axes)[0].figure
fig.suptitle("first release: traces of mu, sigma and the counts of records 9 and 11 "
             "(grey ticks: NUTS divergences)", fontsize=10)
fig.tight_layout()
show(fig, OUT / "trace.png")
divergences = [int(f.sample_stats["diverging"].sum()) for f in fits]
print(f"NUTS divergences per fit: {divergences}")

axes = az.plot_forest(by_record, model_names=[f"release {r}" for r in range(N_REPLICATES)], var_names=["x"],
                      combined=True, hdi_prob=0.9, figsize=(8, 9), textsize=9)
ax = np.ravel(axes)[0]
# the true count at each record's row (the tick labels, "x[i]" or "[i]", name the records)
for tick, text in zip(ax.get_yticks(), ax.get_yticklabels()):
    label = text.get_text()
    ax.plot(x[int(label[label.index("[") + 1:label.rindex("]")])], tick, "k|", ms=14, mew=2)
ax.plot([], [], "k|", ms=10, mew=2, label="true count")
ax.legend(loc="upper right", fontsize=8)
ax.set_title(f"90% HDI of the 14 counts, one row per release ({N_REPLICATES} releases)", fontsize=10)
fig = ax.figure
fig.tight_layout()
show(fig, OUT / "forest.png")

# %% [markdown]
# ## Headline numbers
#
# Saved to `results.json`, where the tests check the claims above.

# %%
print("Headline numbers")
for norm, mech in mechs.items():
    print(f"  {norm}: burn-in {mech.burn_in()} sweeps (lag {mech.certificate.lag}); noise sd {noise[norm].std(0).mean():.2f}")
print(f"  posterior 90% coverage {frac:.3f} over {N_REPLICATES} releases")
results = {
    "records": n, "rank": inv.rank, "lattice_dimension": B.shape[1], "basis_in_kernel": basis_in_kernel,
    "tv": tv_results, "releases": release_results,
    "posterior": {"replicates": N_REPLICATES, "free_coordinates": n - inv.rank,
                  "releases_off_totals": releases_off_totals, "draws_off_fibre": draws_off_fibre,
                  "rhat_mu_sigma": [s[4] for s in summaries], "divergences": divergences,
                  "covered_90": int(covered.sum()), "intervals": covered.size, "fraction_90": frac,
                  "rmse_release": rmse_rel, "rmse_posterior": rmse_post},
}
save_results(OUT, results)
print(f"total time {time.perf_counter() - T_START:.0f} s")
