"""Array namespace for likelihoods that accept NumPy arrays and PyTensor tensors alike.

A mechanism's ``logp(y, x)`` is written once against ``xp = namespace(y, x)``: NumPy for
plain arrays (result: float or ndarray) and ``pytensor.tensor`` as soon as one argument is
symbolic (result: a tensor for a PyMC model).  Only functions both libraries spell the same
way are used through it (``sum``, ``abs``, ``log``, ``exp``, ``sqrt``, ``dot``, ``maximum``,
``where``, ``switch`` via :func:`where`).
"""

from __future__ import annotations

import numpy as np

__all__ = ["is_symbolic", "namespace", "where", "as_array"]


def is_symbolic(*xs) -> bool:
    """True if any argument is a PyTensor variable."""
    try:
        from pytensor.graph.basic import Variable
    except ImportError:  # pragma: no cover - pytensor is a hard dependency
        return False
    return any(isinstance(x, Variable) for x in xs)


def namespace(*xs):
    """``pytensor.tensor`` if any argument is symbolic, else ``numpy``."""
    if is_symbolic(*xs):
        import pytensor.tensor as pt

        return pt
    return np


def as_array(x, xp):
    """``np.asarray(x, float)`` for NumPy, ``pt.as_tensor_variable`` for PyTensor."""
    if xp is np:
        return np.asarray(x, dtype=float)
    return xp.as_tensor_variable(x)


def where(cond, a, b, xp):
    """Elementwise select in either namespace (``np.where`` / ``pt.switch``)."""
    if xp is np:
        return np.where(cond, a, b)
    return xp.switch(cond, a, b)
