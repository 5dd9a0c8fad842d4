r"""Noisy measurements of a geography x attributes table given as a pandas frame.

A frame has one row per cell: geography columns from top to bottom (``county``, ``tract``),
attribute columns (``sex``, ``age``) and, optionally, the count.  :func:`hierarchy_measurements`
builds the Census design on it (Abowd et al. 2022, Sec. 5-7): for the whole frame (the top
level, ``"state"``) and for every unit of every geography level, one discrete Gaussian
measurement of each query's margin, zCDP budget ``rho`` per (level, query), scale

.. math:: \sigma_{l,q} = 1/\sqrt{2\rho_{l,q}}

(sensitivity 1: one person changes one margin cell of each query; rounded *up* to
``decimals`` places, so the spent budget never exceeds the requested one), and the frame's
total (or the totals of one geography level's units) published exactly.  The result is a
:class:`~privinfer.mechanisms.hierarchy.HierarchyMeasurements` over the frame's cells in
row order: ``mech.publish(frame["count"], rng=seed)`` releases it.
"""

from __future__ import annotations

import numbers

import numpy as np
import pandas as pd

from ..invariants import groups, total
from ..mechanisms.hierarchy import Hierarchy, HierarchyMeasurements, HierarchyQuery
from ..mechanisms.noisy_measurements import sigma_for_rho

__all__ = ["hierarchy_from_frame", "hierarchy_measurements", "frame_counts"]


def _check_columns(frame, names, what):
    if not isinstance(frame, pd.DataFrame):
        raise TypeError(f"frame must be a pandas DataFrame, not {type(frame).__name__}")
    missing = [c for c in names if c not in frame.columns]
    if missing:
        raise ValueError(f"the frame has no {what} column {missing[0]!r}")
    if len(set(names)) != len(names):
        raise ValueError(f"a column is named twice among the {what} columns")


def _codes(col: pd.Series, name: str):
    """Integer codes and category labels of a column: categoricals keep their order (unused
    categories dropped), other columns their order of first appearance."""
    if col.isna().any():
        raise ValueError(f"column {name!r} has {int(col.isna().sum())} missing values")
    if isinstance(col.dtype, pd.CategoricalDtype):
        used = col.cat.remove_unused_categories()
        return used.cat.codes.to_numpy(np.int64), list(used.cat.categories)
    codes, uniq = pd.factorize(col, sort=False)
    return codes.astype(np.int64), list(uniq)


def frame_counts(frame: pd.DataFrame, count: str = "count") -> np.ndarray:
    """The count column as int64, checked: present, no missing values, integers, >= 0, within
    64 bits.  Errors name the column and the number of offending rows, never values."""
    _check_columns(frame, [count], "count")
    col = frame[count]
    if col.isna().any():
        raise ValueError(f"count column {count!r} has {int(col.isna().sum())} missing values")
    if col.dtype.kind not in "iuf" and not pd.api.types.is_numeric_dtype(col):
        raise ValueError(f"count column {count!r} must hold numbers")
    if col.dtype.kind == "u" and col.size and int(col.max()) > np.iinfo(np.int64).max:
        raise ValueError(f"count column {count!r} has counts beyond 64 bits")
    if col.dtype.kind == "f":
        v = col.to_numpy(float)
        if not np.all(np.isfinite(v)):
            raise ValueError(f"count column {count!r} has non-finite values")
        bad = int(np.sum(v != np.round(v)))
        if bad:
            raise ValueError(f"count column {count!r} has {bad} non-integer counts")
        if np.any(np.abs(v) >= 2.0**63):
            raise ValueError(f"count column {count!r} has counts beyond 64 bits")
    v = col.to_numpy().astype(np.int64)
    neg = int(np.sum(v < 0))
    if neg:
        raise ValueError(f"count column {count!r} has {neg} negative counts")
    return v


