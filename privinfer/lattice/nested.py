r"""Block updates of integer cells under nested sum constraints with potentials on the
intermediate sums.

Setting
    Cells :math:`x_i` (integers, :math:`x_i \ge` ``lower``) are the leaves of a hierarchy of
    units: level-1 units group cells, level-2 units group level-1 units, ..., and the units
    of the top level :math:`L` are the *blocks*, whose totals are fixed.  With
    :math:`s_v(x)` the sum of the cells under unit :math:`v`, the target within a block is

    .. math:: \log \pi(x) = \sum_i w_i(x_i) + \sum_{l=1}^{L-1} \sum_{v \in \text{level } l}
              \phi_v(s_v(x)) + \text{const}, \qquad s_b(x) = t_b \ \text{for every block } b.

    Example: the cells of one sex x age group in every tract of a state form a block (the
    state's count is invariant), level 1 groups the tracts by county; :math:`w_i` holds the
    tract's prior and its noisy measurement, :math:`\phi_v` the county's measurement of the
    same group.  Potentials at the top level are constant (the block total is fixed) and
    are never evaluated.  With one level this is :mod:`privinfer.lattice.block`.

Exact recursion
    For a unit :math:`v` let :math:`F_v(s)` be the total weight of the cell values under
    :math:`v` with sum :math:`s`, every cell weight :math:`e^{w_i}` and every potential
    :math:`e^{\phi_u}` of the units :math:`u` under :math:`v` and of :math:`v` itself
    included.  Grouping those values by the sums of :math:`v`'s children :math:`c`,

    .. math:: F_i = e^{w_i}, \qquad
              F_v(s) = e^{\phi_v(s)} \sum_{\sum_c s_c = s} \prod_c F_c(s_c)
              = e^{\phi_v(s)}\, \big(\textstyle\mathop{\ast}_c F_c\big)(s),

    (:math:`\ast` the convolution), and given :math:`s_v = s` the children's sums have the
    law :math:`\prod_c F_c(s_c) / (\ast_c F_c)(s)` on :math:`\sum_c s_c = s`; given those,
    each child's subtree is again conditionally independent of the rest.  So the exact
    conditional law of the cells given the block totals is drawn top-down: split each
    block's total among its units, each unit's sum among its children, ..., down to the
    cells.  Within a unit, its children are the leaves of a balanced binary tree
    (:class:`~privinfer.lattice.block.GroupTree`), whose nodes carry the convolutions of
    their leaves' tables, and a node's value is split between its two children with
    probability :math:`G_l(s_l) G_r(s - s_l) / \sum_u G_l(u) G_r(s - u)` -- exactly the
    machinery of :class:`~privinfer.lattice.block.GroupSumSampler`, stacked: the root
    table of a unit (times :math:`e^{\phi_v}`) is a leaf table of the next level
    (:meth:`GroupSumSampler.from_tables <privinfer.lattice.block.GroupSumSampler.from_tables>`).

Truncation
    Cell tables are cut to windows where :math:`w_i \ge \max w_i -` ``log_drop``
    (:func:`~privinfer.lattice.block.unimodal_windows`, from the cell weights alone), every
    convolved table is trimmed below ``floor`` of its maximum, and so is every unit table
    after multiplying by :math:`e^{\phi_v}` (computed in logs, scaled to maximum 1).  On the
    set :math:`S` of states whose every partial sum survives the trimming, the proposal is
    proportional to :math:`\pi` up to the FFT round-off (the tables telescope: each node's
    table is the normalizer of its own split), and it never proposes a state outside
    :math:`S`.

Exactness
    :func:`nested_block_kernel` draws a proposal :math:`x'` per block, scores the current
    state under the same proposal (:meth:`NestedSumSampler.log_q`) and accepts with
    probability :math:`\min(1, \pi(x') q(x) / (\pi(x) q(x')))`, with :math:`\pi` the exact
    target (all cell weights and all potentials at the actual sums): an independence
    Metropolis--Hastings test, so :math:`\pi` is invariant whatever the truncation.  A state
    outside :math:`S` has :math:`q(x) = 0` and is kept; the update alone cannot reach states
    outside :math:`S`, so pair it with a local lattice sweep (e.g. pair moves within blocks)
    for an irreducible chain when the truncation matters.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from .block import (
    LOG_DROP,
    TABLE_FLOOR,
    BlockInfo,
    GroupSumSampler,
    GroupTree,
    unimodal_windows,
)

__all__ = ["NestedTree", "NestedSumSampler", "nested_block_kernel"]


class NestedTree:
    r"""A laminar family of units over cells: cells -> level-1 units -> ... -> blocks.

    ``codes_per_level[0][i]`` is the level-1 unit of cell ``i``; ``codes_per_level[k][u]`` the
    level-``k+1`` unit of level-``k`` unit ``u``; the units of the last level are the
    blocks.  Units of each level are numbered ``0..U_l - 1`` and every unit holds at least
    one child.  Each level's grouping is a :class:`~privinfer.lattice.block.GroupTree`
    (``stages[k]`` groups the level-``k`` entities -- cells for ``k = 0`` -- into level-``k+1``
    units).

    Attributes
    ----------
    n
        number of cells.
    n_levels
        number of levels ``L`` above the cells.
    n_blocks
        number of blocks (units of level ``L``).
    n_units
        ``(n, U_1, ..., U_L)``: entities per level, the cells first.
    block_of
        ``block_of[l]``: the block of each level-``l`` entity (``l = 0``: cells).
    block_sizes
        cells per block.
    codes
        the validated codes (int64), one vector per level.
    stages
        ``stages[k]``: the :class:`~privinfer.lattice.block.GroupTree` of ``codes[k]``.
    """

    def __init__(self, codes_per_level: Sequence):
        if isinstance(codes_per_level, np.ndarray) and codes_per_level.ndim < 2:
            raise ValueError("codes_per_level must be a list of code vectors, one per level")
        try:
            levels = list(codes_per_level)
        except TypeError:
            raise ValueError("codes_per_level must be a list of code vectors, one per level") from None
        if not levels:
            raise ValueError("codes_per_level must hold at least one level")
        codes = []
        n_units = []
        for k, c in enumerate(levels):
            c = np.asarray(c)
            child = "cells" if k == 0 else f"level-{k} units"
            if c.ndim != 1 or c.size == 0:
                raise ValueError(f"level {k + 1}: codes must be a non-empty vector (the unit of each of the "
                                 f"{child})")
            if c.dtype.kind not in "iu" or np.any(c < 0):
                raise ValueError(f"level {k + 1}: codes must be non-negative integers (the unit of each of the "
                                 f"{child})")
            if k > 0 and c.size != n_units[-1]:
                raise ValueError(f"level {k + 1}: {c.size} codes, but level {k} has {n_units[-1]} units")
            c = c.astype(np.int64)
            U = int(c.max()) + 1
            sizes = np.bincount(c, minlength=U)
            if np.any(sizes == 0):
                u = int(np.flatnonzero(sizes == 0)[0])
                raise ValueError(f"level {k + 1}: unit {u} holds none of the {child} (units are numbered "
                                 f"0..U-1, none empty)")
            if k == 0:
                n_units.append(int(c.size))
            n_units.append(U)
            codes.append(c)
        self.codes = codes
        self.n_units = tuple(n_units)
        self.n = n_units[0]
        self.n_levels = len(codes)
        self.n_blocks = n_units[-1]
        self.stages = [GroupTree(c) for c in codes]
        block_of = [np.arange(self.n_blocks)]
        for c in reversed(codes):
            block_of.append(block_of[-1][c])
        self.block_of = block_of[::-1]
        self.block_sizes = np.bincount(self.block_of[0], minlength=self.n_blocks)
        self._starts = [np.concatenate([[0], np.cumsum(st.sizes)[:-1]]) for st in self.stages]

    def sums(self, x) -> list:
        """``[x, s_1, ..., s_L]``: the sums of ``x`` (shape ``(..., n)``, integers) over the
        units of every level (shape ``(..., U_l)``), computed exactly in int64."""
        x = np.asarray(x)
        if x.shape[-1:] != (self.n,):
            raise ValueError(f"x must have {self.n} cells in its last axis")
        v = x.astype(np.int64, copy=False)
        out = [v]
        for st, starts in zip(self.stages, self._starts):
            v = np.add.reduceat(np.take(v, st.order, axis=-1), starts, axis=-1)
            out.append(v)
        return out


def _level_potentials(potentials, n_levels: int) -> list:
    """One entry (None or callable) per level 1..L-1."""
    k = n_levels - 1
    if potentials is None:
        return [None] * k
    if callable(potentials):
        return [potentials] * k
    if isinstance(potentials, (str, bytes)):
        raise ValueError("potentials must be None, a callable phi(level, units, s) or a sequence of them per level")
    try:
        seq = list(potentials)
    except TypeError:
        raise ValueError("potentials must be None, a callable phi(level, units, s) or a sequence of them "
                         "per level") from None
    if len(seq) not in (k, n_levels):
        raise ValueError(f"potentials: {len(seq)} entries, expected {k} (levels 1..{k}) or {n_levels} "
                         f"(the last, level {n_levels}, is constant and ignored)")
    for j, p in enumerate(seq):
        if p is not None and not callable(p):
            raise ValueError(f"potentials[{j}] (level {j + 1}) must be None or a callable phi(level, units, s)")
    return seq[:k]


def _eval_potential(phi, level: int, units, s):
    """``phi(level, units, s)`` as floats of the broadcast shape, or a one-line error."""
    shape = np.broadcast_shapes(np.shape(units), np.shape(s))
    val = np.asarray(phi(level, units, s), dtype=np.float64)
    try:
        return np.broadcast_to(val, shape)
    except ValueError:
        raise ValueError(f"the level-{level} potential returned shape {val.shape}, expected {shape}") from None


class NestedSumSampler:
    r"""Draws of the cells given their block totals under nested potentials (module docstring).

    Parameters
    ----------
    tree
        the :class:`NestedTree`.
    cell_logp
        per-cell log-weights :math:`w_i`: a :class:`~privinfer.lattice.block.SeparableCells`
        or any ``(idx, v) -> w`` callable (vectorized).
    lo, hi
        per-cell windows (e.g. from :func:`~privinfer.lattice.block.unimodal_windows`).
    potentials
        :math:`\phi`: ``None`` (no potentials), a callable ``phi(level, units, s)``
        used at every level ``1..L-1``, or a sequence of ``L-1`` (or ``L``; the top entry
        is ignored) entries, each ``None`` or such a callable.  ``units`` are unit indices
        of that level (``0..U_l - 1``) and ``s`` their sums, broadcast against each other;
        the result is :math:`\phi_v(s)` (log scale; ``-inf`` allowed, not NaN or ``+inf``).
    floor
        table entries below ``floor`` of their row's maximum are dropped (after the
        convolutions and after each unit's potential).

    Attributes
    ----------
    stages
        ``stages[k]``: the :class:`~privinfer.lattice.block.GroupSumSampler` splitting the
        sums of level-``k+1`` units among their children (cells for ``k = 0``).
    """

    def __init__(self, tree: NestedTree, cell_logp: Callable, lo, hi, potentials=None, *,
                 floor: float = TABLE_FLOOR):
        if not isinstance(tree, NestedTree):
            raise ValueError("tree must be a NestedTree")
        if not (np.isfinite(floor) and 0 <= floor < 1):
            raise ValueError("floor must be a number in [0, 1)")
        self.tree = tree
        self.potentials = _level_potentials(potentials, tree.n_levels)
        first = GroupSumSampler(tree.stages[0], cell_logp, lo, hi, floor=floor)
        self.cell_logp = first.cell_logp
        self.lo, self.hi = first.lo, first.hi
        self.stages = [first]
        for k in range(1, tree.n_levels):
            root = self.stages[-1].levels[-1]  # one row per level-k unit, in unit order
            P, off = root.P, root.off
            phi = self.potentials[k - 1]
            if phi is not None:
                P = self._weighted(P, off, phi, k)
            self.stages.append(GroupSumSampler.from_tables(tree.stages[k], P, off, floor=floor))

    @staticmethod
    def _weighted(P, off, phi, level: int):
        """``P * exp(phi(level, u, s))`` on each unit's support, scaled to maximum 1 (logs)."""
        U, W = P.shape
        val = _eval_potential(phi, level, np.arange(U)[:, None], off[:, None] + np.arange(W))
        pos = P > 0
        bad = pos & (np.isnan(val) | (val == np.inf))
        if bad.any():
            u = int(np.flatnonzero(bad.any(axis=1))[0])
            raise ValueError(f"the level-{level} potential is NaN or +inf for unit {u}")
        with np.errstate(divide="ignore"):
            logT = np.where(pos, np.log(np.where(pos, P, 1.0)) + val, -np.inf)
        top = logT.max(axis=1, keepdims=True)
        if not np.all(np.isfinite(top)):
            u = int(np.flatnonzero(~np.isfinite(top[:, 0]))[0])
            raise ValueError(f"level {level}: unit {u}'s potential is -inf on all of its table's support")
        logT -= top
        return np.exp(logT, out=logT)

    @property
    def width(self) -> int:
        """Widest cell window."""
        return self.stages[0].width

    def covers(self, totals) -> np.ndarray:
        """Per block: is its total inside the support of its top table?"""
        return self.stages[-1].covers(totals)

    def sample(self, rng, totals):
        """``(x, log_q, ok)``: a draw of every block's cells given ``totals`` (block order),
        its per-block log proposal probability, and per block whether a draw was possible
        (the total inside the top table and every split possible; where not, ``x`` holds -1
        for that block's cells and ``log_q`` is ``-inf``)."""
        tree = self.tree
        totals = np.asarray(totals)
        if totals.shape != (tree.n_blocks,) or totals.dtype.kind not in "iu":
            raise ValueError(f"totals must be integers of shape ({tree.n_blocks},)")
        s = totals.astype(np.int64)
        ok = np.ones(tree.n_blocks, dtype=bool)
        lq = np.zeros(tree.n_blocks)
        for k in range(tree.n_levels - 1, -1, -1):
            x_k, lq_k, ok_k = self.stages[k].sample(rng, s)
            blk = tree.block_of[k + 1]
            ok[blk[~ok_k]] = False
            lq += np.bincount(blk, weights=np.where(ok_k, lq_k, 0.0), minlength=tree.n_blocks)
            s = x_k
        x = s
        x[~ok[tree.block_of[0]]] = -1
        lq[~ok] = -np.inf
        return x, lq, ok

    def log_q(self, x) -> np.ndarray:
        """Per-block log-probability that :meth:`sample` draws ``x`` given its own block totals:
        the sum of the log split probabilities along the way down, ``-inf`` where ``x``
        leaves a window or a table, or where the block's total is not covered
        (:meth:`covers`; unlike :meth:`GroupSumSampler.log_q
        <privinfer.lattice.block.GroupSumSampler.log_q>`, which leaves that check to its
        caller)."""
        tree = self.tree
        x = np.asarray(x)
        if x.shape != (tree.n,):
            raise ValueError(f"x must have shape ({tree.n},)")
        sums = tree.sums(x)
        lq = np.zeros(tree.n_blocks)
        for k, stage in enumerate(self.stages):
            lq += np.bincount(tree.block_of[k + 1], weights=stage.log_q(sums[k]), minlength=tree.n_blocks)
        lq[~self.covers(sums[-1])] = -np.inf
        return lq

    def log_target(self, x) -> np.ndarray:
        r"""Per block: :math:`\sum_i w_i(x_i) + \sum_{l < L} \sum_v \phi_v(s_v(x))` over the
        block's cells and units (the unnormalized exact target)."""
        tree = self.tree
        x = np.asarray(x)
        if x.shape != (tree.n,):
            raise ValueError(f"x must have shape ({tree.n},)")
        sums = tree.sums(x)
        idx = np.arange(tree.n)
        out = np.bincount(tree.block_of[0], weights=self.cell_logp(idx, sums[0]), minlength=tree.n_blocks)
        for level, phi in enumerate(self.potentials, start=1):
            if phi is not None:
                val = _eval_potential(phi, level, np.arange(tree.n_units[level]), sums[level])
                out += np.bincount(tree.block_of[level], weights=val, minlength=tree.n_blocks)
        return out


