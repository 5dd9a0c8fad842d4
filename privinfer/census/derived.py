r"""Quantities users report from a hierarchy's cells: sums of cells per unit and their ratios.

A derived quantity of unit ``v`` is a linear function :math:`a_v^\top x` (the children under 5
of a tract, its people aged 65+) or a ratio :math:`a_v^\top x / b_v^\top x` (the share aged
65+, the sex ratio).  :func:`unit_sums` builds the weights -- a sparse ``n x U`` 0/1 matrix, one
column per unit of a level, selecting the unit's cells whose attributes are in given categories
-- for both:

* the posterior: :func:`posterior_summary` of ``draws @ A`` (sums) or
  ``(draws @ A) / (draws @ B)`` (ratios), draws of ``x`` from any model of the cells, e.g.
  :func:`~privinfer.census.hierarchy_model`: mean and equal-tailed interval per unit;
* the posterior with its convergence: :func:`derived_summary` of the chains (an
  ``InferenceData`` or a ``(chains, draws, n)`` array): mean, interval, split R-hat and bulk and
  tail ESS of every unit's quantity (Vehtari, Gelman, Simpson, Carpenter and Burkner 2021),
  with a warning when some have R-hat above :data:`RHAT_LIMIT` or bulk or tail ESS below
  :data:`ESS_PER_CHAIN` per chain.  A derived quantity can mix far more slowly than any of its
  cells: a tract's share aged 65+ moves with the whole tract's age profile, the slowest
  direction of :func:`~privinfer.census.hierarchy_model`'s posterior (all 1,083 Kentucky tracts,
  2 x 400 draws: the shares' min bulk ESS 14, the cells' 32), so the cells' R-hat does not
  vouch for it;
* where the cells themselves have not converged, unit by unit: :func:`unit_convergence` (the
  smallest units mix slowest);
* hierarchical GLS: ``est.interval(A)`` and ``est.ratio_interval(A, B)`` of
  :class:`~privinfer.inference.HierarchicalGLSEstimate` (Gaussian and delta-method intervals;
  Cumings-Menon 2024).

Nothing dense of size ``n x n`` is formed: the weights have one non-zero per selected cell.
"""

from __future__ import annotations

import warnings

import numpy as np
import scipy.sparse as sp

from ..mechanisms.hierarchy import HierarchyMeasurements

__all__ = ["unit_sums", "posterior_summary", "derived_draws", "derived_summary", "unit_convergence", "RHAT_LIMIT",
           "ESS_PER_CHAIN"]

#: :func:`derived_summary` warns about quantities whose split R-hat is above this (Vehtari et
#: al. 2021's threshold for trusting a chain's summaries).
RHAT_LIMIT = 1.01
#: ... or whose bulk or tail ESS is below this many per chain (Vehtari et al. 2021: 100 per
#: chain, so that R-hat and the ESS themselves are reliable).
ESS_PER_CHAIN = 100


def _hierarchy(source):
    mech = getattr(source, "mechanism", source)
    if isinstance(mech, HierarchyMeasurements):
        return mech.hierarchy
    if hasattr(source, "unit_of_cell") and hasattr(source, "levels"):
        return source
    raise TypeError("give a hierarchy release, its HierarchyMeasurements or its Hierarchy")


def _level(hier, level: str) -> int:
    """The index of the level named ``level``, or a one-line error naming the levels."""
    if level not in hier.levels:
        raise ValueError(f"unknown level {level!r}; the levels are {list(hier.levels)}")
    return list(hier.levels).index(level)


def unit_sums(source, level: str, **categories) -> sp.csc_matrix:
    """``(n, U)`` 0/1 weights: column ``u`` selects the cells of unit ``u`` of ``level`` whose
    attributes lie in the given categories (``age=[...]``, ``sex="female"``; attributes not
    named: all categories).  ``source``: a hierarchy release, its mechanism or its hierarchy.

    Example: the share of every tract aged 65+ is ``(x @ A) / (x @ B)`` with
    ``A = unit_sums(rel, "tract", age=OLD)`` and ``B = unit_sums(rel, "tract")``.
    """
    hier = _hierarchy(source)
    lev = _level(hier, level)
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


