r"""Integer-valued noise on :math:`\mathbb{Z}^n`: the double geometric (discrete Laplace) and
the discrete Gaussian, with exact samplers and exact log-pmfs.

These are the unconstrained baselines of integer subspace DP (Dharangutte, Gao, Gong, Yu
2023, Sec. 3: with no invariant the generalized Laplace mechanism is the double geometric
mechanism and the generalized Gaussian is the discrete Gaussian).

Laws
----
Double geometric with scale :math:`b > 0` (:math:`a = e^{-1/b}`):

.. math:: p(k) = \frac{1-a}{1+a}\, a^{|k|} = \tanh\!\Big(\frac{1}{2b}\Big)\, e^{-|k|/b},
          \qquad k \in \mathbb{Z}.

(The normalizer: :math:`\sum_k a^{|k|} = 1 + 2a/(1-a) = (1+a)/(1-a)`, and
:math:`(1-a)/(1+a) = \tanh(1/(2b))`.)  With :math:`b = \Delta_1/\epsilon` the mechanism
:math:`y = x + e` is :math:`(\epsilon, 0)`-DP for integer queries of l1 sensitivity
:math:`\Delta_1`: :math:`p(y-x)/p(y-x') = e^{(|y-x'|_1 - |y-x|_1)/b} \le e^{\epsilon}`.

Discrete Gaussian with scale :math:`\sigma` (Canonne, Kamath, Steinke 2020, Def. 1):

.. math:: p(k) = e^{-k^2/(2\sigma^2)} / Z_\sigma, \qquad Z_\sigma = \sum_{k\in\mathbb{Z}} e^{-k^2/(2\sigma^2)}.

:math:`Z_\sigma` is summed directly for :math:`\sigma \le 5` (terms :math:`|k| \le 40\sigma + 40`;
the omitted tail is below :math:`e^{-800}`) and otherwise by Poisson summation,
:math:`Z_\sigma = \sqrt{2\pi}\sigma\,(1 + 2\sum_{m\ge1} e^{-2\pi^2\sigma^2 m^2})` whose
correction is below :math:`e^{-490}` for :math:`\sigma > 5`, i.e. zero in double precision.
With l2 sensitivity :math:`\Delta_2` (integer query) it is :math:`\Delta_2^2/(2\sigma^2)`-zCDP
(CKS 2020, Thm 4 in one dimension; the coordinates are independent and Renyi divergences
of product laws add, so the bound is alpha * sum_i Delta_i^2 / (2 sigma^2)).

Exact sampling
--------------
No floating-point step touches the law.  Parameters are held as exact rationals
(:class:`fractions.Fraction`): a float argument is read as the decimal it prints as
(``0.192 -> 24/125``, via ``Fraction(repr(x))``), so the law sampled is exactly the law whose
parameter is stored on the object and used by ``logp``.  The samplers are CKS 2020:

* Algorithm 1, :func:`bernoulli_exp_neg`: Bernoulli(:math:`e^{-\gamma}`) for rational
  :math:`\gamma = n/d`.  For :math:`\gamma\in[0,1]`: draw :math:`A_K \sim` Bernoulli
  (:math:`\gamma/K`) for :math:`K = 1, 2, \dots` until the first failure and return 1 iff that
  :math:`K` is odd; :math:`P(\text{odd}) = \sum_k (-\gamma)^{k}/k! = e^{-\gamma}`.  For
  :math:`\gamma > 1` it is the product of :math:`\lfloor\gamma\rfloor` Bernoulli(:math:`e^{-1}`)
  and one Bernoulli(:math:`e^{-(\gamma - \lfloor\gamma\rfloor)}`).  Bernoulli(:math:`n/(dK)`)
  is ``integers(0, d*K) < n`` with NumPy's unbiased bounded-integer generator (exact).
* Algorithm 2, :func:`sample_discrete_laplace`: for scale :math:`t/s` draw
  :math:`U\sim` Unif{0..t-1} kept w.p. :math:`e^{-U/t}`, :math:`V` = number of Bernoulli
  (:math:`e^{-1}`) successes before a failure, :math:`X = U + tV` (Geometric(1-e^{-1/t})),
  :math:`Y = \lfloor X/s \rfloor` (Geometric(:math:`1-e^{-s/t}`)), a fair sign, rejecting
  ``(negative sign, Y = 0)`` so zero is not counted twice.
* Algorithm 3, :func:`sample_discrete_gaussian`: with :math:`t = \lfloor\sigma\rfloor + 1`
  propose :math:`Y` from the discrete Laplace of scale :math:`t` and accept w.p.
  :math:`\exp(-(|Y| - \sigma^2/t)^2/(2\sigma^2))`.  With :math:`\sigma^2 = p/q` the exponent is
  the rational :math:`(|Y|qt - p)^2 / (2pqt^2)`.

All three are vectorized: each loop runs over the still-unfinished draws as NumPy arrays of
int64.  If a rational would not fit in int64 (huge parameters), the affected draws fall back to
the same algorithm in Python integers (exact, slower).
"""

