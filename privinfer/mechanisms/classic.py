r"""Classic additive mechanisms without invariants: the Gaussian and the Laplace mechanism.

They are the baselines from which the subspace mechanisms are built (projection framework,
Subspace DP full paper, Thm 10 / Cor 11) and the reference for error comparisons.

Gaussian mechanism (Subspace DP full paper, Lemma 13; Dwork and Roth 2014, Thm A.1)
    :math:`y = x + e`, :math:`e \sim N(0, \sigma^2 I_n)` with
    :math:`\sigma = c_{\epsilon,\delta}\,\Delta_2`,
    :math:`c_{\epsilon,\delta} = \epsilon^{-1}(1 + \sqrt{1 + \ln(1/\delta)})`; (eps, delta)-DP.
    :math:`\log p(y\mid x) = -\|y-x\|^2/(2\sigma^2) - \tfrac n2\log(2\pi\sigma^2)`.

Laplace mechanism (Subspace DP full paper, Lemma 16; Dwork et al. 2006)
    :math:`y = x + e`, :math:`e_i \overset{iid}{\sim} \mathrm{Lap}(b)`, :math:`b = \Delta_1/\epsilon`;
    (eps, 0)-DP.  :math:`\log p(y\mid x) = -\|y-x\|_1/b - n\log(2b)`.

Both ``logp`` are exact (no constant dropped) and accept NumPy arrays or PyTensor tensors.
"""

from __future__ import annotations

import numpy as np

from .. import accounting
from .._backend import namespace
from .._rng import as_generator
from .._validation import check_epsilon, check_positive
from ..guarantees import typed_guarantee
from .base import AdditiveMechanism, Guarantee

__all__ = ["Gaussian", "Laplace", "gaussian_noise_logp", "laplace_noise_logp", "calibrated_sigma", "calibrated_scale"]


def _check_n(n) -> int:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or int(n) < 1:
        raise ValueError(f"n (output length) must be a positive integer, got {n!r}")
    return int(n)


def gaussian_noise_logp_cells(z, sigma: float):
    r"""Elementwise :math:`N(0,\sigma^2)` log density of ``z`` (exact):
    :math:`-z_i^2/(2\sigma^2) - \tfrac12\log(2\pi\sigma^2)`."""
    return -(z * z) / (2.0 * sigma * sigma) - 0.5 * np.log(2.0 * np.pi * sigma * sigma)


def gaussian_noise_logp(z, sigma: float, xp=None):
    r"""Sum over the last axis of the :math:`N(0,\sigma^2)` log density of ``z`` (exact)."""
    xp = xp or namespace(z)
    return xp.sum(gaussian_noise_logp_cells(z, sigma), axis=-1)


def laplace_noise_logp_cells(z, scale: float, xp=None):
    r"""Elementwise :math:`\mathrm{Lap}(b)` log density of ``z`` (exact): :math:`-|z_i|/b - \log(2b)`."""
    xp = xp or namespace(z)
    return -xp.abs(z) / scale - np.log(2.0 * scale)


def laplace_noise_logp(z, scale: float, xp=None):
    r"""Sum over the last axis of the :math:`\mathrm{Lap}(b)` log density of ``z`` (exact)."""
    xp = xp or namespace(z)
    return xp.sum(laplace_noise_logp_cells(z, scale, xp), axis=-1)


def calibrated_sigma(epsilon, delta, sensitivity, sigma, what):
    r"""Gaussian noise sd from either (epsilon, delta, sensitivity) or ``sigma`` directly.

    :math:`\sigma = c_{\epsilon,\delta}\Delta_2` (Subspace DP full paper, Lemma 13).  Returns
    ``(sigma, params)`` with ``params`` the calibration inputs, or ``None`` when ``sigma`` was
    given.  ``what`` names the mechanism in the error messages.
    """
    if sigma is not None:
        if any(v is not None for v in (epsilon, delta, sensitivity)):
            raise ValueError(f"{what}: give either sigma or (epsilon, delta, sensitivity), not both")
        return check_positive(sigma, "sigma"), None
    if epsilon is None or delta is None or sensitivity is None:
        raise ValueError(f"{what}: give epsilon, delta and sensitivity (or sigma=)")
    s = accounting.gaussian_sigma(epsilon, delta, sensitivity)
    return s, {"epsilon": float(epsilon), "delta": float(delta), "sensitivity": float(sensitivity)}


