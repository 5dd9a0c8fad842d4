r"""Exact samplers for product laws restricted to an integer lattice.

The lattice mechanisms of Integer subspace DP (Dharangutte, Gao, Gong, Yu 2023, Sec. 3) add
noise :math:`e \in L = \{e \in \mathbb{Z}^n : Ce = 0\}` with

.. math:: \pi(e) \propto \prod_{i=1}^n f(e_i), \qquad e \in L,

where :math:`f` is the double geometric law :math:`f(k) \propto e^{-|k|/b}` (generalized
Laplace, l1 norm, :math:`b = \Delta/\epsilon`) or the discrete Gaussian
:math:`f(k) \propto e^{-k^2/(2\sigma^2)}` (generalized Gaussian).  Both have their mode at 0.
This module draws :math:`\pi` *exactly* -- no Markov chain, no floating-point step in the
law -- whenever the invariant allows it, so a release is :math:`(\epsilon, 0)` with no
sampler error to account for.

Partitions (totals, groups: the Census state-total case)
--------------------------------------------------------
:math:`L` is the product over groups of :math:`\{e_g : \sum_{i\in g} e_i = 0\}`, so groups are
independent; a group of one cell gets no noise (its count is published by the invariant).

*Double geometric: compositions* (:func:`sample_partition_double_geometric`).  Write
:math:`e_i = G_i - H_i` with all :math:`G_i, H_i` iid Geometric: :math:`P(G = g) = (1-a)a^g`,
:math:`a = e^{-1/b}` (the double geometric law is the law of such a difference).  The event
:math:`\sum_g e_i = 0` is the event :math:`\sum G_i = \sum H_i`, so :math:`e` given it is
:math:`G - H` for :math:`(G, H)` given :math:`\sum G = \sum H`.  That joint law is
:math:`\propto a^{\sum g + \sum h}\mathbf 1\{\sum g = \sum h\}`: with :math:`T = \sum G`,

.. math:: P(T = \tau) \propto \binom{\tau + k - 1}{k - 1}^2 a^{2\tau},

and given :math:`T`, G and H are independent and uniform over the
:math:`\binom{\tau+k-1}{k-1}` compositions of :math:`\tau` into k non-negative parts.  We draw
G as k exact geometric variables (its sum T has the negative binomial law
:math:`P_{NB}(\tau) = \binom{\tau+k-1}{k-1}(1-a)^k a^\tau`, and G given T is uniform over
compositions), keep it with probability :math:`P_{NB}(T)/P_{NB}(M)` (M the mode of the
negative binomial, so the ratio is at most 1): the kept T has law
:math:`\propto P_{NB}(\tau)^2`, as required, and G given T stays uniform.  H is a uniform
composition of T (stars and bars: k - 1 distinct bar positions among :math:`T + k - 1`,
uniformly).  The acceptance probability is
:math:`\sum_\tau P_{NB}(\tau)^2 / P_{NB}(M) \approx 1/\sqrt 2` for large k (a Gaussian
shape), so a group of k cells costs about :math:`1.4k` exact geometric draws.

*Discrete Gaussian: one dependent cell* (:func:`sample_partition_rejection`).  Draw
:math:`e_1..e_{k-1}` iid f, set :math:`e_k = -s` with :math:`s = \sum_{i<k} e_i`, and accept
with probability :math:`f(-s)/f(0) = e^{-s^2/(2\sigma^2)}`: the accepted vector has probability
:math:`\propto \prod_{i<k} f(e_i)\, f(e_k)`, i.e. exactly :math:`\pi` on the group.  The
acceptance is about :math:`1/\sqrt{k}`.  (The same scheme serves the double geometric law with
:math:`f(-s)/f(0) = e^{-|s|/b}`.)

Other invariants: free cells (:class:`FreeCellRejection`)
---------------------------------------------------------
With a free-cell basis :math:`B'` of L (:func:`~privinfer.lattice.moves.free_cell_basis`:
:math:`B'_F = I`, so :math:`z \mapsto B'z` is a bijection of :math:`\mathbb{Z}^d` onto L and
:math:`z = e_F`), draw :math:`e_F` iid f, complete :math:`e = B' e_F`, and accept with
probability :math:`\prod_{i \notin F} f(e_i)/f(0)` -- exact by the same argument.  The
acceptance can be tiny (many dependent cells), so it is estimated by a pilot run and the
exact path is used only when it is at least ``min_acceptance``.

Exact acceptance tests
----------------------
Acceptance probabilities :math:`e^{-\gamma}` with rational :math:`\gamma` use the exact
Bernoulli sampler of :mod:`privinfer.lattice.laws` (CKS 2020, Algorithm 1).  The negative
binomial ratio :math:`p = \binom{T+k-1}{k-1}/\binom{M+k-1}{k-1}\, e^{-(T-M)/b}` is not of that
form; :func:`bernoulli_exp` decides :math:`U < p` exactly by lazy comparison: it draws the
first 53 bits of the uniform U, compares the interval they leave for U with an interval that
surely contains :math:`p` (double precision with a generous error bound), and only when the
two overlap (probability about :math:`10^{-9}`) computes :math:`\log p` with Python's
``decimal`` module (correctly rounded ``ln``/``exp``) at growing precision while drawing
further bits of U.
"""

