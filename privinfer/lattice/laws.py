r"""Integer laws of the lattice engine: exact samplers and the double geometric jump law.

Laws
----
Double geometric (discrete Laplace) with scale :math:`b > 0` (:math:`a = e^{-1/b}`):

.. math:: p(k) = \frac{1-a}{1+a}\, a^{|k|} = \tanh\!\Big(\frac{1}{2b}\Big)\, e^{-|k|/b},
          \qquad k \in \mathbb{Z}

(normalizer: :math:`\sum_k a^{|k|} = (1+a)/(1-a)`).  It is the law of :math:`G_1 - G_2` for
independent geometric :math:`G_i` with :math:`P(G = g) = (1-a)a^g`:
:math:`\sum_g (1-a)^2 a^{g} a^{g+|k|} = \frac{(1-a)^2}{1-a^2} a^{|k|}`.
:func:`double_geometric_log_norm` is :math:`\log\tanh(1/(2b))`, the one place this constant
is written.

Discrete Gaussian with scale :math:`\sigma` (Canonne, Kamath, Steinke 2020, Def. 1):
:math:`p(k) = e^{-k^2/(2\sigma^2)} / Z_\sigma`.  :math:`Z_\sigma` is summed directly for
:math:`\sigma \le 5` (terms :math:`|k| \le 40\sigma + 40`; the omitted tail is below
:math:`e^{-800}`) and otherwise by Poisson summation,
:math:`Z_\sigma = \sqrt{2\pi}\sigma\,(1 + 2\sum_{m\ge1} e^{-2\pi^2\sigma^2 m^2})`, whose
correction is below :math:`e^{-490}` for :math:`\sigma > 5`, i.e. zero in double precision.

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
  :math:`Y = \lfloor X/s \rfloor` (Geometric(:math:`1-e^{-s/t}`): :func:`sample_geometric`),
  a fair sign, rejecting ``(negative sign, Y = 0)`` so zero is not counted twice.
* Algorithm 3, :func:`sample_discrete_gaussian`: with :math:`t = \lfloor\sigma\rfloor + 1`
  propose :math:`Y` from the discrete Laplace of scale :math:`t` and accept w.p.
  :math:`\exp(-(|Y| - \sigma^2/t)^2/(2\sigma^2))`.  With :math:`\sigma^2 = p/q` the exponent is
  the rational :math:`(|Y|qt - p)^2 / (2pqt^2)`.

All are vectorized: each loop runs over the still-unfinished draws as NumPy arrays of int64.
If a rational would not fit in int64 (huge parameters), the affected draws fall back to the
same algorithm in Python integers (exact, slower).

Jump law of the Metropolis kernels
----------------------------------
:func:`double_geometric_jumps` draws the same double geometric law as :math:`G_1 - G_2` with
NumPy's floating-point geometric sampler: fast, and harmless for a Metropolis proposal, which
needs only symmetry (and :math:`G_1 - G_2` is exactly symmetric whatever the law of G);
:func:`nonzero_double_geometric` conditions it on :math:`k \ne 0`.  Releases that must follow
the law exactly use the exact samplers above.
"""

from __future__ import annotations

import math
import numbers
from fractions import Fraction

import numpy as np

from .._rng import as_generator
from .._validation import check_positive

__all__ = [
    "as_rational",
    "bernoulli_exp_neg",
    "sample_geometric",
    "size_tuple",
    "sample_discrete_laplace",
    "sample_double_geometric",
    "sample_discrete_gaussian",
    "discrete_gaussian_log_normalizer",
    "discrete_gaussian_variance",
    "double_geometric_log_norm",
    "double_geometric_jumps",
    "nonzero_double_geometric",
    "sparse_double_geometric",
    "jump_logpmf",
]

# int64 fast path bound for numerators/denominators (leaves room for the factor K <= 2^6 of
# Algorithm 1, whose K exceeds 64 with probability < 1/64!).
SAFE_INT = 2**55


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


def size_tuple(size) -> tuple:
    """``size`` (None, an int or a sequence) as a tuple of ints."""
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
        big = np.array([max(int(a), int(b)) >= SAFE_INT for a, b in zip(num.ravel(), den.ravel())])
    else:
        big = (num.ravel() >= SAFE_INT) | (den.ravel() >= SAFE_INT)
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


