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

__all__ = ["A_SWITCH", "stirling_correction", "lgamma_ratio_series", "lgamma_ratio", "digamma_diff",
           "lgamma_ratio_scalar", "digamma_diff_scalar"]

#: Smallest ``a`` at which the series are used.
A_SWITCH = 10.0

#: Below this ``1/a`` overflows.
_TINY = 1.0 / np.finfo(float).max


def stirling_correction(z):
    """:math:`c(z)` (module docstring): arithmetic only, so NumPy arrays and PyTensor tensors alike."""
    z2 = z * z
    z3 = z * z2
    return 1.0 / (12.0 * z) - 1.0 / (360.0 * z3) + 1.0 / (1260.0 * z3 * z2) - 1.0 / (1680.0 * z3 * z2 * z2)


@numba.njit(cache=True)
def _stirling_correction_scalar(z):
    """:math:`c(z)` for a scalar, in Horner form in :math:`1/z` (one division; the same
    polynomial as :func:`stirling_correction`, about 30% faster per element)."""
    r = 1.0 / z
    r2 = r * r
    return r * (1.0 / 12.0 - r2 * (1.0 / 360.0 - r2 * (1.0 / 1260.0 - r2 * (1.0 / 1680.0))))


def lgamma_ratio_series(a, x, log1p, log):
    r"""Stirling's series for :math:`\log\Gamma(a + x) - \log\Gamma(a)` (module docstring),
    valid for ``a, a + x >= A_SWITCH``; ``log1p`` and ``log`` of the array library at hand (NumPy,
    PyTensor), so one formula serves both."""
    return (a - 0.5) * log1p(x / a) + x * log(a + x) - x + stirling_correction(a + x) - stirling_correction(a)


def _e(z):
    z2 = z * z
    z4 = z2 * z2
    return -0.5 / z - 1.0 / (12.0 * z2) + 1.0 / (120.0 * z4) - 1.0 / (252.0 * z4 * z2) + 1.0 / (240.0 * z4 * z4)


@numba.njit(cache=True)
def lgamma_ratio_scalar(a, x):
    r""":math:`\log\Gamma(a + x) - \log\Gamma(a)` for scalars (``a > 0``, ``a + x > 0``; ``x`` may
    be negative), compiled for the lattice kernels."""
    if a < A_SWITCH or a + x < A_SWITCH:
        return math.lgamma(a + x) - math.lgamma(a)
    return ((a - 0.5) * math.log1p(x / a) + x * math.log(a + x) - x
            + _stirling_correction_scalar(a + x) - _stirling_correction_scalar(a))


@numba.njit(cache=True)
def _e_scalar(z):
    """:math:`e(z)` for a scalar, in Horner form in :math:`1/z` (the polynomial of :func:`_e`)."""
    r = 1.0 / z
    r2 = r * r
    return r * (-0.5 + r * (-1.0 / 12.0 + r2 * (1.0 / 120.0 + r2 * (-1.0 / 252.0 + r2 * (1.0 / 240.0)))))


@numba.njit(cache=True)
def _digamma_scalar(z):
    r""":math:`\psi(z)`, ``z > 0``: the recurrence :math:`\psi(z) = \psi(z + 1) - 1/z` up to
    ``z >= A_SWITCH``, then :math:`\log z + e(z)` (truncation error below 1e-12 there)."""
    acc = 0.0
    while z < A_SWITCH:
        acc -= 1.0 / z
        z += 1.0
    return acc + math.log(z) + _e_scalar(z)


@numba.njit(cache=True)
def digamma_diff_scalar(a, x):
    r""":math:`\psi(a + x) - \psi(a)` for scalars (``a > 0``, ``x >= 0``), compiled: exactly 0 at
    ``x = 0``, and infinite (the correctly rounded value) for a subnormal ``a`` whose reciprocal
    overflows and ``x >= 1``, where the recurrence would give ``inf - inf``."""
    if a >= A_SWITCH:
        return math.log1p(x / a) + _e_scalar(a + x) - _e_scalar(a)
    if not (a > 0.0):
        return math.nan if (x == 0.0 or a != a) else math.inf
    if x == 0.0:
        return 0.0
    if a < _TINY and x >= 1.0:
        return math.inf       # at least 1/a - 1/(a + x): beyond the largest double
    return _digamma_scalar(a + x) - _digamma_scalar(a)


@numba.vectorize(["float64(float64, float64)"], cache=True)
def _lgamma_ratio_ufunc(a, x):
    return lgamma_ratio_scalar(a, x)


@numba.vectorize(["float64(float64, float64)"], cache=True)
def _digamma_diff_ufunc(a, x):
    return digamma_diff_scalar(a, x)


def lgamma_ratio(a, x):
    r""":math:`\log\Gamma(a + x) - \log\Gamma(a)` elementwise, ``a > 0``, ``x >= 0`` (a compiled
    ufunc: the series or the direct difference per element, whichever applies)."""
    return _lgamma_ratio_ufunc(np.asarray(a, dtype=float), np.asarray(x, dtype=float))


def digamma_diff(a, x):
    r""":math:`\psi(a + x) - \psi(a)` elementwise, ``a > 0``, ``x >= 0`` (a compiled ufunc)."""
    return _digamma_diff_ufunc(np.asarray(a, dtype=float), np.asarray(x, dtype=float))
