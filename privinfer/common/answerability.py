r"""Answerability and equivalence of linear Gaussian mechanisms (the Loewner order on cost matrices).

Xiao, Wang, Zhang and Kifer, *Answering Private Linear Queries Adaptively using the Common
Mechanism* (PVLDB), Sec. 3.1 and Appendix A.

* ``Mb`` is *answerable* from ``Ma`` (Def. 3.1) when ``Mb(x)`` can be simulated from
  ``Ma(x)`` by a linear map plus independent noise.  Theorem 3.5: this holds iff
  :math:`K_b \preceq K_a` (Loewner order), i.e. :math:`K_a - K_b` is PSD
  (:func:`answerable`).
* ``Ma`` and ``Mb`` are *equivalent* (Def. 3.6) when each is answerable from the other, i.e.
  :math:`K_a = K_b` (:func:`equivalent`).
* :func:`answer_map` is the constructive half of Theorem 3.5 (appendix proof, Lemma 3.2):
  the matrices ``(A, C)`` with ``target(x)`` equal in law to ``A source(x) + C N(0, I)``;
  its docstring carries the derivation.

Rounding of ``rtol`` times the larger cost-matrix scale is tolerated in every comparison.
"""

from __future__ import annotations

import numpy as np

from ..mechanisms.linear_gaussian import LinearGaussian
from .cost import check_mechanism, check_same_n
from .linalg import RTOL, inv_sqrt_pd, min_eig_relative, pinv_psd, psd_scale, sqrt_psd, sym

__all__ = ["answerable", "equivalent", "answer_map"]


def answerable(source: LinearGaussian, target: LinearGaussian, *, rtol: float = 1e-9) -> bool:
    r"""Is ``target`` answerable from ``source`` (Def. 3.1)?  Theorem 3.5: iff
    :math:`K_{target} \preceq K_{source}`, i.e. :math:`K_{source} - K_{target}` is PSD.

    (Paper letters: ``answerable(Ma, Mb)`` asks whether ``Mb`` can be simulated from ``Ma``'s
    output by a linear map plus independent noise.)  Rounding of ``rtol`` times the larger
    cost-matrix norm is tolerated.
    """
    check_mechanism(source, "source")
    check_mechanism(target, "target")
    check_same_n(source, target)
    Ks, Kt = source.cost_matrix, target.cost_matrix
    scale = max(psd_scale(Ks), psd_scale(Kt))
    return min_eig_relative(Ks - Kt, scale) >= -rtol


def equivalent(Ma: LinearGaussian, Mb: LinearGaussian, *, rtol: float = 1e-9) -> bool:
    r"""Def. 3.6: ``Ma`` and ``Mb`` are each answerable from the other, i.e. they have the same
    privacy cost matrix (hence identical privacy under every post-processing invariant
    definition and the same information).  Entrywise tolerance ``rtol`` times the larger norm."""
    check_mechanism(Ma, "Ma")
    check_mechanism(Mb, "Mb")
    check_same_n(Ma, Mb)
    Ka, Kb = Ma.cost_matrix, Mb.cost_matrix
    scale = max(psd_scale(Ka), psd_scale(Kb))
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
    St_half = sqrt_psd(target.Sigma)
    Wt = inv_sqrt_pd(target.Sigma) @ target.B
    Ks_pinv = pinv_psd(source.cost_matrix, RTOL)
    if source.m:
        Ws_t = (inv_sqrt_pd(source.Sigma) @ source.B).T  # n x m_s
        A = St_half @ Wt @ Ks_pinv @ Ws_t @ inv_sqrt_pd(source.Sigma)
    else:
        A = np.zeros((mt, 0))
    R = np.eye(mt) - Wt @ Ks_pinv @ Wt.T
    # eigenvalues of R lie in [0, 1]; rounding-level ones (< 1e-12) are exact zeros, whose
    # square roots would otherwise inject ~1e-8 spurious noise (changes Cov by <= 1e-12 Sigma)
    wR, VR = np.linalg.eigh(sym(R))
    wR = np.where(wR < 1e-12, 0.0, np.minimum(wR, 1.0))
    C = St_half @ ((VR * np.sqrt(wR)) @ VR.T)
    return A, C
