r"""Linear equality invariants ``C x = t``: subspaces, projections and integer lattices.

An invariant is a set of exact statistics of the confidential data ``x`` in ``R^n`` that a
release must reproduce: ``C y = C x = t`` (Subspace DP, Gao-Gong-Yu 2022, Def. 2-3; Integer
subspace DP, Dharangutte-Gao-Gong-Yu 2023, Sec. 3; Semi-DP, Cho-Awan, Sec. 3).

Geometry (``r = rank C``):

* row space ``R = range(C^T)`` (dimension r) and null space ``N = ker C`` (dimension n - r),
  orthogonal complements of each other;
* ``P_N = I - C^T (C C^T)^+ C`` and ``P_R = I - P_N`` -- computed without forming an n x n
  matrix: group means for totals and partitions, the ANOVA (Moebius) decomposition for the
  margins of a multiway table, and the m x m Gram matrix ``C C^T`` (or LSQR) otherwise;
* the integer lattice ``L = {e in Z^n : C e = 0}`` (integer C), whose elements are the
  admissible integer noise vectors of integer subspace DP.  :meth:`Invariant.lattice_basis`
  returns a basis (columns generate *exactly* L) made of short sparse moves: ``e_i - e_j``
  inside groups of identical columns of C, the (r-1)(c-1) adjacent 2 x 2 moves for two-way
  margins, and otherwise an exact column-Hermite reduction (Python integers, no overflow)
  followed by exact integer LLL reduction (Cohen 1993, Alg. 2.6.7).

Constructors: :func:`total`, :func:`groups`, :func:`margins`, :func:`counting`, :func:`stack`.
"""

from __future__ import annotations

import enum
import functools
import itertools
from dataclasses import dataclass
from fractions import Fraction
from typing import Iterable, Sequence

import numpy as np
import scipy.sparse as sp
from scipy import linalg as sla
from scipy.sparse import linalg as spla

__all__ = [
    "Invariant",
    "InvariantKind",
    "Partition",
    "InfeasibleInvariantError",
    "total",
    "groups",
    "margins",
    "counting",
    "stack",
    "integer_kernel_basis",
    "lll_reduce",
    "split_group_totals",
]

#: Largest dense matrix (number of entries) a basis method will build before refusing.
MAX_DENSE_ENTRIES = 200_000_000
#: Largest number of rows for which the m x m Gram matrix is factorized densely.
MAX_GRAM_ROWS = 5000


class InfeasibleInvariantError(ValueError):
    """No point satisfies the invariant with the requested properties (or ``t`` is inconsistent)."""


class InvariantKind(str, enum.Enum):
    """What an invariant's constraint matrix is, as built by its constructor.

    ``TOTAL`` (:func:`total`) and ``GROUPS`` (:func:`groups`) are partitions of the cells
    (:attr:`Invariant.partition` is set); ``MARGINS`` (:func:`margins`) are the marginal totals
    of a multiway table; ``COUNTING`` (:func:`counting`) subset counts; ``STACKED``
    (:func:`stack`) several invariants at once; ``GENERAL`` any other matrix.  Code that needs
    structure asks for it (``inv.partition``, ``inv.table_shape``) rather than comparing kinds.
    """

    TOTAL = "total"
    GROUPS = "groups"
    MARGINS = "margins"
    COUNTING = "counting"
    STACKED = "stacked"
    GENERAL = "general"


@dataclass(frozen=True)
class Partition:
    """The cells of a partition invariant (totals, groups) grouped.

    ``codes[i]`` is the group of cell i (0..g-1, in the order of the rows of C), ``labels[g]``
    the user's label of group g, ``sizes[g]`` its number of cells.
    """

    codes: np.ndarray
    labels: np.ndarray
    sizes: np.ndarray

    @property
    def n_groups(self) -> int:
        return int(self.sizes.size)


# ---------------------------------------------------------------------------------------
# projection strategies (one job each: row-space projection and its facts)
# ---------------------------------------------------------------------------------------
class _GroupProjector:
    """Row space of a partition-total matrix: functions constant on each group.

    ``P_R v`` replaces every entry by the mean of its group; rank = number of groups.
    """

    def __init__(self, codes: np.ndarray, n_groups: int):
        self.codes = codes
        self.n_groups = n_groups
        self.sizes = np.bincount(codes, minlength=n_groups).astype(float)
        self.rank = int(np.count_nonzero(self.sizes))

    def project_row(self, V: np.ndarray) -> np.ndarray:  # V: (k, n)
        k = V.shape[0]
        out = np.empty_like(V)
        for i in range(k):  # loop over the stack keeps memory at O(n)
            sums = np.bincount(self.codes, weights=V[i], minlength=self.n_groups)
            out[i] = (sums / np.maximum(self.sizes, 1.0))[self.codes]
        return out

    def null_basis(self, n: int) -> np.ndarray:
        """Block Helmert contrasts: orthonormal, sparse within each group."""
        Q = np.zeros((n, n - self.rank))
        col = 0
        for g in range(self.n_groups):
            idx = np.flatnonzero(self.codes == g)
            k = len(idx)
            if k > 1:
                Q[np.ix_(idx, np.arange(col, col + k - 1))] = _helmert(k)
                col += k - 1
        return Q


def _helmert(k: int) -> np.ndarray:
    """Orthonormal contrasts: k x (k-1), columns orthogonal to the ones vector."""
    H = np.zeros((k, k - 1))
    for j in range(1, k):
        H[:j, j - 1] = 1.0
        H[j, j - 1] = -float(j)
        H[:, j - 1] /= np.sqrt(j * (j + 1.0))
    return H


