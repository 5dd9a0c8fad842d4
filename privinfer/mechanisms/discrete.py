r"""Integer-valued noise on :math:`\mathbb{Z}^n`: the double geometric (discrete Laplace) and
the discrete Gaussian, with exact samplers and exact log-pmfs.

These are the unconstrained baselines of integer subspace DP (Dharangutte, Gao, Gong, Yu
2023, Sec. 3: with no invariant the generalized Laplace mechanism is the double geometric
mechanism and the generalized Gaussian is the discrete Gaussian).

Laws
----
Double geometric with scale :math:`b > 0` (:math:`a = e^{-1/b}`):

.. math:: p(k) = \frac{1-a}{1+a}\, a^{|k|} = \tanh\!\Big(\frac{1}{2b}\Big)\, e^{-|k|/b},
          \qquad k \in \mathbb{Z}.

(The normalizer: :math:`\sum_k a^{|k|} = 1 + 2a/(1-a) = (1+a)/(1-a)`, and
:math:`(1-a)/(1+a) = \tanh(1/(2b))`.)  With :math:`b = \Delta_1/\epsilon` the mechanism
:math:`y = x + e` is :math:`(\epsilon, 0)`-DP for integer queries of l1 sensitivity
:math:`\Delta_1`: :math:`p(y-x)/p(y-x') = e^{(|y-x'|_1 - |y-x|_1)/b} \le e^{\epsilon}`.

Discrete Gaussian with scale :math:`\sigma` (Canonne, Kamath, Steinke 2020, Def. 1):

.. math:: p(k) = e^{-k^2/(2\sigma^2)} / Z_\sigma, \qquad Z_\sigma = \sum_{k\in\mathbb{Z}} e^{-k^2/(2\sigma^2)}.

:math:`Z_\sigma` is summed directly for :math:`\sigma \le 5` (terms :math:`|k| \le 40\sigma + 40`;
the omitted tail is below :math:`e^{-800}`) and otherwise by Poisson summation,
:math:`Z_\sigma = \sqrt{2\pi}\sigma\,(1 + 2\sum_{m\ge1} e^{-2\pi^2\sigma^2 m^2})` whose
correction is below :math:`e^{-490}` for :math:`\sigma > 5`, i.e. zero in double precision.
With l2 sensitivity :math:`\Delta_2` (integer query) it is :math:`\Delta_2^2/(2\sigma^2)`-zCDP
(CKS 2020, Thm 4 in one dimension; the coordinates are independent and Renyi divergences
of product laws add, so the bound is alpha * sum_i Delta_i^2 / (2 sigma^2)).

Exact sampling
--------------
Releases draw their noise with the exact samplers of :mod:`privinfer.lattice.laws` (Canonne,
Kamath, Steinke 2020, Algorithms 1-3, on exact rational parameters; no floating-point step
touches the law).  The module docstring there states the algorithms.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from .._backend import namespace
from .._validation import check_positive
from ..lattice import GaussianTarget, L1Target
from ..lattice.laws import (
    as_rational,
    bernoulli_exp_neg,
    discrete_gaussian_log_normalizer,
    double_geometric_log_norm,
    sample_discrete_gaussian,
    sample_discrete_laplace,
    sample_double_geometric,
    size_tuple,
)
from .base import AdditiveMechanism, Guarantee, PureDP, ZCDP

__all__ = [
    "as_rational",
    "bernoulli_exp_neg",
    "sample_discrete_laplace",
    "sample_double_geometric",
    "sample_discrete_gaussian",
    "double_geometric_logpmf",
    "discrete_gaussian_logpmf",
    "discrete_gaussian_log_normalizer",
    "DoubleGeometric",
    "DiscreteGaussian",
]

# ---------------------------------------------------------------------------------------------
def double_geometric_logpmf(k, scale):
    r""":math:`\log p(k) = \log\tanh(1/(2b)) - |k|/b` elementwise (NumPy or PyTensor);
    ``-inf`` for non-integer ``k`` (NumPy only; the mechanisms check integrality themselves)."""
    b = float(scale)
    xp = namespace(k)
    c = double_geometric_log_norm(b)
    if xp is np:
        k = np.asarray(k, dtype=float)
        return np.where(k == np.round(k), c - np.abs(k) / b, -np.inf)
    return c - xp.abs(k) / b


def discrete_gaussian_logpmf(k, sigma):
    r""":math:`\log p(k) = -k^2/(2\sigma^2) - \log Z_\sigma` elementwise (NumPy or PyTensor);
    ``-inf`` for non-integer ``k`` (NumPy)."""
    s = float(sigma)
    xp = namespace(k)
    lz = discrete_gaussian_log_normalizer(s)
    if xp is np:
        k = np.asarray(k, dtype=float)
        return np.where(k == np.round(k), -(k * k) / (2 * s * s) - lz, -np.inf)
    return -(k * k) / (2 * s * s) - lz


# ---------------------------------------------------------------------------------------------
class _IntegerAdditive(AdditiveMechanism):
    integer = True
    invariant = None

    def __init__(self, n):
        if not isinstance(n, numbers.Integral) or isinstance(n, bool) or n < 1:
            raise ValueError(f"n must be a positive integer (got {n!r})")
        self._n = int(n)

    @property
    def n(self) -> int:
        return self._n

    #: independent noise per cell: one log-likelihood term per released cell
    loglik_factorization = "cell"

    def _masked_sum(self, e, elementwise, xp):
        s = xp.sum(elementwise, axis=-1)
        ok = self.noise_in_support(e)
        if xp is np:
            return np.where(ok, s, -np.inf) if np.ndim(s) else (float(s) if ok else -np.inf)
        return xp.switch(ok, s, -np.inf)

    def _masked_cells(self, e, elementwise, xp):
        """The per-cell terms, all ``-inf`` for a noise vector outside the support (so they sum
        to :meth:`_masked_sum`)."""
        ok = self.noise_in_support(e)
        if xp is np:
            el = np.broadcast_to(np.asarray(elementwise, dtype=float), np.shape(e))
            return np.where(np.asarray(ok)[..., None], el, -np.inf)
        return xp.switch(xp.shape_padright(ok), elementwise, -np.inf)

    def _cell_logp(self, e, xp):
        """Elementwise log-pmf of the noise (no support check)."""
        raise NotImplementedError

    def noise_logp(self, e):
        xp = namespace(e)
        return self._masked_sum(e, self._cell_logp(e, xp), xp)

    def noise_logp_terms(self, e):
        xp = namespace(e)
        return self._masked_cells(e, self._cell_logp(e, xp), xp)


class DoubleGeometric(_IntegerAdditive):
    r"""Double geometric (discrete Laplace) mechanism on :math:`\mathbb{Z}^n`: ``y = x + e``,
    :math:`e_i` iid with :math:`p(k) = \frac{1-a}{1+a}a^{|k|}`, :math:`a = e^{-1/b}`.

    Parameters
    ----------
    n : int
        Length of the released vector.
    epsilon : float, optional
        Privacy loss; then the scale is :math:`b = \Delta_1/\epsilon` (exact rational).
    scale : float or Fraction, optional
        The scale :math:`b` directly (give exactly one of ``epsilon`` and ``scale``).
    sensitivity : int
        l1 sensitivity :math:`\Delta_1` of the integer query (default 1).

    Notes
    -----
    ``logp(y, x)`` is exact (normalized): :math:`n\log\tanh(1/(2b)) - \|y-x\|_1/b`, ``-inf`` if
    ``y - x`` is not integer.  Guarantee: :math:`(\Delta_1/b, 0)`-DP (the integer subspace
    generalized Laplace with no invariant, Dharangutte et al. 2023, Sec. 3.2).
    """

    logp_constant_dropped = ""

    def __init__(self, n, epsilon=None, *, scale=None, sensitivity=1):
        super().__init__(n)
        if (epsilon is None) == (scale is None):
            raise ValueError("give exactly one of epsilon and scale")
        self.sensitivity = as_rational(sensitivity, "sensitivity")
        if scale is not None:
            self.scale = as_rational(scale, "scale")
        else:
            self.scale = self.sensitivity / as_rational(epsilon, "epsilon")
        self.epsilon = float(self.sensitivity / self.scale)

    @property
    def a(self) -> float:
        """Geometric ratio :math:`a = e^{-1/b}`."""
        return math.exp(-1.0 / float(self.scale))

    @property
    def guarantee(self) -> Guarantee:
        return PureDP(
            self.epsilon, sensitivity=float(self.sensitivity),
            relation="integer x, x' with ||x - x'||_1 <= sensitivity (no invariant)",
            reference="Dharangutte, Gao, Gong, Yu 2023, Sec. 3.2 (generalized Laplace with vacuous invariant)",
        )

    def sample_noise(self, size=(), rng=None) -> np.ndarray:
        size = size_tuple(size)
        return sample_discrete_laplace(self.scale, size + (self.n,), rng)

    def _cell_logp(self, e, xp):
        b = float(self.scale)
        return double_geometric_log_norm(b) - xp.abs(e) / b

    def local_logp(self):
        """Noise log-density as a :class:`~privinfer.lattice.LocalLogDensity`: per cell ``-|e_i|/b``."""
        return L1Target(1.0 / float(self.scale))


class DiscreteGaussian(_IntegerAdditive):
    r"""Discrete Gaussian mechanism on :math:`\mathbb{Z}^n` (Canonne, Kamath, Steinke 2020):
    ``y = x + e``, :math:`e_i` iid with :math:`p(k) = e^{-k^2/(2\sigma^2)}/Z_\sigma`.

    ``sigma`` is held as an exact rational (a float is read as its printed decimal);
    ``logp`` is exact (normalized, :math:`Z_\sigma` as in the module docstring) and ``-inf``
    if ``y - x`` is not integer.  Guarantee: :math:`\rho = \Delta_2^2/(2\sigma^2)`-zCDP
    (CKS 2020, Thm 4; Renyi divergences of the independent coordinates add).
    """

    logp_constant_dropped = ""

    def __init__(self, n, sigma, *, sensitivity=1):
        super().__init__(n)
        self.sigma = as_rational(sigma, "sigma")
        self.sigma2 = self.sigma**2
        self.sensitivity = float(check_positive(float(sensitivity), "sensitivity"))

    @property
    def guarantee(self) -> Guarantee:
        s = float(self.sigma)
        return ZCDP(
            self.sensitivity**2 / (2 * s * s), sigma=s, sensitivity=self.sensitivity,
            relation="integer x, x' with ||x - x'||_2 <= sensitivity (no invariant)",
            reference="Canonne, Kamath, Steinke 2020, Thm 4 (coordinates independent)",
        )

    def sample_noise(self, size=(), rng=None) -> np.ndarray:
        size = size_tuple(size)
        return sample_discrete_gaussian(None, size + (self.n,), rng, sigma2=self.sigma2)

    def _cell_logp(self, e, xp):
        s = float(self.sigma)
        return -(e * e) / (2 * s * s) - discrete_gaussian_log_normalizer(s)

    def local_logp(self):
        """Noise log-density as a :class:`~privinfer.lattice.LocalLogDensity`: per cell ``-e_i^2/(2 sigma^2)``."""
        return GaussianTarget(float(self.sigma))