from __future__ import annotations

import math
import numbers
from fractions import Fraction

import numpy as np

from .._backend import namespace
from .._rng import as_generator
from .._validation import check_positive
from .base import AdditiveMechanism, Guarantee, SeparableLogp

__all__ = [
    "as_rational",
    "bernoulli_exp_neg",
    "sample_discrete_laplace",
    "sample_double_geometric",
    "sample_discrete_gaussian",
    "double_geometric_logpmf",
    "discrete_gaussian_logpmf",
    "discrete_gaussian_log_normalizer",
    "DoubleGeometric",
    "DiscreteGaussian",
]

# int64 fast path bound for numerators/denominators (leaves room for the factor K <= 2^6 of
# Algorithm 1, whose K exceeds 64 with probability < 1/64!).
_SAFE = 2**55


def as_rational(value, name: str) -> Fraction:
    """Exact positive rational from an int, a Fraction, or a float read as its printed decimal."""
    if isinstance(value, Fraction):
        r = value
    elif isinstance(value, numbers.Integral) and not isinstance(value, bool):
        r = Fraction(int(value))
    elif isinstance(value, numbers.Real) and not isinstance(value, bool):
        check_positive(float(value), name)
        r = Fraction(repr(float(value)))
    else:
        raise TypeError(f"{name} must be a real number or a Fraction, not {type(value).__name__}")
    if r <= 0:
        raise ValueError(f"{name} must be > 0 (got {float(r)!r})")
    return r


def _size_tuple(size) -> tuple:
    if size is None:
        return ()
    if isinstance(size, numbers.Integral):
        return (int(size),)
    return tuple(int(s) for s in size)


# ---------------------------------------------------------------------------------------------
# exact scalar fallback (Python integers)
def _randbelow(n: int, rng: np.random.Generator) -> int:
    """Uniform integer in [0, n) for arbitrary Python int n (rejection from random bits)."""
    if n <= 2**62:
        return int(rng.integers(0, n))
    k = n.bit_length()
    while True:
        words = (k + 31) // 32
        v = 0
        for w in rng.integers(0, 2**32, size=words, dtype=np.uint64):
            v = (v << 32) | int(w)
        v >>= words * 32 - k
        if v < n:
            return v


def _bernoulli_exp_neg_unit_scalar(num: int, den: int, rng) -> bool:
    """CKS Algorithm 1 for gamma = num/den in [0, 1], Python integers."""
    K = 1
    while _randbelow(den * K, rng) < num:
        K += 1
    return K % 2 == 1


def _bernoulli_exp_neg_scalar(num: int, den: int, rng) -> bool:
    k, r = divmod(num, den)
    for _ in range(k):
        if not _bernoulli_exp_neg_unit_scalar(1, 1, rng):
            return False
    return _bernoulli_exp_neg_unit_scalar(r, den, rng)


# ---------------------------------------------------------------------------------------------
def _bern_exp_neg_unit(num: np.ndarray, den: np.ndarray, rng) -> np.ndarray:
    """CKS Algorithm 1 for gamma = num/den in [0, 1] (int64 arrays, den < 2^55)."""
    K = np.ones(num.shape, dtype=np.int64)
    active = np.flatnonzero(np.ones(num.shape, dtype=bool))
    while active.size:
        a = rng.integers(0, den[active] * K[active]) < num[active]
        K[active[a]] += 1
        active = active[a]
    return (K % 2) == 1