class _MarginProjector:
    r"""Row space spanned by the marginal-cell indicators of a multiway table.

    ANOVA decomposition: every ``v`` on a table of shape ``d`` splits orthogonally into
    components ``v_S`` (S a subset of axes), ``v_S = sum_{T subset S} (-1)^{|S \ T|} M_T v``
    where ``M_T`` averages over the axes outside T.  The indicators of the kept margins span
    exactly ``sum_{S in D} V_S`` with D the downward closure of the kept axis sets, so
    ``P_R v = sum_{T in D} c_T M_T v`` with ``c_T = sum_{S in D, S >= T} (-1)^{|S \ T|}``
    and ``rank = sum_{S in D} prod_{i in S} (d_i - 1)``.
    """

    def __init__(self, shape: tuple[int, ...], keep: list[tuple[int, ...]]):
        self.shape = shape
        down = set()
        for K in keep:
            for r in range(len(K) + 1):
                for S in itertools.combinations(sorted(K), r):
                    down.add(S)
        self.down = sorted(down, key=lambda s: (len(s), s))
        coef = {}
        for T in self.down:
            c = 0
            for S in self.down:
                if set(T) <= set(S):
                    c += (-1) ** (len(S) - len(T))
            if c:
                coef[T] = c
        self.coef = coef
        self.rank = int(sum(np.prod([shape[i] - 1 for i in S], dtype=np.int64) for S in self.down))

    def project_row(self, V: np.ndarray) -> np.ndarray:
        k = V.shape[0]
        T_all = tuple(range(len(self.shape)))
        out = np.empty_like(V)
        for i in range(k):
            v = V[i].reshape(self.shape)
            acc = np.zeros_like(v)
            for T, c in self.coef.items():
                axes = tuple(a for a in T_all if a not in T)
                acc += c * (v.mean(axis=axes, keepdims=True) if axes else v)
            out[i] = acc.ravel()
        return out

    def null_basis(self, n: int) -> np.ndarray:
        """Kronecker products of Helmert contrasts over the ANOVA components outside D."""
        d = len(self.shape)
        cols = []
        downset = set(self.down)
        for r in range(d + 1):
            for S in itertools.combinations(range(d), r):
                if S in downset:
                    continue
                B = np.ones((1, 1))
                for i in range(d):
                    Fi = _helmert(self.shape[i]) if i in S else np.full((self.shape[i], 1), 1.0 / np.sqrt(self.shape[i]))
                    B = np.kron(B, Fi)
                if B.shape[1]:
                    cols.append(B)
        return np.hstack(cols) if cols else np.zeros((n, 0))


class _GramProjector:
    """General C (dense or sparse): ``P_R v = C^T (C C^T)^+ C v``.

    The m x m Gram matrix is eigendecomposed (rank from its spectrum) when m is moderate;
    otherwise LSQR solves ``min_w ||C^T w - v||`` whose fitted value is ``P_R v`` even when
    C is rank deficient.
    """

    def __init__(self, C):
        self.C = C
        m = C.shape[0]
        self.use_lsqr = sp.issparse(C) and m > MAX_GRAM_ROWS
        if self.use_lsqr:
            self.rank = _sparse_rank(C)
            return
        G = C @ C.T
        G = G.toarray() if sp.issparse(G) else np.asarray(G)
        lam, U = np.linalg.eigh(G)
        tol = max(G.shape) * np.finfo(float).eps * max(lam.max(initial=0.0), 1e-300) * 10
        keep = lam > tol
        self.rank = int(np.count_nonzero(keep))
        self.U = U[:, keep]
        self.lam = lam[keep]

    def project_row(self, V: np.ndarray) -> np.ndarray:
        C = self.C
        if self.use_lsqr:
            out = np.empty_like(V)
            for i in range(V.shape[0]):
                w = spla.lsqr(C.T, V[i], atol=1e-14, btol=1e-14, iter_lim=20 * C.shape[0])[0]
                out[i] = C.T @ w
            return out
        CV = np.asarray(C @ V.T)  # (m, k)
        W = self.U @ ((self.U.T @ CV) / self.lam[:, None])
        return np.asarray(C.T @ W).T

    def row_basis(self) -> np.ndarray:
        if self.use_lsqr:
            raise NotImplementedError("row_basis for a sparse invariant with more than "
                                      f"{MAX_GRAM_ROWS} rows is not supported; use project_row")
        return np.asarray(self.C.T @ (self.U / np.sqrt(self.lam))).reshape(self.C.shape[1], -1)


def _sparse_rank(C) -> int:
    """Rank of a large sparse matrix by a dense QR of C^T in column blocks (exact up to tol)."""
    if C.shape[0] * C.shape[1] > MAX_DENSE_ENTRIES:
        raise NotImplementedError(
            "cannot determine the rank of this general sparse invariant without densifying it; "
            "build it with total/groups/margins when it has that structure"
        )
    s = np.linalg.svd(C.toarray(), compute_uv=False)
    return int(np.count_nonzero(s > max(C.shape) * np.finfo(float).eps * s.max(initial=0.0) * 10))


