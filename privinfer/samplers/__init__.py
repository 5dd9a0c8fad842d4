"""Former home of the lattice samplers, kept so that existing imports keep working.

The framework-free kernels, couplings and exact samplers are :mod:`privinfer.lattice`; the
PyMC step methods ``LatticeMetropolis`` and ``LatticeGibbs`` are :mod:`privinfer.pymc`.
Every name is re-exported here (the step methods lazily, so importing this module does not
load PyMC).
"""

from ..lattice import *  # noqa: F401,F403
from ..lattice import __all__ as _lattice_all

#: PyMC step methods, imported lazily so the curator's samplers do not load PyMC.
_STEP_METHODS = ("LatticeMetropolis", "LatticeGibbs")


def __getattr__(name):
    if name in _STEP_METHODS:
        from .. import pymc as _pymc

        return getattr(_pymc, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = list(_lattice_all) + list(_STEP_METHODS)
