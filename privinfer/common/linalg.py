r"""Linear algebra on symmetric positive semidefinite matrices, shared by the common mechanism.

Everything in :mod:`privinfer.common` is linear algebra on privacy cost matrices
:math:`K = B^T\Sigma^{-1}B` (Xiao, Wang, Zhang and Kifer, *Answering Private Linear Queries
Adaptively using the Common Mechanism*, Sec. 2.2 and 3.1).  This module holds the
eigen-decomposition based tools the other modules build on: symmetrization, the positive
eigenpairs of a PSD matrix, its pseudo-inverse, symmetric square roots, a cheap scale and
the relative smallest eigenvalue used for Loewner comparisons.

Numerical conventions: a symmetric PSD matrix's rank is the number of eigenvalues above
``rtol * (largest eigenvalue)``; Loewner comparisons allow ``-rtol * scale`` of rounding.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "RTOL",
    "sym",
    "psd_eig",
    "pinv_psd",
    "sqrt_psd",
    "inv_sqrt_pd",
    "psd_scale",
    "min_eig_relative",
]


#: Default relative tolerance for ranks and Loewner comparisons of cost matrices.
RTOL = 1e-10


def sym(A: np.ndarray) -> np.ndarray:
    """Symmetric part ``(A + A^T)/2`` (removes rounding asymmetry)."""
    return 0.5 * (A + A.T)


def psd_eig(K: np.ndarray, rtol: float):
    """Eigen-decomposition of a symmetric PSD matrix; returns (positive eigenvalues descending,
    their eigenvectors as columns, scale) with eigenvalues <= rtol * scale treated as zero."""
    w, V = np.linalg.eigh(sym(K))
    scale = max(float(np.max(np.abs(w))) if w.size else 0.0, 0.0)
    keep = w > rtol * scale if scale > 0 else np.zeros(w.shape, bool)
    w, V = w[keep][::-1], V[:, keep][:, ::-1]
    return w, V, scale


def pinv_psd(K: np.ndarray, rtol: float = RTOL) -> np.ndarray:
    """Moore--Penrose pseudo-inverse of a symmetric PSD matrix from its positive eigenpairs."""
    w, V, _ = psd_eig(K, rtol)
    return (V / w) @ V.T


def sqrt_psd(S: np.ndarray) -> np.ndarray:
    """Symmetric square root of a symmetric PSD matrix (negative rounding clipped)."""
    w, V = np.linalg.eigh(sym(S))
    return (V * np.sqrt(np.clip(w, 0.0, None))) @ V.T


def inv_sqrt_pd(S: np.ndarray) -> np.ndarray:
    """Symmetric inverse square root of a symmetric positive definite matrix."""
    w, V = np.linalg.eigh(sym(S))
    return (V / np.sqrt(w)) @ V.T


def psd_scale(K: np.ndarray) -> float:
    """Scale of a PSD matrix: its largest diagonal entry (bounds every entry; within a factor
    n of the spectral norm) -- cheap, unlike an SVD-based norm."""
    return float(np.max(np.diag(K))) if K.size else 0.0


def min_eig_relative(D: np.ndarray, scale: float) -> float:
    """Smallest eigenvalue of the symmetric ``D`` divided by ``scale`` (0 if either is empty/zero)."""
    if D.size == 0 or scale == 0:
        return 0.0
    return float(np.linalg.eigvalsh(sym(D))[0]) / scale
