"""privinfer: differentially private releases that keep invariants exactly, with
transparent likelihoods and exact Bayesian inference in PyMC.

Subpackages and modules
-----------------------

``invariants``
    the invariant ``C x = t``: subspaces, projections, integer lattices
``mechanisms``
    privacy mechanisms with ``release``, ``logp`` and ``guarantee``
``accounting``
    (eps, delta)-DP, zCDP, GDP conversions and cost-matrix curves
``lattice``
    the framework-free lattice engine: moves, kernels, exact samplers, couplings
``pymc``
    thin glue that puts mechanisms and constrained latents into PyMC models, and the
    lattice step methods ``LatticeMetropolis`` / ``LatticeGibbs``
``models``
    reference Bayesian models
``workflow``
    the release-to-fit spine: ``Release``, ``make_release``, ``read_release``, ``fit``

``privinfer.Release``, ``make_release``, ``read_release`` and ``fit`` are loaded on first use,
so ``import privinfer`` stays light (no PyMC until a model is fitted).
"""

__version__ = "0.1.0"

__all__ = ["__version__", "Release", "make_release", "read_release", "fit", "FitResult"]

_WORKFLOW = {"Release", "make_release", "read_release", "fit", "FitResult"}


def __getattr__(name):
    if name in _WORKFLOW:
        from . import workflow

        return getattr(workflow, name)
    raise AttributeError(f"module 'privinfer' has no attribute {name!r}")
