r"""Residual mechanisms and the recreation of a target mechanism's output.

Xiao, Wang, Zhang and Kifer, *Answering Private Linear Queries Adaptively using the Common
Mechanism* (PVLDB), Sec. 3.3, 5.2 and 5.3 (Lemma 3.11, Algorithms 3 and 4, Theorem 5.5).

* :func:`residual` (Algorithm 3): the extra information ``Ri`` with ``(Mc, Ri)`` equivalent
  to ``Mi`` -- :math:`K_{R_i} = K_{M_i} - K_{M_c}` (Lemma 3.11), so running both costs exactly
  what ``Mi`` costs.
* :func:`recreate` (Algorithm 4 plus Theorem 5.5): turns the outputs of ``(Mc, Ri)`` into a
  draw with exactly the law of ``Mi(x)``, adding the independent top-up noise Theorem 5.5
  names when ``Mi``'s query rows are linearly dependent (Remark 3.4).
  :func:`recreation_map` computes its matrices once; :func:`apply_recreation` applies them.
"""

from __future__ import annotations

import numpy as np

from .._rng import as_generator
from .._validation import check_finite_array
from ..mechanisms.linear_gaussian import LinearGaussian
from .answerability import answer_map, equivalent
from .cost import check_mechanism, check_same_n
from .linalg import psd_scale, sym

__all__ = ["residual", "recreate", "recreation_map", "apply_recreation"]


def residual(M: LinearGaussian, M_common: LinearGaussian, *, rtol: float = 1e-9, rank_rtol: float = 1e-12) -> LinearGaussian:
    r"""Algorithm 3: the residual mechanism :math:`M'` with :math:`(M_*, M')` equivalent to ``M``.

    :math:`X = K_M - K_*` is PSD because :math:`M_*` is answerable from ``M`` (Thm. 3.5);
    :math:`B' = [\sqrt{\lambda_j}v_j]^T` over its positive eigenpairs and :math:`\Sigma' = I`,
    so :math:`K_* + B'^TB' = K_M` (Lemma 3.11).  Eigenvalues in ``[-rtol, rank_rtol]`` times
    the scale are rounding and dropped; a more negative one raises ``ValueError``.  The
    residual may release nothing (``m == 0``) when ``M_common`` is already equivalent to ``M``.
    """
    check_mechanism(M, "M")
    check_mechanism(M_common, "M_common")
    n = check_same_n(M, M_common)
    X = sym(M.cost_matrix - M_common.cost_matrix)
    scale = max(psd_scale(M.cost_matrix), psd_scale(M_common.cost_matrix))
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
    return apply_recreation(A, C, omega_common, omega_residual, common.m, residual_mechanism.m, rng)


def recreation_map(target: LinearGaussian, common: LinearGaussian, residual_mechanism: LinearGaussian,
                   *, rtol: float = 1e-9):
    """The matrices ``(A, C)`` used by :func:`recreate`: ``target(x)`` has the law of
    ``A [common(x), residual(x)] + C N(0, I)``.  Compute once when recreating many outputs."""
    for M, name in ((target, "target"), (common, "common"), (residual_mechanism, "residual")):
        check_mechanism(M, name)
    check_same_n(target, common, residual_mechanism)
    source = LinearGaussian.joint(common, residual_mechanism)
    if not equivalent(source, target, rtol=rtol):
        raise ValueError("(common, residual) is not equivalent to target: their cost matrices differ (Lemma 3.11)")
    A, C = answer_map(source, target, rtol=rtol)
    if target.m and np.max(np.abs(C)) <= 1e-12 * np.max(np.abs(target.Sigma)):
        C = None  # independent target rows: no top-up noise
    return A, C


def apply_recreation(A, C, omega_common, omega_residual, m_common: int, m_residual: int, rng):
    """``[omega_common, omega_residual] A^T`` plus ``C``-coloured standard normal noise from ``rng``
    (none when ``C is None``): the output of :func:`recreate` from a :func:`recreation_map`."""
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
