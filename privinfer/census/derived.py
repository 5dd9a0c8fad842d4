r"""Quantities users report from a hierarchy's cells: sums of cells per unit and their ratios.

A derived quantity of unit ``v`` is a linear function :math:`a_v^\top x` (the children under 5
of a tract, its people aged 65+) or a ratio :math:`a_v^\top x / b_v^\top x` (the share aged
65+, the sex ratio).  :func:`unit_sums` builds the weights -- a sparse ``n x U`` 0/1 matrix, one
column per unit of a level, selecting the unit's cells whose attributes are in given categories
-- for both:

* the posterior: :func:`posterior_summary` of ``draws @ A`` (sums) or
  ``(draws @ A) / (draws @ B)`` (ratios), draws of ``x`` from any model of the cells, e.g.
  :func:`~privinfer.census.hierarchy_model`: mean and equal-tailed interval per unit;
* hierarchical GLS: ``est.interval(A)`` and ``est.ratio_interval(A, B)`` of
  :class:`~privinfer.inference.HierarchicalGLSEstimate` (Gaussian and delta-method intervals;
  Cumings-Menon 2024).

Nothing dense of size ``n x n`` is formed: the weights have one non-zero per selected cell.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ..mechanisms.hierarchy import HierarchyMeasurements

__all__ = ["unit_sums", "posterior_summary", "derived_draws"]


def _hierarchy(source):
    mech = getattr(source, "mechanism", source)
    if isinstance(mech, HierarchyMeasurements):
        return mech.hierarchy
    if hasattr(source, "unit_of_cell") and hasattr(source, "levels"):
        return source
    raise TypeError("give a hierarchy release, its HierarchyMeasurements or its Hierarchy")


def unit_sums(source, level: str, **categories) -> sp.csc_matrix:
    """``(n, U)`` 0/1 weights: column ``u`` selects the cells of unit ``u`` of ``level`` whose
    attributes lie in the given categories (``age=[...]``, ``sex="female"``; attributes not
    named: all categories).  ``source``: a hierarchy release, its mechanism or its hierarchy.

    Example: the share of every tract aged 65+ is ``(x @ A) / (x @ B)`` with
    ``A = unit_sums(rel, "tract", age=OLD)`` and ``B = unit_sums(rel, "tract")``.
    """
    hier = _hierarchy(source)
    if level not in hier.levels:
        raise ValueError(f"unknown level {level!r}; the levels are {list(hier.levels)}")
    lev = list(hier.levels).index(level)
    keep = np.ones(hier.n, dtype=bool)
    for name, wanted in categories.items():
        if name not in hier.attributes:
            raise ValueError(f"unknown attribute {name!r}; the attributes are {list(hier.attributes)}")
        a = list(hier.attributes).index(name)
        cats = list(hier.categories[a])
        wanted = [wanted] if isinstance(wanted, str) or np.isscalar(wanted) else list(wanted)
        missing = [w for w in wanted if w not in cats]
        if missing:
            raise ValueError(f"attribute {name!r} has no categories {missing}")
        codes = [cats.index(w) for w in wanted]
        keep &= np.isin(hier.attribute_code[:, a], codes)
    cells = np.flatnonzero(keep)
    units = np.asarray(hier.unit_of_cell[lev])[cells]
    return sp.csc_matrix((np.ones(cells.size), (cells, units)), shape=(hier.n, hier.n_units(lev)))


def derived_draws(draws, num, den=None) -> np.ndarray:
    """Draws of sums ``x @ num`` or ratios ``(x @ num) / (x @ den)``; ``draws`` (S, n)."""
    X = np.asarray(draws, dtype=float)
    if X.ndim != 2:
        raise ValueError("draws must be a (draws, cells) array")
    a = np.asarray(X @ sp.csc_matrix(num))
    if den is None:
        return a
    b = np.asarray(X @ sp.csc_matrix(den))
    with np.errstate(invalid="ignore", divide="ignore"):
        return a / b


def posterior_summary(values, level: float = 0.9):
    """Posterior mean and equal-tailed ``level`` interval of every column of ``values`` (S, k):
    ``(mean, lower, upper)``; a ratio whose denominator is 0 in some draws (an empty unit) gets
    its summary over the other draws."""
    if not 0 < level < 1:
        raise ValueError("level must be in (0, 1)")
    v = np.asarray(values, dtype=float)
    q = (0.5 - level / 2, 0.5 + level / 2)
    mean = np.nanmean(v, axis=0)
    lo, hi = np.nanquantile(v, q, axis=0)
    return mean, lo, hi
