r"""Semi-private UMPU test for the odds ratio of a 2x2 table with public one-way margins.

Setting (Cho and Awan, Semi-DP paper, Sec. 5.3).  A 2x2 table ``(x11, x12, x21, x22)`` has
public one-way margins ``t = (t1., t2., t.1, t.2)`` (the invariant).  Given ``t``, ``x11``
determines the table and ``x11 | t ~ Hyper(t1., t2., t.1, w)`` (Fisher's noncentral
hypergeometric, :mod:`privinfer.distributions`) with ``w`` the cross-product odds ratio.
The curator releases ``U = x11 + N`` with ``N ~ F`` a canonical noise distribution (CND) of a
symmetric tradeoff function ``f`` (Tulap for ``(eps, delta)``; see
:mod:`privinfer.mechanisms.canonical_noise`); ``U`` is ``(D_t, A_{a(t)}, f)``-DP because ``x11``
moves by at most one between semi-adjacent tables (Example 7).

Theorem 37.  For ``H0: w <= 1`` vs ``H1: w > 1`` the test ``phi*(X) = F(x11 - m(t))`` with
``E_{H ~ Hyper(t, 1)} F(H - m(t)) = alpha`` is UMP among the ``f``-semi-DP tests with Neyman
structure, hence UMPU, and

.. math::  p(U) = E_{H \sim \mathrm{Hyper}(t_{1\cdot}, t_{2\cdot}, t_{\cdot 1}, 1)} F(H - U)
   \qquad \text{(eq. 6)}

is a p-value with ``P_U(p <= alpha | X) = phi*(X)``.  (``p`` is strictly decreasing in ``U``
and ``p(m(t)) = alpha``, so ``p <= alpha  <=>  U >= m(t)`` and
``P(U >= m | x11) = 1 - F(m - x11) = F(x11 - m)`` by symmetry of ``F``.)  Under ``w = 1``,
``P(p <= alpha) = E_H F(H - m(alpha)) = alpha`` for every alpha: ``p`` is exactly uniform.

Variants derived here (not in the paper)
----------------------------------------
* General null value ``w0``: replacing ``Hyper(t, 1)`` by ``Hyper(t, w0)`` gives the UMPU test
  of ``H0: w <= w0`` vs ``w > w0``: the proof of Thm 37 only uses that the likelihood ratio
  ``Hyper(t, w1)/Hyper(t, w0) ∝ (w1/w0)^x`` increases in ``x`` for ``w1 > w0`` (Lemma 47).
  ``p_{w0}(U) = E_{Hyper(t, w0)} F(H - U)`` is again exactly uniform under ``w = w0``.
* ``alternative="less"`` (``H0: w >= w0``): by ``F(-z) = 1 - F(z)``,
  ``E F(U - H) = 1 - p_{w0}(U)``; the same argument with ``x11 -> -x11`` makes it UMPU.
* ``alternative="two-sided"``: the equal-tailed p-value ``2 min(p, 1 - p)``; exact size alpha
  (it rejects iff one of the two one-sided UMPU tests at level alpha/2 rejects, disjoint
  events), but not claimed UMPU among two-sided tests.
* Confidence interval (:func:`semi_private_odds_ratio_interval`): ``p_{w0}(U)`` is increasing
  in ``w0`` (``Hyper(t, w0)`` is stochastically increasing, ``F`` increasing), so inverting the
  two one-sided tests at level alpha/2 each gives
  ``{w0 : alpha/2 < p_{w0}(U) < 1 - alpha/2} = (w_L, w_U)``, found by root finding in
  ``log w0``.  Coverage is exactly ``1 - alpha`` for every true ``w`` because each
  ``p_w(U)`` is exactly uniform.  Limits: as ``w0 -> 0`` (``inf``) the law concentrates at
  ``L`` (``U_max``), so ``p -> F(L - U)`` (``F(U_max - U)``); if ``F(L - U) >= alpha/2`` no
  ``w0`` is rejected from below and ``w_L = 0``; if ``F(U_max - U) <= alpha/2`` every ``w0``
  is rejected and the (empty) set is returned as ``(inf, inf)`` (symmetrically ``(0, 0)``).

Naive comparison (:func:`naive_group_privacy_test`).  Ignoring the invariant, a mechanism
that is ``(eps', delta')``-DP under replace-one adjacency (``x11`` has sensitivity 1) is
``(D_t, A_{a(t)}, f_{eps',delta'}^{o a(t)})``-DP by Prop. 15 (group privacy); matching
``(eps, delta)`` needs ``eps' = eps / a(t)`` and, by the classical group-privacy bound
``(k eps', k e^{(k-1) eps'} delta')`` (Dwork and Roth 2014), ``delta' = delta e^{-(a-1) eps'} / a``.
Its test is the same eq. (6) with the Tulap CND of ``(eps', delta')``.

The semi-adjacent parameter defaults to ``a(t) = 3``: Theorem 16 bounds ``a(t) <= p + 1 = 3``
for two binary features and Example 5 shows the bound is attained.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import numpy as np
from scipy import optimize

from .._validation import check_epsilon, check_finite_array
from ..distributions import FisherNoncentralHypergeometric, check_margins, log_base_weights
from ..mechanisms.canonical_noise import CanonicalNoise, GaussianCanonicalNoise, canonical_noise
from ..mechanisms.tulap import Tulap

__all__ = [
    "OddsRatioTestResult",
    "check_alpha",
    "resolve_noise",
    "release_statistic",
    "semi_private_p_value",
    "p_value_function",
    "umpu_threshold",
    "umpu_test_function",
    "semi_private_odds_ratio_test",
    "semi_private_odds_ratio_interval",
    "naive_group_privacy_noise",
    "naive_group_privacy_test",
    "power",
]

_ALTERNATIVES = ("greater", "less", "two-sided")


def check_alpha(alpha) -> float:
    """Significance level strictly inside (0, 1)."""
    if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real):
        raise TypeError("alpha must be a real number")
    a = float(alpha)
    if not (0.0 < a < 1.0):
        raise ValueError(f"alpha must lie strictly between 0 and 1 (got {a!r})")
    return a


def resolve_noise(noise=None, *, epsilon=None, delta=0.0, mu=None):
    """The CND of the release: an explicit ``noise`` object or one built from the privacy level."""
    if noise is not None:
        if epsilon is not None or mu is not None:
            raise ValueError("give either noise or (epsilon, delta) / mu, not both")
        if not isinstance(noise, (Tulap, CanonicalNoise, GaussianCanonicalNoise)):
            raise TypeError("noise must be a Tulap, GaussianCanonicalNoise or CanonicalNoise")
        if isinstance(noise, Tulap) and noise.m != 0:
            raise ValueError("the noise distribution must be centred (Tulap m = 0)")
        return noise
    if epsilon is None and mu is None:
        raise ValueError("specify the release's noise: noise=..., epsilon=... (with delta) or mu=...")
    return canonical_noise(epsilon=epsilon, delta=delta, mu=mu)


def release_statistic(release, margins=None) -> float:
    """``U``: the released (privatized) ``x11``.

    Accepts the scalar ``U`` or a released table ``(y11, y12, y21, y22)`` from
    :class:`privinfer.mechanisms.SemiPrivateTwoByTwo`; a table must reproduce the margins.
    """
    arr = check_finite_array(release, "release")
    if arr.ndim == 0 or arr.shape == (1,):
        return float(arr.reshape(()))
    if arr.shape != (4,):
        raise ValueError(f"release must be a scalar (privatized x11) or a table of shape (4,), got {arr.shape}")
    if margins is not None:
        t = np.asarray(check_margins(margins), dtype=float)
        got = np.array([arr[0] + arr[1], arr[2] + arr[3], arr[0] + arr[2], arr[1] + arr[3]])
        if not np.allclose(got, t, rtol=0, atol=1e-6 * (1 + np.abs(t))):
            raise ValueError("the released table does not reproduce the given margins")
    return float(arr[0])


def _hyper_null(margins, odds_ratio):
    w = float(odds_ratio)
    if not (np.isfinite(w) and w > 0):
        raise ValueError("odds_ratio (the null value w0) must be a finite number > 0")
    return FisherNoncentralHypergeometric.from_margins(margins, odds_ratio=w)


def _p_right(u, support, logpmf, noise):
    """``E F(H - u)`` for scalar or array ``u`` (H with the given pmf)."""
    u = np.asarray(u, dtype=float)
    vals = noise.cdf(support[None, :] - u.reshape(-1, 1))
    return (vals @ np.exp(logpmf)).reshape(u.shape)


def semi_private_p_value(release, margins, noise, odds_ratio=1.0) -> float:
    """The p-value of eq. (6) for ``H0: w <= odds_ratio`` vs ``H1: w > odds_ratio``."""
    u = release_statistic(release, margins)
    h = _hyper_null(margins, odds_ratio)
    return float(np.clip(_p_right(u, h.support, h.logpmf(h.support), noise), 0.0, 1.0))


def p_value_function(margins, noise, odds_ratio=1.0):
    """``u -> E_{H ~ Hyper(t, w0)} F(H - u)``: eq. (6) as a vectorized function of the release ``U``."""
    h = _hyper_null(margins, odds_ratio)
    support, lp = h.support, h.logpmf(h.support)

    def p(u):
        u = check_finite_array(u, "release")
        return np.clip(_p_right(u, support, lp, noise), 0.0, 1.0)

    return p


def umpu_threshold(margins, alpha, noise, odds_ratio=1.0) -> float:
    """``m(t)`` with ``E_{H ~ Hyper(t, w0)} F(H - m) = alpha`` (size alpha; Thm 37)."""
    alpha = check_alpha(alpha)
    h = _hyper_null(margins, odds_ratio)
    lp = h.logpmf(h.support)

    def g(m):
        return float(_p_right(m, h.support, lp, noise)) - alpha

    lo, hi = float(h.lower), float(h.upper)
    step = 1.0
    while g(lo) <= 0:
        lo -= step
        step *= 2
    step = 1.0
    while g(hi) >= 0:
        hi += step
        step *= 2
    return float(optimize.brentq(g, lo, hi, xtol=1e-12, rtol=4 * np.finfo(float).eps))


def umpu_test_function(x11, margins, alpha, noise, odds_ratio=1.0):
    """``phi*(X) = F(x11 - m(t))``: probability that the UMPU test rejects given ``x11`` (Thm 37)."""
    m = umpu_threshold(margins, alpha, noise, odds_ratio)
    return noise.cdf(np.asarray(x11, dtype=float) - m)


@dataclass(frozen=True)
class OddsRatioTestResult:
    """Result of :func:`semi_private_odds_ratio_test`.

    ``p_value`` (eq. 6 or its variant), ``reject = p_value <= alpha``, the ``alternative``,
    the null value ``odds_ratio`` and the released statistic ``statistic`` (``U``).
    """

    p_value: float
    reject: bool
    alpha: float
    alternative: str
    odds_ratio: float
    statistic: float


def semi_private_odds_ratio_test(
    release,
    margins,
    alpha=0.05,
    *,
    noise=None,
    epsilon=None,
    delta=0.0,
    mu=None,
    alternative="greater",
    odds_ratio=1.0,
) -> OddsRatioTestResult:
    r"""Semi-private UMPU test of the odds ratio (Cho and Awan, Thm 37, eq. 6).

    Parameters
    ----------
    release
        ``U = x11 + N`` (scalar) or the released table of :class:`SemiPrivateTwoByTwo`.
    margins
        public one-way margins ``(t1., t2., t.1, t.2)``: non-negative integers with equal totals.
    alpha
        level in (0, 1); ``reject = p_value <= alpha``.
    noise, epsilon, delta, mu
        the CND ``F`` the release used: a noise object, or ``epsilon`` (+ ``delta``) for Tulap,
        or ``mu`` for the Gaussian CND.
    alternative
        ``"greater"`` (Thm 37: ``H0: w <= w0``), ``"less"`` (``H0: w >= w0``, p = 1 - p_greater)
        or ``"two-sided"`` (equal-tailed ``2 min(p, 1 - p)``); see the module docstring.
    odds_ratio
        null value ``w0`` (default 1, the paper's test).

    Returns
    -------
    OddsRatioTestResult
    """
    alpha = check_alpha(alpha)
    if alternative not in _ALTERNATIVES:
        raise ValueError(f"alternative must be one of {_ALTERNATIVES}")
    noise = resolve_noise(noise, epsilon=epsilon, delta=delta, mu=mu)
    u = release_statistic(release, margins)
    p = semi_private_p_value(u, margins, noise, odds_ratio)
    if alternative == "less":
        p = 1.0 - p
    elif alternative == "two-sided":
        p = min(1.0, 2.0 * min(p, 1.0 - p))
    return OddsRatioTestResult(float(p), bool(p <= alpha), alpha, alternative, float(odds_ratio), u)


def semi_private_odds_ratio_interval(
    release, margins, alpha=0.05, *, noise=None, epsilon=None, delta=0.0, mu=None
) -> tuple[float, float]:
    """Equal-tailed ``1 - alpha`` confidence interval ``(w_L, w_U)`` for the odds ratio.

    Inverts the one-sided UMPU tests at level alpha/2 each (module docstring); exact coverage.
    Take ``np.log`` of the ends for the log odds ratio.
    """
    alpha = check_alpha(alpha)
    noise = resolve_noise(noise, epsilon=epsilon, delta=delta, mu=mu)
    u = release_statistic(release, margins)
    t1, t2, c1, _ = check_margins(margins)
    support, lc = log_base_weights(t1, t2, c1)
    if len(support) == 1:
        return (0.0, math.inf)  # x11 is fixed by the margins: no information about w

    def p_right(lw):
        lw_ = lc + support * lw
        lp = lw_ - np.logaddexp.reduce(lw_)
        return float(_p_right(u, support, lp, noise))

    p_lo_limit = float(noise.cdf(support[0] - u))  # w0 -> 0
    p_hi_limit = float(noise.cdf(support[-1] - u))  # w0 -> inf
    half = alpha / 2.0

    def root(level):
        a, b = -1.0, 1.0
        while p_right(a) >= level:
            a *= 2
        while p_right(b) <= level:
            b *= 2
        return float(math.exp(optimize.brentq(lambda s: p_right(s) - level, a, b, xtol=1e-10)))

    # lower end: sup{w0: p_right(w0) <= alpha/2}
    if p_lo_limit >= half:
        lower = 0.0
    elif p_hi_limit <= half:
        return (math.inf, math.inf)
    else:
        lower = root(half)
    # upper end: inf{w0: p_right(w0) >= 1 - alpha/2}
    if p_hi_limit <= 1.0 - half:
        upper = math.inf
    elif p_lo_limit >= 1.0 - half:
        return (0.0, 0.0)
    else:
        upper = root(1.0 - half)
    return (lower, upper)


def naive_group_privacy_noise(epsilon, delta=0.0, a_t: int = 3) -> Tulap:
    """Tulap CND of ``(eps / a, delta e^{-(a-1) eps/a} / a)``: group privacy to ``(eps, delta)``."""
    eps = check_epsilon(epsilon)
    if not isinstance(a_t, numbers.Integral) or isinstance(a_t, bool) or a_t < 1:
        raise ValueError("a_t must be a positive integer")
    e1 = eps / a_t
    d1 = float(delta) * math.exp(-(a_t - 1) * e1) / a_t
    return Tulap.from_privacy(e1, d1)


def naive_group_privacy_test(release, margins, alpha=0.05, *, epsilon, delta=0.0, a_t: int = 3, **kw):
    """Eq. (6) for a release made ``(eps/a(t), .)``-DP without using the invariant (Prop. 15)."""
    noise = naive_group_privacy_noise(epsilon, delta, a_t)
    return semi_private_odds_ratio_test(release, margins, alpha, noise=noise, **kw)


def power(margins, alpha, noise, odds_ratio, null_odds_ratio=1.0) -> float:
    """Exact power ``E_{x11 ~ Hyper(t, w)} phi*(x11)`` of the one-sided UMPU test at ``w``."""
    h = FisherNoncentralHypergeometric.from_margins(margins, odds_ratio=odds_ratio)
    phi = umpu_test_function(h.support, margins, alpha, noise, null_odds_ratio)
    return float(np.sum(h.pmf(h.support) * phi))
