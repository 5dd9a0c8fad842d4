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
# # Choosing an age bucketization without wasting privacy budget
#
# Xiao, Wang, Zhang and Kifer, *Answering Private Linear Queries Adaptively using the Common
# Mechanism*, Sec. 7.5.  The 2020 Census DHC publishes sex-by-age histograms whose age
# buckets depend on the size of the (sub)population: **Total** (1 bucket), **Age4**,
# **Age9** or **Age23**.  Coarse buckets for small areas, fine ones for large areas -- but
# the choice depends on the confidential data, so it must itself be private.
#
# * **Threshold approach** (the DHC algorithm, Sec. 7.5.2): spend a fraction `gamma` of the
#   budget on a noisy population count, compare it with thresholds `theta_1 < theta_2 <
#   theta_3`, and spend the remaining `(1 - gamma) rho` on the chosen histogram.
# * **Common mechanism** (Sec. 7.5.3): release the *maximally common* mechanism of all four
#   histograms, decide from it, and complete the chosen histogram with *residual*
#   mechanisms.  The releases jointly cost exactly what the chosen histogram costs: the
#   decision is free.
# * **Alternative approach** (Sec. 7.5.4): decide as well as the common mechanism does, but
#   with fresh releases: at each step buy the cheapest linear Gaussian mechanism that gives
#   the same decision information.  Comparing its cost with the common mechanism's gives the
#   privacy-loss budget (PLB) saved.
#
# Data: the Census Bureau's 2010 demonstration DHC file for California (table P12, sex by 23
# age groups), read through `privinfer.datasets.load_ddp_dhc_ca` (`PRIVINFER_DATA`).  We use
# its published counts as a stand-in for the confidential truth of each of the 1,523 places
# (from empty places to Los Angeles).  They are themselves a privacy-protected demonstration
# product, but realistic in size and age structure, which is all the comparison needs; the
# paper used census tracts (SF1 PCT12), which we do not have here.  Because the data come at Age23 resolution, each histogram is a bucketing of
# the 46-cell vector `x = (male ages, female ages)`.

# %%
import time

import matplotlib.pyplot as plt
import numpy as np

from privinfer import datasets
from privinfer.case_studies._settings import full_mode, output_dir, save_results, show
from privinfer.common import DHC_AGE_EDGES, NestedSelection, bucket_matrix, snr_bounds
from privinfer.mechanisms import LinearGaussian

FULL = full_mode()
OUT = output_dir("common_mechanism")
T_START = time.perf_counter()
rng = np.random.default_rng(7_5_3)
print(f"mode: {'full' if FULL else 'small'}; figures in {OUT}")

dhc = datasets.load_ddp_dhc_ca(level="place")
X = dhc.table().reshape(dhc.n, -1).astype(float)  # (places, 46): male 23 ages, then female 23
TOTAL = X.sum(axis=1)
print(f"{dhc.n} California places; population quantiles (0, 25, 50, 75, 100%): "
      f"{np.percentile(TOTAL, [0, 25, 50, 75, 100]).astype(int).tolist()}")

# %% [markdown]
# ## The four nested mechanisms
#
# `M_k(x) = B_k x + N(0, sigma^2 I)` with `B_k` the sex-by-age histogram of bucketization
# `k`.  Each person is in exactly one cell of each histogram, so each `M_k` is `rho`-zCDP with
# `sigma^2 = 1/(2 rho)` (cost matrix `B_k^T B_k / sigma^2`, largest diagonal `1/sigma^2`).
# Age buckets of Sec. 7.5.1 are unions of P12's 23 age groups; `DHC_AGE_EDGES` gives them in
# years and we map each edge to its position among the Age23 edges.

# %%
NAMES = ("Total", "Age4", "Age9", "Age23")
AGE23 = DHC_AGE_EDGES["Age23"]
BUCKETS = {k: [AGE23.index(e) for e in DHC_AGE_EDGES[k]] for k in NAMES}
B = [bucket_matrix(BUCKETS[k], groups=2) for k in NAMES]
for k, b in zip(NAMES, B):
    print(f"{k:>6}: {b.shape[0]:2d} cells")
