r"""Noisy measurements over a geographic hierarchy: the structure of the 2020 Census design.

The cells of a table are classified by *geography* -- a tree of units, the whole table
(level 0, e.g. the state) at the top, then every level below it (county, tract, ...), each
unit nested in one parent -- and by *attributes* (sex, age group, ...) whose categories cross
the geography: every unit of the lowest level holds one cell for every combination of
attribute categories.  The Census Bureau's disclosure avoidance system measures, for every
unit of every level, margins of the attribute table of that unit (the unit's total, its
sex x age table, ...), each with discrete Gaussian noise, and publishes some totals exactly
(Abowd et al. 2022, "The 2020 Census Disclosure Avoidance System TopDown Algorithm", Harvard
Data Science Review, Sec. 5-7; Cumings-Menon 2024, "Least squares estimation for hierarchical
data", Sec. 2).

For unit ``v`` of level ``l`` write :math:`X_v \in \mathbb Z^d` for the sum of the attribute
vectors of the lowest-level units below it (``d`` = number of attribute combinations).
A query ``q`` of level ``l`` keeps the attribute axes ``A_q`` and measures

.. math:: y_{v,q} = M_q X_v + e_{v,q}, \qquad e_{v,q,r} \sim \mathcal N_{\mathbb Z}(0, \sigma_q^2),

``M_q`` the 0/1 margin matrix of ``A_q`` on the attribute table (``A_q = ()``: the unit's
total; all axes: its detailed cells).  Stacked over units and queries this is a
:class:`~privinfer.mechanisms.NoisyMeasurements` whose query ``(l, q)`` is the sparse matrix
with one row per (unit, margin cell); :class:`HierarchyMeasurements` is that mechanism with
the structure kept (:class:`Hierarchy`, the ``(level, query)`` of every block of rows), so that
estimators can run over the tree (hierarchical GLS, :mod:`privinfer.inference.hierarchical_gls`)
and models can pool along it.

Privacy: a person changes one cell by one, hence one margin cell of every query of every
level (the unit containing the cell), so each query's l2 sensitivity is 1 and the release is
:math:`\rho = \sum_{(l,q)} 1/(2\sigma_{l,q}^2)`-zCDP (CKS 2020, Thm 4; Bun and Steinke 2016,
Lemma 2.3), as for every :class:`NoisyMeasurements`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from .noisy_measurements import NoisyMeasurements

__all__ = ["Hierarchy", "HierarchyQuery", "HierarchyMeasurements"]


@dataclass(frozen=True, eq=False)
class Hierarchy:
    """Cells laid out by a geography tree and crossed attributes (module docstring).

    Attributes
    ----------
    levels
        level names from the top: ``levels[0]`` is the whole table (one unit).
    unit_of_cell
        per level, the unit (0..U_l-1) of every cell, cells in the table's row order.
    parent
        per level, the parent unit (at the level above) of every unit; ``parent[0]`` is empty.
    unit_labels
        per level, the label of every unit (units in label order within the level).
    attributes
        attribute names, e.g. ``("sex", "age")``.
    categories
        per attribute, its category labels in order.
    attribute_code
        ``(n, k)`` int64: the category of every cell on every attribute.
    """

    levels: tuple
    unit_of_cell: tuple
    parent: tuple
    unit_labels: tuple
    attributes: tuple
    categories: tuple
    attribute_code: np.ndarray

    def __post_init__(self):
        L = len(self.levels)
        if L < 1 or len(self.unit_of_cell) != L or len(self.parent) != L or len(self.unit_labels) != L:
            raise ValueError("a hierarchy needs one unit code array, parent array and label array per level")
        n = int(np.asarray(self.unit_of_cell[0]).size)
        if np.any(np.asarray(self.unit_of_cell[0]) != 0):
            raise ValueError("level 0 is the whole table: one unit")
        for l in range(1, L):
            u = np.asarray(self.unit_of_cell[l])
            if u.shape != (n,):
                raise ValueError(f"level {self.levels[l]!r}: one unit per cell needed")
            par = np.asarray(self.parent[l])
            if par.shape != (len(self.unit_labels[l]),):
                raise ValueError(f"level {self.levels[l]!r}: one parent per unit needed")
            if not np.array_equal(par[u], np.asarray(self.unit_of_cell[l - 1])):
                raise ValueError(f"level {self.levels[l]!r}: units are not nested in their parents")
        code = np.asarray(self.attribute_code)
        if code.shape != (n, len(self.attributes)) or len(self.categories) != len(self.attributes):
            raise ValueError("one attribute code per cell and attribute, and one category list per attribute")
        # every lowest-level unit holds every attribute combination exactly once
        d = self.d
        flat = self.leaf_unit * d + self.combination
        if np.unique(flat).size != n or n != self.n_units(L - 1) * d:
            raise ValueError("every unit of the lowest level must hold each attribute combination exactly once")

    # -- sizes -------------------------------------------------------------------------
    @property
    def n(self) -> int:
        """Number of cells."""
        return int(np.asarray(self.unit_of_cell[0]).size)

    @property
    def depth(self) -> int:
        """Number of levels, the top (whole table) included."""
        return len(self.levels)

    @property
    def shape(self) -> tuple:
        """Sizes of the attributes (the attribute table of one unit)."""
        return tuple(len(c) for c in self.categories)

    @property
    def d(self) -> int:
        """Number of attribute combinations (cells per lowest-level unit)."""
        return int(np.prod(self.shape)) if self.shape else 1

    def n_units(self, level) -> int:
        return len(self.unit_labels[self.level_index(level)])

    def level_index(self, level) -> int:
        """Index of a level given by name or index."""
        if isinstance(level, str):
            if level not in self.levels:
                raise KeyError(f"no level named {level!r} (levels: {', '.join(self.levels)})")
            return self.levels.index(level)
        level = int(level)
        if not 0 <= level < self.depth:
            raise KeyError(f"level index {level} outside 0..{self.depth - 1}")
        return level

    @property
    def leaf_unit(self) -> np.ndarray:
        """Lowest-level unit of every cell."""
        return np.asarray(self.unit_of_cell[-1])

    @property
    def combination(self) -> np.ndarray:
        """Attribute combination of every cell (C order over the attributes)."""
        if not self.attributes:
            return np.zeros(self.n, dtype=np.int64)
        return np.ravel_multi_index(tuple(np.asarray(self.attribute_code).T), self.shape).astype(np.int64)

    def leaf_order(self) -> np.ndarray:
        """Cell indices arranged as a (lowest-level units, d) grid: ``x[leaf_order()]`` is the
        table of attribute vectors of the lowest-level units."""
        out = np.empty(self.n, dtype=np.int64)
        out[self.leaf_unit * self.d + self.combination] = np.arange(self.n)
        return out.reshape(-1, self.d)

    def leaf_ancestors(self, level) -> np.ndarray:
        """Each lowest-level unit's ancestor at ``level`` ``(U_leaf,)`` (the unit of its first cell)."""
        return np.asarray(self.unit_of_cell[self.level_index(level)], dtype=np.int64)[self.leaf_order()[:, 0]]

    def axes(self, keep) -> tuple:
        """Attribute axes of a tuple of attribute names."""
        out = []
        for a in keep:
            if a not in self.attributes:
                raise KeyError(f"no attribute named {a!r} (attributes: {', '.join(self.attributes)})")
            out.append(self.attributes.index(a))
        if len(set(out)) != len(out):
            raise ValueError(f"attributes repeated in {tuple(keep)}")
        return tuple(sorted(out))

    def margin_matrix(self, keep) -> np.ndarray:
        """``M``: the 0/1 matrix of the margin keeping the attributes ``keep`` on one unit's
        attribute table (rows: margin cells in C order over the kept axes; columns: the ``d``
        combinations)."""
        axes = self.axes(keep)
        shape = self.shape
        idx = np.unravel_index(np.arange(self.d), shape) if shape else ()
        rows = np.ravel_multi_index(tuple(idx[a] for a in axes), tuple(shape[a] for a in axes)) if axes \
            else np.zeros(self.d, dtype=np.int64)
        r = int(np.prod([shape[a] for a in axes])) if axes else 1
        M = np.zeros((r, self.d))
        M[rows, np.arange(self.d)] = 1.0
        return M

    def query_matrix(self, level, keep) -> sp.csr_matrix:
        """The sparse query matrix of the margin ``keep`` measured in every unit of ``level``:
        row ``unit * r + margin cell`` (``r`` margin cells per unit), one 1 per cell."""
        l = self.level_index(level)
        axes = self.axes(keep)
        code = np.asarray(self.attribute_code)
        shape = self.shape
        if axes:
            cell = np.ravel_multi_index(tuple(code[:, a] for a in axes), tuple(shape[a] for a in axes))
            r = int(np.prod([shape[a] for a in axes]))
        else:
            cell, r = np.zeros(self.n, dtype=np.int64), 1
        rows = np.asarray(self.unit_of_cell[l], dtype=np.int64) * r + cell
        return sp.csr_matrix((np.ones(self.n), (rows, np.arange(self.n))), shape=(self.n_units(l) * r, self.n))

    def children(self, level) -> list:
        """For every unit of ``level`` (not the lowest), the array of its children."""
        l = self.level_index(level)
        par = np.asarray(self.parent[l + 1])
        order = np.argsort(par, kind="stable")
        bounds = np.searchsorted(par[order], np.arange(self.n_units(l) + 1))
        return [order[a:b] for a, b in zip(bounds[:-1], bounds[1:])]

    def cell_ids(self, sep: str = "|") -> np.ndarray:
        """A text id for every cell: the lowest-level unit's label and the category labels."""
        leaf = np.asarray(self.unit_labels[-1], dtype=object)[self.leaf_unit]
        parts = [leaf.astype(str)]
        code = np.asarray(self.attribute_code)
        for a, cats in enumerate(self.categories):
            parts.append(np.asarray(cats, dtype=object)[code[:, a]].astype(str))
        out = parts[0]
        for p in parts[1:]:
            out = np.char.add(np.char.add(out.astype(str), sep), p)
        return np.asarray(out, dtype=str)


