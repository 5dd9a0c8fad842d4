r"""Canonical noise distributions (CND): Tulap, the Lemma 36 construction, Gaussian.

A *canonical noise distribution* for a symmetric nontrivial tradeoff function ``f``
(Awan and Vadhan 2023, Def. 3.1; Cho and Awan, Semi-DP paper, Def. 35) is a continuous
cdf ``F`` such that, with ``N ~ F`` and a statistic of sensitivity ``Delta``,
``T(X) + Delta N`` is ``f``-DP and the bound is tight:
``T(F(.), F(. - 1))(alpha) = F(F^{-1}(1 - alpha) - 1) = f(alpha)`` (the most powerful test of
``N`` against ``N + 1`` at level alpha rejects for large values), and ``F(x) = 1 - F(-x)``.

This module provides

* :class:`TradeoffFunction` with :func:`eps_delta_tradeoff` (``f_{eps,delta}``) and
  :func:`gaussian_tradeoff` (``G_mu``);
* :class:`Tulap` -- the Tulap distribution ``Tulap(m, b, q)`` of Awan and Slavkovic (2018,
  Def. 4.1), the CND of ``f_{eps,delta}`` with ``b = exp(-eps)``,
  ``q = 2 delta b / (1 - b + 2 delta b)`` (Awan and Vadhan 2023, Sec. 4; unique CND for
  ``f_{eps,delta}``, Awan and Dong 2022);
* :class:`CanonicalNoise` -- the generic construction of Lemma 36 (Awan and Vadhan 2023,
  Thm 3.9) for any symmetric nontrivial ``f``;
* :class:`GaussianCanonicalNoise` -- ``N(0, 1/mu^2)``, a CND for ``mu``-GDP;
* mechanisms following the project protocol: :class:`TulapMechanism`,
  :class:`GaussianCanonicalMechanism`, :class:`CanonicalNoiseMechanism` (classic DP,
  ``invariant = None``) and :class:`SemiPrivateTwoByTwo` (Semi-DP release of a 2x2 table that
  keeps its one-way margins exactly; Semi-DP paper Sec. 5.3, Thm 37).

Derivation notes (the paper's text extraction lost several ``1 -`` signs)
------------------------------------------------------------------------
Lemma 36 as printed reads ``F(x) = f(F(x + 1))`` for ``x < -1/2``.  Since ``f`` is decreasing,
that recursion would make ``F`` non-monotone; the construction of Awan and Vadhan (2023,
Thm 3.9) is

.. math::

    F_f(x) = \begin{cases} f(1 - F_f(x + 1)) & x < -1/2,\\
             c(1/2 - x) + (1 - c)(x + 1/2) & -1/2 \le x \le 1/2,\\
             1 - f(F_f(x - 1)) & x > 1/2, \end{cases}

and continuity at ``x = -1/2`` (``F(-1/2) = c``, ``F(1/2) = 1 - c``) forces
``c = f(1 - F(1/2)) = f(c)``: ``c`` is the fixed point of ``f`` in ``[0, 1/2)``.  Checks:
for ``f_{eps,0}`` the fixed point ``1 - e^eps c = c`` gives ``c = b/(1+b)``, the Tulap cdf at
``-1/2``; for ``f_{eps,delta}`` it gives ``c = (1-delta) b/(1+b)``, which equals the truncated
Tulap value ``(b/(1+b) - q/2)/(1-q)`` for the ``q`` above; for ``G_mu``,
``c = Phi(-mu/2)``.  Property 3 of Def. 35 likewise reads
``T(F(.), F(. - 1))(alpha) = F(F^{-1}(1 - alpha) - 1)``.  The tests check all of these
numerically (construction = Tulap; tradeoff of the construction = f).

Density of the construction: for ``x < -1/2`` with ``u = F(x + 1)``,
``F'(x) = |f'(1 - u)| F'(x + 1)``; on the centre ``F' = 1 - 2c``.  So with
``k = ceil(-1/2 - x)`` steps, ``log F'(x) = log(1 - 2c) + sum_j log|f'(1 - u_j)|`` over the
intermediate values ``u_j = F(x + j)``, ``j = 1..k``; for ``x > 1/2`` use ``F'(x) = F'(-x)``.
Inverse: ``F^{-1}(v) = F^{-1}(1 - f(v)) - 1`` for ``v < c`` (``f`` is an involution on the
part of ``[0,1]`` where it is strictly decreasing, because it is symmetric), the centre is
linear, and ``F^{-1}(v) = -F^{-1}(1 - v)`` for ``v > 1 - c``.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np
from scipy import special

from .._backend import as_array, namespace, where
from .._rng import as_generator
from .._validation import check_epsilon, check_finite_array, check_positive
from .base import AdditiveMechanism, Guarantee, Mechanism

__all__ = [
    "TradeoffFunction",
    "eps_delta_tradeoff",
    "gaussian_tradeoff",
    "tulap_q",
    "Tulap",
    "CanonicalNoise",
    "GaussianCanonicalNoise",
    "canonical_noise",
    "TulapMechanism",
    "GaussianCanonicalMechanism",
    "CanonicalNoiseMechanism",
    "SemiPrivateTwoByTwo",
]


def _check_delta0(delta, name: str = "delta") -> float:
    """delta in [0, 1) (0 allowed: pure DP)."""
    if not isinstance(delta, numbers.Real) or isinstance(delta, bool):
        raise TypeError(f"{name} must be a real number, not {type(delta).__name__}")
    d = float(delta)
    if not (0.0 <= d < 1.0):
        raise ValueError(f"{name} must lie in [0, 1) (got {d!r})")
    return d


# --------------------------------------------------------------------------------------
# Tradeoff functions
# --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TradeoffFunction:
    r"""A symmetric nontrivial tradeoff function ``f`` (Dong, Roth and Su 2022, Def. 2.2).

    ``f(alpha)`` is the smallest type II error of a level-alpha test between the outputs on
    two neighbouring datasets.  Symmetric means ``f = f^{-1}``; nontrivial means
    ``f(alpha) < 1 - alpha`` somewhere.

    Attributes
    ----------
    func:
        vectorized ``alpha -> f(alpha)`` on ``[0, 1]``.
    derivative:
        vectorized ``alpha -> f'(alpha)`` (a.e.; used for the CND density).
    fixed_point:
        ``c in [0, 1/2)`` with ``f(c) = c``.
    name, parameters:
        description of the privacy definition, e.g. ``"(eps, delta)-DP"``.
    """

    func: Callable[[np.ndarray], np.ndarray]
    derivative: Callable[[np.ndarray], np.ndarray]
    fixed_point: float
    name: str
    parameters: Mapping[str, Any] = field(default_factory=dict)

    def __call__(self, alpha):
        return self.func(np.asarray(alpha, dtype=float))


def eps_delta_tradeoff(epsilon, delta=0.0) -> TradeoffFunction:
    r"""``f_{eps,delta}(alpha) = max(0, 1 - delta - e^eps alpha, e^{-eps}(1 - delta - alpha))``.

    (Dong, Roth and Su 2022, Prop. 2.5.)  Fixed point: on the steep branch
    ``1 - delta - e^eps c = c`` gives ``c = (1 - delta)/(1 + e^eps)``.
    """
    eps = check_epsilon(epsilon)
    delta = _check_delta0(delta)
    e = math.exp(eps)

    def func(a):
        a = np.asarray(a, dtype=float)
        return np.maximum(0.0, np.maximum(1.0 - delta - e * a, (1.0 - delta - a) / e))

    def derivative(a):
        a = np.asarray(a, dtype=float)
        steep = 1.0 - delta - e * a
        shallow = (1.0 - delta - a) / e
        return np.where((steep >= shallow) & (steep > 0), -e, np.where(shallow > 0, -1.0 / e, 0.0))

    return TradeoffFunction(
        func, derivative, (1.0 - delta) / (1.0 + e), "(eps, delta)-DP", {"epsilon": eps, "delta": delta}
    )


def gaussian_tradeoff(mu) -> TradeoffFunction:
    r"""``G_mu(alpha) = Phi(Phi^{-1}(1 - alpha) - mu)`` (Dong, Roth and Su 2022, Def. 2.7).

    ``G_mu'(alpha) = -phi(z - mu)/phi(z) = -exp(mu z - mu^2/2)`` with ``z = Phi^{-1}(1-alpha)``;
    fixed point ``c = Phi(-mu/2)`` (``z = mu/2``).
    """
    mu = check_positive(mu, "mu")

    def func(a):
        a = np.asarray(a, dtype=float)
        return special.ndtr(-special.ndtri(a) - mu)

    def derivative(a):
        z = -special.ndtri(np.asarray(a, dtype=float))
        return -np.exp(mu * z - 0.5 * mu * mu)

    return TradeoffFunction(func, derivative, float(special.ndtr(-mu / 2)), "mu-GDP", {"mu": mu})


# --------------------------------------------------------------------------------------
# Tulap
# --------------------------------------------------------------------------------------
def tulap_q(epsilon, delta=0.0) -> float:
    r"""Truncation ``q = 2 delta b / (1 - b + 2 delta b)`` with ``b = e^{-eps}``.

    (Awan and Slavkovic 2018, Thm 4.3; Awan and Vadhan 2023, Sec. 4.)
    """
    eps = check_epsilon(epsilon)
    delta = _check_delta0(delta)
    b = math.exp(-eps)
    return 2.0 * delta * b / (1.0 - b + 2.0 * delta * b)


def _tulap0_cdf(t, b):
    r"""cdf of the untruncated ``Tulap(0, b, 0)`` at ``t``.

    ``N = Z + U`` with ``Z = G1 - G2`` discrete Laplace, ``P(Z = k) = (1-b)/(1+b) b^|k|``,
    ``U ~ Unif(-1/2, 1/2)``.  For ``t <= 0`` with ``k = round(t)`` (``t`` in
    ``[k - 1/2, k + 1/2]``): ``P(Z <= k - 1) = b^{1-k}/(1+b)`` and
    ``F(t) = b^{-k}/(1+b) * (b + (1-b)(t - k + 1/2))``; for ``t > 0``, ``F(t) = 1 - F(-t)``
    (Awan and Slavkovic 2018, Def. 4.1).
    """
    t = np.asarray(t, dtype=float)
    s = -np.abs(t)
    k = np.floor(s + 0.5)  # nearest integer (ties -> upper); continuous so ties harmless
    with np.errstate(over="ignore", under="ignore"):
        low = np.exp(-k * math.log(b)) / (1.0 + b) * (b + (1.0 - b) * (s - k + 0.5))
    return np.where(t <= 0, low, 1.0 - low)


def _tulap0_ppf(u, b):
    r"""Inverse of :func:`_tulap0_cdf` (closed form).

    For ``u <= 1/2``: ``F(k - 1/2) = b^{1-k}/(1+b)`` for ``k <= 0``, so the integer cell is
    ``k = 1 - j`` with ``j = ceil(log(u (1+b)) / log b)`` (``k = 0`` once ``u >= b/(1+b)``)
    and ``t = k - 1/2 + (u (1+b) b^k - b)/(1-b)``.  For ``u > 1/2``, ``t = -F^{-1}(1 - u)``.
    """
    u = np.asarray(u, dtype=float)
    v = np.minimum(u, 1.0 - u)
    lb = math.log(b)
    with np.errstate(divide="ignore", invalid="ignore"):
        j = np.ceil(np.log(v * (1.0 + b)) / lb - 1e-12)
    j = np.where(v >= b / (1.0 + b), 1.0, np.maximum(j, 1.0))
    k = 1.0 - j
    # guard the floating-point cell choice: F(k - 1/2) <= v must hold
    k = np.where(np.exp((1.0 - k) * lb) / (1.0 + b) > v, k - 1.0, k)
    with np.errstate(over="ignore", invalid="ignore"):
        t = k - 0.5 + (v * (1.0 + b) * np.exp(k * lb) - b) / (1.0 - b)
    t = np.where(v <= 0, -np.inf, t)
    return np.where(u <= 0.5, t, -t)


class Tulap:
    r"""The Tulap distribution ``Tulap(m, b, q)`` (Awan and Slavkovic 2018, Def. 4.1).

    Untruncated (``q = 0``): ``N = m + G1 - G2 + U`` with ``G1, G2`` iid geometric,
    ``P(G = k) = (1 - b) b^k`` (``k >= 0``), and ``U ~ Unif(-1/2, 1/2)``.  Its density is the
    discrete Laplace pmf spread over unit cells, ``p(x) = (1-b)/(1+b) b^{|round(x - m)|}``,
    and its cdf is the closed form of :func:`_tulap0_cdf`.  For ``q in (0, 1)`` the law is
    that of ``Tulap(m, b, 0)`` conditioned on ``[F0^{-1}(q/2), F0^{-1}(1 - q/2)]`` (the middle
    ``1 - q`` of its mass): cdf ``(F0(x) - q/2)/(1 - q)`` there, density ``p(x)/(1 - q)``.

    ``Tulap(0, e^{-eps}, 2 delta b/(1 - b + 2 delta b))`` is the canonical noise distribution
    of ``f_{eps,delta}`` (:meth:`from_privacy`).  Sampling is exact: geometric differences plus
    a uniform, with truncation handled by rejection (acceptance probability ``1 - q``).

    Parameters
    ----------
    m: location (median).  b: in (0, 1).  q: truncation mass in [0, 1).
    """

    def __init__(self, m=0.0, b=0.5, q=0.0):
        self.m = float(check_finite_array(m, "m", ndim=0))
        b = float(check_finite_array(b, "b", ndim=0))
        if not 0.0 < b < 1.0:
            raise ValueError(f"Tulap b must lie strictly between 0 and 1 (got {b!r})")
        q = float(check_finite_array(q, "q", ndim=0))
        if not 0.0 <= q < 1.0:
            raise ValueError(f"Tulap q must lie in [0, 1) (got {q!r})")
        self.b, self.q = b, q
        if q > 0:
            self.lower = self.m + float(_tulap0_ppf(q / 2.0, b))
            self.upper = self.m + float(_tulap0_ppf(1.0 - q / 2.0, b))
        else:
            self.lower, self.upper = -np.inf, np.inf

    @classmethod
    def from_privacy(cls, epsilon, delta=0.0, m=0.0) -> "Tulap":
        """The CND of ``f_{eps,delta}``: ``b = e^{-eps}``, ``q = 2 delta b/(1 - b + 2 delta b)``."""
        return cls(m, math.exp(-check_epsilon(epsilon)), tulap_q(epsilon, delta))

    @property
    def epsilon(self) -> float:
        return -math.log(self.b)

    @property
    def delta(self) -> float:
        """Inverse of ``q = 2 delta b/(1 - b + 2 delta b)``: ``delta = q (1-b) / (2 b (1-q))``."""
        return self.q * (1.0 - self.b) / (2.0 * self.b * (1.0 - self.q))

    def __repr__(self) -> str:  # pragma: no cover - cosmetic
        return f"Tulap(m={self.m:g}, b={self.b:g}, q={self.q:g})"

    # -- distribution functions -----------------------------------------------------------
    def cdf(self, x):
        """Closed-form cdf (see class docstring)."""
        f0 = _tulap0_cdf(np.asarray(x, dtype=float) - self.m, self.b)
        if self.q == 0:
            return f0
        return np.clip((f0 - self.q / 2.0) / (1.0 - self.q), 0.0, 1.0)

    def sf(self, x):
        """``1 - cdf(x)`` computed by symmetry about ``m`` (accurate in the upper tail)."""
        return self.cdf(2.0 * self.m - np.asarray(x, dtype=float))

    def ppf(self, u):
        """Inverse cdf: ``F0^{-1}(q/2 + (1 - q) u)`` (closed form)."""
        u = np.asarray(u, dtype=float)
        return self.m + _tulap0_ppf(self.q / 2.0 + (1.0 - self.q) * u, self.b)

    def logpdf(self, x):
        """``log((1-b)/(1+b)) + |round(x - m)| log b - log(1 - q)`` on the support, else -inf."""
        return self.logp(np.asarray(x, dtype=float))

    def pdf(self, x):
        return np.exp(self.logpdf(x))

    def logp(self, x):
        """Log density for NumPy arrays or PyTensor tensors (exact, constants included)."""
        xp = namespace(x)
        x = as_array(x, xp)
        k = xp.floor(xp.abs(x - self.m) + 0.5)  # |round(x - m)|, symmetric rounding
        val = math.log((1.0 - self.b) / (1.0 + self.b)) - math.log1p(-self.q) + k * math.log(self.b)
        if self.q > 0:
            inside = (x >= self.lower) & (x <= self.upper)
            val = where(inside, val, -np.inf, xp)
        return val

    def sample(self, size=(), rng=None) -> np.ndarray:
        """Exact draws: ``m + G1 - G2 + U``; rejection outside ``[lower, upper]`` when ``q > 0``."""
        rng = as_generator(rng)
        size = (size,) if isinstance(size, numbers.Integral) else tuple(size)
        total = int(np.prod(size, dtype=np.int64))
        out = np.empty(total)
        filled = 0
        while filled < total:
            need = total - filled
            batch = need if self.q == 0 else int(need / (1.0 - self.q) * 1.1) + 8
            g1 = rng.geometric(1.0 - self.b, size=batch) - 1
            g2 = rng.geometric(1.0 - self.b, size=batch) - 1
            u = rng.uniform(-0.5, 0.5, size=batch)
            z = self.m + (g1 - g2) + u
            if self.q > 0:
                z = z[(z >= self.lower) & (z <= self.upper)]
            take = min(need, z.size)
            out[filled : filled + take] = z[:take]
            filled += take
        return out.reshape(size)


# --------------------------------------------------------------------------------------
# Generic canonical noise (Lemma 36) and Gaussian
# --------------------------------------------------------------------------------------
class CanonicalNoise:
    r"""The canonical noise distribution ``F_f`` of Lemma 36 (Awan and Vadhan 2023, Thm 3.9).

    See the module docstring for the recursion, its density and inverse.  Works for any
    :class:`TradeoffFunction`; sampling is by inverse transform.  ``logp`` is NumPy only (the
    number of recursion steps depends on the value); use :class:`Tulap` or
    :class:`GaussianCanonicalNoise` inside PyTensor graphs.

    For ``f_{eps,delta}`` this *is* ``Tulap(0, e^{-eps}, q)``; for ``G_mu`` it is a CND that
    differs from ``N(0, 1/mu^2)`` (CNDs of ``G_mu`` are not unique; both satisfy Def. 35).
    """

    def __init__(self, tradeoff: TradeoffFunction, max_steps: int = 100_000):
        if not isinstance(tradeoff, TradeoffFunction):
            raise TypeError("tradeoff must be a TradeoffFunction (see eps_delta_tradeoff, gaussian_tradeoff)")
        c = float(tradeoff.fixed_point)
        if not 0.0 <= c < 0.5:
            raise ValueError("the tradeoff function's fixed point must lie in [0, 1/2) (nontrivial f)")
        self.tradeoff = tradeoff
        self.c = c
        self.max_steps = int(max_steps)
        self.m = 0.0

    def __repr__(self) -> str:  # pragma: no cover - cosmetic
        return f"CanonicalNoise({self.tradeoff.name}, {dict(self.tradeoff.parameters)})"

    def _left(self, x):
        """F and log F' for x <= 0 (array), by the recursion F(x) = f(1 - F(x + 1))."""
        f, df, c = self.tradeoff.func, self.tradeoff.derivative, self.c
        x = np.asarray(x, dtype=float)
        k = np.maximum(np.ceil(-0.5 - x), 0.0)  # steps to reach [-1/2, 1/2)
        if np.any(k > self.max_steps):
            raise ValueError("value too far in the tail for the Lemma 36 recursion (max_steps)")
        u = c + (1.0 - 2.0 * c) * (x + k + 0.5)
        logd = np.full(x.shape, math.log1p(-2.0 * c))
        kmax = int(k.max()) if k.size else 0
        for step in range(kmax):
            act = k > step
            if not np.any(act):
                break
            with np.errstate(divide="ignore"):
                logd = np.where(act, logd + np.log(np.abs(df(1.0 - u))), logd)
            u = np.where(act, f(1.0 - u), u)
        return u, logd

    def cdf(self, x):
        x = np.asarray(x, dtype=float)
        u, _ = self._left(-np.abs(x))
        return np.where(x <= 0, u, 1.0 - u)

    def sf(self, x):
        return self.cdf(-np.asarray(x, dtype=float))

    def logpdf(self, x):
        x = np.asarray(x, dtype=float)
        u, logd = self._left(-np.abs(x))
        return np.where(u > 0, logd, -np.inf)

    def pdf(self, x):
        return np.exp(self.logpdf(x))

    def logp(self, x):
        if namespace(x) is not np:
            raise TypeError(
                "CanonicalNoise.logp is NumPy only; use Tulap or GaussianCanonicalNoise in PyTensor graphs"
            )
        return self.logpdf(x)

    def ppf(self, v):
        """Inverse cdf by ``F^{-1}(v) = F^{-1}(1 - f(v)) - 1`` for ``v < c`` (module docstring)."""
        f, c = self.tradeoff.func, self.c
        v = np.asarray(v, dtype=float)
        w = np.minimum(v, 1.0 - v)
        shift = np.zeros(w.shape)
        for _ in range(self.max_steps):
            act = (w < c) & (w > 0)
            if not np.any(act):
                break
            w = np.where(act, 1.0 - f(w), w)
            shift = np.where(act, shift + 1.0, shift)
        t = (w - c) / (1.0 - 2.0 * c) - 0.5 - shift
        t = np.where(np.minimum(v, 1.0 - v) <= 0, -np.inf, t)
        return np.where(v <= 0.5, t, -t)

    def sample(self, size=(), rng=None) -> np.ndarray:
        rng = as_generator(rng)
        return self.ppf(rng.uniform(size=size))