# ---------------------------------------------------------------------------------------
# the invariant
# ---------------------------------------------------------------------------------------
class Invariant:
    r"""The linear equality invariant ``C x = t``.

    Parameters
    ----------
    C : array-like or scipy.sparse matrix, shape (m, n)
        Constraint matrix.  Redundant (dependent, duplicated) rows are allowed; the rank is
        detected.  Entries must be finite.
    t : array-like, shape (m,), optional
        Invariant values.  If given, they must be consistent (``t`` in the column space of C),
        otherwise :class:`InfeasibleInvariantError` is raised.

    Notes
    -----
    The null space ``N = ker C`` is where noise may live (Subspace DP, Sec. 3: projection
    and extension frameworks); its orthonormal basis ``Q_N`` is :meth:`null_basis`.  For
    integer C, :meth:`lattice_basis` generates the integer points of N (Integer subspace DP,
    Sec. 3.1: the Smith normal form ``U C V = D`` shows the last n - r columns of V span the
    lattice; we compute an equivalent unimodular column reduction and reduce it to short
    moves).
    """

    def __init__(self, C, t=None, *, _projector=None, _structure: str = "general", _moves=None,
                 _partition: Partition | None = None):
        if sp.issparse(C):
            C = sp.csr_matrix(C, dtype=float)
            if C.ndim != 2:
                raise ValueError(f"C must be 2-dimensional, got shape {C.shape}")
            if not np.all(np.isfinite(C.data)):
                raise ValueError("C contains non-finite entries (NaN or inf)")
            C.eliminate_zeros()
        else:
            try:
                C = np.array(C, dtype=float)
            except (TypeError, ValueError) as exc:
                raise TypeError("C must be a numeric array-like or a scipy.sparse matrix") from exc
            if C.ndim == 1:
                C = C[None, :]
            if C.ndim != 2:
                raise ValueError(f"C must be 2-dimensional, got shape {C.shape}")
            if not np.all(np.isfinite(C)):
                raise ValueError("C contains non-finite entries (NaN or inf)")
        m, n = C.shape
        if n == 0:
            raise ValueError("C must have at least one column")
        if m == 0:
            raise ValueError("C must have at least one row (an invariant with no constraint)")
        self._C = C
        self.kind = InvariantKind(_structure)
        #: The groups of a partition invariant (``total``, ``groups``), else ``None``.
        self.partition = _partition
        self._projector = _projector if _projector is not None else _GramProjector(C)
        self._moves = _moves
        self._cache: dict = {}
        self.t = None
        if t is not None:
            self.t = self._check_t(t)

    # -- basic facts --------------------------------------------------------------------
    @property
    def structure(self) -> str:
        """The kind's name (``"total"``, ``"groups"``, ...); prefer :attr:`kind` / :attr:`partition`."""
        return self.kind.value

    @property
    def matrix(self):
        """The constraint matrix C (dense ndarray or scipy.sparse CSR)."""
        return self._C

    @property
    def m(self) -> int:
        return self._C.shape[0]

    @property
    def n(self) -> int:
        return self._C.shape[1]

    @property
    def shape(self) -> tuple[int, int]:
        return self._C.shape

    @property
    def rank(self) -> int:
        return self._projector.rank

    @property
    def null_dim(self) -> int:
        """``n - rank``: dimension of the subspace the noise lives in."""
        return self.n - self.rank

    @property
    def is_integer(self) -> bool:
        data = self._C.data if sp.issparse(self._C) else self._C
        return bool(np.all(data == np.round(data)))

    def __repr__(self) -> str:
        return f"Invariant(m={self.m}, n={self.n}, rank={self.rank}, kind={self.kind.value!r})"

    def with_t(self, t) -> "Invariant":
        """A copy of this invariant with invariant values ``t`` (shares all cached structure)."""
        new = object.__new__(Invariant)
        new.__dict__.update(self.__dict__)
        new.t = None
        new.t = new._check_t(t)
        return new

    # -- evaluation ---------------------------------------------------------------------
    def of(self, x) -> np.ndarray:
        """``C x`` for ``x`` of shape (n,) or a stack (..., n); returns (m,) or (..., m)."""
        X = self._as_stack(x, "x")
        out = np.asarray(self._C @ X.reshape(-1, self.n).T).T
        return out.reshape(X.shape[:-1] + (self.m,))

    def satisfied_by(self, y, t=None, atol=None):
        """Whether ``C y == t`` (for a stack: one bool per vector).

        Default tolerance: ``1e-10 * max(1, |t|_inf, max_i sum_j |C_ij y_j|)``, i.e. relative
        to the scale of the quantities summed, so floating-point releases of large counts pass.
        Integer C and integer y are compared exactly when ``atol=0``.
        """
        t = self._resolve_t(t)
        Y = self._as_stack(y, "y")
        flat = Y.reshape(-1, self.n)
        Cy = np.asarray(self._C @ flat.T).T
        if atol is None:
            absC = abs(self._C)
            scale = np.asarray(absC @ np.abs(flat).T).T.max(axis=1)
            atol = 1e-10 * np.maximum(np.maximum(1.0, np.max(np.abs(t))), scale)
        ok = np.all(np.abs(Cy - t) <= np.asarray(atol)[..., None], axis=1)
        ok = ok.reshape(Y.shape[:-1])
        return bool(ok) if ok.ndim == 0 else ok

    # -- projections --------------------------------------------------------------------
    def project_row(self, v) -> np.ndarray:
        """Orthogonal projection onto the row space ``range(C^T)`` (vector or stack)."""
        V = self._as_stack(v, "v")
        flat = V.reshape(-1, self.n)
        return self._projector.project_row(flat).reshape(V.shape)

    def project_null(self, v) -> np.ndarray:
        """Orthogonal projection onto the null space ``ker C``: ``v - project_row(v)``."""
        V = self._as_stack(v, "v")
        return V - self.project_row(V)

    def row_basis(self) -> np.ndarray:
        """Orthonormal basis of the row space, shape (n, rank)."""
        if "row" not in self._cache:
            self._guard(self.n * self.rank, "row_basis")
            if isinstance(self._projector, _GramProjector):
                R = self._projector.row_basis()
            else:
                Cd = self._C.toarray() if sp.issparse(self._C) else self._C
                U, s, Vt = np.linalg.svd(Cd, full_matrices=False)
                R = Vt[: self.rank].T
            self._cache["row"] = R
        return self._cache["row"]

    def null_basis(self) -> np.ndarray:
        """Orthonormal basis ``Q_N`` of the null space, shape (n, n - rank)."""
        if "null" not in self._cache:
            self._guard(self.n * self.null_dim, "null_basis")
            proj = self._projector
            if isinstance(proj, (_GroupProjector, _MarginProjector)):
                Q = proj.null_basis(self.n)
            else:
                R = self.row_basis()
                if R.shape[1] == 0:
                    Q = np.eye(self.n)
                else:
                    Qfull, _ = sla.qr(R, mode="full")
                    Q = Qfull[:, self.rank :]
            self._cache["null"] = Q
        return self._cache["null"]

    # -- integer lattice ----------------------------------------------------------------
    def integer_matrix(self) -> np.ndarray:
        """C as an int64 array (error if C has non-integer entries)."""
        if not self.is_integer:
            raise ValueError("the integer lattice needs an integer constraint matrix C "
                             "(C has non-integer entries)")
        Cd = self._C.toarray() if sp.issparse(self._C) else self._C
        return Cd.astype(np.int64)

    def lattice_basis(self) -> np.ndarray:
        """Integer n x (n - rank) matrix whose columns generate exactly ``{e in Z^n : C e = 0}``.

        Structured invariants use their known short moves; otherwise cells with identical
        columns of C contribute ``e_i - e_j`` moves, and the remaining representative columns
        get an exact integer kernel basis (:func:`integer_kernel_basis`) reduced by LLL.
        """
        if "lattice" not in self._cache:
            if not self.is_integer:
                raise ValueError("lattice_basis requires an integer constraint matrix C "
                                 "(C has non-integer entries)")
            if self._moves is not None:
                B = self._moves()
            else:
                B = _lattice_by_column_classes(self._C)
            if B.shape != (self.n, self.null_dim):
                raise RuntimeError("internal error: lattice basis has the wrong dimension")
            B.setflags(write=False)
            self._cache["lattice"] = B
        return self._cache["lattice"]

    # -- feasible points ----------------------------------------------------------------
    def feasible_point(self, t=None, integer: bool = False, nonnegative: bool = False) -> np.ndarray:
        """A point ``x`` with ``C x = t``.

        * real: the least-norm solution ``C^+ t``;
        * ``nonnegative``: a vertex of ``{x >= 0, C x = t}`` found by linear programming;
        * ``integer``: ``C U = [H | 0]`` with U unimodular; solve the echelon system ``H z = t``
          exactly over the integers (fails iff t is not in the lattice ``C Z^n``);
        * ``integer`` and ``nonnegative``: mixed-integer program (HiGHS) or a direct
          construction for totals/partitions.

        Raises :class:`InfeasibleInvariantError` if no such point exists.
        """
        t = self._resolve_t(t)
        if integer:
            if not self.is_integer:
                raise ValueError("an integer feasible point needs an integer constraint matrix C")
            if np.any(t != np.round(t)):
                raise InfeasibleInvariantError("no integer point: the invariant values t are not integers")
        if self.partition is not None:
            return self._feasible_groups(t, integer, nonnegative)
        if not integer and not nonnegative:
            return self._least_norm(t)
        if integer and not nonnegative:
            x = _integer_solution(self.integer_matrix(), np.round(t).astype(np.int64))
            # move to a short representative of x + L: round the lattice coordinates of the
            # gap to the least-norm real solution (the basis is short, so this stays small)
            B = self.lattice_basis()
            if B.shape[1]:
                z = np.linalg.lstsq(B.astype(float), x - self._least_norm(t), rcond=None)[0]
                x = x - B @ np.round(z).astype(np.int64)
            return x
        return self._feasible_lp(t, integer)

    # -- internals ----------------------------------------------------------------------
    def _least_norm(self, t):
        """Least-norm solution ``C^+ t`` (structure-aware; never forms n x n)."""
        if isinstance(self._projector, _GroupProjector):
            proj = self._projector
            return (t / np.maximum(proj.sizes, 1.0))[proj.codes]
        if sp.issparse(self._C):
            if self.m <= MAX_GRAM_ROWS:
                gram = self._projector if isinstance(self._projector, _GramProjector) else self._cache.get("gram")
                if gram is None:
                    gram = self._cache["gram"] = _GramProjector(self._C)
                w = gram.U @ ((gram.U.T @ t) / gram.lam)
                return np.asarray(self._C.T @ w).ravel()
            return spla.lsqr(self._C, t, atol=1e-14, btol=1e-14, iter_lim=50 * self.n)[0]
        return np.linalg.lstsq(self._C, t, rcond=None)[0]

    def _feasible_groups(self, t, integer, nonnegative):
        proj: _GroupProjector = self._projector
        # a partition: every group's cells sum to its total
        codes, sizes = proj.codes, proj.sizes
        # t is indexed by row; rows correspond to groups in order
        if nonnegative and np.any(t < 0):
            raise InfeasibleInvariantError("no non-negative point: some invariant total is negative")
        if not integer:
            return (t / sizes)[codes]
        ti = np.round(t).astype(np.int64)
        si = sizes.astype(np.int64)
        base = np.floor_divide(ti, si)
        rem = ti - base * si
        x = base[codes].copy()
        # give the remainder of each group, one unit each, to its first cells
        rank_in_group = _rank_within_groups(codes, proj.n_groups)
        x += (rank_in_group < rem[codes]).astype(np.int64)
        return x

    def _feasible_lp(self, t, integer):
        from scipy.optimize import Bounds, LinearConstraint, milp

        c = np.zeros(self.n)
        cons = LinearConstraint(self._C, t, t)
        res = milp(c, constraints=[cons], integrality=np.full(self.n, int(integer)),
                   bounds=Bounds(0, np.inf))
        if res.status == 2 or res.x is None:
            kind = "non-negative integer" if integer else "non-negative"
            raise InfeasibleInvariantError(f"no {kind} point satisfies C x = t")
        x = res.x
        if integer:
            x = np.round(x).astype(np.int64)
            if not np.array_equal(self.integer_matrix() @ x, np.round(t).astype(np.int64)):
                raise InfeasibleInvariantError("no non-negative integer point satisfies C x = t")
        else:
            x = np.maximum(x, 0.0)
        return x

    def _check_t(self, t) -> np.ndarray:
        try:
            t = np.asarray(t, dtype=float)
        except (TypeError, ValueError) as exc:
            raise TypeError("t must be numeric array-like") from exc
        if t.ndim == 0 and self.m == 1:
            t = t.reshape(1)
        if t.shape != (self.m,):
            raise ValueError(f"t must have shape ({self.m},) to match C with {self.m} rows, got {t.shape}")
        if not np.all(np.isfinite(t)):
            raise ValueError("t contains non-finite entries (NaN or inf)")
        if self.rank == self.m:
            return t  # full row rank: every t is attainable
        # consistency: t must lie in range(C)
        x = self._least_norm(t)
        resid = np.max(np.abs(np.asarray(self._C @ x) - t)) if self.m else 0.0
        scale = max(1.0, float(np.max(np.abs(t))))
        if resid > 1e-7 * scale:
            raise InfeasibleInvariantError(
                "inconsistent invariant: t is not in the column space of C (dependent rows of C "
                "have invariant values that disagree)"
            )
        return t

    def _resolve_t(self, t) -> np.ndarray:
        if t is None:
            if self.t is None:
                raise ValueError("no invariant values: pass t or build the Invariant with t")
            return self.t
        return self._check_t(t)

    def _as_stack(self, v, name) -> np.ndarray:
        try:
            V = np.asarray(v, dtype=float)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"{name} must be numeric array-like") from exc
        if V.ndim == 0 or V.shape[-1] != self.n:
            raise ValueError(f"{name} must have shape (..., {self.n}), got {V.shape}")
        if not np.all(np.isfinite(V)):
            raise ValueError(f"{name} contains non-finite entries (NaN or inf)")
        return V

    def _guard(self, entries, what):
        if entries > MAX_DENSE_ENTRIES:
            raise MemoryError(
                f"{what} would build a dense matrix with {entries:,} entries; use "
                "project_null/project_row, which never form it"
            )

    # -- serialization --------------------------------------------------------------------
    def spec(self) -> dict:
        """A JSON-serializable description that :func:`from_spec` turns back into this invariant.

        By kind: ``{"kind": "total", "n": n}``; ``{"kind": "groups", "labels": [...]}`` (the
        label of every cell; str or int labels); ``{"kind": "margins", "shape": [...],
        "keep": [[...], ...]}``; ``{"kind": "counting", "n": n, "subsets": [[...], ...]}``;
        general and stacked matrices as COO triplets ``{"kind": ..., "C": {"shape": [m, n],
        "row": [...], "col": [...], "data": [...], "sparse": bool}}``.  ``"t"`` (a list) is
        included when the invariant values are set.
        """
        import numbers

        kind = self.kind
        if kind is InvariantKind.TOTAL:
            out = {"kind": kind.value, "n": int(self.n)}
        elif kind is InvariantKind.GROUPS:
            part = self.partition
            labels = []
            for lab in part.labels:
                if isinstance(lab, (bool, np.bool_)) or not isinstance(lab, (str, numbers.Integral)):
                    raise TypeError(f"group labels of type {type(lab).__name__} cannot be serialized "
                                    "(use str or int labels)")
                labels.append(str(lab) if isinstance(lab, str) else int(lab))
            out = {"kind": kind.value, "labels": [labels[c] for c in part.codes.tolist()]}
        elif kind is InvariantKind.MARGINS:
            out = {"kind": kind.value, "shape": [int(v) for v in self.table_shape],
                   "keep": [[int(a) for a in K] for K in self.kept_margins]}
        elif kind is InvariantKind.COUNTING:
            Cs = sp.csr_matrix(self._C)
            Cs.sort_indices()
            out = {"kind": kind.value, "n": int(self.n),
                   "subsets": [Cs.indices[Cs.indptr[r]:Cs.indptr[r + 1]].tolist() for r in range(self.m)]}
        else:
            coo = sp.coo_matrix(self._C)
            out = {"kind": kind.value,
                   "C": {"shape": [int(v) for v in self._C.shape], "row": coo.row.tolist(),
                         "col": coo.col.tolist(), "data": coo.data.astype(float).tolist(),
                         "sparse": bool(sp.issparse(self._C))}}
        if self.t is not None:
            out["t"] = np.asarray(self.t, dtype=float).tolist()
        return out