def _geometric_flat(t: int, s: int, m: int, rng) -> np.ndarray:
    """m iid Geometric(1 - exp(-s/t)) draws on {0, 1, ...} (CKS Algorithm 2, steps 1-6), int64 path."""
    out = np.empty(m, dtype=np.int64)
    pending = np.arange(m)
    tt = np.int64(t)
    while pending.size:
        k = pending.size
        U = rng.integers(0, t, size=k, dtype=np.int64)
        D = _bern_exp_neg_unit(U, np.full(k, tt), rng)
        idx = np.flatnonzero(D)
        V = _geometric_exp_neg1(idx.size, rng)
        out[pending[idx]] = (U[idx] + tt * V) // np.int64(s)
        pending = pending[~D]
    return out


def _geometric_scalar(t: int, s: int, rng) -> int:
    while True:
        U = _randbelow(t, rng)
        if not _bernoulli_exp_neg_scalar(U, t, rng):
            continue
        V = 0
        while _bernoulli_exp_neg_unit_scalar(1, 1, rng):
            V += 1
        return (U + t * V) // s


def _int64_safe(t: int, s: int) -> bool:
    return t < SAFE_INT and s < SAFE_INT and t * (64 + 1) < 2**62


def _draw_scaled(flat_fn, scalar_fn, scale, size, rng) -> np.ndarray:
    """Draws of shape ``size`` of a law with rational scale ``t/s``: the vectorized int64
    path when the integers fit, else the same algorithm in Python integers."""
    rng = as_generator(rng)
    b = as_rational(scale, "scale")
    t, s = b.numerator, b.denominator
    shape = size_tuple(size)
    m = int(np.prod(shape)) if shape else 1
    if _int64_safe(t, s):
        flat = flat_fn(t, s, m, rng)
    else:
        flat = np.array([scalar_fn(t, s, rng) for _ in range(m)], dtype=np.int64)
    return flat.reshape(shape) if shape else flat[0]


def sample_geometric(scale, size=(), rng=None) -> np.ndarray:
    r"""Exact draws of the geometric law :math:`P(g) = (1-a)a^g` on {0, 1, ...},
    :math:`a = e^{-1/b}`, ``scale`` = :math:`b` (rational, see :func:`as_rational`).

    CKS 2020 Algorithm 2 without the sign: :math:`X = U + tV` is Geometric(:math:`1-e^{-1/t}`)
    and :math:`\lfloor X/s\rfloor` is Geometric(:math:`1 - e^{-s/t}`) for :math:`b = t/s`.
    """
    return _draw_scaled(_geometric_flat, _geometric_scalar, scale, size, rng)


def _discrete_laplace_flat(t: int, s: int, m: int, rng) -> np.ndarray:
    """m iid draws with P(z) ∝ exp(-|z| s/t) (CKS Algorithm 2), int64 path."""
    out = np.empty(m, dtype=np.int64)
    pending = np.arange(m)
    while pending.size:
        k = pending.size
        Y = _geometric_flat(t, s, k, rng)
        B = rng.integers(0, 2, size=k, dtype=np.int64)
        ok = ~((B == 1) & (Y == 0))
        out[pending[ok]] = ((1 - 2 * B) * Y)[ok]
        pending = pending[~ok]
    return out


def _discrete_laplace_scalar(t: int, s: int, rng) -> int:
    while True:
        Y = _geometric_scalar(t, s, rng)
        B = int(rng.integers(0, 2))
        if B == 1 and Y == 0:
            continue
        return (1 - 2 * B) * Y


def sample_discrete_laplace(scale, size=(), rng=None) -> np.ndarray:
    r"""Exact draws of the discrete Laplace / double geometric law, :math:`P(z) \propto e^{-|z|/b}`.

    ``scale`` is :math:`b` (rational, see :func:`as_rational`).  CKS 2020 Algorithm 2.
    Returns int64 of shape ``size``.
    """
    return _draw_scaled(_discrete_laplace_flat, _discrete_laplace_scalar, scale, size, rng)


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
    shape = size_tuple(size)
    m = int(np.prod(shape)) if shape else 1
    out = np.empty(m, dtype=np.int64)
    pending = np.arange(m)
    den_py = 2 * p * q * t * t
    while pending.size:
        k = pending.size
        Y = sample_discrete_laplace(Fraction(t), size=k, rng=rng)
        aY = np.abs(Y)
        ymax = int(aY.max())
        if (ymax * q * t + p) ** 2 < SAFE_INT and den_py < SAFE_INT:
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


