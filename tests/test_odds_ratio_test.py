"""Semi-private UMPU odds-ratio test (Cho and Awan, Thm 37), its variants and Bayesian counterpart."""

import math

import numpy as np
import pytest
from scipy import integrate, optimize, stats

from privinfer.distributions import FisherNoncentralHypergeometric
from privinfer.inference import (
    log_odds_ratio_log_likelihood,
    log_odds_ratio_posterior_grid,
    naive_group_privacy_noise,
    naive_group_privacy_test,
    p_value_function,
    power,
    semi_private_odds_ratio_interval,
    semi_private_odds_ratio_model,
    semi_private_odds_ratio_test,
    semi_private_p_value,
    umpu_test_function,
    umpu_threshold,
)
from privinfer.mechanisms import (
    GaussianCanonicalNoise,
    SemiPrivateTwoByTwo,
    Tulap,
    eps_delta_tradeoff,
    gaussian_tradeoff,
)

KS_ALPHA = 1e-3  # per KS test of p-value uniformity


def _simulate_release(margins, w, noise, n, rng):
    h = FisherNoncentralHypergeometric.from_margins(margins, odds_ratio=w)
    x11 = h.sample(n, rng=rng)
    return x11, x11 + noise.sample(n, rng=rng)


NULL_SETTINGS = [
    ((10, 12, 9, 13), Tulap.from_privacy(1.0)),
    ((40, 25, 30, 35), Tulap.from_privacy(0.5, 0.05)),
    ((5, 3, 4, 4), GaussianCanonicalNoise(1.0)),
    ((100, 80, 90, 90), Tulap.from_privacy(2.0, 1e-3)),
]


@pytest.mark.parametrize("margins,noise", NULL_SETTINGS, ids=["small", "delta", "gauss", "large"])
def test_p_value_is_uniform_under_null(margins, noise):
    rng = np.random.default_rng(2024)
    _, u = _simulate_release(margins, 1.0, noise, 3000, rng)
    p = p_value_function(margins, noise)(u)
    assert stats.kstest(p, "uniform").pvalue > KS_ALPHA
    two = np.minimum(1.0, 2 * np.minimum(p, 1 - p))
    assert stats.kstest(two, "uniform").pvalue > KS_ALPHA


def test_p_value_function_matches_scalar_api_and_alternatives():
    t = (10, 12, 9, 13)
    noise = Tulap.from_privacy(1.0)
    for u in [-2.0, 3.3, 5.0, 12.4]:
        p = semi_private_p_value(u, t, noise)
        # eq. (6) by direct enumeration
        h = FisherNoncentralHypergeometric.from_margins(t, 1.0)
        direct = float(np.sum(h.pmf(h.support) * noise.cdf(h.support - u)))
        assert p == pytest.approx(direct, abs=1e-14)
        assert float(p_value_function(t, noise)(np.array([u]))[0]) == pytest.approx(p, abs=1e-15)
        g = semi_private_odds_ratio_test(u, t, 0.05, noise=noise)
        less = semi_private_odds_ratio_test(u, t, 0.05, noise=noise, alternative="less")
        two = semi_private_odds_ratio_test(u, t, 0.05, noise=noise, alternative="two-sided")
        assert g.p_value == pytest.approx(p) and less.p_value == pytest.approx(1 - p)
        assert two.p_value == pytest.approx(min(1, 2 * min(p, 1 - p)))
        assert g.reject == (p <= 0.05)


THM37_CASES = [
    ((6, 5, 4, 7), Tulap.from_privacy(1.0), 0.05),
    ((3, 8, 5, 6), Tulap.from_privacy(0.8, 0.1), 0.2),
    ((4, 4, 4, 4), GaussianCanonicalNoise(1.5), 0.1),
]