def _chains(posterior, var_name: str) -> np.ndarray:
    """The draws of ``var_name`` as a ``(chains, draws, n)`` array from an ``InferenceData``,
    an xarray ``Dataset`` or an array."""
    group = getattr(posterior, "posterior", posterior)
    if hasattr(group, "data_vars"):
        if var_name not in group.data_vars:
            raise ValueError(f"the posterior has no variable {var_name!r}")
        return np.asarray(group[var_name].values)
    return np.asarray(posterior)


def _checked_chains(X):
    """``(chains, draws, cells)`` draws with at least one chain of 4 draws, or a one-line error."""
    if X.ndim != 3:
        raise ValueError(f"the draws must be (chains, draws, cells), got shape {X.shape}; for a flat "
                         "(draws, cells) array use posterior_summary")
    C, S, _ = X.shape
    if C < 1 or S < 4:
        raise ValueError(f"need at least one chain of at least 4 draws, got {C} x {S}")
    return X


def _convergence(values):
    """Rank-normalized split R-hat, bulk and tail ESS of every column of ``values`` ``(chains,
    draws, k)`` (ArviZ; a column constant over all draws: R-hat NaN, without a warning)."""
    import arviz as az

    ds = az.convert_to_dataset({"q": values})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)     # constant quantities: NaN R-hat
        return tuple(np.asarray(v, dtype=float) for v in (az.rhat(ds)["q"].values, az.ess(ds, method="bulk")["q"].values,
                                                          az.ess(ds, method="tail")["q"].values))


def unit_convergence(posterior, source, level: str, *, var_name: str = "x"):
    r"""Where the cells have not converged: for every unit of ``level``, the worst convergence
    of its cells -- max rank-normalized split R-hat, min bulk and tail ESS (Vehtari, Gelman,
    Simpson, Carpenter and Burkner 2021, via ArviZ; cells constant over all draws left out) --
    beside its posterior mean total, that total over the median unit's of the level and whether
    it is the smallest unit of its parent.

    Why: with :func:`~privinfer.census.hierarchy_model` the slowest cells are those of the
    smallest units, which the measurements pin down least.  On all 1,083 Kentucky tracts, 2 x
    400 draws, six runs: the cells of the tracts under half the median size -- each time the
    smallest or second smallest tract of its county -- had a min bulk ESS of 9-39, those of the
    tracts above the median 67-140 (``benchmarks/bench_hierarchy_model.py``).  Check those units
    (and draw more) before reporting them.

    ``posterior``: an ``InferenceData`` (or its posterior) holding the cells as ``var_name``, or
    an array ``(chains, draws, n)``; ``source``: a hierarchy release, its mechanism or its
    hierarchy.  Returns a pandas ``DataFrame`` indexed by the level's unit labels, with columns
    ``total``, ``relative_size``, ``smallest_of_parent``, ``r_hat_max``, ``ess_bulk_min`` and
    ``ess_tail_min`` (NaN for a unit whose cells are all constant).  ArviZ's diagnostics of
    every cell are the cost: one to two minutes for 49,818 cells of 2 x 400 draws.
    """
    import pandas as pd

    hier = _hierarchy(source)
    lev = _level(hier, level)
    X = _checked_chains(_chains(posterior, var_name))
    if X.shape[2] != hier.n:
        raise ValueError(f"the draws hold {X.shape[2]} cells, the hierarchy {hier.n}")
    r_hat, bulk, tail = _convergence(X)
    unit = np.asarray(hier.unit_of_cell[lev], dtype=np.int64)
    U = hier.n_units(lev)
    total = np.bincount(unit, weights=X.mean(axis=(0, 1)), minlength=U)
    worst = {}
    for name, v, pick in (("r_hat_max", r_hat, np.fmax), ("ess_bulk_min", bulk, np.fmin), ("ess_tail_min", tail, np.fmin)):
        out = np.full(U, np.nan)
        pick.at(out, unit, np.where(np.isfinite(r_hat), v, np.nan))
        worst[name] = out
    parent = np.asarray(hier.parent[lev], dtype=np.int64) if lev > 0 else np.zeros(1, dtype=np.int64)
    smallest = np.full(parent.max(initial=0) + 1, np.inf)
    np.minimum.at(smallest, parent, total)
    return pd.DataFrame({"total": total, "relative_size": total / np.median(total),
                         "smallest_of_parent": total == smallest[parent], **worst},
                        index=pd.Index([str(u) for u in hier.unit_labels[lev]], name=level))


