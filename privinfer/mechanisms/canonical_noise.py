r"""Canonical noise distributions (CND) and the additive mechanisms that use them.

A *canonical noise distribution* for a symmetric nontrivial tradeoff function ``f``
(Awan and Vadhan 2023, Def. 3.1; Cho and Awan, Semi-DP paper, Sec. 5.3, Def. 35) is a
continuous cdf ``F`` such that, with ``N ~ F`` and a statistic of sensitivity ``Delta``,
``T(X) + Delta N`` is ``f``-DP and the bound is tight:
``T(F(.), F(. - 1))(alpha) = F(F^{-1}(1 - alpha) - 1) = f(alpha)`` (the most powerful test of
``N`` against ``N + 1`` at level alpha rejects for large values), and ``F(x) = 1 - F(-x)``.

This module provides

* :class:`CanonicalNoise` -- the generic construction of Lemma 36 (Awan and Vadhan 2023,
  Thm 3.9) for any symmetric nontrivial ``f`` (a
  :class:`~privinfer.mechanisms.tradeoff.TradeoffFunction`);
* :class:`GaussianCanonicalNoise` -- ``N(0, 1/mu^2)``, a CND for ``mu``-GDP;
* :func:`canonical_noise` -- the CND used throughout: :class:`~privinfer.mechanisms.tulap.Tulap`
  for ``(eps, delta)``, Gaussian for ``mu``-GDP, Lemma 36 otherwise;
* mechanisms following the project protocol: :class:`TulapMechanism`,
  :class:`GaussianCanonicalMechanism`, :class:`CanonicalNoiseMechanism` (classic DP,
  ``invariant = None``).  The Semi-DP release of a 2x2 table with this noise is
  :class:`~privinfer.mechanisms.two_by_two.SemiPrivateTwoByTwo`.

Derivation notes (the paper's text extraction lost several ``1 -`` signs)
------------------------------------------------------------------------
Lemma 36 as printed reads ``F(x) = f(F(x + 1))`` for ``x < -1/2``.  Since ``f`` is decreasing,
that recursion would make ``F`` non-monotone; the construction of Awan and Vadhan (2023,
Thm 3.9) is

.. math::

    F_f(x) = \begin{cases} f(1 - F_f(x + 1)) & x < -1/2,\\
             c(1/2 - x) + (1 - c)(x + 1/2) & -1/2 \le x \le 1/2,\\
             1 - f(F_f(x - 1)) & x > 1/2, \end{cases}

and continuity at ``x = -1/2`` (``F(-1/2) = c``, ``F(1/2) = 1 - c``) forces
``c = f(1 - F(1/2)) = f(c)``: ``c`` is the fixed point of ``f`` in ``[0, 1/2)``.  Checks:
for ``f_{eps,0}`` the fixed point ``1 - e^eps c = c`` gives ``c = b/(1+b)``, the Tulap cdf at
``-1/2``; for ``f_{eps,delta}`` it gives ``c = (1-delta) b/(1+b)``, which equals the truncated
Tulap value ``(b/(1+b) - q/2)/(1-q)`` for the ``q`` above; for ``G_mu``,
``c = Phi(-mu/2)``.  Property 3 of Def. 35 likewise reads
``T(F(.), F(. - 1))(alpha) = F(F^{-1}(1 - alpha) - 1)``.  The tests check all of these
numerically (construction = Tulap; tradeoff of the construction = f).

Density of the construction: for ``x < -1/2`` with ``u = F(x + 1)``,
``F'(x) = |f'(1 - u)| F'(x + 1)``; on the centre ``F' = 1 - 2c``.  So with
``k = ceil(-1/2 - x)`` steps, ``log F'(x) = log(1 - 2c) + sum_j log|f'(1 - u_j)|`` over the
intermediate values ``u_j = F(x + j)``, ``j = 1..k``; for ``x > 1/2`` use ``F'(x) = F'(-x)``.
Inverse: ``F^{-1}(v) = F^{-1}(1 - f(v)) - 1`` for ``v < c`` (``f`` is an involution on the
part of ``[0,1]`` where it is strictly decreasing, because it is symmetric), the centre is
linear, and ``F^{-1}(v) = -F^{-1}(1 - v)`` for ``v > 1 - c``.
"""

from __future__ import annotations

import math
import numbers

import numpy as np
from scipy import special

from .._backend import as_array, namespace
from .._rng import as_generator
from .._validation import check_positive
from .base import AdditiveMechanism, Guarantee
from .tradeoff import TradeoffFunction
from .tulap import Tulap

__all__ = [
    "CanonicalNoise",
    "GaussianCanonicalNoise",
    "canonical_noise",
    "noise_description",
    "TulapMechanism",
    "GaussianCanonicalMechanism",
    "CanonicalNoiseMechanism",
]


