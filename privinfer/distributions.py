r"""Fisher's noncentral hypergeometric distribution (pure NumPy/SciPy).

In a 2x2 table ``(x11, x12, x21, x22)`` with rows ``x1. ~ Bin(t1., theta1)`` and
``x2. ~ Bin(t2., theta2)`` independent, conditioning on the column total ``x11 + x21 = t.1``
gives

.. math::

    P_w(X_{11} = x \mid t) = \frac{\binom{t_{1\cdot}}{x}\binom{t_{2\cdot}}{t_{\cdot 1} - x} w^x}
        {\sum_{k=L}^{U} \binom{t_{1\cdot}}{k}\binom{t_{2\cdot}}{t_{\cdot 1} - k} w^k},
    \qquad L = \max(0, t_{\cdot 1} - t_{2\cdot}),\ U = \min(t_{1\cdot}, t_{\cdot 1}),

because ``theta1^x (1-theta1)^{t1.-x} theta2^{t.1-x} (1-theta2)^{t2.-t.1+x}`` is, up to
factors free of ``x``, ``w^x`` with the cross-product odds ratio
``w = [theta1/(1-theta1)] / [theta2/(1-theta2)]`` (= ``p11 p22 / (p12 p21)`` under
multinomial sampling).  This is ``Hyper(t1., t2., t.1, w)`` of the Semi-DP paper
(Cho and Awan, Sec. 5.3).  The paper's text writes ``w`` as the inverse ratio
``odds2/odds1`` next to a pmf in ``w^{x11}``; the pmf (and the test, which rejects for large
``x11``) fixes ``w`` as the cross-product ratio used here.

The support is finite (at most ``min(t1., t.1) + 1`` points), so pmf, cdf and an exact
inverse-cdf sampler are computed by enumeration in log space (``gammaln`` binomial
coefficients, ``logsumexp`` normalization), stable for any ``w in (0, inf)``.
"""

from __future__ import annotations

import numbers

import numpy as np
from scipy import special

from ._rng import as_generator

__all__ = ["FisherNoncentralHypergeometric", "check_margins", "support_of", "log_base_weights"]


def _nonneg_int(v, name):
    if isinstance(v, bool) or not isinstance(v, (numbers.Integral, numbers.Real)):
        raise TypeError(f"{name} must be a non-negative integer")
    if isinstance(v, numbers.Real) and not isinstance(v, numbers.Integral):
        if not np.isfinite(v) or v != round(v):
            raise ValueError(f"{name} must be a non-negative integer (got a non-integer value)")
    v = int(v)
    if v < 0:
        raise ValueError(f"{name} must be a non-negative integer (got a negative value)")
    return v


def check_margins(margins) -> tuple[int, int, int, int]:
    """Validate one-way margins ``t = (t1., t2., t.1, t.2)`` of a 2x2 table.

    Raises ValueError if the shape is not 4, an entry is negative or non-integer, or the row
    and column totals disagree (``t1. + t2. != t.1 + t.2``).  Values are never echoed.
    """
    arr = np.asarray(margins)
    if arr.shape != (4,):
        raise ValueError(f"margins must be (t1., t2., t.1, t.2), shape (4,), got shape {arr.shape}")
    if arr.dtype.kind not in "iuf":
        raise TypeError("margins must be numeric")
    names = ("t1.", "t2.", "t.1", "t.2")
    vals = tuple(_nonneg_int(arr[i].item(), f"margin {names[i]}") for i in range(4))
    if vals[0] + vals[1] != vals[2] + vals[3]:
        raise ValueError("inconsistent margins: row totals t1. + t2. must equal column totals t.1 + t.2")
    return vals


def support_of(n1: int, n2: int, m: int) -> np.ndarray:
    """``L, ..., U`` with ``L = max(0, m - n2)``, ``U = min(n1, m)``."""
    return np.arange(max(0, m - n2), min(n1, m) + 1)


def log_base_weights(n1: int, n2: int, m: int):
    """``(support, log C(n1, x) + log C(n2, m - x))`` over the support."""
    x = support_of(n1, n2, m)
    lc = (
        special.gammaln(n1 + 1)
        - special.gammaln(x + 1)
        - special.gammaln(n1 - x + 1)
        + special.gammaln(n2 + 1)
        - special.gammaln(m - x + 1)
        - special.gammaln(n2 - m + x + 1)
    )
    return x, lc


