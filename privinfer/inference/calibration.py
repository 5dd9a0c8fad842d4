r"""Coverage of equal-tailed posterior intervals of integer quantities, honest about ties.

For a count :math:`X` with a discrete posterior :math:`F`, the equal-tailed interval
:math:`[l, h]` at level :math:`1 - 2a` has :math:`l = \min\{k : F(k) \ge a\}` and
:math:`h = \min\{k : F(k) \ge 1 - a\}` (the quantiles of the draws by the inverted cdf).  Its
posterior mass :math:`F(h) - F(l - 1)` is at least :math:`1 - 2a` and, for small counts, much
more: a cell whose posterior is about Poisson(5) has the 90% interval :math:`[2, 9]`, of mass 0.93.
So a perfectly calibrated posterior of small counts *over*-covers at the nominal level, and the
share of true counts inside the intervals does not tell calibration from width.

:func:`interval_coverage` reports, over a set of quantities with draws and true values:

* ``closed``: the share of true values inside :math:`[l, h]`;
* ``expected``: the mean posterior mass of :math:`[l, h]`, what ``closed`` equals in
  expectation when the truth is distributed as the posterior (calibration);
* ``randomized``: the coverage of the randomized interval of mass exactly :math:`1 - 2a`, which
  keeps the interior :math:`(l, h)` and includes each endpoint with the fraction of its atom that
  lies inside the central :math:`1 - 2a`: a true value at :math:`l < h` counts
  :math:`(F(l) - a)/P(X = l)`, at :math:`h > l` counts :math:`(1 - a - F(h - 1))/P(X = h)`, at
  :math:`l = h` counts :math:`(1 - 2a)/P(X = l)`.  Under calibration its expectation is exactly
  :math:`1 - 2a` for every posterior, so it is comparable with a continuous interval's coverage.
  This is the randomized probability integral transform of Czado, Gneiting and Held
  ("Predictive model assessment for count data", Biometrics 65, 2009, Sec. 2.1) read at the two
  tails.

For continuous quantities (no ties) the three agree up to the draws' Monte Carlo error.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["IntervalCoverage", "interval_coverage"]


@dataclass(frozen=True)
class IntervalCoverage:
    """Coverage of equal-tailed intervals (module docstring): ``closed``, ``expected`` and
    ``randomized`` shares, the mean width ``width`` (:math:`h - l`) and the number of quantities
    ``n``."""

    closed: float
    expected: float
    randomized: float
    width: float
    n: int


def interval_coverage(draws, truth, level: float = 0.9, *, block: int = 4096) -> IntervalCoverage:
    """Coverage of the equal-tailed ``level`` intervals of ``draws`` ``(S, m)`` (posterior draws
    of ``m`` quantities, e.g. cells, integer or not) for the true values ``truth`` ``(m,)``; the
    module docstring defines the three shares.  Worked in blocks of ``block`` quantities, so
    memory stays at a few ``S x block`` arrays."""
    draws = np.asarray(draws)
    truth = np.asarray(truth)
    if draws.ndim != 2 or truth.shape != (draws.shape[1],):
        raise ValueError(f"draws must be (S, m) and truth (m,); got {draws.shape} and {truth.shape}")
    if draws.shape[0] < 2 or draws.shape[1] == 0:
        raise ValueError("interval_coverage needs at least 2 draws of at least 1 quantity")
    if not (0.0 < level < 1.0):
        raise ValueError("level must be in (0, 1)")
    a = (1.0 - level) / 2.0
    closed = expected = randomized = width = 0.0
    for lo_i in range(0, draws.shape[1], block):
        d = draws[:, lo_i:lo_i + block]
        t = truth[lo_i:lo_i + block]
        lo, hi = np.quantile(d, [a, 1.0 - a], axis=0, method="inverted_cdf")
        below_lo, at_lo = (d < lo).mean(0), (d == lo).mean(0)
        below_hi, at_hi = (d < hi).mean(0), (d == hi).mean(0)
        inside = (t >= lo) & (t <= hi)
        closed += float(inside.sum())
        expected += float(np.sum(below_hi + at_hi - below_lo))
        w = ((t > lo) & (t < hi)).astype(float)
        same = lo == hi
        with np.errstate(divide="ignore", invalid="ignore"):
            w = np.where((t == lo) & ~same, (below_lo + at_lo - a) / at_lo, w)
            w = np.where((t == hi) & ~same, (1.0 - a - below_hi) / at_hi, w)
            w = np.where((t == lo) & same, level / at_lo, w)
        randomized += float(np.sum(np.clip(w, 0.0, 1.0)))
        width += float(np.sum(hi - lo))
    m = draws.shape[1]
    return IntervalCoverage(closed / m, expected / m, randomized / m, width / m, m)
