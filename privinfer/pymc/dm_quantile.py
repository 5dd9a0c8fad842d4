r"""The Dirichlet-multinomial's randomized quantile map: cells of a fixed total as functions of
uniforms, by a binary tree of beta-binomial splits (a kernel piece of the walk's carried update,
:mod:`privinfer.pymc.walk_carry`).

For cells :math:`x_1, \dots, x_s` with :math:`x \sim \mathrm{DirMult}(n, \alpha)`, split the
index range in halves, recursively: at a node over the range :math:`[lo, hi)` with count
:math:`c` and halves :math:`[lo, mid)`, :math:`[mid, hi)`, the left half's count is
:math:`k \sim \mathrm{BetaBin}(c, a, b)`, :math:`a = \sum_{[lo, mid)} \alpha_i`, :math:`b =
\sum_{[mid, hi)} \alpha_i` (the Dirichlet-multinomial's aggregation property), and the product
of the nodes' beta-binomial probabilities is the Dirichlet-multinomial's (Mosimann 1962).  Each
node's randomized probability integral transform :math:`U = F(k - 1) + u\,p(k)`, :math:`u \sim
U(0, 1)`, is uniform on (0, 1) when ``k`` follows the node's law, and ``k`` is the quantile of
``U`` (the smallest ``k`` with :math:`F(k) > U`); so :math:`(x, u) \mapsto U` has Jacobian
:math:`\prod_{\mathrm{nodes}} p(k) = \mathrm{DirMult}(x \mid n, \alpha)` and holding the
uniforms while :math:`\alpha` moves is the non-centred parametrization of the cells
(Papaspiliopoulos, Roberts and Skold 2007) made exact for counts: a cell at 0 stays at 0 while
its expected count falls, where a translation of the lattice would take it below 0.

Each node's probabilities are computed by the ratio recurrence
:math:`p(k + 1)/p(k) = (c - k)(k + a)/((k + 1)(c - k - 1 + b))` outward from the mean (no
special functions), normalized by their sum; for a log-concave node (``a, b >= 1``) a side stops
once a term falls below :math:`10^{-20}` of the running sum (the mass left out is below
:math:`10^{-18}`); otherwise the whole support is summed.
"""

from __future__ import annotations

import numba
import numpy as np

__all__ = ["tree_cells", "tree_uniforms", "betabinom_quantile", "seed"]

#: A log-concave node's side stops at a term below this fraction of the running sum.
_CUT = 1e-20


@numba.njit(cache=True)
def seed(value):
    """Seed the compiled kernels' generator (the ``u`` of :func:`tree_uniforms`)."""
    np.random.seed(value)


@numba.njit(cache=True)
def _pmf(n, a, b, buf):
    r"""Unnormalized BetaBin(n, a, b) probabilities on a window ``[lo, hi]`` into ``buf``;
    returns ``(lo, hi, total)`` (module docstring)."""
    if n <= 0:
        buf[0] = 1.0
        return 0, 0, 1.0
    m = int(n * a / (a + b))
    m = min(max(m, 0), n)
    buf[m] = 1.0
    tot = 1.0
    cut = a >= 1.0 and b >= 1.0
    t = 1.0
    hi = m
    while hi < n:
        t *= (n - hi) * (hi + a) / ((hi + 1.0) * (n - hi - 1.0 + b))
        hi += 1
        buf[hi] = t
        tot += t
        if cut and t < _CUT * tot:
            break
    t = 1.0
    lo = m
    while lo > 0:
        t *= lo * (n - lo + b) / ((n - lo + 1.0) * (lo - 1.0 + a))
        lo -= 1
        buf[lo] = t
        tot += t
        if cut and t < _CUT * tot:
            break
    return lo, hi, tot


@numba.njit(cache=True)
def _find(buf, lo, hi, target):
    """The smallest ``k`` in ``[lo, hi]`` whose cumulative sum from ``lo`` exceeds ``target``
    (``hi`` if none)."""
    cum = 0.0
    for k in range(lo, hi + 1):
        cum += buf[k]
        if cum > target:
            return k
    return hi