from __future__ import annotations

import math
from decimal import Decimal, localcontext
from fractions import Fraction

import numpy as np
from scipy.special import gammaln

from .._rng import as_generator
from .laws import (
    as_rational,
    bernoulli_exp_neg,
    sample_discrete_gaussian,
    sample_discrete_laplace,
    sample_geometric,
    size_tuple,
)
from .moves import free_cell_basis

__all__ = [
    "DoubleGeometricLaw",
    "DiscreteGaussianLaw",
    "bernoulli_exp",
    "sample_partition_double_geometric",
    "sample_partition_rejection",
    "FreeCellRejection",
    "ExactSampler",
    "exact_sampler",
]

#: absolute error bound used for double-precision log-probabilities before an exact check
_FLOAT_MARGIN = 1e-6


def _exp_neg_rational(rng, nums: list, den: int) -> np.ndarray:
    """Exact Bernoulli(exp(-num/den)) for Python-int numerators and one denominator."""
    if not nums:
        return np.zeros(0, dtype=bool)
    if max(nums) < 2**62 and den < 2**62:
        return bernoulli_exp_neg(np.array(nums, dtype=np.int64), np.full(len(nums), den, dtype=np.int64), rng)
    return bernoulli_exp_neg(np.array(nums, dtype=object), np.full(len(nums), den, dtype=object), rng)


class DoubleGeometricLaw:
    r"""Double geometric :math:`f(k) \propto e^{-|k|/b}`, ``scale`` :math:`b` held as a rational."""

    name = "double-geometric"

    def __init__(self, scale):
        self.scale = as_rational(scale, "scale")

    def sample(self, rng, size):
        return sample_discrete_laplace(self.scale, size, rng)

    def accept_ratio(self, rng, s) -> np.ndarray:
        r"""Exact Bernoulli(:math:`f(s)/f(0) = e^{-|s|/b}`) per entry of the integer array s."""
        s = np.abs(np.asarray(s, dtype=np.int64))
        return _exp_neg_rational(rng, [int(v) * self.scale.denominator for v in s.ravel()],
                                 self.scale.numerator).reshape(s.shape)

    def accept_sum(self, rng, dependent) -> np.ndarray:
        r"""Exact Bernoulli(:math:`\prod_j f(d_j)/f(0)`) per row of ``dependent`` (rows, k)."""
        return self.accept_ratio(rng, np.abs(dependent).sum(axis=-1))

    def float_log_ratio(self, s) -> np.ndarray:
        return -np.abs(s) / float(self.scale)


class DiscreteGaussianLaw:
    r"""Discrete Gaussian :math:`f(k) \propto e^{-k^2/(2\sigma^2)}`, :math:`\sigma` as a rational."""

    name = "discrete-gaussian"

    def __init__(self, sigma):
        self.sigma = as_rational(sigma, "sigma")
        self.sigma2 = self.sigma**2

    def sample(self, rng, size):
        return sample_discrete_gaussian(self.sigma, size, rng)

    def _accept_sq(self, rng, sq):
        p, q = self.sigma2.numerator, self.sigma2.denominator
        return _exp_neg_rational(rng, [int(v) * q for v in np.ravel(sq)], 2 * p).reshape(np.shape(sq))

    def accept_ratio(self, rng, s) -> np.ndarray:
        r"""Exact Bernoulli(:math:`e^{-s^2/(2\sigma^2)}`) per entry of s."""
        s = np.asarray(s, dtype=np.int64)
        return self._accept_sq(rng, s * s)

    def accept_sum(self, rng, dependent) -> np.ndarray:
        d = np.asarray(dependent, dtype=np.int64)
        return self._accept_sq(rng, (d * d).sum(axis=-1))

    def float_log_ratio(self, s) -> np.ndarray:
        s = np.asarray(s, dtype=float)
        return -(s * s) / (2.0 * float(self.sigma2))