FRACTION, SNR = 0.5, 20.0  # Sec. 7.5.5: at least half of the cells with signal-to-noise >= 20
RHOS = (1 / 8, 1 / 32, 1 / 72, 1 / 128, 1 / 200, 1 / 288)  # Table 7's budgets
REPS = 2 if not FULL else 10  # independent runs of every place per budget
GAMMA = 0.1  # threshold approach: share of the budget spent on the noisy population count
Z_RULES = (3.0, 1e-3)  # common mechanism: 3-sigma SNR lower bounds (paper) and ~the point estimate


def mechanisms(rho):
    return [LinearGaussian(b, 1.0 / (2.0 * rho)) for b in B]


# %% [markdown]
# ## Ground truth: which bucketization *should* be used
#
# Sec. 6.2's rule, applied to the true counts (the paper's `%M_k`): starting from Total, move
# to the next finer histogram `M_{k+1}` if at least half of the cells of histogram `k`, as
# answered by `M_{k+1}` (summing its finer cells, noise variance `n_j sigma^2` for a bucket
# made of `n_j` finer ones), have true signal-to-noise ratio `>= 20`.
#
# The common mechanism applies the same rule with the true counts replaced by the lower end
# of a `z`-sigma interval computed from what it has released so far (`snr_bounds`).  The
# paper's `z = 3` makes the decisions conservative by design (it moves to a finer histogram
# only when the data can bear it with high confidence); we also run `z = 0.001`, i.e. the
# unbiased point estimate, which targets the ground-truth rule itself.


# %%
def true_choice(plan, x):
    """Sequential Sec. 6.2 rule on the exact counts."""
    K = len(plan.mechanisms)
    for k in range(K - 1):
        snr = plan.mechanisms[k].B @ x / np.sqrt(plan.candidate_noise_variance[k])
        if np.mean(snr >= plan.snr) < plan.fraction:
            return k
    return K - 1


# %% [markdown]
# ## The threshold approach and its thresholds
#
# The Census has not published `gamma` or the thresholds.  As in the paper (Sec. 7.5.5) we
# give the threshold approach a strong, *non-private* advantage: for every budget its
# thresholds are tuned on the exact data to agree with the ground truth as often as possible
# when applied to the **exact** population (a monotone step function fitted by dynamic
# programming over the sorted populations).  We report it twice: the oracle (exact
# populations, no budget spent -- not a private algorithm at all) and the real algorithm
# (noisy population at budget `gamma rho`, `gamma = 0.1`, histogram at `(1 - gamma) rho`).


# %%
def fit_thresholds(total, target, n_classes=4):
    """Thresholds theta_1 <= ... maximizing #{class(total) == target}, class = #{theta_j <= total}."""
    order = np.argsort(total, kind="stable")
    t_sorted, y_sorted = total[order], target[order]
    values, starts = np.unique(t_sorted, return_index=True)
    ends = np.append(starts[1:], len(t_sorted))
    counts = np.array([np.bincount(y_sorted[s:e], minlength=n_classes) for s, e in zip(starts, ends)])
    G = len(values)
    best = np.full((G, n_classes), -1, dtype=np.int64)
    back = np.zeros((G, n_classes), dtype=np.int64)
    best[0] = counts[0]
    for g in range(1, G):
        run = np.maximum.accumulate(best[g - 1])  # nondecreasing classes along sorted totals
        arg = np.array([int(np.argmax(best[g - 1][: c + 1])) for c in range(n_classes)])
        best[g] = run + counts[g]
        back[g] = arg
    c = int(np.argmax(best[-1]))
    classes = np.empty(G, dtype=np.int64)
    for g in range(G - 1, -1, -1):
        classes[g] = c
        c = back[g, c]
    theta = []
    for j in range(1, n_classes):  # theta_j: midpoint where the class first reaches j
        first = np.flatnonzero(classes >= j)
        if first.size == 0:
            theta.append(np.inf)
        elif first[0] == 0:
            theta.append(-np.inf)
        else:
            theta.append(0.5 * (values[first[0] - 1] + values[first[0]]))
    return np.array(theta), int(best[-1].max())


def threshold_class(total, theta):
    return np.searchsorted(theta, total, side="right")


