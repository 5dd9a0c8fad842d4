r"""Metropolis and heat-bath kernels on an integer lattice (framework-free, NumPy only).

Setting (Dharangutte, Gao, Gong, Yu 2023, Sec. 4 and App. D.1, Algorithm 1).  The state lives
on a coset of the lattice :math:`L = \{e \in \mathbb{Z}^n : Ce = 0\}`: the curator's noise
(:math:`e \in L`) or the analyst's latent counts (:math:`x \in x_0 + L`, usually also
:math:`x \ge 0`).  The target is known up to a constant through a
:class:`~privinfer.lattice.density.LocalLogDensity`, and moves come from a move set of
:mod:`privinfer.lattice.moves`, so every proposal keeps :math:`Ce` (resp. :math:`Cx`) exactly.

Kernels
-------
All kernels are functions ``(rng, state, ...) -> (state, info)``: the NumPy ``Generator`` is
passed in, and input states are never modified (the ``*_inplace`` building blocks, used by
the coupled kernels of :mod:`privinfer.lattice.coupling`, say so in their names).
:func:`metropolis_kernel` closes over the moves and density and returns a BlackJAX-style
``kernel(rng, state) -> (state, info)``.

* :func:`sweep` -- Gibbs-within-Metropolis (Algorithm 1, one iteration): visit the moves of a
  sweep; at move :math:`b_j` propose :math:`v + \zeta b_j` and accept with probability
  :math:`\min(1, e^{\Delta\ell})`.  :math:`\zeta` is double geometric,
  :math:`q(\zeta) \propto e^{-|\zeta|/s}` (``nonzero=True``: conditioned on
  :math:`\zeta \ne 0`, which is still symmetric).  Each step is a Metropolis step with a
  symmetric proposal, hence reversible; a sweep (a composition) leaves the target invariant;
  since :math:`q(\pm1) > 0` the chain is irreducible on L when the moves generate L (and no
  lower bound cuts the coset into pieces).  For :class:`~privinfer.lattice.moves.PairMoves`
  and a *separable* density a sweep instead proposes all pairs of random matchings at once
  (:func:`matching_step_inplace`): steps on disjoint pairs commute, so this is exactly the
  composition of the pair steps, and the matching is drawn independently of the state.
  For a density of cell sums and sparse linear queries
  (:class:`~privinfer.lattice.LinearQueries`) the matching is split into rounds of pairs
  that change disjoint query rows (:func:`query_matching_step_inplace`); each round is
  scored in one batch.
* :func:`multi_direction_jump` -- :math:`x + Bk` with independent double-geometric
  :math:`k_j` given :math:`k \ne 0` (symmetric: :math:`k \mapsto -k` preserves the event).
  Every :math:`k \ne 0` has positive probability, so any two points of a finite non-negative
  fibre communicate in one move even where single basis moves get stuck at the boundary (a
  lattice basis need not be a Markov basis).
* :func:`direction_gibbs` -- exact conditional along one move: with a lower bound the
  admissible :math:`\zeta` form a finite interval when the move has entries of both signs;
  all its points are scored in one batch and :math:`\zeta` is drawn from the normalized
  conditional (heat bath).

Jumps use :func:`~privinfer.lattice.laws.double_geometric_jumps` (floating-point geometric
draws): this cannot bias the stationary law, because a Metropolis step needs only a symmetric
proposal and :math:`G_1 - G_2` is exactly symmetric in law; the acceptance ratio is computed
from the integer states.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from scipy.special import logsumexp

from .._rng import as_generator
from .density import LocalLogDensity
from .laws import double_geometric_jumps, nonzero_double_geometric, sparse_double_geometric
from .moves import LatticeMoves, MoveCycle, PairMoves, RectangleMoves, as_moves

__all__ = [
    "LatticeState",
    "SweepInfo",
    "init_state",
    "copy_state",
    "resolve_jump_scales",
    "scale_of_move",
    "metropolis_step_inplace",
    "matching_step_inplace",
    "conflict_free_rounds",
    "query_matching_step_inplace",
    "sweep_inplace",
    "sweep",
    "coordinate_step",
    "gibbs_sweep",
    "run_sweeps",
    "metropolis_kernel",
    "multi_direction_jump",
    "direction_range",
    "direction_gibbs",
    "default_jump_scale",
]


class LatticeState(NamedTuple):
    """``m`` chains: lattice points ``e`` (m, n) int64 and the density's statistics ``stat``
    (m, stat_width) (see :class:`~privinfer.lattice.density.LocalLogDensity`)."""

    e: np.ndarray
    stat: np.ndarray


class SweepInfo(NamedTuple):
    """Per-chain number of accepted proposals in the sweep, and proposals made per chain."""

    n_accepted: np.ndarray
    n_proposed: int


def init_state(e0, moves, density: LocalLogDensity, n_chains: int | None = None) -> LatticeState:
    """State at the lattice point(s) ``e0`` ((n,) or (m, n); broadcast to ``n_chains``)."""
    e0 = np.asarray(e0)
    if e0.dtype.kind not in "iu":
        if not np.all(e0 == np.round(e0)):
            raise ValueError("initial lattice point must be integer")
    e0 = e0.astype(np.int64)
    if e0.ndim == 1:
        e0 = e0[None, :]
    if n_chains is not None:
        e0 = np.broadcast_to(e0, (int(n_chains), e0.shape[-1]))
    if e0.shape[-1] != moves.n:
        raise ValueError(f"initial point has length {e0.shape[-1]}, the moves have n = {moves.n}")
    e = np.array(e0, dtype=np.int64)
    return LatticeState(e, density.init_stat(e))


def copy_state(state: LatticeState) -> LatticeState:
    return LatticeState(state.e.copy(), np.array(state.stat, copy=True))


def default_jump_scale(density: LocalLogDensity, moves) -> np.ndarray:
    """Jump scales matched to the density's spread along each move
    (``moves.default_scales(density)``; see the density's ``jump_scale``)."""
    return as_moves(moves).default_scales(density)


def resolve_jump_scales(jump_scale, moves, density) -> np.ndarray:
    """Validated jump scales: one per move of a :class:`LatticeMoves`, one for pair moves."""
    if jump_scale is None:
        jump_scale = moves.default_scales(density)
    k = moves.k if isinstance(moves, LatticeMoves) else 1  # pair, rectangle and cycle moves share one
    s = np.asarray(jump_scale, dtype=float)
    if s.ndim == 0 or s.size == 1:
        s = np.full(k, float(s.ravel()[0]))
    if s.shape != (k,):
        raise ValueError(f"jump_scale must be a scalar or have one entry per move ({k})")
    if np.any(~np.isfinite(s)) or np.any(s <= 0):
        raise ValueError("jump_scale must be finite and > 0")
    return s


def scale_of_move(scales, j):
    """The jump scale of move ``j`` (pair moves share one scale)."""
    return scales[j] if scales.size > 1 else scales[0]


def _jumps(rng, scale, size, nonzero: bool):
    if nonzero:
        return nonzero_double_geometric(rng, np.exp(-1.0 / np.asarray(scale, dtype=float)), size)
    return double_geometric_jumps(rng, scale, size)


def _whole_state(state: LatticeState, density: LocalLogDensity):
    if density.is_local:
        return None
    if state.e.shape[0] != 1:
        raise ValueError("a density with whole-vector terms is sampled one chain at a time")
    return state.e[0]


# ---------------------------------------------------------------------------------------------
def metropolis_step_inplace(state: LatticeState, idx, val, zeta, log_u, density: LocalLogDensity,
                            lower=None) -> np.ndarray:
    """Metropolis step along the move ``(idx, val)`` for every chain, jumps ``zeta`` (m,) and
    log-uniforms ``log_u`` (m,); modifies ``state`` in place and returns the accepted mask."""
    e, stat = state
    old = e[:, idx]
    new = old + zeta[:, None] * val
    ok = zeta != 0
    if lower is not None:
        ok &= np.all(new >= lower, axis=1)
    if not ok.any():
        return ok
    rows = np.flatnonzero(ok)
    dl, update = density.score(idx, old[rows], new[rows], stat[rows], state=_whole_state(state, density))
    keep = log_u[rows] < dl
    acc_rows = rows[keep]
    if acc_rows.size:
        e[np.ix_(acc_rows, idx)] = new[acc_rows]
        density.apply(stat, update, keep, acc_rows)  # only the touched statistic slots
    acc = np.zeros(e.shape[0], dtype=bool)
    acc[acc_rows] = True
    return acc


def matching_step_inplace(state: LatticeState, pairs, zeta, log_u, density: LocalLogDensity,
                          lower=None) -> np.ndarray:
    """Simultaneous Metropolis steps on the disjoint pairs ``pairs`` (P, 2), moves
    :math:`e_i - e_k`, jumps and log-uniforms of shape (m, P); the density must be separable
    (each pair's ratio involves its two cells only).  Returns accepted counts per chain."""
    if not density.separable:
        raise ValueError("simultaneous pair steps need a separable density")
    val = np.array([1, -1], dtype=np.int64)
    e = state.e
    old = e[:, pairs]  # (m, P, 2)
    new = old + zeta[..., None] * val
    dl, _ = density.score(pairs, old, new, np.zeros(zeta.shape + (density.stat_width,)))
    acc = (log_u < dl) & (zeta != 0)
    if lower is not None:
        acc &= np.all(new >= lower, axis=-1)
    e[:, pairs] = np.where(acc[..., None], new, old)
    return acc.sum(axis=1)


def conflict_free_rounds(slots) -> list:
    """Split pairs into rounds in which no two pairs change the same statistic slot.

    ``slots`` (P, K): the slots each pair changes (``-1`` = none).  First fit in the given
    order: pair ``p`` goes to the first round in which none of its slots is changed yet
    (rounds used by a slot are the bits of an integer).  Depends on ``slots`` only, never on
    a state.
    """
    slots = np.asarray(slots)
    P = slots.shape[0]
    if P == 0:
        return []
    # a slot changed by one move only cannot conflict: keep the shared ones
    vals, counts = np.unique(slots[slots >= 0], return_counts=True)
    shared = np.isin(slots, vals[counts > 1])
    if not shared.any():
        return [np.arange(P)]
    slots = np.where(shared, slots, -1)
    used: dict = {}
    assign = np.zeros(P, dtype=np.int64)
    busy = np.flatnonzero(shared.any(axis=1))
    for p, row in zip(busy.tolist(), slots[busy].tolist()):
        u = 0
        for sl in row:
            if sl >= 0:
                u |= used.get(sl, 0)
        r = (~u & (u + 1)).bit_length() - 1  # lowest round not used by any of its slots
        assign[p] = r
        bit = 1 << r
        for sl in row:
            if sl >= 0:
                used[sl] = used.get(sl, 0) | bit
    order = np.argsort(assign, kind="stable")
    bounds = np.searchsorted(assign[order], np.arange(int(assign.max()) + 2))
    return [order[a:b] for a, b in zip(bounds[:-1], bounds[1:]) if b > a]


def query_matching_step_inplace(state: LatticeState, cells, zeta, log_u, density: LocalLogDensity,
                                lower=None, val=(1, -1)) -> np.ndarray:
    r"""Metropolis steps along the moves :math:`\sum_j val_j e_{cells_{p,j}}` on disjoint cells
    ``cells`` (P, w) (pairs by default) for a density of cell sums and
    :class:`~privinfer.lattice.LinearQueries` terms (``density.pair_batchable``), jumps and
    log-uniforms (m, P); returns accepted counts per chain.

    The moves are split into :func:`conflict_free_rounds`: within a round no two moves share
    a cell or a query row they change, so each step's acceptance ratio involves only its own
    cells and rows and the round is exactly the composition of its steps; the rounds run in
    sequence.  The split depends on the moves only (not on the state), so the composition of
    pi-reversible steps keeps pi invariant.  Each round writes only the statistic slots it
    changes.
    """
    e, stat = state
    val = np.asarray(val, dtype=np.int64)
    effects, slots = density.move_effects(cells, val)
    n_acc = np.zeros(e.shape[0], dtype=np.int64)
    for sel in conflict_free_rounds(slots):
        p = cells[sel]
        z = zeta[:, sel]
        old = e[:, p]  # (m, S, w)
        eff = [(k, rows[sel], coef[sel]) for k, rows, coef in effects]
        dl, answers = density.score_moves(p, old, z, stat, eff, val)
        acc = (log_u[:, sel] < dl) & (z != 0)
        if lower is not None:
            acc &= np.all(old + z[..., None] * val >= lower, axis=-1)
        if not acc.any():
            continue
        e[:, p] = np.where(acc[..., None], old + z[..., None] * val, old)
        for (k, rows, coef), s_new in zip(eff, answers):
            c, q = np.nonzero(acc)
            w = coef[q] != 0
            cc = np.broadcast_to(c[:, None], w.shape)[w]
            stat[cc, density.slot_offset(k) + rows[q][w]] = s_new[c, q][w]
        n_acc += acc.sum(axis=1)
    return n_acc


def sweep_inplace(rng, state: LatticeState, moves, density: LocalLogDensity, scales, order: str = "random",
                  *, lower=None, nonzero: bool = False, matchings: int | None = None):
    """One sweep in place (see :func:`sweep`); ``scales`` from :func:`resolve_jump_scales`."""
    m = state.e.shape[0]
    if isinstance(moves, MoveCycle):
        n_acc = np.zeros(m, dtype=np.int64)
        steps = 0
        for i, part in enumerate(moves.parts):
            mt = matchings if moves.matchings is None else moves.matchings[i]
            state, info = sweep_inplace(rng, state, part, density, scales[:1], order, lower=lower,
                                        nonzero=nonzero, matchings=mt)
            n_acc += info.n_accepted
            steps += info.n_proposed
        return state, SweepInfo(n_acc, steps)
    if isinstance(moves, RectangleMoves) and not density.pair_batchable:
        raise ValueError("rectangle moves need a density of cell sums and LinearQueries terms")
    if isinstance(moves, (PairMoves, RectangleMoves)) and density.pair_batchable:
        rect = isinstance(moves, RectangleMoves)
        n_acc = np.zeros(m, dtype=np.int64)
        steps = 0
        for _ in range(moves.matchings_per_sweep if matchings is None else int(matchings)):
            cells = moves.matching(rng)
            P = cells.shape[0]
            if P == 0:
                break
            zeta = _jumps(rng, scales[0], (m, P), nonzero)
            log_u = np.log(rng.random((m, P)))
            if density.separable and not rect:
                n_acc += matching_step_inplace(state, cells, zeta, log_u, density, lower)
            else:
                n_acc += query_matching_step_inplace(state, cells, zeta, log_u, density, lower,
                                                     val=moves.val if rect else (1, -1))
            steps += P
        return state, SweepInfo(n_acc, steps)
    sched = moves.schedule(rng, order)
    steps = len(sched)
    sc = scales[sched][:, None] if scales.size > 1 else scales[0]
    zeta = _jumps(rng, sc, (steps, m), nonzero)
    log_u = np.log(rng.random((steps, m)))
    n_acc = np.zeros(m, dtype=np.int64)
    for k in range(steps):
        idx, val = moves.move(sched[k])
        n_acc += metropolis_step_inplace(state, idx, val, zeta[k], log_u[k], density, lower)
    return state, SweepInfo(n_acc, steps)


def sweep(rng, state: LatticeState, moves, density: LocalLogDensity, jump_scale=None, order: str = "random",
          *, lower=None, nonzero: bool = False, matchings: int | None = None):
    r"""One Gibbs-within-Metropolis sweep for all chains (Algorithm 1, one iteration).

    ``(rng, state, moves, density, ...) -> (state, SweepInfo)``.  ``order``: ``"systematic"``,
    ``"reverse"`` or ``"random"`` for a basis (pair moves always draw random pairs);
    ``lower``: reject proposals with a cell below it (e.g. 0 for counts); ``nonzero``: jumps
    conditioned on :math:`\zeta \ne 0`; ``matchings``: matchings per sweep for separable pair
    sweeps (default: about one proposal per lattice dimension).
    """
    moves = as_moves(moves)
    st = copy_state(state)
    return sweep_inplace(rng, st, moves, density, resolve_jump_scales(jump_scale, moves, density), order,
                         lower=lower, nonzero=nonzero, matchings=matchings)


def gibbs_sweep(rng, state: LatticeState, moves, target, jump_scale=None, order: str = "systematic"):
    """:func:`sweep` with the curator's defaults (double geometric jumps, systematic order)."""
    return sweep(rng, state, moves, target, jump_scale, order)


def coordinate_step(rng, state: LatticeState, j, moves, target, jump_scale=None):
    r"""One Metropolis step along move ``j`` for every chain: ``-> (state, accepted)``."""
    moves = as_moves(moves)
    scales = resolve_jump_scales(jump_scale, moves, target)
    s = scale_of_move(scales, j if isinstance(moves, LatticeMoves) else 0)
    st = copy_state(state)
    m = st.e.shape[0]
    zeta = double_geometric_jumps(rng, s, (m,))
    log_u = np.log(rng.random(m))
    idx, val = moves.move(j)
    return st, metropolis_step_inplace(st, idx, val, zeta, log_u, target)


def metropolis_kernel(moves, density: LocalLogDensity, jump_scale=None, order: str = "random", *,
                      lower=None, nonzero: bool = False):
    """``kernel(rng, state) -> (state, SweepInfo)``: one :func:`sweep` with these settings."""
    moves = as_moves(moves)
    scales = resolve_jump_scales(jump_scale, moves, density)

    def kernel(rng, state):
        return sweep_inplace(rng, copy_state(state), moves, density, scales, order, lower=lower, nonzero=nonzero)

    return kernel


def run_sweeps(rng, state: LatticeState, moves, target, n_sweeps: int, jump_scale=None,
               order: str = "systematic", thin: int = 0):
    r"""Run ``n_sweeps`` sweeps.  Returns ``(state, info)`` with ``info = {"acceptance_rate":
    per-chain mean acceptance, "trace": (n_sweeps // thin, m, n) array of e if thin > 0}``."""
    rng = as_generator(rng)
    moves = as_moves(moves)
    n_sweeps = int(n_sweeps)
    if n_sweeps < 0:
        raise ValueError("n_sweeps must be >= 0")
    scales = resolve_jump_scales(jump_scale, moves, target)
    st = copy_state(state)
    n_acc = np.zeros(st.e.shape[0], dtype=np.int64)
    trace = []
    for t in range(n_sweeps):
        st, info = sweep_inplace(rng, st, moves, target, scales, order)
        n_acc += info.n_accepted
        if thin and (t + 1) % thin == 0:
            trace.append(st.e.copy())
    out = {"acceptance_rate": n_acc / max(1, n_sweeps * moves.steps_per_sweep)}
    if thin:
        out["trace"] = np.array(trace).reshape((len(trace),) + st.e.shape)
    return st, out


# ---------------------------------------------------------------------------------------------
def multi_direction_jump(rng, state: LatticeState, basis: LatticeMoves, density: LocalLogDensity, a: float,
                         *, lower=None):
    """Propose ``x + B k`` (:func:`~privinfer.lattice.laws.sparse_double_geometric`, ``k != 0``)
    for a single chain; Metropolis accept/reject.  ``-> (state, {"accepted", "n_directions"})``."""
    st = copy_state(state)
    k = sparse_double_geometric(rng, basis.k, a)
    js = np.flatnonzero(k)
    step = np.zeros(basis.n, dtype=np.int64)
    for j in js:
        step[basis.indices[j]] += k[j] * basis.values[j]
    idx = np.flatnonzero(step)
    info = {"accepted": False, "n_directions": len(js)}
    if idx.size == 0:  # the moves cancelled: a null move
        return st, info
    old = st.e[0, idx]
    new = old + step[idx]
    if lower is not None and np.any(new < lower):
        return st, info
    dl, update = density.score(idx, old, new, st.stat[0], state=_whole_state(st, density))
    if np.log(rng.random()) < float(dl):
        st.e[0, idx] = new
        density.apply(st.stat[0], update)
        info["accepted"] = True
    return st, info


def direction_range(x, idx, vals, lower=0, bound=None):
    """Interval ``[lo, hi]`` of ``zeta`` keeping ``x[idx] + zeta * vals >= lower`` (``lower``
    None: unbounded), intersected with ``[-bound, bound]`` if given."""
    lo, hi = -np.inf, np.inf
    if lower is not None:
        xs = np.asarray(x)[idx] - lower
        pos, neg = vals > 0, vals < 0
        if pos.any():
            lo = max(lo, float(np.max(np.ceil(-xs[pos] / vals[pos]))))
        if neg.any():
            hi = min(hi, float(np.min(np.floor(xs[neg] / -vals[neg]))))
    if bound is not None:
        lo, hi = max(lo, -bound), min(hi, bound)
    return lo, hi


def direction_gibbs(rng, state: LatticeState, idx, vals, density: LocalLogDensity, *, lower=0,
                    max_support: int = 256):
    """Exact conditional update of a single chain along the move ``(idx, vals)`` when its
    support is finite and at most ``max_support`` points.

    ``-> (state, info)``; ``info["exact"]`` is False when the support is unbounded or larger
    than ``max_support`` (the state is returned unchanged: make a Metropolis move instead).
    """
    x = state.e[0]
    lo, hi = direction_range(x, idx, vals, lower)
    if not (np.isfinite(lo) and np.isfinite(hi)) or hi - lo + 1 > max_support:
        return state, {"exact": False, "support": np.inf if not np.isfinite(hi - lo) else hi - lo + 1}
    zs = np.arange(int(lo), int(hi) + 1)
    old = x[idx]
    new = old[None, :] + zs[:, None] * vals[None, :]
    lw, update = density.score(idx, old, new, state.stat[0], state=_whole_state(state, density))
    lw = np.asarray(lw, dtype=float)
    lw = lw - logsumexp(lw)
    i = int(rng.choice(len(zs), p=np.exp(lw)))
    st = copy_state(state)
    if zs[i] != 0:
        st.e[0, idx] = new[i]
        density.apply(st.stat[0], update, i)
    return st, {"exact": True, "support": len(zs), "moved": bool(zs[i] != 0)}
