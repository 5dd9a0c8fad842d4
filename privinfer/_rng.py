"""Randomness policy for releases.

Every public function that draws random numbers takes ``rng``: ``None`` (default) means
fresh OS entropy (``numpy.random.default_rng()`` seeds itself from the operating system),
an ``int``/``SeedSequence`` gives a reproducible stream, and a ``numpy.random.Generator``
is used as is.  Nothing in privinfer touches NumPy's global random state.
"""

from __future__ import annotations

import numbers

import numpy as np

__all__ = ["as_generator"]


def as_generator(rng=None) -> np.random.Generator:
    """Return a ``numpy.random.Generator`` for ``rng`` (None -> OS entropy)."""
    if rng is None:
        return np.random.default_rng()
    if isinstance(rng, np.random.Generator):
        return rng
    if isinstance(rng, (numbers.Integral, np.random.SeedSequence)) and not isinstance(rng, bool):
        if isinstance(rng, numbers.Integral) and int(rng) < 0:
            raise ValueError("rng seed must be a non-negative integer")
        return np.random.default_rng(rng)
    if isinstance(rng, np.random.RandomState):
        raise TypeError(
            "rng must be None, a non-negative integer seed, a SeedSequence or a "
            "numpy.random.Generator; legacy RandomState is not accepted"
        )
    raise TypeError(
        f"rng must be None, a non-negative integer seed, a SeedSequence or a "
        f"numpy.random.Generator, not {type(rng).__name__}"
    )