# %% [markdown]
# ## Running the three approaches
#
# For every budget and place we run `NestedSelection.run` (curator side: release the common
# mechanism `CM_1234`, decide, release residuals, recreate).  Recorded on every run, and
# checked by the tests:
#
# * whether the mechanisms it released have cost matrices summing to the chosen `M_k`'s cost
#   matrix (the decisions cost nothing and `rho` is exactly the chosen histogram's `rho`):
#   a count of the runs where they do not;
# * the sum of squares of the standardized errors `(out - B_k x)/sigma` of the recreated
#   output and their number: if the output has exactly the law of `M_k(x)`, their mean
#   square is 1.
#
# The alternative approach (Sec. 7.5.4) needs, at each decision step `k`, the information the
# common mechanism `C_k` gives on the cells of histogram `k`: the best unbiased estimate with
# covariance `V_k = B_k K_{C_k}^+ B_k^T`.  The cheapest linear Gaussian mechanism whose estimate
# of `B_k x` is at least as precise has cost matrix `B_k^T V_k^{-1} B_k` (if a mechanism with
# cost `K` estimates `B_k x` with covariance `B_k K^+ B_k^T <= V_k`, then
# `B_k^T V_k^{-1} B_k <= B_k^T (B_k K^+ B_k^T)^{-1} B_k <= K`, the last step because
# `K^{1/2} P K^{1/2}` with `P` an orthogonal projection is below `K`).  Releasing it, say
# `D_k`, *is* releasing `C_k` afresh.  The alternative pays for every decision it takes plus
# the chosen histogram: the costs add as cost matrices (independent Gaussian releases), and
# its `rho` is half the largest diagonal entry.  PLB saved = `1 - rho / rho_alternative`.

# %%
results = {}
path_cost_mismatches = 0  # (budget, path) pairs whose path cost matrix is not the chosen M_k's
release_cost_mismatches, runs = 0, 0  # runs whose released cost matrices do not sum to the chosen M_k's
for rho in RHOS:
    Ms = mechanisms(rho)
    sigma2 = 1.0 / (2.0 * rho)
    plans = {z: NestedSelection(Ms, fraction=FRACTION, snr=SNR, z=z) for z in Z_RULES}
    plan = plans[3.0]
    truth = np.array([true_choice(plan, x) for x in X])
    # alternative approach: decision mechanisms D_k and the rho of every possible path
    K_dec = []
    for k in range(len(Ms) - 1):
        V = Ms[k].B @ np.linalg.pinv(plan.commons[k].cost_matrix) @ Ms[k].B.T
        K_dec.append(Ms[k].B.T @ np.linalg.solve(V, Ms[k].B))
    rho_alt = np.array([0.5 * np.max(np.diag(sum(K_dec[: min(c + 1, len(Ms) - 1)]) + Ms[c].cost_matrix))
                        for c in range(len(Ms))])
    rho_cm_path = np.array([0.5 * np.max(np.diag(plan.path_cost_matrix(c))) for c in range(len(Ms))])
    # every path of the common-mechanism procedure costs exactly the chosen mechanism (rtol 1e-9)
    for c in range(len(Ms)):
        path_cost_mismatches += not np.allclose(plan.path_cost_matrix(c), Ms[c].cost_matrix, rtol=1e-9,
                                                atol=1e-12 / sigma2)

    theta, _ = fit_thresholds(TOTAL, truth)
    oracle = threshold_class(TOTAL, theta)

    choice = {z: [] for z in Z_RULES}
    z2 = {z: [0.0, 0] for z in Z_RULES}
    thr_choice, z2_thr = [], [0.0, 0]
    for rep in range(REPS):
        for x in X:
            for z, pl in plans.items():
                res = pl.run(x, rng=rng)
                released_cost = sum(M.cost_matrix for _, M, _ in res.released)
                release_cost_mismatches += not np.allclose(released_cost, Ms[res.choice].cost_matrix, rtol=1e-9,
                                                           atol=1e-12 / sigma2)
                runs += 1
                choice[z].append(res.choice)
                err = res.output - Ms[res.choice].B @ x
                z2[z][0] += float(np.sum(err**2) / sigma2)
                z2[z][1] += err.size
            # threshold approach: noisy total at gamma*rho, histogram at (1 - gamma)*rho
            noisy_total = x.sum() + rng.normal(0.0, np.sqrt(1.0 / (2.0 * GAMMA * rho)))
            c = int(threshold_class(noisy_total, theta))
            thr_choice.append(c)
            y_thr = Ms[c].B @ x + rng.normal(0.0, np.sqrt(1.0 / (2.0 * (1.0 - GAMMA) * rho)), Ms[c].m)
            z2_thr[0] += float(np.sum((y_thr - Ms[c].B @ x) ** 2) / sigma2)
            z2_thr[1] += Ms[c].m
    choices = {f"CM z={z:g}": np.array(v).reshape(REPS, -1) for z, v in choice.items()}
    choices["thresholds, noisy count"] = np.array(thr_choice).reshape(REPS, -1)
    choices["thresholds, exact count (oracle)"] = np.broadcast_to(oracle, (REPS, len(oracle)))
    results[rho] = dict(
        truth=truth,
        truth_share=np.bincount(truth, minlength=4) / len(truth),
        choices=choices,
        plb_saved_alt=float(np.mean(1.0 - rho / rho_alt[choices["CM z=3"].ravel()])),
        plb_saved_path=1.0 - rho / rho_alt,
        rho_cm_path=rho_cm_path,
        mse={**{f"CM z={z:g}": tuple(v) for z, v in z2.items()}, "thresholds, noisy count": tuple(z2_thr)},
        theta=theta,
    )

