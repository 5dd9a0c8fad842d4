r"""Block updates of independent integer cells conditioned on their group sums.

The analyst's posterior of counts ``x`` under a partition invariant (state totals of
counties, margins of one group) with a separable log-density

.. math:: \log \pi(x) = \sum_i w_i(x_i) + \text{const}, \qquad
          \sum_{i \in g} x_i = t_g \ \ (g = 1..G), \qquad x_i \ge \text{lower},

(independent cell priors -- Poisson, negative binomial, ... -- times a separable noise
density such as the double geometric / l1 generalized Laplace of Integer subspace DP, Sec. 4,
or the discrete Gaussian) factorizes over groups, and within a group the cells are
independent *given their sum*.  This module draws a whole group at once from (almost) that
conditional law and corrects the remainder with one Metropolis--Hastings test, so the update
is exact.

Windows
    Each cell's weight :math:`w_i` is assumed unimodal (true for log-concave priors and noise
    laws: Poisson, negative binomial, binomial, double geometric, discrete Gaussian).  Its
    mode is found by bisection on the sign of :math:`w_i(v+1) - w_i(v)`, and its *window*
    is the integer interval where :math:`w_i \ge \max w_i - L` (``log_drop = L``, default
    18 nats, :math:`e^{-18} \approx 1.5\cdot 10^{-8}`).  For a log-concave weight the mass
    beyond the window is at most :math:`e^{-L}\,/(1 - e^{-s})` times the mode's, ``s`` the
    slope at the window's end.  Windows depend on the weights only (on the parameters of
    the prior and on the data), never on the current state.

Forward filtering, backward sampling on a tree
    The cells of a group are the leaves of a balanced binary tree.  Each node carries the
    probability table of the sum of its leaves, the convolution of its children's tables
    (FFT in single precision; entries below ``1e-6`` of the node's maximum -- above the
    round-off, about ``1e-7`` of the maximum -- are set to zero and the table is trimmed).  The
    root's value is the group total :math:`t_g`; going down, each node's value is split
    between its children with probability

    .. math:: P(s_l \mid s) = \frac{p_l(s_l)\, p_r(s - s_l)}{\sum_u p_l(u)\, p_r(s - u)},

    computed exactly from the children's tables.  With untruncated tables this is exactly
    the conditional law of the cells given their sum (forward filtering / backward sampling
    over partial sums, arranged as a tree so that a group of n cells costs
    :math:`O(\log n)` vectorized passes instead of n sequential ones).

Exactness
    The truncations make the proposal law :math:`q` differ from the conditional law by at
    most the dropped mass.  :math:`q(x)` is computed for both the proposed and the current
    state (the product of the split probabilities above), and the group's move is accepted
    with probability

    .. math:: \min\Big(1, \frac{\pi(x')\, q(x)}{\pi(x)\, q(x')}\Big),

    an independence Metropolis--Hastings test (Tierney 1994), so :math:`\pi` is the exact
    stationary law whatever the truncation; the acceptance rate, reported, is
    :math:`1 - O(\text{dropped mass})`.  A current state outside the windows has
    :math:`q(x) = 0` and is kept; pairing the block update with a local lattice sweep keeps
    the chain irreducible.

Without the test (:meth:`GroupSumSampler.sample` on its own, e.g. for prior predictive
draws) the draw is exact up to the dropped mass, which :meth:`GroupSumSampler.sample`
reports as the windows' ``log_drop`` and the table threshold.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view
from scipy import fft as _fft

from .density import CellSum, LocalLogDensity
from .kernels import LatticeState

__all__ = [
    "GroupTree",
    "unimodal_windows",
    "GroupSumSampler",
    "BlockInfo",
    "block_kernel",
    "separable_cell_logp",
    "SeparableCells",
]

#: default window depth in nats (e^-18 ~ 1.5e-8 of the mode's mass per cell)
LOG_DROP = 18.0
#: table entries below this fraction of their node's maximum are set to zero
TABLE_FLOOR = 1e-6


class GroupTree:
    """A balanced binary tree over the cells of each group of a partition.

    Built once per partition.  ``order`` lists the cells group by group (the leaves);
    ``levels[k] = (left, right)`` gives, for the nodes of level ``k + 1``, their children at
    level ``k`` (``right == -1``: the node passes its only child up unchanged);
    ``roots[g]`` is group ``g``'s node at the top level.
    """

    def __init__(self, codes):
        codes = np.asarray(codes)
        if codes.ndim != 1 or codes.size == 0:
            raise ValueError("codes must be a non-empty vector of group indices")
        if codes.dtype.kind not in "iu" or np.any(codes < 0):
            raise ValueError("codes must be non-negative integers (group of each cell)")
        codes = codes.astype(np.int64)
        self.n = int(codes.size)
        self.n_groups = int(codes.max()) + 1
        sizes = np.bincount(codes, minlength=self.n_groups)
        if np.any(sizes == 0):
            raise ValueError("every group must hold at least one cell")
        self.sizes = sizes
        #: group of each cell (cell order)
        self.codes = codes
        self.order = np.argsort(codes, kind="stable")
        group = codes[self.order]
        self.leaf_group = group
        self.levels: list[tuple[np.ndarray, np.ndarray]] = []
        self.level_groups = [group]
        while group.size > self.n_groups:
            m = group.size
            idx = np.arange(m)
            start = np.r_[True, group[1:] != group[:-1]]
            first = np.maximum.accumulate(np.where(start, idx, 0))
            rank = idx - first
            left = idx[rank % 2 == 0]
            nxt = left + 1
            pair = (nxt < m) & (group[np.minimum(nxt, m - 1)] == group[left])
            right = np.where(pair, nxt, -1)
            self.levels.append((left, right))
            group = group[left]
            self.level_groups.append(group)
        # the top level holds exactly one node per group, in group order
        self.roots = np.arange(self.n_groups)

    @property
    def depth(self) -> int:
        return len(self.levels)


def separable_cell_logp(density: LocalLogDensity) -> Callable:
    """``(idx, v) -> sum_k c_k(idx, v)``: the per-cell log-density of a separable density
    (its :meth:`table` method evaluates runs of consecutive values)."""
    if not density.separable:
        raise ValueError("the density is not separable over cells (a term has an outer function or "
                         "needs the whole vector): block updates do not apply")
    terms = [t for t in density.terms if isinstance(t, CellSum)]
    return SeparableCells(terms)


class SeparableCells:
    """The per-cell log-density ``sum_k c_k(i, v)`` of separable terms: call it as
    ``(idx, v) -> values``; :meth:`table` evaluates runs of consecutive values."""

    def __init__(self, terms):
        self.terms = list(terms)

    def __call__(self, idx, v):
        v = np.asarray(v)
        out = np.zeros(np.broadcast_shapes(np.shape(idx), v.shape))
        for t in self.terms:
            out = out + t.cell(idx, v)
        return out

    def table(self, idx, start, width):
        out = np.zeros((len(idx), int(width)))
        for t in self.terms:
            out += t.table(idx, start, width)
        return out


def _bisect_mode(f, lo, hi):
    """Smallest v in [lo, hi] with f(v+1) <= f(v) (the mode of a unimodal f), per cell."""
    lo, hi = lo.copy(), hi.copy()
    while True:
        active = lo < hi
        if not active.any():
            return lo
        mid = lo + (hi - lo) // 2
        up = f(mid + 1) > f(mid)
        up &= active
        lo = np.where(up, mid + 1, lo)
        hi = np.where(active & ~up, mid, hi)


def _bisect_edge(f, lo, hi, thr, left: bool):
    """Left: smallest v in [lo, hi] with f(v) >= thr; right: largest such v (f unimodal, the
    mode inside [lo, hi] on the side that satisfies it)."""
    lo, hi = lo.copy(), hi.copy()
    while True:
        active = lo < hi
        if not active.any():
            return lo
        if left:
            mid = lo + (hi - lo) // 2
            ok = f(mid) >= thr
            hi = np.where(active & ok, mid, hi)
            lo = np.where(active & ~ok, mid + 1, lo)
        else:
            mid = hi - (hi - lo) // 2
            ok = f(mid) >= thr
            lo = np.where(active & ok, mid, lo)
            hi = np.where(active & ~ok, mid - 1, hi)


def _bracket(f, start, step_sign):
    """Double the step from ``start`` in the direction where f increases, until it does not
    (for unbounded cells): returns (a, b) with the mode in [a, b]."""
    a = start.copy()
    b = start.copy()
    step = np.ones_like(start)
    moving = np.ones(start.shape, dtype=bool)
    for _ in range(62):
        if not moving.any():
            break
        nxt = b + step_sign * step
        inc = (f(nxt) > f(b)) & moving
        a = np.where(inc, b, a)
        b = np.where(inc, nxt, b)
        # one step past the last increase bounds the mode
        b = np.where(moving & ~inc, nxt, b)
        moving &= inc
        step = step * 2
    if moving.any():
        raise ValueError("could not bracket the mode of a cell's log-density (is it unimodal and proper?)")
    lo = np.minimum(a, b)
    hi = np.maximum(a, b)
    return lo, hi


def unimodal_windows(cell_logp: Callable, n: int, lower=None, upper=None, *,
                     log_drop: float = LOG_DROP, max_width: int = 4096):
    """Per-cell windows ``[lo, hi]`` where ``w_i >= max w_i - log_drop`` (see module docstring).

    ``cell_logp(idx, v)`` scores cells ``idx`` at values ``v``; ``lower`` / ``upper`` bound the
    cells (scalars or per-cell arrays; ``None``: unbounded).  Windows wider than ``max_width``
    are cut to ``max_width`` values centred on the mode (the cut mass is then not below
    ``e^-log_drop``; the Metropolis--Hastings test keeps block updates exact, and the returned
    ``capped`` count says how many cells were cut).

    Returns ``(lo, hi, mode, capped)``.
    """
    if not (np.isfinite(log_drop) and log_drop > 0):
        raise ValueError("log_drop must be a finite number > 0")
    idx = np.arange(n)

    def f(v):
        return cell_logp(idx, v)

    lo_b = None if lower is None else np.broadcast_to(np.asarray(lower, dtype=np.int64), (n,)).copy()
    hi_b = None if upper is None else np.broadcast_to(np.asarray(upper, dtype=np.int64), (n,)).copy()
    if lo_b is not None and hi_b is not None and np.any(lo_b > hi_b):
        raise ValueError("empty cell range: lower > upper")
    if lo_b is None or hi_b is None:
        start = lo_b if lo_b is not None else (hi_b if hi_b is not None else np.zeros(n, dtype=np.int64))
        up_right = f(start + 1) > f(start)
        a_r, b_r = _bracket(f, start, +1)
        a_l, b_l = _bracket(f, start, -1)
        a = np.where(up_right, a_r, a_l)
        b = np.where(up_right, b_r, b_l)
        if lo_b is not None:
            a, b = np.maximum(a, lo_b), np.maximum(b, lo_b)
        if hi_b is not None:
            a, b = np.minimum(a, hi_b), np.minimum(b, hi_b)
        lo_b = a if lo_b is None else lo_b
        hi_b = b if hi_b is None else hi_b
        mode = _bisect_mode(f, a, b)
    else:
        mode = _bisect_mode(f, lo_b, hi_b)
    top = f(mode)
    if not np.all(np.isfinite(top)):
        raise ValueError("a cell's log-density is not finite at its mode (no mass on its range)")
    thr = top - float(log_drop)
    # edges: step outward from the mode (doubling) until the weight drops below thr or the
    # range ends; the edge is then found by bisection between that point and the mode
    span = np.ones(n, dtype=np.int64)
    left_far = mode.copy()
    right_far = mode.copy()
    need_l = np.ones(n, dtype=bool)
    need_r = np.ones(n, dtype=bool)
    for _ in range(63):
        if not (need_l.any() or need_r.any()):
            break
        cand_l = mode - span if lo_b is None else np.maximum(mode - span, lo_b)
        cand_r = mode + span if hi_b is None else np.minimum(mode + span, hi_b)
        left_far = np.where(need_l, cand_l, left_far)
        right_far = np.where(need_r, cand_r, right_far)
        at_l = np.zeros(n, dtype=bool) if lo_b is None else cand_l <= lo_b
        at_r = np.zeros(n, dtype=bool) if hi_b is None else cand_r >= hi_b
        need_l &= (f(cand_l) >= thr) & ~at_l
        need_r &= (f(cand_r) >= thr) & ~at_r
        span = span * 2
    if need_l.any() or need_r.any():
        raise ValueError("a cell's log-density does not decay away from its mode (improper weight)")
    lo = _bisect_edge(f, left_far, mode, thr, left=True)
    hi = _bisect_edge(f, mode, right_far, thr, left=False)
    width = hi - lo + 1
    capped = width > max_width
    if capped.any():
        half = max_width // 2
        new_lo = np.maximum(lo, mode - half)
        new_hi = np.minimum(hi, new_lo + max_width - 1)
        new_lo = np.maximum(lo, new_hi - max_width + 1)
        lo = np.where(capped, new_lo, lo)
        hi = np.where(capped, new_hi, hi)
    return lo, hi, mode, int(capped.sum())


class _Level(NamedTuple):
    P: np.ndarray    # (nodes, W) probability tables (max 1 per row)
    off: np.ndarray  # (nodes,) value of column 0


def _convolve_rows(A, B, dtype=np.float64):
    """Row-wise full convolution of two (k, W) tables by FFT (in ``dtype``)."""
    W = A.shape[1] + B.shape[1] - 1
    N = _fft.next_fast_len(W, real=True)
    fa = _fft.rfft(A.astype(dtype, copy=False), N, axis=1)
    fa *= _fft.rfft(B.astype(dtype, copy=False), N, axis=1)
    return _fft.irfft(fa, N, axis=1)[:, :W].astype(np.float64, copy=False)


def _trim(P, off, floor):
    """Scale each row to maximum 1, zero entries below ``floor`` (round-off negatives
    included), and cut the rows to their common non-zero span (in place on ``P``)."""
    mx = P.max(axis=1, keepdims=True)
    if np.any(mx <= 0):
        raise FloatingPointError("a table lost all its mass")
    P /= mx
    P[P < floor] = 0.0
    nz = P > 0
    first = np.argmax(nz, axis=1)
    last = P.shape[1] - 1 - np.argmax(nz[:, ::-1], axis=1)
    width = int((last - first).max()) + 1
    # entries after each row's last non-zero are zero: a window of the padded rows suffices
    pad = np.zeros((P.shape[0], P.shape[1] + width))
    pad[:, : P.shape[1]] = P
    T = sliding_window_view(pad, width, axis=1)[np.arange(P.shape[0]), first]
    return np.ascontiguousarray(T), off + first


def _split_weights(level: _Level, li, ri, s):
    """``p_l(u) p_r(s - u)`` for u over the left child's table, for the nodes with children
    ``(li, ri)`` (both at ``level``) and values ``s``; returns the weights and the u values."""
    Pl = level.P[li]
    k, W = Pl.shape
    Wr = level.P.shape[1]
    # p_r(s - u_j) with u_j = off_l + j is the reversed right row read from Wr-1-c+j on,
    # c = s - off_l - off_r: a contiguous window of the reversed, zero-padded row
    c = s - level.off[li] - level.off[ri]
    start = np.clip(Wr - 1 - c, -W, Wr) + W
    R = np.zeros((k, Wr + 2 * W))
    R[:, W: W + Wr] = level.P[ri][:, ::-1]
    M = Pl * sliding_window_view(R, W, axis=1)[np.arange(k), start]
    u = level.off[li][:, None] + np.arange(W)
    return M, u


class GroupSumSampler:
    r"""Draws of independent cells given their group sums, from per-cell log-weight tables.

    Parameters
    ----------
    tree
        the :class:`GroupTree` of the partition.
    cell_logp
        per-cell log-weights: a :class:`SeparableCells` (:func:`separable_cell_logp`)
        or any ``(idx, v) -> w`` callable.
    lo, hi
        per-cell windows (from :func:`unimodal_windows`).
    floor
        table entries below ``floor`` of their node's maximum are dropped.

    Notes
    -----
    :meth:`sample` draws, :meth:`log_q` scores a state under the same proposal law; both
    work group-wise (``totals`` per group).  :meth:`from_tables` builds the same sampler
    from given leaf probability tables instead of cell weights.
    """

    def __init__(self, tree: GroupTree, cell_logp: Callable, lo, hi, *, floor: float = TABLE_FLOOR):
        self.tree = tree
        n = tree.n
        lo = np.asarray(lo, dtype=np.int64)
        hi = np.asarray(hi, dtype=np.int64)
        if lo.shape != (n,) or hi.shape != (n,):
            raise ValueError(f"windows must have shape ({n},)")
        if np.any(hi < lo):
            raise ValueError("empty window: hi < lo")
        self.lo, self.hi = lo, hi
        if not isinstance(cell_logp, SeparableCells):
            cell_logp = SeparableCells([CellSum(cell_logp)])
        self.cell_logp = cell_logp
        order = tree.order
        W = int((hi - lo).max()) + 1
        cols = np.arange(W)
        lo_o, hi_o = lo[order], hi[order]
        logw = cell_logp.table(order, lo_o, W)
        logw[cols[None, :] > (hi_o - lo_o)[:, None]] = -np.inf
        top = logw.max(axis=1, keepdims=True)
        if not np.all(np.isfinite(top)):
            raise ValueError("a cell has no mass in its window")
        logw -= top
        P0 = np.exp(logw, out=logw)
        self._build(P0, lo[order].copy(), floor)

    @classmethod
    def from_tables(cls, tree: GroupTree, P, off, *, floor: float = TABLE_FLOOR) -> "GroupSumSampler":
        r"""A sampler whose leaves carry given probability tables instead of cell weights.

        ``P`` has shape ``(tree.n, W)``: row ``i`` is proportional to the probability that
        leaf ``i`` (cell order, as in ``tree.codes``) takes the value ``off[i] + j``,
        ``j = 0..W-1`` (non-negative and finite, with a positive entry; values outside the
        row have probability 0).  Each row is scaled to maximum 1 and its entries below
        ``floor`` are dropped, the rule of the internal nodes; the tree above the leaves is
        built exactly as in the constructor, and :meth:`sample` / :meth:`log_q` mean the
        same with these leaf laws in place of the cells' ``exp(w_i)``.  ``lo`` / ``hi``
        are then the ends of each leaf's remaining support and ``cell_logp`` is ``None``.
        Used to stack samplers (:mod:`privinfer.lattice.nested`: a unit's table becomes a
        leaf of the next level).
        """
        n = tree.n
        P = np.array(P, dtype=np.float64)
        off = np.asarray(off)
        if P.ndim != 2 or P.shape[0] != n or P.shape[1] == 0:
            raise ValueError(f"leaf tables must have shape ({n}, W) with W >= 1")
        if off.shape != (n,) or off.dtype.kind not in "iu":
            raise ValueError(f"table offsets must be an integer vector of shape ({n},)")
        if not np.all(np.isfinite(P)) or np.any(P < 0):
            raise ValueError("leaf tables must be finite and non-negative")
        if np.any(P.max(axis=1) <= 0):
            raise ValueError("every leaf table needs a positive entry")
        self = cls.__new__(cls)
        self.tree = tree
        self.cell_logp = None
        order = tree.order
        P0, off0 = _trim(P[order], off.astype(np.int64)[order], floor)
        nz = P0 > 0
        first = np.argmax(nz, axis=1)
        last = P0.shape[1] - 1 - np.argmax(nz[:, ::-1], axis=1)
        lo = np.empty(n, dtype=np.int64)
        hi = np.empty(n, dtype=np.int64)
        lo[order] = off0 + first
        hi[order] = off0 + last
        self.lo, self.hi = lo, hi
        self._build(P0, off0, floor)
        return self

    def _build(self, P0, off0, floor):
        """The tables of every level from the leaves' (``P0``, ``off0``, leaf order)."""
        # single precision (round-off ~1e-7 of a row's maximum) is enough for tables cut at
        # 1e-6 or above; the proposal law is whatever the tables say, so exactness is untouched
        self.fft_dtype = np.float32 if floor >= 1e-6 else np.float64
        self.levels = [_Level(P0, off0)]
        for left, right in self.tree.levels:
            prev = self.levels[-1]
            has = right >= 0
            A = prev.P[left]
            out = np.zeros((left.size, 2 * prev.P.shape[1] - 1))
            out[:, : A.shape[1]] = A
            off = prev.off[left].copy()
            if has.any():
                out[has] = _convolve_rows(A[has], prev.P[right[has]], self.fft_dtype)
                off[has] = prev.off[left[has]] + prev.off[right[has]]
            P, off = _trim(out, off, floor)
            self.levels.append(_Level(P, off))

    @property
    def width(self) -> int:
        """Widest cell window."""
        return int(self.levels[0].P.shape[1])

    def covers(self, totals) -> np.ndarray:
        """Per group: is the total inside the support of the root's table?"""
        top = self.levels[-1]
        j = np.asarray(totals, dtype=np.int64) - top.off
        ok = (j >= 0) & (j < top.P.shape[1])
        out = np.zeros(ok.shape, dtype=bool)
        out[ok] = top.P[np.flatnonzero(ok), j[ok]] > 0
        return out

    def _node_values(self, x):
        """Sums of ``x`` over every node of the tree (level by level)."""
        v = np.asarray(x, dtype=np.int64)[self.tree.order]
        out = [v]
        for left, right in self.tree.levels:
            nxt = v[left].copy()
            has = right >= 0
            nxt[has] += v[right[has]]
            out.append(nxt)
            v = nxt
        return out

    def log_q(self, x) -> np.ndarray:
        """Per-group log-probability of ``x`` under :meth:`sample` given its own group sums
        (``-inf`` where ``x`` leaves a window or a table)."""
        tree = self.tree
        values = self._node_values(x)
        lq = np.zeros(tree.n_groups)
        leaf = values[0]
        L0 = self.levels[0]
        j = leaf - L0.off
        inside = (j >= 0) & (j < L0.P.shape[1])
        outside = ~inside
        if outside.any():
            np.add.at(lq, tree.leaf_group[outside], -np.inf)
        lq = lq + self._path_logp(values)
        return lq

    def _path_logp(self, values) -> np.ndarray:
        tree = self.tree
        lq = np.zeros(tree.n_groups)
        for k, (left, right) in enumerate(tree.levels):
            has = np.flatnonzero(right >= 0)
            if has.size == 0:
                continue
            parent = values[k + 1][has]
            li, ri = left[has], right[has]
            M, u = _split_weights(self.levels[k], li, ri, parent)
            Z = M.sum(axis=1)
            j = values[k][li] - self.levels[k].off[li]
            W = M.shape[1]
            okj = (j >= 0) & (j < W)
            p = np.where(okj, M[np.arange(has.size), np.clip(j, 0, W - 1)], 0.0)
            with np.errstate(divide="ignore", invalid="ignore"):
                lp = np.where((Z > 0) & (p > 0), np.log(p) - np.log(Z), -np.inf)
            np.add.at(lq, tree.level_groups[k + 1][has], lp)
        return lq

    def sample(self, rng, totals):
        """``(x, log_q, ok)``: a draw of every group given ``totals`` (group order), its
        per-group log-probability, and per group whether a draw was possible (the total
        inside the root's table; where not, ``x`` holds -1 for that group's cells and
        ``log_q`` is ``-inf``)."""
        tree = self.tree
        totals = np.asarray(totals, dtype=np.int64)
        if totals.shape != (tree.n_groups,):
            raise ValueError(f"totals must have shape ({tree.n_groups},)")
        ok = self.covers(totals)
        s = totals.copy()
        lq = np.zeros(tree.n_groups)
        for k in range(tree.depth - 1, -1, -1):
            left, right = tree.levels[k]
            child = np.empty(self.levels[k].P.shape[0], dtype=np.int64)
            child[left] = s
            has = np.flatnonzero(right >= 0)
            if has.size:
                li, ri = left[has], right[has]
                M, u = _split_weights(self.levels[k], li, ri, s[has])
                Z = M.sum(axis=1)
                good = Z > 0
                grp = tree.level_groups[k + 1][has]
                ok[grp[~good]] = False
                c = np.cumsum(M, axis=1)
                r = rng.random(has.size) * np.where(good, Z, 1.0)
                j = np.minimum((c < r[:, None]).sum(axis=1), M.shape[1] - 1)
                p = M[np.arange(has.size), j]
                with np.errstate(divide="ignore", invalid="ignore"):
                    lp = np.where(good & (p > 0), np.log(p) - np.log(np.where(good, Z, 1.0)), -np.inf)
                np.add.at(lq, grp, lp)
                sl = u[np.arange(has.size), j]
                child[li] = sl
                child[ri] = s[has] - sl
            s = child
        x = np.empty(tree.n, dtype=np.int64)
        x[tree.order] = s
        bad_cells = ~ok[tree.leaf_group]
        x[tree.order[bad_cells]] = -1
        lq[~ok] = -np.inf
        return x, lq, ok


