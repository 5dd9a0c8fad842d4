"""Semi-DP case study, executed as a notebook; its headline numbers checked."""

import numpy as np
import pytest

from notebook_helpers import execute_study

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def study():
    return execute_study("semi_dp")


@pytest.fixture(scope="module")
def r(study):
    return study.results


def test_notebook_shows_its_figures_inline(study):
    # Fig. 2, Fig. 3, UMPU power curves, null p-values, Census epsilons
    assert len(study.outputs("image/png")) == 5


# ---- 1. Figure 2: Semi-DP Gaussian vs naive group-privacy Gaussian ----

def test_semi_dp_gaussian_keeps_the_margins(r):
    assert r["fig2_margin_breaks"] == 0


def test_figure2_costs_match_the_chi_mean(r):
    # replicate means within 5 standard errors (sd/sqrt(reps)) of the chi-mean formula
    # E||N||_2 = sigma sqrt(2) Gamma((d+1)/2)/Gamma(d/2); the exact sd of the cost is
    # sigma*sqrt(d - (E chi_d)^2), the study records the sample sd
    assert len(r["fig2"]) == 6  # models I, II x semi, semi_paper, naive
    for key, v in r["fig2"].items():
        z = np.abs(np.asarray(v["mean"]) - v["exact"]) / np.asarray(v["se"])
        assert len(z) == len(r["fig2_k"])
        assert np.all(z < 5), f"Figure 2 {key}: simulated mean cost off the chi-mean formula (z={z.max():.1f})"


def test_semi_dp_gaussian_is_cheaper_than_naive(r):
    # cheaper at every k, in exact expectation and in the simulation (difference beyond 3
    # combined standard errors)
    for model in ("I", "II"):
        semi, naive = r["fig2"][f"{model}/semi"], r["fig2"][f"{model}/naive"]
        assert np.all(np.asarray(semi["exact"]) < naive["exact"])
        gap = np.asarray(naive["mean"]) - semi["mean"]
        assert np.all(gap > 3 * np.hypot(naive["se"], semi["se"])), f"model {model}: Semi-DP Gaussian not cheaper"


# ---- 2. Figure 3: K-norm vs naive norm mechanisms ----

def test_knorm_keeps_the_margins(r):
    assert r["fig3_margin_breaks"] == 0


def test_naive_norm_samplers_match_their_second_moments(r):
    # mean of ||V||^2 within 5 standard errors (sample sd / sqrt(reps)) of
    # (d+1)(d+2)/lambda^2 E||U||^2
    assert len(r["fig3_second_moments"]) == 2 * 3 * 3  # k x eps x (l1, l2, l-inf)
    for m in r["fig3_second_moments"]:
        z = abs(m["mean"] - m["exact"]) / (m["sd"] / np.sqrt(r["fig3_reps"]))
        assert z < 5, f"naive {m['mechanism']} sampler (k={m['k']}, eps={m['eps']}): second moment off by {z:.1f} SE"


def test_knorm_cost_for_a_2x2_table_is_exact(r):
    # k = 2: one direction, noise R U v/2 with R ~ Gamma(2, eps), U ~ Unif(-2, 2): mean cost 2/eps;
    # within 5 standard errors (sample sd / sqrt(reps))
    rows = [row for row in r["fig3"] if row["k"] == 2]
    assert len(rows) == 3
    for row in rows:
        mean, sd = row["cost_mean"]["K-norm (Semi-DP)"], row["cost_sd"]["K-norm (Semi-DP)"]
        z = abs(mean - 2.0 / row["eps"]) / (sd / np.sqrt(r["fig3_reps"]))
        assert z < 5, f"K-norm k=2 mean cost {mean:.3f} vs exact {2 / row['eps']:.3f} ({z:.1f} SE)"


def test_knorm_is_cheaper_than_every_naive_mechanism(r):
    # by more than 3 combined standard errors of the two mean costs
    n = r["fig3_reps"]
    for row in r["fig3"]:
        kc, ks = row["cost_mean"]["K-norm (Semi-DP)"], row["cost_sd"]["K-norm (Semi-DP)"]
        naive = [name for name in row["cost_mean"] if name.startswith("naive")]
        assert len(naive) == 3
        for name in naive:
            se = np.hypot(ks, row["cost_sd"][name]) / np.sqrt(n)
            assert row["cost_mean"][name] - kc > 3 * se, f"K-norm not cheaper than {name} (k={row['k']}, eps={row['eps']})"