# %% [markdown]
# ## Results
#
# For every budget: the share of places for which each bucketization is right (ground
# truth); for each chooser the share of places where it picks the right bucketization, a
# coarser one (safe: less detail than the data could bear) or a finer one (cells drowned in
# noise); the PLB the common mechanism saves against the alternative approach (mean over
# places, as it depends on how far each place goes) and against the threshold approach
# (`gamma`); and the per-cell mean squared error of the released histogram in units of
# `sigma^2 = 1/(2 rho)`.

# %%
CHOOSERS = ("CM z=3", "CM z=0.001", "thresholds, noisy count", "thresholds, exact count (oracle)")


def rates(ch, truth):
    return np.mean(ch == truth), np.mean(ch < truth), np.mean(ch > truth)


lines = []
for rho, r in results.items():
    share = 100 * r["truth_share"]
    lines.append(f"rho = 1/{round(1 / rho)}: right bucketization Total {share[0]:.1f}%, Age4 {share[1]:.1f}%, "
                 f"Age9 {share[2]:.1f}%, Age23 {share[3]:.1f}%; PLB saved vs alternative "
                 f"{100 * r['plb_saved_alt']:.2f}%, vs thresholds {100 * GAMMA:.0f}%")
    for name in CHOOSERS:
        acc, coarse, fine = rates(r["choices"][name], r["truth"])
        mse = r["mse"].get(name)
        mse_txt = f"   MSE/sigma^2 {mse[0] / mse[1]:.3f}" if mse else ""
        lines.append(f"    {name:<34} right {100 * acc:6.2f}%  coarser {100 * coarse:5.2f}%  "
                     f"finer {100 * fine:5.2f}%{mse_txt}")
print("\n".join(lines))
(OUT / "bucketization_table.txt").write_text("\n".join(lines) + "\n")
r8 = results[1 / 8]
print("PLB saved vs the alternative approach, by chosen bucketization (rho = 1/8): "
      + ", ".join(f"{k} {100 * s:.2f}%" for k, s in zip(NAMES, r8["plb_saved_path"])))

