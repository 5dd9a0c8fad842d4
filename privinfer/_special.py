r"""Differences of log-gamma and digamma functions that stay accurate for large arguments.

The Dirichlet-multinomial's log mass holds :math:`\log\Gamma(a + x) - \log\Gamma(a)` with
:math:`a = \kappa p` and, as the overdispersion vanishes, :math:`\kappa \to \infty`: at
:math:`a = 10^{10}` each log-gamma is about :math:`2 \times 10^{11}` and their difference
computed directly loses five digits (errors near :math:`10^{-5}` per cell, summed over tens of
thousands of cells -- enough to break Metropolis ratios and NUTS's energy).  For
:math:`a \ge` :data:`A_SWITCH` the differences are formed from Stirling's series,

.. math:: \log\Gamma(a + x) - \log\Gamma(a) = (a - \tfrac12)\,\mathrm{log1p}(x/a)
          + x \log(a + x) - x + c(a + x) - c(a),\quad
          c(z) = \frac{1}{12 z} - \frac{1}{360 z^3} + \frac{1}{1260 z^5} - \frac{1}{1680 z^7},

.. math:: \psi(a + x) - \psi(a) = \mathrm{log1p}(x/a) + e(a + x) - e(a),\quad
          e(z) = -\frac{1}{2z} - \frac{1}{12 z^2} + \frac{1}{120 z^4} - \frac{1}{252 z^6}
          + \frac{1}{240 z^8},

whose truncation errors are below :math:`10^{-11}` there (Abramowitz and Stegun 6.1.41,
6.3.18); below it the functions are used directly.
"""

from __future__ import annotations

import math

import numba
import numpy as np
from scipy.special import digamma, gammaln

__all__ = ["A_SWITCH", "stirling_correction", "lgamma_ratio_series", "lgamma_ratio", "digamma_diff",
           "lgamma_ratio_scalar"]

#: Smallest ``a`` at which the series are used.
A_SWITCH = 10.0


def stirling_correction(z):
    """:math:`c(z)` (module docstring): arithmetic only, so NumPy arrays and PyTensor tensors alike."""
    z2 = z * z
    z3 = z * z2
    return 1.0 / (12.0 * z) - 1.0 / (360.0 * z3) + 1.0 / (1260.0 * z3 * z2) - 1.0 / (1680.0 * z3 * z2 * z2)


_stirling_correction_scalar = numba.njit(cache=True)(stirling_correction)


def lgamma_ratio_series(a, x, log1p, log):
    r"""Stirling's series for :math:`\log\Gamma(a + x) - \log\Gamma(a)` (module docstring),
    valid for ``a, a + x >= A_SWITCH``; ``log1p`` and ``log`` of the array library at hand (NumPy,
    PyTensor), so one formula serves both."""
    return (a - 0.5) * log1p(x / a) + x * log(a + x) - x + stirling_correction(a + x) - stirling_correction(a)


def _e(z):
    z2 = z * z
    z4 = z2 * z2
    return -0.5 / z - 1.0 / (12.0 * z2) + 1.0 / (120.0 * z4) - 1.0 / (252.0 * z4 * z2) + 1.0 / (240.0 * z4 * z4)


def _by_size(a, x, series, direct):
    """``series(a, x)`` where ``a >= A_SWITCH``, ``direct(a, x)`` elsewhere (elementwise)."""
    a = np.asarray(a, dtype=float)
    x = np.asarray(x, dtype=float)
    big = a >= A_SWITCH
    with np.errstate(divide="ignore", invalid="ignore"):
        out = series(np.where(big, a, A_SWITCH), x)
    return np.where(big, out, direct(a, x))


def lgamma_ratio(a, x):
    r""":math:`\log\Gamma(a + x) - \log\Gamma(a)` elementwise, ``a > 0``, ``x >= 0``."""
    return _by_size(a, x, lambda a, x: lgamma_ratio_series(a, x, np.log1p, np.log),
                    lambda a, x: gammaln(a + x) - gammaln(a))


def digamma_diff(a, x):
    r""":math:`\psi(a + x) - \psi(a)` elementwise, ``a > 0``, ``x >= 0``."""
    return _by_size(a, x, lambda a, x: np.log1p(x / a) + _e(a + x) - _e(a),
                    lambda a, x: digamma(a + x) - digamma(a))


@numba.njit(cache=True)
def lgamma_ratio_scalar(a, x):
    r""":math:`\log\Gamma(a + x) - \log\Gamma(a)` for scalars (``a > 0``, ``a + x > 0``; ``x`` may
    be negative), compiled for the lattice kernels."""
    if a < A_SWITCH or a + x < A_SWITCH:
        return math.lgamma(a + x) - math.lgamma(a)
    return ((a - 0.5) * math.log1p(x / a) + x * math.log(a + x) - x
            + _stirling_correction_scalar(a + x) - _stirling_correction_scalar(a))
