r"""The maximally common mechanism of several linear Gaussian mechanisms.

Xiao, Wang, Zhang and Kifer, *Answering Private Linear Queries Adaptively using the Common
Mechanism* (PVLDB), Sec. 3.2 and 5.1 (Defs. 3.7 and 3.9, Algorithm 1, Theorems 5.2--5.4).
A mechanism is *common* to ``M1, M2, ...`` when it is answerable from every ``Mi``
(Def. 3.7) and *maximally common* when no other common mechanism answerable-dominates it
(Def. 3.9).  :func:`common_mechanism` builds one:

1. standardize (Algorithm 2; only cost matrices matter, Lemma 5.1);
2. the query matrix :math:`B_*` spans :math:`\bigcap_i \mathrm{rowspace}(B_i)` (Thm. 5.2),
   computed by :func:`intersect_row_spaces` from principal angles;
3. the covariance minimizes :math:`\mathrm{tr}\,\Sigma` subject to :math:`\Sigma \succeq P_i`,
   :math:`P_i = B_*K_i^\dagger B_*^T` (Thm. 5.3) -- Stott's closed form for two mechanisms
   (Thm. 5.4), the semidefinite program of :mod:`privinfer.common.sdp` for more.

The docstring of :func:`common_mechanism` derives the :math:`P_i`.
"""

from __future__ import annotations

import numpy as np

from .._validation import check_finite_array
from ..mechanisms.linear_gaussian import LinearGaussian
from .cost import check_mechanism, check_same_n
from .linalg import RTOL, pinv_psd, psd_eig, sym
from .sdp import min_trace_upper_bound, stott_bound

__all__ = ["intersect_row_spaces", "common_mechanism"]


def _range_basis(K: np.ndarray, rtol: float) -> np.ndarray:
    return psd_eig(K, rtol)[1]


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
        check_mechanism(M)
    check_same_n(*mechanisms)
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
        check_mechanism(M, f"mechanism {i}")
    n = check_same_n(*mechanisms)
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
    Ps = [sym(Bstar @ pinv_psd(M.cost_matrix, rtol) @ Bstar.T) for M in mechanisms]
    if len(Ps) == 2 and method in ("auto", "closed_form"):
        Sigma = stott_bound(*Ps)
    else:
        Sigma, info = min_trace_upper_bound(Ps, tol=tol, return_info=True)
        if info.gap > 1e-7 * max(abs(info.lower_bound), 1e-300):
            raise RuntimeError(
                f"the semidefinite program of Theorem 5.3 was not solved accurately (certified relative "
                f"duality gap {info.gap / max(abs(info.lower_bound), 1e-300):.1e}); the problem is badly conditioned"
            )
    return LinearGaussian(Bstar, sym(Sigma))