def discrete_gaussian_log_normalizer(sigma) -> float:
    r""":math:`\log Z_\sigma = \log\sum_k e^{-k^2/(2\sigma^2)}` (see module docstring for accuracy)."""
    s = float(sigma)
    if s <= 5.0:
        K = int(40 * s + 40)
        k = np.arange(-K, K + 1, dtype=float)
        v = -(k * k) / (2 * s * s)
        return float(np.log(np.sum(np.exp(v))))
    return 0.5 * math.log(2 * math.pi) + math.log(s)


def discrete_gaussian_variance(sigma) -> float:
    r""":math:`\sum_k k^2 e^{-k^2/(2\sigma^2)} / Z_\sigma`, the variance of the discrete Gaussian
    (below :math:`\sigma^2`; summed directly for :math:`\sigma \le 5` over the same terms as
    :func:`discrete_gaussian_log_normalizer`, otherwise :math:`\sigma^2`, which it equals to
    double precision by Poisson summation: the relative gap is about
    :math:`4\pi^2\sigma^2 e^{-2\pi^2\sigma^2} < e^{-480}`)."""
    s = float(sigma)
    if s <= 5.0:
        K = int(40 * s + 40)
        k = np.arange(-K, K + 1, dtype=float)
        w = np.exp(-(k * k) / (2 * s * s))
        return float(np.sum(k * k * w) / np.sum(w))
    return s * s


def double_geometric_log_norm(scale) -> float:
    r""":math:`\log\frac{1-a}{1+a} = \log\tanh(1/(2b))`, the log-pmf of the double geometric law
    of scale :math:`b` at 0 (``scale`` may be an array)."""
    b = np.asarray(scale, dtype=float)
    out = np.log(np.tanh(0.5 / b))
    return float(out) if out.ndim == 0 else out


def jump_logpmf(k, scale):
    r""":math:`\log q(k) = \log\tanh(1/(2s)) - |k|/s` (double geometric of scale s)."""
    return double_geometric_log_norm(scale) - np.abs(k) / np.asarray(scale, dtype=float)


def double_geometric_jumps(rng, scale, size) -> np.ndarray:
    r"""Double geometric draws with :math:`P(k) \propto e^{-|k|/s}` as :math:`G_1 - G_2`
    (floating-point geometric sampler; ``scale`` broadcasts against ``size``)."""
    p = -np.expm1(-1.0 / np.asarray(scale, dtype=float))  # 1 - a
    g = rng.geometric(np.broadcast_to(p, size), size=(2,) + tuple(size))
    return (g[0] - g[1]).astype(np.int64)


def nonzero_double_geometric(rng, a, size) -> np.ndarray:
    r"""Double geometric draws conditioned on being non-zero: :math:`P(k) \propto a^{|k|}`,
    :math:`k \ne 0` -- magnitude geometric on {1, 2, ...} with success :math:`1 - a`, fair
    sign.  Symmetric in law, so a Metropolis step with it needs only the target ratio, and
    no proposal is wasted on a null move."""
    a = np.broadcast_to(np.asarray(a, dtype=float), size)
    mags = rng.geometric(1.0 - a)
    signs = rng.integers(0, 2, size=size) * 2 - 1
    return (mags * signs).astype(np.int64)


def sparse_double_geometric(rng, d: int, a: float) -> np.ndarray:
    r"""``k in Z^d`` with iid double-geometric entries :math:`\propto a^{|k_j|}`, given ``k != 0``.

    Drawn sparsely: the non-zero pattern is Bernoulli(:math:`2a/(1+a)`) per entry (resampled
    if empty), magnitudes are geometric on {1, 2, ...} with success :math:`1-a`, signs fair.
    """
    q = 2.0 * a / (1.0 + a)
    while True:
        nnz = rng.binomial(d, q)
        if nnz > 0:
            break
    js = rng.choice(d, size=nnz, replace=False)
    k = np.zeros(d, dtype=np.int64)
    k[js] = nonzero_double_geometric(rng, a, (nnz,))
    return k