# %% [markdown]
# ### What we observe, and what the tests check
#
# * **Budget.**  The common mechanism spends exactly the chosen histogram's `rho` (recorded on
#   every run above) and saves a positive share against both the threshold approach
#   (`gamma`) and the alternative approach.  The saving against the alternative is exact
#   arithmetic on cost matrices: for a place that ends at Age9 or Age23 it is
#   `1 - 1/(1 + 1/23 + 1/4 + 1) = 56.4%` (the age group "under 5" is its own Age9 bucket, so
#   deciding on Age9 with fresh noise costs a full `rho` there; the Total and Age4 decisions
#   add `1/23` and `1/4`), 22.7% for Age4 and 4.2% for Total.  The paper's Table 7 reports
#   46-50% on census tracts; it does not spell out its accounting and we could not reproduce
#   those exact values -- ours is the exact cost-matrix composition.
# * **Output accuracy.**  The common-mechanism output has exactly the chosen mechanism's law
#   (standardized mean squared error 1); the threshold approach's histogram has variance
#   `sigma^2/(1 - gamma)` (1.111).  The tests allow 5 standard errors `sqrt(2/N)` (times the
#   expected value) over `N` cells.
# * **Choice accuracy.**  With the paper's conservative rule (`z = 3`: 3-sigma lower SNR
#   bounds) the common mechanism agrees with the ground truth *less* often than tuned
#   thresholds on these places, but all of its misses are on the safe side (too coarse); it
#   almost never picks a bucketization too fine for the data, which the threshold approach
#   does.  With the point estimate (`z -> 0`, here 0.001) -- the rule that targets the ground
#   truth -- the common mechanism is right more often than the threshold approach with a noisy
#   count, and even more often than the non-private oracle thresholds tuned on these very
#   data (the population size alone does not capture the age structure of a place).  This
#   differs from the paper (its Fig. 2: the common mechanism beats even the oracle at `z = 3`
#   on tracts); we report what we see on California places.  The PLB-saved figures use the
#   `z = 3` runs' choices.
#   Paired comparisons pooled over all budgets and runs, printed below with their standard
#   errors `sqrt(p_disagree / N)` (`p_disagree`: share of cases where exactly one of the two
#   is right, resp. where exactly one is too fine); the tests require each gap above 3 of them.

# %%
def pooled(name, what):
    return np.concatenate([(what(r["choices"][name], r["truth"])).ravel() for r in results.values()])


def paired_gap(a, b):
    """mean(a) - mean(b) and its standard error for paired indicators."""
    return a.mean() - b.mean(), np.sqrt(np.mean(a != b) / a.size)


def right(c, t):
    return c == t


def too_fine(c, t):
    return c > t


comparisons = [
    ("right", "CM z=0.001", "thresholds, noisy count", right),
    ("right", "CM z=0.001", "CM z=3", right),
    ("too fine", "thresholds, noisy count", "CM z=3", too_fine),
    ("right", "CM z=0.001", "thresholds, exact count (oracle)", right),
]
paired = []  # per comparison: both shares, the share of disagreements and the number of pairs
for label, a, b, f in comparisons:
    ia, ib = pooled(a, f), pooled(b, f)
    gap, se = paired_gap(ia, ib)
    paired.append({"what": label, "a": a, "b": b, "share_a": ia.mean(), "share_b": ib.mean(),
                   "p_disagree": np.mean(ia != ib), "n": ia.size})
    print(f"{label}: {a} - {b} = {100 * gap:+.2f} points (SE {100 * se:.2f})")

# %%
fig, axes = plt.subplots(1, 3, figsize=(15, 4.3))
lab = [f"1/{round(1 / r)}" for r in RHOS]
xs = np.arange(len(RHOS))
ax = axes[0]
bottom = np.zeros(len(RHOS))
for j, k in enumerate(NAMES):
    share = np.array([100 * results[r]["truth_share"][j] for r in RHOS])
    ax.bar(xs, share, bottom=bottom, label=k, color=f"C{j}")
    bottom += share
ax.set_xticks(xs)
ax.set_xticklabels(lab)
ax.set_xlabel("zCDP budget rho")
ax.set_ylabel("% of places")
ax.set_title("Right bucketization (ground truth)")
ax.set_ylim(0, 118)
ax.legend(fontsize=8, ncol=4, loc="upper center")
ax = axes[1]
for name, m in zip(CHOOSERS, "os^v"):
    acc = [100 * np.mean(results[r]["choices"][name] == results[r]["truth"]) for r in RHOS]
    ax.plot(xs, acc, marker=m, label=name.replace("CM", "common mechanism,").replace("0.001", "0.001 (point estimate)"))
ax.set_xticks(xs)
ax.set_xticklabels(lab)
ax.set_xlabel("zCDP budget rho")
ax.set_ylabel("% of places with the right choice")
ax.set_ylim(80, 100)
ax.set_title("Choice accuracy")
ax.legend(fontsize=8)
ax.grid(alpha=0.3)
ax = axes[2]
ax.plot(xs, [100 * results[r]["plb_saved_alt"] for r in RHOS], "o-", label="vs alternative (Sec. 7.5.4)")
ax.plot(xs, [100 * GAMMA] * len(RHOS), "s--", label=f"vs threshold approach (gamma = {GAMMA})")
ax.set_xticks(xs)
ax.set_xticklabels(lab)
ax.set_ylim(0, 70)
ax.set_xlabel("zCDP budget rho")
ax.set_ylabel("% of privacy-loss budget saved")
ax.set_title("Budget saved by the common mechanism")
ax.legend(fontsize=8)
ax.grid(alpha=0.3)
fig.suptitle(f"Sex-by-age bucketization for {dhc.n} California places (SNR rule: {FRACTION:.0%} of cells >= {SNR:g})")
fig.tight_layout()
show(fig, OUT / "bucketization_choice.png", dpi=130)

