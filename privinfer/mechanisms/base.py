"""The mechanism protocol shared by every privacy mechanism in privinfer.

A mechanism ``M`` is *transparent*: its noise law is public and does not depend on the
confidential data ``x``, so ``p(y | x)`` is a likelihood the analyst can write down.
Every mechanism object offers

``release(x, rng=None)``
    a privatized output.  If the mechanism has an ``invariant`` (``C x = t``), the output
    satisfies ``C y = C x`` exactly (to floating point for real-valued noise, exactly for
    integer noise).  ``x`` may be one vector of length ``n`` or a stack ``(..., n)``.
``logp(y, x)``
    the log-likelihood ``log p(y | x)``, for NumPy arrays (float/ndarray result) and for
    PyTensor tensors (symbolic result).  Additive constants that do not depend on ``x``
    may be dropped; each mechanism documents what it drops in its docstring and in
    ``logp_constant_dropped``.
``guarantee``
    a :class:`Guarantee`: which privacy definition, with which parameters and for which
    neighbouring relation / invariant subspace.
``invariant``
    the :class:`privinfer.invariants.Invariant` kept exactly, or ``None``.

Additive mechanisms (``y = x + e`` with ``e`` drawn independently of ``x``) derive from
:class:`AdditiveMechanism` and implement ``sample_noise`` and ``noise_logp`` only.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from .._backend import namespace
from .._rng import as_generator
from .._validation import check_integer_array, check_vector_length

__all__ = ["Guarantee", "Mechanism", "AdditiveMechanism", "support_scale"]


def support_scale(y, x, e) -> np.ndarray:
    """``max(1, |y|_inf, |x|_inf)`` for each vector of the stack ``e = y - x``.

    Floating-point residuals of a projected release are relative to the magnitudes that were
    added; mechanisms whose noise lives on a subspace compare ``e``'s off-subspace residual
    with a tolerance times this scale.
    """
    return np.maximum(1.0, np.maximum(np.max(np.abs(np.broadcast_to(y, e.shape)), axis=-1),
                                      np.max(np.abs(np.broadcast_to(x, e.shape)), axis=-1)))


@dataclass(frozen=True)
class Guarantee:
    """What privacy a mechanism gives.

    Attributes
    ----------
    definition:
        e.g. ``"(eps, delta)-induced subspace DP"``, ``"(eps, 0)-induced integer subspace DP"``,
        ``"Semi-DP (mu-GDP)"``, ``"rho-zCDP"``, ``"(eps, delta)-DP"``.
    parameters:
        the numbers of the definition, e.g. ``{"epsilon": 1.0, "delta": 1e-6}``.
    relation:
        the neighbouring relation and subspace, e.g. ``"add/remove one record; invariant C x = t"``.
    reference:
        paper and result the claim rests on.
    """

    definition: str
    parameters: Mapping[str, Any] = field(default_factory=dict)
    relation: str = ""
    reference: str = ""

    def __getitem__(self, key):
        return self.parameters[key]

    def __str__(self) -> str:  # pragma: no cover - cosmetic
        ps = ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in self.parameters.items())
        s = f"{self.definition} ({ps})"
        if self.relation:
            s += f"; {self.relation}"
        if self.reference:
            s += f" [{self.reference}]"
        return s


class Mechanism(abc.ABC):
    """Abstract base of all mechanisms (see module docstring for the protocol)."""

    #: The invariant kept exactly by ``release`` (``None`` for classic mechanisms).
    invariant = None
    #: Whether outputs are integer vectors.
    integer: bool = False
    #: Human-readable description of the additive constant dropped by ``logp`` ("" if exact).
    logp_constant_dropped: str = ""

    @property
    @abc.abstractmethod
    def n(self) -> int:
        """Length of the released vector."""

    @property
    @abc.abstractmethod
    def guarantee(self) -> Guarantee:
        """The privacy guarantee of this mechanism."""

    @abc.abstractmethod
    def release(self, x, rng=None):
        """Privatize ``x`` (shape ``(n,)`` or ``(..., n)``)."""

    @abc.abstractmethod
    def logp(self, y, x):
        """Log-likelihood ``log p(y | x)`` (NumPy or PyTensor)."""

    def local_logp(self):
        r"""The noise log-density as a :class:`~privinfer.lattice.LocalLogDensity` in
        :math:`e = y - x` (up to a constant, on the support), so lattice samplers can score a
        move from the cells it touches; ``None`` when the likelihood has no such form."""
        return None

    # -- helpers shared by subclasses ---------------------------------------------------
    def _check_x(self, x, name: str = "x") -> np.ndarray:
        """Validate confidential input: finite, last axis of length n, integer if needed."""
        arr = check_vector_length(x, self.n, name)
        if self.integer:
            arr = check_integer_array(arr, name)
        return arr

    def __repr__(self) -> str:  # pragma: no cover - cosmetic
        return f"{type(self).__name__}(n={self.n}, guarantee={self.guarantee})"


class AdditiveMechanism(Mechanism):
    """``y = x + e`` with noise ``e`` independent of ``x``.

    Subclasses implement :meth:`sample_noise` (shape ``size + (n,)``) and
    :meth:`noise_logp` (log density/pmf of ``e`` over its last axis, NumPy or PyTensor).
    ``logp(y, x) = noise_logp(y - x)``.
    """

    @abc.abstractmethod
    def sample_noise(self, size=(), rng=None) -> np.ndarray:
        """Draw noise vectors of shape ``size + (n,)``."""

    @abc.abstractmethod
    def noise_logp(self, e):
        """Log density (or pmf) of the noise ``e``; sums over the last axis."""

    def release(self, x, rng=None):
        x = self._check_x(x)
        rng = as_generator(rng)
        e = self.sample_noise(x.shape[:-1], rng=rng)
        return x + e

    def logp(self, y, x):
        xp = namespace(y, x)
        if xp is np:
            y = np.asarray(y, dtype=float)
            x = np.asarray(x, dtype=float)
        return self.noise_logp(y - x)
