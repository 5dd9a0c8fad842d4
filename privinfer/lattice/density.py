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
* :class:`LinearQueries` -- :math:`T(v) = \sum_r g(r, (Av)_r)` for a sparse matrix
  :math:`A` (q x n) of linear queries, e.g. a hierarchy of noisy measurements
  :math:`g(r, s) = -(y_r - s)^2/(2\sigma_r^2)`.  The term keeps the running statistic
  :math:`s = Av` (q entries per state); a move on the cells ``idx`` changes only the rows of
  :math:`A` with a non-zero in those columns, so scoring it costs
  O(non-zeros of A in the touched columns), not O(q).
* :class:`WholeVector` -- :math:`T(v) = f(v)` evaluated on the whole vector (anything not
  local, e.g. a compiled PyMC log-density); exact, just not local.

For a move that changes the cells ``idx`` from ``old`` to ``new`` the change is

.. math:: \Delta\ell = \sum_{k:\,\text{separable}} \sum_{i\in idx}(c_k(i, new_i) - c_k(i, old_i))
          + \sum_{k:\,\text{outer}} (\mathrm{outer}_k(S_k + \Delta S_k) - \mathrm{outer}_k(S_k))
          + \sum_{k:\,\text{whole}} (f_k(v') - f_k(v)),

plus, for each :class:`LinearQueries` term, :math:`\sum_{r \in R}(g(r, s_r + (A\,\Delta v)_r) - g(r, s_r))`
over the rows ``R`` the touched cells enter.  So a state carries a statistic vector made of
one slot per CellSum and whole-vector term (``S_k`` for CellSums with an ``outer``, the
current value :math:`f_k(v)` for whole-vector terms, unused otherwise) and q slots per
LinearQueries term (:math:`Av`); :attr:`LocalLogDensity.stat_width` is its length.
:meth:`init_stat` computes it, :meth:`score` returns the change and the touched slots' new
values, :meth:`apply` writes them into chosen chains, and :meth:`delta` returns the change
and the whole statistics of the proposed states.

Shapes.  ``old`` and ``new`` have the touched cells on their last axis; leading axes are
chains and/or candidate values and broadcast (``new`` may have more leading axes than
``old``); ``idx`` holds the cell indices and broadcasts against them (a one-dimensional array of
distinct cells when the density has a :class:`LinearQueries` term); ``stat`` has the leading
shape of ``old`` plus one axis of length ``stat_width``.  Cell functions receive ``(idx, values)``
with ``idx`` broadcastable to ``values`` and return per-cell contributions of the same shape.

Support conditions (``C e = 0``, ``x >= 0``) are not part of a density: the moves keep the
first, the kernels check the second (``lower=``).
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np
import scipy.sparse as sp

__all__ = [
    "CellSum",
    "WholeVector",
    "LinearQueries",
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


class LinearQueries:
    r"""One term :math:`\sum_{r=1}^{q} g(r, (Av)_r)` over the answers of sparse linear queries.

    ``A`` is a (q x n) matrix (SciPy sparse or dense; integer entries are typical: 0/1 query
    matrices over a histogram) and ``row(r, s)`` the per-row contribution of the answer
    ``s`` of row ``r`` (``r`` broadcasts against ``s``).  The running statistic is
    :math:`s = Av` (q slots of the state's statistic vector).  A move that changes the cells
    ``idx`` by :math:`\Delta v` changes only the rows ``R`` where :math:`A_{R, idx} \ne 0`,
    by :math:`A_{R, idx}\Delta v`; scoring it reads the columns ``idx`` of ``A`` (stored in
    compressed-column form) and evaluates ``row`` on ``R`` only.
    """

    def __init__(self, A, row: Callable):
        A = sp.csc_matrix(A, dtype=float)
        A.sum_duplicates()
        A.eliminate_zeros()
        self.A = A
        self.row = row
        self._indptr = A.indptr
        self._indices = A.indices
        self._data = A.data

    @property
    def q(self) -> int:
        """Number of query rows (slots of the statistic)."""
        return int(self.A.shape[0])

    @property
    def n(self) -> int:
        return int(self.A.shape[1])

    def shifted(self, y, sign: int = -1) -> "LinearQueries":
        """The term as a function of x when it was written in ``u = y + sign * A x``
        (``sign=-1``: measurements ``y`` of the queries with noise ``u = y - A x``)."""
        y = np.asarray(y, dtype=float)
        if y.shape != (self.q,):
            raise ValueError(f"y must have one entry per query row ({self.q}), got shape {y.shape}")
        row = self.row
        A = self.A

        def shifted_row(r, s):
            return row(r, y[r] + sign * s)

        return LinearQueries(A, shifted_row)

    def answers(self, v) -> np.ndarray:
        """:math:`Av` for states ``v`` of shape ``(..., n)`` -> ``(..., q)``."""
        v = np.asarray(v, dtype=float)
        flat = v.reshape(-1, v.shape[-1])
        return np.asarray((self.A @ flat.T).T).reshape(v.shape[:-1] + (self.q,))

    def value(self, s) -> np.ndarray:
        r""":math:`\sum_r g(r, s_r)` for answers ``s`` of shape ``(..., q)``."""
        s = np.asarray(s, dtype=float)
        return np.sum(self.row(np.arange(self.q), s), axis=-1)

    def local_rows(self, idx):
        """``(R, M)``: the distinct rows ``R`` that the cells ``idx`` (1-d, distinct) enter
        and the block ``M = A[R, idx]`` (dense, ``len(R) x len(idx)``)."""
        idx = np.asarray(idx)
        if idx.ndim != 1:
            raise ValueError("a LinearQueries term scores moves given by a 1-d array of cells")
        ptr, ind, dat = self._indptr, self._indices, self._data
        lo, hi = ptr[idx], ptr[idx + 1]
        counts = hi - lo
        if counts.sum() == 0:
            return np.zeros(0, dtype=np.intp), np.zeros((0, idx.size))
        pos = np.concatenate([np.arange(a, b) for a, b in zip(lo, hi)])
        rows = ind[pos]
        cols = np.repeat(np.arange(idx.size), counts)
        R, inv = np.unique(rows, return_inverse=True)
        M = np.zeros((R.size, idx.size))
        np.add.at(M, (inv.ravel(), cols), dat[pos])
        return R, M

    def move_effects(self, cells, val):
        r"""``(rows, coef)`` of the moves :math:`\sum_j val_j e_{cells_{p,j}}` for ``cells``
        (P, w) and ``val`` (w,): the rows where :math:`A` times the move is non-zero and its
        entries, padded to (P, K) with ``coef = 0`` (rows whose contributions cancel -- a
        pair inside one county for the county total -- are left out: the move does not
        change them)."""
        cells = np.asarray(cells)
        P, width = cells.shape
        ptr, ind, dat = self._indptr, self._indices, self._data
        flat = cells.reshape(-1)
        sign = np.tile(np.asarray(val, dtype=float), P)
        cnt = ptr[flat + 1] - ptr[flat]
        owner = np.repeat(np.arange(width * P), cnt)
        pos = np.repeat(ptr[flat], cnt) + (np.arange(cnt.sum()) - np.repeat(np.cumsum(cnt) - cnt, cnt))
        key = (owner // width).astype(np.int64) * self.q + ind[pos]
        uk, inv = np.unique(key, return_inverse=True)
        c = np.bincount(inv.ravel(), weights=dat[pos] * sign[owner], minlength=uk.size)
        keep = c != 0
        uk, c = uk[keep], c[keep]
        kp, kr = uk // self.q, uk % self.q
        per = np.bincount(kp, minlength=P)
        K = max(int(per.max()) if per.size else 0, 1)
        rank = np.arange(uk.size) - np.repeat(np.cumsum(per) - per, per)
        rows = np.zeros((P, K), dtype=np.int64)
        coef = np.zeros((P, K))
        rows[kp, rank] = kr
        coef[kp, rank] = c
        return rows, coef

    def pair_effects(self, pairs):
        """:meth:`move_effects` of the pair moves :math:`e_i - e_j` (``pairs`` (P, 2))."""
        return self.move_effects(pairs, (1, -1))


_TERMS = (CellSum, WholeVector, LinearQueries)


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
            if not isinstance(t, _TERMS):
                raise TypeError("terms must be CellSum, LinearQueries or WholeVector objects")
        ns = {t.n for t in terms if isinstance(t, LinearQueries)}
        if len(ns) > 1:
            raise ValueError(f"LinearQueries terms act on vectors of different lengths {sorted(ns)}")
        self.terms = terms
        # statistic layout: one slot per CellSum / WholeVector, q slots per LinearQueries
        widths = [t.q if isinstance(t, LinearQueries) else 1 for t in terms]
        self._offsets = np.concatenate([[0], np.cumsum(widths)]).astype(np.int64) if terms else np.zeros(1, np.int64)

    # -- structure ---------------------------------------------------------------------
    @property
    def n_terms(self) -> int:
        return len(self.terms)

    @property
    def stat_width(self) -> int:
        """Length of a state's statistic vector (see the module docstring)."""
        return int(self._offsets[-1])

    def slot_offset(self, k: int) -> int:
        """First statistic slot of term ``k``."""
        return int(self._offsets[k])

    @property
    def separable(self) -> bool:
        """True when the log-density is a plain sum of per-cell terms: moves on disjoint
        cells then have independent acceptance ratios and may be scored in one batch."""
        return all(isinstance(t, CellSum) and t.outer is None for t in self.terms)

    @property
    def is_local(self) -> bool:
        """True when no term needs the whole vector."""
        return all(isinstance(t, (CellSum, LinearQueries)) for t in self.terms)

    @property
    def pair_batchable(self) -> bool:
        """True when every term is a plain cell sum or a :class:`LinearQueries` term: moves
        that touch disjoint cells and disjoint query rows then have independent acceptance
        ratios and may be scored in one batch (:meth:`move_effects`, :meth:`score_moves`)."""
        return all((isinstance(t, CellSum) and t.outer is None) or isinstance(t, LinearQueries)
                   for t in self.terms)

    def move_effects(self, cells, val):
        """For the moves ``sum_j val_j e_{cells[p, j]}`` (``cells`` (P, w)): ``(effects, slots)``
        with ``effects`` a list of ``(k, rows, coef)`` per :class:`LinearQueries` term ``k``
        (:meth:`LinearQueries.move_effects`) and ``slots`` (P, K) the statistic slots each
        move changes (``-1`` for padding)."""
        effects, slots = [], []
        for k, t in enumerate(self.terms):
            if isinstance(t, LinearQueries):
                rows, coef = t.move_effects(cells, val)
                effects.append((k, rows, coef))
                slots.append(np.where(coef != 0, rows + self._offsets[k], -1))
        P = np.asarray(cells).shape[0]
        return effects, (np.concatenate(slots, axis=1) if slots else np.full((P, 1), -1, dtype=np.int64))

    def score_moves(self, cells, old, zeta, stat, effects, val):
        r"""``(dl, new_answers)`` for the moves :math:`v + \zeta \sum_j val_j e_{cells_{p,j}}`:
        ``cells`` (P, w) on disjoint cells and query rows, ``old`` (m, P, w) their current
        values, ``zeta`` (m, P), ``stat`` (m, stat_width), ``effects`` from
        :meth:`move_effects` (for these moves).  ``dl`` is (m, P); ``new_answers`` lists
        (m, P, K) per LinearQueries term."""
        new = old + zeta[..., None] * np.asarray(val, dtype=np.int64)
        dl = np.zeros(zeta.shape)
        for t in self.terms:
            if isinstance(t, CellSum):
                dl = dl + (np.sum(t.cell(cells, new), axis=-1) - np.sum(t.cell(cells, old), axis=-1))
        answers = []
        for k, rows, coef in effects:
            t = self.terms[k]
            s_old = stat[:, self._offsets[k] + rows]
            s_new = s_old + zeta[..., None] * coef
            with np.errstate(invalid="ignore"):
                dl = dl + np.sum(t.row(rows, s_new) - t.row(rows, s_old), axis=-1)
            answers.append(s_new)
        return dl, answers

    def __add__(self, other: "LocalLogDensity") -> "LocalLogDensity":
        return LocalLogDensity(self.terms + other.terms)

    def jump_scale(self, l1, sq, dim):
        """Default double-geometric jump scale along moves with l1 norms ``l1`` and squared
        l2 norms ``sq`` on a ``dim``-dimensional lattice (1 unless a subclass knows better)."""
        return np.maximum(np.ones_like(np.asarray(l1, dtype=float)), 0.5)

    # -- evaluation --------------------------------------------------------------------
    def init_stat(self, v) -> np.ndarray:
        """Statistics of the states ``v`` (shape ``(..., n)``) -> ``(..., stat_width)``."""
        v = np.asarray(v)
        lead = v.shape[:-1]
        stat = np.zeros(lead + (self.stat_width,))
        idx = np.arange(v.shape[-1])
        for k, t in enumerate(self.terms):
            o = self._offsets[k]
            if isinstance(t, CellSum):
                if t.outer is not None:
                    stat[..., o] = np.sum(t.cell(idx, v), axis=-1)
            elif isinstance(t, LinearQueries):
                stat[..., o:o + t.q] = t.answers(v)
            else:
                flat = v.reshape(-1, v.shape[-1])
                stat[..., o] = np.array([float(t.fn(row)) for row in flat]).reshape(lead)
        return stat

    def logp(self, v):
        r""":math:`\ell(v)` from scratch (tests, baselines); ``v`` of shape ``(..., n)``."""
        v = np.asarray(v)
        idx = np.arange(v.shape[-1])
        out = np.zeros(v.shape[:-1])
        for t in self.terms:
            if isinstance(t, CellSum):
                S = np.sum(t.cell(idx, v), axis=-1)
                out = out + (S if t.outer is None else t.outer(S))
            elif isinstance(t, LinearQueries):
                out = out + t.value(t.answers(v))
            else:
                flat = v.reshape(-1, v.shape[-1])
                out = out + np.array([float(t.fn(row)) for row in flat]).reshape(v.shape[:-1])
        return out

    def score(self, idx, old, new, stat, state=None):
        r"""``(dl, update)`` for moving the cells ``idx`` from ``old`` to ``new``.

        ``dl`` has the leading shape of the proposals; ``update`` lists ``(slots, values)``:
        the statistic slots that change and their new values (leading shape of the proposals
        plus ``len(slots)``).  Only the touched slots are read and written, so a move costs
        O(touched cells and query rows).  ``state`` is the current whole vector ``(n,)`` --
        needed only by whole-vector terms (then ``old`` must be one vector of touched values
        and ``new`` may carry leading candidate axes).
        """
        new = np.asarray(new)
        old = np.asarray(old)
        stat = np.asarray(stat)
        lead = np.broadcast_shapes(new.shape[:-1], old.shape[:-1], stat.shape[:-1])
        dl = np.zeros(lead)
        update = []
        for k, t in enumerate(self.terms):
            o = int(self._offsets[k])
            if isinstance(t, CellSum):
                d = np.sum(t.cell(idx, new), axis=-1) - np.sum(t.cell(idx, old), axis=-1)
                if t.outer is None:
                    dl = dl + d
                else:
                    S = stat[..., o]
                    S_new = S + d
                    with np.errstate(invalid="ignore"):
                        dl = dl + (t.outer(S_new) - t.outer(S))
                    update.append((np.array([o]), np.broadcast_to(S_new, lead)[..., None]))
            elif isinstance(t, LinearQueries):
                R, M = t.local_rows(idx)
                if R.size == 0:
                    continue
                dv = (new - old).astype(float)
                s_old = stat[..., o + R]
                s_new = s_old + dv @ M.T
                with np.errstate(invalid="ignore"):
                    dl = dl + (np.sum(t.row(R, s_new), axis=-1) - np.sum(t.row(R, s_old), axis=-1))
                update.append((o + R, np.broadcast_to(s_new, lead + (R.size,))))
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
                dl = dl + (vals - np.broadcast_to(stat[..., o], lead))
                update.append((np.array([o]), vals[..., None]))
        return dl, update

    @staticmethod
    def apply(stat, update, where=(), chains=None) -> None:
        """Write the new slot values of ``update`` (from :meth:`score`) into ``stat`` in place:
        ``stat[chains, slots] = values[where]`` (``chains=None``: ``stat`` is one vector)."""
        for slots, values in update:
            vals = values[where]
            if chains is None:
                stat[slots] = vals
            else:
                stat[np.ix_(np.atleast_1d(chains), slots)] = vals

    def delta(self, idx, old, new, stat, state=None):
        r"""``(dl, new_stat)`` for moving the cells ``idx`` from ``old`` to ``new``: :meth:`score`
        with the whole statistics of the proposed states (leading shape of the proposals plus
        ``stat_width``)."""
        dl, update = self.score(idx, old, new, stat, state)
        new_stat = np.array(np.broadcast_to(stat, dl.shape + (self.stat_width,)), dtype=float)
        for slots, values in update:
            new_stat[..., slots] = values
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