# %% [markdown]
# ## One place, end to end
#
# What an analyst sees for one mid-sized place: the common mechanism's first release gives
# SNR bounds for the Total histogram answered by Age4 (`snr_bounds`); the procedure goes on
# until a bucketization is chosen, and the recreated histogram is compared with the truth.

# %%
rho = 1 / 32
Ms = mechanisms(rho)
plan = NestedSelection(Ms, fraction=FRACTION, snr=SNR)
i_mid = int(np.argmin(np.abs(TOTAL - 5000)))
x = X[i_mid]
res = plan.run(x, rng=rng)
omega0 = res.released[0][2]
b0 = snr_bounds(plan.commons[0], omega0, Ms[0].B, plan.candidate_noise_variance[0])
print(f"{dhc.name[i_mid]} (population {int(TOTAL[i_mid])}), rho = 1/32: SNR lower bounds of the Total cells "
      f"under Age4: {np.round(b0.snr_lower, 1).tolist()}; chosen {NAMES[res.choice]} "
      f"(ground truth {NAMES[true_choice(plan, x)]})")
print("released: " + ", ".join(f"{lbl} ({M.m} values)" for lbl, M, _ in res.released))
one_place_cost_ok = np.allclose(sum(M.cost_matrix for _, M, _ in res.released), Ms[res.choice].cost_matrix,
                                rtol=1e-9)

fig, ax = plt.subplots(figsize=(8, 4))
edges = BUCKETS[NAMES[res.choice]]
nb = len(edges) - 1
truth_h = Ms[res.choice].B @ x
for s, (name, off) in enumerate((("male", 0), ("female", nb))):
    ax.step(np.arange(nb), truth_h[off: off + nb], where="mid", color=f"C{s}", label=f"{name}, truth")
    ax.plot(np.arange(nb), res.output[off: off + nb], "o", color=f"C{s}", label=f"{name}, released")
ax.set_xticks(np.arange(nb))
ax.set_xticklabels([f"{AGE23[edges[j]]}-" for j in range(nb)], rotation=60, fontsize=8)
ax.set_xlabel("age bucket (lower edge, years)")
ax.set_ylabel("people")
ax.set_title(f"{dhc.name[i_mid]}: {NAMES[res.choice]} chosen at rho = 1/32, no budget spent on the choice")
ax.legend(fontsize=8)
fig.tight_layout()
show(fig, OUT / "one_place.png", dpi=130)

# %% [markdown]
# ## Headline numbers
#
# Saved to `results.json`, where the tests check them: no run spent more (or less) than the
# chosen histogram's `rho`, the savings are positive (and 56.4% for a place ending at Age23),
# the outputs have the right variance, and the paired comparisons of the choosers.

# %%
summary = {
    "names": NAMES, "gamma": GAMMA, "reps": REPS, "places": dhc.n, "runs": runs,
    "path_cost_mismatches": path_cost_mismatches, "release_cost_mismatches": release_cost_mismatches,
    "one_place_cost_ok": one_place_cost_ok,
    "budgets": [{"rho": rho, "rho_cm_path": r["rho_cm_path"], "plb_saved_alt": r["plb_saved_alt"],
                 "plb_saved_path": r["plb_saved_path"], "truth_share": r["truth_share"],
                 "right_share": {name: np.mean(r["choices"][name] == r["truth"]) for name in CHOOSERS},
                 "mse": {name: {"sum_sq": ssq, "n": n} for name, (ssq, n) in r["mse"].items()}}
                for rho, r in results.items()],
    "paired": paired,
}
save_results(OUT, summary)
print(f"common_mechanism case study finished in {time.perf_counter() - T_START:.1f} s")