def split_group_totals(codes, totals, weights) -> np.ndarray:
    """A non-negative integer point with group sums ``totals``: each group's total split in
    proportion to the positive part of ``weights`` (evenly when that is all zero), rounded by
    largest remainders (Hamilton), ties to the lower index.  ``codes`` (n,) the group of every
    cell (0..G-1), ``totals`` (G,) non-negative integers."""
    codes = np.asarray(codes, dtype=np.int64)
    t = np.asarray(totals, dtype=np.int64)
    w_all = np.clip(np.asarray(weights, dtype=float), 0.0, None)
    x = np.zeros(codes.size, dtype=np.int64)
    order = np.argsort(codes, kind="stable")
    bounds = np.searchsorted(codes[order], np.arange(t.size + 1))
    for g in range(t.size):
        idx = order[bounds[g]:bounds[g + 1]]
        w = w_all[idx]
        w = np.ones(idx.size) if w.sum() <= 0 else w
        share = t[g] * w / w.sum()
        base = np.floor(share).astype(np.int64)
        rest = int(t[g] - base.sum())
        if rest > 0:
            base[np.argsort(-(share - base), kind="stable")[:rest]] += 1
        x[idx] = base
    return x


def _rank_within_groups(codes: np.ndarray, n_groups: int) -> np.ndarray:
    """Position of each cell within its group (0, 1, ... in index order)."""
    order = np.argsort(codes, kind="stable")
    sorted_codes = codes[order]
    starts = np.searchsorted(sorted_codes, np.arange(n_groups))
    pos_sorted = np.arange(len(codes)) - starts[sorted_codes]
    out = np.empty_like(pos_sorted)
    out[order] = pos_sorted
    return out


