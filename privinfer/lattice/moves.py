r"""Moves on the integer lattice :math:`L = \{e \in \mathbb{Z}^n : Ce = 0\}` of an invariant.

A move set says which lattice vectors a kernel may add to its state.  Every move is an
element of L, so adding any integer multiple keeps :math:`Ce = 0` (the curator's noise) or
:math:`Cx = t` (the analyst's latent counts) exactly.

* :class:`LatticeMoves` -- the columns of an integer basis B of L (or a generating set): the
  Gibbs-within-Metropolis directions of Integer subspace DP (Dharangutte, Gao, Gong, Yu 2023,
  Sec. 4, Algorithm 1).  Because B has full column rank, :math:`z \mapsto Bz` is a bijection of
  :math:`\mathbb{Z}^d` onto L, so a symmetric jump in z is a symmetric jump on L.
* :class:`PairMoves` -- transfers :math:`e_i - e_k` inside a group (totals, partitions).
* :class:`RectangleMoves` -- the basic moves of a two-way grid of cells (keep its margins).
* :class:`MoveCycle` -- several move sets in turn.
* :func:`free_cell_basis` -- a basis whose coordinates are cells of e (free cells).
* :func:`moves_for` -- the default move set of an invariant: pairs for a partition
  (``invariant.partition``), otherwise its short lattice basis in free-cell coordinates.

Every move set exposes ``n``, ``k``, ``steps_per_sweep``, ``schedule(rng, order)``,
``move(id) -> (indices, values)`` and ``default_scales(density)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

__all__ = [
    "LatticeMoves",
    "PairMoves",
    "RectangleMoves",
    "MoveCycle",
    "SparseLatticeBasis",
    "as_moves",
    "free_cell_basis",
    "moves_for",
    "sweep_order",
]


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
        if isinstance(B, (LatticeMoves, PairMoves, RectangleMoves, MoveCycle)):
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

    def default_scales(self, density) -> np.ndarray:
        """One jump scale per move, matched to the density's spread along it
        (:meth:`~privinfer.lattice.density.LocalLogDensity.jump_scale`)."""
        sq = np.array([float(np.dot(v, v)) for v in self.values])
        l1 = np.array([float(np.abs(v).sum()) for v in self.values])
        return density.jump_scale(l1, sq, self.k)


class PairMoves:
    r"""All moves :math:`e_i - e_k` between two cells of the same group (totals, partitions).

    These generate :math:`\{e \in \mathbb{Z}^n: \text{group sums of } e = 0\}` (any zero-sum
    vector is a sum of transfers).  A sweep makes ``steps_per_sweep`` = n - (number of
    groups) = the lattice dimension random-scan steps, each picking a cell i uniformly among
    cells in groups of size >= 2 and a partner k uniformly among the other cells of its
    group.  The selection is symmetric (:math:`P(i, k) = P(k, i)`), so with a symmetric
    jump every step is a reversible Metropolis step and the random-scan mixture is too.

    For separable densities (:class:`~privinfer.lattice.density.L1Target`, Gaussian: the log-density is a
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
    :mod:`privinfer.lattice.coupling`).
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

    def default_scales(self, density) -> np.ndarray:
        """Density-matched scale (:meth:`LatticeMoves.default_scales`), capped at 0.6 for l1 densities:
        with 100 cells and eps = 0.192 (matched scale about 5), 16 L-lag coupled pairs had
        not met after 5,000 sweeps at the matched scale, nor (9 of 16) after 20,000 at scale
        1; at 0.6 all met after 1,800-15,200 sweeps, at 0.4 one had not met after 20,000.
        A certified burn-in needs meetings, so the coupling-friendly scale is the default."""
        s = float(np.asarray(density.jump_scale(2.0, 2.0, self.k)).ravel()[0])
        cap = density.pair_scale_cap
        if cap is not None:
            s = min(s, cap)
        return np.full(1, s)

    @property
    def codes(self) -> np.ndarray:
        """Group code of every cell (pairs are drawn within a group)."""
        return self._codes

    @property
    def group_sizes(self) -> np.ndarray:
        """Number of cells of each group."""
        return self._group_size

    @property
    def matchings_per_sweep(self) -> int:
        """Matchings per sweep so that a sweep makes about ``steps_per_sweep`` pair proposals."""
        per = max(1, int(np.sum(self._group_size // 2)))
        return max(1, int(round(self.steps_per_sweep / per)))


class RectangleMoves:
    r"""The basic moves of a two-way table on a complete grid of cells (Diaconis and Sturmfels
    1998): :math:`e_{rs} - e_{rs'} - e_{r's} + e_{r's'}`, which keep every row and column
    total of the grid (hence the grand total).

    ``grid`` (R x S) holds the cell index of every (row, column) of the grid (all distinct,
    e.g. county x sex-age group); ``n`` is the length of the state.  A sweep draws
    :attr:`matchings_per_sweep` random *rectangle matchings* (:meth:`matching`): a random
    matching of the rows times a random matching of the columns, i.e. floor(R/2) floor(S/2)
    disjoint rectangles; the kernels score them in batches (moves on disjoint cells and
    query rows commute).  The selection is symmetric and state-independent, the jump law
    symmetric, so every step is a reversible Metropolis step.  Within ``n``, cells outside the
    grid never move: combine with other moves (:class:`MoveCycle`).
    """

    #: entries of a move on the cells of :meth:`matching`'s rows
    val = np.array([1, -1, -1, 1], dtype=np.int64)

    def __init__(self, grid, n: int):
        grid = np.asarray(grid)
        if grid.ndim != 2 or grid.shape[0] < 2 or grid.shape[1] < 2:
            raise ValueError(f"grid must be a 2-D array of cell indices with at least 2 rows and 2 columns, got shape {grid.shape}")
        if grid.dtype.kind not in "iu" or grid.min() < 0 or grid.max() >= n:
            raise ValueError(f"grid entries must be cell indices in [0, {n})")
        if np.unique(grid).size != grid.size:
            raise ValueError("grid cells must be distinct")
        self.grid = grid.astype(np.intp)
        self.n = int(n)
        R, S = grid.shape
        self.k = int((R - 1) * (S - 1))

    @property
    def steps_per_sweep(self) -> int:
        return self.k

    @property
    def matchings_per_sweep(self) -> int:
        R, S = self.grid.shape
        return max(1, int(round(self.k / ((R // 2) * (S // 2)))))

    def matching(self, rng) -> np.ndarray:
        """floor(R/2) floor(S/2) disjoint rectangles (P, 4): cells (r, s), (r, s'), (r', s), (r', s')."""
        R, S = self.grid.shape
        rp = rng.permutation(R)[: 2 * (R // 2)].reshape(-1, 2)
        cp = rng.permutation(S)[: 2 * (S // 2)].reshape(-1, 2)
        r1, r2 = rp[:, 0][:, None], rp[:, 1][:, None]
        c1, c2 = cp[:, 0][None, :], cp[:, 1][None, :]
        g = self.grid
        return np.stack([g[r1, c1], g[r1, c2], g[r2, c1], g[r2, c2]], axis=-1).reshape(-1, 4)

    def default_scales(self, density) -> np.ndarray:
        return np.full(1, float(np.asarray(density.jump_scale(4.0, 4.0, self.k)).ravel()[0]))


class MoveCycle:
    """Several move sets used in turn: a sweep is one sweep of each part (``matchings[i]``
    matchings of part i when given).  Each part keeps the target invariant, so the cycle does;
    the parts share one jump scale."""

    def __init__(self, parts, matchings=None):
        parts = list(parts)
        if not parts:
            raise ValueError("a move cycle needs at least one move set")
        ns = {p.n for p in parts}
        if len(ns) != 1:
            raise ValueError(f"the move sets act on states of different lengths {sorted(ns)}")
        if matchings is not None and len(matchings) != len(parts):
            raise ValueError("give one number of matchings per move set")
        self.parts = tuple(parts)
        self.matchings = None if matchings is None else tuple(int(m) for m in matchings)
        self.n = parts[0].n
        self.k = max(p.k for p in parts)

    @property
    def steps_per_sweep(self) -> int:
        return int(sum(p.steps_per_sweep for p in self.parts))

    def default_scales(self, density) -> np.ndarray:
        return np.full(1, float(np.asarray(self.parts[0].default_scales(density)).ravel()[0]))


#: Backwards-compatible name: a lattice basis is a set of moves.
SparseLatticeBasis = LatticeMoves


def free_cell_basis(B) -> tuple[np.ndarray, np.ndarray | None]:
    r"""Change an integer lattice basis to one whose coordinates are free cells of ``e``.

    Find rows F (``|F| = d``) and a unimodular :math:`U` with :math:`(BU)_F = I_d`; then
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


def as_moves(moves):
    """A :class:`LatticeMoves` / :class:`PairMoves` as is, or the columns of a basis matrix."""
    return LatticeMoves.from_matrix(moves)


def moves_for(invariant, *, free_cells: bool = True):
    """The default move set of an integer invariant.

    Partitions (``invariant.partition`` set: totals, groups): :class:`PairMoves` over the
    groups.  Otherwise the invariant's short lattice basis
    (:meth:`~privinfer.invariants.Invariant.lattice_basis`), changed to free-cell coordinates
    (:func:`free_cell_basis`) when ``free_cells`` and such a change exists.
    """
    if invariant.partition is not None:
        return PairMoves(invariant.partition.codes)
    B = invariant.lattice_basis()
    if free_cells:
        Bf, F = free_cell_basis(B)
        if F is not None:
            return LatticeMoves.from_matrix(Bf)
    return LatticeMoves.from_matrix(B)