@pytest.mark.parametrize("margins,noise,alpha", THM37_CASES, ids=["tulap", "tulap-delta", "gauss"])
def test_rejection_probability_equals_phi_star(margins, noise, alpha):
    """Thm 37: P_U(p <= alpha | X) = phi*(X) = F(x11 - m(t)) for every table with the margins."""
    h = FisherNoncentralHypergeometric.from_margins(margins, 1.0)
    phi = umpu_test_function(h.support, margins, alpha, noise)
    # size alpha exactly (Neyman structure, eq. 3)
    assert float(np.sum(h.pmf(h.support) * phi)) == pytest.approx(alpha, abs=1e-10)
    pf = p_value_function(margins, noise)
    rng = np.random.default_rng(37)
    n = 6000
    for x, ph in zip(h.support, phi):
        freq = np.mean(pf(x + noise.sample(n, rng=rng)) <= alpha)
        # binomial frequency: 5 standard errors (plus one count for phi at 0 or 1)
        assert abs(freq - ph) <= 5 * math.sqrt(ph * (1 - ph) / n) + 1.0 / n, (x, freq, ph)


@pytest.mark.parametrize(
    "noise,f",
    [
        (Tulap.from_privacy(1.0), eps_delta_tradeoff(1.0)),
        (Tulap.from_privacy(0.6, 0.05), eps_delta_tradeoff(0.6, 0.05)),
        (GaussianCanonicalNoise(1.0), gaussian_tradeoff(1.0)),
    ],
    ids=["tulap", "tulap-delta", "gauss"],
)
def test_phi_star_is_f_semi_dp_and_tight(noise, f):
    """Eq. (2) via Lemma 34: for tables with x11 one apart, phi(x') <= 1 - f(phi(x)) both ways.

    (For a test phi the output is Bern(phi(X)); the level-phi(x) test that rejects on 1 has type
    II error 1 - phi(x'), so f-DP means 1 - phi(x') >= f(phi(x)).)  A CND makes the constraint
    tight in the direction of increasing x11.
    """
    t = (12, 9, 10, 11)
    h = FisherNoncentralHypergeometric.from_margins(t, 1.0)
    phi = umpu_test_function(h.support, t, 0.05, noise)
    a, b = phi[:-1], phi[1:]
    assert np.all(b <= 1 - f(a) + 1e-12)
    assert np.all(a <= 1 - f(b) + 1e-12)
    # tight wherever phi(x) > 0 (where phi(x) = 0, as below a bounded Tulap support, the
    # constraint allows phi(x + 1) up to delta but the CND puts 0 there too)
    pos = a > 0
    assert pos.sum() >= 3
    np.testing.assert_allclose(b[pos], 1 - f(a[pos]), atol=1e-10)


def _lp_most_powerful(margins, alpha, eps, delta, w1):
    """Best power at w1 over ALL (eps, delta)-semi-DP tests with Neyman structure (LP over phi).

    Constraints (Lemma 34 with f_{eps,delta}, both directions, x11 one apart):
    phi' <= delta + e^eps phi and phi' <= 1 - e^-eps (1 - delta - phi); size E_{w=1} phi = alpha.
    """
    h0 = FisherNoncentralHypergeometric.from_margins(margins, 1.0)
    h1 = FisherNoncentralHypergeometric.from_margins(margins, w1)
    k = len(h0.support)
    A, bvec = [], []
    e = math.exp(eps)
    for i in range(k - 1):
        for s, d in ((i, i + 1), (i + 1, i)):
            row = np.zeros(k)
            row[d], row[s] = 1.0, -e
            A.append(row)
            bvec.append(delta)
            row = np.zeros(k)
            row[d], row[s] = 1.0, -1.0 / e
            A.append(row)
            bvec.append(1 - (1 - delta) / e)
    res = optimize.linprog(
        -h1.pmf(h1.support),
        A_ub=np.array(A),
        b_ub=np.array(bvec),
        A_eq=h0.pmf(h0.support)[None, :],
        b_eq=[alpha],
        bounds=[(0, 1)] * k,
        method="highs",
    )
    assert res.status == 0
    return -res.fun