class GaussianCanonicalNoise:
    r"""``N(0, 1/mu^2)``: a CND for ``mu``-GDP (Awan and Vadhan 2023; Semi-DP paper, after Def. 35).

    ``F(F^{-1}(1 - alpha) - 1) = Phi(Phi^{-1}(1 - alpha) - mu) = G_mu(alpha)``.
    """

    def __init__(self, mu):
        self.mu = check_positive(mu, "mu")
        self.scale = 1.0 / self.mu
        self.m = 0.0

    def __repr__(self) -> str:  # pragma: no cover - cosmetic
        return f"GaussianCanonicalNoise(mu={self.mu:g})"

    def cdf(self, x):
        return special.ndtr(np.asarray(x, dtype=float) * self.mu)

    def sf(self, x):
        return special.ndtr(-np.asarray(x, dtype=float) * self.mu)

    def ppf(self, u):
        return special.ndtri(np.asarray(u, dtype=float)) / self.mu

    def logp(self, x):
        xp = namespace(x)
        x = as_array(x, xp)
        return -0.5 * (x * self.mu) ** 2 + math.log(self.mu) - 0.5 * math.log(2 * math.pi)

    def logpdf(self, x):
        return self.logp(np.asarray(x, dtype=float))

    def pdf(self, x):
        return np.exp(self.logpdf(x))

    def sample(self, size=(), rng=None) -> np.ndarray:
        return as_generator(rng).normal(0.0, self.scale, size=size)