def calibrated_scale(epsilon, sensitivity, scale, what):
    r"""Laplace scale from either (epsilon, sensitivity) or ``scale`` directly.

    :math:`b = \Delta_1/\epsilon` (Subspace DP full paper, Lemma 16).  Returns ``(scale,
    params)`` with ``params`` ``None`` when ``scale`` was given.
    """
    if scale is not None:
        if epsilon is not None or sensitivity is not None:
            raise ValueError(f"{what}: give either scale or (epsilon, sensitivity), not both")
        return check_positive(scale, "scale"), None
    if epsilon is None or sensitivity is None:
        raise ValueError(f"{what}: give epsilon and sensitivity (or scale=)")
    eps = check_epsilon(epsilon)
    d1 = check_positive(sensitivity, "sensitivity")
    return d1 / eps, {"epsilon": eps, "sensitivity": d1}


class Gaussian(AdditiveMechanism):
    r"""Classic spherical Gaussian mechanism :math:`y = x + N(0, \sigma^2 I_n)` (Lemma 13).

    Parameters
    ----------
    n : int
        length of the query answer.
    epsilon, delta, sensitivity
        privacy parameters and the l2 sensitivity :math:`\Delta_2`; then
        :math:`\sigma = c_{\epsilon,\delta}\Delta_2`.
    sigma : float, keyword-only
        give the noise sd directly instead (the guarantee is then reported as rho-zCDP per unit
        l2 sensitivity, :math:`\rho = 1/(2\sigma^2)`, and mu-GDP with :math:`\mu = 1/\sigma`).
    """

    def __init__(self, n, epsilon=None, delta=None, sensitivity=None, *, sigma=None):
        self._n = _check_n(n)
        self.sigma, self._params = calibrated_sigma(epsilon, delta, sensitivity, sigma, "Gaussian")

    @property
    def n(self):
        return self._n

    @property
    def guarantee(self):
        if self._params is not None:
            return typed_guarantee(
                "approx", "(eps, delta)-DP",
                dict(self._params, sigma=self.sigma),
                "neighbouring inputs with ||x - x'||_2 <= sensitivity",
                "Subspace DP full paper, Lemma 13",
            )
        return Guarantee(
            "rho-zCDP / mu-GDP per unit l2 sensitivity",
            {"sigma": self.sigma, "rho": 1.0 / (2 * self.sigma**2), "mu": 1.0 / self.sigma},
            "neighbouring inputs with ||x - x'||_2 <= 1",
            "Bun and Steinke 2016, Prop. 1.6; Dong, Roth and Su 2022, Thm 2.7",
        )

    def sample_noise(self, size=(), rng=None):
        rng = as_generator(rng)
        return self.sigma * rng.standard_normal(tuple(size) + (self._n,))

    #: independent noise per cell: one log-likelihood term per released cell
    loglik_factorization = "cell"

    def noise_logp(self, e):
        return gaussian_noise_logp(e, self.sigma)

    def noise_logp_terms(self, e):
        return gaussian_noise_logp_cells(e, self.sigma)


class Laplace(AdditiveMechanism):
    r"""Classic Laplace mechanism :math:`y = x + e`, :math:`e_i \sim \mathrm{Lap}(\Delta_1/\epsilon)`
    (Lemma 16); or give ``scale=`` b directly (then (1/b)-DP per unit l1 sensitivity)."""

    def __init__(self, n, epsilon=None, sensitivity=None, *, scale=None):
        self._n = _check_n(n)
        self.scale, self._params = calibrated_scale(epsilon, sensitivity, scale, "Laplace")

    @property
    def n(self):
        return self._n

    @property
    def guarantee(self):
        if self._params is not None:
            return typed_guarantee(
                "pure", "(eps, 0)-DP",
                dict(self._params, scale=self.scale),
                "neighbouring inputs with ||x - x'||_1 <= sensitivity",
                "Subspace DP full paper, Lemma 16",
            )
        return Guarantee(
            "(eps, 0)-DP per unit l1 sensitivity",
            {"scale": self.scale, "epsilon": 1.0 / self.scale},
            "neighbouring inputs with ||x - x'||_1 <= 1",
            "Subspace DP full paper, Lemma 16",
        )

    def sample_noise(self, size=(), rng=None):
        rng = as_generator(rng)
        return rng.laplace(0.0, self.scale, tuple(size) + (self._n,))

    #: independent noise per cell: one log-likelihood term per released cell
    loglik_factorization = "cell"

    def noise_logp(self, e):
        return laplace_noise_logp(e, self.scale)

    def noise_logp_terms(self, e):
        return laplace_noise_logp_cells(e, self.scale)