@pytest.mark.parametrize("eps,delta", [(1.0, 0.0), (0.5, 0.05)])
@pytest.mark.parametrize("w1", [1.5, 4.0])
def test_umpu_power_equals_linear_programming_optimum(eps, delta, w1):
    """Thm 37 optimality: no f-semi-DP test with Neyman structure beats phi* at any w1 > 1."""
    t = (8, 7, 6, 9)
    best = _lp_most_powerful(t, 0.1, eps, delta, w1)
    ours = power(t, 0.1, Tulap.from_privacy(eps, delta), w1)
    assert ours == pytest.approx(best, abs=1e-7)


POWER_TABLE = (30, 30, 30, 30)


@pytest.mark.parametrize("a_t", [2, 3])
def test_power_beats_naive_group_privacy(a_t):
    """Same (eps, 0) Semi-DP guarantee: UMPU with Tulap(eps) vs naive Tulap(eps / a(t)).

    Exact powers (enumeration over x11); both tests have exact size alpha at w = 1.
    """
    eps, alpha = 1.0, 0.05
    semi, naive = Tulap.from_privacy(eps), naive_group_privacy_noise(eps, 0.0, a_t)
    assert power(POWER_TABLE, alpha, semi, 1.0) == pytest.approx(alpha, abs=1e-10)
    assert power(POWER_TABLE, alpha, naive, 1.0) == pytest.approx(alpha, abs=1e-10)
    for w in [1.5, 2.0, 3.0, 5.0]:
        ps, pn = power(POWER_TABLE, alpha, semi, w), power(POWER_TABLE, alpha, naive, w)
        assert ps > pn + 0.01, (w, ps, pn)


def test_simulated_power_matches_exact_power():
    eps, alpha, w = 1.0, 0.05, 3.0
    noise = Tulap.from_privacy(eps)
    naive = naive_group_privacy_noise(eps, 0.0, 3)
    rng = np.random.default_rng(99)
    n = 4000
    x11, u = _simulate_release(POWER_TABLE, w, noise, n, rng)
    rej_semi = np.mean(p_value_function(POWER_TABLE, noise)(u) <= alpha)
    u_naive = x11 + naive.sample(n, rng=rng)
    rej_naive = np.mean(p_value_function(POWER_TABLE, naive)(u_naive) <= alpha)
    for rej, nz in ((rej_semi, noise), (rej_naive, naive)):
        exact = power(POWER_TABLE, alpha, nz, w)
        assert abs(rej - exact) < 5 * math.sqrt(exact * (1 - exact) / n)  # 5 binomial SEs
    r = naive_group_privacy_test(float(u_naive[0]), POWER_TABLE, alpha, epsilon=eps, a_t=3)
    assert r.p_value == pytest.approx(float(p_value_function(POWER_TABLE, naive)(u_naive[:1])[0]))


def test_interval_has_exact_coverage():
    t, w, alpha = (15, 20, 17, 18), 2.0, 0.1
    noise = Tulap.from_privacy(1.0)
    rng = np.random.default_rng(5)
    n = 1500
    _, u = _simulate_release(t, w, noise, n, rng)
    cover = 0
    for ui in u:
        lo, hi = semi_private_odds_ratio_interval(float(ui), t, alpha, noise=noise)
        cover += lo < w < hi
    # coverage is exactly 1 - alpha (each one-sided p-value is exactly uniform): 5 binomial SEs
    assert abs(cover / n - (1 - alpha)) < 5 * math.sqrt(alpha * (1 - alpha) / n)


