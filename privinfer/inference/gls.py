r"""Generalized least squares on noisy measurements, with Gaussian confidence intervals.

The Census Bureau's own estimator from its noisy measurement files (hierarchical GLS,
Cumings-Menon et al., "A generalized least-squares approach to the 2020 Census noisy
measurement files"): treat the integer measurements ``y_k = B_k x + e_k`` as Gaussian with
the noise variances, impose the invariants, ignore integrality and non-negativity.

With :math:`W = \mathrm{diag}(1/v_r)` (:math:`v_r` the exact variance of the discrete Gaussian
noise of row ``r``, :func:`privinfer.lattice.laws.discrete_gaussian_variance`),
:math:`K = B^\top W B` and :math:`b = B^\top W y`, the estimate minimizing
:math:`(y - Bx)^\top W (y - Bx)` subject to :math:`Cx = t` is

.. math:: \hat x = K^{-1}b - K^{-1}C^\top (CK^{-1}C^\top)^{-1}(CK^{-1}b - t),

unbiased with covariance

.. math:: \Sigma = K^{-1} - K^{-1}C^\top (CK^{-1}C^\top)^{-1} CK^{-1}

(the Gauss-Markov estimator under the linear constraint; exact for the first two moments of
the discrete Gaussian noise).  Intervals are :math:`\hat x_i \pm z_{1-\alpha/2}\sqrt{\Sigma_{ii}}`
-- Gaussian, so they can reach below zero for small cells.

Computation.  Rows with one non-zero (measurements of single cells, e.g. the detailed cells
of a hierarchy) make a diagonal :math:`D`; the other rows ``V`` (r of them: county totals,
state margins) are few.  When every cell has such a row, :math:`K = D + V^\top W_V V` is
inverted by the Woodbury identity with one dense r x r solve, and the diagonal of
:math:`\Sigma` is read off without forming any n x n matrix: O(nnz(V) r + r^3).  Otherwise
``K`` is factored as a sparse matrix (SuperLU) and :math:`\mathrm{diag}(K^{-1})` is computed
column by column (n solves; meant for small n).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from scipy import linalg as sla
from scipy.stats import norm

from ..lattice.laws import discrete_gaussian_variance
from .estimates import GLSEstimate
from .hierarchical_gls import hierarchical_gls, tree_applies

__all__ = ["GLSEstimate", "gls", "gls_estimate", "topdown_style_estimate"]


class _KInverse:
    """Apply :math:`K^{-1}` and read :math:`\\mathrm{diag}(K^{-1})` (module docstring)."""

    def __init__(self, B: sp.csr_matrix, w: np.ndarray):
        n = B.shape[1]
        single = np.diff(B.indptr) == 1
        d = np.zeros(n)
        Bs = B[single].tocoo()
        np.add.at(d, Bs.col, w[single][Bs.row] * Bs.data**2)
        self.n = n
        if np.all(d > 0):
            V = B[~single].tocsr()
            self.mode = "woodbury"
            self.dinv = 1.0 / d
            self.V = V
            wv = w[~single]
            G = (V @ sp.diags(self.dinv)).toarray() if V.shape[0] else np.zeros((0, n))
            S = np.diag(1.0 / wv) + G @ V.T.toarray() if V.shape[0] else np.zeros((0, 0))
            self.G = G
            self.S = sla.cho_factor(S) if V.shape[0] else None
        else:
            K = (B.T @ sp.diags(w) @ B).tocsc()
            self.mode = "sparse"
            try:
                self.lu = spla.splu(K)
            except RuntimeError:
                raise ValueError("the measurements do not identify every cell (B^T W B is singular)") from None
            # a singular K can factor with tiny pivots: check that a solve recovers a known vector
            v = np.random.default_rng(0).standard_normal(n)
            z = self.lu.solve(K @ v)
            if not np.all(np.isfinite(z)) or np.linalg.norm(z - v) > 1e-6 * np.linalg.norm(v):
                raise ValueError("the measurements do not identify every cell (B^T W B is singular)")

    def solve(self, R):
        R = np.asarray(R, dtype=float)
        if self.mode == "sparse":
            return self.lu.solve(R)
        first = self.dinv[:, None] * R if R.ndim == 2 else self.dinv * R
        if self.S is None:
            return first
        corr = self.G.T @ sla.cho_solve(self.S, self.V @ first)
        return first - corr

    def diag(self) -> np.ndarray:
        if self.mode == "sparse":
            out = np.empty(self.n)
            e = np.zeros(self.n)
            for i in range(self.n):
                e[i] = 1.0
                out[i] = self.lu.solve(e)[i]
                e[i] = 0.0
            return out
        if self.S is None:
            return self.dinv.copy()
        return self.dinv - np.sum(self.G * sla.cho_solve(self.S, self.G), axis=0)


def gls(B, variances, y, C=None, t=None, level: float = 0.9) -> GLSEstimate:
    r"""Equality-constrained GLS of ``x`` from ``y = B x + noise`` (module docstring).

    ``B`` (m x n, sparse or dense), ``variances`` (m,) the noise variances, ``y`` (m,), and
    optionally the invariant ``C x = t`` (``C`` c x n of full row rank).  ``level``: the
    coverage of the Gaussian intervals.
    """
    B = sp.csr_matrix(B, dtype=float)
    m, n = B.shape
    v = np.asarray(variances, dtype=float).reshape(-1)
    y = np.asarray(y, dtype=float).reshape(-1)
    if v.shape != (m,) or y.shape != (m,):
        raise ValueError(f"variances and y must have one entry per row of B ({m})")
    if not np.all(np.isfinite(v)) or np.any(v <= 0):
        raise ValueError("the noise variances must be finite and > 0")
    if not np.all(np.isfinite(y)):
        raise ValueError("y contains non-finite entries")
    if not 0 < float(level) < 1:
        raise ValueError(f"level must lie in (0, 1), got {level!r}")
    w = 1.0 / v
    Kinv = _KInverse(B, w)
    b = B.T @ (w * y)
    x = Kinv.solve(b)
    var = Kinv.diag()
    if C is not None:
        Cd = C.toarray() if sp.issparse(C) else np.asarray(C, dtype=float)
        Cd = np.atleast_2d(Cd)
        if Cd.shape[1] != n:
            raise ValueError(f"C must have {n} columns, got shape {Cd.shape}")
        if t is None:
            raise ValueError("an invariant C needs its values t")
        t = np.asarray(t, dtype=float).reshape(-1)
        if t.shape != (Cd.shape[0],):
            raise ValueError(f"t must have one entry per row of C ({Cd.shape[0]})")
        Z = Kinv.solve(Cd.T)  # K^{-1} C^T, n x c
        M = Cd @ Z
        Mf = sla.cho_factor(M)
        x = x - Z @ sla.cho_solve(Mf, Cd @ x - t)
        var = var - np.sum(Z.T * sla.cho_solve(Mf, Z.T), axis=0)
    var = np.maximum(var, 0.0)  # the constrained variance of a cell fixed by C is 0 up to rounding
    se = np.sqrt(var)
    z = float(norm.ppf(0.5 + float(level) / 2))
    return GLSEstimate(x, se, float(level), x - z * se, x + z * se)


def gls_estimate(release, level: float = 0.9) -> GLSEstimate:
    """GLS for a :class:`~privinfer.mechanisms.MeasurementRelease`: the mechanism's stacked
    queries, the exact discrete Gaussian variances, and its invariant with the published
    ``t``.

    Measurements of nested margins of a geography
    (:class:`~privinfer.mechanisms.hierarchy.HierarchyMeasurements` whose invariant, if any,
    fixes the totals of one level's units) are solved by the two passes over the tree of
    :mod:`privinfer.inference.hierarchical_gls` (the same estimate, O(n) memory, with
    variances of sums of cells); other measurements by the Woodbury / sparse path above."""
    if tree_applies(release.mechanism):
        return hierarchical_gls(release, level)
    mech = release.mechanism
    variances = np.repeat([discrete_gaussian_variance(float(s)) for s in mech.sigmas], mech.sizes)
    inv = release.invariant
    C = None if inv is None else inv.matrix
    t = None if inv is None else release.t
    return gls(mech.matrix, variances, release.y, C, t, level)


def topdown_style_estimate(release, estimate: GLSEstimate | None = None, rng=None) -> np.ndarray:
    """TopDown-style post-processing of the measurements: the GLS estimate projected onto
    ``{x >= 0, C x = t}`` and rounded to integers keeping ``t``, by the estimation phase of
    :class:`~privinfer.mechanisms.TopDownBaseline` (Euclidean projection of the GLS point and
    controlled rounding; the Bureau instead solves a weighted non-negative least-squares
    problem at each level).  Needs an invariant."""
    from ..mechanisms import TopDownBaseline

    inv = release.invariant
    if inv is None:
        raise ValueError("TopDown-style post-processing keeps an invariant: the release has none")
    est = gls_estimate(release) if estimate is None else estimate
    return TopDownBaseline(inv, "discrete_gaussian", 1).estimate(est.x, release.t, rng=rng)
