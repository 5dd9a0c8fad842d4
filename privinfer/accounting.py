r"""Privacy accounting: (eps, delta)-DP, rho-zCDP, mu-GDP and their conversions.

Functions here are plain numpy/scipy (no PyMC).  Notation follows the papers:

* Gaussian constant (Subspace DP full paper, Lemma 13; Dwork and Roth 2014):
  :math:`c_{\epsilon,\delta} = \epsilon^{-1}\,(1 + \sqrt{1 + \ln(1/\delta)})`; the Gaussian
  mechanism with noise sd :math:`c_{\epsilon,\delta}\,\Delta_2` is (eps, delta)-DP.
* rho-zCDP -> (eps, delta) (Bun and Steinke 2016, Prop. 1.3):
  :math:`\epsilon = \rho + 2\sqrt{\rho \ln(1/\delta)}`.  This is the conversion the Census
  Bureau used to advertise the 2020 release (Semi-DP paper, Sec. 7).
* (eps, 0)-DP -> rho-zCDP: :math:`\rho = \epsilon^2/2` (Bun and Steinke 2016, Prop. 1.4).
* Group privacy for zCDP: a rho-zCDP mechanism is :math:`k^2 \rho`-zCDP for groups of size
  k (Bun and Steinke 2016, Prop. 1.9).  Under Semi-DP the group size is the semi-adjacent
  parameter :math:`a(t)` (Semi-DP paper, Sec. 3-4).
* mu-GDP (Dong, Roth and Su 2022): tradeoff :math:`G_\mu`, and
  :math:`\delta(\epsilon) = \Phi(-\epsilon/\mu + \mu/2) - e^{\epsilon}\Phi(-\epsilon/\mu - \mu/2)`.
* Linear Gaussian mechanism :math:`y = Bx + N(0, \Sigma)` (Common Mechanism paper, Def. 2.3,
  Lemma 2.4): privacy cost matrix :math:`B^T\Sigma^{-1}B`; with :math:`c` its largest diagonal
  entry (the worst single-record change for unit-vector neighbours),
  :math:`\delta(\epsilon) = \Phi(\sqrt c/2 - \epsilon/\sqrt c) - e^\epsilon\Phi(-\sqrt c/2 - \epsilon/\sqrt c)`,
  which is the mu-GDP curve with :math:`\mu = \sqrt c`, and rho-zCDP with :math:`\rho = c/2`.
"""

from __future__ import annotations

import numpy as np
from scipy import optimize, special

from ._validation import check_delta, check_epsilon, check_positive

__all__ = [
    "gaussian_constant",
    "gaussian_sigma",
    "zcdp_to_approx_dp",
    "zcdp_to_approx_dp_tight",
    "pure_dp_to_zcdp",
    "gaussian_zcdp",
    "zcdp_group",
    "gdp_delta",
    "gdp_epsilon",
    "gdp_from_zcdp",
    "cost_matrix_mu",
    "cost_matrix_rho",
    "analytic_gaussian_delta",
    "analytic_gaussian_epsilon",
]


def gaussian_constant(epsilon: float, delta: float) -> float:
    r"""Lemma 13 (Subspace DP, full paper): :math:`c = (1 + \sqrt{1 + \ln(1/\delta)})/\epsilon`."""
    eps = check_epsilon(epsilon)
    d = check_delta(delta)
    return (1.0 + np.sqrt(1.0 + np.log(1.0 / d))) / eps


def gaussian_sigma(epsilon: float, delta: float, sensitivity: float) -> float:
    r"""Noise sd of the classic Gaussian mechanism: :math:`c_{\epsilon,\delta}\,\Delta_2`."""
    return gaussian_constant(epsilon, delta) * check_positive(sensitivity, "sensitivity")


def zcdp_to_approx_dp(rho: float, delta: float) -> float:
    r"""Bun-Steinke (2016, Prop. 1.3): rho-zCDP implies (eps, delta)-DP with
    :math:`\epsilon = \rho + 2\sqrt{\rho\ln(1/\delta)}`."""
    r = check_positive(rho, "rho")
    d = check_delta(delta)
    return r + 2.0 * np.sqrt(r * np.log(1.0 / d))


def zcdp_to_approx_dp_tight(rho: float, delta: float) -> float:
    r"""Tighter conversion (Canonne, Kamath and Steinke 2020, Prop. 12):

    .. math:: \epsilon = \inf_{\alpha > 1} \rho\alpha + \frac{\ln(1/(\alpha\delta)) +
              (\alpha-1)\ln(1-1/\alpha)}{\alpha - 1}.
    """
    r = check_positive(rho, "rho")
    d = check_delta(delta)

    def f(log_am1):
        a = 1.0 + np.exp(log_am1)
        return r * a + (np.log(1.0 / (a * d)) + (a - 1.0) * np.log1p(-1.0 / a)) / (a - 1.0)

    res = optimize.minimize_scalar(f, bounds=(-20.0, 20.0), method="bounded", options={"xatol": 1e-10})
    return float(max(0.0, min(res.fun, zcdp_to_approx_dp(r, d))))


