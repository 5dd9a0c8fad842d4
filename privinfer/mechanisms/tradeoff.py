r"""Trade-off functions (f-DP): the type I / type II error curves that define a privacy guarantee.

A *trade-off function* ``f`` (Dong, Roth and Su 2022, Def. 2.2) gives, for each level
``alpha``, the smallest type II error of a level-``alpha`` test between a mechanism's outputs
on two neighbouring datasets; a mechanism is ``f``-DP when every such pair is at least as hard
to tell apart as ``f`` says.  Canonical noise distributions are built from a *symmetric*
(``f = f^{-1}``) *nontrivial* (``f(alpha) < 1 - alpha`` somewhere) ``f``, through its fixed
point ``c = f(c)`` in ``[0, 1/2)`` (Cho and Awan, Semi-DP paper, Sec. 5.3, Def. 35 and
Lemma 36; see :mod:`privinfer.mechanisms.canonical_noise`).

This module provides :class:`TradeoffFunction` and the two families used throughout:

* :func:`eps_delta_tradeoff` --
  ``f_{eps,delta}(alpha) = max(0, 1 - delta - e^eps alpha, e^{-eps}(1 - delta - alpha))``
  (Dong, Roth and Su 2022, Prop. 2.5), fixed point ``c = (1 - delta)/(1 + e^eps)``;
* :func:`gaussian_tradeoff` -- ``G_mu(alpha) = Phi(Phi^{-1}(1 - alpha) - mu)`` (Def. 2.7),
  ``G_mu'(alpha) = -exp(mu z - mu^2/2)`` with ``z = Phi^{-1}(1 - alpha)``, fixed point
  ``c = Phi(-mu/2)``.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np
from scipy import special

from .._validation import check_epsilon, check_positive

__all__ = ["check_delta0", "TradeoffFunction", "eps_delta_tradeoff", "gaussian_tradeoff"]


def check_delta0(delta, name: str = "delta") -> float:
    """delta in [0, 1) (0 allowed: pure DP)."""
    if not isinstance(delta, numbers.Real) or isinstance(delta, bool):
        raise TypeError(f"{name} must be a real number, not {type(delta).__name__}")
    d = float(delta)
    if not (0.0 <= d < 1.0):
        raise ValueError(f"{name} must lie in [0, 1) (got {d!r})")
    return d


@dataclass(frozen=True)
class TradeoffFunction:
    r"""A symmetric nontrivial tradeoff function ``f`` (Dong, Roth and Su 2022, Def. 2.2).

    ``f(alpha)`` is the smallest type II error of a level-alpha test between the outputs on
    two neighbouring datasets.  Symmetric means ``f = f^{-1}``; nontrivial means
    ``f(alpha) < 1 - alpha`` somewhere.

    Attributes
    ----------
    func
        vectorized ``alpha -> f(alpha)`` on ``[0, 1]``.
    derivative
        vectorized ``alpha -> f'(alpha)`` (a.e.; used for the CND density).
    fixed_point
        ``c in [0, 1/2)`` with ``f(c) = c``.
    name, parameters
        description of the privacy definition, e.g. ``"(eps, delta)-DP"``.
    """

    func: Callable[[np.ndarray], np.ndarray]
    derivative: Callable[[np.ndarray], np.ndarray]
    fixed_point: float
    name: str
    parameters: Mapping[str, Any] = field(default_factory=dict)

    def __call__(self, alpha):
        return self.func(np.asarray(alpha, dtype=float))


def eps_delta_tradeoff(epsilon, delta=0.0) -> TradeoffFunction:
    r"""``f_{eps,delta}(alpha) = max(0, 1 - delta - e^eps alpha, e^{-eps}(1 - delta - alpha))``.

    (Dong, Roth and Su 2022, Prop. 2.5.)  Fixed point: on the steep branch
    ``1 - delta - e^eps c = c`` gives ``c = (1 - delta)/(1 + e^eps)``.
    """
    eps = check_epsilon(epsilon)
    delta = check_delta0(delta)
    e = math.exp(eps)

    def func(a):
        a = np.asarray(a, dtype=float)
        return np.maximum(0.0, np.maximum(1.0 - delta - e * a, (1.0 - delta - a) / e))

    def derivative(a):
        a = np.asarray(a, dtype=float)
        steep = 1.0 - delta - e * a
        shallow = (1.0 - delta - a) / e
        return np.where((steep >= shallow) & (steep > 0), -e, np.where(shallow > 0, -1.0 / e, 0.0))

    return TradeoffFunction(
        func, derivative, (1.0 - delta) / (1.0 + e), "(eps, delta)-DP", {"epsilon": eps, "delta": delta}
    )


def gaussian_tradeoff(mu) -> TradeoffFunction:
    r"""``G_mu(alpha) = Phi(Phi^{-1}(1 - alpha) - mu)`` (Dong, Roth and Su 2022, Def. 2.7).

    ``G_mu'(alpha) = -phi(z - mu)/phi(z) = -exp(mu z - mu^2/2)`` with ``z = Phi^{-1}(1-alpha)``;
    fixed point ``c = Phi(-mu/2)`` (``z = mu/2``).
    """
    mu = check_positive(mu, "mu")

    def func(a):
        a = np.asarray(a, dtype=float)
        return special.ndtr(-special.ndtri(a) - mu)

    def derivative(a):
        z = -special.ndtri(np.asarray(a, dtype=float))
        return -np.exp(mu * z - 0.5 * mu * mu)

    return TradeoffFunction(func, derivative, float(special.ndtr(-mu / 2)), "mu-GDP", {"mu": mu})
