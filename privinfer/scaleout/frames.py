r"""Release the counts of a pandas or Dask DataFrame group by group, keeping every group's total.

:func:`release_frame` is the partitioned release: the frame's groups are independent pieces
of the invariant (``invariants.groups``: the lattice of noises is the product of one lattice
per group), so each group is drawn on its own, from its own stream (:mod:`.seeding`), by the
exact sampler of the registry mechanism on that group's total (:mod:`.groups`).  Its
guarantee is the per-group mechanism's (:mod:`.guarantee`).

Two passes over a Dask frame, neither of which moves rows between partitions:

1. *survey* -- every partition checks its counts and groups (one-line errors naming the
   column and the data row in the input's order, as ``privinfer release`` words them) and
   counts its rows and sums its counts per group; the driver gathers these small tables and
   computes each group's size :math:`k_g`, its published total, and for each partition the
   offset of its first row of each group within the group (partitions in order).
2. *release* -- every partition draws, for each group it touches, the group's whole noise
   vector (same stream, same vector in every partition) and adds the slice of its own rows.

So groups may span partitions without a shuffle, the output keeps the input's partitions,
index, divisions and row order, and a worker holds its partition plus the noise vectors of
its groups: memory is bounded by the partition size (and the largest group), not the data
size.  A group spanning p partitions is drawn p times; for data sorted or clustered by group
(census files are ordered by geography) that is a few groups per partition boundary.  For
scattered groups the redrawn cells are reported in ``FrameRelease.redrawn_cells``; sort the
data by group first if that is large.

The release is identical for any number of partitions and workers with the same seed: the
noise of group g is a function of (seed, key of g, :math:`k_g`) laid on g's rows in input order.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .checks import check_columns, counts_of, first_problem, raise_problem
from .groups import GroupMechanism, is_exact, release_block, sampler_method
from .guarantee import frame_guarantee
from .seeding import root_seed

__all__ = ["FrameRelease", "release_frame", "is_dask_frame"]


@dataclass(frozen=True)
class FrameRelease:
    """What :func:`release_frame` returns (the guarantee is returned here, not attached to the
    frame: a Dask DataFrame carries no metadata).

    frame : the released frame, the same kind as the input (lazy for Dask).
    value, group : the count and group columns.
    mechanism, options : the command-line mechanism name and its options.
    guarantee : the per-group mechanism's guarantee (parallel composition over the groups).
    totals : published group totals (a Series indexed by group key, first-appearance order),
        or ``None`` for mechanisms that keep no total (double geometric, discrete Gaussian).
    sizes : cells per group (same index).
    sampler : how the groups' noise was drawn (methods, exact or not).
    redrawn_cells : cells drawn again because their group spans partitions (0 for pandas).
    """

    frame: object
    value: str
    group: str
    mechanism: str
    options: dict
    guarantee: object
    totals: pd.Series | None
    sizes: pd.Series
    sampler: dict = field(default_factory=dict)
    redrawn_cells: int = 0


def is_dask_frame(frame) -> bool:
    """Whether ``frame`` is a Dask DataFrame (checked without importing Dask)."""
    return type(frame).__module__.split(".")[0] == "dask" and hasattr(frame, "to_delayed")


def _survey(block: pd.DataFrame, value: str, group: str) -> dict:
    """One partition's part of pass 1: its length, first bad row, and per-group counts and sums."""
    problem = first_problem(block, value, group)
    if problem is not None:
        return {"n": len(block), "problem": problem}
    x = counts_of(block, value)
    codes, uniques = pd.factorize(block[group], sort=False)
    sums = np.zeros(len(uniques), dtype=np.int64)
    np.add.at(sums, codes, x)
    return {"n": len(block), "problem": None,
            "table": pd.DataFrame({"key": uniques, "count": np.bincount(codes, minlength=len(uniques)), "sum": sums})}


def _plan(surveys: list[dict]):
    """Raise the first problem (global row); else sizes, totals and per-partition plans."""
    offset = 0
    for s in surveys:
        if s["problem"] is not None:
            raise_problem(s["problem"], offset)
        offset += s["n"]
    tables = [s["table"].assign(part=i) for i, s in enumerate(surveys)]
    table = pd.concat(tables, ignore_index=True)
    if table.empty:
        raise ValueError("the frame has no rows to release")
    by_key = table.groupby("key", sort=False)
    table["offset"] = by_key["count"].cumsum() - table["count"]
    sizes = by_key["count"].sum()
    totals = by_key["sum"].sum()
    table["size"] = table["key"].map(sizes).to_numpy(dtype=np.int64)
    plans = [{} for _ in surveys]
    for part, key, k, off in zip(table["part"].to_numpy(), table["key"], table["size"].to_numpy(),
                                 table["offset"].to_numpy()):
        plans[part][key] = (int(k), int(off))
    redrawn = int(table["size"].sum() - sizes.sum())
    return sizes, totals, plans, redrawn