def hierarchy_from_frame(frame: pd.DataFrame, *, geography, attributes, top: str = "state") -> Hierarchy:
    """The :class:`~privinfer.mechanisms.hierarchy.Hierarchy` of a frame's cells in row order.

    ``geography``: columns from the top level down (each unit identified by its own label,
    which must belong to one parent unit); ``attributes``: the crossed attribute columns.
    One-line errors for a missing column, missing labels, units not nested in their parents,
    duplicate cells, and lowest-level units lacking attribute combinations.
    """
    geography = [geography] if isinstance(geography, str) else list(geography)
    attributes = [attributes] if isinstance(attributes, str) else list(attributes)
    _check_columns(frame, geography + attributes, "geography or attribute")
    if top in geography:
        raise ValueError(f"the top level's name {top!r} is also a geography column")
    n = len(frame)
    if n == 0:
        raise ValueError("the frame has no rows")
    unit_of_cell = [np.zeros(n, dtype=np.int64)]
    parent = [np.zeros(0, dtype=np.int64)]
    labels = [np.array([top], dtype=object)]
    for j, g in enumerate(geography):
        col = frame[g]
        if col.isna().any():
            raise ValueError(f"geography column {g!r} has {int(col.isna().sum())} missing labels")
        codes, uniq = pd.factorize(col, sort=True)
        codes = codes.astype(np.int64)
        par = np.full(len(uniq), -1, dtype=np.int64)
        par[codes] = unit_of_cell[-1]
        # every cell of a unit must lie in the unit's one parent
        if np.any(par[codes] != unit_of_cell[-1]):
            above = geography[j - 1] if j else top
            bad = np.unique(codes[par[codes] != unit_of_cell[-1]]).size
            raise ValueError(f"units not nested in their parents: {bad} {g!r} units lie in more than one "
                             f"{above!r} unit (give units labels unique within the table, e.g. GEOIDs)")
        unit_of_cell.append(codes)
        parent.append(par)
        labels.append(np.asarray(uniq, dtype=object))
    codes, cats = [], []
    for a in attributes:
        c, u = _codes(frame[a], a)
        codes.append(c)
        cats.append(tuple(u))
    code = np.column_stack(codes) if codes else np.zeros((n, 0), dtype=np.int64)
    shape = tuple(len(c) for c in cats)
    d = int(np.prod(shape)) if shape else 1
    combo = np.ravel_multi_index(tuple(code.T), shape) if attributes else np.zeros(n, dtype=np.int64)
    key = unit_of_cell[-1] * d + combo
    dup = n - np.unique(key).size
    if dup:
        raise ValueError(f"duplicate cells: {dup} rows repeat a ({', '.join(geography[-1:] + attributes)}) "
                         "combination")
    per_unit = np.bincount(unit_of_cell[-1], minlength=len(labels[-1]))
    short = int(np.sum(per_unit != d))
    if short:
        leaf = geography[-1] if geography else top
        raise ValueError(f"{short} of {len(labels[-1])} {leaf!r} units lack some "
                         f"({', '.join(attributes)}) combinations: add them with count 0")
    return Hierarchy(tuple([top] + geography), tuple(unit_of_cell), tuple(parent), tuple(labels),
                     tuple(attributes), tuple(cats), code)


def _budgets(rho, levels, queries):
    """``{(level index, query name): rho}`` from one float or a dict keyed by (level, query)."""
    if isinstance(rho, dict):
        out = {}
        for key, r in rho.items():
            if not (isinstance(key, tuple) and len(key) == 2):
                raise ValueError("rho keys must be (level, query) pairs")
            lev, q = key
            if lev not in levels:
                raise ValueError(f"rho names an unknown level {lev!r} (levels: {', '.join(levels)})")
            if q not in queries:
                raise ValueError(f"rho names an unknown query {q!r} (queries: {', '.join(queries)})")
            out[(levels.index(lev), q)] = r
        if not out:
            raise ValueError("rho measures no (level, query) pair")
    elif isinstance(rho, numbers.Real):
        out = {(l, q): rho for l in range(len(levels)) for q in queries}
    else:
        raise TypeError("rho must be a number or a dict {(level, query): rho}")
    for (l, q), r in out.items():
        if not isinstance(r, numbers.Real) or not np.isfinite(float(r)) or float(r) <= 0:
            raise ValueError(f"rho for ({levels[l]!r}, {q!r}) must be a finite number > 0")
    return out


def hierarchy_measurements(frame: pd.DataFrame, *, geography, attributes, queries, rho, invariant="total",
                           top: str = "state", decimals: int = 2) -> HierarchyMeasurements:
    """Census-style noisy measurements of a frame's cells (module docstring).

    Parameters
    ----------
    frame
        one row per cell; cells are the frame's rows in order.
    geography
        geography columns from top to bottom, e.g. ``["county", "tract"]``.
    attributes
        attribute columns, e.g. ``["sex", "age"]``.
    queries
        ``{name: tuple of attributes}``: the margins measured in every unit (``()`` the unit
        total, all attributes the detailed cells).
    rho
        zCDP budget: one number for every (level, query), or ``{(level, query): rho}`` with
        levels named ``top`` and the geography columns (missing pairs are not measured).
    invariant
        ``"total"`` (the frame's total published exactly: the 2020 rule), ``None``, or a
        geography column whose units' totals are published exactly.
    top
        the name of the top level (the whole frame).
    decimals
        the scales are rounded up to this many decimal places.
    """
    hier = hierarchy_from_frame(frame, geography=geography, attributes=attributes, top=top)
    if not isinstance(queries, dict) or not queries:
        raise ValueError("queries must be a non-empty dict {name: tuple of attributes}")
    qspec = {}
    for name, keep in queries.items():
        keep = (keep,) if isinstance(keep, str) else tuple(keep)
        hier.axes(keep)  # unknown attribute names raise here
        qspec[str(name)] = keep
    budgets = _budgets(rho, list(hier.levels), list(qspec))
    hq, sigmas = [], []
    for (l, q), r in sorted(budgets.items(), key=lambda kv: (kv[0][0], list(qspec).index(kv[0][1]))):
        hq.append(HierarchyQuery(l, q, qspec[q]))
        sigmas.append(sigma_for_rho(r, 1.0, decimals))
    if invariant is None:
        inv, inv_level = None, None
    elif invariant == "total":
        inv, inv_level = total(hier.n), 0
    elif isinstance(invariant, str) and invariant in hier.levels[1:]:
        inv_level = hier.levels.index(invariant)
        inv = groups(np.asarray(hier.unit_of_cell[inv_level]))
    else:
        raise ValueError(f"invariant must be 'total', None or a geography column, got {invariant!r}")
    mech = HierarchyMeasurements(hier, hq, sigmas, inv, invariant_level=inv_level)
    mech.cell_ids = hier.cell_ids()
    return mech