@numba.njit(cache=True)
def _quantile(n, a, b, U, buf):
    lo, hi, tot = _pmf(n, a, b, buf)
    return _find(buf, lo, hi, U * tot)


@numba.njit(cache=True)
def _uniform(n, a, b, k, buf):
    r""":math:`U = F(k-1) + u\,p(k)`, ``u`` uniform, redrawn (at most 64 times) until
    :func:`_quantile` maps ``U`` back to ``k`` in floating point (a set of ``u`` of measure one
    less rounding)."""
    lo, hi, tot = _pmf(n, a, b, buf)
    if k < lo:
        return 0.0
    if k > hi:
        return 1.0
    F = 0.0
    for j in range(lo, k):
        F += buf[j]
    U = (F + 0.5 * buf[k]) / tot
    for _ in range(64):
        V = (F + np.random.random() * buf[k]) / tot
        if _find(buf, lo, hi, V * tot) == k:
            return V
    return U


@numba.njit(cache=True)
def _halves(lo, mid, hi, sidx, alpha):
    a = 0.0
    for i in range(lo, mid):
        a += alpha[sidx[i]]
    b = 0.0
    for i in range(mid, hi):
        b += alpha[sidx[i]]
    return a, b


@numba.njit(cache=True)
def tree_uniforms(xrow, sidx, ns, alpha, U, buf, stk):
    r"""The uniforms ``U[:ns - 1]`` of the tree's internal nodes (preorder) at the cells
    ``xrow[sidx[:ns]]`` and concentrations ``alpha[sidx[:ns]]`` (module docstring); ``buf``
    (at least the cells' total + 1) and ``stk`` ``(>= ns + 1, 3)`` int64 scratch."""
    top = 0
    stk[0, 0] = 0
    stk[0, 1] = ns
    node = 0
    while top >= 0:
        lo = stk[top, 0]
        hi = stk[top, 1]
        top -= 1
        if hi - lo < 2:
            continue
        mid = (lo + hi) // 2
        a, b = _halves(lo, mid, hi, sidx, alpha)
        k = 0
        for i in range(lo, mid):
            k += xrow[sidx[i]]
        c = k
        for i in range(mid, hi):
            c += xrow[sidx[i]]
        U[node] = _uniform(c, a, b, k, buf)
        node += 1
        top += 1
        stk[top, 0] = mid
        stk[top, 1] = hi
        top += 1
        stk[top, 0] = lo
        stk[top, 1] = mid


@numba.njit(cache=True)
def tree_cells(n, sidx, ns, alpha, U, out, buf, stk):
    r"""The cells ``out[sidx[:ns]]`` of total ``n`` whose tree uniforms are ``U`` (the inverse
    of :func:`tree_uniforms` at the same ``alpha``); scratch as there."""
    top = 0
    stk[0, 0] = 0
    stk[0, 1] = ns
    stk[0, 2] = n
    node = 0
    while top >= 0:
        lo = stk[top, 0]
        hi = stk[top, 1]
        c = stk[top, 2]
        top -= 1
        if hi - lo == 1:
            out[sidx[lo]] = c
            continue
        mid = (lo + hi) // 2
        a, b = _halves(lo, mid, hi, sidx, alpha)
        k = _quantile(c, a, b, U[node], buf)
        node += 1
        top += 1
        stk[top, 0] = mid
        stk[top, 1] = hi
        stk[top, 2] = c - k
        top += 1
        stk[top, 0] = lo
        stk[top, 1] = mid
        stk[top, 2] = k


def betabinom_quantile(n: int, a: float, b: float, U: float) -> int:
    """The quantile of ``U`` under BetaBin(n, a, b) as the tree computes it (module
    docstring)."""
    return int(_quantile(int(n), float(a), float(b), float(U), np.empty(int(n) + 1)))
