r"""Framework-free Metropolis kernels on an integer lattice (the curator's sampler).

Setting (Dharangutte, Gao, Gong, Yu 2023, Sec. 4 and App. D.1, Algorithm 1).  Noise lives on
the lattice :math:`L = \{e \in \mathbb{Z}^n : Ce = 0\} = \{Bz : z \in \mathbb{Z}^d\}` with an
integer basis :math:`B` (n x d, full column rank; e.g. ``Invariant.lattice_basis()``), and
the target is known up to a constant, :math:`\pi(e) \propto \exp(\ell(e))`.  The paper's
proposal (its Eq. 11) adds :math:`B\zeta` where the "pre-jump" :math:`\zeta \in \mathbb{Z}^d`
has independent, symmetric double geometric entries
:math:`q(\zeta_j) = \frac{1-a_j}{1+a_j} a_j^{|\zeta_j|}`, :math:`a_j = e^{-1/s_j}`
(:math:`s_j` = ``jump_scale``).  Because :math:`B` has full column rank the map
:math:`z \mapsto Bz` is a bijection of :math:`\mathbb{Z}^d` onto :math:`L`, so no Jacobian
appears and every proposal keeps :math:`Ce = 0` exactly.

Gibbs-within-Metropolis (Algorithm 1, steps 5-7): one *sweep* visits the d lattice
coordinates (in a fixed or a freshly permuted order); at coordinate j it proposes
:math:`e' = e + \zeta_j b_j` and accepts with probability :math:`\min(1, e^{\ell(e')-\ell(e)})`.
Each such step is a Metropolis step with a symmetric proposal, hence reversible with
respect to :math:`\pi`; a sweep (a composition) leaves :math:`\pi` invariant, and since
:math:`q_j(\pm1) > 0` and :math:`\pi > 0` on :math:`L` the chain is irreducible and aperiodic.

Local acceptance ratios.  :math:`b_j` has few non-zeros (2 for totals/groups, 4 for the
2 x 2 moves of a two-way table), so :math:`\ell(e') - \ell(e)` is computed from those entries
only plus a scalar sufficient statistic carried in the state:

* :class:`L1Target` :math:`\ell(e) = -\lambda\|e\|_1`:
  :math:`\Delta\ell = -\lambda\sum_{i\in\mathrm{supp}\,b_j}(|e_i + \zeta b_{ij}| - |e_i|)`.
* :class:`L2Target` :math:`\ell(e) = -\lambda\|e\|_2`: carry :math:`S = \|e\|_2^2` (an exact
  integer), :math:`S' = S + \sum_{i\in\mathrm{supp}}((e_i+\zeta b_{ij})^2 - e_i^2)`,
  :math:`\Delta\ell = -\lambda(\sqrt{S'} - \sqrt{S})`.
* :class:`GaussianTarget` :math:`\ell(e) = -\|e\|^2/(2\sigma^2)`: :math:`\Delta\ell = -(S'-S)/(2\sigma^2)`.

Any object with ``init_stat(e)``, ``delta_logp(old, new, stat)`` and ``logp(e)`` (see
:class:`L1Target`) is a target.

State and vectorization.  :class:`LatticeState` holds ``m`` independent chains at once:
points ``e`` (m, n) int64 and the target's statistic ``stat`` (m,).  Kernels are pure
functions ``kernel(rng, state, moves, target, ...) -> (state, info)``: the NumPy
``Generator`` is passed in and input states are never modified.

Moves.  A move set is :class:`LatticeMoves` (the columns of a basis; a sweep visits each once
in ``order``) or :class:`PairMoves` (random within-group transfers :math:`e_i - e_k` for
totals and partitions; see its docstring for why).  :func:`free_cell_basis` turns a short
basis into one whose coordinates are cells of e.  Both expose ``n``, ``k``,
``steps_per_sweep``, ``schedule(rng, order)`` and ``move(id) -> (indices, values)``.

Jumps.  :math:`\zeta = G_1 - G_2` with :math:`G_1, G_2` iid geometric (success probability
:math:`1-a`) has exactly the double geometric pmf above (convolution:
:math:`\sum_{g} (1-a)^2 a^{g} a^{g+|k|} = \frac{(1-a)^2}{1-a^2} a^{|k|}`).  NumPy's geometric
sampler uses floating point; this cannot bias the stationary law, because the Metropolis
step only needs the proposal to be symmetric, and :math:`G_1 - G_2` is exactly symmetric in
law whatever the law of :math:`G`.  (Exactness of *the noise law* is the job of the
acceptance ratio, which is computed from integers; the coupling module states where the
proposal pmf itself enters.)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import scipy.sparse as sp

from .._rng import as_generator

__all__ = [
    "LatticeMoves",
    "PairMoves",
    "SparseLatticeBasis",
    "as_moves",
    "L1Target",
    "L2Target",
    "GaussianTarget",
    "LatticeState",
    "SweepInfo",
    "init_state",
    "double_geometric_jumps",
    "jump_logpmf",
    "coordinate_step",
    "gibbs_sweep",
    "run_sweeps",
    "default_jump_scale",
    "sweep_order",
    "free_cell_basis",
]


# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LatticeMoves:
    r"""A finite set of lattice moves :math:`b_1, \dots, b_k` stored column by column.

    The columns of an integer basis :math:`B` (n x d) are the paper's moves (k = d); more
    columns than the rank are allowed (a generating set: the chain stays on the lattice and
    is irreducible as long as the moves generate it).  ``indices[j]`` are the rows where move
    j is non-zero and ``values[j]`` its entries (int64).  Build with :meth:`from_matrix`
    (dense ndarray or scipy.sparse).  A sweep visits ``steps_per_sweep = k`` moves.
    """

    n: int
    k: int
    indices: tuple
    values: tuple

    @classmethod
    def from_matrix(cls, B) -> "LatticeMoves":
        if isinstance(B, (LatticeMoves, PairMoves)):
            return B
        if sp.issparse(B):
            Bc = sp.csc_matrix(B)
            dense_cols = None
        else:
            Bd = np.asarray(B)
            if Bd.ndim != 2:
                raise ValueError(f"lattice basis must be 2-dimensional (n x d), got shape {Bd.shape}")
            Bc = None
            dense_cols = Bd
        n, d = (Bc.shape if Bc is not None else dense_cols.shape)
        if d == 0:
            raise ValueError("the lattice is {0}: there is no noise direction to sample")
        idx, val = [], []
        for j in range(d):
            if Bc is not None:
                col = Bc[:, j]
                rows, v = col.indices, col.data
            else:
                rows = np.flatnonzero(dense_cols[:, j])
                v = dense_cols[rows, j]
            v = np.asarray(v)
            if not np.all(np.isfinite(v.astype(float))) or not np.all(v == np.round(v)):
                raise ValueError("lattice basis must have integer entries")
            if rows.size == 0:
                raise ValueError(f"lattice basis column {j} is zero")
            idx.append(np.asarray(rows, dtype=np.intp))
            val.append(np.asarray(v, dtype=np.int64))
        return cls(int(n), int(d), tuple(idx), tuple(val))

    @property
    def steps_per_sweep(self) -> int:
        return self.k

    def to_dense(self) -> np.ndarray:
        B = np.zeros((self.n, self.k), dtype=np.int64)
        for j in range(self.k):
            B[self.indices[j], j] = self.values[j]
        return B

    def schedule(self, rng, order: str):
        """Move ids of one sweep (:func:`sweep_order`)."""
        return sweep_order(rng, self.k, order)

    def move(self, j):
        return self.indices[j], self.values[j]

    def default_scales(self, target) -> np.ndarray:
        return default_jump_scale(target, self)


class PairMoves:
    r"""All moves :math:`e_i - e_k` between two cells of the same group (totals, partitions).

    These generate :math:`\{e \in \mathbb{Z}^n: \text{group sums of } e = 0\}` (any zero-sum
    vector is a sum of transfers).  A sweep makes ``steps_per_sweep`` = n - (number of
    groups) = the lattice dimension random-scan steps, each picking a cell i uniformly among
    cells in groups of size >= 2 and a partner k uniformly among the other cells of its
    group.  The selection is symmetric (:math:`P(i, k) = P(k, i)`), so with a symmetric
    jump every step is a reversible Metropolis step and the random-scan mixture is too.

    For separable targets (:class:`L1Target`, :class:`GaussianTarget`: the log-target is a
    sum over cells, so a pair's acceptance ratio involves its two cells only) a sweep instead
    draws about ``steps_per_sweep / (n/2)`` uniformly random *matchings* (disjoint pairs,
    :meth:`matching`) and updates all pairs of a matching at once.  Steps on disjoint pairs
    commute, so this is exactly the composition of those pair steps, each pi-reversible; the
    matching is drawn independently of the state, so the mixture keeps pi invariant.  It
    vectorizes a whole matching into one NumPy operation.

    Why not the basis :math:`e_i - e_{i+1}`: its Gibbs sweep moves mass between neighbours
    only (a diffusion, of order :math:`n^2` sweeps); a star basis :math:`e_i - e_n` mixes fast
    but every move touches the shared cell n, so a coupling of two chains leaks
    disagreement through it and rarely meets when n ~ 100.  Random pairs touch two cells
    only, and the coupled chains' agreeing cells stay agreed (see
    :mod:`privinfer.samplers.coupling`).
    """

    def __init__(self, labels):
        labels = np.asarray(labels)
        if labels.ndim != 1 or labels.size == 0:
            raise ValueError("labels must be a non-empty 1-d array")
        _, codes = np.unique(labels, return_inverse=True)
        codes = codes.ravel()
        self.n = int(labels.size)
        counts = np.bincount(codes)
        order = np.argsort(codes, kind="stable")
        self._sorted = order
        self._start = np.concatenate([[0], np.cumsum(counts)[:-1]])[codes]
        self._size = counts[codes]
        self._eligible = np.flatnonzero(self._size >= 2)
        self.k = int(self.n - counts.size)
        if self.k == 0:
            raise ValueError("every group has one cell: the lattice is {0}")
        # position of each cell inside its group's block of self._sorted
        pos = np.empty(self.n, dtype=np.int64)
        pos[order] = np.arange(self.n) - np.concatenate([[0], np.cumsum(counts)[:-1]])[codes[order]]
        self._pos = pos
        self._val = np.array([1, -1], dtype=np.int64)
        self._codes = codes
        self._group_start = np.concatenate([[0], np.cumsum(counts)[:-1]])
        self._group_size = counts

    @property
    def steps_per_sweep(self) -> int:
        return self.k

    def schedule(self, rng, order: str = "random"):
        """Random (i, k) pairs for one sweep, shape (steps, 2)."""
        i = self._eligible[rng.integers(0, self._eligible.size, size=self.k)]
        r = rng.integers(0, self._size[i] - 1)
        r = r + (r >= self._pos[i])  # skip i itself
        kk = self._sorted[self._start[i] + r]
        return np.stack([i, kk], axis=1)

    def move(self, pair):
        return np.asarray(pair, dtype=np.intp), self._val

    def matching(self, rng) -> np.ndarray:
        """A uniformly random set of disjoint within-group pairs (P, 2): shuffle each group
        and pair consecutive cells (an odd group leaves one cell out)."""
        order = np.lexsort((rng.random(self.n), self._codes))
        cs = self._codes[order]
        pos = np.arange(self.n) - self._group_start[cs]
        first = (pos % 2 == 0) & (pos + 1 < self._group_size[cs])
        i = np.flatnonzero(first)
        return np.stack([order[i], order[i + 1]], axis=1)

    def default_scales(self, target) -> np.ndarray:
        """Target-matched scale (:func:`default_jump_scale`), capped at 0.6 for l1 targets:
        with 100 cells and eps = 0.192 (matched scale about 5), 16 L-lag coupled pairs had
        not met after 5,000 sweeps at the matched scale, nor (9 of 16) after 20,000 at scale
        1; at 0.6 all met after 1,800-15,200 sweeps, at 0.4 one had not met after 20,000.
        A certified burn-in needs meetings, so the coupling-friendly scale is the default."""
        s = _default_scale_for(target, 2.0, 2.0, self.k)
        if isinstance(target, L1Target):
            s = min(float(s), 0.6)
        return np.full(1, s)


#: Backwards-compatible name: a lattice basis is a set of moves.
SparseLatticeBasis = LatticeMoves


def free_cell_basis(B) -> tuple[np.ndarray, np.ndarray | None]:
    r"""Change an integer lattice basis to one whose coordinates are free cells of ``e``.

    Find rows F (|F| = d) and a unimodular :math:`U` with :math:`(BU)_F = I_d`; then
    :math:`B' = BU` generates the same lattice and :math:`z = e_F`: the lattice coordinates are
    d cells of the noise vector, and every other cell is an integer combination of them.
    Greedy: for each column k pick an unused row r with :math:`M_{rk} = \pm 1` (fewest
    non-zeros first, to keep columns sparse), scale column k by :math:`M_{rk}` and clear row r
    in the other columns with the integer column operations
    :math:`M_{:,j} \leftarrow M_{:,j} - M_{rj} M_{:,k}` (unimodular).  Returns ``(B', F)``, or
    ``(B, None)`` if some column has no unit pivot left (the basis is then used unchanged).

    Why: for the grand total the consecutive moves :math:`e_i - e_{i+1}` make z a cumulative
    sum of e, so a Gibbs sweep in z moves mass between neighbours only (a diffusion needing
    of order :math:`n^2` sweeps); the free-cell basis :math:`e_i - e_n` has :math:`z_i = e_i`,
    and for two-way margins the pivot moves :math:`e_{ik} - e_{iK} - e_{Rk} + e_{RK}` have
    :math:`z_{ik} = e_{ik}`.  Both keep 2 resp. 4 non-zero entries per move.
    """
    M = np.array(B, dtype=np.int64, copy=True)
    n, d = M.shape
    used = np.zeros(n, dtype=bool)
    F = np.empty(d, dtype=np.int64)
    nnz = (M != 0).sum(axis=1)
    for k in range(d):
        cand = np.flatnonzero((np.abs(M[:, k]) == 1) & ~used)
        if cand.size == 0:
            return np.asarray(B, dtype=np.int64), None
        r = int(cand[np.argmin(nnz[cand])])
        M[:, k] *= M[r, k]
        for j in np.flatnonzero(M[r]):
            if j != k:
                M[:, j] -= M[r, j] * M[:, k]
        used[r] = True
        F[k] = r
        nnz = (M != 0).sum(axis=1) if n * d <= 4_000_000 else nnz
    return M, F


# ---------------------------------------------------------------------------------------------
class L1Target:
    r"""Generalized Laplace target with the l1 norm, :math:`\ell(e) = -\lambda\|e\|_1`.

    Target protocol (what the kernels call):

    ``init_stat(e)``
        sufficient statistic per chain, shape ``e.shape[:-1]`` (here zeros: none needed).
    ``delta_logp(old, new, stat)``
        ``(dl, new_stat)``: :math:`\ell(e') - \ell(e)` for chains whose touched entries change
        from ``old`` to ``new`` (both (m, k)), and the statistic of :math:`e'`.
    ``logp(e)``
        :math:`\ell(e)` from scratch (tests, baselines).
    """

    #: log-target is a sum over cells: disjoint moves may be updated simultaneously.
    separable = True

    def __init__(self, rate: float):
        self.rate = float(rate)
        if not (self.rate > 0 and math.isfinite(self.rate)):
            raise ValueError("rate must be a finite number > 0")

    def init_stat(self, e):
        return np.zeros(np.shape(e)[:-1], dtype=np.int64)

    def delta_logp(self, old, new, stat):
        d = np.abs(new).sum(axis=-1) - np.abs(old).sum(axis=-1)
        return -self.rate * d, stat

    def logp(self, e):
        return -self.rate * np.abs(np.asarray(e)).sum(axis=-1)


class L2Target:
    r"""Generalized Laplace target with the l2 norm, :math:`\ell(e) = -\lambda\|e\|_2`
    (statistic: :math:`S = \|e\|_2^2`, exact int64)."""

    separable = False

    def __init__(self, rate: float):
        self.rate = float(rate)
        if not (self.rate > 0 and math.isfinite(self.rate)):
            raise ValueError("rate must be a finite number > 0")

    def init_stat(self, e):
        e = np.asarray(e, dtype=np.int64)
        return (e * e).sum(axis=-1)

    def delta_logp(self, old, new, stat):
        new_stat = stat + (new * new).sum(axis=-1) - (old * old).sum(axis=-1)
        return -self.rate * (np.sqrt(new_stat) - np.sqrt(stat)), new_stat

    def logp(self, e):
        e = np.asarray(e, dtype=float)
        return -self.rate * np.sqrt((e * e).sum(axis=-1))


class GaussianTarget:
    r"""Discrete Gaussian target, :math:`\ell(e) = -\|e\|_2^2/(2\sigma^2)` (statistic :math:`S`)."""

    separable = True

    def __init__(self, sigma: float):
        self.sigma = float(sigma)
        if not (self.sigma > 0 and math.isfinite(self.sigma)):
            raise ValueError("sigma must be a finite number > 0")
        self._c = 1.0 / (2.0 * self.sigma**2)

    def init_stat(self, e):
        e = np.asarray(e, dtype=np.int64)
        return (e * e).sum(axis=-1)

    def delta_logp(self, old, new, stat):
        dS = (new * new).sum(axis=-1) - (old * old).sum(axis=-1)
        return -self._c * dS, stat + dS

    def logp(self, e):
        e = np.asarray(e, dtype=float)
        return -self._c * (e * e).sum(axis=-1)


# ---------------------------------------------------------------------------------------------
class LatticeState(NamedTuple):
    """``m`` chains: lattice points ``e`` (m, n) int64 and the target's statistic ``stat`` (m,)."""

    e: np.ndarray
    stat: np.ndarray


class SweepInfo(NamedTuple):
    """Per-chain number of accepted proposals in the sweep, and proposals made per chain."""

    n_accepted: np.ndarray
    n_proposed: int


def as_moves(moves):
    """A :class:`LatticeMoves` / :class:`PairMoves` as is, or the columns of a basis matrix."""
    return LatticeMoves.from_matrix(moves)


def init_state(e0, moves, target, n_chains: int | None = None) -> LatticeState:
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
    return LatticeState(e, np.asarray(target.init_stat(e)))


def _scales(jump_scale, k) -> np.ndarray:
    s = np.asarray(jump_scale, dtype=float)
    if s.ndim == 0 or s.size == 1:
        s = np.full(k, float(s.ravel()[0]))
    if s.shape != (k,):
        raise ValueError(f"jump_scale must be a scalar or have one entry per move ({k})")
    if np.any(~np.isfinite(s)) or np.any(s <= 0):
        raise ValueError("jump_scale must be finite and > 0")
    return s


def _resolve_scales(jump_scale, moves, target) -> np.ndarray:
    if jump_scale is None:
        jump_scale = moves.default_scales(target)
    k = moves.k if isinstance(moves, LatticeMoves) else 1
    return _scales(jump_scale, k)


def _scale_of(scales, j):
    return scales[j] if scales.size > 1 else scales[0]


def double_geometric_jumps(rng, scale, size) -> np.ndarray:
    r"""Double geometric draws with :math:`P(k) \propto e^{-|k|/s}` as :math:`G_1 - G_2`
    (``scale`` broadcasts against ``size``)."""
    p = -np.expm1(-1.0 / np.asarray(scale, dtype=float))  # 1 - a
    g = rng.geometric(np.broadcast_to(p, size), size=(2,) + tuple(size))
    return (g[0] - g[1]).astype(np.int64)


def jump_logpmf(k, scale):
    r""":math:`\log q(k) = \log\tanh(1/(2s)) - |k|/s`."""
    s = np.asarray(scale, dtype=float)
    return np.log(np.tanh(0.5 / s)) - np.abs(k) / s


def _default_scale_for(target, l1, sq, dim):
    if isinstance(target, L1Target):
        s = 2.0 / (target.rate * l1)
    elif isinstance(target, L2Target):
        s = np.sqrt(dim) / (target.rate * np.sqrt(sq))
    elif isinstance(target, GaussianTarget):
        s = target.sigma / np.sqrt(sq)
    else:
        s = np.ones_like(np.asarray(l1, dtype=float))
    return np.maximum(s, 0.5)


def default_jump_scale(target, moves) -> np.ndarray:
    r"""Per-move jump scales matched to the target's spread along each move :math:`b_j`.

    * l1, rate :math:`\lambda`: along :math:`b_j` the log-target changes by up to
      :math:`\lambda\|b_j\|_1` per unit step and by about half that when half of the touched
      cells move towards 0, so :math:`s_j = 2/(\lambda\|b_j\|_1)`.
    * l2, rate :math:`\lambda` on a d-dimensional lattice: :math:`\|e\|` is typically
      :math:`d/\lambda` (radial law Gamma(d)), and :math:`\|e + \zeta b\| - \|e\| \approx
      \zeta^2\|b\|^2/(2\|e\|)` away from the radial direction, so the conditional scale is
      :math:`\sqrt{\|e\|/(\lambda\|b_j\|^2)} = \sqrt d/(\lambda\|b_j\|)`.
    * Gaussian, :math:`\sigma`: the conditional sd along :math:`b_j` is :math:`\sigma/\|b_j\|`.

    Scales are at least 0.5 so that moves of size 1 are proposed often enough.
    """
    if isinstance(moves, PairMoves):
        return moves.default_scales(target)
    sq = np.array([float(np.dot(v, v)) for v in moves.values])
    l1 = np.array([float(np.abs(v).sum()) for v in moves.values])
    return _default_scale_for(target, l1, sq, moves.k)


# ---------------------------------------------------------------------------------------------
def _step_inplace(state: LatticeState, idx, val, zeta, log_u, target):
    """Metropolis step along the move (idx, val) for every chain (arrays modified in place)."""
    e, stat = state
    old = e[:, idx]
    new = old + zeta[:, None] * val
    dl, new_stat = target.delta_logp(old, new, stat)
    acc = (log_u < dl) & (zeta != 0)
    if acc.any():
        rows = np.flatnonzero(acc)
        e[np.ix_(rows, idx)] = new[rows]
        stat[rows] = new_stat[rows]
    return acc


def _copy(state: LatticeState) -> LatticeState:
    return LatticeState(state.e.copy(), np.array(state.stat, copy=True))


def coordinate_step(rng, state: LatticeState, j, moves, target, jump_scale=None):
    r"""One Metropolis step along one move for every chain.

    ``(rng, state, j, moves, target, jump_scale) -> (state, accepted)``: ``j`` is a move id
    of ``moves`` (a column index, or an (i, k) pair for :class:`PairMoves`).  Proposes
    :math:`e + \zeta b_j` with :math:`\zeta` double geometric of scale ``jump_scale`` (scalar
    or one per move; default :func:`default_jump_scale`) and accepts w.p.
    :math:`\min(1, e^{\Delta\ell})` with the local :math:`\Delta\ell` from ``target.delta_logp``.
    """
    moves = as_moves(moves)
    scales = _resolve_scales(jump_scale, moves, target)
    s = _scale_of(scales, j if isinstance(moves, LatticeMoves) else 0)
    st = _copy(state)
    m = st.e.shape[0]
    zeta = double_geometric_jumps(rng, s, (m,))
    log_u = np.log(rng.random(m))
    idx, val = moves.move(j)
    acc = _step_inplace(st, idx, val, zeta, log_u, target)
    return st, acc


def sweep_order(rng, d: int, order: str) -> np.ndarray:
    """Moves of one sweep: ``"systematic"`` 0..d-1, ``"reverse"``, or ``"random"`` (a fresh
    uniform permutation each sweep)."""
    if order == "systematic":
        return np.arange(d)
    if order == "reverse":
        return np.arange(d)[::-1]
    if order == "random":
        return rng.permutation(d)
    raise ValueError(f"order must be 'systematic', 'reverse' or 'random', not {order!r}")


def gibbs_sweep(rng, state: LatticeState, moves, target, jump_scale=None, order: str = "systematic"):
    r"""One Gibbs-within-Metropolis sweep (Algorithm 1, one iteration) for all chains.

    ``(rng, state, moves, target, jump_scale, order) -> (state, SweepInfo)``.  Visits the
    moves in ``order`` (:func:`sweep_order`; :class:`PairMoves` always draws random pairs),
    each a :func:`coordinate_step`; jumps and uniforms of the sweep are drawn up front.
    """
    moves = as_moves(moves)
    st = _copy(state)
    return _sweep_inplace(rng, st, moves, target, _resolve_scales(jump_scale, moves, target), order)


def _use_matchings(moves, target) -> bool:
    return isinstance(moves, PairMoves) and getattr(target, "separable", False)


def _matching_step_inplace(st: LatticeState, pairs, zeta, log_u, target):
    """Simultaneous Metropolis steps on disjoint pairs (separable targets): zeta, log_u (m, P)."""
    val = np.array([1, -1], dtype=np.int64)
    old = st.e[:, pairs]  # (m, P, 2)
    new = old + zeta[..., None] * val
    m, P = zeta.shape
    dl, _ = target.delta_logp(old.reshape(m * P, 2), new.reshape(m * P, 2), np.zeros(m * P))
    acc = (log_u < dl.reshape(m, P)) & (zeta != 0)
    upd = np.where(acc[..., None], new, old)
    st.e[:, pairs] = upd
    if isinstance(target, (GaussianTarget, L2Target)):
        st.stat[:] = st.stat + (upd * upd).sum(axis=(1, 2)) - (old * old).sum(axis=(1, 2))
    return acc.sum(axis=1)


def _n_matchings(moves) -> int:
    """Matchings per sweep so that a sweep makes about ``steps_per_sweep`` pair proposals."""
    per = max(1, int(np.sum(moves._group_size // 2)))
    return max(1, int(round(moves.steps_per_sweep / per)))


def _sweep_inplace(rng, st, moves, target, scales, order):
    m = st.e.shape[0]
    if _use_matchings(moves, target):
        n_acc = np.zeros(m, dtype=np.int64)
        steps = 0
        for _ in range(_n_matchings(moves)):
            pairs = moves.matching(rng)
            P = pairs.shape[0]
            zeta = double_geometric_jumps(rng, scales[0], (m, P))
            n_acc += _matching_step_inplace(st, pairs, zeta, np.log(rng.random((m, P))), target)
            steps += P
        return st, SweepInfo(n_acc, steps)
    sched = moves.schedule(rng, order)
    steps = len(sched)
    if scales.size > 1:
        sc = scales[sched][:, None]
    else:
        sc = scales[0]
    zeta = double_geometric_jumps(rng, sc, (steps, m))
    log_u = np.log(rng.random((steps, m)))
    n_acc = np.zeros(m, dtype=np.int64)
    for k in range(steps):
        idx, val = moves.move(sched[k])
        n_acc += _step_inplace(st, idx, val, zeta[k], log_u[k], target)
    return st, SweepInfo(n_acc, steps)


def run_sweeps(rng, state: LatticeState, moves, target, n_sweeps: int, jump_scale=None,
               order: str = "systematic", thin: int = 0):
    r"""Run ``n_sweeps`` sweeps.  Returns ``(state, info)`` with ``info = {"acceptance_rate":
    per-chain mean acceptance, "trace": (n_sweeps // thin, m, n) array of e if thin > 0}``."""
    rng = as_generator(rng)
    moves = as_moves(moves)
    n_sweeps = int(n_sweeps)
    if n_sweeps < 0:
        raise ValueError("n_sweeps must be >= 0")
    scales = _resolve_scales(jump_scale, moves, target)
    st = _copy(state)
    n_acc = np.zeros(st.e.shape[0], dtype=np.int64)
    trace = []
    for t in range(n_sweeps):
        st, info = _sweep_inplace(rng, st, moves, target, scales, order)
        n_acc += info.n_accepted
        if thin and (t + 1) % thin == 0:
            trace.append(st.e.copy())
    out = {"acceptance_rate": n_acc / max(1, n_sweeps * moves.steps_per_sweep)}
    if thin:
        out["trace"] = np.array(trace).reshape((len(trace),) + st.e.shape)
    return st, out
