r"""Correlated Gaussian mechanism for linear queries under invariants (Subspace DP full
paper, Sec. 3.4, Alg. 3, Thm 20; the unconstrained version is Alg. 2 = Nikolov, Talwar and
Zhang 2013, Thm 13).

A linear query ``A`` (n x d) answers ``x = A h`` for a histogram ``h``.  With the invariant
``C x = t``, ``Q_N`` (n x (n-r)) an orthonormal null basis and ``A_N = Q_N^T A``:

1. ``E = F B_2``: the minimum-volume enclosing ellipsoid (MVEE) of the symmetric convex hull
   ``K = A_N B_1 = conv(+-a_1, ..., +-a_d)`` of the columns of ``A_N`` (:func:`mvee_symmetric`).
2. Base decomposition (:func:`base_decomposition`): ``u_1..u_m`` the left singular vectors
   of F (``m = n - r``, singular values decreasing); ``U_1`` = the last ``m - floor(m/2)``
   of them, ``V`` = the first ``floor(m/2)``; recurse on ``V^T A_N`` and map back
   (``U_i = V V_i``); a 1-dim space is its own piece.  The pieces are mutually orthogonal
   and together span R^m; there are ``k <= 1 + ceil(log2 m)`` of them.
3. ``r_i = max_j ||U_i^T a_j||_2``, ``w_i ~ N(0, c^2 I_{n_i})``, ``c = c_{eps,delta}``
   (Lemma 13); noise ``z = sqrt(k) sum_i r_i U_i w_i`` and release ``x + Q_N z``.

Privacy: ``Cov(z) = Sigma = k c^2 sum_i r_i^2 U_i U_i^T``, so for every column
``a_j^T Sigma^{-1} a_j = sum_i ||U_i^T a_j||^2 / (k c^2 r_i^2) <= 1/c^2``: in whitened
coordinates the query has l2 sensitivity <= 1 and unit-c Gaussian noise, i.e. the
(eps, delta) Gaussian mechanism of Lemma 13 (for ``relation="add-remove"``, neighbours
``h +- e_j``; ``"replace"`` uses ``r_i = max_{j,l} ||U_i^T (a_j - a_l)||``).  This holds for
any orthogonal decomposition, so the MVEE only affects accuracy (Thm 20: within
``O(log^2(n-r) log(1/delta))`` of optimal).

Likelihood: ``y - x = G w`` with ``G = Q_N [sqrt(k) c r_i U_i]_i`` (orthogonal columns of
norms ``s_j = sqrt(k) c r_{i(j)}``) and ``w ~ N(0, I_m)``.  With the orthonormal
coordinates ``v = (Q_N U)^T (y - x)``:
``log p = -sum_j v_j^2 / (2 s_j^2) - sum_j log s_j - (m/2) log(2 pi)`` on ``x + N``; exact.
``mean_squared_error = tr(Sigma) = k c^2 sum_i r_i^2 n_i``.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from .. import accounting
from .._backend import namespace
from .._rng import as_generator
from .._validation import check_finite_array
from ..guarantees import typed_guarantee
from .base import AdditiveMechanism, check_invariant

__all__ = ["CorrelatedGaussian", "mvee_symmetric", "base_decomposition"]


def mvee_symmetric(points, tol: float = 1e-7, max_iter: int = 100_000, return_weights: bool = False):
    r"""Minimum-volume enclosing ellipsoid of ``conv(+-p_1, ..., +-p_N)`` (centred at 0).

    ``points`` is m x N (columns p_j spanning R^m).  By symmetry the MVEE is centred at the
    origin, and its shape solves the D-optimal design problem
    :math:`\max_u \log\det M(u)`, :math:`M(u) = \sum_j u_j p_j p_j^T`, u in the simplex;
    at the optimum (Kiefer-Wolfowitz) :math:`\max_j g_j = m` with
    :math:`g_j = p_j^T M^{-1} p_j`, and :math:`E = \{z: z^T (mM)^{-1} z \le 1\}`.  We run the
    Frank-Wolfe method with away steps of Wolfe-Atwood / Todd-Yildirim: move weight to
    ``argmax g`` or away from ``argmin_{u_j>0} g`` with the exact line-search step
    :math:`\tau = (g - m)/(m(g-1))` (maximizer of :math:`\log\det((1-\tau)M + \tau pp^T)`),
    until :math:`\max_j g_j \le (1+tol)m` and :math:`\min_{u_j>0} g_j \ge (1-tol)m`.
    The returned F is finally scaled by :math:`\sqrt{\max_j g_j/m}` so that every point is
    inside ``E = F B_2`` exactly.

    Returns ``F`` (m x m, symmetric positive definite) with ``E = {F b : ||b|| <= 1}``, and
    with ``return_weights=True`` also the design weights u (a certificate: u is optimal iff
    ``max_j p_j^T M(u)^{-1} p_j <= m``, the Kiefer-Wolfowitz equivalence theorem).
    """
    P = check_finite_array(points, "points", ndim=2)
    m, N = P.shape
    if np.linalg.matrix_rank(P) < m:
        raise ValueError(f"the points span a space of dimension {np.linalg.matrix_rank(P)} < {m}: "
                         "the query restricted to the null space must have full row rank")
    u = np.full(N, 1.0 / N)
    for _ in range(max_iter):
        M = (P * u) @ P.T
        L = np.linalg.cholesky(M)
        Y = np.linalg.solve(L, P)
        g = np.sum(Y * Y, axis=0)
        jp = int(np.argmax(g))
        pos = np.flatnonzero(u > 0)
        jm = pos[int(np.argmin(g[pos]))]
        eps_plus = g[jp] / m - 1.0
        eps_minus = 1.0 - g[jm] / m
        if eps_plus <= tol and eps_minus <= tol:
            break
        if eps_plus >= eps_minus:
            j, kappa = jp, g[jp]
            tau = (kappa - m) / (m * (kappa - 1.0))
        else:
            j, kappa = jm, g[jm]
            tau = (kappa - m) / (m * (kappa - 1.0)) if kappa > 1.0 else -np.inf
            tau = max(tau, -u[j] / (1.0 - u[j]))  # keep u_j >= 0
        u = (1.0 - tau) * u
        u[j] += tau
        u = np.maximum(u, 0.0)
        u /= u.sum()
    M = (P * u) @ P.T
    lam, W = np.linalg.eigh(M)
    g = np.sum(P * np.linalg.solve(M, P), axis=0)
    scale = max(1.0, float(np.max(g)) / m)
    F = (W * np.sqrt(m * scale * lam)) @ W.T
    return (F, u) if return_weights else F


def base_decomposition(AN) -> list[np.ndarray]:
    r"""Orthogonal pieces ``U_1, ..., U_k`` of R^m for the query ``A_N`` (m x d, rank m).

    Alg. 3 lines 3-11 (the paper's "if d = 1" is the base case of a one-dimensional space,
    ``m = 1``).  Each ``U_i`` is m x n_i with orthonormal columns; the columns of all pieces
    together form an orthonormal basis of R^m.
    """
    A = np.asarray(AN, dtype=float)
    m = A.shape[0]
    if m == 1:
        return [np.ones((1, 1))]
    F = mvee_symmetric(A)
    Uf, sv, _ = np.linalg.svd(F)
    order = np.argsort(-sv, kind="stable")
    Uf = Uf[:, order]
    half = m // 2
    V = Uf[:, :half]
    U1 = Uf[:, half:]
    rest = base_decomposition(V.T @ A)
    return [U1] + [V @ Vi for Vi in rest]


class CorrelatedGaussian(AdditiveMechanism):
    r"""Subspace Gaussian noise mechanism for linear queries (Alg. 3; module docstring).

    ``CorrelatedGaussian(query, invariant, epsilon, delta, relation="add-remove")``.
    ``release(x)`` takes the true answers ``x = A h`` (use :meth:`answer`), keeps
    ``C y = C x`` exactly and is (eps, delta)-induced subspace DP.
    ``mean_squared_error`` is the exact expected squared error; ``extended_gaussian_error``
    is that of the extended Gaussian mechanism (Cor. 15) for comparison.
    """

    def __init__(self, query, invariant, epsilon, delta, *, relation="add-remove"):
        inv = check_invariant(invariant)
        if sp.issparse(query):
            query = query.toarray()
        A = check_finite_array(query, "query", ndim=2)
        if A.shape[0] != inv.n:
            raise ValueError(f"query must have {inv.n} rows (the invariant's n), got shape {A.shape}")
        if relation not in ("add-remove", "replace"):
            raise ValueError(f"relation must be 'add-remove' or 'replace', got {relation!r}")
        self._inv = inv
        self.query = A
        self.relation = relation
        self.epsilon, self.delta = float(epsilon), float(delta)
        self.c = accounting.gaussian_constant(epsilon, delta)
        Q = inv.null_basis()
        AN = Q.T @ A
        if np.linalg.matrix_rank(AN) < AN.shape[0]:
            raise ValueError(
                f"Q_N^T A has rank {np.linalg.matrix_rank(AN)} < n - r = {AN.shape[0]}: the query does not "
                "reach every null-space direction (Alg. 3 needs A_N of full row rank)"
            )
        pieces = base_decomposition(AN)
        self.pieces = pieces
        self.k = len(pieces)
        radii = []
        for U in pieces:
            proj = U.T @ AN  # (n_i, d)
            if relation == "add-remove":
                radii.append(float(np.max(np.linalg.norm(proj, axis=0))))
            else:
                best = 0.0
                for j in range(proj.shape[1] - 1):
                    best = max(best, float(np.max(np.linalg.norm(proj[:, j + 1 :] - proj[:, [j]], axis=0))))
                radii.append(best)
        self.radii = np.array(radii)
        U_all = np.hstack(pieces)  # m x m orthogonal
        sd = np.concatenate([np.full(U.shape[1], np.sqrt(self.k) * self.c * r) for U, r in zip(pieces, radii)])
        if np.any(sd <= 0):
            raise ValueError("a piece of the decomposition has zero sensitivity")
        self._basis = Q @ U_all  # n x m orthonormal coordinates of the noise
        self._sd = sd
        self._AN = AN

    @property
    def invariant(self):
        return self._inv

    @property
    def n(self):
        return self._inv.n

    @property
    def dim(self):
        return self._inv.null_dim

    def answer(self, h):
        """True query answers ``A h`` (``h``: histogram of length d, or a stack)."""
        H = check_finite_array(h, "h")
        if H.shape[-1] != self.query.shape[1]:
            raise ValueError(f"h must have last axis {self.query.shape[1]}, got {H.shape}")
        return H @ self.query.T

    @property
    def covariance(self) -> np.ndarray:
        """``Q_N Sigma Q_N^T`` (n x n)."""
        return (self._basis * self._sd**2) @ self._basis.T

    @property
    def null_covariance(self) -> np.ndarray:
        """``Sigma`` in the coordinates ``Q_N`` ((n-r) x (n-r))."""
        U_all = np.hstack(self.pieces)
        return (U_all * self._sd**2) @ U_all.T

    @property
    def mean_squared_error(self) -> float:
        """``tr Sigma = k c^2 sum_i r_i^2 n_i``."""
        return float(np.sum(self._sd**2))

    @property
    def extended_gaussian_error(self) -> float:
        """Error ``(n - r) c^2 Delta_2(Q_N^T A)^2`` of the extended Gaussian mechanism (Cor. 15)."""
        cols = self._AN.T
        if self.relation == "add-remove":
            d2 = float(np.max(np.linalg.norm(cols, axis=1)))
        else:
            d2 = max(float(np.max(np.linalg.norm(cols[j + 1 :] - cols[j], axis=1)))
                     for j in range(cols.shape[0] - 1))
        return self.dim * self.c**2 * d2**2

    @property
    def guarantee(self):
        return typed_guarantee(
            "approx", "(eps, delta)-induced subspace DP",
            {"epsilon": self.epsilon, "delta": self.delta, "pieces": self.k,
             "mean_squared_error": self.mean_squared_error},
            f"linear query on a histogram, neighbours {self.relation}; invariant C x = t kept exactly",
            "Gao, Gong and Yu, Subspace DP (full paper), Alg. 3, Thm 20; Nikolov, Talwar and Zhang 2013",
        )

    def sample_noise(self, size=(), rng=None):
        rng = as_generator(rng)
        w = rng.standard_normal(tuple(size) + (self.dim,))
        return (w * self._sd) @ self._basis.T

    def _log_density(self, e, xp):
        """Gaussian log density of ``e`` in the basis coordinates (on the support)."""
        v = xp.dot(e, self._basis)
        return (-0.5 * xp.sum((v / self._sd) ** 2, axis=-1) - float(np.sum(np.log(self._sd)))
                - 0.5 * self.dim * np.log(2 * np.pi))

    def noise_logp(self, e):
        xp = namespace(e)
        if xp is np:
            e = np.asarray(e, dtype=float)
            ok = self.noise_in_support(e)
            return self.where_in_support(ok, self._log_density(np.where(np.isfinite(e), e, 0.0), np))
        return self._log_density(e, xp)

    def logp(self, y, x):
        """Exact log density w.r.t. (n-r)-dim Lebesgue measure on ``x + N`` (NumPy: -inf where
        :meth:`in_support` is false, the tolerance relative to the scale of x and y)."""
        xp = namespace(y, x)
        if xp is np:
            y = np.asarray(y, dtype=float)
            x = np.asarray(x, dtype=float)
            ok = self.in_support(y, x)
            e = y - x
            return self.where_in_support(ok, self._log_density(np.where(np.isfinite(e), e, 0.0), np))
        return self._log_density(y - x, xp)
