import numpy as np
import pytest
from scipy import stats

from privinfer import accounting as acc


def test_gaussian_constant_formula():
    eps, delta = 0.5, 1e-6
    assert acc.gaussian_constant(eps, delta) == pytest.approx((1 + np.sqrt(1 + np.log(1e6))) / 0.5)


def test_census_zcdp_numbers():
    # Semi-DP paper, Sec. 7: rho = 2.56 advertised; a(t) = 2 makes it 4 * 2.56 = 10.24;
    # Bun-Steinke conversion at delta = 1e-10 gives 17.915 vs 40.951.
    rho = 2.56
    rho_semi = acc.zcdp_group(rho, 2)
    assert rho_semi == pytest.approx(10.24)
    assert acc.zcdp_to_approx_dp(rho, 1e-10) == pytest.approx(17.915, abs=5e-4)
    assert acc.zcdp_to_approx_dp(rho_semi, 1e-10) == pytest.approx(40.951, abs=5e-4)


def test_tight_conversion_is_tighter_and_valid():
    for rho in [0.1, 1.0, 2.56]:
        e_tight = acc.zcdp_to_approx_dp_tight(rho, 1e-8)
        assert 0 < e_tight <= acc.zcdp_to_approx_dp(rho, 1e-8)
        # the Gaussian mechanism with that rho is mu-GDP with mu = sqrt(2 rho), whose exact
        # delta at e_tight must not exceed the target (zCDP conversion is an upper bound)
        assert acc.gdp_delta(acc.gdp_from_zcdp(rho), e_tight) <= 1e-8 * (1 + 1e-6)


def test_gdp_delta_matches_monte_carlo_privacy_loss():
    # P = N(mu,1), Q = N(0,1): privacy loss L = log(dP/dQ)(X) = mu*X - mu^2/2, X ~ P;
    # delta(eps) = E_P[(1 - e^{eps - L})_+] exactly; compare with quadrature.
    mu, eps = 1.3, 0.7
    xs = np.linspace(-12, 12, 200001)
    L = mu * xs - mu**2 / 2
    integrand = stats.norm.pdf(xs - mu) * np.clip(1 - np.exp(eps - L), 0, None)
    quad = np.trapezoid(integrand, xs)
    assert acc.gdp_delta(mu, eps) == pytest.approx(quad, rel=1e-6)
    assert acc.gdp_epsilon(mu, acc.gdp_delta(mu, eps)) == pytest.approx(eps, rel=1e-8)


def test_analytic_gaussian_from_cost_matrix():
    B = np.array([[1.0, 1.0], [1.0, 0.0]])
    Sigma = np.diag([2.0, 4.0])
    K = B.T @ np.linalg.inv(Sigma) @ B
    c = max(np.diag(K))
    assert acc.cost_matrix_rho(K) == pytest.approx(c / 2)
    eps = np.array([0.1, 1.0, 3.0])
    sc = np.sqrt(c)
    want = stats.norm.cdf(sc / 2 - eps / sc) - np.exp(eps) * stats.norm.cdf(-sc / 2 - eps / sc)
    np.testing.assert_allclose(acc.analytic_gaussian_delta(K, eps), want, rtol=1e-10)


@pytest.mark.parametrize("bad", [0.0, -1.0, np.inf, np.nan])
def test_bad_epsilon(bad):
    with pytest.raises(ValueError, match="epsilon"):
        acc.gaussian_constant(bad, 1e-5)


@pytest.mark.parametrize("bad", [0.0, 1.0, -0.1, 2.0])
def test_bad_delta(bad):
    with pytest.raises(ValueError, match="delta"):
        acc.gaussian_constant(1.0, bad)
