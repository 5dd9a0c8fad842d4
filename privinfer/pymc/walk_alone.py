r"""One unit's profile moved against several of its siblings at once, its cells carried along: a kernel
of :class:`~privinfer.pymc.WalkGibbs` (an exact update).

Why.  The increments of sibling units are centred, :math:`\eta_v = \delta_v - \bar\delta`, so a
parent's log profile is the mean of its children's and no unit's profile moves alone.  The pair
moves, the carried update and the collapsed move (:mod:`privinfer.pymc.walk_carry`,
:mod:`privinfer.pymc.walk_collapse`) move ``u`` by :math:`+\Delta` and one sibling by
:math:`-\Delta`.  Where ``u``'s cells are set by its profile more than by their measurements (a
small tract's old-age cells) and its partner's are pinned by theirs, the partner's cells hold
the move back to the partner's posterior spread: on Kentucky's tracts the slowest cells are the
old-age cells of small tracts whose ages depart far from their county's (campuses; shares 65+
of 1.5-4.3% against 11-17%), their 20-draw means correlated 0.7-0.9 with their county's profile
(``benchmarks/bench_hierarchy_model.py``, ``print_slow_profiles``).

The move.  For unit ``u`` in a sibling group of ``J >= 3`` units, ``m = min(J - 1,``
:data:`SIBLINGS` ``)`` of its siblings ``S`` drawn at random, and a direction ``D`` of the
increments:

.. math:: \delta_u \mathrel{+}= \Delta D,\qquad \delta_v \mathrel{-}= \frac{\Delta}{m} D
          \quad (v \in S),

which keeps the group's mean raw increment, so the centred increments move the same way and no
other unit's profile moves.  Each sibling in ``S`` moves by ``1/m`` of ``u``'s move and their
cells' resistance, which grows with the square of the move, falls by that factor summed over
the ``m`` siblings: ``1/m`` of a pinned partner's in a pair move (the pair move is ``m = 1``).
Every moved unit's cells are carried along as in the carried update (ancillary coordinates
:math:`\xi = x - h(\theta)`, the small cells by their quantiles), and :math:`\Delta` is slice
sampled from the exact density: the moved units' Gaussian priors, their Dirichlet-multinomials,
and the exact measurement term.  It is one pair of the compiled carried update
(:func:`~privinfer.pymc.walk_carry.carried_update`) on two pseudo-units: ``u``'s row, and the
rows of ``S`` as one unit with several rows, each row's base profile holding its unit's current
walk, moved by ``-1/m`` of ``u``'s move (``coefficients``); the siblings' priors are one Gaussian
in :math:`\Delta` (``precisions``: :math:`\sum_{v \in S} (\delta_v - \Delta D/m)^2` is
:math:`m (\bar\delta_S - \Delta D/m)^2` plus a constant, so the pseudo-unit's raw increment is
:math:`\bar\delta_S` and its precision :math:`m/\sigma_k^2`).  Slice sampling in those
coordinates leaves the posterior invariant whatever the units, siblings and directions, as long
as their choice does not depend on the chain's state (:func:`alone_units`: fixed sizes; ``S``
drawn afresh).  Its cost grows with ``m``: every evaluation reads the ``m + 1`` units' cells.
Measured on Kentucky's tracts beside :data:`~privinfer.pymc.walk.ALONE_SMALL` (off by default).
"""

from __future__ import annotations

import numpy as np

from .walk_carry import CARRY_STEPS, carried_update, ellipse_update
from .walk_kernel import prior_precisions, walk_offsets

__all__ = ["alone_units", "alone_update", "pseudo_pair_update", "SIBLINGS"]

#: The most siblings a unit moves against (:func:`alone_update`): each evaluation of the move's
#: density reads their cells, so the cost grows with their number while the resistance falls
#: like its inverse.
SIBLINGS = 8


def alone_units(groups, sizes, fraction: float, least: int = 3) -> np.ndarray:
    """The units whose profile :func:`alone_update` moves: those under ``fraction`` of the
    median of ``sizes`` (fixed, e.g. the units' estimated totals) in sibling groups of at least
    ``least`` units (3: in a group of two the move is the pair move; the move against a cousin,
    :mod:`privinfer.pymc.walk_cousin`, takes 2).  A function of fixed data, so the update stays
    exact."""
    groups = np.asarray(groups, dtype=np.int64)
    sizes = np.asarray(sizes, dtype=float)
    if sizes.shape != groups.shape:
        raise ValueError("sizes must give one number per unit")
    if not (np.isfinite(fraction) and fraction >= 0):
        raise ValueError("fraction must be a finite number >= 0")
    J = np.bincount(groups)[groups]
    return np.flatnonzero((sizes < fraction * np.median(sizes)) & (J >= least))