def canonical_noise(*, epsilon=None, delta=0.0, mu=None, tradeoff=None):
    """The CND used throughout: Tulap for (eps, delta), Gaussian for mu-GDP, Lemma 36 otherwise.

    Exactly one of ``epsilon``, ``mu``, ``tradeoff`` must be given.
    """
    given = [v is not None for v in (epsilon, mu, tradeoff)]
    if sum(given) != 1:
        raise ValueError("give exactly one of epsilon (with delta), mu, or tradeoff")
    if epsilon is not None:
        return Tulap.from_privacy(epsilon, delta)
    if mu is not None:
        return GaussianCanonicalNoise(mu)
    return CanonicalNoise(tradeoff)


def _noise_description(noise):
    if isinstance(noise, Tulap):
        return "(eps, delta)-DP", {"epsilon": noise.epsilon, "delta": noise.delta}
    if isinstance(noise, GaussianCanonicalNoise):
        return "mu-GDP", {"mu": noise.mu}
    if isinstance(noise, CanonicalNoise):
        return f"f-DP ({noise.tradeoff.name})", dict(noise.tradeoff.parameters)
    raise TypeError("noise must be a Tulap, GaussianCanonicalNoise or CanonicalNoise")


# --------------------------------------------------------------------------------------
# Mechanisms
# --------------------------------------------------------------------------------------
class _CNDMechanism(AdditiveMechanism):
    """``y = x + Delta N`` with iid CND coordinates ``N_i ~ F`` (classic f-DP, no invariant)."""

    logp_constant_dropped = ""

    def __init__(self, n, noise, sensitivity=1.0):
        if not isinstance(n, numbers.Integral) or isinstance(n, bool) or n < 1:
            raise ValueError("n must be a positive integer")
        self._n = int(n)
        self.noise = noise
        self.sensitivity = check_positive(sensitivity, "sensitivity")

    @property
    def n(self) -> int:
        return self._n

    @property
    def guarantee(self) -> Guarantee:
        definition, params = _noise_description(self.noise)
        return Guarantee(
            definition,
            {**params, "sensitivity": self.sensitivity},
            "neighbours change one coordinate by at most `sensitivity` (changes in k coordinates: "
            "compose the per-coordinate guarantee k times)",
            "Awan and Vadhan 2023, Def. 3.1 / Thm 3.9; Semi-DP paper Def. 35, Lemma 36",
        )

    def sample_noise(self, size=(), rng=None):
        size = (size,) if isinstance(size, numbers.Integral) else tuple(size)
        return self.sensitivity * self.noise.sample(size + (self._n,), rng=as_generator(rng))

    def noise_logp(self, e):
        """``sum_i [log p_F(e_i / Delta) - log Delta]`` (exact density)."""
        xp = namespace(e)
        e = as_array(e, xp)
        lp = self.noise.logp(e / self.sensitivity) - math.log(self.sensitivity)
        return xp.sum(lp, axis=-1)