class CanonicalNoise:
    r"""The canonical noise distribution ``F_f`` of Lemma 36 (Awan and Vadhan 2023, Thm 3.9).

    See the module docstring for the recursion, its density and inverse.  Works for any
    :class:`TradeoffFunction`; sampling is by inverse transform.  ``logp`` is NumPy only (the
    number of recursion steps depends on the value); use :class:`Tulap` or
    :class:`GaussianCanonicalNoise` inside PyTensor graphs.

    For ``f_{eps,delta}`` this *is* ``Tulap(0, e^{-eps}, q)``; for ``G_mu`` it is a CND that
    differs from ``N(0, 1/mu^2)`` (CNDs of ``G_mu`` are not unique; both satisfy Def. 35).
    """

    def __init__(self, tradeoff: TradeoffFunction, max_steps: int = 100_000):
        if not isinstance(tradeoff, TradeoffFunction):
            raise TypeError("tradeoff must be a TradeoffFunction (see eps_delta_tradeoff, gaussian_tradeoff)")
        c = float(tradeoff.fixed_point)
        if not 0.0 <= c < 0.5:
            raise ValueError("the tradeoff function's fixed point must lie in [0, 1/2) (nontrivial f)")
        self.tradeoff = tradeoff
        self.c = c
        self.max_steps = int(max_steps)
        self.m = 0.0

    def __repr__(self) -> str:  # pragma: no cover - cosmetic
        return f"CanonicalNoise({self.tradeoff.name}, {dict(self.tradeoff.parameters)})"

    def _left(self, x):
        """F and log F' for x <= 0 (array), by the recursion F(x) = f(1 - F(x + 1))."""
        f, df, c = self.tradeoff.func, self.tradeoff.derivative, self.c
        x = np.asarray(x, dtype=float)
        k = np.maximum(np.ceil(-0.5 - x), 0.0)  # steps to reach [-1/2, 1/2)
        if np.any(k > self.max_steps):
            raise ValueError("value too far in the tail for the Lemma 36 recursion (max_steps)")
        u = c + (1.0 - 2.0 * c) * (x + k + 0.5)
        logd = np.full(x.shape, math.log1p(-2.0 * c))
        kmax = int(k.max()) if k.size else 0
        for step in range(kmax):
            act = k > step
            if not np.any(act):
                break
            with np.errstate(divide="ignore"):
                logd = np.where(act, logd + np.log(np.abs(df(1.0 - u))), logd)
            u = np.where(act, f(1.0 - u), u)
        return u, logd

    def cdf(self, x):
        x = np.asarray(x, dtype=float)
        u, _ = self._left(-np.abs(x))
        return np.where(x <= 0, u, 1.0 - u)

    def sf(self, x):
        return self.cdf(-np.asarray(x, dtype=float))

    def logpdf(self, x):
        x = np.asarray(x, dtype=float)
        u, logd = self._left(-np.abs(x))
        return np.where(u > 0, logd, -np.inf)

    def pdf(self, x):
        return np.exp(self.logpdf(x))

    def logp(self, x):
        if namespace(x) is not np:
            raise TypeError(
                "CanonicalNoise.logp is NumPy only; use Tulap or GaussianCanonicalNoise in PyTensor graphs"
            )
        return self.logpdf(x)

    def ppf(self, v):
        """Inverse cdf by ``F^{-1}(v) = F^{-1}(1 - f(v)) - 1`` for ``v < c`` (module docstring)."""
        f, c = self.tradeoff.func, self.c
        v = np.asarray(v, dtype=float)
        w = np.minimum(v, 1.0 - v)
        shift = np.zeros(w.shape)
        for _ in range(self.max_steps):
            act = (w < c) & (w > 0)
            if not np.any(act):
                break
            w = np.where(act, 1.0 - f(w), w)
            shift = np.where(act, shift + 1.0, shift)
        t = (w - c) / (1.0 - 2.0 * c) - 0.5 - shift
        t = np.where(np.minimum(v, 1.0 - v) <= 0, -np.inf, t)
        return np.where(v <= 0.5, t, -t)

    def sample(self, size=(), rng=None) -> np.ndarray:
        rng = as_generator(rng)
        return self.ppf(rng.uniform(size=size))


class GaussianCanonicalNoise:
    r"""``N(0, 1/mu^2)``: a CND for ``mu``-GDP (Awan and Vadhan 2023; Semi-DP paper, after Def. 35).

    ``F(F^{-1}(1 - alpha) - 1) = Phi(Phi^{-1}(1 - alpha) - mu) = G_mu(alpha)``.
    """

    def __init__(self, mu):
        self.mu = check_positive(mu, "mu")
        self.scale = 1.0 / self.mu
        self.m = 0.0

    def __repr__(self) -> str:  # pragma: no cover - cosmetic
        return f"GaussianCanonicalNoise(mu={self.mu:g})"

    def cdf(self, x):
        return special.ndtr(np.asarray(x, dtype=float) * self.mu)

    def sf(self, x):
        return special.ndtr(-np.asarray(x, dtype=float) * self.mu)

    def ppf(self, u):
        return special.ndtri(np.asarray(u, dtype=float)) / self.mu

    def logp(self, x):
        xp = namespace(x)
        x = as_array(x, xp)
        return -0.5 * (x * self.mu) ** 2 + math.log(self.mu) - 0.5 * math.log(2 * math.pi)

    def logpdf(self, x):
        return self.logp(np.asarray(x, dtype=float))

    def pdf(self, x):
        return np.exp(self.logpdf(x))

    def sample(self, size=(), rng=None) -> np.ndarray:
        return as_generator(rng).normal(0.0, self.scale, size=size)