# ---------------------------------------------------------------------------------------------
# exact Bernoulli(p) for p = exp(log p) known to arbitrary precision
# ---------------------------------------------------------------------------------------------
def bernoulli_exp(rng, log_p_float: np.ndarray, log_p_exact) -> np.ndarray:
    r"""Exact Bernoulli(:math:`p_i`) draws, :math:`p_i = e^{\ell_i} \le 1`.

    ``log_p_float`` are double-precision values of :math:`\ell_i` with absolute error below
    ``1e-6``; ``log_p_exact(i, prec)`` returns :math:`\ell_i` as a ``Decimal`` correct to within
    :math:`10^{-(prec-10)}`.  Lazy comparison (module docstring): decided in double precision
    unless the uniform falls within the error band, then decided with ``decimal`` arithmetic.
    """
    lp = np.asarray(log_p_float, dtype=float)
    j = rng.integers(0, 2**53, size=lp.shape, dtype=np.int64)
    lo = j.astype(float) * 2.0**-53
    hi = (j + 1).astype(float) * 2.0**-53
    with np.errstate(divide="ignore"):
        log_lo, log_hi = np.log(lo), np.log(hi)
    # U in [lo, hi): U < p surely if hi <= p; U >= p surely if lo >= p
    yes = log_hi < lp - _FLOAT_MARGIN
    no = log_lo > lp + _FLOAT_MARGIN
    out = yes.copy()
    for i in np.flatnonzero(~(yes | no)):
        out.flat[i] = _bernoulli_exp_exact(rng, int(j.flat[i]), lambda prec, i=i: log_p_exact(i, prec))
    return out


def _bernoulli_exp_exact(rng, j: int, log_p) -> bool:
    """Decide ``U < exp(log_p)`` for U uniform with first 53 bits ``j``, extending U's bits."""
    bits, num = 53, j
    prec = 40
    while True:
        with localcontext() as ctx:
            ctx.prec = prec
            lpd = log_p(prec)
            tol = Decimal(10) ** (-(prec - 12))
            p_lo = (lpd - tol).exp()
            p_hi = (lpd + tol).exp()
            scale = Decimal(2) ** bits
            u_lo = Decimal(num) / scale
            u_hi = Decimal(num + 1) / scale
            if u_hi <= p_lo:
                return True
            if u_lo >= p_hi:
                return False
        extra = 64
        num = (num << extra) | int(rng.integers(0, 2**63, dtype=np.int64)) << 1 | int(rng.integers(0, 2))
        bits += extra
        prec += 30


# ---------------------------------------------------------------------------------------------
# partitions
# ---------------------------------------------------------------------------------------------
def _group_layout(codes):
    codes = np.asarray(codes).ravel()
    _, codes = np.unique(codes, return_inverse=True)
    sizes = np.bincount(codes)
    order = np.argsort(codes, kind="stable")
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    return codes, sizes, order, starts


def _nb_log_ratio(T, M, k, b):
    """log[C(T+k-1,k-1)/C(M+k-1,k-1)] - (T-M)/b in double precision (arrays)."""
    return (gammaln(T + k) - gammaln(T + 1) - gammaln(M + k) + gammaln(M + 1)) - (T - M) / b


def _nb_log_ratio_exact(T: int, M: int, k: int, b: Fraction, prec: int) -> Decimal:
    with localcontext() as ctx:
        ctx.prec = prec + 20
        ln_c = Decimal(math.comb(T + k - 1, k - 1)).ln() - Decimal(math.comb(M + k - 1, k - 1)).ln()
        return ln_c - Decimal(T - M) * Decimal(b.denominator) / Decimal(b.numerator)