def nested_block_kernel(rng, state, tree: NestedTree, cell_logp: Callable, potentials=None, *, lower=None,
                        log_drop: float = LOG_DROP, max_width: int = 4096, floor: float = TABLE_FLOOR):
    r"""Independence Metropolis--Hastings update of every block under nested potentials.

    ``(rng, state, tree, cell_logp, potentials) -> (state, BlockInfo)``.

    ``state``: integer cells, shape ``(n,)`` (one chain) or ``(m, n)`` (``m`` chains); the
    new state has the same shape (a new array).  The block totals of each chain are kept.
    ``cell_logp`` / ``potentials``: as in :class:`NestedSumSampler`.  ``lower``: cells are
    ``>= lower`` (scalar or per cell; ``None``: unbounded); the cells' windows are
    :func:`~privinfer.lattice.block.unimodal_windows` of ``cell_logp`` at depth ``log_drop``
    (at most ``max_width`` wide), bounded above by the largest total of the cell's block
    over the chains minus the lower bounds of the block's other cells.  One proposal
    (tables built once) serves every chain; each block of each chain is proposed
    independently and accepted with the exact target's ratio (module docstring), so the
    update leaves the target invariant whatever ``log_drop``, ``max_width`` and ``floor``.

    The info holds, per chain, the blocks accepted and the blocks proposed (blocks of one
    cell are fixed and never proposed, nor are blocks whose total the tables miss), the
    widest cell window and the number of capped windows.
    """
    if not isinstance(tree, NestedTree):
        raise ValueError("tree must be a NestedTree")
    x_in = np.asarray(state)
    if x_in.dtype.kind not in "iu":
        raise ValueError("state must hold integers")
    if x_in.ndim not in (1, 2) or x_in.shape[-1] != tree.n:
        raise ValueError(f"state must have shape ({tree.n},) or (chains, {tree.n})")
    x_all = np.atleast_2d(x_in).astype(np.int64)
    m, n = x_all.shape
    B = tree.n_blocks
    blk = tree.block_of[0]
    if lower is not None:
        low = np.broadcast_to(np.asarray(lower), (n,))
        if low.dtype.kind not in "iu":
            raise ValueError("lower must be an integer (or one per cell)")
        low = low.astype(np.int64)
        if np.any(x_all < low):
            raise ValueError("the state has a cell below lower")
    totals = tree.sums(x_all)[-1]  # (m, B), exact
    upper = None
    if lower is not None:
        others = np.bincount(blk, weights=low, minlength=B).astype(np.int64)[blk] - low
        upper = totals.max(axis=0)[blk] - others
    lo, hi, _, capped = unimodal_windows(cell_logp, n, lower, upper, log_drop=log_drop, max_width=max_width)
    sampler = NestedSumSampler(tree, cell_logp, lo, hi, potentials, floor=floor)
    movable = tree.block_sizes > 1
    new = x_all.copy()
    n_acc = np.zeros(m, dtype=np.int64)
    n_prop = np.zeros(m, dtype=np.int64)
    for c in range(m):
        x = x_all[c]
        prop, lq_new, ok = sampler.sample(rng, totals[c])
        lq_old = sampler.log_q(x)
        t_old = sampler.log_target(x)
        t_new = sampler.log_target(np.where(ok[blk], prop, x))
        with np.errstate(invalid="ignore"):
            log_a = (t_new - t_old) + (lq_old - lq_new)
        accept = ok & movable & np.isfinite(lq_old) & (np.log(rng.random(B)) < log_a)
        n_prop[c] = int((ok & movable).sum())
        n_acc[c] = int(accept.sum())
        take = accept[blk]
        new[c, take] = prop[take]
    if x_in.ndim == 1:
        new = new[0]
    return new, BlockInfo(n_acc, n_prop, sampler.width, capped)
