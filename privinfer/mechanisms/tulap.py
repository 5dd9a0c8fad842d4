r"""The Tulap distribution: the canonical noise distribution of (eps, delta)-DP.

``Tulap(m, b, q)`` (Awan and Slavkovic 2018, Def. 4.1): ``N = m + G1 - G2 + U`` with
``G1, G2`` iid geometric, ``P(G = k) = (1 - b) b^k`` (``k >= 0``), and ``U ~ Unif(-1/2, 1/2)``
-- a discrete Laplace spread over unit cells -- truncated to the middle ``1 - q`` of its mass
when ``q > 0``.  With ``b = exp(-eps)`` and ``q = 2 delta b / (1 - b + 2 delta b)``
(:func:`tulap_q`) it is the canonical noise distribution of ``f_{eps,delta}`` (Awan and
Vadhan 2023, Sec. 4; the unique CND for ``f_{eps,delta}``, Awan and Dong 2022), the noise of
the semi-private 2x2 table release (Cho and Awan, Semi-DP paper, Sec. 5.3, Def. 35).

Closed forms (derived in the docstrings below): for ``t <= 0`` and ``k = round(t)``, the
untruncated cdf is ``F(t) = b^{-k}/(1+b) * (b + (1-b)(t - k + 1/2))`` and
``F(t) = 1 - F(-t)`` for ``t > 0``; its inverse picks the integer cell from
``F(k - 1/2) = b^{1-k}/(1+b)``; the density is ``(1-b)/(1+b) b^{|round(x - m)|}``.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from .._backend import as_array, namespace, where
from .._rng import as_generator
from .._validation import check_epsilon, check_finite_array
from .tradeoff import check_delta0

__all__ = ["tulap_q", "Tulap"]


def tulap_q(epsilon, delta=0.0) -> float:
    r"""Truncation ``q = 2 delta b / (1 - b + 2 delta b)`` with ``b = e^{-eps}``.

    (Awan and Slavkovic 2018, Thm 4.3; Awan and Vadhan 2023, Sec. 4.)
    """
    eps = check_epsilon(epsilon)
    delta = check_delta0(delta)
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
    m
        location (median).
    b
        in (0, 1).
    q
        truncation mass in [0, 1).
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
