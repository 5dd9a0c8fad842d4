r"""Zero-waste decisions from the common mechanism: SNR bounds and nested analyses.

Xiao, Wang, Zhang and Kifer, *Answering Private Linear Queries Adaptively using the Common
Mechanism* (PVLDB), Sec. 3.4, 6.2 and 7.5.3.  Any decision computed from the common
mechanism's output is post-processing, so it costs no privacy; the chosen analysis is then
completed with its residual and recreated exactly (:mod:`privinfer.common.recreation`).

* :func:`snr_bounds` (Sec. 6.2): for each primary query ``i`` the interval
  :math:`L_i, U_i = \widehat{(Qx)}_i \mp z\,\mathrm{sd}_i` from the common mechanism's best
  linear unbiased estimate, and the signal-to-noise ratios :math:`L_i/\sigma_i`,
  :math:`U_i/\sigma_i` a candidate mechanism with noise sd :math:`\sigma_i` would have
  (:class:`SNRBounds`).
* :func:`prefers_secondary` (Sec. 6.2): the secondary (finer) analysis is good enough if at
  least ``fraction`` of the primary queries have ``SNR_Lower >= snr`` under it.
* :class:`NestedSelection` (Sec. 7.5.3): the sequential version over nested analyses (Total /
  Age4 / Age9 / Age23 sex-by-age histograms); whatever is chosen, the released mechanisms
  jointly cost exactly the chosen analysis.  Its docstring details the plan.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .._rng import as_generator
from .._validation import check_finite_array, check_positive
from ..mechanisms.linear_gaussian import LinearGaussian
from .cost import check_mechanism, check_same_n
from .estimation import check_answerable_queries, estimate, estimator, query_noise_variance
from .linalg import RTOL
from .maximal import common_mechanism
from .recreation import apply_recreation, recreation_map, residual

__all__ = ["SNRBounds", "snr_bounds", "prefers_secondary", "SelectionResult", "NestedSelection"]


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
            check_mechanism(M, f"mechanism {i}")
        check_same_n(*mechs)
        for k in range(len(mechs) - 1):
            try:
                check_answerable_queries(mechs[k + 1], mechs[k].B, RTOL)
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
        self._estimators = [estimator(commons[k], mechs[k].B) for k in range(K - 1)]
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
            omega = apply_recreation(A, C, omega, ws, self.commons[k].m, S.m, rng)
            k += 1
        F = self.final_residuals[k]
        wf = F.release(x, rng=rng)
        if F.m:
            released.append((f"final residual {k}", F, wf))
        A, C = self._final_maps[k]
        out = apply_recreation(A, C, omega, wf, self.commons[k].m, F.m, rng)
        return SelectionResult(choice=k, output=out, released=released, bounds=bounds)