def test_interval_ends_are_the_level_alpha_half_tests():
    t, alpha = (15, 20, 17, 18), 0.1
    noise = Tulap.from_privacy(1.0, 0.01)
    lo, hi = semi_private_odds_ratio_interval(8.2, t, alpha, noise=noise)
    assert 0 < lo < hi < np.inf
    assert semi_private_p_value(8.2, t, noise, odds_ratio=lo) == pytest.approx(alpha / 2, abs=1e-8)
    assert 1 - semi_private_p_value(8.2, t, noise, odds_ratio=hi) == pytest.approx(alpha / 2, abs=1e-8)
    # a release far below the support: no lower bound can be rejected... and upper stays finite
    lo2, hi2 = semi_private_odds_ratio_interval(-30.0, t, alpha, epsilon=1.0)
    assert lo2 == 0.0 and hi2 == 0.0  # every w0 rejected by the upper test: empty set
    lo3, hi3 = semi_private_odds_ratio_interval(0.5, t, alpha, epsilon=1.0)
    assert lo3 == 0.0 and 0 < hi3 < np.inf


def test_release_table_from_mechanism():
    x = np.array([7.0, 8.0, 3.0, 12.0])
    t = (15, 15, 10, 20)
    mech = SemiPrivateTwoByTwo(Tulap.from_privacy(1.0))
    y = mech.release(x, rng=3)
    r_table = semi_private_odds_ratio_test(y, t, 0.05, noise=mech.noise)
    r_scalar = semi_private_odds_ratio_test(y[0], t, 0.05, noise=mech.noise)
    assert r_table.p_value == r_scalar.p_value
    with pytest.raises(ValueError, match="reproduce the given margins"):
        semi_private_odds_ratio_test(y, (15, 15, 11, 19), 0.05, noise=mech.noise)


def test_bad_input():
    t = (10, 12, 9, 13)
    with pytest.raises(ValueError, match="inconsistent margins"):
        semi_private_odds_ratio_test(3.0, (10, 12, 9, 14), 0.05, epsilon=1.0)
    with pytest.raises(ValueError, match="negative"):
        semi_private_odds_ratio_test(3.0, (-1, 12, 9, 2), 0.05, epsilon=1.0)
    with pytest.raises(ValueError, match="shape"):
        semi_private_odds_ratio_test(3.0, (10, 12, 22), 0.05, epsilon=1.0)
    for a in (0.0, 1.0, -0.1, 1.5):
        with pytest.raises(ValueError, match="alpha"):
            semi_private_odds_ratio_test(3.0, t, a, epsilon=1.0)
    with pytest.raises(ValueError, match="alpha"):
        umpu_threshold(t, 1.0, Tulap.from_privacy(1.0))
    with pytest.raises(ValueError, match="alpha"):
        semi_private_odds_ratio_interval(3.0, t, 0.0, epsilon=1.0)
    with pytest.raises(ValueError, match="alternative"):
        semi_private_odds_ratio_test(3.0, t, 0.05, epsilon=1.0, alternative="bigger")
    with pytest.raises(ValueError, match="noise"):
        semi_private_odds_ratio_test(3.0, t, 0.05)
    with pytest.raises(ValueError, match="not both"):
        semi_private_odds_ratio_test(3.0, t, 0.05, noise=Tulap.from_privacy(1.0), epsilon=1.0)
    with pytest.raises(ValueError, match="non-finite"):
        semi_private_odds_ratio_test(np.nan, t, 0.05, epsilon=1.0)
    with pytest.raises(ValueError, match="epsilon"):
        semi_private_odds_ratio_test(3.0, t, 0.05, epsilon=0.0)
    with pytest.raises(ValueError, match="odds_ratio"):
        semi_private_odds_ratio_test(3.0, t, 0.05, epsilon=1.0, odds_ratio=0.0)


# -- Bayesian counterpart ------------------------------------------------------------------
BAYES_T = (12, 9, 10, 11)
BAYES_U = 7.4