def bernoulli_exp_neg(num, den, rng=None) -> np.ndarray:
    r"""Exact Bernoulli(:math:`e^{-\gamma}`) draws for rationals :math:`\gamma = num/den \ge 0`.

    ``num`` and ``den`` are integer arrays of one shape (``den > 0``); returns a bool array.
    CKS 2020, Algorithm 1 (see module docstring for the argument).
    """
    rng = as_generator(rng)
    num = np.asarray(num)
    den = np.asarray(den)
    num, den = np.broadcast_arrays(num, den)
    shape = num.shape
    out = np.empty(shape, dtype=bool)
    if num.size == 0:
        return out
    if num.dtype == object or den.dtype == object:
        big = np.array([max(int(a), int(b)) >= _SAFE for a, b in zip(num.ravel(), den.ravel())])
    else:
        big = (num.ravel() >= _SAFE) | (den.ravel() >= _SAFE)
    flat_out = out.reshape(-1)
    if big.any():
        for i in np.flatnonzero(big):
            flat_out[i] = _bernoulli_exp_neg_scalar(int(num.ravel()[i]), int(den.ravel()[i]), rng)
    small = np.flatnonzero(~big)
    if small.size:
        n_ = num.ravel()[small].astype(np.int64)
        d_ = den.ravel()[small].astype(np.int64)
        if np.any(n_ < 0) or np.any(d_ <= 0):
            raise ValueError("bernoulli_exp_neg needs num >= 0 and den > 0")
        k = n_ // d_
        r = n_ - k * d_
        alive = np.ones(small.size, dtype=bool)
        # floor(gamma) independent Bernoulli(exp(-1)) must all succeed
        idx = np.flatnonzero(k > 0)
        while idx.size:
            ones = np.ones(idx.size, dtype=np.int64)
            b = _bern_exp_neg_unit(ones, ones, rng)
            alive[idx[~b]] = False
            k[idx] -= 1
            idx = idx[b & (k[idx] > 0)]
        idx = np.flatnonzero(alive)
        if idx.size:
            alive[idx] = _bern_exp_neg_unit(r[idx], d_[idx], rng)
        flat_out[small] = alive
    return out


def _geometric_exp_neg1(m: int, rng) -> np.ndarray:
    """Number of Bernoulli(e^-1) successes before the first failure (exact), m draws."""
    V = np.zeros(m, dtype=np.int64)
    active = np.arange(m)
    ones = np.ones(m, dtype=np.int64)
    while active.size:
        a = _bern_exp_neg_unit(ones[: active.size], ones[: active.size], rng)
        V[active[a]] += 1
        active = active[a]
    return V


def _discrete_laplace_flat(t: int, s: int, m: int, rng) -> np.ndarray:
    """m iid draws with P(z) ∝ exp(-|z| s/t) (CKS Algorithm 2), int64 path."""
    out = np.empty(m, dtype=np.int64)
    pending = np.arange(m)
    tt = np.int64(t)
    while pending.size:
        k = pending.size
        U = rng.integers(0, t, size=k, dtype=np.int64)
        D = _bern_exp_neg_unit(U, np.full(k, tt), rng)
        V = np.zeros(k, dtype=np.int64)
        idx = np.flatnonzero(D)
        V[idx] = _geometric_exp_neg1(idx.size, rng)
        Y = (U + tt * V) // np.int64(s)
        B = rng.integers(0, 2, size=k, dtype=np.int64)
        ok = D & ~((B == 1) & (Y == 0))
        out[pending[ok]] = ((1 - 2 * B) * Y)[ok]
        pending = pending[~ok]
    return out


def _discrete_laplace_scalar(t: int, s: int, rng) -> int:
    while True:
        U = _randbelow(t, rng)
        if not _bernoulli_exp_neg_scalar(U, t, rng):
            continue
        V = 0
        while _bernoulli_exp_neg_unit_scalar(1, 1, rng):
            V += 1
        Y = (U + t * V) // s
        B = int(rng.integers(0, 2))
        if B == 1 and Y == 0:
            continue
        return (1 - 2 * B) * Y


def sample_discrete_laplace(scale, size=(), rng=None) -> np.ndarray:
    r"""Exact draws of the discrete Laplace / double geometric law, :math:`P(z) \propto e^{-|z|/b}`.

    ``scale`` is :math:`b` (rational, see :func:`as_rational`).  CKS 2020 Algorithm 2.
    Returns int64 of shape ``size``.
    """
    rng = as_generator(rng)
    b = as_rational(scale, "scale")
    t, s = b.numerator, b.denominator
    shape = _size_tuple(size)
    m = int(np.prod(shape)) if shape else 1
    if t < _SAFE and s < _SAFE and t * (64 + 1) < 2**62:
        flat = _discrete_laplace_flat(t, s, m, rng)
    else:
        flat = np.array([_discrete_laplace_scalar(t, s, rng) for _ in range(m)], dtype=np.int64)
    return flat.reshape(shape) if shape else flat[0]


#: Paper name (Dharangutte et al. 2023, Sec. 4) for the same law.
sample_double_geometric = sample_discrete_laplace