class TulapMechanism(_CNDMechanism):
    r"""``y = x + Delta N``, ``N_i ~ Tulap(0, e^{-eps}, q)`` iid: (eps, delta)-DP, tight.

    The Tulap noise is the canonical noise distribution of ``f_{eps,delta}`` (Awan and Vadhan
    2023, Sec. 4; Awan and Slavkovic 2018, Thm 4.3), so for a one-coordinate change of at most
    ``Delta`` the tradeoff between neighbouring outputs is exactly ``f_{eps,delta}``.
    """

    def __init__(self, n, epsilon, delta=0.0, sensitivity=1.0):
        super().__init__(n, Tulap.from_privacy(epsilon, delta), sensitivity)


class GaussianCanonicalMechanism(_CNDMechanism):
    """``y = x + Delta N``, ``N_i ~ N(0, 1/mu^2)`` iid: ``mu``-GDP (CND of ``G_mu``)."""

    def __init__(self, n, mu, sensitivity=1.0):
        super().__init__(n, GaussianCanonicalNoise(mu), sensitivity)


class CanonicalNoiseMechanism(_CNDMechanism):
    """``y = x + Delta N`` with the Lemma 36 CND of any symmetric tradeoff ``f``: ``f``-DP.

    ``logp`` is NumPy only (see :class:`CanonicalNoise`).
    """

    def __init__(self, n, tradeoff: TradeoffFunction, sensitivity=1.0):
        super().__init__(n, CanonicalNoise(tradeoff), sensitivity)


