r"""Linear Gaussian mechanisms through their privacy cost matrices.

Xiao, Wang, Zhang and Kifer, *Answering Private Linear Queries Adaptively using the Common
Mechanism* (PVLDB), Sec. 2.2, 3.1 and 5.1.  Every mechanism of the common mechanism is a
:class:`~privinfer.mechanisms.LinearGaussian`, :math:`M(x) = Bx + N(0, \Sigma)`, with privacy
cost matrix :math:`K = B^T\Sigma^{-1}B`.  Two mechanisms with the same cost matrix are
equivalent (Def. 3.6, Thm. 3.5): they have identical privacy under every post-processing
invariant definition and carry the same information, so only ``K`` matters.

This module holds the argument checks shared by the common-mechanism modules and
:func:`standardize` (Algorithm 2): the canonical representative of a mechanism's
equivalence class, read off the eigen-decomposition :math:`K = \sum_j \lambda_j v_jv_j^T`
as :math:`B = [\sqrt{\lambda_1}v_1, \dots, \sqrt{\lambda_k}v_k]^T`, :math:`\Sigma = I`
(Lemma 5.1: :math:`B^TB = K`).
"""

from __future__ import annotations

import numpy as np

from ..mechanisms.linear_gaussian import LinearGaussian
from .linalg import RTOL, psd_eig

__all__ = ["check_mechanism", "check_same_n", "standardize"]


def check_mechanism(M, name: str = "mechanism") -> LinearGaussian:
    """``M`` itself if it is a :class:`LinearGaussian`; ``TypeError`` naming ``name`` otherwise."""
    if not isinstance(M, LinearGaussian):
        raise TypeError(f"{name} must be a LinearGaussian mechanism, not {type(M).__name__}")
    return M


def check_same_n(*Ms: LinearGaussian) -> int:
    """The common data-vector length ``n`` of the mechanisms; ``ValueError`` if they differ."""
    ns = [M.n for M in Ms]
    if len(set(ns)) != 1:
        raise ValueError(f"mechanisms act on data vectors of different lengths: {ns}")
    return ns[0]


def standardize(M: LinearGaussian, *, rtol: float = RTOL) -> LinearGaussian:
    r"""Algorithm 2: the equivalent mechanism with identity covariance and linearly independent
    query rows :math:`B = [\sqrt{\lambda_1}v_1, \dots, \sqrt{\lambda_k}v_k]^T`, where
    :math:`K = \sum_j \lambda_j v_jv_j^T` (positive eigenvalues, descending).  Lemma 5.1:
    :math:`B^TB = K`, so it is equivalent to ``M``."""
    check_mechanism(M)
    w, V, _ = psd_eig(M.cost_matrix, rtol)
    return LinearGaussian((V * np.sqrt(w)).T.reshape(len(w), M.n), np.eye(len(w)))
