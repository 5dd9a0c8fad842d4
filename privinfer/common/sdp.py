r"""The optimization of Theorem 5.3: the trace-minimal Loewner upper bound of PSD matrices.

Xiao, Wang, Zhang and Kifer, *Answering Private Linear Queries Adaptively using the Common
Mechanism* (PVLDB), Sec. 5.1 (Theorems 5.3 and 5.4).  The covariance of a maximally common
mechanism solves

.. math:: \min_X \mathrm{tr}\,X \quad\text{s.t.}\quad X \succeq P_i,\ i = 1..k,

one constraint per mechanism (see :mod:`privinfer.common.maximal` for the :math:`P_i`).

* Two matrices: Stott's closed form (Theorem 5.4), :func:`stott_bound`,
  :math:`\tfrac12(P_1 + P_2) + \tfrac12|P_2 - P_1| = P_1 + (P_2 - P_1)_+`.
* Three or more: the semidefinite program, solved by :func:`min_trace_upper_bound` -- a
  primal-dual interior point method (HKM direction with Mehrotra's predictor-corrector, as in
  SDPT3; Todd 2001, Acta Numerica) specialized to this problem, with a certified duality gap
  (:class:`SDPInfo`).  No external solver.  Its docstring carries the derivation of the
  Newton system and of the certificate.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import linalg

from .._validation import check_finite_array
from .linalg import inv_sqrt_pd, sym

__all__ = ["stott_bound", "SDPInfo", "min_trace_upper_bound"]


def stott_bound(P1: np.ndarray, P2: np.ndarray) -> np.ndarray:
    r"""Theorem 5.4 (Stott): the trace-minimal Loewner upper bound of two PSD matrices,
    :math:`\tfrac12(P_1 + P_2) + \tfrac12|P_2 - P_1| = P_1 + (P_2 - P_1)_+`.

    Why it is optimal: with :math:`D = P_2 - P_1 = D_+ - D_-` and :math:`\Pi_+` the projector
    on :math:`D`'s positive eigenspace, any :math:`X \succeq P_1, P_2` has
    :math:`\mathrm{tr}(X - P_1) \ge \mathrm{tr}(\Pi_+(X - P_1)) \ge \mathrm{tr}(\Pi_+ D) = \mathrm{tr} D_+`,
    and :math:`P_1 + D_+` attains it while dominating both.
    """
    P1 = sym(np.asarray(P1, float))
    P2 = sym(np.asarray(P2, float))
    w, V = np.linalg.eigh(sym(P2 - P1))
    return sym(0.5 * (P1 + P2) + 0.5 * (V * np.abs(w)) @ V.T)


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
        nu = np.linalg.eigvalsh(sym(M))[0]
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
    Ps = _checked_constraints(Ps)
    scale = max(float(np.linalg.eigvalsh(P)[-1]) for P in Ps) if Ps[0].size else 0.0
    trivial = _trivial_bound(Ps, scale)
    if trivial is not None:
        X, info = trivial
    else:
        gap, lower, X, iters = _interior_point([Pi / scale for Pi in Ps], tol, max_iter)
        X = X * scale
        info = SDPInfo(gap=gap * scale, lower_bound=lower * scale, iterations=iters)
    return (X, info) if return_info else X


def _checked_constraints(Ps) -> list[np.ndarray]:
    """The constraint matrices, finite and symmetrized, all square of one size (one-line errors)."""
    Ps = [sym(check_finite_array(P, "P", ndim=2)) for P in Ps]
    if not Ps:
        raise ValueError("need at least one matrix")
    s = Ps[0].shape[0]
    if any(P.shape != (s, s) for P in Ps):
        raise ValueError(f"all constraint matrices must be square of the same size, got {[P.shape for P in Ps]}")
    return Ps


def _trivial_bound(Ps, scale: float):
    r"""``(X, info)`` where no iteration is needed, else ``None``: an empty problem (``s = 0``) and
    constraints with no positive eigenvalue (``scale`` :math:`\le 0`, so every :math:`P_i \preceq 0`)
    give :math:`X = 0`; one constraint gives :math:`X = P_1` (its trace is the optimum exactly)."""
    s = Ps[0].shape[0]
    if s == 0 or scale <= 0:
        return np.zeros((s, s)), SDPInfo(0.0, 0.0, 0)
    if len(Ps) == 1:
        X = Ps[0].copy()
        return X, SDPInfo(0.0, float(np.trace(X)), 0)
    return None


def _interior_point(P, tol: float, max_iter: int):
    r"""The primal-dual iterations of :func:`min_trace_upper_bound` on the scaled constraints ``P``
    (largest eigenvalue 1): ``(gap, lower, X, iterations)`` of the best certified iterate.

    Starts at the strictly feasible pair :math:`X = \sum_i P_i + I` (so :math:`X - P_j =
    \sum_{i \ne j} P_i + I \succ 0`), :math:`Y_i = I/k` (:math:`\sum_i Y_i = I`); stops when the
    certified gap is below ``tol``, after four iterations without halving the best gap
    (rounding stopped progress), when an iterate loses definiteness, or after ``max_iter``.
    """
    k, s = len(P), P[0].shape[0]
    eye = np.eye(s)
    X = sum(P) + eye
    Y = [eye / k for _ in range(k)]
    iters = stall = 0
    best = (np.inf, -np.inf, X)
    for _ in range(max_iter):
        S = [sym(X - Pi) for Pi in P]
        try:
            Ls = [np.linalg.cholesky(Si) for Si in S]
            LYs = [np.linalg.cholesky(Yi) for Yi in Y]
        except np.linalg.LinAlgError:
            break
        gap, lower = _certificate(X, Y, P)
        if gap < best[0]:
            stall = stall + 1 if gap > 0.5 * best[0] else 0
            best = (gap, lower, X.copy())
        else:
            stall += 1
        if gap <= tol or stall >= 4:  # converged, or rounding stopped progress
            break
        iters += 1
        X, Y = _predictor_corrector(X, Y, S, Ls, LYs)
    gap, lower, X = best
    return gap, lower, X, iters


def _certificate(X, Y, P) -> tuple[float, float]:
    r"""``(gap, lower)``: with :math:`T = (\sum_i Y_i)^{-1/2}` the :math:`TY_iT` are exactly dual
    feasible, so ``lower`` :math:`= \sum_i \mathrm{tr}(TY_iTP_i) \le` optimum :math:`\le
    \mathrm{tr}X`, and ``gap`` :math:`= \mathrm{tr}X -` ``lower`` bounds the suboptimality of X."""
    Tn = inv_sqrt_pd(sum(Y))
    lower = float(sum(np.sum((Tn @ Yi @ Tn) * Pi) for Yi, Pi in zip(Y, P)))
    return float(np.trace(X)) - lower, lower


def _hkm_direction(Sinv, Y, H, w, rd, sigma_mu, dX_aff=None, dY_aff=None):
    r"""The Newton direction :math:`(\Delta X, \Delta Y_i)` for the target :math:`S_iY_i = \sigma\mu I`:
    :math:`\Delta Y_i = \mathrm{sym}(\sigma\mu S_i^{-1} - Y_i - S_i^{-1}\Delta X\,Y_i - S_i^{-1}\Delta
    X^{a}\Delta Y_i^{a})` (the last term: Mehrotra's second-order correction from the affine
    direction ``dX_aff``, ``dY_aff``, when given), with :math:`\Delta X` solving
    :math:`\sum_i \Delta Y_i = ` ``rd`` :math:`= I - \sum_i Y_i` through the HKM operator ``H``
    (:func:`_hkm_operator`, weights ``w``) in the upper-triangle coordinates of :math:`\Delta X`."""
    s = Y[0].shape[0]
    a_idx, b_idx = np.triu_indices(s)
    rhs_m = sum(sigma_mu * Si_ - Yi for Si_, Yi in zip(Sinv, Y)) - rd
    if dX_aff is not None:
        rhs_m = rhs_m - sum(sym(Si_ @ dX_aff @ dYa) for Si_, dYa in zip(Sinv, dY_aff))
    rhs_m = sym(rhs_m)
    c = _solve_spd(H, w * rhs_m[a_idx, b_idx])
    dX = np.zeros((s, s))
    dX[a_idx, b_idx] = c
    dX[b_idx, a_idx] = c
    dY = []
    for i, (Si_, Yi) in enumerate(zip(Sinv, Y)):
        M = sigma_mu * Si_ - Yi - Si_ @ dX @ Yi
        if dX_aff is not None:
            M = M - Si_ @ dX_aff @ dY_aff[i]
        dY.append(sym(M))
    return dX, dY


def _step_lengths(Ls, LYs, dX, dY) -> tuple[float, float]:
    """Primal and dual step lengths: 0.95 of the exact distance to the boundary of the cones
    (:func:`_max_step` on the Cholesky factors of the :math:`S_i` and :math:`Y_i`), at most 1."""
    ap = min(1.0, 0.95 * _max_step(Ls, [dX] * len(Ls)))
    ad = min(1.0, 0.95 * _max_step(LYs, dY))
    return ap, ad


def _predictor_corrector(X, Y, S, Ls, LYs):
    r"""One Mehrotra predictor-corrector step from :math:`(X, Y)` (``S`` :math:`= X - P_i`, ``Ls``
    and ``LYs`` the Cholesky factors of the :math:`S_i` and :math:`Y_i`): the affine direction
    (:math:`\sigma = 0`) predicts the complementarity :math:`\mu_{aff}` reachable, the centring
    :math:`\sigma = (\mu_{aff}/\mu)^3` (at most 1) and the second-order term correct it; both
    iterates move by their step lengths and stay strictly feasible."""
    k, s = len(S), S[0].shape[0]
    eye = np.eye(s)
    mu = sum(float(np.sum(Si * Yi)) for Si, Yi in zip(S, Y)) / (k * s)
    Sinv = [linalg.cho_solve((Lc, True), eye) for Lc in Ls]
    H, w = _hkm_operator(Sinv, Y, np.triu_indices(s))
    rd = eye - sum(Y)
    dXa, dYa = _hkm_direction(Sinv, Y, H, w, rd, 0.0)
    ap, ad = _step_lengths(Ls, LYs, dXa, dYa)
    mu_aff = sum(float(np.sum((Si + ap * dXa) * (Yi + ad * dYi))) for Si, Yi, dYi in zip(S, Y, dYa)) / (k * s)
    sigma = min(1.0, max(0.0, mu_aff / mu) ** 3)
    dX, dY = _hkm_direction(Sinv, Y, H, w, rd, sigma * mu, dXa, dYa)
    ap, ad = _step_lengths(Ls, LYs, dX, dY)
    return sym(X + ap * dX), [sym(Yi + ad * dYi) for Yi, dYi in zip(Y, dY)]