def pseudo_pair_update(rng, x, res, grid, members, base, delta, precisions, coefficient, moved, used,
                       ellipse: bool = True, **kernel) -> tuple[int, np.ndarray]:
    r"""One pair of :func:`~privinfer.pymc.walk_carry.carried_update` on two pseudo-units (unit 0
    and unit 1 of ``members``, the rows of ``grid``; None: one row each) whose walks are folded
    into the rows' base profiles ``base``: their raw increments ``delta`` ``(2, K-1)`` with prior
    precisions ``precisions``, the second moved by ``coefficient`` times the first's move.
    ``kernel``: ``carried_update``'s other keywords (``directions`` included).  ``x`` and ``res``
    in place; each direction's ``|Delta|`` added to ``moved`` and a count to ``used``; ``ellipse``:
    then one :func:`~privinfer.pymc.walk_carry.ellipse_update` of the pair's whole move.  Returns
    the density evaluations and the first pseudo-unit's move, summed over the updates."""
    p_eta = np.zeros_like(delta)
    pair = (np.array([0]), np.array([1]))
    n, step_sizes = carried_update(rng, x, res, pair, grid=grid, base=base, eta=p_eta, delta=delta, members=members,
                                   coefficients=coefficient, precisions=precisions, **kernel)
    if ellipse:
        keep = {k: v for k, v in kernel.items() if k not in ("directions", "widths", "per_pair", "steps")}
        n += ellipse_update(rng, x, res, pair, grid=grid, base=base, eta=p_eta, delta=delta, members=members,
                            coefficients=coefficient, precisions=precisions, **keep)
    done = np.isfinite(step_sizes)
    moved[done] += step_sizes[done]
    used[done] += 1.0
    return n, p_eta[0]


def alone_update(rng, x, res, units, *, grid, code, base, eta, delta, sigma, kappa, groups, carry, row_ptr, rows,
                 w, directions=None, widths=0.2, per_unit=None, walk_order: int = 1, spacing=None,
                 steps: int = CARRY_STEPS, lump=None, siblings=None, ellipse: bool = True) -> tuple[int, np.ndarray]:
    """One move (module docstring) of each unit in ``units``, in turn, against ``siblings`` of
    its siblings drawn at random (None: :data:`SIBLINGS`; at most all of them), along
    ``per_unit`` directions drawn at random without replacement (None: all).

    ``x`` (int64, n), ``res = y - Bx``, ``eta`` (centred increments ``(U, K-1)``) and ``delta``
    (raw) are updated in place; ``grid`` ``(U, d)`` every unit's cells (one row per unit),
    ``groups`` ``(U,)`` the sibling groups, the rest as for
    :func:`~privinfer.pymc.walk_carry.carried_update` (``widths``: one slice width per
    direction, of :math:`\\Delta`).  Returns the density evaluations and the mean ``|Delta|`` per
    direction (nan where none moved); ``ellipse``: each move followed by an elliptical slice
    update of its whole move (:func:`pseudo_pair_update`)."""
    grid = np.asarray(grid, dtype=np.int64)
    groups = np.asarray(groups, dtype=np.int64)
    most = SIBLINGS if siblings is None else int(siblings)
    if most < 1:
        raise ValueError("siblings must be an integer >= 1")
    K1 = delta.shape[1]
    dirs = np.eye(K1) if directions is None else np.asarray(directions, dtype=float)
    prec = prior_precisions(sigma, None, None)
    moved = np.zeros(dirs.shape[0])
    used = np.zeros(dirs.shape[0])
    evals = 0
    for u in np.asarray(units, dtype=np.int64):
        others = np.flatnonzero(groups == groups[u])
        others = others[others != u]
        if others.size < 2:
            raise ValueError("a unit moved alone needs at least two siblings")
        S = rng.choice(others, size=min(most, others.size), replace=False)
        m = S.size
        rows_of = np.concatenate([[u], S])
        p_base = base[rows_of] + walk_offsets(eta[rows_of], code, walk_order, spacing)
        p_delta = np.stack([delta[u], delta[S].mean(axis=0)])
        p_prec = np.stack([prec, m * prec])
        n, step = pseudo_pair_update(rng, x, res, grid[rows_of], np.r_[0, np.ones(m, dtype=np.int64)], p_base,
                                     p_delta, p_prec, -1.0 / m, moved, used, code=code, sigma=sigma, kappa=kappa,
                                     carry=carry, row_ptr=row_ptr, rows=rows, w=w, directions=dirs, widths=widths,
                                     per_pair=per_unit, walk_order=walk_order, spacing=spacing, steps=steps, lump=lump,
                                     ellipse=ellipse)
        evals += n
        delta[u] += step
        eta[u] += step
        delta[S] -= step / m
        eta[S] -= step / m
    return evals, np.where(used > 0, moved / np.maximum(used, 1.0), np.nan)