def _exact_mode(k: int, b: Fraction) -> int:
    """The negative binomial mode, with the comparison a < (t+1)/(t+k) made exactly when the
    double-precision margin is too small."""
    a = math.exp(-float(1 / b))

    def below(t):
        r = (t + 1) / (t + k)
        if abs(a - r) > 1e-12:
            return a < r
        with localcontext() as ctx:  # pragma: no cover - a within 1e-12 of a rational
            ctx.prec = 60
            ad = (-(Decimal(b.denominator) / Decimal(b.numerator))).exp()
            return ad < Decimal(t + 1) / Decimal(t + k)

    # the mode is the smallest t with below(t); start at the float guess and step to it
    t = max(0, int(math.floor((k - 1) * a / (1.0 - a))))
    while t > 0 and below(t - 1):
        t -= 1
    while not below(t):
        t += 1
    return t


def _partition_tasks(codes, size):
    """Layout of the groups and the pending (replicate, group) tasks of a partition sampler:
    ``(sizes, order, starts, shape, out, rep_ids, grp_ids)`` with ``out`` zeros of shape
    ``(replicates, n)`` (groups of one cell keep 0) and ``shape = size + (n,)``."""
    codes, sizes, order, starts = _group_layout(codes)
    size = size_tuple(size)
    reps = int(np.prod(size)) if size else 1
    out = np.zeros((reps, codes.size), dtype=np.int64)
    big = np.flatnonzero(sizes >= 2)
    return sizes, order, starts, size + (codes.size,), out, np.repeat(np.arange(reps), big.size), np.tile(big, reps)


def _uniform_composition(rng, total: int, k: int) -> np.ndarray:
    """A uniformly random composition of ``total`` into ``k`` non-negative parts (stars and
    bars: k - 1 distinct bar positions among total + k - 1, chosen uniformly)."""
    if k == 1:
        return np.array([total], dtype=np.int64)
    bars = np.sort(rng.choice(total + k - 1, size=k - 1, replace=False, shuffle=False)).astype(np.int64)
    edges = np.concatenate([[-1], bars, [total + k - 1]])
    return np.diff(edges) - 1


def sample_partition_double_geometric(rng, codes, scale, size=()) -> np.ndarray:
    r"""Exact draws of iid double geometric noise (scale :math:`b`) conditioned on every group's
    noise summing to zero (``codes[i]`` = group of cell i); shape ``size + (n,)``.

    The composition method of the module docstring; groups of one cell get 0.
    """
    rng = as_generator(rng)
    b = as_rational(scale, "scale")
    sizes, order, starts, shape, out, rep_ids, grp_ids = _partition_tasks(codes, size)
    bf = float(b)
    modes = {int(k): _exact_mode(int(k), b) for k in np.unique(sizes[grp_ids])}
    while rep_ids.size:
        ks = sizes[grp_ids]
        G = sample_geometric(b, int(ks.sum()), rng)
        bounds = np.concatenate([[0], np.cumsum(ks)])
        T = np.add.reduceat(G, bounds[:-1]) if G.size else np.zeros(0, dtype=np.int64)
        M = np.array([modes[int(k)] for k in ks], dtype=np.int64)
        lp = _nb_log_ratio(T.astype(float), M.astype(float), ks.astype(float), bf)

        def exact(i, prec, T=T, M=M, ks=ks):
            return _nb_log_ratio_exact(int(T[i]), int(M[i]), int(ks[i]), b, prec)

        keep = bernoulli_exp(rng, np.minimum(lp, 0.0), exact)
        for i in np.flatnonzero(keep):
            k, g, r = int(ks[i]), int(grp_ids[i]), int(rep_ids[i])
            Gi = G[bounds[i]:bounds[i + 1]]
            Hi = _uniform_composition(rng, int(T[i]), k)
            cells = order[starts[g]:starts[g] + k]
            out[r, cells] = Gi - Hi
        rep_ids, grp_ids = rep_ids[~keep], grp_ids[~keep]
    return out.reshape(shape)


def sample_partition_rejection(rng, codes, law, size=()) -> np.ndarray:
    r"""Exact draws of iid noise of ``law`` conditioned on zero group sums, by the
    one-dependent-cell rejection scheme of the module docstring (any law with its mode at 0)."""
    rng = as_generator(rng)
    sizes, order, starts, shape, out, rep_ids, grp_ids = _partition_tasks(codes, size)
    while rep_ids.size:
        ks = sizes[grp_ids] - 1
        draws = law.sample(rng, int(ks.sum()))
        bounds = np.concatenate([[0], np.cumsum(ks)])
        s = np.add.reduceat(draws, bounds[:-1])
        keep = law.accept_ratio(rng, s)
        for i in np.flatnonzero(keep):
            g, r = int(grp_ids[i]), int(rep_ids[i])
            cells = order[starts[g]:starts[g] + sizes[g]]
            out[r, cells[:-1]] = draws[bounds[i]:bounds[i + 1]]
            out[r, cells[-1]] = -s[i]
        rep_ids, grp_ids = rep_ids[~keep], grp_ids[~keep]
    return out.reshape(shape)


