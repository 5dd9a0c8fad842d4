r"""The one encoding of "how much does the log-density change when a move touches a few cells".

Every lattice kernel (the curator's noise sampler, the analyst's posterior steps, the coupled
kernels) scores a proposal through a :class:`LocalLogDensity`:

.. math:: \ell(v) = \sum_k T_k(v),

a sum of terms of two kinds:

* :class:`CellSum` -- :math:`T(v) = \mathrm{outer}(S(v))` with :math:`S(v) = \sum_i c(i, v_i)`;
  ``outer`` the identity when ``None`` (then the term is *separable*: a sum over cells).
  Examples: the l1 generalized Laplace :math:`c(i, e) = -\lambda|e|`; the discrete Gaussian
  :math:`c(i, e) = -e^2/(2\sigma^2)`; the l2 generalized Laplace :math:`c(i, e) = e^2`,
  :math:`\mathrm{outer}(S) = -\lambda\sqrt S`; a Poisson prior
  :math:`c(i, x) = x\log\mu_i - \mu_i - \log x!`; a release :math:`y` observed through a
  mechanism whose noise density is a CellSum in :math:`e = y - x`.
* :class:`WholeVector` -- :math:`T(v) = f(v)` evaluated on the whole vector (anything not
  local, e.g. a compiled PyMC log-density); exact, just not local.

For a move that changes the cells ``idx`` from ``old`` to ``new`` the change is

.. math:: \Delta\ell = \sum_{k:\,\text{separable}} \sum_{i\in idx}(c_k(i, new_i) - c_k(i, old_i))
          + \sum_{k:\,\text{outer}} (\mathrm{outer}_k(S_k + \Delta S_k) - \mathrm{outer}_k(S_k))
          + \sum_{k:\,\text{whole}} (f_k(v') - f_k(v)),

so a state carries one statistic per term (``S_k`` for CellSums with an ``outer``, the current
value :math:`f_k(v)` for whole-vector terms, unused otherwise) -- :meth:`init_stat` computes
them, :meth:`delta` returns the change and the statistics of the proposed states.

Shapes.  ``old`` and ``new`` have the touched cells on their last axis; leading axes are
chains and/or candidate values and broadcast (``new`` may have more leading axes than
``old``); ``idx`` holds the cell indices and broadcasts against them; ``stat`` has the leading
shape of ``old`` plus one axis of length ``n_terms``.  Cell functions receive ``(idx, values)``
with ``idx`` broadcastable to ``values`` and return per-cell contributions of the same shape.

Support conditions (``C e = 0``, ``x >= 0``) are not part of a density: the moves keep the
first, the kernels check the second (``lower=``).
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

__all__ = [
    "CellSum",
    "WholeVector",
    "LocalLogDensity",
    "L1Target",
    "L2Target",
    "GaussianTarget",
]


class CellSum:
    """One term :math:`\\mathrm{outer}(\\sum_i c(i, v_i))` (``outer=None``: the identity).

    ``grid(idx, start, width)``, optional, returns the cell values on runs of consecutive
    integers -- ``c(idx[k], start[k] + j)`` for ``j < width``, shape ``(len(idx), width)`` --
    faster than ``cell`` where a recurrence applies (log-factorials); :meth:`table` uses it.
    """

    def __init__(self, cell: Callable, outer: Callable | None = None, grid: Callable | None = None):
        self.cell = cell
        self.outer = outer
        self.grid = grid

    def table(self, idx, start, width: int) -> np.ndarray:
        """``c(idx[k], start[k] + j)`` for ``j = 0..width-1``: shape ``(len(idx), width)``."""
        idx = np.asarray(idx)
        start = np.asarray(start, dtype=np.int64)
        if self.grid is not None:
            return self.grid(idx, start, int(width))
        return self.cell(idx[:, None], start[:, None] + np.arange(int(width)))

    def shifted(self, y, sign: int = -1) -> "CellSum":
        """The term as a function of x when it was written in ``e = y + sign * x``
        (``sign=-1``: a release ``y`` observed with noise ``e = y - x``)."""
        y = np.asarray(y)
        cell = self.cell

        def shifted_cell(idx, v):
            return cell(idx, y[idx] + sign * v)

        return CellSum(shifted_cell, self.outer)


class WholeVector:
    """A non-local term ``f(v)`` evaluated on the whole vector ``v`` (shape ``(n,)``)."""

    def __init__(self, fn: Callable[[np.ndarray], float]):
        self.fn = fn


class LocalLogDensity:
    r"""A log-density known up to a constant, as a sum of local and whole-vector terms
    (see the module docstring).

    Subclasses may set :attr:`pair_scale_cap` and override :meth:`jump_scale` to give the
    kernels a jump scale matched to their spread.
    """

    #: upper bound on the default jump scale of pair moves (None: no cap)
    pair_scale_cap: float | None = None

    def __init__(self, terms):
        terms = list(terms)
        for t in terms:
            if not isinstance(t, (CellSum, WholeVector)):
                raise TypeError("terms must be CellSum or WholeVector objects")
        self.terms = terms

    # -- structure ---------------------------------------------------------------------
    @property
    def n_terms(self) -> int:
        return len(self.terms)

    @property
    def separable(self) -> bool:
        """True when the log-density is a plain sum of per-cell terms: moves on disjoint
        cells then have independent acceptance ratios and may be scored in one batch."""
        return all(isinstance(t, CellSum) and t.outer is None for t in self.terms)

    @property
    def is_local(self) -> bool:
        """True when no term needs the whole vector."""
        return all(isinstance(t, CellSum) for t in self.terms)

    def __add__(self, other: "LocalLogDensity") -> "LocalLogDensity":
        return LocalLogDensity(self.terms + other.terms)

    def jump_scale(self, l1, sq, dim):
        """Default double-geometric jump scale along moves with l1 norms ``l1`` and squared
        l2 norms ``sq`` on a ``dim``-dimensional lattice (1 unless a subclass knows better)."""
        return np.maximum(np.ones_like(np.asarray(l1, dtype=float)), 0.5)

    # -- evaluation --------------------------------------------------------------------
    def init_stat(self, v) -> np.ndarray:
        """Statistics of the states ``v`` (shape ``(..., n)``) -> ``(..., n_terms)``."""
        v = np.asarray(v)
        lead = v.shape[:-1]
        stat = np.zeros(lead + (self.n_terms,))
        idx = np.arange(v.shape[-1])
        for k, t in enumerate(self.terms):
            if isinstance(t, CellSum):
                if t.outer is not None:
                    stat[..., k] = np.sum(t.cell(idx, v), axis=-1)
            else:
                flat = v.reshape(-1, v.shape[-1])
                stat[..., k] = np.array([float(t.fn(row)) for row in flat]).reshape(lead)
        return stat

    def logp(self, v):
        """:math:`\\ell(v)` from scratch (tests, baselines); ``v`` of shape ``(..., n)``."""
        v = np.asarray(v)
        idx = np.arange(v.shape[-1])
        out = np.zeros(v.shape[:-1])
        for t in self.terms:
            if isinstance(t, CellSum):
                S = np.sum(t.cell(idx, v), axis=-1)
                out = out + (S if t.outer is None else t.outer(S))
            else:
                flat = v.reshape(-1, v.shape[-1])
                out = out + np.array([float(t.fn(row)) for row in flat]).reshape(v.shape[:-1])
        return out

    def delta(self, idx, old, new, stat, state=None):
        r"""``(dl, new_stat)`` for moving the cells ``idx`` from ``old`` to ``new``.

        ``state`` is the current whole vector ``(n,)`` -- needed only by whole-vector terms
        (then ``old`` must be one vector of touched values and ``new`` may carry leading
        candidate axes).
        """
        new = np.asarray(new)
        old = np.asarray(old)
        lead = np.broadcast_shapes(new.shape[:-1], old.shape[:-1], np.shape(stat)[:-1])
        dl = np.zeros(lead)
        new_stat = np.array(np.broadcast_to(stat, lead + (self.n_terms,)), dtype=float)
        for k, t in enumerate(self.terms):
            if isinstance(t, CellSum):
                d = np.sum(t.cell(idx, new), axis=-1) - np.sum(t.cell(idx, old), axis=-1)
                if t.outer is None:
                    dl = dl + d
                else:
                    S = new_stat[..., k]
                    S_new = S + d
                    with np.errstate(invalid="ignore"):
                        dl = dl + (t.outer(S_new) - t.outer(S))
                    new_stat[..., k] = S_new
            else:
                if state is None:
                    raise ValueError("a whole-vector term needs the current state to score a move")
                base = np.asarray(state)
                flat = np.broadcast_to(new, lead + new.shape[-1:]).reshape(-1, new.shape[-1])
                vals = np.empty(flat.shape[0])
                for r, row in enumerate(flat):
                    v = base.copy()
                    v[idx] = row
                    vals[r] = float(t.fn(v))
                vals = vals.reshape(lead)
                dl = dl + (vals - new_stat[..., k])
                new_stat[..., k] = vals
        return dl, new_stat


# ---------------------------------------------------------------------------------------------
# the noise laws of the lattice mechanisms (Integer subspace DP, Sec. 3-4)
# ---------------------------------------------------------------------------------------------
def _check_rate(rate, name="rate") -> float:
    r = float(rate)
    if not (r > 0 and math.isfinite(r)):
        raise ValueError(f"{name} must be a finite number > 0")
    return r


class L1Target(LocalLogDensity):
    r"""Generalized Laplace with the l1 norm, :math:`\ell(e) = -\lambda\|e\|_1` (separable).

    Default jump scale along a move b: the log-density changes by up to
    :math:`\lambda\|b\|_1` per unit step, about half that when half the touched cells move
    towards 0, so :math:`s = 2/(\lambda\|b\|_1)` (at least 0.5).  Pair moves cap it at 0.6
    (coupling-friendly; see :class:`~privinfer.lattice.moves.PairMoves`).
    """

    pair_scale_cap = 0.6

    def __init__(self, rate: float):
        self.rate = _check_rate(rate)
        r = self.rate
        super().__init__([CellSum(lambda idx, e: -r * np.abs(e))])

    def jump_scale(self, l1, sq, dim):
        return np.maximum(2.0 / (self.rate * np.asarray(l1, dtype=float)), 0.5)


class L2Target(LocalLogDensity):
    r"""Generalized Laplace with the l2 norm, :math:`\ell(e) = -\lambda\|e\|_2`:
    :math:`c(e) = e^2`, :math:`\mathrm{outer}(S) = -\lambda\sqrt S` (statistic :math:`S = \|e\|^2`).

    Default jump scale: :math:`\|e\|` is typically :math:`d/\lambda` (radial law Gamma(d)) and
    :math:`\|e + \zeta b\| - \|e\| \approx \zeta^2\|b\|^2/(2\|e\|)` away from the radial
    direction, so the conditional scale is :math:`\sqrt d/(\lambda\|b\|)` (at least 0.5).
    """

    def __init__(self, rate: float):
        self.rate = _check_rate(rate)
        r = self.rate
        super().__init__([CellSum(lambda idx, e: np.square(np.asarray(e, dtype=float)),
                                  outer=lambda S: -r * np.sqrt(S))])

    def jump_scale(self, l1, sq, dim):
        return np.maximum(np.sqrt(dim) / (self.rate * np.sqrt(np.asarray(sq, dtype=float))), 0.5)


class GaussianTarget(LocalLogDensity):
    r"""Discrete Gaussian, :math:`\ell(e) = -\|e\|_2^2/(2\sigma^2)` (separable).  Default jump
    scale along b: the conditional sd :math:`\sigma/\|b\|` (at least 0.5)."""

    def __init__(self, sigma: float):
        self.sigma = _check_rate(sigma, "sigma")
        c = 1.0 / (2.0 * self.sigma**2)
        super().__init__([CellSum(lambda idx, e: -c * np.square(np.asarray(e, dtype=float)))])

    def jump_scale(self, l1, sq, dim):
        return np.maximum(self.sigma / np.sqrt(np.asarray(sq, dtype=float)), 0.5)