@pytest.mark.parametrize("noise", [Tulap.from_privacy(1.0), Tulap.from_privacy(0.7, 0.1), GaussianCanonicalNoise(1.0)])
def test_marginal_likelihood_matches_enumeration(noise):
    psi = np.array([-2.0, 0.0, 0.7, 3.0])
    got = log_odds_ratio_log_likelihood(psi, BAYES_U, BAYES_T, noise)
    for g, s in zip(got, psi):
        h = FisherNoncentralHypergeometric.from_margins(BAYES_T, log_odds_ratio=s)
        direct = np.sum(h.pmf(h.support) * noise.pdf(BAYES_U - h.support))
        assert g == pytest.approx(math.log(direct), abs=1e-12)


def _quad_posterior_moments(noise, prior_sigma):
    def post(s):
        return math.exp(float(log_odds_ratio_log_likelihood(np.array([s]), BAYES_U, BAYES_T, noise)[0]) - 0.5 * (s / prior_sigma) ** 2)

    z = integrate.quad(post, -40, 40, limit=400)[0]
    m = integrate.quad(lambda s: s * post(s), -40, 40, limit=400)[0] / z
    return z, m


def test_grid_posterior_matches_quadrature():
    noise = Tulap.from_privacy(1.0)
    g, d = log_odds_ratio_posterior_grid(BAYES_U, BAYES_T, noise, np.linspace(-15, 15, 6001), prior_sigma=2.0)
    _, m = _quad_posterior_moments(noise, 2.0)
    assert np.trapezoid(g * d, g) == pytest.approx(m, abs=1e-6)


def test_model_logp_equals_numpy_likelihood():
    noise = Tulap.from_privacy(0.7, 0.1)
    model = semi_private_odds_ratio_model(BAYES_U, BAYES_T, noise=noise, prior_sigma=2.0)
    f = model.compile_logp(sum=False)  # [prior term, likelihood potential]
    for s in [-1.5, 0.0, 2.2]:
        prior_term, lik_term = f({"log_odds_ratio": s})
        expect = float(log_odds_ratio_log_likelihood(np.array([s]), BAYES_U, BAYES_T, noise)[0])
        assert lik_term == pytest.approx(expect, abs=1e-12)
        # PyMC's Normal logp carries its own rounding of log(2 pi) (~1e-9)
        assert prior_term == pytest.approx(stats.norm(0, 2.0).logpdf(s), abs=1e-8)


def test_impossible_release_is_rejected():
    noise = Tulap.from_privacy(1.0, 0.2)  # bounded support: |N| <= ~1.8
    with pytest.raises(ValueError, match="impossible"):
        log_odds_ratio_log_likelihood(np.array([0.0]), 40.0, BAYES_T, noise)


@pytest.mark.slow
def test_pymc_posterior_matches_exact_grid():
    import arviz as az
    import pymc as pm

    noise = Tulap.from_privacy(1.0)
    prior_sigma = 2.0
    model = semi_private_odds_ratio_model(BAYES_U, BAYES_T, noise=noise, prior_sigma=prior_sigma)
    with model:
        idata = pm.sample(draws=400, tune=400, chains=2, cores=1, random_seed=11, progressbar=False)
    post = idata.posterior["log_odds_ratio"]
    g, d = log_odds_ratio_posterior_grid(BAYES_U, BAYES_T, noise, np.linspace(-15, 15, 6001), prior_sigma=prior_sigma)
    cdf = np.concatenate([[0.0], np.cumsum((d[1:] + d[:-1]) / 2 * np.diff(g))])
    exact_mean = np.trapezoid(g * d, g)
    # tolerances: 5 Monte Carlo standard errors as estimated by arviz (ESS-based)
    mcse_mean = float(az.mcse(post, method="mean").to_array().item())
    assert abs(float(post.mean()) - exact_mean) < 5 * mcse_mean
    for q in (0.1, 0.5, 0.9):
        exact_q = float(np.interp(q, cdf, g))
        mcse_q = float(az.mcse(post, method="quantile", prob=q).to_array().item())
        assert abs(float(post.quantile(q)) - exact_q) < 5 * mcse_q, q
