r"""Best linear unbiased answers to linear queries from a linear Gaussian mechanism's output.

Xiao, Wang, Zhang and Kifer, *Answering Private Linear Queries Adaptively using the Common
Mechanism* (PVLDB), Sec. 6.2.  From :math:`\omega = Bx + N(0,\Sigma)` and queries ``Q`` whose
rows lie in rowspace(:math:`B`) = range(:math:`K`), Gauss--Markov (generalized least squares)
gives

.. math:: \widehat{Qx} = QK^\dagger B^T\Sigma^{-1}\omega,\qquad \mathrm{Cov} = QK^\dagger Q^T,

unbiased because :math:`QK^\dagger K = Q` (:func:`estimate`, :func:`estimator`).
:func:`query_noise_variance` gives the per-query noise variance of that best answer, or of a
given post-processing ``A`` with :math:`Q = AB` -- Sec. 6.2's :math:`(A\Sigma A^T)[i,i]`.
"""

from __future__ import annotations

import numpy as np

from .._validation import check_finite_array
from ..mechanisms.linear_gaussian import LinearGaussian
from .cost import check_mechanism
from .linalg import RTOL, psd_eig, sym

__all__ = ["check_queries", "check_answerable_queries", "estimate", "estimator", "query_noise_variance"]


def check_queries(queries, n: int) -> np.ndarray:
    """``queries`` as a finite ``(q, n)`` matrix (a single row ``(n,)`` becomes ``(1, n)``)."""
    Q = check_finite_array(queries, "queries")
    if Q.ndim == 1:
        Q = Q[None, :]
    if Q.ndim != 2 or Q.shape[1] != n:
        raise ValueError(f"queries must have shape (q, {n}), got {Q.shape}")
    return Q


def check_answerable_queries(M: LinearGaussian, Q: np.ndarray, rtol: float) -> np.ndarray:
    """K^dagger, after checking that every query row lies in rowspace(B) = range(K)."""
    w, V, _ = psd_eig(M.cost_matrix, rtol)
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
    G, cov = estimator(mechanism, queries, rtol)
    w = check_finite_array(omega, "omega")
    if w.ndim == 0 or w.shape[-1] != mechanism.m:
        raise ValueError(f"omega must have shape (..., {mechanism.m}), got {w.shape}")
    return w @ G.T, cov


def estimator(mechanism: LinearGaussian, queries, rtol: float = RTOL):
    """``(G, cov)``: the BLUE of ``Q x`` is ``G omega``, with covariance ``cov``."""
    check_mechanism(mechanism)
    Q = check_queries(queries, mechanism.n)
    Kp = check_answerable_queries(mechanism, Q, rtol)
    G = Q @ Kp @ mechanism.B.T @ np.linalg.inv(mechanism.Sigma)  # q x m
    return G, sym(Q @ Kp @ Q.T)


def query_noise_variance(mechanism: LinearGaussian, queries, A=None, *, rtol: float = RTOL) -> np.ndarray:
    r"""Noise variance of each query of ``queries`` answered from ``mechanism``'s output.

    ``A is None``: the best linear unbiased answer, :math:`\mathrm{diag}(QK^\dagger Q^T)`
    (what an analyst using all of the output gets; equals :math:`\Sigma_{ii}` when
    :math:`Q = B` has independent rows).  ``A`` given (with :math:`Q = AB`): the variances
    :math:`\mathrm{diag}(A\Sigma A^T)` of that particular post-processing -- Sec. 6.2's
    :math:`(A\Sigma_2A^T)[i,i]`, e.g. summing fine histogram cells into coarse ones.
    """
    check_mechanism(mechanism)
    Q = check_queries(queries, mechanism.n)
    if A is None:
        Kp = check_answerable_queries(mechanism, Q, rtol)
        return np.einsum("ij,jk,ik->i", Q, Kp, Q)
    Am = check_finite_array(A, "A", ndim=2)
    if Am.shape != (Q.shape[0], mechanism.m):
        raise ValueError(f"A must have shape ({Q.shape[0]}, {mechanism.m}), got {Am.shape}")
    if not np.allclose(Am @ mechanism.B, Q, rtol=0, atol=1e-9 * max(1.0, np.max(np.abs(Q)))):
        raise ValueError("A does not map the mechanism's queries to the requested ones (A B != queries)")
    return np.einsum("ij,jk,ik->i", Am, mechanism.Sigma, Am)