# ---------------------------------------------------------------------------------------
# exact integer linear algebra
# ---------------------------------------------------------------------------------------
def _column_hermite(C: Sequence[Sequence[int]]):
    """Unimodular column reduction ``C U = [H | 0]`` in exact integer arithmetic.

    Returns (H_cols, U, pivots) where U is an n x n list-of-lists unimodular matrix (columns
    are the transformed unit vectors), ``k = len(pivots)`` columns of ``C U`` are non-zero and
    in column echelon form (pivot row of column j strictly increasing), and columns k..n-1 of
    ``C U`` vanish.  Columns k..n-1 of U therefore generate the integer kernel exactly.
    """
    m = len(C)
    n = len(C[0]) if m else 0
    A = [[int(C[i][j]) for i in range(m)] for j in range(n)]  # columns of C U
    U = [[1 if i == j else 0 for i in range(n)] for j in range(n)]  # columns of U
    pivots = []
    k = 0
    for row in range(m):
        if k >= n:
            break
        # gcd-reduce entries A[j][row], j >= k, into column k
        while True:
            nz = [j for j in range(k, n) if A[j][row] != 0]
            if not nz:
                break
            p = min(nz, key=lambda j: abs(A[j][row]))
            if p != k:
                A[k], A[p] = A[p], A[k]
                U[k], U[p] = U[p], U[k]
            done = True
            a = A[k][row]
            for j in range(k + 1, n):
                b = A[j][row]
                if b:
                    q = b // a
                    if q:
                        Ak, Uk = A[k], U[k]
                        A[j] = [x - q * y for x, y in zip(A[j], Ak)]
                        U[j] = [x - q * y for x, y in zip(U[j], Uk)]
                    if A[j][row]:
                        done = False
            if done:
                break
        if A[k][row] != 0:
            if A[k][row] < 0:
                A[k] = [-x for x in A[k]]
                U[k] = [-x for x in U[k]]
            pivots.append(row)
            k += 1
    return A, U, pivots