def sample_discrete_gaussian(sigma, size=(), rng=None, *, sigma2=None) -> np.ndarray:
    r"""Exact draws of the discrete Gaussian :math:`P(k) \propto e^{-k^2/(2\sigma^2)}` on Z.

    Give ``sigma`` (rational, see :func:`as_rational`; :math:`\sigma^2` is its exact square) or
    ``sigma2`` (rational variance parameter) directly.  CKS 2020 Algorithm 3.
    """
    rng = as_generator(rng)
    s2 = as_rational(sigma2, "sigma2") if sigma2 is not None else as_rational(sigma, "sigma") ** 2
    p, q = s2.numerator, s2.denominator
    t = math.isqrt(p // q) + 1  # floor(sigma) + 1
    shape = _size_tuple(size)
    m = int(np.prod(shape)) if shape else 1
    out = np.empty(m, dtype=np.int64)
    pending = np.arange(m)
    den_py = 2 * p * q * t * t
    while pending.size:
        k = pending.size
        Y = sample_discrete_laplace(Fraction(t), size=k, rng=rng)
        aY = np.abs(Y)
        ymax = int(aY.max())
        if (ymax * q * t + p) ** 2 < _SAFE and den_py < _SAFE:
            num = (aY * np.int64(q * t) - np.int64(p)) ** 2
            den = np.full(k, np.int64(den_py))
            g = np.gcd(num, den)
            C = bernoulli_exp_neg(num // g, den // g, rng)
        else:
            C = np.array(
                [_bernoulli_exp_neg_scalar((int(a) * q * t - p) ** 2, den_py, rng) for a in aY], dtype=bool
            )
        out[pending[C]] = Y[C]
        pending = pending[~C]
    return out.reshape(shape) if shape else out[0]


# ---------------------------------------------------------------------------------------------
def double_geometric_logpmf(k, scale):
    r""":math:`\log p(k) = \log\tanh(1/(2b)) - |k|/b` elementwise (NumPy or PyTensor);
    ``-inf`` for non-integer ``k`` (NumPy only; the mechanisms check integrality themselves)."""
    b = float(scale)
    xp = namespace(k)
    c = math.log(math.tanh(0.5 / b))
    if xp is np:
        k = np.asarray(k, dtype=float)
        return np.where(k == np.round(k), c - np.abs(k) / b, -np.inf)
    return c - xp.abs(k) / b


def discrete_gaussian_log_normalizer(sigma) -> float:
    r""":math:`\log Z_\sigma = \log\sum_k e^{-k^2/(2\sigma^2)}` (see module docstring for accuracy)."""
    s = float(sigma)
    if s <= 5.0:
        K = int(40 * s + 40)
        k = np.arange(-K, K + 1, dtype=float)
        v = -(k * k) / (2 * s * s)
        return float(np.log(np.sum(np.exp(v))))
    return 0.5 * math.log(2 * math.pi) + math.log(s)


def discrete_gaussian_logpmf(k, sigma):
    r""":math:`\log p(k) = -k^2/(2\sigma^2) - \log Z_\sigma` elementwise (NumPy or PyTensor);
    ``-inf`` for non-integer ``k`` (NumPy)."""
    s = float(sigma)
    xp = namespace(k)
    lz = discrete_gaussian_log_normalizer(s)
    if xp is np:
        k = np.asarray(k, dtype=float)
        return np.where(k == np.round(k), -(k * k) / (2 * s * s) - lz, -np.inf)
    return -(k * k) / (2 * s * s) - lz


# ---------------------------------------------------------------------------------------------
class _IntegerAdditive(AdditiveMechanism):
    integer = True
    invariant = None

    def __init__(self, n):
        if not isinstance(n, numbers.Integral) or isinstance(n, bool) or n < 1:
            raise ValueError(f"n must be a positive integer (got {n!r})")
        self._n = int(n)

    @property
    def n(self) -> int:
        return self._n

    def _masked_sum(self, e, elementwise, xp):
        s = xp.sum(elementwise, axis=-1)
        ok = self.noise_in_support(e)
        if xp is np:
            return np.where(ok, s, -np.inf) if np.ndim(s) else (float(s) if ok else -np.inf)
        return xp.switch(ok, s, -np.inf)


class DoubleGeometric(_IntegerAdditive):
    r"""Double geometric (discrete Laplace) mechanism on :math:`\mathbb{Z}^n`: ``y = x + e``,
    :math:`e_i` iid with :math:`p(k) = \frac{1-a}{1+a}a^{|k|}`, :math:`a = e^{-1/b}`.

    Parameters
    ----------
    n : int
        Length of the released vector.
    epsilon : float, optional
        Privacy loss; then the scale is :math:`b = \Delta_1/\epsilon` (exact rational).
    scale : float or Fraction, optional
        The scale :math:`b` directly (give exactly one of ``epsilon`` and ``scale``).
    sensitivity : int
        l1 sensitivity :math:`\Delta_1` of the integer query (default 1).

    ``logp(y, x)`` is exact (normalized): :math:`n\log\tanh(1/(2b)) - \|y-x\|_1/b`, ``-inf`` if
    ``y - x`` is not integer.  Guarantee: :math:`(\Delta_1/b, 0)`-DP (the integer subspace
    generalized Laplace with no invariant, Dharangutte et al. 2023, Sec. 3.2).
    """

    logp_constant_dropped = ""

    def __init__(self, n, epsilon=None, *, scale=None, sensitivity=1):
        super().__init__(n)
        if (epsilon is None) == (scale is None):
            raise ValueError("give exactly one of epsilon and scale")
        self.sensitivity = as_rational(sensitivity, "sensitivity")
        if scale is not None:
            self.scale = as_rational(scale, "scale")
        else:
            self.scale = self.sensitivity / as_rational(epsilon, "epsilon")
        self.epsilon = float(self.sensitivity / self.scale)

    @property
    def a(self) -> float:
        """Geometric ratio :math:`a = e^{-1/b}`."""
        return math.exp(-1.0 / float(self.scale))

    @property
    def guarantee(self) -> Guarantee:
        return Guarantee(
            "(eps, 0)-DP",
            {"epsilon": self.epsilon, "sensitivity": float(self.sensitivity)},
            "integer x, x' with ||x - x'||_1 <= sensitivity (no invariant)",
            "Dharangutte, Gao, Gong, Yu 2023, Sec. 3.2 (generalized Laplace with vacuous invariant)",
        )

    def sample_noise(self, size=(), rng=None) -> np.ndarray:
        size = _size_tuple(size)
        return sample_discrete_laplace(self.scale, size + (self.n,), rng)

    def noise_logp(self, e):
        xp = namespace(e)
        b = float(self.scale)
        c = math.log(math.tanh(0.5 / b))
        return self._masked_sum(e, c - xp.abs(e) / b, xp)

    def separable_logp(self) -> SeparableLogp:
        """Per cell ``-|e_i| / b`` (the normalizing constant does not depend on x)."""
        b = float(self.scale)
        return SeparableLogp(cell=lambda e: -np.abs(e) / b)


class DiscreteGaussian(_IntegerAdditive):
    r"""Discrete Gaussian mechanism on :math:`\mathbb{Z}^n` (Canonne, Kamath, Steinke 2020):
    ``y = x + e``, :math:`e_i` iid with :math:`p(k) = e^{-k^2/(2\sigma^2)}/Z_\sigma`.

    ``sigma`` is held as an exact rational (a float is read as its printed decimal);
    ``logp`` is exact (normalized, :math:`Z_\sigma` as in the module docstring) and ``-inf``
    if ``y - x`` is not integer.  Guarantee: :math:`\rho = \Delta_2^2/(2\sigma^2)`-zCDP
    (CKS 2020, Thm 4; Renyi divergences of the independent coordinates add).
    """

    logp_constant_dropped = ""

    def __init__(self, n, sigma, *, sensitivity=1):
        super().__init__(n)
        self.sigma = as_rational(sigma, "sigma")
        self.sigma2 = self.sigma**2
        self.sensitivity = float(check_positive(float(sensitivity), "sensitivity"))

    @property
    def guarantee(self) -> Guarantee:
        s = float(self.sigma)
        return Guarantee(
            "rho-zCDP",
            {"rho": self.sensitivity**2 / (2 * s * s), "sigma": s, "sensitivity": self.sensitivity},
            "integer x, x' with ||x - x'||_2 <= sensitivity (no invariant)",
            "Canonne, Kamath, Steinke 2020, Thm 4 (coordinates independent)",
        )

    def sample_noise(self, size=(), rng=None) -> np.ndarray:
        size = _size_tuple(size)
        return sample_discrete_gaussian(None, size + (self.n,), rng, sigma2=self.sigma2)

    def noise_logp(self, e):
        xp = namespace(e)
        s = float(self.sigma)
        lz = discrete_gaussian_log_normalizer(s)
        return self._masked_sum(e, -(e * e) / (2 * s * s) - lz, xp)

    def separable_logp(self) -> SeparableLogp:
        """Per cell ``-e_i^2 / (2 sigma^2)`` (the normalizing constant does not depend on x)."""
        c = 1.0 / (2.0 * float(self.sigma2))
        return SeparableLogp(cell=lambda e: -c * np.square(np.asarray(e, dtype=float)))
