r"""One unit's profile moved alone, its parent's walk taking up the change and a cousin's parent
giving it back: a kernel of :class:`~privinfer.pymc.WalkGibbs` (an exact update).

Why.  Sibling units' increments are centred, :math:`\eta_v = \delta_v - \bar\delta_{g(v)}`, so
a parent's log profile is the mean of its children's and no move of one walk alone changes one
unit's profile alone: the pair moves and the carried update move a sibling the other way, the
move against several siblings (:mod:`privinfer.pymc.walk_alone`) moves several by a share each.
Where the unit's cells are set by its profile more than by their measurements (a small tract's
old-age cells) and its siblings' cells are pinned by theirs, the siblings hold the move back.
That is the slowest direction left on Kentucky's tracts: small tracts whose ages depart far from
their county's (campuses; shares 65+ of 1.5-4.3% against 11-17%), their old-age cells' 20-draw
means correlated 0.7-0.9 with their county's profile (``benchmarks/bench_hierarchy_model.py``,
``print_slow_profiles``) -- the unit's profile and its parent's mean moving together.

The move.  With a parent walk (the units' parents' own centred walk, entering every unit's base
profile; a county's walk under its tracts'), unit ``u`` in parent ``g`` of ``J`` units, a cousin
``w`` in another parent ``h`` (of ``J'`` units, the same grandparent) and a direction ``D``,
in raw increments, with :math:`a = \Delta D / J`:

.. math:: \delta_u \mathrel{+}= (J - 1)a,\quad \delta_s \mathrel{-}= a\ (s \ne u \text{ in } g),\quad
          \delta^{\mathrm{pa}}_g \mathrel{+}= a,\quad \delta^{\mathrm{pa}}_h \mathrel{-}= a,\quad
          \delta_w \mathrel{-}= (J' - 1)a,\quad \delta_t \mathrel{+}= a\ (t \ne w \text{ in } h).

Every group's mean raw increment is kept (the parents' too), so every centred increment moves as
its raw one; the profiles follow: ``u``'s by :math:`+J a = \Delta D` (its parent's :math:`+a`
and its own :math:`+(J-1)a`), its siblings' not at all (:math:`+a - a`), ``w``'s by :math:`-J'a`
and its siblings' not at all.  So only ``u``'s and ``w``'s cells see the move: ``u``'s profile
moves alone while ``w``'s moves by :math:`J'/J` of it -- little when ``w`` has few siblings
(:func:`cousin_weights` draws cousins in proportion to :math:`1/J'^2`, the resistance of a pinned
cousin's cells).  The density of :math:`\Delta` holds the Gaussian priors of every raw increment
that moves (siblings, both parents: a quadratic in :math:`\Delta`, each term :math:`p_j(\delta_j +
c_j\Delta D)^2` with ``c`` the coefficients above over ``J``, summed into
:math:`A(\bar d + \Delta D)^2` plus a constant, :math:`A = \sum_j p_j c_j^2`, :math:`A\bar d =
\sum_j p_j c_j\delta_j` per coordinate), ``u``'s and ``w``'s Dirichlet-multinomials and the exact
measurement term, both units' cells carried along (:mod:`privinfer.pymc.walk_carry`: ancillary
coordinates :math:`\xi = x - h(\theta)`, the small cells by their quantiles); :math:`\Delta` is
slice sampled: one pair of the compiled carried update on two pseudo-units (``u``'s row with its
profile as base, every prior term on it; ``w``'s row moved by :math:`-J'/J` of it, no prior
term).  Exact whatever the units, cousins and directions, as long as their choice does not depend
on the chain's state (:func:`~privinfer.pymc.walk_alone.alone_units`: fixed sizes; cousins drawn
afresh with fixed weights).  Each evaluation reads two units' cells, as a pair move's.
Measured on Kentucky's tracts beside :data:`~privinfer.pymc.walk.COUSINS_SMALL` (on by default
for the tracts under 0.65 of the median size).
"""

from __future__ import annotations

import numpy as np

from .walk_alone import pseudo_pair_update
from .walk_carry import CARRY_STEPS
from .walk_kernel import prior_precisions, walk_offsets

__all__ = ["cousin_weights", "cousin_update"]


def cousin_weights(groups, parent_groups=None) -> np.ndarray:
    """Every unit's weight as a cousin (:func:`cousin_update`): :math:`1/J^2`, ``J`` the size of its
    group (``groups`` ``(U,)``), for units whose group has a sibling group under the same
    grandparent (``parent_groups`` ``(G,)``, the groups' own groups; None: one); 0 otherwise.
    Fixed data, so the update stays exact."""
    groups = np.asarray(groups, dtype=np.int64)
    J = np.bincount(groups)
    G = J.size
    top = np.zeros(G, dtype=np.int64) if parent_groups is None else np.asarray(parent_groups, dtype=np.int64)
    if top.shape != (G,):
        raise ValueError(f"parent_groups must give one group to each of the {G} parents")
    n_parents = np.bincount(top[J > 0])
    return np.where(n_parents[top[groups]] >= 2, 1.0 / J[groups].astype(float) ** 2, 0.0)