def integer_kernel_basis(C) -> list[list[int]]:
    """Exact basis (list of integer vectors) of ``{e in Z^n : C e = 0}`` for integer C."""
    C = np.asarray(C)
    if C.ndim != 2:
        raise ValueError(f"C must be 2-dimensional, got shape {C.shape}")
    Cl = [[int(v) for v in row] for row in C.tolist()]
    if C.shape[0] == 0:
        n = C.shape[1]
        return [[1 if i == j else 0 for i in range(n)] for j in range(n)]
    _, U, pivots = _column_hermite(Cl)
    return [U[j] for j in range(len(pivots), C.shape[1])]


def _integer_solution(C: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Exact integer solution of ``C x = t`` via the column Hermite form, or an error."""
    Cl = [[int(v) for v in row] for row in C.tolist()]
    A, U, pivots = _column_hermite(Cl)
    k = len(pivots)
    n = C.shape[1]
    tt = [int(v) for v in t.tolist()]
    z = [0] * n
    # forward substitution over the pivot rows (column echelon form)
    resid = list(tt)
    for j, row in enumerate(pivots):
        a = A[j][row]
        if resid[row] % a != 0:
            raise InfeasibleInvariantError("no integer point satisfies C x = t (t is not in the lattice C Z^n)")
        z[j] = resid[row] // a
        if z[j]:
            resid = [r - z[j] * c for r, c in zip(resid, A[j])]
    if any(resid):
        raise InfeasibleInvariantError("no integer point satisfies C x = t")
    x = [0] * n
    for j in range(k):
        if z[j]:
            x = [xi + z[j] * u for xi, u in zip(x, U[j])]
    if any(abs(v) >= 2**63 for v in x):
        raise OverflowError("integer solution does not fit in 64-bit integers")
    return np.array(x, dtype=np.int64)


def lll_reduce(basis: list[list[int]], delta: Fraction = Fraction(99, 100)) -> list[list[int]]:
    """Exact integral LLL reduction (Cohen, A Course in Computational Algebraic Number
    Theory, Alg. 2.6.7) of linearly independent integer vectors.

    Only unimodular integer operations touch the basis, so the output generates exactly the
    same lattice; all Gram-Schmidt quantities are kept as exact integers (``d_i`` are the
    Gram determinants and ``lam[k][j] = d_j mu_{kj}``), so no rounding can break it.
    """
    b = [list(v) for v in basis]
    nb = len(b)
    if nb <= 1:
        return b
    p, q = delta.numerator, delta.denominator

    def dot(u, v):
        return sum(x * y for x, y in zip(u, v))

    d = [0] * (nb + 1)  # d[0] = 1, d[i] for i = 1..nb (1-based as in Cohen)
    d[0] = 1
    lam = [[0] * nb for _ in range(nb)]
    d[1] = dot(b[0], b[0])
    k, kmax = 2, 1

    def redi(k, l):  # 1-based indices
        if 2 * abs(lam[k - 1][l - 1]) > d[l]:
            qq = (2 * lam[k - 1][l - 1] + d[l]) // (2 * d[l])  # nearest integer
            b[k - 1] = [x - qq * y for x, y in zip(b[k - 1], b[l - 1])]
            lam[k - 1][l - 1] -= qq * d[l]
            for i in range(1, l):
                lam[k - 1][i - 1] -= qq * lam[l - 1][i - 1]

    def swapi(k):
        b[k - 1], b[k - 2] = b[k - 2], b[k - 1]
        for j in range(1, k - 1):
            lam[k - 1][j - 1], lam[k - 2][j - 1] = lam[k - 2][j - 1], lam[k - 1][j - 1]
        lm = lam[k - 1][k - 2]
        B = (d[k - 2] * d[k] + lm * lm) // d[k - 1]
        for i in range(k + 1, kmax + 1):
            t = lam[i - 1][k - 1]
            lam[i - 1][k - 1] = (d[k] * lam[i - 1][k - 2] - lm * t) // d[k - 1]
            lam[i - 1][k - 2] = (B * t + lm * lam[i - 1][k - 1]) // d[k]
        d[k - 1] = B

    while k <= nb:
        if k > kmax:
            kmax = k
            for j in range(1, k + 1):
                u = dot(b[k - 1], b[j - 1])
                for i in range(1, j):
                    u = (d[i] * u - lam[k - 1][i - 1] * lam[j - 1][i - 1]) // d[i - 1]
                if j < k:
                    lam[k - 1][j - 1] = u
                else:
                    if u == 0:
                        raise ValueError("lll_reduce: vectors are linearly dependent")
                    d[k] = u
        redi(k, k - 1)
        lm = lam[k - 1][k - 2]
        if q * d[k] * d[k - 2] < p * d[k - 1] * d[k - 1] - q * lm * lm:
            swapi(k)
            k = max(2, k - 1)
        else:
            for l in range(k - 2, 0, -1):
                redi(k, l)
            k += 1
    return b


def _lattice_by_column_classes(C) -> np.ndarray:
    """Lattice basis from classes of identical columns plus a reduced kernel of representatives.

    Let cells with identical columns of C form classes.  Within a class, consecutive
    differences ``e_i - e_j`` lie in the lattice; modulo them a lattice vector is determined
    by its class sums ``a``, which satisfy ``C_rep a = 0``.  Hence within-class differences
    together with (lifts to one representative cell of) an exact basis of ``ker C_rep``
    generate the lattice exactly.
    """
    Cd = C.toarray() if sp.issparse(C) else np.asarray(C)
    Ci = np.round(Cd).astype(np.int64)
    n = Ci.shape[1]
    _, first, inverse = np.unique(Ci.T, axis=0, return_index=True, return_inverse=True)
    inverse = inverse.ravel()
    cols = []
    for cls in range(len(first)):
        idx = np.flatnonzero(inverse == cls)
        for a, b in zip(idx[:-1], idx[1:]):
            v = np.zeros(n, dtype=np.int64)
            v[a], v[b] = 1, -1
            cols.append(v)
    reps = np.array(sorted(first))
    Crep = Ci[:, reps]
    kern = integer_kernel_basis(Crep)
    if kern:
        kern = lll_reduce(kern)
    for vec in kern:
        if any(abs(x) >= 2**62 for x in vec):
            raise OverflowError("lattice basis entries do not fit in 64-bit integers")
        v = np.zeros(n, dtype=np.int64)
        v[reps] = np.array(vec, dtype=np.int64)
        cols.append(v)
    if not cols:
        return np.zeros((n, 0), dtype=np.int64)
    return np.column_stack(cols)


# ---------------------------------------------------------------------------------------
# constructors
# ---------------------------------------------------------------------------------------
def total(n: int, t=None) -> Invariant:
    """The grand total ``sum_i x_i = t`` over ``n`` cells (lattice moves ``e_i - e_{i+1}``)."""
    n = _check_n(n)
    return groups(np.zeros(n, dtype=np.int64), t=t, _structure="total")


def _group_moves(codes) -> np.ndarray:
    """The lattice moves of partition totals: ``e_i - e_j`` for consecutive cells of one group
    (``codes``: each cell's group), ``(n, n - groups)``.  A module-level function (bound with
    ``functools.partial``) so that an invariant pickles, e.g. to a Dask worker."""
    n = codes.size
    order = np.argsort(codes, kind="stable")
    same = codes[order][1:] == codes[order][:-1]
    a, b = order[:-1][same], order[1:][same]
    B = np.zeros((n, len(a)), dtype=np.int64)
    B[a, np.arange(len(a))] = 1
    B[b, np.arange(len(a))] = -1
    return B


def _table_moves(R_: int, K_: int) -> np.ndarray:
    """The (R-1)(K-1) adjacent 2 x 2 moves of an R x K table's row and column totals (cells in C
    order), ``(R K, (R-1)(K-1))``; module-level, as :func:`_group_moves`."""
    B = np.zeros((R_ * K_, (R_ - 1) * (K_ - 1)), dtype=np.int64)
    j = 0
    for i in range(R_ - 1):
        for k in range(K_ - 1):
            B[i * K_ + k, j] = 1
            B[i * K_ + k + 1, j] = -1
            B[(i + 1) * K_ + k, j] = -1
            B[(i + 1) * K_ + k + 1, j] = 1
            j += 1
    return B


def groups(labels, t=None, *, _structure: str = "groups") -> Invariant:
    """Partition totals: one constraint per distinct label (rows ordered by sorted label).

    ``labels[i]`` is the group of cell i (e.g. the state of each county).  Lattice moves are
    ``e_i - e_j`` for consecutive cells of the same group; projections are group means.
    """
    labels = np.asarray(labels)
    if labels.ndim != 1 or labels.size == 0:
        raise ValueError(f"labels must be a non-empty 1-d array, got shape {labels.shape}")
    uniq, codes = np.unique(labels, return_inverse=True)
    codes = codes.ravel().astype(np.int64)
    n, g = labels.size, len(uniq)
    C = sp.csr_matrix((np.ones(n), (codes, np.arange(n))), shape=(g, n))
    proj = _GroupProjector(codes, g)
    partition = Partition(codes, uniq, np.bincount(codes, minlength=g).astype(np.int64))
    inv = Invariant(C, None, _projector=proj, _structure=_structure, _moves=functools.partial(_group_moves, codes),
                    _partition=partition)
    inv.group_labels = uniq
    inv.group_codes = codes
    if t is not None:
        inv.t = inv._check_t(t)
    return inv


def margins(shape, keep, t=None) -> Invariant:
    """Marginal totals of a multiway table with cells in C order.

    ``keep`` lists the kept margins as tuples of axes, e.g. ``[(0,), (1,)]`` for the row and
    column totals of a two-way table, ``[(0, 1), (1, 2)]`` for two 2-way margins of a 3-way
    table, ``[()]`` for the grand total.  Rows of C: for each kept margin in order, its
    marginal cells in C order.  Projections use the ANOVA decomposition; the lattice basis of
    two-way row+column margins is the (r-1)(c-1) adjacent 2 x 2 moves.
    """
    shape = tuple(int(s) for s in shape)
    if not shape or any(s < 1 for s in shape):
        raise ValueError(f"shape must be a non-empty tuple of positive sizes, got {shape}")
    d = len(shape)
    keep_list = []
    for K in keep:
        K = tuple(int(a) for a in (K if isinstance(K, Iterable) else (K,)))
        if any(a < 0 or a >= d for a in K):
            raise ValueError(f"margin {K} names an axis outside 0..{d - 1}")
        if len(set(K)) != len(K):
            raise ValueError(f"margin {K} repeats an axis")
        keep_list.append(tuple(sorted(K)))
    if not keep_list:
        raise ValueError("keep must list at least one margin")
    n = int(np.prod(shape))
    idx = np.arange(n).reshape(shape)
    rows, cols = [], []
    offset = 0
    for K in keep_list:
        sub = tuple(shape[a] for a in K)
        multi = np.indices(shape).reshape(d, -1)
        if K:
            r = np.ravel_multi_index(tuple(multi[a] for a in K), sub)
        else:
            r = np.zeros(n, dtype=np.int64)
        rows.append(offset + r)
        cols.append(idx.ravel())
        offset += int(np.prod(sub)) if K else 1
    rows = np.concatenate(rows)
    cols = np.concatenate(cols)
    C = sp.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(offset, n))
    proj = _MarginProjector(shape, keep_list)
    moves = None
    down = set(proj.down)
    if d == 2 and down == {(), (0,), (1,)}:
        moves = functools.partial(_table_moves, *shape)

    inv = Invariant(C, None, _projector=proj, _structure="margins", _moves=moves)
    inv.table_shape = shape
    inv.kept_margins = keep_list
    if t is not None:
        inv.t = inv._check_t(t)
    return inv


def counting(subsets, n: int, t=None) -> Invariant:
    """Counting invariants: one constraint ``sum_{i in S} x_i`` per index subset S."""
    n = _check_n(n)
    rows, cols = [], []
    subsets = list(subsets)
    if not subsets:
        raise ValueError("subsets must contain at least one subset")
    for r, S in enumerate(subsets):
        S = np.unique(np.asarray(list(S), dtype=np.int64))
        if S.size == 0:
            raise ValueError(f"subset {r} is empty")
        if S.min() < 0 or S.max() >= n:
            raise ValueError(f"subset {r} has an index outside 0..{n - 1}")
        rows.append(np.full(S.size, r))
        cols.append(S)
    C = sp.csr_matrix((np.ones(sum(map(len, cols))), (np.concatenate(rows), np.concatenate(cols))),
                      shape=(len(subsets), n))
    inv = Invariant(C, t, _structure="counting")
    return inv


def stack(*invariants: Invariant) -> Invariant:
    """All constraints of several invariants on the same cells (t kept if all have one)."""
    if not invariants:
        raise ValueError("stack needs at least one invariant")
    n = invariants[0].n
    for inv in invariants:
        if not isinstance(inv, Invariant):
            raise TypeError("stack takes Invariant objects")
        if inv.n != n:
            raise ValueError(f"cannot stack invariants on {n} and {inv.n} cells")
    mats = [inv.matrix for inv in invariants]
    if any(sp.issparse(M) for M in mats):
        C = sp.vstack([sp.csr_matrix(M) for M in mats]).tocsr()
    else:
        C = np.vstack(mats)
    t = None
    if all(inv.t is not None for inv in invariants):
        t = np.concatenate([inv.t for inv in invariants])
    return Invariant(C, t, _structure="stacked")


def _check_n(n) -> int:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"n must be a positive integer, got {n!r}")
    return int(n)


# ---------------------------------------------------------------------------------------
# serialization
# ---------------------------------------------------------------------------------------
def from_spec(spec) -> Invariant:
    """The invariant described by ``spec`` (a dict from :meth:`Invariant.spec`, e.g. read from JSON).

    The rebuilt invariant has the same kind, constraint matrix (rows in the same order) and
    values ``t``.  A malformed spec raises ``ValueError`` naming what is wrong.
    """
    from collections.abc import Mapping

    if not isinstance(spec, Mapping) or "kind" not in spec:
        raise ValueError("an invariant spec is a mapping with a 'kind' entry")
    try:
        kind = InvariantKind(spec["kind"])
    except ValueError:
        raise ValueError(f"unknown invariant kind {spec['kind']!r} "
                         f"(one of {', '.join(k.value for k in InvariantKind)})") from None
    t = spec.get("t")
    try:
        if kind is InvariantKind.TOTAL:
            return total(spec["n"], t=t)
        if kind is InvariantKind.GROUPS:
            return groups(np.asarray(spec["labels"]), t=t)
        if kind is InvariantKind.MARGINS:
            return margins(tuple(spec["shape"]), [tuple(K) for K in spec["keep"]], t=t)
        if kind is InvariantKind.COUNTING:
            return counting(spec["subsets"], spec["n"], t=t)
        Cd = spec["C"]
        C = sp.csr_matrix((np.asarray(Cd["data"], dtype=float),
                           (np.asarray(Cd["row"], dtype=np.int64), np.asarray(Cd["col"], dtype=np.int64))),
                          shape=tuple(Cd["shape"]))
    except KeyError as exc:
        raise ValueError(f"invariant spec of kind {kind.value!r} lacks the entry {exc.args[0]!r}") from None
    if not Cd.get("sparse", True):
        C = C.toarray()
    return Invariant(C, t, _structure=kind.value)


__all__ += ["from_spec"]
