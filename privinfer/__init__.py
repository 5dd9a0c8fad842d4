"""privinfer: differentially private releases that keep invariants exactly, with
transparent likelihoods and exact Bayesian inference in PyMC.

Subpackages and modules
-----------------------
``invariants``   the invariant ``C x = t``: subspaces, projections, integer lattices
``mechanisms``   privacy mechanisms with ``release``, ``logp`` and ``guarantee``
``accounting``   (eps, delta)-DP, zCDP, GDP conversions and cost-matrix curves
``samplers``     lattice samplers, couplings and PyMC step methods
``pymc``         thin glue that puts mechanisms and constrained latents into PyMC models
``models``       reference Bayesian models
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