def pure_dp_to_zcdp(epsilon: float) -> float:
    r"""(eps, 0)-DP implies :math:`(\epsilon^2/2)`-zCDP (Bun-Steinke 2016, Prop. 1.4)."""
    eps = check_epsilon(epsilon)
    return 0.5 * eps * eps


def gaussian_zcdp(sigma: float, sensitivity: float) -> float:
    r"""Gaussian noise sd sigma on an l2-sensitivity Delta query is
    :math:`\Delta^2/(2\sigma^2)`-zCDP."""
    s = check_positive(sigma, "sigma")
    D = check_positive(sensitivity, "sensitivity")
    return D * D / (2.0 * s * s)


def zcdp_group(rho: float, k: float) -> float:
    r"""Group privacy for zCDP: :math:`k^2\rho` for groups of size k (Bun-Steinke, Prop. 1.9).

    Under Semi-DP, ``k`` is the semi-adjacent parameter a(t): e.g. the 2020 Census budget
    rho = 2.56 becomes 10.24 when a(t) = 2.
    """
    r = check_positive(rho, "rho")
    kk = check_positive(k, "group size")
    return kk * kk * r


def gdp_delta(mu: float, epsilon) -> np.ndarray | float:
    r"""mu-GDP -> delta(eps): :math:`\Phi(-\epsilon/\mu+\mu/2) - e^\epsilon\Phi(-\epsilon/\mu-\mu/2)`.

    Evaluated in log space so large ``eps`` does not overflow.
    """
    m = check_positive(mu, "mu")
    eps = np.asarray(epsilon, dtype=float)
    if np.any(~np.isfinite(eps)) or np.any(eps < 0):
        raise ValueError("epsilon must be finite and >= 0")
    a = special.log_ndtr(-eps / m + m / 2.0)
    b = eps + special.log_ndtr(-eps / m - m / 2.0)
    out = np.exp(a) * -np.expm1(np.minimum(b - a, 0.0))
    return float(out) if out.ndim == 0 else out


def gdp_epsilon(mu: float, delta: float) -> float:
    """Smallest eps with :func:`gdp_delta` (mu, eps) <= delta (root of a decreasing curve)."""
    m = check_positive(mu, "mu")
    d = check_delta(delta)
    if gdp_delta(m, 0.0) <= d:
        return 0.0
    hi = 1.0
    while gdp_delta(m, hi) > d:
        hi *= 2.0
    return float(optimize.brentq(lambda e: gdp_delta(m, e) - d, 0.0, hi, xtol=1e-12, rtol=1e-12))


def gdp_from_zcdp(rho: float) -> float:
    r"""A Gaussian mechanism that is rho-zCDP is mu-GDP with :math:`\mu = \sqrt{2\rho}`."""
    return float(np.sqrt(2.0 * check_positive(rho, "rho")))


def _cost_c(cost) -> float:
    K = np.asarray(cost, dtype=float)
    if K.ndim != 2 or K.shape[0] != K.shape[1]:
        raise ValueError(f"privacy cost matrix must be square, got shape {K.shape}")
    if not np.all(np.isfinite(K)):
        raise ValueError("privacy cost matrix contains non-finite entries")
    c = float(np.max(np.diag(K)))
    if c <= 0:
        raise ValueError("privacy cost matrix has no positive diagonal entry (the mechanism releases nothing)")
    return c


def cost_matrix_mu(cost) -> float:
    r""":math:`\mu = \sqrt{\max_i K_{ii}}` for privacy cost matrix K (Common Mechanism, Lemma 2.4)."""
    return float(np.sqrt(_cost_c(cost)))


def cost_matrix_rho(cost) -> float:
    r""":math:`\rho = \max_i K_{ii}/2` (Common Mechanism, Sec. 2)."""
    return 0.5 * _cost_c(cost)


def analytic_gaussian_delta(cost, epsilon) -> np.ndarray | float:
    r"""Lemma 2.4 of the Common Mechanism paper (Balle-Wang analytic Gaussian):
    :math:`\delta(\epsilon) = \Phi(\sqrt c/2 - \epsilon/\sqrt c) - e^\epsilon\Phi(-\sqrt c/2 - \epsilon/\sqrt c)`
    with :math:`c = \max_i K_{ii}` of the privacy cost matrix ``cost``."""
    return gdp_delta(cost_matrix_mu(cost), epsilon)


def analytic_gaussian_epsilon(cost, delta: float) -> float:
    """Inverse of :func:`analytic_gaussian_delta` in eps."""
    return gdp_epsilon(cost_matrix_mu(cost), delta)


