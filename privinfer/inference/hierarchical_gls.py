r"""Generalized least squares over a geographic hierarchy in two passes over the tree.

For measurements of nested margins (:class:`~privinfer.mechanisms.hierarchy.HierarchyMeasurements`)
the GLS estimate of :mod:`privinfer.inference.gls` -- minimize
:math:`(y - Bx)^\top W (y - Bx)` subject to the invariant, :math:`W` the inverse noise
variances -- equals a Gaussian posterior under a flat prior, and the tree makes it cheap
(Cumings-Menon 2024, "Least squares estimation for hierarchical data", Sec. 3-4; the same
recursions as Kalman filtering / Rauch-Tung-Striebel smoothing on a tree).

Notation.  Unit ``v`` of level ``l`` has attribute vector :math:`X_v \in \mathbb R^d`, the
sum of its children's.  Its own measurements give the information matrix and vector

.. math:: J_l = \sum_q M_q^\top M_q / V_q, \qquad h_v = \sum_q M_q^\top y_{v,q} / V_q,

(``V_q`` the exact variance of the discrete Gaussian noise of query ``q``; ``J_l`` is the same
for every unit of a level).

Upward pass (messages :math:`N(m_v, S_v)`: the subtree's data as a Gaussian in :math:`X_v`).
A lowest-level unit has :math:`S_u = J_L^{-1}`, :math:`m_u = S_u h_u` (its detailed cells
must be measured: :math:`J_L` invertible).  An inner unit sums its children
(:math:`S_v^- = \sum_c S_c`, :math:`m_v^- = \sum_c m_c`: a sum of independent Gaussians)
and assimilates its own measurements in covariance form (valid for singular
:math:`S_v^-`),

.. math:: S_v = S_v^- - S_v^-(I + J_l S_v^-)^{-1} J_l S_v^-, \qquad
          m_v = m_v^- + S_v (h_v - J_l m_v^-).

An invariant fixing the totals :math:`\mathbf 1^\top X_v = T_v` of the units of one level is an
exact measurement there: :math:`g = S_v\mathbf 1/(\mathbf 1^\top S_v \mathbf 1)`,
:math:`m_v \leftarrow m_v - g(\mathbf 1^\top m_v - T_v)`, :math:`S_v \leftarrow S_v - g\mathbf 1^\top S_v`.

Downward pass (posteriors :math:`N(\mu_v, \Sigma_v)` given all data).  The root's is its
message.  A child's data and the data outside its parent's subtree are independent given
:math:`X_p`, and :math:`X_c \mid X_p` is Gaussian with mean
:math:`m_c + G_c(X_p - m_p^-)`, :math:`G_c = S_c (S_p^-)^{+}`, and covariance
:math:`S_c - G_c S_c`; hence

.. math:: \mu_c = m_c + G_c(\mu_p - m_p^-), \qquad
          \Sigma_c = S_c - G_c S_c + G_c \Sigma_p G_c^\top .

(:math:`S_p^-` is singular when the children's totals are fixed by the invariant; the pseudo-inverse is
exact then, because :math:`\mu_p - m_p^-` lies in its range.)  The lowest level's
:math:`\Sigma_u` gives every cell's variance; every unit's is kept for variances of linear
functions within a unit.

Linear functions of many cells.  The estimate is linear in the information vectors and the
invariant values; with the information placed at the cells (:math:`h = w`) and the invariant
values set to 0 the same mean pass returns :math:`\Sigma w` (:math:`\Sigma` the constrained
covariance of the estimate), so :math:`\mathrm{Var}(w^\top\hat x) = w^\top \Sigma w` for any
set of weight vectors in one batched pass (:meth:`HierarchicalGLS.covariance_of`).

Cost: :math:`O(n d + \sum_{l < L} U_l d^3)` time and :math:`O(n + \sum_{l<L} U_l d^2)` memory
(``U_l`` units at level ``l``, ``d`` attribute combinations); nothing of size n x n.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp
from scipy.stats import norm

from ..lattice.laws import discrete_gaussian_variance
from ..mechanisms.hierarchy import HierarchyMeasurements
from .estimates import GLSEstimate

__all__ = ["HierarchicalGLS", "HierarchicalGLSEstimate", "hierarchical_gls", "tree_applies"]


def _sum_by(parent: np.ndarray, values: np.ndarray, n_parents: int) -> np.ndarray:
    """Sums of ``values[i]`` over the children ``i`` of every parent (leading axis)."""
    out = np.zeros((n_parents,) + values.shape[1:])
    order = np.argsort(parent, kind="stable")
    starts = np.searchsorted(parent[order], np.arange(n_parents))
    nonempty = np.diff(np.r_[starts, parent.size]) > 0
    if values.size:
        red = np.add.reduceat(values[order], starts[nonempty], axis=0)
        out[nonempty] = red
    return out


def _sym(A):
    return 0.5 * (A + np.swapaxes(A, -1, -2))


@dataclass
class _Level:
    """Per-level quantities of the covariance passes (independent of the data)."""

    J: np.ndarray                 # (d, d) information of one unit's own measurements
    S: np.ndarray                 # (U, d, d) or (1, d, d) upward message covariance
    Sm: np.ndarray | None = None  # (U, d, d) sum of the children's S (inner levels)
    K: np.ndarray | None = None   # (U, d, d) S_v - the own-measurement gain applied to h - J m^-
    g: np.ndarray | None = None   # (U, d) constraint gain (invariant level)
    G: np.ndarray | None = None   # (U, d, d) or (P, d, d): smoother gain of the units (children of p)
    Sigma: np.ndarray | None = None  # (U, d, d) posterior covariance (inner levels), (P, d, d) leaves
    shared: bool = False          # S (and G, Sigma per parent) shared by all units: the lowest level
    extra: dict = field(default_factory=dict)


class HierarchicalGLS:
    """The two passes of hierarchical GLS for one :class:`HierarchyMeasurements` (module
    docstring).  The covariance pass runs once here; :meth:`solve` runs the mean pass for any
    information vectors."""

    def __init__(self, mechanism: HierarchyMeasurements):
        if not isinstance(mechanism, HierarchyMeasurements):
            raise TypeError("hierarchical GLS needs a HierarchyMeasurements mechanism")
        if mechanism.invariant is not None and mechanism.invariant_level is None:
            raise ValueError("hierarchical GLS needs an invariant that fixes the totals of one level's units")
        self.mechanism = mech = mechanism
        self.hierarchy = H = mechanism.hierarchy
        self.d = d = H.d
        self.L = H.depth
        self.var = np.array([discrete_gaussian_variance(float(s)) for s in mech.sigmas])
        self.margins = [H.margin_matrix(q.keep) for q in mech.hierarchy_queries]
        self.cons = mech.invariant_level if mech.invariant is not None else None
        self.n_units = [H.n_units(l) for l in range(self.L)]
        self.parents = [np.asarray(p, dtype=np.int64) for p in H.parent]
        J = [np.zeros((d, d)) for _ in range(self.L)]
        for k, q in enumerate(mech.hierarchy_queries):
            M = self.margins[k]
            J[q.level] += M.T @ M / self.var[k]
        self.levels: list[_Level] = [None] * self.L
        self._upward_covariances(J)
        self._downward_covariances()

    # -- covariance passes ---------------------------------------------------------------
    def _constrain_cov(self, S):
        one = np.ones(self.d)
        Sc = S @ one
        denom = Sc @ one
        if np.any(denom <= 0):
            raise ValueError("the invariant fixes a total that the measurements leave without variance")
        g = Sc / denom[..., None]
        S = _sym(S - g[..., :, None] * Sc[..., None, :])
        return S, g

    def _upward_covariances(self, J):
        d, L = self.d, self.L
        JL = J[L - 1]
        w, V = np.linalg.eigh(JL)
        if w.min() <= 1e-12 * max(w.max(), 1e-300):
            raise ValueError("hierarchical GLS needs the detailed cells of the lowest level measured "
                             "(its measurements do not identify every cell)")
        S = _sym((V / w) @ V.T)[None]
        leaf = _Level(JL, S, shared=True)
        if self.cons == L - 1:
            leaf.S, g = self._constrain_cov(S)
            leaf.g = g
        leaf.extra["S0"] = S[0]
        self.levels[L - 1] = leaf
        eye = np.eye(d)
        for l in range(L - 2, -1, -1):
            child = self.levels[l + 1]
            U = self.n_units[l]
            if child.shared:
                counts = np.bincount(self.parents[l + 1], minlength=U).astype(float)
                Sm = counts[:, None, None] * child.S
            else:
                Sm = _sum_by(self.parents[l + 1], child.S, U)
            Jl = J[l]
            if np.any(Jl):
                A = np.linalg.solve(eye + Jl @ Sm, Jl @ Sm)  # (I + J S^-)^{-1} J S^-
                S = _sym(Sm - Sm @ A)
            else:
                S = Sm.copy()
            lev = _Level(Jl, S, Sm=Sm)
            lev.extra["S_own"] = S  # after the own measurements, before the invariant (mean pass)
            if self.cons == l:
                lev.S, lev.g = self._constrain_cov(S)
            self.levels[l] = lev

    def _gain(self, S_child, Sm_parent, child_level):
        """``G = S_c (S_p^-)^+`` (pseudo-inverse when the children's totals are fixed: the
        invariant's level or a level above it)."""
        if self.cons is not None and child_level <= self.cons:
            inv = np.linalg.pinv(Sm_parent, rcond=1e-10, hermitian=True)
        else:
            inv = np.linalg.inv(Sm_parent)
        return S_child @ inv

    def _downward_covariances(self):
        L = self.L
        root = self.levels[0]
        root.Sigma = root.S.copy()
        for l in range(1, L):
            lev, par = self.levels[l], self.levels[l - 1]
            p = self.parents[l]
            if lev.shared:
                # the lowest level shares S: gains and posteriors depend on the parent only
                G = self._gain(lev.S, par.Sm, l)                      # (P, d, d)
                Sig = lev.S - G @ lev.S + G @ par.Sigma @ np.swapaxes(G, -1, -2)
            else:
                G = self._gain(lev.S, par.Sm[p], l)                   # (U, d, d)
                Sig = lev.S - G @ lev.S + G @ par.Sigma[p] @ np.swapaxes(G, -1, -2)
            lev.G = G
            lev.Sigma = _sym(Sig)

    # -- mean pass -----------------------------------------------------------------------
    def information(self, y) -> list:
        """Per level, the (U_l, d) information vectors :math:`h_v = \\sum_q M_q^\\top y_{v,q}/V_q`."""
        mech = self.mechanism
        y = np.asarray(y, dtype=float)
        if y.shape != (mech.m,):
            raise ValueError(f"y must have shape ({mech.m},), got {y.shape}")
        h = [np.zeros((U, self.d)) for U in self.n_units]
        for k, q in enumerate(mech.hierarchy_queries):
            M = self.margins[k]
            Y = y[mech.slices[k]].reshape(self.n_units[q.level], M.shape[0])
            h[q.level] += (Y / self.var[k]) @ M
        return h

    def _constrain_mean(self, lev, m, T):
        one_m = m.sum(axis=1)
        g = lev.g if lev.g.ndim == 2 else lev.g[None]
        g = np.broadcast_to(g, (m.shape[0], self.d))
        return m - g[:, :, None] * (one_m - T)[:, None, :]

    def solve(self, h, T=None) -> list:
        """The mean pass: per level the posterior means :math:`\\mu_v` (shape (U_l, d, k)) for
        information vectors ``h`` (per level, shape (U_l, d) or (U_l, d, k)) and invariant values
        ``T`` (per constrained unit, shape (U,) or (U, k); ``None``: zeros)."""
        L = self.L
        h = [np.asarray(v, dtype=float) for v in h]
        squeeze = h[0].ndim == 2
        h = [v[..., None] if squeeze else v for v in h]
        k = h[0].shape[-1]
        if self.cons is not None:
            Uc = self.n_units[self.cons]
            T = np.zeros((Uc, k)) if T is None else np.asarray(T, dtype=float).reshape(Uc, -1) * np.ones((1, k))
        m = [None] * L
        mminus = [None] * L
        leaf = self.levels[L - 1]
        m[L - 1] = np.einsum("ij,ujk->uik", leaf.extra["S0"], h[L - 1])
        if self.cons == L - 1:
            m[L - 1] = self._constrain_mean(leaf, m[L - 1], T)
        for l in range(L - 2, -1, -1):
            lev = self.levels[l]
            mm = _sum_by(self.parents[l + 1], m[l + 1], self.n_units[l])
            mminus[l] = mm
            if np.any(lev.J):
                r = h[l] - np.einsum("ij,ujk->uik", lev.J, mm)
                m[l] = mm + lev.extra["S_own"] @ r
            else:
                m[l] = mm + 0.0
            if self.cons == l:
                m[l] = self._constrain_mean(lev, m[l], T)
        mu = [None] * L
        mu[0] = m[0]
        for l in range(1, L):
            lev = self.levels[l]
            p = self.parents[l]
            diff = mu[l - 1] - mminus[l - 1]
            if lev.shared:
                mu[l] = m[l] + (lev.G @ diff)[p]
            else:
                mu[l] = m[l] + lev.G @ diff[p]
        if squeeze:
            mu = [v[..., 0] for v in mu]
        return mu

    # -- results on cells ----------------------------------------------------------------
    def cells(self, leaf_values: np.ndarray) -> np.ndarray:
        """Lowest-level (U, d, ...) values arranged as cells in the table's row order."""
        H = self.hierarchy
        flat = leaf_values.reshape((-1,) + leaf_values.shape[2:])
        return flat[H.leaf_unit * self.d + H.combination]

    def unit_covariance(self, level) -> np.ndarray:
        """Posterior covariance :math:`\\Sigma_v` of every unit's attribute vector at ``level``,
        shape (U_l, d, d) (computed per parent for the lowest level)."""
        l = self.hierarchy.level_index(level)
        lev = self.levels[l]
        return lev.Sigma[self.parents[l]] if lev.shared and l > 0 else lev.Sigma

    def cell_variance(self) -> np.ndarray:
        """Variance of every cell's estimate, cells in row order."""
        lev = self.levels[self.L - 1]
        diag = np.diagonal(lev.Sigma, axis1=-2, axis2=-1)
        leaf = diag[self.parents[self.L - 1]] if self.L > 1 else np.broadcast_to(diag, (1, self.d))
        return np.maximum(self.cells(leaf), 0.0)

    def covariance_of(self, W) -> np.ndarray:
        """:math:`W^\\top \\Sigma W` for cell weights ``W`` (n x k, dense or sparse; or one
        vector of length n): the covariance of the estimates of ``k`` linear functions.
        Batched over columns; O(n k) memory per batch of 64."""
        H = self.hierarchy
        vec = False
        if sp.issparse(W):
            W = sp.csc_matrix(W, dtype=float)
        else:
            W = np.asarray(W, dtype=float)
            if W.ndim == 1:
                W, vec = W[:, None], True
        if W.shape[0] != H.n:
            raise ValueError(f"weights must have {H.n} rows (one per cell), got {W.shape[0]}")
        k = W.shape[1]
        order = H.leaf_order()
        out = np.zeros((k, k))
        cols = []
        for a in range(0, k, 64):
            Wb = W[:, a:a + 64]
            Wb = Wb.toarray() if sp.issparse(Wb) else Wb
            h = [np.zeros((U, self.d, Wb.shape[1])) for U in self.n_units]
            h[-1] = Wb[order]
            mu = self.solve(h, None)
            cols.append(self.cells(mu[-1]))
        SW = np.concatenate(cols, axis=1)  # Sigma W, (n, k)
        out = (W.T @ SW) if not sp.issparse(W) else np.asarray(W.T @ SW)
        out = _sym(out)
        return out[0, 0] if vec else out

    def estimate(self, y, t=None, level: float = 0.9) -> "HierarchicalGLSEstimate":
        """The GLS estimate of the cells from measurements ``y`` and invariant values ``t``."""
        if not 0 < float(level) < 1:
            raise ValueError(f"level must lie in (0, 1), got {level!r}")
        if self.cons is not None:
            if t is None:
                raise ValueError("the mechanism has an invariant: pass its published values t")
            t = np.asarray(t, dtype=float).reshape(-1)
            if t.shape != (self.n_units[self.cons],):
                raise ValueError(f"t must have one value per {self.hierarchy.levels[self.cons]!r} unit")
        mu = self.solve(self.information(y), t)
        x = self.cells(mu[-1])
        se = np.sqrt(self.cell_variance())
        z = float(norm.ppf(0.5 + float(level) / 2))
        return HierarchicalGLSEstimate(x, se, float(level), x - z * se, x + z * se, solver=self, unit_means=mu)


@dataclass(frozen=True)
class HierarchicalGLSEstimate(GLSEstimate):
    """A :class:`~privinfer.inference.GLSEstimate` from the tree algorithm, with the solver kept
    for variances of sums of cells (:meth:`variance`, :meth:`interval`) and the estimates of
    every unit's attribute vector (``unit_means[level]``, shape (U_l, d))."""

    solver: HierarchicalGLS = None
    unit_means: list = None

    def variance(self, W) -> np.ndarray:
        """Covariance matrix (or variance, for one vector) of the estimates of the linear
        functions ``W^T x`` (``W``: n x k cell weights)."""
        return self.solver.covariance_of(W)

    def interval(self, W, level: float | None = None):
        """Estimates and Gaussian ``level`` intervals of the linear functions ``W^T x``:
        ``(value, lower, upper)``."""
        level = self.level if level is None else float(level)
        W2 = W if sp.issparse(W) or np.ndim(W) == 2 else np.asarray(W, dtype=float)[:, None]
        val = np.asarray(W2.T @ self.x).ravel()
        var = np.atleast_2d(self.variance(W2))
        se = np.sqrt(np.maximum(np.diag(var), 0.0))
        z = float(norm.ppf(0.5 + level / 2))
        return val, val - z * se, val + z * se

    def ratio_interval(self, num, den, level: float | None = None):
        r"""Delta-method intervals of ratios :math:`r = (a^\top x)/(b^\top x)` (e.g. a unit's share
        aged 65+): :math:`\mathrm{Var}\,r \approx (V_{aa} - 2rV_{ab} + r^2V_{bb})/(b^\top \hat x)^2`.
        ``num``, ``den``: n x k weights (column j of each is one ratio).  Returns
        ``(ratio, lower, upper)``."""
        level = self.level if level is None else float(level)
        A = sp.csc_matrix(num) if sp.issparse(num) else sp.csc_matrix(np.atleast_2d(np.asarray(num, float).T).T)
        B = sp.csc_matrix(den) if sp.issparse(den) else sp.csc_matrix(np.atleast_2d(np.asarray(den, float).T).T)
        if A.shape != B.shape:
            raise ValueError("numerator and denominator weights must have the same shape")
        a = np.asarray(A.T @ self.x).ravel()
        b = np.asarray(B.T @ self.x).ravel()
        k = A.shape[1]
        r = a / b
        var = np.empty(k)
        for j0 in range(0, k, 32):
            j1 = min(k, j0 + 32)
            V = self.variance(sp.hstack([A[:, j0:j1], B[:, j0:j1]]).tocsc())
            m = j1 - j0
            Vaa, Vbb, Vab = np.diag(V)[:m], np.diag(V)[m:], np.diag(V[:m, m:])
            rr = r[j0:j1]
            var[j0:j1] = (Vaa - 2 * rr * Vab + rr * rr * Vbb) / b[j0:j1] ** 2
        se = np.sqrt(np.maximum(var, 0.0))
        z = float(norm.ppf(0.5 + level / 2))
        return r, r - z * se, r + z * se


def tree_applies(mechanism) -> bool:
    """Whether the tree algorithm solves GLS for ``mechanism``: measurements of a hierarchy
    whose lowest level's detailed cells are measured and whose invariant (if any) fixes the
    totals of one level's units."""
    if not isinstance(mechanism, HierarchyMeasurements):
        return False
    if mechanism.invariant is not None and mechanism.invariant_level is None:
        return False
    H = mechanism.hierarchy
    leaf = H.depth - 1
    J = np.zeros((H.d, H.d))
    for k, q in enumerate(mechanism.hierarchy_queries):
        if q.level == leaf:
            M = H.margin_matrix(q.keep)
            J += M.T @ M
    return bool(np.linalg.matrix_rank(J) == H.d)


def hierarchical_gls(release, level: float = 0.9) -> HierarchicalGLSEstimate:
    """Hierarchical GLS of a release of :class:`HierarchyMeasurements` (module docstring)."""
    mech = release.mechanism
    return HierarchicalGLS(mech).estimate(release.y, release.t, level)