def derived_summary(posterior, num, den=None, *, level: float = 0.9, var_name: str = "x", index=None,
                    warn: bool = True):
    r"""Posterior summary and convergence of derived quantities: for every column ``j`` of the
    weights, the sum :math:`q_j = a_j^\top x` (``den`` None) or the ratio :math:`q_j = a_j^\top x
    / b_j^\top x` of the cells' draws (module docstring; weights from :func:`unit_sums`).

    ``posterior``: an ``InferenceData`` (or its posterior ``Dataset``) holding the cells as
    ``var_name``, or an array ``(chains, draws, n)`` -- the chains must be kept apart, since
    R-hat compares them (for a flat ``(draws, n)`` array use :func:`posterior_summary`).

    Returns a pandas ``DataFrame``, one row per quantity (``index``: its labels, e.g. the
    level's unit labels; default ``0..k-1``), with columns ``mean``, ``lower``, ``upper`` (the
    equal-tailed ``level`` interval, as :func:`posterior_summary`), ``r_hat`` (rank-normalized
    split R-hat), ``ess_bulk`` and ``ess_tail`` (Vehtari, Gelman, Simpson, Carpenter and Burkner
    2021, "Rank-normalization, folding, and localization: an improved R-hat for assessing
    convergence of MCMC", via ArviZ).  With ``warn`` a ``RuntimeWarning`` counts the quantities
    with R-hat above :data:`RHAT_LIMIT` or bulk or tail ESS below :data:`ESS_PER_CHAIN` per chain:
    their intervals are not yet to be trusted (draw more).  A quantity constant over all draws
    has ``r_hat`` NaN and is not counted.
    """
    import pandas as pd

    X = _checked_chains(_chains(posterior, var_name))
    C, S, n = X.shape
    for name, w in (("num", num), ("den", den)):
        if w is not None and np.shape(w)[0] != n:
            raise ValueError(f"{name} has {np.shape(w)[0]} rows, the draws {n} cells")
    if den is not None and np.shape(den)[1] != np.shape(num)[1]:
        raise ValueError(f"num and den have {np.shape(num)[1]} and {np.shape(den)[1]} columns")
    values = np.stack([derived_draws(X[c], num, den) for c in range(C)])
    k = values.shape[2]
    if index is not None and len(index) != k:
        raise ValueError(f"index has {len(index)} labels for {k} quantities")
    mean, lo, hi = posterior_summary(values.reshape(C * S, k), level)
    r_hat, bulk, tail = _convergence(values)
    out = pd.DataFrame({"mean": mean, "lower": lo, "upper": hi, "r_hat": r_hat, "ess_bulk": bulk,
                        "ess_tail": tail}, index=pd.RangeIndex(k) if index is None else pd.Index(index))
    if warn:
        varies = np.isfinite(r_hat)
        bad = varies & ((r_hat > RHAT_LIMIT) | (bulk < ESS_PER_CHAIN * C) | (tail < ESS_PER_CHAIN * C))
        if bad.any():
            warnings.warn(f"{int(bad.sum())} of {k} derived quantities have R-hat above {RHAT_LIMIT} or bulk or "
                          f"tail ESS below {ESS_PER_CHAIN * C} ({ESS_PER_CHAIN} per chain; max R-hat "
                          f"{np.nanmax(r_hat):.3f}, min bulk ESS {np.nanmin(bulk):.0f}): their intervals are not yet "
                          "reliable, draw more", RuntimeWarning, stacklevel=2)
    return out