# ---------------------------------------------------------------------------------------------
# free cells
# ---------------------------------------------------------------------------------------------
class FreeCellRejection:
    r"""Exact rejection sampler on the lattice of a free-cell basis (module docstring).

    ``basis`` is an integer basis of L; :func:`free_cell_basis` changes it to free-cell
    coordinates (``ValueError`` if that is not possible).  :meth:`estimate_acceptance` runs a
    pilot of ``n`` proposals and returns the mean acceptance probability (double precision:
    used only to decide whether the exact path is affordable, never in the law).
    """

    def __init__(self, basis, law):
        Bf, F = free_cell_basis(np.asarray(basis, dtype=np.int64))
        if F is None:
            raise ValueError("the lattice basis has no free-cell form")
        self.basis = Bf
        self.free = F
        n = Bf.shape[0]
        self.dependent = np.setdiff1d(np.arange(n), F)
        self.law = law
        self._BD = Bf[self.dependent]  # (n - d, d)

    @property
    def n(self) -> int:
        return self.basis.shape[0]

    def _propose(self, rng, m):
        z = self.law.sample(rng, (m, self.basis.shape[1]))
        dep = z @ self._BD.T
        return z, dep

    def estimate_acceptance(self, rng, n: int = 2000) -> float:
        rng = as_generator(rng)
        _, dep = self._propose(rng, n)
        return float(np.mean(np.exp(self.law.float_log_ratio(dep).sum(axis=-1))))

    def sample(self, rng, size=(), batch: int = 256) -> np.ndarray:
        rng = as_generator(rng)
        size = size_tuple(size)
        m = int(np.prod(size)) if size else 1
        out = np.empty((m, self.n), dtype=np.int64)
        got = 0
        while got < m:
            z, dep = self._propose(rng, batch)
            keep = np.flatnonzero(self.law.accept_sum(rng, dep))[: m - got]
            if keep.size:
                out[got:got + keep.size, self.free] = z[keep]
                out[got:got + keep.size, self.dependent] = dep[keep]
                got += keep.size
        return out.reshape(size + (self.n,))


# ---------------------------------------------------------------------------------------------
class ExactSampler:
    """An exact sampler of a lattice mechanism's noise: ``sample(rng, size)`` and a description
    (``method``, ``expected_acceptance`` where it was estimated)."""

    def __init__(self, method: str, draw, expected_acceptance: float | None = None):
        self.method = method
        self._draw = draw
        self.expected_acceptance = expected_acceptance

    def sample(self, rng, size=()):
        return self._draw(as_generator(rng), size)

    def __repr__(self) -> str:  # pragma: no cover - cosmetic
        acc = "" if self.expected_acceptance is None else f", acceptance≈{self.expected_acceptance:.3g}"
        return f"ExactSampler({self.method}{acc})"


def exact_sampler(invariant, law, *, min_acceptance: float = 1e-3, rng=None) -> ExactSampler | None:
    """The exact sampler of ``law`` (a :class:`DoubleGeometricLaw` or :class:`DiscreteGaussianLaw`)
    on the lattice of ``invariant``, or ``None`` when none is affordable.

    Partitions: compositions (double geometric) or one-dependent-cell rejection (discrete
    Gaussian).  Otherwise free-cell rejection if the invariant's lattice basis has a free-cell
    form and the pilot acceptance (``rng`` seeds the pilot) is at least ``min_acceptance``.
    """
    if invariant.partition is not None:
        codes = invariant.partition.codes
        if isinstance(law, DoubleGeometricLaw):
            return ExactSampler("partition-compositions",
                                lambda rng, size: sample_partition_double_geometric(rng, codes, law.scale, size))
        return ExactSampler("partition-rejection", lambda rng, size: sample_partition_rejection(rng, codes, law, size))
    try:
        fcr = FreeCellRejection(invariant.lattice_basis(), law)
    except ValueError:
        return None
    acc = fcr.estimate_acceptance(as_generator(rng))
    if acc < min_acceptance:
        return None
    return ExactSampler("free-cell-rejection", fcr.sample, acc)