def canonical_noise(*, epsilon=None, delta=0.0, mu=None, tradeoff=None):
    """The CND used throughout: Tulap for (eps, delta), Gaussian for mu-GDP, Lemma 36 otherwise.

    Exactly one of ``epsilon``, ``mu``, ``tradeoff`` must be given.
    """
    given = [v is not None for v in (epsilon, mu, tradeoff)]
    if sum(given) != 1:
        raise ValueError("give exactly one of epsilon (with delta), mu, or tradeoff")
    if epsilon is not None:
        return Tulap.from_privacy(epsilon, delta)
    if mu is not None:
        return GaussianCanonicalNoise(mu)
    return CanonicalNoise(tradeoff)


def noise_description(noise):
    """``(definition, parameters)`` of the guarantee a CND gives; ``TypeError`` for other noise."""
    if isinstance(noise, Tulap):
        return "(eps, delta)-DP", {"epsilon": noise.epsilon, "delta": noise.delta}
    if isinstance(noise, GaussianCanonicalNoise):
        return "mu-GDP", {"mu": noise.mu}
    if isinstance(noise, CanonicalNoise):
        return f"f-DP ({noise.tradeoff.name})", dict(noise.tradeoff.parameters)
    raise TypeError("noise must be a Tulap, GaussianCanonicalNoise or CanonicalNoise")


class _CNDMechanism(AdditiveMechanism):
    """``y = x + Delta N`` with iid CND coordinates ``N_i ~ F`` (classic f-DP, no invariant)."""

    logp_constant_dropped = ""

    def __init__(self, n, noise, sensitivity=1.0):
        if not isinstance(n, numbers.Integral) or isinstance(n, bool) or n < 1:
            raise ValueError("n must be a positive integer")
        self._n = int(n)
        self.noise = noise
        self.sensitivity = check_positive(sensitivity, "sensitivity")

    @property
    def n(self) -> int:
        return self._n

    @property
    def guarantee(self) -> Guarantee:
        definition, params = noise_description(self.noise)
        return Guarantee(
            definition,
            {**params, "sensitivity": self.sensitivity},
            "neighbours change one coordinate by at most `sensitivity` (changes in k coordinates: "
            "compose the per-coordinate guarantee k times)",
            "Awan and Vadhan 2023, Def. 3.1 / Thm 3.9; Semi-DP paper Def. 35, Lemma 36",
        )

    def sample_noise(self, size=(), rng=None):
        size = (size,) if isinstance(size, numbers.Integral) else tuple(size)
        return self.sensitivity * self.noise.sample(size + (self._n,), rng=as_generator(rng))

    #: independent noise per cell: one log-likelihood term per released cell
    loglik_factorization = "cell"

    def noise_logp_terms(self, e):
        """``log p_F(e_i / Delta) - log Delta`` per cell (exact density)."""
        xp = namespace(e)
        e = as_array(e, xp)
        return self.noise.logp(e / self.sensitivity) - math.log(self.sensitivity)

    def noise_logp(self, e):
        """``sum_i [log p_F(e_i / Delta) - log Delta]`` (exact density)."""
        xp = namespace(e)
        return xp.sum(self.noise_logp_terms(e), axis=-1)


class TulapMechanism(_CNDMechanism):
    r"""``y = x + Delta N``, ``N_i ~ Tulap(0, e^{-eps}, q)`` iid: (eps, delta)-DP, tight.

    The Tulap noise is the canonical noise distribution of ``f_{eps,delta}`` (Awan and Vadhan
    2023, Sec. 4; Awan and Slavkovic 2018, Thm 4.3), so for a one-coordinate change of at most
    ``Delta`` the tradeoff between neighbouring outputs is exactly ``f_{eps,delta}``.
    """

    def __init__(self, n, epsilon, delta=0.0, sensitivity=1.0):
        super().__init__(n, Tulap.from_privacy(epsilon, delta), sensitivity)


class GaussianCanonicalMechanism(_CNDMechanism):
    """``y = x + Delta N``, ``N_i ~ N(0, 1/mu^2)`` iid: ``mu``-GDP (CND of ``G_mu``)."""

    def __init__(self, n, mu, sensitivity=1.0):
        super().__init__(n, GaussianCanonicalNoise(mu), sensitivity)


class CanonicalNoiseMechanism(_CNDMechanism):
    """``y = x + Delta N`` with the Lemma 36 CND of any symmetric tradeoff ``f``: ``f``-DP.

    ``logp`` is NumPy only (see :class:`CanonicalNoise`).
    """

    def __init__(self, n, tradeoff: TradeoffFunction, sensitivity=1.0):
        super().__init__(n, CanonicalNoise(tradeoff), sensitivity)