class FisherNoncentralHypergeometric:
    r"""``Hyper(n1, n2, m, w)``: law of ``x11`` given margins ``t1. = n1, t2. = n2, t.1 = m``.

    Parameters
    ----------
    n1, n2, m
        non-negative integers with ``m <= n1 + n2``.
    odds_ratio
        ``w in (0, inf)`` (or give ``log_odds_ratio``, any real number).

    Notes
    -----
    Methods ``logpmf``, ``pmf``, ``cdf``, ``sf``, ``ppf``, ``mean``, ``var``, ``sample``.
    """

    def __init__(self, n1, n2, m, odds_ratio=None, *, log_odds_ratio=None):
        self.n1 = _nonneg_int(n1, "n1")
        self.n2 = _nonneg_int(n2, "n2")
        self.m = _nonneg_int(m, "m")
        if self.m > self.n1 + self.n2:
            raise ValueError("inconsistent margins: column total m exceeds n1 + n2")
        if (odds_ratio is None) == (log_odds_ratio is None):
            raise ValueError("give exactly one of odds_ratio and log_odds_ratio")
        if odds_ratio is not None:
            w = float(odds_ratio)
            if not (np.isfinite(w) and w > 0):
                raise ValueError("odds_ratio must be a finite number > 0")
            self.log_odds_ratio = float(np.log(w))
        else:
            lw = float(log_odds_ratio)
            if not np.isfinite(lw):
                raise ValueError("log_odds_ratio must be finite")
            self.log_odds_ratio = lw
        self.support, lc = log_base_weights(self.n1, self.n2, self.m)
        lw_ = lc + self.support * self.log_odds_ratio
        self._logp = lw_ - special.logsumexp(lw_)
        p = np.exp(self._logp)
        self._p = p / p.sum()
        self._cdf = np.minimum(np.cumsum(self._p), 1.0)
        self._cdf[-1] = 1.0

    @classmethod
    def from_margins(cls, margins, odds_ratio=None, *, log_odds_ratio=None):
        """From ``t = (t1., t2., t.1, t.2)`` (validated by :func:`check_margins`)."""
        t1, t2, c1, _ = check_margins(margins)
        return cls(t1, t2, c1, odds_ratio, log_odds_ratio=log_odds_ratio)

    @property
    def odds_ratio(self) -> float:
        return float(np.exp(self.log_odds_ratio))

    @property
    def lower(self) -> int:
        return int(self.support[0])

    @property
    def upper(self) -> int:
        return int(self.support[-1])

    def logpmf(self, x):
        x = np.asarray(x)
        xi = np.round(x).astype(np.int64)
        inside = (xi == x) & (xi >= self.lower) & (xi <= self.upper)
        idx = np.clip(xi - self.lower, 0, len(self.support) - 1)
        return np.where(inside, self._logp[idx], -np.inf)

    def pmf(self, x):
        return np.exp(self.logpmf(x))

    def cdf(self, x):
        x = np.floor(np.asarray(x, dtype=float))
        idx = np.clip(x - self.lower, -1, len(self.support) - 1).astype(np.int64)
        return np.where(idx < 0, 0.0, self._cdf[np.maximum(idx, 0)])

    def sf(self, x):
        """``P(X > x)`` summed from the upper tail (no cancellation)."""
        x = np.floor(np.asarray(x, dtype=float))
        tail = np.concatenate([np.cumsum(self._p[::-1])[::-1], [0.0]])  # tail[i] = P(X >= L+i)
        idx = np.clip(x - self.lower + 1, 0, len(self.support)).astype(np.int64)
        return tail[idx]

    def ppf(self, u):
        """Smallest support point ``x`` with ``cdf(x) >= u``."""
        u = np.asarray(u, dtype=float)
        i = np.searchsorted(self._cdf, u, side="left")
        return self.support[np.minimum(i, len(self.support) - 1)]

    def mean(self) -> float:
        return float(np.sum(self.support * self._p))

    def var(self) -> float:
        mu = self.mean()
        return float(np.sum((self.support - mu) ** 2 * self._p))

    def sample(self, size=(), rng=None) -> np.ndarray:
        """Exact draws by inverse cdf on the enumerated support."""
        rng = as_generator(rng)
        return self.ppf(rng.uniform(size=size)).astype(np.int64)