# ---- 3. The semi-private UMPU odds-ratio test ----

def test_umpu_test_has_exact_size(r):
    # the UMPU threshold solves E_H F(H - m) = alpha (root-finding tolerance 1e-12)
    assert abs(r["size_exact"] - r["alpha"]) < 1e-8


def test_umpu_tests_are_unbiased(r):
    # power <= alpha under H0 (w <= 1), >= alpha under H1 (w > 1); 1e-10 for rounding
    w, alpha = np.asarray(r["power_w"]), r["alpha"]
    for name, c in r["power_curves"].items():
        c = np.asarray(c)
        assert np.all(c[w <= 1] <= alpha + 1e-10), f"{name}: power above alpha under H0"
        assert np.all(c[w > 1] >= alpha - 1e-10), f"{name}: power below alpha under H1"


def test_privacy_costs_power_and_the_semi_dp_test_loses_less(r):
    w = np.asarray(r["power_w"])
    c = {k: np.asarray(v) for k, v in r["power_curves"].items()}
    h1 = w > 1.05
    assert np.all(c["semi"][h1] > c["naive"][h1])
    assert np.all(c["no_privacy"][h1] > c["semi"][h1])


def test_two_by_two_releases_keep_the_margins(r):
    # rounding only: 1e-9 of the group sizes
    assert r["test_margin_deviation"] < 1e-9


def test_simulated_size_is_alpha(r):
    # Monte Carlo size within 4 binomial standard errors sqrt(alpha(1-alpha)/R) of alpha
    alpha = r["alpha"]
    se0 = np.sqrt(alpha * (1 - alpha) / r["test_replicates"])
    assert abs(r["size_semi"] - alpha) < 4 * se0, f"Semi-DP test size {r['size_semi']:.4f}"
    assert abs(r["size_naive"] - alpha) < 4 * se0, f"naive test size {r['size_naive']:.4f}"


def test_null_p_values_are_uniform(r):
    # under w = 1 the p-value is exactly Uniform(0, 1) (conditionally on t, hence
    # unconditionally): a Kolmogorov-Smirnov test does not reject at the 0.001 level
    assert r["null_pvalue_ks_p"] > 1e-3


def test_simulated_power_matches_the_exact_power(r):
    # given t, each rejection is Bernoulli(power(t)): the MC rate is within 4 SE of the mean
    # exact power over the simulated margins
    p = r["power_semi_exact"]
    se1 = np.sqrt(p * (1 - p) / r["test_replicates"])
    assert abs(r["power_semi_simulated"] - p) < 4 * se1


def test_semi_dp_test_is_more_powerful_than_naive(r):
    # two independent binomial rates over R replicates: the gap exceeds 4 standard errors of
    # the difference, sqrt(p_s (1 - p_s) / R + p_n (1 - p_n) / R)
    p_s, p_n, n = r["power_semi_exact"], r["power_naive_simulated"], r["test_replicates"]
    se = np.sqrt(p_s * (1 - p_s) / n + p_n * (1 - p_n) / n)
    assert r["power_semi_simulated"] - p_n > 4 * se


# ---- 4. The 2020 Census zCDP table ----

def test_semi_adjacent_parameter_of_the_census(r):
    assert r["a_census"] == 2 and r["a_toy"] == 2
    assert abs(r["rho_semi"] - 10.24) < 1e-12


def test_census_epsilons_are_the_papers(r):
    # the paper's numbers (Sec. 6.1), to the printed 5 decimals (half a unit in the last place)
    assert abs(r["eps_advertised"] - 17.91528) < 5e-6
    assert abs(r["eps_semi"] - 40.95057) < 5e-6


def test_tighter_conversion_keeps_the_gap(r):
    assert r["eps_advertised_tight"] <= r["eps_advertised"]
    assert r["eps_semi_tight"] <= r["eps_semi"]
    assert r["eps_semi_tight"] > 2 * r["eps_advertised_tight"]