@dataclass(frozen=True)
class HierarchyQuery:
    """One measured margin: ``keep`` (attribute names; ``()`` the total) in every unit of the
    level ``level`` (an index into :attr:`Hierarchy.levels`), named ``name``."""

    level: int
    name: str
    keep: tuple


class HierarchyMeasurements(NoisyMeasurements):
    r"""Noisy measurements of margins in every unit of a geographic hierarchy (module docstring).

    Parameters
    ----------
    hierarchy
        the :class:`Hierarchy` of the cells.
    queries
        list of :class:`HierarchyQuery` (each becomes one query of the
        :class:`NoisyMeasurements`, named ``"level: name"``).
    sigmas
        one discrete Gaussian scale per query.
    invariant
        published-exactly invariant on the cells (or ``None``); see
        :class:`NoisyMeasurements`.  ``invariant_level`` names the level whose unit totals it
        fixes (``0`` for the grand total) when it is such a partition, else ``None``.
    """

    def __init__(self, hierarchy: Hierarchy, queries, sigmas, invariant=None, *, invariant_level=None):
        if not isinstance(hierarchy, Hierarchy):
            raise TypeError(f"hierarchy must be a Hierarchy, not {type(hierarchy).__name__}")
        queries = list(queries)
        if not queries:
            raise ValueError("measure at least one (level, query)")
        qs = []
        for q in queries:
            if not isinstance(q, HierarchyQuery):
                raise TypeError("queries must be HierarchyQuery values")
            level = hierarchy.level_index(q.level)
            hierarchy.axes(q.keep)
            qs.append(HierarchyQuery(level, str(q.name), tuple(q.keep)))
        mats = [hierarchy.query_matrix(q.level, q.keep) for q in qs]
        names = [f"{hierarchy.levels[q.level]}: {q.name}" for q in qs]
        if len(set(names)) != len(names):
            raise ValueError("two queries share a level and a name")
        super().__init__(mats, sigmas, invariant, names=names)
        self.hierarchy = hierarchy
        self.hierarchy_queries = tuple(qs)
        if invariant_level is not None:
            invariant_level = hierarchy.level_index(invariant_level)
        self.invariant_level = invariant_level

    def level_queries(self, level) -> list:
        """``(k, query)`` for the queries measured at ``level`` (``k`` the query's index)."""
        l = self.hierarchy.level_index(level)
        return [(k, q) for k, q in enumerate(self.hierarchy_queries) if q.level == l]
