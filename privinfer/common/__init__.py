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

Modules, one per concept
------------------------

``linalg``
    symmetric PSD linear algebra (eigenpairs, pseudo-inverse, roots, scale)
``cost``
    mechanisms through their cost matrices; :func:`standardize` (Alg. 2)
``answerability``
    answerable / equivalent (Sec. 3.1, Thm. 3.5) and the answering map
``sdp``
    min trace s.t. X >= P_i: Stott's closed form (Thm. 5.4), interior point (Thm. 5.3)
``maximal``
    the maximally common mechanism (Sec. 5.1, Alg. 1, Thm. 5.2-5.4)
``recreation``
    residual (Alg. 3, Lemma 3.11) and recreate (Alg. 4, Thm. 5.5)
``estimation``
    best linear unbiased answers to queries and their noise variances (Sec. 6.2)
``selection``
    SNR bounds and the nested-analysis choice (Sec. 6.2, 7.5.3)
``buckets``
    bucketization query matrices and the DHC age buckets (Sec. 7.5)
"""

from .answerability import answer_map, answerable, equivalent
from .buckets import DHC_AGE_EDGES, bucket_matrix
from .cost import standardize
from .estimation import estimate, query_noise_variance
from .linalg import RTOL  # noqa: F401  (reachable as privinfer.common.RTOL)
from .maximal import common_mechanism, intersect_row_spaces
from .recreation import recreate, recreation_map, residual
from .sdp import SDPInfo, min_trace_upper_bound, stott_bound  # noqa: F401  (SDPInfo: see min_trace_upper_bound)
from .selection import NestedSelection, SelectionResult, SNRBounds, prefers_secondary, snr_bounds

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