def _result(gm, sizes, totals, frame, value, group, redrawn) -> tuple:
    mechanisms = gm.for_sizes(sizes.to_numpy())
    g = frame_guarantee(gm, mechanisms, len(sizes))
    drawn = [m for m in mechanisms.values() if m is not None]
    sampler = {"exact": all(is_exact(m) for m in drawn),
               "methods": sorted({sampler_method(m) for m in drawn}),
               "seeding": "one numpy SeedSequence per group from the seed and a hash of the group's key"}
    return mechanisms, g, sampler


def release_frame(frame, *, value: str, group: str, mechanism: str, seed=None, **mechanism_options) -> FrameRelease:
    r"""Release the counts ``frame[value]`` group by group (groups: ``frame[group]``).

    Parameters
    ----------
    frame : a pandas or Dask DataFrame; groups may span partitions.
    value : the column of non-negative integer counts.
    group : the column of group keys (integers or strings); each group's total is kept
        exactly by ``generalized-laplace`` and ``generalized-gaussian`` (noise on
        :math:`\{e_g : \sum e_g = 0\}`, Dharangutte et al. 2023, Sec. 3); the groups of
        ``double-geometric`` and ``discrete-gaussian`` (iid noise, no total kept) are the
        units of seeding only.
    mechanism : ``"generalized-laplace"``, ``"generalized-gaussian"``, ``"double-geometric"``
        or ``"discrete-gaussian"``, with its command-line options (``epsilon=``, ``sigma=``,
        ``sensitivity=``, ``norm=``) as ``mechanism_options``.
    seed : an integer or ``SeedSequence``: group g's noise comes from
        ``SeedSequence(seed, spawn_key=hash(key_g))``, so the same seed gives the same release
        for any partitioning and any number of workers; ``None`` draws fresh OS entropy.

    Returns
    -------
    :class:`FrameRelease`: ``frame`` is the same kind as the input with ``value`` replaced by
    the released int64 counts and every other column, the index and the row order kept (for
    Dask also the partitions and divisions); ``guarantee`` is the per-group mechanism's (a
    typed guarantee of :mod:`privinfer.guarantees`, ``delta = 0`` only when every group was
    drawn exactly).  A Dask input is surveyed (one computation, on the current Dask scheduler
    or ``distributed`` client) and the release itself stays lazy.
    """
    gm = GroupMechanism(mechanism, mechanism_options)
    root = root_seed(seed)
    if not (isinstance(frame, pd.DataFrame) or is_dask_frame(frame)):
        raise TypeError(f"frame must be a pandas or Dask DataFrame, not {type(frame).__name__}")
    check_columns(frame.columns, value, group)
    if isinstance(frame, pd.DataFrame):
        sizes, totals, plans, redrawn = _plan([_survey(frame, value, group)])
        mechanisms, g, sampler = _result(gm, sizes, totals, frame, value, group, redrawn)
        out = release_block(frame, plans[0], mechanisms, root, value, group)
    else:
        out, sizes, totals, redrawn, g, sampler = _release_dask(frame, gm, root, value, group)
    return FrameRelease(out, value, group, gm.name, dict(gm.options), g,
                        totals if gm.keeps_totals else None, sizes, sampler, redrawn)


def _release_dask(frame, gm, root, value, group):
    import dask
    import dask.dataframe as dd
    from dask.dataframe.utils import make_meta

    columns = frame[[value, group]].to_delayed()
    surveys = dask.compute(*[dask.delayed(_survey, pure=True)(p, value, group) for p in columns])
    sizes, totals, plans, redrawn = _plan(list(surveys))
    mechanisms, g, sampler = _result(gm, sizes, totals, frame, value, group, redrawn)
    n = int(sizes.sum())
    if redrawn > n:
        warnings.warn(f"groups are scattered over the partitions: the noise of {n + redrawn} cells is drawn for "
                      f"{n} cells ({redrawn} drawn again by other partitions of their group); sorting the data by "
                      "group avoids that work", UserWarning, stacklevel=3)
    parts = frame.to_delayed()
    blocks = []
    for part, plan in zip(parts, plans):
        mine = {k: mechanisms[k] for k in {kk for kk, _ in plan.values()}}
        blocks.append(dask.delayed(release_block, pure=False)(part, plan, mine, root, value, group))
    meta = make_meta(frame).copy()
    meta[value] = meta[value].astype(np.int64)
    out = dd.from_delayed(blocks, meta=meta, divisions=frame.divisions, verify_meta=False)
    return out, sizes, totals, redrawn, g, sampler