def _prior_fold(delta, parent_delta, prec, parent_prec, u, sib_u, g, w, sib_w, h, J, Jw):
    r"""The move's prior terms as one Gaussian in :math:`\Delta` (module docstring): the raw
    increment :math:`\bar d` and precision :math:`A` per coordinate."""
    n_u, n_w = len(sib_u), len(sib_w)
    d = np.concatenate([delta[[u]], parent_delta[[g, h]], delta[[w]], delta[sib_u], delta[sib_w]])
    c = np.concatenate([[(J - 1.0) / J, 1.0 / J, -1.0 / J, -(Jw - 1.0) / J], np.full(n_u, -1.0 / J),
                        np.full(n_w, 1.0 / J)])[:, None]
    p = np.concatenate([prec[None], parent_prec[None], parent_prec[None], np.broadcast_to(prec, (1 + n_u + n_w,
                                                                                              prec.size))])
    # the terms summed in turn (cumsum is sequential), each as p * c * c and p * c * d
    A = np.cumsum(p * c * c, axis=0)[-1]
    B = np.cumsum(p * c * d, axis=0)[-1]
    return B / A, A


def cousin_update(rng, x, res, units, *, grid, code, base, eta, delta, sigma, kappa, groups, parent_delta,
                  parent_sigma, carry, row_ptr, rows, w, parent_groups=None, directions=None, widths=0.2,
                  per_unit=None, walk_order: int = 1, spacing=None, steps: int = CARRY_STEPS,
                  lump=None, ellipse: bool = True) -> tuple[int, np.ndarray]:
    """One move (module docstring) of each unit in ``units``, in turn, against a cousin drawn with
    :func:`cousin_weights`, along ``per_unit`` directions drawn at random without replacement
    (None: all).

    ``x`` (int64, n), ``res = y - Bx``, ``eta`` (centred increments ``(U, K-1)``), ``delta`` (raw),
    ``parent_delta`` (the parent walk's raw increments ``(G, K-1)``, its units the groups'
    indices) and ``base`` ``(U, d)`` (the units' base log profiles, which hold the parent walk's
    offsets: the rows of both parents' units follow its change) are updated in place; ``sigma``
    and ``parent_sigma`` ``(K-1,)`` the two walks' step scales (the parent walk's ``code``, order
    and spacing the same as this one's); ``parent_groups`` ``(G,)`` the parents' sibling groups
    (None: one); ``grid`` ``(U, d)`` every unit's cells (one row per unit); the rest as for
    :func:`~privinfer.pymc.walk_alone.alone_update` (``ellipse``: each move followed by an
    elliptical slice update of its whole move).  Returns the density evaluations and the mean
    ``|Delta|`` per direction (nan where none moved)."""
    grid = np.asarray(grid, dtype=np.int64)
    groups = np.asarray(groups, dtype=np.int64)
    K1 = delta.shape[1]
    if parent_delta.ndim != 2 or parent_delta.shape[1] != K1 or parent_delta.shape[0] <= groups.max(initial=-1):
        raise ValueError(f"parent_delta must be (parents, {K1}), one row per group of the units")
    weights = cousin_weights(groups, parent_groups)
    top = np.zeros(parent_delta.shape[0], dtype=np.int64) if parent_groups is None else np.asarray(parent_groups)
    dirs = np.eye(K1) if directions is None else np.asarray(directions, dtype=float)
    prec, parent_prec = prior_precisions(sigma, None, None), prior_precisions(parent_sigma, None, None)
    J_of = np.bincount(groups)
    moved = np.zeros(dirs.shape[0])
    used = np.zeros(dirs.shape[0])
    evals = 0
    kids = np.split(np.argsort(groups, kind="stable"), np.cumsum(J_of)[:-1])     # every group's units, in order
    pools = {}
    for u in np.asarray(units, dtype=np.int64):
        g = groups[u]
        if J_of[g] < 2:
            raise ValueError("a unit moved against a cousin needs a sibling (an only child has no departure)")
        if g not in pools:
            pool = np.where((groups != g) & (top[groups] == top[g]), weights, 0.0)
            if not pool.sum() > 0:
                raise ValueError("a unit moved against a cousin needs a parent with a sibling")
            pools[g] = pool / pool.sum()
        cw = rng.choice(groups.size, p=pools[g])
        h = groups[cw]
        J, Jw = float(J_of[g]), float(J_of[h])
        sib_u = kids[g][kids[g] != u]
        sib_w = kids[h][kids[h] != cw]
        d_bar, A = _prior_fold(delta, parent_delta, prec, parent_prec, u, sib_u, g, cw, sib_w, h, J, Jw)
        pair = np.array([u, cw])
        p_base = base[pair] + walk_offsets(eta[pair], code, walk_order, spacing)
        n, step = pseudo_pair_update(rng, x, res, grid[pair], None, p_base, np.stack([d_bar, np.zeros(K1)]),
                                     np.stack([A, np.zeros(K1)]), -Jw / J, moved, used, code=code, sigma=sigma,
                                     kappa=kappa, carry=carry, row_ptr=row_ptr, rows=rows, w=w, directions=dirs,
                                     widths=widths, per_pair=per_unit, walk_order=walk_order, spacing=spacing,
                                     steps=steps, lump=lump, ellipse=ellipse)
        evals += n
        a = step / J                        # Delta * D summed over the directions moved, over J
        for units_of, shift in ((np.r_[u], (J - 1.0) * a), (sib_u, -a), (np.r_[cw], -(Jw - 1.0) * a), (sib_w, a)):
            delta[units_of] += shift
            eta[units_of] += shift
        parent_delta[g] += a
        parent_delta[h] -= a
        off = walk_offsets(a[None, :], code, walk_order, spacing)[0]
        base[kids[g]] += off
        base[kids[h]] -= off
    return evals, np.where(used > 0, moved / np.maximum(used, 1.0), np.nan)
