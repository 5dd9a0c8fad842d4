r"""The common mechanism: zero-waste adaptive choice between linear Gaussian mechanisms.

Xiao, Wang, Zhang and Kifer, *Answering Private Linear Queries Adaptively using the Common
Mechanism* (PVLDB).  All mechanisms here are :class:`~privinfer.mechanisms.LinearGaussian`,
:math:`M(x) = Bx + N(0, \Sigma)`, with privacy cost matrix :math:`K = B^T\Sigma^{-1}B`.

Workflow (Sec. 3.4)
-------------------
1. ``Mc = common_mechanism(M1, M2, ...)`` -- a *maximally common* mechanism: answerable from
   every ``Mi`` (Def. 3.7) and not answerable-dominated by any other common mechanism (Def. 3.9).
2. ``Ri = residual(Mi, Mc)`` -- the extra information: ``(Mc, Ri)`` is equivalent to ``Mi``
   (same cost matrix, Lemma 3.11), so running both costs exactly what ``Mi`` costs.
3. Release ``w = Mc.release(x)``; decide (e.g. :func:`snr_bounds`, Sec. 6.2) which ``Mi``
   to complete -- a post-processing of ``w``, so the decision costs no privacy;
4. release ``wi = Ri.release(x)`` and ``recreate(w, wi, Mi, Mc, Ri)`` -- a draw with exactly
   the law of ``Mi(x)`` (Thm. 5.5 plus the independent top-up noise it names).

:class:`NestedSelection` runs the sequential version over several nested analyses
(Sec. 7.5.3: Total / Age4 / Age9 / Age23 sex-by-age histograms).

Answerability in one line (Thm. 3.5): ``Mb`` is answerable from ``Ma`` iff
:math:`K_b \preceq K_a` (Loewner order).  Everything below is linear algebra on cost matrices.

Numerical conventions: a symmetric PSD matrix's rank is the number of eigenvalues above
``rtol * (largest eigenvalue)``; Loewner comparisons allow ``-rtol * scale`` of rounding.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy import linalg

from ._rng import as_generator
from ._validation import check_finite_array, check_positive
from .mechanisms.linear_gaussian import LinearGaussian

__all__ = [
    "answerable",
    "equivalent",
    "answer_map",
    "standardize",
    "intersect_row_spaces",
    "stott_bound",
    "min_trace_upper_bound",
    "common_mechanism",
    "residual",
    "recreate",
    "recreation_map",
    "estimate",
    "query_noise_variance",
    "SNRBounds",
    "snr_bounds",
    "prefers_secondary",
    "NestedSelection",
    "SelectionResult",
    "bucket_matrix",
    "DHC_AGE_EDGES",
]

#: Default relative tolerance for ranks and Loewner comparisons of cost matrices.
RTOL = 1e-10


# ---------------------------------------------------------------------------------------
# small linear-algebra helpers
# ---------------------------------------------------------------------------------------
def _check_mechanism(M, name: str = "mechanism") -> LinearGaussian:
    if not isinstance(M, LinearGaussian):
        raise TypeError(f"{name} must be a LinearGaussian mechanism, not {type(M).__name__}")
    return M


def _same_n(*Ms: LinearGaussian) -> int:
    ns = [M.n for M in Ms]
    if len(set(ns)) != 1:
        raise ValueError(f"mechanisms act on data vectors of different lengths: {ns}")
    return ns[0]


def _sym(A: np.ndarray) -> np.ndarray:
    return 0.5 * (A + A.T)


def _psd_eig(K: np.ndarray, rtol: float):
    """Eigen-decomposition of a symmetric PSD matrix; returns (positive eigenvalues descending,
    their eigenvectors as columns, scale) with eigenvalues <= rtol * scale treated as zero."""
    w, V = np.linalg.eigh(_sym(K))
    scale = max(float(np.max(np.abs(w))) if w.size else 0.0, 0.0)
    keep = w > rtol * scale if scale > 0 else np.zeros(w.shape, bool)
    w, V = w[keep][::-1], V[:, keep][:, ::-1]
    return w, V, scale


def _pinv_psd(K: np.ndarray, rtol: float = RTOL) -> np.ndarray:
    w, V, _ = _psd_eig(K, rtol)
    return (V / w) @ V.T


def _sqrt_psd(S: np.ndarray) -> np.ndarray:
    """Symmetric square root of a symmetric PSD matrix (negative rounding clipped)."""
    w, V = np.linalg.eigh(_sym(S))
    return (V * np.sqrt(np.clip(w, 0.0, None))) @ V.T


def _inv_sqrt_pd(S: np.ndarray) -> np.ndarray:
    w, V = np.linalg.eigh(_sym(S))
    return (V / np.sqrt(w)) @ V.T


def _psd_scale(K: np.ndarray) -> float:
    """Scale of a PSD matrix: its largest diagonal entry (bounds every entry; within a factor
    n of the spectral norm) -- cheap, unlike an SVD-based norm."""
    return float(np.max(np.diag(K))) if K.size else 0.0


def _min_eig_relative(D: np.ndarray, scale: float) -> float:
    if D.size == 0 or scale == 0:
        return 0.0
    return float(np.linalg.eigvalsh(_sym(D))[0]) / scale


# ---------------------------------------------------------------------------------------
# answerability and equivalence (Sec. 3.1)
# ---------------------------------------------------------------------------------------
def answerable(source: LinearGaussian, target: LinearGaussian, *, rtol: float = 1e-9) -> bool:
    r"""Is ``target`` answerable from ``source`` (Def. 3.1)?  Theorem 3.5: iff
    :math:`K_{target} \preceq K_{source}`, i.e. :math:`K_{source} - K_{target}` is PSD.

    (Paper letters: ``answerable(Ma, Mb)`` asks whether ``Mb`` can be simulated from ``Ma``'s
    output by a linear map plus independent noise.)  Rounding of ``rtol`` times the larger
    cost-matrix norm is tolerated.
    """
    _check_mechanism(source, "source")
    _check_mechanism(target, "target")
    _same_n(source, target)
    Ks, Kt = source.cost_matrix, target.cost_matrix
    scale = max(_psd_scale(Ks), _psd_scale(Kt))
    return _min_eig_relative(Ks - Kt, scale) >= -rtol


def equivalent(Ma: LinearGaussian, Mb: LinearGaussian, *, rtol: float = 1e-9) -> bool:
    r"""Def. 3.6: ``Ma`` and ``Mb`` are each answerable from the other, i.e. they have the same
    privacy cost matrix (hence identical privacy under every post-processing invariant
    definition and the same information).  Entrywise tolerance ``rtol`` times the larger norm."""
    _check_mechanism(Ma, "Ma")
    _check_mechanism(Mb, "Mb")
    _same_n(Ma, Mb)
    Ka, Kb = Ma.cost_matrix, Mb.cost_matrix
    scale = max(_psd_scale(Ka), _psd_scale(Kb))
    if scale == 0:
        return True
    return bool(np.max(np.abs(Ka - Kb)) <= rtol * scale)


def answer_map(source: LinearGaussian, target: LinearGaussian, *, rtol: float = 1e-9):
    r"""Matrices ``(A, C)`` with ``target(x)`` equal in law to ``A source(x) + C N(0, I)``.

    Constructive half of Theorem 3.5 (appendix proof, Lemma 3.2).  With symmetric roots
    :math:`W_s = \Sigma_s^{-1/2}B_s`, :math:`W_t = \Sigma_t^{-1/2}B_t` and
    :math:`K_s = W_s^TW_s`:

    .. math:: A = \Sigma_t^{1/2}\, W_t K_s^{\dagger} W_s^T\, \Sigma_s^{-1/2},\qquad
              C = \Sigma_t^{1/2}\,(I - W_t K_s^{\dagger} W_t^T)^{1/2}.

    Mean: :math:`AB_s = \Sigma_t^{1/2}W_t K_s^\dagger K_s = B_t` because the rows of
    :math:`W_t` lie in range(:math:`K_s`) when :math:`K_t \preceq K_s`.  Covariance:
    :math:`A\Sigma_sA^T + CC^T = \Sigma_t^{1/2}(W_tK_s^\dagger W_t^T + I - W_tK_s^\dagger W_t^T)\Sigma_t^{1/2} = \Sigma_t`.
    :math:`I - W_tK_s^\dagger W_t^T \succeq 0` is exactly :math:`K_t \preceq K_s`.  When the two
    are equivalent, :math:`W_tK_s^\dagger W_t^T` is the orthogonal projector onto range
    (:math:`W_t`), ``A`` coincides with Algorithm 4's :math:`\Sigma_t^{1/2}(B_t^T\Sigma_t^{-1/2})^\dagger B_s^T\Sigma_s^{-1}`
    and ``C`` is nonzero only if ``B_t`` has linearly dependent rows (Remark 3.4).

    Raises ``ValueError`` if ``target`` is not answerable from ``source``.
    """
    if not answerable(source, target, rtol=rtol):
        raise ValueError("target is not answerable from source: K_source - K_target is not PSD (Theorem 3.5)")
    mt = target.m
    if mt == 0:
        return np.zeros((0, source.m)), np.zeros((0, 0))
    St_half = _sqrt_psd(target.Sigma)
    Wt = _inv_sqrt_pd(target.Sigma) @ target.B
    Ks_pinv = _pinv_psd(source.cost_matrix, RTOL)
    if source.m:
        Ws_t = (_inv_sqrt_pd(source.Sigma) @ source.B).T  # n x m_s
        A = St_half @ Wt @ Ks_pinv @ Ws_t @ _inv_sqrt_pd(source.Sigma)
    else:
        A = np.zeros((mt, 0))
    R = np.eye(mt) - Wt @ Ks_pinv @ Wt.T
    # eigenvalues of R lie in [0, 1]; rounding-level ones (< 1e-12) are exact zeros, whose
    # square roots would otherwise inject ~1e-8 spurious noise (changes Cov by <= 1e-12 Sigma)
    wR, VR = np.linalg.eigh(_sym(R))
    wR = np.where(wR < 1e-12, 0.0, np.minimum(wR, 1.0))
    C = St_half @ ((VR * np.sqrt(wR)) @ VR.T)
    return A, C


def standardize(M: LinearGaussian, *, rtol: float = RTOL) -> LinearGaussian:
    r"""Algorithm 2: the equivalent mechanism with identity covariance and linearly independent
    query rows :math:`B = [\sqrt{\lambda_1}v_1, \dots, \sqrt{\lambda_k}v_k]^T`, where
    :math:`K = \sum_j \lambda_j v_jv_j^T` (positive eigenvalues, descending).  Lemma 5.1:
    :math:`B^TB = K`, so it is equivalent to ``M``."""
    _check_mechanism(M)
    w, V, _ = _psd_eig(M.cost_matrix, rtol)
    return LinearGaussian((V * np.sqrt(w)).T.reshape(len(w), M.n), np.eye(len(w)))


def _range_basis(K: np.ndarray, rtol: float) -> np.ndarray:
    return _psd_eig(K, rtol)[1]


def intersect_row_spaces(*mechanisms: LinearGaussian, rtol: float = RTOL, angle_tol: float = 1e-8) -> np.ndarray:
    r"""Orthonormal basis (columns, ``n x s``) of :math:`\bigcap_i \mathrm{rowspace}(B_i)`.

    rowspace(:math:`B_i`) = range(:math:`K_i`) because :math:`\Sigma_i` is nonsingular.  Two
    subspaces with orthonormal bases U, V meet in :math:`\{Ua : (I - VV^T)Ua = 0\}`: the right
    singular vectors of :math:`(I - VV^T)U` with singular value (sine of a principal angle)
    below ``angle_tol``.  Applied left to right.
    """
    if not mechanisms:
        raise ValueError("need at least one mechanism")
    for M in mechanisms:
        _check_mechanism(M)
    _same_n(*mechanisms)
    U = _range_basis(mechanisms[0].cost_matrix, rtol)
    for M in mechanisms[1:]:
        if U.shape[1] == 0:
            break
        V = _range_basis(M.cost_matrix, rtol)
        D = U - V @ (V.T @ U)
        _, s, Zt = np.linalg.svd(D, full_matrices=True)
        s_full = np.zeros(U.shape[1])
        s_full[: len(s)] = s
        U = U @ Zt[s_full < angle_tol].T
        # re-orthonormalize to stop rounding from accumulating
        if U.shape[1]:
            U, _ = np.linalg.qr(U)
    return U


# ---------------------------------------------------------------------------------------
# the optimization of Theorem 5.3: min trace(Sigma) s.t. Sigma >= P_i
# ---------------------------------------------------------------------------------------
def stott_bound(P1: np.ndarray, P2: np.ndarray) -> np.ndarray:
    r"""Theorem 5.4 (Stott): the trace-minimal Loewner upper bound of two PSD matrices,
    :math:`\tfrac12(P_1 + P_2) + \tfrac12|P_2 - P_1| = P_1 + (P_2 - P_1)_+`.

    Why it is optimal: with :math:`D = P_2 - P_1 = D_+ - D_-` and :math:`\Pi_+` the projector
    on :math:`D`'s positive eigenspace, any :math:`X \succeq P_1, P_2` has
    :math:`\mathrm{tr}(X - P_1) \ge \mathrm{tr}(\Pi_+(X - P_1)) \ge \mathrm{tr}(\Pi_+ D) = \mathrm{tr} D_+`,
    and :math:`P_1 + D_+` attains it while dominating both.
    """
    P1 = _sym(np.asarray(P1, float))
    P2 = _sym(np.asarray(P2, float))
    w, V = np.linalg.eigh(_sym(P2 - P1))
    return _sym(0.5 * (P1 + P2) + 0.5 * (V * np.abs(w)) @ V.T)


def _hkm_operator(Sinv, Y, iu):
    r"""Matrix of :math:`\Delta X \mapsto \sum_i \mathrm{sym}(S_i^{-1}\Delta X Y_i)` in the
    coordinates :math:`\Delta X = \sum_{a \le b} c_{ab}F_{ab}` (:math:`F_{ab} = e_ae_b^T + e_be_a^T`
    for a < b, :math:`e_ae_a^T`), tested against the same :math:`F`:
    :math:`\mathrm{tr}(F_{ab}AF_{cd}B) = \tfrac{w_{ab}w_{cd}}{4}(A_{bc}B_{da} + A_{bd}B_{ca} + A_{ac}B_{db} + A_{ad}B_{cb})`
    with :math:`w = 1` on the diagonal and 2 off it.  Symmetric positive definite."""
    a, b = iu
    w = np.where(a == b, 1.0, 2.0)
    H = np.zeros((len(a), len(a)))
    for A, B in zip(Sinv, Y):
        H += (A[np.ix_(b, a)] * B[np.ix_(b, a)].T + A[np.ix_(b, b)] * B[np.ix_(a, a)].T
              + A[np.ix_(a, a)] * B[np.ix_(b, b)].T + A[np.ix_(a, b)] * B[np.ix_(a, b)].T)
    H *= np.outer(w, w) / 4.0
    return 0.5 * (H + H.T), w


def _solve_spd(H, rhs):
    """Solve an SPD system with Jacobi scaling (Cholesky; eigen-solve with cutoff as fallback)."""
    d = np.sqrt(np.abs(np.diag(H)))
    d[d == 0] = 1.0
    Ht = H / d[:, None] / d[None, :]
    rt = rhs / d
    try:
        y = linalg.cho_solve(linalg.cho_factor(Ht, lower=True), rt)
    except (linalg.LinAlgError, ValueError):
        ev, EV = np.linalg.eigh(Ht)
        keep = ev > 1e-15 * ev[-1]
        y = EV[:, keep] @ ((EV[:, keep].T @ rt) / ev[keep])
    return y / d


def _max_step(Lchols, Ds) -> float:
    """Largest alpha with L_i L_i^T + alpha D_i positive definite for all i (inf if unbounded)."""
    amax = np.inf
    for Lc, D in zip(Lchols, Ds):
        M = linalg.solve_triangular(Lc, linalg.solve_triangular(Lc, D, lower=True).T, lower=True)
        nu = np.linalg.eigvalsh(_sym(M))[0]
        if nu < 0:
            amax = min(amax, -1.0 / nu)
    return amax


@dataclass(frozen=True)
class SDPInfo:
    """Diagnostics of :func:`min_trace_upper_bound`: certified duality gap (absolute, in the
    problem's units), the dual lower bound it rests on, and interior-point iterations."""

    gap: float
    lower_bound: float
    iterations: int


def min_trace_upper_bound(Ps, *, tol: float = 1e-11, max_iter: int = 100, return_info: bool = False):
    r"""Solve :math:`\min_X \mathrm{tr}\,X` s.t. :math:`X \succeq P_i`, ``i = 1..k`` (Eq. 1 of
    Theorem 5.3 with one constraint per mechanism), for symmetric PSD ``s x s`` matrices ``P_i``.

    Method: primal-dual interior point (HKM direction with Mehrotra's predictor-corrector,
    as in SDPT3; Todd 2001, Acta Numerica), specialized to this problem.  Dual:
    :math:`\max \sum_i \mathrm{tr}(Y_iP_i)` s.t. :math:`\sum_i Y_i = I`, :math:`Y_i \succeq 0`;
    optimality: :math:`S_i = X - P_i \succeq 0`, :math:`S_iY_i = 0`.  Start from the strictly
    feasible pair :math:`X = \sum_i P_i + I`, :math:`Y_i = I/k`.  Linearizing
    :math:`S_iY_i = \sigma\mu I` and symmetrizing gives
    :math:`\Delta Y_i = \mathrm{sym}(\sigma\mu S_i^{-1} - Y_i - S_i^{-1}\Delta X\,Y_i)`; inserting it
    in :math:`\sum_i \Delta Y_i = I - \sum_i Y_i` leaves one symmetric positive definite system
    :math:`\sum_i \mathrm{sym}(S_i^{-1}\Delta X\,Y_i) = \mathrm{rhs}` in the ``s(s+1)/2`` entries of
    :math:`\Delta X` (solved densely with Jacobi scaling).  Step lengths are 0.95 of the exact
    distance to the boundary (generalized eigenvalues), so :math:`X \succ P_i` and
    :math:`Y_i \succ 0` strictly at every iterate: the answerability constraints hold exactly.

    Certificate: with :math:`T = (\sum_i Y_i)^{-1/2}` the matrices :math:`TY_iT` are exactly dual
    feasible, so :math:`\sum_i\mathrm{tr}(TY_iTP_i) \le` optimum :math:`\le \mathrm{tr}X`; the
    returned gap (``return_info=True``) proves near-optimality.  Iteration stops once the gap
    is below ``tol`` times the problem scale (the largest eigenvalue among the ``P_i``), or
    when rounding stops progress (the best certified iterate is returned).  The optimal value
    is well determined; the optimal ``X`` may converge more slowly (like the square root of the
    gap) where strict complementarity fails.

    For two matrices use :func:`stott_bound` (closed form).  Cost per iteration
    :math:`O(s^6)`: fine for the tens of dimensions of marginal/bucketization problems.
    """
    Ps = [_sym(check_finite_array(P, "P", ndim=2)) for P in Ps]
    if not Ps:
        raise ValueError("need at least one matrix")
    s = Ps[0].shape[0]
    if any(P.shape != (s, s) for P in Ps):
        raise ValueError(f"all constraint matrices must be square of the same size, got {[P.shape for P in Ps]}")
    k = len(Ps)
    if s == 0:
        X = np.zeros((0, 0))
        return (X, SDPInfo(0.0, 0.0, 0)) if return_info else X
    scale = max(float(np.linalg.eigvalsh(P)[-1]) for P in Ps)
    if scale <= 0:
        X = np.zeros((s, s))
        return (X, SDPInfo(0.0, 0.0, 0)) if return_info else X
    if k == 1:
        X = Ps[0].copy()
        return (X, SDPInfo(0.0, float(np.trace(X)), 0)) if return_info else X
    P = [Pi / scale for Pi in Ps]
    eye = np.eye(s)
    iu = np.triu_indices(s)
    a_idx, b_idx = iu
    X = sum(P) + eye  # strictly feasible: X - P_j = sum_{i != j} P_i + I
    Y = [eye / k for _ in range(k)]  # strictly dual feasible: sum_i Y_i = I
    iters = stall = 0
    best = (np.inf, -np.inf, X)
    for _ in range(max_iter):
        S = [_sym(X - Pi) for Pi in P]
        try:
            Ls = [np.linalg.cholesky(Si) for Si in S]
            LYs = [np.linalg.cholesky(Yi) for Yi in Y]
        except np.linalg.LinAlgError:
            break
        # certificate: normalize Y to exact dual feasibility, sum_i Y_i = I
        Tn = _inv_sqrt_pd(sum(Y))
        lower = float(sum(np.sum((Tn @ Yi @ Tn) * Pi) for Yi, Pi in zip(Y, P)))
        gap = float(np.trace(X)) - lower
        if gap < best[0]:
            stall = stall + 1 if gap > 0.5 * best[0] else 0
            best = (gap, lower, X.copy())
        else:
            stall += 1
        if gap <= tol or stall >= 4:  # converged, or rounding stopped progress
            break
        iters += 1
        mu = sum(float(np.sum(Si * Yi)) for Si, Yi in zip(S, Y)) / (k * s)
        Sinv = [linalg.cho_solve((Lc, True), eye) for Lc in Ls]
        H, w = _hkm_operator(Sinv, Y, iu)
        rd = eye - sum(Y)

        def direction(sigma_mu, dX_aff=None, dY_aff=None):
            # Delta Y_i = sym(sigma mu S_i^{-1} - Y_i - S_i^{-1} dX Y_i - S_i^{-1} dX_aff dY_aff_i)
            rhs_m = sum(sigma_mu * Si_ - Yi for Si_, Yi in zip(Sinv, Y)) - rd
            if dX_aff is not None:
                rhs_m = rhs_m - sum(_sym(Si_ @ dX_aff @ dYa) for Si_, dYa in zip(Sinv, dY_aff))
            rhs_m = _sym(rhs_m)
            c = _solve_spd(H, w * rhs_m[a_idx, b_idx])
            dX = np.zeros((s, s))
            dX[a_idx, b_idx] = c
            dX[b_idx, a_idx] = c
            dY = []
            for i, (Si_, Yi) in enumerate(zip(Sinv, Y)):
                M = sigma_mu * Si_ - Yi - Si_ @ dX @ Yi
                if dX_aff is not None:
                    M = M - Si_ @ dX_aff @ dY_aff[i]
                dY.append(_sym(M))
            return dX, dY

        def steps(dX, dY):
            ap = min(1.0, 0.95 * _max_step(Ls, [dX] * k))
            ad = min(1.0, 0.95 * _max_step(LYs, dY))
            return ap, ad

        # Mehrotra predictor-corrector
        dXa, dYa = direction(0.0)
        ap, ad = steps(dXa, dYa)
        mu_aff = sum(float(np.sum((Si + ap * dXa) * (Yi + ad * dYi))) for Si, Yi, dYi in zip(S, Y, dYa)) / (k * s)
        sigma = min(1.0, max(0.0, mu_aff / mu) ** 3)
        dX, dY = direction(sigma * mu, dXa, dYa)
        ap, ad = steps(dX, dY)
        X = _sym(X + ap * dX)
        Y = [_sym(Yi + ad * dYi) for Yi, dYi in zip(Y, dY)]
    gap, lower, X = best
    X = X * scale
    info = SDPInfo(gap=gap * scale, lower_bound=lower * scale, iterations=iters)
    return (X, info) if return_info else X


# ---------------------------------------------------------------------------------------
# common, residual, recreate (Sec. 5)
# ---------------------------------------------------------------------------------------
def common_mechanism(
    *mechanisms: LinearGaussian,
    method: str = "auto",
    basis=None,
    rtol: float = RTOL,
    tol: float = 1e-11,
) -> LinearGaussian:
    r"""A maximally common mechanism of ``mechanisms`` (Def. 3.9; Algorithm 1 and Thm. 5.3).

    Steps: (1) standardize (Alg. 2; only cost matrices matter, Lemma 5.1); (2) the query
    matrix :math:`B_*` spans :math:`\bigcap_i \mathrm{rowspace}(B_i)` (Thm. 5.2); by default its
    rows are an orthonormal basis (so the trace objective below is basis-free up to rotation);
    pass ``basis`` (``s x n``, independent rows spanning the intersection) to choose your own,
    e.g. the rows of the coarsest histogram; (3) the covariance minimizes
    :math:`\mathrm{tr}\,\Sigma` subject to :math:`\Sigma \succeq P_i` for every mechanism, where

    .. math:: P_i = A_iA_i^T = B_*B_i^\dagger(B_i^\dagger)^TB_*^T = B_*K_i^\dagger B_*^T

    (standardized :math:`B_i`, :math:`A_i = B_*B_i^\dagger`; in words, :math:`P_i` is the
    covariance of the best linear unbiased estimate of :math:`B_*x` from :math:`M_i`, and
    :math:`\Sigma \succeq P_i` is answerability from :math:`M_i`, Lemma 3.2).  Two mechanisms:
    Stott's closed form (Thm. 5.4, :func:`stott_bound`); three or more: the semidefinite
    program, solved by :func:`min_trace_upper_bound` (no external solver).

    ``method``: ``"auto"`` (closed form for two, SDP otherwise), ``"closed_form"`` (two
    only) or ``"sdp"``.  Returns ``LinearGaussian(B_*, Sigma_*)``; if the row spaces meet only
    in 0 the result releases nothing (``m == 0``).  The answer is unique up to equivalence
    for a given ``basis`` whenever the trace minimizer is unique; compare cost matrices,
    not query matrices.
    """
    if not mechanisms:
        raise ValueError("common_mechanism needs at least one mechanism")
    for i, M in enumerate(mechanisms):
        _check_mechanism(M, f"mechanism {i}")
    n = _same_n(*mechanisms)
    if method not in ("auto", "closed_form", "sdp"):
        raise ValueError(f"method must be 'auto', 'closed_form' or 'sdp', not {method!r}")
    if method == "closed_form" and len(mechanisms) != 2:
        raise ValueError("the closed form (Theorem 5.4) is for exactly two mechanisms; use method='sdp'")
    Q = intersect_row_spaces(*mechanisms, rtol=rtol)
    s = Q.shape[1]
    if basis is None:
        Bstar = Q.T.copy()
    else:
        Bstar = check_finite_array(basis, "basis")
        if Bstar.ndim == 1:
            Bstar = Bstar[None, :]
        if Bstar.ndim != 2 or Bstar.shape[1] != n:
            raise ValueError(f"basis must have shape (s, {n}), got {Bstar.shape}")
        if Bstar.shape[0] != s or np.linalg.matrix_rank(Bstar) != s:
            raise ValueError(
                f"basis must have {s} linearly independent rows (the dimension of the intersection of the row spaces)"
            )
        off = Bstar - (Bstar @ Q) @ Q.T
        if np.linalg.norm(off) > 1e-8 * max(np.linalg.norm(Bstar), 1.0):
            raise ValueError("basis rows must lie in the intersection of the mechanisms' row spaces")
    if s == 0:
        return LinearGaussian(np.zeros((0, n)), np.zeros((0, 0)))
    Ps = [_sym(Bstar @ _pinv_psd(M.cost_matrix, rtol) @ Bstar.T) for M in mechanisms]
    if len(Ps) == 2 and method in ("auto", "closed_form"):
        Sigma = stott_bound(*Ps)
    else:
        Sigma, info = min_trace_upper_bound(Ps, tol=tol, return_info=True)
        if info.gap > 1e-7 * max(abs(info.lower_bound), 1e-300):
            raise RuntimeError(
                f"the semidefinite program of Theorem 5.3 was not solved accurately (certified relative "
                f"duality gap {info.gap / max(abs(info.lower_bound), 1e-300):.1e}); the problem is badly conditioned"
            )
    return LinearGaussian(Bstar, _sym(Sigma))


def residual(M: LinearGaussian, M_common: LinearGaussian, *, rtol: float = 1e-9, rank_rtol: float = 1e-12) -> LinearGaussian:
    r"""Algorithm 3: the residual mechanism :math:`M'` with :math:`(M_*, M')` equivalent to ``M``.

    :math:`X = K_M - K_*` is PSD because :math:`M_*` is answerable from ``M`` (Thm. 3.5);
    :math:`B' = [\sqrt{\lambda_j}v_j]^T` over its positive eigenpairs and :math:`\Sigma' = I`,
    so :math:`K_* + B'^TB' = K_M` (Lemma 3.11).  Eigenvalues in ``[-rtol, rank_rtol]`` times
    the scale are rounding and dropped; a more negative one raises ``ValueError``.  The
    residual may release nothing (``m == 0``) when ``M_common`` is already equivalent to ``M``.
    """
    _check_mechanism(M, "M")
    _check_mechanism(M_common, "M_common")
    n = _same_n(M, M_common)
    X = _sym(M.cost_matrix - M_common.cost_matrix)
    scale = max(_psd_scale(M.cost_matrix), _psd_scale(M_common.cost_matrix))
    if scale == 0:
        return LinearGaussian(np.zeros((0, n)), np.zeros((0, 0)))
    w, V = np.linalg.eigh(X)
    if w[0] < -rtol * scale:
        raise ValueError(
            "M_common is not answerable from M (K_M - K_common has a negative eigenvalue, Theorem 3.5); "
            "it is not a common mechanism of M"
        )
    keep = w > rank_rtol * scale
    w, V = w[keep][::-1], V[:, keep][:, ::-1]
    return LinearGaussian((V * np.sqrt(w)).T.reshape(len(w), n), np.eye(len(w)))


def recreate(omega_common, omega_residual, target: LinearGaussian, common: LinearGaussian,
             residual_mechanism: LinearGaussian, *, rng=None, rtol: float = 1e-9):
    r"""Algorithm 4 plus Theorem 5.5: turn ``(omega_common, omega_residual)`` into a draw from
    ``target(x)``.

    With :math:`A_* = \Sigma^{1/2}(B^T\Sigma^{-1/2})^\dagger B_*^T\Sigma_*^{-1}` and
    :math:`A' = \Sigma^{1/2}(B^T\Sigma^{-1/2})^\dagger B'^T\Sigma'^{-1}` (target ``B, Sigma``),
    Theorem 5.5 gives :math:`M(x) \overset{d}{=} A_*M_*(x) + A'M'(x) + N(0, \Sigma - A_*\Sigma_*A_*^T - A'\Sigma'A'^T)`.
    The last covariance is :math:`\Sigma^{1/2}(I - \Pi)\Sigma^{1/2}`, with :math:`\Pi` the
    orthogonal projector on range(:math:`\Sigma^{-1/2}B`): zero when ``B`` has independent rows,
    otherwise the noise that re-inflates linearly dependent answers (Remark 3.4).  This
    function adds that independent top-up (drawn from ``rng``), so the output has *exactly*
    the target's law -- mean :math:`Bx`, covariance :math:`\Sigma` -- while the privacy cost
    stays that of ``(common, residual)``, i.e. of the target.  ``A_*, A'`` are computed by
    :func:`answer_map` on the joint mechanism ``(common, residual)``.

    ``omega_common``: ``(..., m_common)``; ``omega_residual``: ``(..., m_residual)``; the output
    has shape ``(..., m_target)``.  Raises ``ValueError`` if ``(common, residual)`` is not
    equivalent to ``target``.
    """
    A, C = recreation_map(target, common, residual_mechanism, rtol=rtol)
    return _apply_recreation(A, C, omega_common, omega_residual, common.m, residual_mechanism.m, rng)


def recreation_map(target: LinearGaussian, common: LinearGaussian, residual_mechanism: LinearGaussian,
                   *, rtol: float = 1e-9):
    """The matrices ``(A, C)`` used by :func:`recreate`: ``target(x)`` has the law of
    ``A [common(x), residual(x)] + C N(0, I)``.  Compute once when recreating many outputs."""
    for M, name in ((target, "target"), (common, "common"), (residual_mechanism, "residual")):
        _check_mechanism(M, name)
    _same_n(target, common, residual_mechanism)
    source = LinearGaussian.joint(common, residual_mechanism)
    if not equivalent(source, target, rtol=rtol):
        raise ValueError("(common, residual) is not equivalent to target: their cost matrices differ (Lemma 3.11)")
    A, C = answer_map(source, target, rtol=rtol)
    if target.m and np.max(np.abs(C)) <= 1e-12 * np.max(np.abs(target.Sigma)):
        C = None  # independent target rows: no top-up noise
    return A, C


def _apply_recreation(A, C, omega_common, omega_residual, m_common: int, m_residual: int, rng):
    wc = check_finite_array(omega_common, "omega_common")
    wr = check_finite_array(omega_residual, "omega_residual")
    if wc.ndim == 0 or wc.shape[-1] != m_common:
        raise ValueError(f"omega_common must have shape (..., {m_common}), got {wc.shape}")
    if wr.ndim == 0 or wr.shape[-1] != m_residual:
        raise ValueError(f"omega_residual must have shape (..., {m_residual}), got {wr.shape}")
    if wc.shape[:-1] != wr.shape[:-1]:
        raise ValueError(f"omega_common and omega_residual have different batch shapes {wc.shape[:-1]} and {wr.shape[:-1]}")
    out = np.concatenate([wc, wr], axis=-1) @ A.T
    if C is not None:
        z = as_generator(rng).standard_normal(out.shape)
        out = out + z @ C.T
    return out


# ---------------------------------------------------------------------------------------
# decisions from the common mechanism (Sec. 6.2)
# ---------------------------------------------------------------------------------------
def _check_queries(queries, n: int) -> np.ndarray:
    Q = check_finite_array(queries, "queries")
    if Q.ndim == 1:
        Q = Q[None, :]
    if Q.ndim != 2 or Q.shape[1] != n:
        raise ValueError(f"queries must have shape (q, {n}), got {Q.shape}")
    return Q


def _check_answerable_queries(M: LinearGaussian, Q: np.ndarray, rtol: float) -> np.ndarray:
    """K^dagger, after checking that every query row lies in rowspace(B) = range(K)."""
    w, V, _ = _psd_eig(M.cost_matrix, rtol)
    off = Q - (Q @ V) @ V.T
    if np.linalg.norm(off) > 1e-8 * max(np.linalg.norm(Q), 1.0):
        raise ValueError("queries are not answerable from the mechanism (some query is outside the row space of B)")
    return (V / w) @ V.T


def estimate(mechanism: LinearGaussian, omega, queries, *, rtol: float = RTOL):
    r"""Best linear unbiased estimate of :math:`Qx` from :math:`\omega = Bx + N(0,\Sigma)`
    (Gauss--Markov / generalized least squares) and its covariance:

    .. math:: \widehat{Qx} = QK^\dagger B^T\Sigma^{-1}\omega,\qquad \mathrm{Cov} = QK^\dagger Q^T.

    Unbiased because :math:`QK^\dagger K = Q` when the rows of ``Q`` lie in rowspace(B).  For
    the common mechanism this is Sec. 6.2's :math:`A_*\omega_*` with
    :math:`A_*\Sigma_*A_*^T` (for a full-row-rank :math:`B_*`,
    :math:`QK_*^\dagger B_*^T\Sigma_*^{-1} = QB_*^\dagger`).  ``omega`` may be a stack
    ``(..., m)``; returns ``(mean (..., q), cov (q, q))``.
    """
    G, cov = _estimator(mechanism, queries, rtol)
    w = check_finite_array(omega, "omega")
    if w.ndim == 0 or w.shape[-1] != mechanism.m:
        raise ValueError(f"omega must have shape (..., {mechanism.m}), got {w.shape}")
    return w @ G.T, cov


def _estimator(mechanism: LinearGaussian, queries, rtol: float = RTOL):
    """``(G, cov)``: the BLUE of ``Q x`` is ``G omega``, with covariance ``cov``."""
    _check_mechanism(mechanism)
    Q = _check_queries(queries, mechanism.n)
    Kp = _check_answerable_queries(mechanism, Q, rtol)
    G = Q @ Kp @ mechanism.B.T @ np.linalg.inv(mechanism.Sigma)  # q x m
    return G, _sym(Q @ Kp @ Q.T)


def query_noise_variance(mechanism: LinearGaussian, queries, A=None, *, rtol: float = RTOL) -> np.ndarray:
    r"""Noise variance of each query of ``queries`` answered from ``mechanism``'s output.

    ``A is None``: the best linear unbiased answer, :math:`\mathrm{diag}(QK^\dagger Q^T)`
    (what an analyst using all of the output gets; equals :math:`\Sigma_{ii}` when
    :math:`Q = B` has independent rows).  ``A`` given (with :math:`Q = AB`): the variances
    :math:`\mathrm{diag}(A\Sigma A^T)` of that particular post-processing -- Sec. 6.2's
    :math:`(A\Sigma_2A^T)[i,i]`, e.g. summing fine histogram cells into coarse ones.
    """
    _check_mechanism(mechanism)
    Q = _check_queries(queries, mechanism.n)
    if A is None:
        Kp = _check_answerable_queries(mechanism, Q, rtol)
        return np.einsum("ij,jk,ik->i", Q, Kp, Q)
    Am = check_finite_array(A, "A", ndim=2)
    if Am.shape != (Q.shape[0], mechanism.m):
        raise ValueError(f"A must have shape ({Q.shape[0]}, {mechanism.m}), got {Am.shape}")
    if not np.allclose(Am @ mechanism.B, Q, rtol=0, atol=1e-9 * max(1.0, np.max(np.abs(Q)))):
        raise ValueError("A does not map the mechanism's queries to the requested ones (A B != queries)")
    return np.einsum("ij,jk,ik->i", Am, mechanism.Sigma, Am)


@dataclass(frozen=True)
class SNRBounds:
    r"""Sec. 6.2 bounds for each query ``i`` of a primary analysis :math:`Qx`, from the
    common mechanism's output: :math:`L_i, U_i = \widehat{(Qx)}_i \mp z\,\mathrm{sd}_i` (a
    ``z``-sigma interval for the true value) and the signal-to-noise ratios
    :math:`L_i/\sigma_i`, :math:`U_i/\sigma_i` the candidate mechanism (noise sd
    :math:`\sigma_i` on query ``i``) would have.  Arrays have shape ``(..., q)``."""

    estimate: np.ndarray
    estimate_sd: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    noise_sd: np.ndarray
    snr_lower: np.ndarray
    snr_upper: np.ndarray

    def fraction_at_least(self, y: float, which: str = "lower") -> np.ndarray:
        """Fraction of queries whose SNR bound (``"lower"`` or ``"upper"``) is at least ``y``."""
        arr = self.snr_lower if which == "lower" else self.snr_upper
        if which not in ("lower", "upper"):
            raise ValueError("which must be 'lower' or 'upper'")
        return np.mean(arr >= y, axis=-1)


def snr_bounds(common: LinearGaussian, omega_common, queries, noise_variance, *, z: float = 3.0) -> SNRBounds:
    r"""Sec. 6.2: SNR bounds of a candidate mechanism on the primary queries ``Q`` (rows in the
    row space of ``common``), computed from ``common``'s output only (post-processing: free).

    ``noise_variance``: the candidate's noise variance on each query (see
    :func:`query_noise_variance`): :math:`\Sigma_1[i,i]` for the primary mechanism,
    :math:`(A\Sigma_2A^T)[i,i]` for a secondary one with :math:`B_1 = AB_2`.
    """
    mean, cov = estimate(common, omega_common, queries)
    return _bounds(mean, cov, noise_variance, z)


def _bounds(mean, cov, noise_variance, z) -> SNRBounds:
    zz = check_positive(z, "z")
    sd = np.sqrt(np.clip(np.diag(cov), 0.0, None))
    nv = check_finite_array(noise_variance, "noise_variance")
    if nv.shape[-1:] != mean.shape[-1:] or np.any(nv <= 0):
        raise ValueError(f"noise_variance must be positive with length {mean.shape[-1]}")
    nsd = np.sqrt(nv)
    lo, hi = mean - zz * sd, mean + zz * sd
    return SNRBounds(mean, np.broadcast_to(sd, mean.shape), lo, hi, np.broadcast_to(nsd, mean.shape), lo / nsd, hi / nsd)


def prefers_secondary(bounds: SNRBounds, *, fraction: float, snr: float):
    """Sec. 6.2 rule: the secondary (finer) analysis is good enough for the primary one if at
    least ``fraction`` of the primary queries have ``SNR_Lower >= snr`` under it."""
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction must lie in (0, 1], got {fraction!r}")
    return bounds.fraction_at_least(snr, "lower") >= fraction


@dataclass
class SelectionResult:
    """Outcome of :meth:`NestedSelection.run`.

    ``choice``: index of the chosen analysis; ``output``: a draw with exactly the law of
    ``mechanisms[choice](x)``; ``released``: ``(label, mechanism, omega)`` for everything
    released, in order (their joint cost matrix equals the chosen mechanism's);
    ``bounds``: the :class:`SNRBounds` of each decision taken."""

    choice: int
    output: np.ndarray
    released: list = field(default_factory=list)
    bounds: list = field(default_factory=list)


class NestedSelection:
    r"""Sequential zero-waste choice among nested analyses (Sec. 7.5.3).

    ``mechanisms = [M_1, ..., M_K]`` are ordered coarse to fine and *nested*: every query of
    ``M_k`` is a linear combination of those of ``M_{k+1}`` (e.g. Total, Age4, Age9, Age23
    sex-by-age histograms).  The plan:

    * commons :math:`C_K = M_K`, :math:`C_k = \mathrm{common}(M_k, C_{k+1})` (Stott's closed
      form); then :math:`C_k` is common to :math:`M_k, \dots, M_K` and answerable from
      :math:`C_{k+1}` -- the chain property the procedure needs (the paper's :math:`CM_{1234}`,
      :math:`CM_{234}`, :math:`CM_{34}`; the paper obtains them from the joint SDP and
      observes the chain; building them pairwise guarantees it).
    * step residuals :math:`S_k` with :math:`(C_k, S_k) \equiv C_{k+1}` and final residuals
      :math:`F_k` with :math:`(C_k, F_k) \equiv M_k`.

    Run: release :math:`\omega_1 = C_1(x)`.  At step ``k``, the primary queries are the rows of
    :math:`B_k` (the cells of analysis ``k``), estimated from :math:`\omega_k`; the candidate is
    :math:`M_{k+1}` answering them (best linear unbiased, :func:`query_noise_variance`).  If
    :func:`prefers_secondary` (at least ``fraction`` of the cells have ``SNR_Lower >= snr``),
    release :math:`S_k(x)` and recreate :math:`\omega_{k+1} \sim C_{k+1}(x)`; otherwise
    release :math:`F_k(x)` and recreate :math:`M_k(x)`.  Whatever is chosen, the released
    mechanisms jointly cost exactly the chosen :math:`M_k` (their cost matrices sum to
    :math:`K_{M_k}`): nothing is spent on deciding.  Decisions use released values only.
    """

    def __init__(self, mechanisms, *, fraction: float = 0.5, snr: float = 20.0, z: float = 3.0):
        mechs = list(mechanisms)
        if len(mechs) < 2:
            raise ValueError("NestedSelection needs at least two nested mechanisms")
        for i, M in enumerate(mechs):
            _check_mechanism(M, f"mechanism {i}")
        _same_n(*mechs)
        for k in range(len(mechs) - 1):
            try:
                _check_answerable_queries(mechs[k + 1], mechs[k].B, RTOL)
            except ValueError:
                raise ValueError(
                    f"analyses are not nested: the queries of mechanism {k} are not linear combinations "
                    f"of those of mechanism {k + 1}"
                ) from None
        if not 0 < fraction <= 1:
            raise ValueError(f"fraction must lie in (0, 1], got {fraction!r}")
        self.mechanisms = mechs
        self.fraction = float(fraction)
        self.snr = check_positive(snr, "snr")
        self.z = check_positive(z, "z")
        K = len(mechs)
        commons = [None] * K
        commons[K - 1] = mechs[K - 1]
        for k in range(K - 2, -1, -1):
            commons[k] = common_mechanism(mechs[k], commons[k + 1], method="closed_form")
        self.commons = commons
        self.step_residuals = [residual(commons[k + 1], commons[k]) for k in range(K - 1)]
        self.final_residuals = [residual(mechs[k], commons[k]) for k in range(K)]
        self.candidate_noise_variance = [query_noise_variance(mechs[k + 1], mechs[k].B) for k in range(K - 1)]
        # post-processing maps, computed once: estimators of B_k x from C_k, recreation maps
        self._estimators = [_estimator(commons[k], mechs[k].B) for k in range(K - 1)]
        self._step_maps = [recreation_map(commons[k + 1], commons[k], self.step_residuals[k]) for k in range(K - 1)]
        self._final_maps = [recreation_map(mechs[k], commons[k], self.final_residuals[k]) for k in range(K)]

    def bounds(self, k: int, omega_k) -> SNRBounds:
        """SNR bounds at step ``k`` from ``omega_k`` (an output of ``commons[k]``)."""
        G, cov = self._estimators[k]
        w = check_finite_array(omega_k, "omega_k")
        if w.ndim == 0 or w.shape[-1] != self.commons[k].m:
            raise ValueError(f"omega_k must have shape (..., {self.commons[k].m}), got {w.shape}")
        return _bounds(w @ G.T, cov, self.candidate_noise_variance[k], self.z)

    def go_finer(self, k: int, omega_k) -> bool:
        """Decision at step ``k``: move on to analysis ``k + 1`` (True) or stop at ``k``."""
        return bool(prefers_secondary(self.bounds(k, omega_k), fraction=self.fraction, snr=self.snr))

    def path_cost_matrix(self, choice: int) -> np.ndarray:
        """Sum of the cost matrices of everything released when ``choice`` is selected."""
        K = self.commons[0].cost_matrix + sum(self.step_residuals[k].cost_matrix for k in range(choice))
        return K + self.final_residuals[choice].cost_matrix

    def run(self, x, rng=None) -> SelectionResult:
        """Curator side: run the procedure on one data vector ``x`` (shape ``(n,)``)."""
        x = np.asarray(x, dtype=float)
        if x.ndim != 1:
            raise ValueError(f"run takes one data vector of shape ({self.mechanisms[0].n},), got {x.shape}")
        rng = as_generator(rng)
        released = []
        omega = self.commons[0].release(x, rng=rng)
        released.append(("common 0", self.commons[0], omega))
        bounds = []
        K = len(self.mechanisms)
        k = 0
        while k < K - 1:
            b = self.bounds(k, omega)
            bounds.append(b)
            if not prefers_secondary(b, fraction=self.fraction, snr=self.snr):
                break
            S = self.step_residuals[k]
            ws = S.release(x, rng=rng)
            released.append((f"step residual {k}", S, ws))
            A, C = self._step_maps[k]
            omega = _apply_recreation(A, C, omega, ws, self.commons[k].m, S.m, rng)
            k += 1
        F = self.final_residuals[k]
        wf = F.release(x, rng=rng)
        if F.m:
            released.append((f"final residual {k}", F, wf))
        A, C = self._final_maps[k]
        out = _apply_recreation(A, C, omega, wf, self.commons[k].m, F.m, rng)
        return SelectionResult(choice=k, output=out, released=released, bounds=bounds)


# ---------------------------------------------------------------------------------------
# histograms over bucketizations (Sec. 7.5)
# ---------------------------------------------------------------------------------------
#: Age bucket edges of the 2020 DHC sex-by-age tables (Sec. 7.5.1), over ages 0..102.
DHC_AGE_EDGES = {
    "Total": (0, 103),
    "Age4": (0, 18, 45, 65, 103),
    "Age9": (0, 5, 18, 25, 35, 45, 55, 65, 75, 103),
    "Age23": (0, 5, 10, 15, 18, 20, 21, 22, 25, 30, 35, 40, 45, 50, 55, 60, 62, 65, 67, 70, 75, 80, 85, 103),
}


def bucket_matrix(edges, groups: int = 1) -> np.ndarray:
    """Query matrix of a histogram over buckets ``[edges[j], edges[j+1])`` of ``0..edges[-1]-1``.

    With ``groups > 1`` the data vector is group-major (e.g. sex-by-age: ``x[g * n + a]``) and
    the result is ``kron(I_groups, bucket rows)``: one histogram per group.
    """
    e = np.asarray(edges)
    if e.ndim != 1 or len(e) < 2 or e[0] != 0 or np.any(np.diff(e) <= 0) or not np.all(e == np.round(e)):
        raise ValueError("edges must be increasing integers starting at 0")
    n = int(e[-1])
    B = np.zeros((len(e) - 1, n))
    for j in range(len(e) - 1):
        B[j, int(e[j]): int(e[j + 1])] = 1.0
    if not isinstance(groups, (int, np.integer)) or groups < 1:
        raise ValueError("groups must be a positive integer")
    return np.kron(np.eye(groups), B)