#: direction of the sensitivity space of a 2x2 table with fixed one-way margins
#: (Semi-DP paper, Example 7): cells ordered (x11, x12, x21, x22).
TWO_BY_TWO_DIRECTION = np.array([1.0, -1.0, -1.0, 1.0])


class SemiPrivateTwoByTwo(Mechanism):
    r"""Semi-DP release of a 2x2 table that keeps its one-way margins exactly.

    ``y = x + N (1, -1, -1, 1)`` with ``N ~ F`` a CND of ``f`` (cells ordered
    ``(x11, x12, x21, x22)``).  The one-way margins ``t = (x11+x12, x21+x22, x11+x21, x12+x22)``
    are unchanged, and ``y11 = x11 + N`` is the statistic ``U`` of Theorem 37 (Cho and Awan,
    Sec. 5.3), from which :func:`privinfer.inference.semi_private_odds_ratio_test` computes the
    UMPU p-value.

    Privacy: tables with the same margins differ by ``k (1, -1, -1, 1)``, and moving one unit
    needs two record replacements, so between tables at Hamming distance ``<= a(t) <= 3``
    (Theorem 16 with ``p = 2`` features; Example 5 shows ``a(t) = 3`` is attained) ``x11``
    changes by at most 1: the sensitivity space is ``{0, +-(1, -1, -1, 1)}`` (Example 7), and
    the release is ``(D_t, A_{a(t)}, f)``-DP (f-semi-DP, Def. 12).

    Likelihood: the law of ``y`` lives on the line ``x + R (1,-1,-1,1)/2``; in the orthonormal
    coordinate ``s = (y - x).(1,-1,-1,1)/2 = 2N`` its density is ``p_F(s/2)/2``.  ``logp``
    returns ``log p_F(y11 - x11) - log 2`` when the margins of ``y`` and ``x`` agree (and the
    off-diagonal moves match) and ``-inf`` otherwise -- the exact density w.r.t. 1-d Lebesgue
    measure on that line (nothing dropped).

    Parameters
    ----------
    noise: a Tulap (``Tulap.from_privacy(eps, delta)``), GaussianCanonicalNoise or CanonicalNoise.
    a_t: the semi-adjacent parameter ``a(t)`` (default 3, the bound of Theorem 16 for two
        binary features); it labels the guarantee and sets the naive comparison ``f^{o a(t)}``.
    atol: tolerance for the margin check in ``logp``.
    """

    integer = False
    logp_constant_dropped = ""

    def __init__(self, noise, a_t: int = 3, atol: float = 1e-8):
        _noise_description(noise)  # type check
        if not isinstance(a_t, numbers.Integral) or isinstance(a_t, bool) or not 1 <= a_t <= 3:
            raise ValueError("a_t must be an integer in {1, 2, 3} (Theorem 16: a(t) <= p + 1 = 3)")
        self.noise = noise
        self.a_t = int(a_t)
        self.atol = float(atol)

    @property
    def n(self) -> int:
        return 4

    @property
    def invariant(self):
        """One-way margins of the 2x2 table: rows ``(t1., t2., t.1, t.2)`` of ``C``."""
        from ..invariants import margins

        return margins((2, 2), [(0,), (1,)])

    @property
    def guarantee(self) -> Guarantee:
        definition, params = _noise_description(self.noise)
        return Guarantee(
            f"f-semi-DP (Semi-DP with {definition})",
            {**params, "a_t": self.a_t},
            "datasets with the same one-way margins at Hamming distance <= a(t); invariant: one-way margins",
            "Cho and Awan, Semi-DP paper, Def. 12, Thm 16, Example 7, Thm 37",
        )

    def _check_table(self, x, name="x"):
        arr = check_finite_array(x, name)
        if arr.ndim == 0 or arr.shape[-1] != 4:
            raise ValueError(f"{name} must have shape (..., 4) (cells x11, x12, x21, x22), got {arr.shape}")
        return arr

    def release(self, x, rng=None):
        x = self._check_table(x)
        n = self.noise.sample(x.shape[:-1], rng=as_generator(rng))
        return x + np.asarray(n)[..., None] * TWO_BY_TWO_DIRECTION

    def logp(self, y, x):
        xp = namespace(y, x)
        y = as_array(y, xp)
        x = as_array(x, xp)
        e = y - x
        d = e[..., 0]
        # e must equal d (1, -1, -1, 1): three residuals
        resid = xp.abs(e[..., 1] + d) + xp.abs(e[..., 2] + d) + xp.abs(e[..., 3] - d)
        val = self.noise.logp(d) - math.log(2.0)
        return where(resid <= self.atol * (1.0 + xp.abs(d)), val, -np.inf, xp)