class BlockInfo(NamedTuple):
    """Per chain: groups whose block move was accepted, groups proposed (covered), the
    widest window, and cells whose window was capped."""

    n_accepted: np.ndarray
    n_proposed: np.ndarray
    width: int
    capped: int


def block_kernel(rng, state, tree: GroupTree, density: LocalLogDensity, *, lower=None,
                 log_drop: float = LOG_DROP, max_width: int = 4096, floor: float = TABLE_FLOOR):
    r"""Independence Metropolis--Hastings block update of every group (module docstring).

    ``(rng, state, tree, density) -> (state, BlockInfo)``: ``state`` a
    :class:`~privinfer.lattice.kernels.LatticeState` of ``m`` chains on the fibre (cells grouped
    by ``tree``, group sums fixed), ``density`` separable.  The proposal does not depend on
    the state, so one set of tables serves every chain.
    """
    cell_logp = separable_cell_logp(density)
    x_all = np.asarray(state.e, dtype=np.int64)
    m, n = x_all.shape
    if n != tree.n:
        raise ValueError(f"state has {n} cells, the tree {tree.n}")
    codes, G = tree.codes, tree.n_groups
    totals = np.zeros((m, G), dtype=np.int64)
    np.add.at(totals, (slice(None), codes), x_all)  # exact integer sums per group and chain
    upper = None
    if lower is not None:
        # a cell can hold at most its group's total minus the others' minimum
        upper = (totals.max(axis=0) - (tree.sizes - 1) * int(lower))[codes]
    lo, hi, _, capped = unimodal_windows(cell_logp, n, lower, upper, log_drop=log_drop, max_width=max_width)
    sampler = GroupSumSampler(tree, cell_logp, lo, hi, floor=floor)
    idx = np.arange(n)
    movable = tree.sizes > 1  # a one-cell group is fixed by its total
    new_e = x_all.copy()
    n_acc = np.zeros(m, dtype=np.int64)
    n_prop = np.zeros(m, dtype=np.int64)
    for c in range(m):
        x = x_all[c]
        prop, lq_new, ok = sampler.sample(rng, totals[c])
        lq_old = sampler.log_q(x)
        w_old = np.bincount(codes, weights=cell_logp(idx, x), minlength=G)
        w_new = np.bincount(codes, weights=cell_logp(idx, np.where(ok[codes], prop, x)), minlength=G)
        with np.errstate(invalid="ignore"):
            log_a = (w_new - w_old) + (lq_old - lq_new)
        accept = ok & movable & np.isfinite(lq_old) & (np.log(rng.random(G)) < log_a)
        n_prop[c] = int((ok & movable).sum())
        n_acc[c] = int(accept.sum())
        take = accept[codes]
        new_e[c, take] = prop[take]
    stat = density.init_stat(new_e)
    return LatticeState(new_e, stat), BlockInfo(n_acc, n_prop, sampler.width, capped)
